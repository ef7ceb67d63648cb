//! A published page as one OTLP `ExportMetricsServiceRequest`: each family a metric (a
//! gauge, or a monotonic cumulative sum for a counter), each series a data point whose
//! attributes are its labels, in the page's names or semconv's (`semconv`).
//!
//! A cumulative sum needs the time its count started. DCGM's counters (energy since the
//! driver loaded, ECC and replay counts, NVLink errors, remapped rows) began long before the
//! exporter saw them, at a time nobody knows: OpenTelemetry's data model ("Cumulative
//! streams: handling unknown start time") has such a series begin with a point whose start
//! equals its time, and keep that start; a start before it would claim the whole count as
//! an increase since then (a spike for cumulative-to-delta and created-timestamp consumers
//! at every restart, new pod series and series back after an absence). Only the counts the
//! exporter itself begins carry an earlier start ([`Origin`]). A start is kept per series
//! across pushes (and across collections that failed, while the engine was away) and moves
//! only when the counter goes down (a reset: the driver reloaded, a GPU was reset): the new
//! count began after the old one was last seen, a real start.

use super::proto::collector::ExportMetricsServiceRequest;
use super::proto::common::{any_value, AnyValue, InstrumentationScope, KeyValue};
use super::proto::metrics::{
    metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use super::proto::resource::Resource;
use super::semconv::{self, Instrument, Mapping};
use crate::attribution::usage::families as usage;
use crate::config::otlp::Naming;
use crate::model::{FamilyRef, Page};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// How long a sum's start is kept for a series that is gone (an engine away, a GPU lost);
/// one back later than that starts afresh.
const KEEP_ABSENT_NS: u64 = 3_600 * 1_000_000_000;
/// Pushes between sweeps of the starts of series gone too long.
const SWEEP_EVERY: u64 = 64;

/// Per series: when its count started, its last value and when it was last seen.
#[derive(Clone, Copy, Debug)]
struct Start {
    start_ns: u64,
    last: f64,
    seen_ns: u64,
}

/// Where a sum's count began, as far as the exporter knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Before the exporter saw it, when unknown (DCGM's and the driver's counters, and
    /// every up-down sum): the first point's start is its time.
    Unknown,
    /// From zero at the exporter's start (`DCGM_EXP_XID_ERRORS_TOTAL`,
    /// `DCGM_EXP_CLOCK_EVENTS_TOTAL`, kept across reloads): however late a series shows
    /// (a first XID of its kind), its count is the exporter's since then.
    ExporterStart,
    /// From zero when the series appears (usage accounting: a consumer's energy since it
    /// was first seen on its device, a device's idle energy since it was first seen, both
    /// afresh when forgotten and back): since the push before.
    FirstSeen,
}

impl Origin {
    fn of(family: &str) -> Origin {
        if family == usage::ENERGY || family == usage::IDLE_ENERGY {
            Origin::FirstSeen
        } else if family.starts_with("DCGM_EXP_") && family.ends_with("_TOTAL") {
            Origin::ExporterStart
        } else {
            Origin::Unknown
        }
    }
}

/// The start times of the cumulative sums, by series.
struct Starts {
    map: HashMap<u128, Start>,
    /// The exporter's start: the start of the counts it begins there.
    exporter_start_ns: u64,
    /// The previous push: the start of a count that begins with its series.
    previous_ns: Option<u64>,
    pushes: u64,
}

impl Starts {
    fn start(&mut self, key: u128, value: f64, sum: (bool, Origin), now_ns: u64) -> u64 {
        let (monotonic, origin) = sum;
        let first = match origin {
            Origin::Unknown => now_ns,
            Origin::ExporterStart => self.exporter_start_ns,
            Origin::FirstSeen => self.previous_ns.unwrap_or(self.exporter_start_ns),
        };
        let s = self.map.entry(key).or_insert(Start {
            start_ns: first.min(now_ns),
            last: value,
            seen_ns: now_ns,
        });
        if monotonic && value < s.last {
            // A reset: the new count began after the old one was last seen.
            s.start_ns = s.seen_ns.min(now_ns);
        }
        s.last = value;
        s.seen_ns = now_ns;
        s.start_ns
    }

    fn pushed(&mut self, now_ns: u64) {
        self.previous_ns = Some(now_ns);
        self.pushes += 1;
        if self.pushes.is_multiple_of(SWEEP_EVERY) {
            self.map
                .retain(|_, s| now_ns.saturating_sub(s.seen_ns) <= KEEP_ABSENT_NS);
        }
    }
}

/// Turns pages into requests, keeping the sums' start times between them.
pub struct Converter {
    naming: Naming,
    resource: Resource,
    starts: Starts,
    /// Sub-interval aggregation's histograms (`aggregates`).
    aggregates: aggregates::Deltas,
}

/// Where the points of one metric of the request are gathered.
struct Building {
    metrics: Vec<Metric>,
    /// Semconv metric name -> its index in `metrics` (several fields feed one metric).
    mapped: HashMap<&'static str, usize>,
}

impl Converter {
    pub fn new(naming: Naming, resource: &[(String, String)], exporter_start_ns: u64) -> Self {
        Converter {
            naming,
            resource: Resource {
                attributes: resource.iter().map(|(k, v)| key_value(k, v)).collect(),
                ..Default::default()
            },
            starts: Starts {
                map: HashMap::new(),
                exporter_start_ns,
                previous_ns: None,
                pushes: 0,
            },
            aggregates: aggregates::Deltas::new(exporter_start_ns),
        }
    }

    /// The request for `page`, collected at `now_ns` (Unix ns).
    pub fn request(&mut self, page: &Page, now_ns: u64) -> ExportMetricsServiceRequest {
        let mut b = Building {
            metrics: Vec::new(),
            mapped: HashMap::new(),
        };
        for fam in page.families().filter(|f| f.stat().is_none()) {
            let mapping = match self.naming {
                Naming::Semconv => fam.field().and_then(semconv::mapping),
                Naming::Dcgm => None,
            };
            match mapping {
                Some(m) => self.add_mapped(&mut b, fam, m, now_ns),
                None => {
                    let metric = self.plain(fam, now_ns);
                    b.metrics.push(metric);
                }
            }
        }
        self.aggregates.add(page, now_ns, &mut b.metrics);
        self.starts.pushed(now_ns);
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "dcgm-exporter".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    metrics: b.metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// A family under its page name: a counter is a monotonic sum, anything else a gauge.
    fn plain(&mut self, fam: FamilyRef<'_>, now_ns: u64) -> Metric {
        let counter = fam.is_counter();
        let origin = Origin::of(fam.name());
        let points = fam
            .series()
            .map(|s| {
                let attributes: Vec<KeyValue> = s.labels().map(|(k, v)| key_value(k, v)).collect();
                let start = counter.then(|| {
                    let key = series_key(fam.name(), s.labels());
                    self.starts.start(key, s.value(), (true, origin), now_ns)
                });
                point(attributes, s.value(), start, now_ns)
            })
            .collect();
        Metric {
            name: fam.name().to_string(),
            description: fam.help().to_string(),
            data: Some(data(
                if counter {
                    Instrument::Counter
                } else {
                    Instrument::Gauge
                },
                points,
            )),
            ..Default::default()
        }
    }

    /// A family's points added to the semconv metric its field maps to, scaled to the
    /// metric's unit, with the mapping's and the hardware attributes after the labels.
    fn add_mapped(&mut self, b: &mut Building, fam: FamilyRef<'_>, m: &Mapping, now_ns: u64) {
        let idx = *b.mapped.entry(m.metric).or_insert_with(|| {
            b.metrics.push(Metric {
                name: m.metric.to_string(),
                description: m.description.to_string(),
                unit: m.unit.to_string(),
                data: Some(data(m.instrument, Vec::new())),
                ..Default::default()
            });
            b.metrics.len() - 1
        });
        let mut hw = Vec::new();
        let mut labels = Vec::new();
        for s in fam.series() {
            hw.clear();
            labels.clear();
            labels.extend(s.labels());
            semconv::hardware_attributes(&labels, &mut hw);
            let mut attributes: Vec<KeyValue> =
                labels.iter().map(|(k, v)| key_value(k, v)).collect();
            attributes.extend(m.attributes.iter().map(|(k, v)| key_value(k, v)));
            attributes.extend(hw.iter().map(|(k, v)| key_value(k, v)));
            let value = m.scale.apply(s.value());
            let start = (m.instrument != Instrument::Gauge).then(|| {
                // Each point comes from one series of the page: that names it.
                let key = series_key(fam.name(), labels.iter().copied());
                let monotonic = m.instrument == Instrument::Counter;
                let sum = (monotonic, Origin::of(fam.name()));
                self.starts.start(key, value, sum, now_ns)
            });
            let p = point(attributes, value, start, now_ns);
            match &mut b.metrics[idx].data {
                Some(metric::Data::Gauge(g)) => g.data_points.push(p),
                Some(metric::Data::Sum(s)) => s.data_points.push(p),
                _ => {}
            }
        }
    }
}

fn data(instrument: Instrument, data_points: Vec<NumberDataPoint>) -> metric::Data {
    match instrument {
        Instrument::Gauge => metric::Data::Gauge(Gauge { data_points }),
        Instrument::Counter | Instrument::UpDownCounter => metric::Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: instrument == Instrument::Counter,
        }),
    }
}

fn point(
    attributes: Vec<KeyValue>,
    value: f64,
    start: Option<u64>,
    now_ns: u64,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start.unwrap_or(0),
        time_unix_nano: now_ns,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

fn key_value(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

/// A series' identity for its start time: 128 bits from two differently seeded SipHash
/// passes, so two series sharing one is not a practical concern.
fn series_key<'a>(name: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> u128 {
    let (mut a, mut b) = (DefaultHasher::new(), DefaultHasher::new());
    1u8.hash(&mut a);
    2u8.hash(&mut b);
    name.hash(&mut a);
    name.hash(&mut b);
    for (k, v) in labels {
        (k, v).hash(&mut a);
        (k, v).hash(&mut b);
    }
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

mod aggregates;
#[cfg(test)]
mod tests;
