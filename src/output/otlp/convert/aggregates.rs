//! Sub-interval aggregation (`collect::aggregate`) in OTLP: where `/metrics` has the four
//! families `<row>_interval_min`, `_interval_max`, `_interval_mean` and `_interval_samples`,
//! a push has one metric `<row>_interval`, a Histogram with DELTA temporality and no
//! buckets: one point per series of the row, with its labels as attributes, `count` the
//! samples, `sum` their sum (mean x count), `min` and `max`, over the window from the
//! previous push (the exporter's start for the first) to this collection. That is the OTLP
//! data model's own form for "these measurements were taken over this interval" (a
//! histogram point's `min`/`max` are those of its window when the temporality is delta);
//! a backend gets count, sum, min and max of one stream, not four gauges to join.

use crate::model::{Page, Stat};
use crate::output::otlp::proto::common::{any_value, AnyValue, KeyValue};
use crate::output::otlp::proto::metrics::{
    metric, AggregationTemporality, Histogram, HistogramDataPoint, Metric,
};
use std::collections::BTreeMap;

/// The start of the next window: the previous push.
pub(super) struct Deltas {
    previous_ns: u64,
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
                    .filter_map(|(labels, g)| self.point(labels, &g, now_ns))
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
    }

    /// A series' point, when all four of its numbers are on the page.
    fn point(
        &self,
        labels: Vec<(String, String)>,
        g: &Gathered,
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
            start_time_unix_nano: self.previous_ns.min(now_ns),
            time_unix_nano: now_ns,
            count: count as u64,
            sum: Some(mean * count),
            min: Some(min),
            max: Some(max),
            ..Default::default()
        })
    }
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
}
