//! Version 2 (upstream 4.8.4), read into the shared [`Model`]: `collections[]` with their
//! `every` and watch policy; the one collection of every field (`include: ["*"]`) gives the
//! default cadence and retention.

use super::model::{
    Group, Interval, IntervalText, Model, RawAggregate, RawDetect, RawHostEngine, RawMetrics,
    RawServer, RetentionText,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawV2 {
    #[allow(dead_code)]
    version: u32,
    #[serde(default)]
    emulate_version: Option<String>,
    #[serde(default)]
    low_cardinality: Option<bool>,
    /// Ours: `--aggregate`, `--aggregate-period`.
    #[serde(default)]
    aggregate: Option<RawAggregate>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    pub(super) metrics: Option<RawMetrics>,
    #[serde(default)]
    collections: Option<Vec<Collection>>,
    #[serde(default)]
    sources: Option<Sources>,
    #[serde(default)]
    server: Option<RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Collection {
    #[serde(default)]
    name: String,
    every: Interval,
    #[serde(default)]
    metrics: Include,
    #[serde(default)]
    sources: Option<CollectionSources>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Include {
    #[serde(default)]
    include: Vec<String>,
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
    watch: Option<Watch>,
    #[serde(default)]
    detect_bind_unbind: Option<RawDetect>,
    #[serde(default)]
    host_engines: Option<Vec<RawHostEngine>>,
    /// Ours: `--dcgm-denylist-modules`.
    #[serde(default)]
    denylist_modules: Option<Vec<String>>,
}

/// A collection's own sources: only the watch policy (exporter-wide settings such as
/// detectBindUnbind do not belong to a collection, as upstream).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectionSources {
    #[serde(default)]
    dcgm: Option<CollectionDcgm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectionDcgm {
    #[serde(default)]
    watch: Option<Watch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Watch {
    #[serde(default)]
    max_keep_age: Option<String>,
    #[serde(default)]
    max_keep_samples: Option<i64>,
}

/// Version 2's retention keys: age, sample count.
const KEYS: [&str; 2] = ["maxKeepAge", "maxKeepSamples"];

impl Watch {
    fn text(&self, path: String) -> RetentionText<'_> {
        let age = self.max_keep_age.as_deref();
        RetentionText::new(path, KEYS, age, self.max_keep_samples)
    }
}

impl RawV2 {
    pub(super) fn model(&self, name: &str) -> Result<Model<'_>, super::Error> {
        let dcgm = self.sources.as_ref().and_then(|s| s.dcgm.as_ref());
        let collections = self.collections.as_deref().unwrap_or_default();
        if self.collections.is_some() && collections.is_empty() {
            return Err(super::Error::at(name, super::Problem::NoCollections));
        }
        Ok(Model {
            schema: 2,
            v1_extension: None,
            emulate_version: self.emulate_version.as_deref(),
            low_cardinality: self.low_cardinality,
            aggregate: self.aggregate.as_ref(),
            backend: self.backend.as_deref(),
            server: self.server.as_ref(),
            metrics: self.metrics.as_ref(),
            detect: dcgm.and_then(|d| d.detect_bind_unbind.as_ref()),
            host_engines: dcgm.and_then(|d| d.host_engines.as_deref()),
            denylist_modules: dcgm.and_then(|d| d.denylist_modules.as_deref()),
            interval: None,
            retention: dcgm
                .and_then(|d| d.watch.as_ref())
                .map(|w| w.text("sources.dcgm.watch".into())),
            groups: collections.iter().enumerate().map(group).collect(),
            all_fields_is_default: true,
        })
    }
}

fn group((i, c): (usize, &Collection)) -> Group<'_> {
    let key = format!("collections[{i}]");
    let watch = c
        .sources
        .as_ref()
        .and_then(|s| s.dcgm.as_ref())
        .and_then(|d| d.watch.as_ref());
    Group {
        name: &c.name,
        interval: IntervalText {
            key: format!("{key}.every"),
            value: &c.every,
            numbers: false,
        },
        fields: (format!("{key}.metrics.include"), &c.metrics.include),
        retention: watch.map(|w| w.text(format!("{key}.sources.dcgm.watch"))),
        key,
    }
}
