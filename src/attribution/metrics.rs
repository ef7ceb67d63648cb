//! Self-metrics of the attribution sources (kubelet, nvml, hpc, ...).

use crate::output::selfmetrics::{SelfMetrics, PREFIX};
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

#[derive(Clone)]
pub struct Metrics {
    up: IntGaugeVec,
    errors: IntCounterVec,
}

impl Metrics {
    pub fn register(into: &SelfMetrics) -> Metrics {
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
        into.register(Box::new(up.clone()));
        into.register(Box::new(errors.clone()));
        Metrics { up, errors }
    }

    pub fn set(&self, source: &str, up: bool) {
        self.up.with_label_values(&[source]).set(i64::from(up));
        self.errors.with_label_values(&[source]);
    }

    pub fn error(&self, source: &str) {
        self.errors.with_label_values(&[source]).inc();
    }
}
