//! Version 1 (upstream 4.8.3; `sources`, `server`, `metrics.enableExporterMetrics` and the
//! retention keys added by 4.8.4), read into the shared [`Model`].

use super::model::{
    Group, Interval, IntervalText, Model, RawDetect, RawHostEngine, RawMetrics, RawServer,
    RetentionText,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawV1 {
    #[allow(dead_code)]
    version: u32,
    /// Ours: the upstream release to emulate (`--emulate-version`).
    #[serde(default)]
    emulate_version: Option<String>,
    /// Ours: `--low-cardinality`.
    #[serde(default)]
    low_cardinality: Option<bool>,
    /// Ours: `--aggregate`, `--aggregate-period`.
    #[serde(default)]
    aggregate: Option<super::model::RawAggregate>,
    /// Ours: `--backend`.
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    sources: Option<Sources>,
    #[serde(default)]
    pub(super) metrics: Option<RawMetrics>,
    #[serde(default)]
    collection: Option<Collection>,
    #[serde(default)]
    server: Option<RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Sources {
    #[serde(default)]
    dcgm: Option<Dcgm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Dcgm {
    #[serde(default)]
    detect_bind_unbind: Option<RawDetect>,
    #[serde(default)]
    host_engines: Option<Vec<RawHostEngine>>,
    /// Ours: `--dcgm-denylist-modules`.
    #[serde(default)]
    denylist_modules: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Collection {
    #[serde(default)]
    interval: Option<Interval>,
    #[serde(default)]
    retention: Option<Retention>,
    #[serde(default)]
    watch_groups: Vec<WatchGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Retention {
    #[serde(default)]
    max_age: Option<String>,
    #[serde(default)]
    max_samples: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchGroup {
    #[serde(default)]
    name: String,
    interval: Interval,
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    retention: Option<Retention>,
}

/// Version 1's retention keys: age, sample count.
const KEYS: [&str; 2] = ["maxAge", "maxSamples"];

impl Retention {
    fn text(&self, path: String) -> RetentionText<'_> {
        RetentionText::new(path, KEYS, self.max_age.as_deref(), self.max_samples)
    }
}

impl RawV1 {
    pub(super) fn model(&self) -> Model<'_> {
        let c = self.collection.as_ref();
        let groups = c.map_or(&[][..], |c| &c.watch_groups);
        Model {
            schema: 1,
            v1_extension: self.extension(),
            emulate_version: self.emulate_version.as_deref(),
            low_cardinality: self.low_cardinality,
            aggregate: self.aggregate.as_ref(),
            backend: self.backend.as_deref(),
            server: self.server.as_ref(),
            metrics: self.metrics.as_ref(),
            detect: self
                .sources
                .as_ref()
                .and_then(|s| s.dcgm.as_ref())
                .and_then(|d| d.detect_bind_unbind.as_ref()),
            host_engines: self
                .sources
                .as_ref()
                .and_then(|s| s.dcgm.as_ref())
                .and_then(|d| d.host_engines.as_deref()),
            denylist_modules: self
                .sources
                .as_ref()
                .and_then(|s| s.dcgm.as_ref())
                .and_then(|d| d.denylist_modules.as_deref()),
            interval: c.and_then(|c| c.interval.as_ref()).map(|i| IntervalText {
                key: "collection.interval".into(),
                value: i,
                numbers: true,
            }),
            retention: c
                .and_then(|c| c.retention.as_ref())
                .map(|r| r.text("collection.retention".into())),
            groups: groups.iter().enumerate().map(group).collect(),
            all_fields_is_default: false,
        }
    }

    /// The first key of 4.8.4's additions that the file uses.
    fn extension(&self) -> Option<&'static str> {
        let c = self.collection.as_ref();
        if self.sources.is_some() {
            Some("sources")
        } else if self.server.is_some() {
            Some("server")
        } else if self
            .metrics
            .as_ref()
            .is_some_and(|m| m.enable_exporter_metrics.is_some())
        {
            Some("metrics.enableExporterMetrics")
        } else if c.is_some_and(|c| c.retention.is_some()) {
            Some("collection.retention")
        } else if c.is_some_and(|c| c.watch_groups.iter().any(|g| g.retention.is_some())) {
            Some("collection.watchGroups[].retention")
        } else {
            None
        }
    }
}

fn group((i, g): (usize, &WatchGroup)) -> Group<'_> {
    let key = format!("collection.watchGroups[{i}]");
    Group {
        name: &g.name,
        interval: IntervalText {
            key: format!("{key}.interval"),
            value: &g.interval,
            numbers: true,
        },
        fields: (format!("{key}.fields"), &g.fields),
        retention: g
            .retention
            .as_ref()
            .map(|r| r.text(format!("{key}.retention"))),
        key,
    }
}
