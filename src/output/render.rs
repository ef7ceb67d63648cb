//! Renders a collected page ([`crate::model::Page`]) as metric families for the `prometheus`
//! crate's text encoder (which escapes label values and help text).

use crate::model::Page;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::Encoder;

/// The page's families as the `prometheus` crate's protobuf objects. None is empty.
pub fn families(page: &Page) -> Vec<MetricFamily> {
    page.families()
        .map(|fam| {
            let mut proto = MetricFamily::default();
            proto.set_name(fam.name().to_string());
            proto.set_help(fam.help().to_string());
            let counter = fam.is_counter();
            proto.set_field_type(if counter {
                MetricType::COUNTER
            } else {
                MetricType::GAUGE
            });
            for s in fam.series() {
                let mut m = Metric::default();
                for (k, v) in s.labels() {
                    let mut lp = LabelPair::default();
                    lp.set_name(k.to_string());
                    lp.set_value(v.to_string());
                    m.label.push(lp);
                }
                if counter {
                    let mut c = Counter::default();
                    c.set_value(s.value());
                    m.set_counter(c);
                } else {
                    let mut g = Gauge::default();
                    g.set_value(s.value());
                    m.set_gauge(g);
                }
                proto.mut_metric().push(m);
            }
            proto
        })
        .collect()
}

/// Prometheus text format (0.0.4) of a page.
pub fn encode(page: &Page) -> Vec<u8> {
    encode_families(&families(page))
}

/// Prometheus text format (0.0.4) of families from [`families`].
pub fn encode_families(fams: &[MetricFamily]) -> Vec<u8> {
    // `families` leaves out empty families, which the encoder refuses.
    let mut out = Vec::with_capacity(fams.len() * 2048);
    if let Err(e) = prometheus::TextEncoder::new().encode(fams, &mut out) {
        tracing::error!("encoding metrics failed: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::counters::PromType;
    use crate::model::DropReason;

    fn text(p: Page) -> String {
        String::from_utf8(encode(&p)).unwrap()
    }

    #[test]
    fn an_appended_piece_keeps_its_series_labels_and_counts() {
        let mut page = Page::default();
        page.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
        let mut part = Page::default();
        part.add(
            "B",
            "b",
            PromType::Counter,
            &[("gpu", "0"), ("xid", "79")],
            2.0,
        );
        part.add("A", "a", PromType::Gauge, &[("gpu", "0")], 3.0);
        part.piece_failed("DCGM_EXP_P2P_STATUS", "BadParam");
        page.append(part);
        assert_eq!(
            page.series_count(),
            2,
            "the repeated A series is a duplicate"
        );
        assert_eq!(page.dropped[&DropReason::Duplicate], 1);
        assert_eq!(
            page.failures[&("DCGM_EXP_P2P_STATUS".into(), "BadParam".into())],
            1
        );
        let t = text(page);
        assert!(t.contains("B{gpu=\"0\",xid=\"79\"} 2"), "{t}");
        assert!(t.contains("# TYPE B counter"), "{t}");
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut p = Page::default();
        p.add(
            "X",
            "a \\ help\nline",
            PromType::Gauge,
            &[("modelName", "a \"quoted\" \\ name\n")],
            1.5,
        );
        let t = text(p);
        assert!(t.contains("# HELP X a \\\\ help\\nline"), "{t}");
        assert!(
            t.contains(r#"X{modelName="a \"quoted\" \\ name\n"} 1.5"#),
            "{t}"
        );
        assert!(t.contains("# TYPE X gauge"));
    }

    #[test]
    fn duplicates_and_conflicts_are_dropped_not_fatal() {
        let mut p = Page::default();
        p.add("X", "h", PromType::Gauge, &[("gpu", "0")], 1.0);
        p.add("X", "h", PromType::Gauge, &[("gpu", "0")], 2.0);
        p.add("X", "other", PromType::Counter, &[("gpu", "1")], 3.0);
        p.add("X", "h", PromType::Gauge, &[("gpu", "1")], 4.0);
        assert_eq!(p.series_count(), 2);
        assert_eq!(p.dropped[&DropReason::Duplicate], 1);
        assert_eq!(p.dropped[&DropReason::Conflict], 1);
        assert!(text(p).contains("X{gpu=\"1\"} 4"));
    }

    #[test]
    fn label_order_is_kept_and_histograms_become_gauges() {
        let mut p = Page::default();
        p.add(
            "Y",
            "h",
            PromType::Histogram,
            &[("gpu", "0"), ("UUID", "u"), ("Hostname", "h")],
            7.0,
        );
        let t = text(p);
        assert!(t.contains(r#"Y{gpu="0",UUID="u",Hostname="h"} 7"#), "{t}");
        assert!(t.contains("# TYPE Y gauge"), "{t}");
    }

    #[test]
    fn large_integers_round_trip_through_the_text() {
        let mut p = Page::default();
        p.add("E", "h", PromType::Counter, &[], 123456789012.0);
        let t = text(p);
        let v: f64 = t
            .lines()
            .last()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(v, 123456789012.0);
    }
}
