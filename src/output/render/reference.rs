//! The `prometheus` crate's text encoder over its protobuf objects, and `openmetrics::encode`
//! over the same objects: how a page was rendered before the one-pass renderers, kept as the
//! yardstick they are compared with. Only `super::Page` and `super::openmetrics` are used, so
//! that the integration tests can include this file as it is.

use super::{openmetrics, Page};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::Encoder;

/// The page's families as protobuf objects (what `Page` held before). None is empty.
pub(crate) fn families(page: &Page) -> Vec<MetricFamily> {
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

/// The text page as the `prometheus` crate's encoder writes it.
pub(crate) fn text(page: &Page) -> Vec<u8> {
    let mut out = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&families(page), &mut out)
        .expect("no empty family");
    out
}

/// The OpenMetrics page as `openmetrics::encode` writes it from the families.
pub(crate) fn openmetrics(page: &Page) -> Vec<u8> {
    let mut out = Vec::new();
    openmetrics::encode(&families(page), &mut out);
    out
}
