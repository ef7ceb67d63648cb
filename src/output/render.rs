//! Builds one exposition page per collection and encodes it with the `prometheus` crate's
//! text encoder (which escapes label values and help text). A series that would break the
//! page (a duplicate, a type clash) is dropped and counted instead.

use crate::config::counters::PromType;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::Encoder;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

/// Why a value did not reach the page (the `reason` label of the drop counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// A DCGM blank / not-found / not-supported / not-permissioned sentinel.
    Sentinel,
    /// DCGM returned the value with an error status (no data, not watched, GPU lost...).
    Status,
    /// A string or blob value in a gauge/counter row.
    NonNumeric,
    /// The same metric name and labels twice.
    Duplicate,
    /// The same metric name with another type or help text.
    Conflict,
    /// A sample too old to serve (the engine stopped sampling the field).
    Stale,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Sentinel => "sentinel",
            DropReason::Status => "status",
            DropReason::NonNumeric => "non_numeric",
            DropReason::Duplicate => "duplicate",
            DropReason::Conflict => "conflict",
            DropReason::Stale => "stale",
        }
    }
}

struct Family {
    proto: MetricFamily,
    help: String,
    ty: PromType,
    seen: HashSet<u64>,
}

#[derive(Default)]
pub struct Page {
    families: Vec<Family>,
    index: HashMap<String, usize>,
    pub dropped: BTreeMap<DropReason, u64>,
    /// DCGM timestamp (µs) of the oldest value on the page; it must not be served once
    /// that is too old (`collect::freshness`).
    pub oldest_sample_us: Option<i64>,
    /// Pieces of the collection that failed: (source, reason) -> count.
    pub failures: BTreeMap<(String, String), u64>,
}

fn metric_type(t: PromType) -> MetricType {
    match t {
        PromType::Counter => MetricType::COUNTER,
        // A DCGM field is one number: it cannot be a real histogram or summary, and
        // declaring it one makes the page invalid. Such rows are exported as gauges.
        PromType::Gauge | PromType::Histogram | PromType::Summary | PromType::Label => {
            MetricType::GAUGE
        }
    }
}

impl Page {
    pub fn drop_value(&mut self, reason: DropReason) {
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// A piece of the collection (a derived metric, a watch set, a field) failed; the rest
    /// of the page is still served.
    pub fn piece_failed(&mut self, source: &str, reason: &str) {
        *self
            .failures
            .entry((source.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    /// Adds one sample. Label order is kept as given.
    pub fn add(
        &mut self,
        name: &str,
        help: &str,
        ty: PromType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let idx = match self.index.get(name) {
            Some(&i) => i,
            None => {
                let mut proto = MetricFamily::default();
                proto.set_name(name.to_string());
                proto.set_help(help.to_string());
                proto.set_field_type(metric_type(ty));
                self.families.push(Family {
                    proto,
                    help: help.to_string(),
                    ty,
                    seen: HashSet::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let fam = &mut self.families[idx];
        if fam.ty != ty || fam.help != help {
            self.drop_value(DropReason::Conflict);
            return;
        }
        if !fam.seen.insert(label_set_key(labels.iter().copied())) {
            self.drop_value(DropReason::Duplicate);
            return;
        }
        let mut m = Metric::default();
        for (k, v) in labels {
            let mut lp = LabelPair::default();
            lp.set_name(k.to_string());
            lp.set_value(v.to_string());
            m.label.push(lp);
        }
        if metric_type(ty) == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
        fam.proto.mut_metric().push(m);
    }

    /// Adds every series of another page (a piece collected on its own), with the same
    /// duplicate and conflict checks.
    pub fn append(&mut self, other: Page) {
        for (r, n) in other.dropped {
            *self.dropped.entry(r).or_default() += n;
        }
        for (k, n) in other.failures {
            *self.failures.entry(k).or_default() += n;
        }
        for fam in other.families {
            for m in fam.proto.get_metric() {
                let labels: Vec<(&str, &str)> = m
                    .get_label()
                    .iter()
                    .map(|l| (l.name(), l.value()))
                    .collect();
                let value = if m.counter.is_some() {
                    m.get_counter().value()
                } else {
                    m.get_gauge().value()
                };
                self.add(fam.proto.name(), &fam.help, fam.ty, &labels, value);
            }
        }
    }

    /// Lets a later stage (pod attribution) replace each series by what it becomes: itself
    /// with more labels, copies of it, or itself plus extra series. `f` gets the metric's
    /// name and the series; series that come out identical are dropped as duplicates.
    pub fn rewrite(&mut self, mut f: impl FnMut(&str, Metric) -> Vec<Metric>) {
        let mut dups = 0;
        for fam in &mut self.families {
            let name = fam.proto.name().to_string();
            let old = fam.proto.take_metric();
            fam.seen.clear();
            for m in old {
                for out in f(&name, m) {
                    let key = label_set_key(out.get_label().iter().map(|l| (l.name(), l.value())));
                    if fam.seen.insert(key) {
                        fam.proto.mut_metric().push(out);
                    } else {
                        dups += 1;
                    }
                }
            }
        }
        if dups > 0 {
            *self.dropped.entry(DropReason::Duplicate).or_default() += dups;
        }
    }

    pub fn series_count(&self) -> usize {
        self.families
            .iter()
            .map(|f| f.proto.get_metric().len())
            .sum()
    }

    /// Prometheus text format (0.0.4). Consumes the page: it is rendered once per collection.
    pub fn encode(self) -> Vec<u8> {
        encode_families(&self.into_families())
    }

    /// The metric families, in the order their first series was added, for the encoders
    /// (`output::exposition` renders every format once). None is empty.
    pub fn into_families(self) -> Vec<MetricFamily> {
        // The encoder refuses empty families, and a rewrite (attribution) may leave one.
        self.families
            .into_iter()
            .map(|f| f.proto)
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}

/// Prometheus text format (0.0.4) of families from [`Page::into_families`].
pub fn encode_families(fams: &[MetricFamily]) -> Vec<u8> {
    // `into_families` leaves out empty families, which the encoder refuses.
    let mut out = Vec::with_capacity(fams.len() * 2048);
    if let Err(e) = prometheus::TextEncoder::new().encode(fams, &mut out) {
        tracing::error!("encoding metrics failed: {e}");
    }
    out
}

/// Identifies a series by its label set, whatever the label order.
fn label_set_key<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut sorted: Vec<(&str, &str)> = labels.collect();
    sorted.sort();
    let mut h = DefaultHasher::new();
    sorted.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: Page) -> String {
        String::from_utf8(p.encode()).unwrap()
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
