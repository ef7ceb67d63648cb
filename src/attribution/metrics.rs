//! Self-metrics of the attribution sources (kubelet, nvml, hpc, ...).

use crate::model::naming::PREFIX;
use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

#[derive(Clone)]
pub(crate) struct Metrics {
    up: IntGaugeVec,
    errors: IntCounterVec,
    unplaced: IntGauge,
    unplaced_total: IntCounter,
    usage_dropped: IntCounterVec,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let up = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}attribution_source_up"),
                "1 while an attribution source (kubelet, nvml, hpc...) answered on the last collection, 0 while it fails.",
            ),
            &["source"],
        )
        .expect("static metric options are valid");
        let errors = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}attribution_source_errors_total"),
                "Collections on which an attribution source failed.",
            ),
            &["source"],
        )
        .expect("static metric options are valid");
        let unplaced = IntGauge::with_opts(Opts::new(
            format!("{PREFIX}attribution_unplaced_devices"),
            "MIG devices a pod or source names by UUID that NVML could not place on a GPU instance, on the last collection: their pods get no labels.",
        ))
        .expect("static metric options are valid");
        let unplaced_total = IntCounter::with_opts(Opts::new(
            format!("{PREFIX}attribution_unplaced_devices_total"),
            "Times a MIG device named by UUID could not be placed on a GPU instance (once per device each time it becomes unplaced).",
        ))
        .expect("static metric options are valid");
        let usage_dropped = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}usage_consumers_dropped_total"),
                "Consumers left without usage series by --usage-max-consumers-per-gpu, per GPU (once each time one is left off).",
            ),
            &["gpu"],
        )
        .expect("static metric options are valid");
        Metrics {
            up,
            errors,
            unplaced,
            unplaced_total,
            usage_dropped,
        }
    }

    /// What a registry serves (the exporter's self-metrics: `SelfMetrics::register`).
    pub(crate) fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.up.clone()),
            Box::new(self.errors.clone()),
            Box::new(self.unplaced.clone()),
            Box::new(self.unplaced_total.clone()),
            Box::new(self.usage_dropped.clone()),
        ]
    }

    /// `now`: the devices unplaced on this collection; `new`: how many of them were placed
    /// (or not asked for) on the previous one.
    pub(crate) fn unplaced(&self, now: usize, new: usize) {
        self.unplaced.set(now as i64);
        self.unplaced_total.inc_by(new as u64);
    }

    pub(crate) fn set(&self, source: &str, up: bool) {
        self.up.with_label_values(&[source]).set(i64::from(up));
        self.errors.with_label_values(&[source]);
    }

    /// `n` more consumers on GPU `gpu` left without usage series (0: the GPU's series is
    /// shown from its first consumer on).
    pub(crate) fn usage_dropped(&self, gpu: &str, n: u64) {
        self.usage_dropped.with_label_values(&[gpu]).inc_by(n);
    }

    pub(crate) fn error(&self, source: &str) {
        self.errors.with_label_values(&[source]).inc();
    }
}
