//! The exporter's own metrics. Their `dcgm_exporter_` prefix is lower-case and no DCGM field
//! name or 1.x legacy name starts with it, so they cannot collide with exported fields.

use crate::model::{DropReason, Page};
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};
use std::collections::BTreeMap;

pub(crate) use crate::model::naming::PREFIX;

/// How long collections take: the last one (gauge, as before) and their distribution
/// (histogram), updated together by `set`.
pub struct CollectionDuration {
    last: Gauge,
    histogram: Histogram,
}

impl CollectionDuration {
    pub fn set(&self, secs: f64) {
        self.last.set(secs);
        self.histogram.observe(secs);
    }
}

pub struct SelfMetrics {
    registry: Registry,
    pub collection_duration: CollectionDuration,
    /// `build_info{version, commit, dcgm_version, mode}` 1, set once DCGM is loaded.
    build_info: GaugeVec,
    pub last_success: Gauge,
    pub connected: IntGauge,
    pub collections: IntCounterVec,
    pub dropped: IntCounterVec,
    pub collection_errors: IntCounterVec,
    pub series: IntGauge,
    /// `field_values_dropped_total{field, reason}`: why a field has fewer series than entities.
    field_drops: IntCounterVec,
    /// `entity_series{entity_type}`: the last page's series by the entity they describe.
    entity_series: IntGaugeVec,
    pub reconnects: IntCounter,
    /// --enable-exporter-metrics: promhttp's handler metrics, under the same names.
    http_requests: IntCounterVec,
    /// `http_requests{code="200"}`, resolved once: a scrape must not hash a label value
    /// and take the vector's lock to count itself.
    http_ok: IntCounter,
    http_in_flight: IntGauge,
    /// Set by `enable_exporter_metrics`: these metrics change with every request, so a
    /// response built for one scrape must not be reused for the next.
    live: std::sync::atomic::AtomicBool,
    source: Source,
}

/// `build_info`'s (dcgm_version, mode, emulated) and the backend serving, with
/// `backend{backend}`: 1 for the source that served the published page.
struct Source {
    info: std::sync::Mutex<([String; 3], &'static str)>,
    gauge: IntGaugeVec,
}

impl Source {
    fn new(registry: &Registry, name: String) -> Source {
        let gauge = backend_gauge(name);
        registry
            .register(Box::new(gauge.clone()))
            .expect("metric names are unique");
        Source {
            info: std::sync::Mutex::new((Default::default(), "dcgm")),
            gauge,
        }
    }
}

/// Counts one /metrics request while it is served (see [`SelfMetrics::scrape`]).
pub struct ScrapeGuard<'a>(Option<&'a SelfMetrics>);

impl Drop for ScrapeGuard<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.http_in_flight.dec();
            m.http_ok.inc();
        }
    }
}

impl Default for SelfMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// When DCGM last answered a collection, and whether its host engine is connected now.
fn liveness(name: &dyn Fn(&str) -> String) -> (Gauge, IntGauge) {
    let last_success = gauge(
        name("last_successful_collection_timestamp_seconds"),
        "Unix time of the last successful collection from DCGM.",
    );
    let connected = int_gauge(
        name("dcgm_connected"),
        "1 while the DCGM host engine is connected, 0 during an outage.",
    );
    (last_success, connected)
}

impl SelfMetrics {
    pub fn new() -> SelfMetrics {
        let registry = Registry::new();
        let name = |n: &str| format!("{PREFIX}{n}");
        let collection_duration = gauge(
            name("collection_duration_seconds"),
            "Time the last collection from DCGM took.",
        );
        let histogram = duration_histogram(name("collection_seconds"));
        let build_info = build_info(name("build_info"));
        let (last_success, connected) = liveness(&name);
        let collections = counter_vec(
            name("collections_total"),
            "Collections from DCGM by result.",
            &["result"],
        );
        let dropped = counter_vec(
            name("samples_dropped_total"),
            "Values not exported, by reason (sentinel, status, non_numeric, duplicate, conflict, stale, invalid_label_name).",
            &["reason"],
        );
        let collection_errors = counter_vec(
            name("collection_errors_total"),
            "Pieces of a collection DCGM refused (a derived metric, a watch, a field), by \
             what was lost and DCGM's status; everything else is still served.",
            &["source", "reason"],
        );
        let (series, field_drops, entity_series) = page_breakdown(&registry, &name);
        let reconnects = counter(
            name("reconnects_total"),
            "Successful reconnections to the DCGM host engine.",
        );
        for c in [
            Box::new(collection_duration.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(histogram.clone()),
            Box::new(build_info.clone()),
            Box::new(last_success.clone()),
            Box::new(connected.clone()),
            Box::new(collections.clone()),
            Box::new(dropped.clone()),
            Box::new(collection_errors.clone()),
            Box::new(series.clone()),
            Box::new(reconnects.clone()),
            // Profiling that heals (collect::heal): process-wide, per GPU.
            Box::new(crate::collect::heal::rearm_counter().clone()),
            Box::new(crate::collect::heal::stuck_gauge().clone()),
        ]
        .into_iter()
        // Basic auth's bound on password checks (process-wide, so one set for the process).
        .chain(crate::output::http::auth::Gate::global().collectors())
        // The event history's counts (process-wide, as the history).
        .chain(crate::model::events::collectors())
        {
            registry.register(c).expect("metric names are unique");
        }
        precreate(&collections, &dropped);
        let (http_requests, http_in_flight) = promhttp();
        SelfMetrics {
            source: Source::new(&registry, name("backend")), // evaluated before `registry` moves
            registry,
            collection_duration: CollectionDuration {
                last: collection_duration,
                histogram,
            },
            build_info,
            last_success,
            connected,
            collections,
            dropped,
            collection_errors,
            series,
            field_drops,
            entity_series,
            reconnects,
            http_ok: http_requests.with_label_values(&["200"]),
            http_requests,
            http_in_flight,
            live: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// --enable-exporter-metrics: adds what Go's exporter gets from its default registry:
    /// the process collector (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
    /// `process_open_fds`, `process_start_time_seconds`, ...) and promhttp's
    /// `promhttp_metric_handler_requests_total{code}` / `..._requests_in_flight`. The
    /// `go_*` runtime metrics have no Rust counterpart and are not invented.
    pub(crate) fn enable_exporter_metrics(&self) {
        self.live.store(true, std::sync::atomic::Ordering::Relaxed);
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            if let Err(e) = self.registry.register(Box::new(pc)) {
                tracing::warn!("process metrics unavailable: {e}");
            }
        }
        for c in [
            Box::new(self.http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(self.http_in_flight.clone()),
        ] {
            if let Err(e) = self.registry.register(c) {
                tracing::warn!("HTTP handler metrics unavailable: {e}");
            }
        }
        for code in ["200", "500", "503"] {
            self.http_requests.with_label_values(&[code]);
        }
    }

    /// Sets `build_info`: one series, the exporter's version and commit with the loaded DCGM
    /// library's version, the mode and the dcgm-exporter release emulated.
    pub(crate) fn set_build_info(&self, dcgm_version: &str, mode: &str, emulated: &str) {
        let mut info = self.source.info.lock().unwrap_or_else(|p| p.into_inner());
        info.0 = [dcgm_version, mode, emulated].map(str::to_string);
        self.write_build_info(&info);
    }

    /// Which source served the published page ("dcgm" or "nvml"): `build_info`'s `backend`
    /// label and `dcgm_exporter_backend{backend}` 1.
    pub(crate) fn set_backend(&self, backend: &'static str) {
        let mut info = self.source.info.lock().unwrap_or_else(|p| p.into_inner());
        if info.1 == backend {
            return;
        }
        info.1 = backend;
        self.write_build_info(&info);
        self.source.gauge.reset();
        self.source.gauge.with_label_values(&[backend]).set(1);
    }

    fn write_build_info(&self, (args, backend): &([String; 3], &'static str)) {
        if args[0].is_empty() {
            // Not known before the libraries are loaded.
            return;
        }
        self.build_info.reset();
        self.build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                env!("DCGM_EXPORTER_COMMIT"),
                &args[0],
                &args[1],
                &args[2],
                backend,
            ])
            .set(1.0);
    }

    /// What the published page holds and lacks: the values each field lost and why, and its
    /// series by entity type (an empty or partial page says where it is short).
    pub(crate) fn observe_page(&self, page: &Page) {
        for ((field, reason), n) in &page.field_drops {
            self.field_drops
                .with_label_values(&[field.as_str(), reason])
                .inc_by(*n);
        }
        let mut by_type: BTreeMap<&'static str, i64> = BTreeMap::new();
        for fam in page.families() {
            for s in fam.series() {
                *by_type.entry(entity_type(s.labels())).or_default() += 1;
            }
        }
        // A type gone from the page (a reload, MIG disabled) must not keep its last count.
        self.entity_series.reset();
        for (t, n) in by_type {
            self.entity_series.with_label_values(&[t]).set(n);
        }
    }

    /// Call while serving /metrics; the request is counted when the guard drops. Only
    /// where the handler metrics are served (`--enable-exporter-metrics`): otherwise nobody
    /// reads them, and every scrape would write counters that all cores share.
    pub fn scrape(&self) -> ScrapeGuard<'_> {
        let live = self.live().then_some(self);
        if let Some(m) = live {
            m.http_in_flight.inc();
        }
        ScrapeGuard(live)
    }

    /// Adds a later stage's own metrics (e.g. the attribution sources') to this registry.
    pub(crate) fn register(&self, c: Box<dyn prometheus::core::Collector>) {
        if let Err(e) = self.registry.register(c) {
            tracing::warn!("self metric not registered: {e}");
        }
    }

    /// The current values, encoded per scrape after the cached page.
    /// Whether the self metrics change per request (`--enable-exporter-metrics`).
    pub fn live(&self) -> bool {
        self.live.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("encoding self metrics failed: {e}");
        }
        out
    }
}

/// Pre-creates the label values so dashboards see zeros, not absent series.
fn precreate(collections: &IntCounterVec, dropped: &IntCounterVec) {
    for r in ["success", "error"] {
        collections.with_label_values(&[r]);
    }
    for r in [
        DropReason::Sentinel,
        DropReason::Status,
        DropReason::NonNumeric,
        DropReason::Duplicate,
        DropReason::Conflict,
        DropReason::Stale,
        DropReason::InvalidLabelName,
    ] {
        dropped.with_label_values(&[r.as_str()]);
    }
}

/// `backend{backend}`: 1 for the source serving, DCGM until told otherwise.
fn backend_gauge(name: String) -> IntGaugeVec {
    let g = IntGaugeVec::new(
        Opts::new(
            name,
            "1 for the source that served the published page: dcgm, or nvml (the core GPU \
             series from the driver's NVML, without DCGM).",
        ),
        &["backend"],
    )
    .expect("static metric options are valid");
    g.with_label_values(&["dcgm"]).set(1);
    g
}

fn build_info(name: String) -> GaugeVec {
    GaugeVec::new(
        Opts::new(
            name,
            "1, labelled with the exporter's version and commit, the DCGM library's version, \
             the mode (embedded or remote host engine; none without DCGM), the dcgm-exporter \
             release emulated and the backend serving the page (dcgm or nvml).",
        ),
        &[
            "version",
            "commit",
            "dcgm_version",
            "mode",
            "emulated",
            "backend",
        ],
    )
    .expect("static metric options are valid")
}

/// What the page holds: its series, in all and by entity type, and the values it lacks.
/// (The two breakdowns are registered here; `series` by the caller, with the others.)
fn page_breakdown(
    registry: &Registry,
    name: &dyn Fn(&str) -> String,
) -> (IntGauge, IntCounterVec, IntGaugeVec) {
    let series = int_gauge(name("series"), "Series on the last page.");
    let field_drops = counter_vec(
        name("field_values_dropped_total"),
        "Values of a field not exported, by field and reason (blank, not_found, not_supported, \
         not_permissioned, status, stale, non_numeric).",
        &["field", "reason"],
    );
    let entity_series = IntGaugeVec::new(
        Opts::new(
            name("entity_series"),
            "Series on the last page by the entity they describe (gpu, mig, nvswitch, nvlink, \
             cpu, cpu_core, node).",
        ),
        &["entity_type"],
    )
    .expect("static metric options are valid");
    for c in [
        Box::new(field_drops.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(entity_series.clone()),
    ] {
        registry.register(c).expect("metric names are unique");
    }
    (series, field_drops, entity_series)
}

/// The entity a series describes, from its identity labels (links before their GPU or
/// switch, MIG instances before their GPU, cores before their CPU).
fn entity_type<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> &'static str {
    let mut t = "node";
    for (k, _) in labels {
        t = match (k, t) {
            ("nvlink", _) => return "nvlink",
            ("GPU_I_ID", _) => return "mig",
            ("cpucore", _) => return "cpu_core",
            ("gpu", _) => "gpu",
            ("nvswitch", _) => "nvswitch",
            ("cpu", "node") => "cpu",
            _ => t,
        };
    }
    t
}

/// From a 1 ms embedded read of one GPU to a remote engine near its deadline.
fn duration_histogram(name: String) -> Histogram {
    Histogram::with_opts(
        HistogramOpts::new(
            name,
            "Time collections from DCGM took (the last one: collection_duration_seconds).",
        )
        .buckets(vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]),
    )
    .expect("static metric options are valid")
}

/// promhttp's handler metrics (registered only with --enable-exporter-metrics).
fn promhttp() -> (IntCounterVec, IntGauge) {
    (
        counter_vec(
            "promhttp_metric_handler_requests_total".into(),
            "Total number of scrapes by HTTP status code.",
            &["code"],
        ),
        int_gauge(
            "promhttp_metric_handler_requests_in_flight".into(),
            "Current number of scrapes being served.",
        ),
    )
}

fn counter(name: String, help: &str) -> IntCounter {
    IntCounter::with_opts(Opts::new(name, help)).expect("static metric options are valid")
}

fn gauge(name: String, help: &str) -> Gauge {
    Gauge::with_opts(Opts::new(name, help)).expect("static metric options are valid")
}

fn int_gauge(name: String, help: &str) -> IntGauge {
    IntGauge::with_opts(Opts::new(name, help)).expect("static metric options are valid")
}

fn counter_vec(name: String, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("static metric options are valid")
}

#[cfg(test)]
mod tests {
    #[test]
    fn scrapes_are_counted_only_where_the_handler_metrics_are_served() {
        let m = super::SelfMetrics::new();
        drop(m.scrape());
        assert_eq!((m.http_ok.get(), m.http_in_flight.get()), (0, 0));
        m.enable_exporter_metrics();
        let held = m.scrape();
        assert_eq!(m.http_in_flight.get(), 1);
        drop(held);
        assert_eq!((m.http_ok.get(), m.http_in_flight.get()), (1, 0));
    }

    #[test]
    fn build_info_is_one_series_and_every_duration_lands_in_the_histogram() {
        let m = super::SelfMetrics::new();
        let text = |m: &super::SelfMetrics| String::from_utf8(m.encode()).unwrap();
        // Not known before DCGM is loaded: no series yet.
        assert!(!text(&m).contains("dcgm_exporter_build_info{"));
        m.set_build_info("4.5.0", "remote", "4.8.2");
        m.set_build_info("4.6.0", "embedded", "4.8.4");
        let t = text(&m);
        let info: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("dcgm_exporter_build_info{"))
            .collect();
        assert_eq!(info.len(), 1, "{t}");
        assert!(info[0].contains("dcgm_version=\"4.6.0\""), "{t}");
        assert!(info[0].contains("mode=\"embedded\""), "{t}");
        assert!(info[0].contains("emulated=\"4.8.4\""), "{t}");
        assert!(info[0].contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))));
        assert!(info[0].ends_with(" 1"), "{t}");
        m.collection_duration.set(0.003);
        m.collection_duration.set(2.0);
        let t = text(&m);
        assert!(
            t.contains("dcgm_exporter_collection_duration_seconds 2\n"),
            "{t}"
        );
        assert!(
            t.contains("dcgm_exporter_collection_seconds_count 2\n"),
            "{t}"
        );
        assert!(
            t.contains("dcgm_exporter_collection_seconds_bucket{le=\"0.005\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("dcgm_exporter_collection_seconds_bucket{le=\"2.5\"} 2\n"),
            "{t}"
        );
    }

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
