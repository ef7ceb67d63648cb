//! Sub-interval aggregation (`collect::aggregate`) in OTLP: where `/metrics` has the four
//! families `<row>_interval_min`, `_interval_max`, `_interval_mean` and `_interval_samples`,
//! a push has one metric `<row>_interval`, a Histogram with DELTA temporality and no
//! buckets: one point per series of the row, with its labels as attributes, `count` the
//! samples, `sum` their sum (mean x count), `min` and `max`, over the window from the
//! previous push that carried the series (the previous push, or the exporter's start, for
//! a series not carried lately) to this collection: a read that failed once leaves its
//! samples to the next window, which then spans both intervals. That is the OTLP
//! data model's own form for "these measurements were taken over this interval" (a
//! histogram point's `min`/`max` are those of its window when the temporality is delta);
//! a backend gets count, sum, min and max of one stream, not four gauges to join.

use crate::model::{Page, Stat};
use crate::output::otlp::proto::common::{any_value, AnyValue, KeyValue};
use crate::output::otlp::proto::metrics::{
    metric, AggregationTemporality, Histogram, HistogramDataPoint, Metric,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

/// A series left out of this many pushes in a row is forgotten: its next window starts at
/// the previous push. A window makes up for as many missed collections as
/// `collect::aggregate::MADE_UP_FOR` and no more; after more it holds its own interval.
const REMEMBERED_PUSHES: usize = crate::collect::aggregate::MADE_UP_FOR as usize + 1;

/// Where each series' next window starts.
pub(super) struct Deltas {
    previous_ns: u64,
    /// The times of the last pushes, newest last (at most [`REMEMBERED_PUSHES`]).
    pushes: VecDeque<u64>,
    /// Per series (metric name and labels, hashed): the last push that carried it.
    carried: HashMap<u64, u64>,
}

/// One point's four numbers as they are gathered from the four families.
#[derive(Default)]
struct Gathered {
    min: Option<f64>,
    max: Option<f64>,
    mean: Option<f64>,
    count: Option<f64>,
}

/// One metric being built: its description and its points by label set.
type Points = BTreeMap<Vec<(String, String)>, Gathered>;

impl Deltas {
    pub(super) fn new(exporter_start_ns: u64) -> Deltas {
        Deltas {
            previous_ns: exporter_start_ns,
            pushes: VecDeque::new(),
            carried: HashMap::new(),
        }
    }

    /// Adds one histogram per aggregated row of `page` to `metrics`, in the page's order.
    pub(super) fn add(&mut self, page: &Page, now_ns: u64, metrics: &mut Vec<Metric>) {
        let mut order: Vec<String> = Vec::new();
        let mut rows: BTreeMap<String, (String, Points)> = BTreeMap::new();
        for fam in page.families() {
            let Some(stat) = fam.stat() else {
                continue;
            };
            let Some(base) = fam.name().strip_suffix(stat.suffix()) else {
                continue;
            };
            let name = format!("{base}_interval");
            let entry = rows.entry(name.clone()).or_insert_with(|| {
                order.push(name);
                (description(fam.help()), Points::new())
            });
            for s in fam.series() {
                let key: Vec<(String, String)> = s
                    .labels()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let g = entry.1.entry(key).or_default();
                let slot = match stat {
                    Stat::Min => &mut g.min,
                    Stat::Max => &mut g.max,
                    Stat::Mean => &mut g.mean,
                    Stat::Samples => &mut g.count,
                };
                *slot = Some(s.value());
            }
        }
        for name in order {
            if let Some((description, points)) = rows.remove(&name) {
                let data_points = points
                    .into_iter()
                    .filter_map(|(labels, g)| {
                        let key = series_key(&name, &labels);
                        let p = self.point(labels, &g, self.start_of(key), now_ns)?;
                        self.carried.insert(key, now_ns);
                        Some(p)
                    })
                    .collect();
                metrics.push(Metric {
                    name,
                    description,
                    data: Some(metric::Data::Histogram(Histogram {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Delta as i32,
                    })),
                    ..Default::default()
                });
            }
        }
        self.previous_ns = now_ns;
        if self.pushes.len() == REMEMBERED_PUSHES {
            self.pushes.pop_front();
        }
        self.pushes.push_back(now_ns);
        let oldest = self.pushes.front().copied().unwrap_or(now_ns);
        self.carried.retain(|_, at| *at >= oldest);
    }

    /// Where a series' window starts: the last push that carried it, if it is remembered;
    /// the previous push otherwise.
    fn start_of(&self, key: u64) -> u64 {
        self.carried.get(&key).copied().unwrap_or(self.previous_ns)
    }

    /// A series' point, when all four of its numbers are on the page.
    fn point(
        &self,
        labels: Vec<(String, String)>,
        g: &Gathered,
        start_ns: u64,
        now_ns: u64,
    ) -> Option<HistogramDataPoint> {
        let (min, max, mean, count) = (g.min?, g.max?, g.mean?, g.count?);
        Some(HistogramDataPoint {
            attributes: labels
                .into_iter()
                .map(|(k, v)| KeyValue {
                    key: k,
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(v)),
                    }),
                    ..Default::default()
                })
                .collect(),
            start_time_unix_nano: start_ns.min(now_ns),
            time_unix_nano: now_ns,
            count: count as u64,
            sum: Some(mean * count),
            min: Some(min),
            max: Some(max),
            ..Default::default()
        })
    }
}

fn series_key(name: &str, labels: &[(String, String)]) -> u64 {
    let mut h = DefaultHasher::new();
    (name, labels).hash(&mut h);
    h.finish()
}

/// The row's help without the family's own words about which statistic it holds.
fn description(help: &str) -> String {
    let row = help
        .split_once(" (sub-interval aggregation:")
        .map_or(help, |(h, _)| h);
    format!("{row} (sub-interval aggregation: the samples since the previous collection)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::naming::PromType;

    #[test]
    fn four_families_become_one_delta_histogram_per_row() {
        let mut page = Page::default();
        let help = "Power draw (in W). (sub-interval aggregation: x)";
        page.add(
            "DCGM_FI_DEV_POWER_USAGE",
            "Power draw (in W).",
            PromType::Gauge,
            &[("gpu", "0")],
            100.0,
        );
        for (stat, values) in [
            (Stat::Min, [90.0, 80.0]),
            (Stat::Max, [500.0, 120.0]),
            (Stat::Mean, [150.0, 100.0]),
            (Stat::Samples, [10.0, 4.0]),
        ] {
            let name = format!("DCGM_FI_DEV_POWER_USAGE{}", stat.suffix());
            page.add(&name, help, PromType::Gauge, &[("gpu", "0")], values[0]);
            page.add(&name, help, PromType::Gauge, &[("gpu", "1")], values[1]);
            page.set_stat(&name, stat);
        }
        let mut d = Deltas::new(1_000);
        let mut metrics = Vec::new();
        d.add(&page, 5_000, &mut metrics);
        assert_eq!(metrics.len(), 1);
        let m = &metrics[0];
        assert_eq!(m.name, "DCGM_FI_DEV_POWER_USAGE_interval");
        assert_eq!(
            m.description,
            "Power draw (in W). (sub-interval aggregation: the samples since the previous collection)"
        );
        let Some(metric::Data::Histogram(h)) = &m.data else {
            panic!("not a histogram: {m:?}");
        };
        assert_eq!(
            h.aggregation_temporality,
            AggregationTemporality::Delta as i32
        );
        let p = &h.data_points[0];
        assert_eq!(
            (p.count, p.sum, p.min, p.max),
            (10, Some(1500.0), Some(90.0), Some(500.0))
        );
        assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (1_000, 5_000));
        assert!(p.bucket_counts.is_empty() && p.explicit_bounds.is_empty());
        assert_eq!(h.data_points[1].count, 4);
        // The next window starts at this push.
        let mut again = Vec::new();
        d.add(&page, 9_000, &mut again);
        let Some(metric::Data::Histogram(h)) = &again[0].data else {
            panic!()
        };
        assert_eq!(h.data_points[0].start_time_unix_nano, 5_000);
    }

    /// A page holding `gpus`' windows of the power row (and always its gauge).
    fn power_windows(gpus: &[&str]) -> Page {
        let mut page = Page::default();
        page.add(
            "DCGM_FI_DEV_POWER_USAGE",
            "Power.",
            PromType::Gauge,
            &[("gpu", "0")],
            1.0,
        );
        for stat in Stat::ALL {
            let name = format!("DCGM_FI_DEV_POWER_USAGE{}", stat.suffix());
            for g in gpus {
                page.add(
                    &name,
                    "Power. (sub-interval aggregation: x)",
                    PromType::Gauge,
                    &[("gpu", g)],
                    2.0,
                );
            }
            page.set_stat(&name, stat);
        }
        page
    }

    /// Each point's (gpu, start) in one push.
    fn starts(d: &mut Deltas, page: &Page, now_ns: u64) -> Vec<(String, u64)> {
        let mut metrics = Vec::new();
        d.add(page, now_ns, &mut metrics);
        let Some(metric::Data::Histogram(h)) = metrics.first().and_then(|m| m.data.clone()) else {
            return Vec::new();
        };
        h.data_points
            .iter()
            .map(|p| {
                let gpu = match &p.attributes[0].value.as_ref().unwrap().value {
                    Some(any_value::Value::StringValue(v)) => v.clone(),
                    other => panic!("{other:?}"),
                };
                (gpu, p.start_time_unix_nano)
            })
            .collect()
    }

    /// A series missing from a push (its read failed: its samples wait for the next read)
    /// has its next window start at the last push that carried it, so the window's time
    /// spans the samples it counts; one missing longer starts at the previous push.
    #[test]
    fn a_window_after_a_failed_read_starts_at_the_last_push_that_carried_it() {
        let mut d = Deltas::new(1_000);
        let both = power_windows(&["0", "1"]);
        assert_eq!(
            starts(&mut d, &both, 2_000),
            [("0".into(), 1_000), ("1".into(), 1_000)]
        );
        // GPU 1's read fails at 3000.
        assert_eq!(
            starts(&mut d, &power_windows(&["0"]), 3_000),
            [("0".into(), 2_000)]
        );
        assert_eq!(
            starts(&mut d, &both, 4_000),
            [("0".into(), 3_000), ("1".into(), 2_000)]
        );
        // GPU 1 away for as many pushes as are remembered: afresh at the previous push.
        let mut t = 4_000;
        for _ in 0..REMEMBERED_PUSHES {
            t += 1_000;
            starts(&mut d, &power_windows(&["0"]), t);
        }
        assert_eq!(
            starts(&mut d, &both, t + 1_000),
            [("0".into(), t), ("1".into(), t)]
        );
        // One pushed again after fewer: its last push.
        let last = t + 1_000;
        for _ in 0..REMEMBERED_PUSHES - 1 {
            t += 1_000;
            starts(&mut d, &power_windows(&["0"]), t + 1_000);
        }
        assert_eq!(
            starts(&mut d, &both, t + 2_000),
            [("0".into(), t + 1_000), ("1".into(), last)]
        );
    }
}
