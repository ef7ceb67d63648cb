//! The exporter's own metrics. Their `dcgm_exporter_` prefix is lower-case and no DCGM field
//! name or 1.x legacy name starts with it, so they cannot collide with exported fields.

use crate::output::render::DropReason;
use prometheus::{Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

pub const PREFIX: &str = "dcgm_exporter_";

pub struct SelfMetrics {
    registry: Registry,
    pub collection_duration: Gauge,
    pub last_success: Gauge,
    pub connected: IntGauge,
    pub collections: IntCounterVec,
    pub dropped: IntCounterVec,
    pub series: IntGauge,
    pub reconnects: IntCounter,
}

impl Default for SelfMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SelfMetrics {
    pub fn new() -> SelfMetrics {
        let registry = Registry::new();
        let name = |n: &str| format!("{PREFIX}{n}");
        let collection_duration = Gauge::with_opts(Opts::new(
            name("collection_duration_seconds"),
            "Time the last collection from DCGM took.",
        ))
        .expect("static metric options are valid");
        let last_success = Gauge::with_opts(Opts::new(
            name("last_successful_collection_timestamp_seconds"),
            "Unix time of the last successful collection from DCGM.",
        ))
        .expect("static metric options are valid");
        let connected = IntGauge::with_opts(Opts::new(
            name("dcgm_connected"),
            "1 while the DCGM host engine is connected, 0 during an outage.",
        ))
        .expect("static metric options are valid");
        let collections = IntCounterVec::new(
            Opts::new(
                name("collections_total"),
                "Collections from DCGM by result.",
            ),
            &["result"],
        )
        .expect("static metric options are valid");
        let dropped = IntCounterVec::new(
            Opts::new(
                name("samples_dropped_total"),
                "Values not exported, by reason (sentinel, status, non_numeric, duplicate, conflict).",
            ),
            &["reason"],
        )
        .expect("static metric options are valid");
        let series = IntGauge::with_opts(Opts::new(name("series"), "Series on the last page."))
            .expect("static metric options are valid");
        let reconnects = IntCounter::with_opts(Opts::new(
            name("reconnects_total"),
            "Successful reconnections to the DCGM host engine.",
        ))
        .expect("static metric options are valid");
        for c in [
            Box::new(collection_duration.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(last_success.clone()),
            Box::new(connected.clone()),
            Box::new(collections.clone()),
            Box::new(dropped.clone()),
            Box::new(series.clone()),
            Box::new(reconnects.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        // Pre-create the label values so dashboards see zeros, not absent series.
        for r in ["success", "error"] {
            collections.with_label_values(&[r]);
        }
        for r in [
            DropReason::Sentinel,
            DropReason::Status,
            DropReason::NonNumeric,
            DropReason::Duplicate,
            DropReason::Conflict,
        ] {
            dropped.with_label_values(&[r.as_str()]);
        }
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            if let Err(e) = registry.register(Box::new(pc)) {
                tracing::warn!("process metrics unavailable: {e}");
            }
        }
        SelfMetrics {
            registry,
            collection_duration,
            last_success,
            connected,
            collections,
            dropped,
            series,
            reconnects,
        }
    }

    /// Adds a later stage's own metrics (e.g. the attribution sources') to this registry.
    pub fn register(&self, c: Box<dyn prometheus::core::Collector>) {
        if let Err(e) = self.registry.register(c) {
            tracing::warn!("self metric not registered: {e}");
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("encoding self metrics failed: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefix_cannot_collide_with_any_field_name() {
        assert!(dcgm_sys::fields::FIELDS
            .iter()
            .all(|f| !f.name.starts_with(super::PREFIX)));
        assert!(dcgm_sys::fields::ALIASES
            .iter()
            .all(|(a, _)| !a.starts_with(super::PREFIX)));
    }
}
