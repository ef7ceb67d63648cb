//! `--config-file`: the newer dcgm-exporter's YAML configuration, in upstream 4.8.4's two
//! schemas (each refuses the other's keys; `version` picks one):
//!
//! ```yaml
//! version: 2
//! metrics:
//!   file: /etc/dcgm-exporter/default-counters.csv   # or inline `fields:`
//!   enableExporterMetrics: false
//! sources:
//!   dcgm:
//!     watch: {maxKeepAge: 10m, maxKeepSamples: 0}
//!     detectBindUnbind: {enabled: true, pollInterval: 1s}
//! server:
//!   maxConcurrentScrapes: 16
//! collections:
//!   - {name: scrape, every: 30s, metrics: {include: ["*"]}}        # the default cadence
//!   - name: power
//!     every: 1s
//!     metrics: {include: ["DCGM_FI_DEV_POWER_*"]}
//!     sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 2}}}
//! ```
//!
//! ```yaml
//! version: 1
//! metrics:
//!   fields:
//!     - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: "GPU temperature (in C)."}
//! sources: {dcgm: {detectBindUnbind: {enabled: true}}}                # 4.8.4's additions
//! server: {maxConcurrentScrapes: 16}                                   # to version 1
//! collection:
//!   interval: 30s                # a Go duration (ours: also milliseconds as a number)
//!   retention: {maxAge: 10m, maxSamples: 0}
//!   watchGroups:
//!     - {name: power, interval: 1s, fields: ["DCGM_FI_DEV_POWER_*"]}
//! ```
//!
//! With `--emulate-version=4.8.2` only version 1's original keys are read (4.8.3's
//! schema; 4.8.2 had no configuration file). A flag or environment variable that is set
//! explicitly wins over the file. Unknown keys, repeated keys and wrong types are errors
//! naming the file, the key and the line; the other rules are upstream's
//! (`internal/pkg/appconfig/yaml_config.go`). A configuration with inline `metrics.fields`
//! is its own counters source: reloads (SIGHUP, a change on disk) re-read its fields.

use crate::config::cli::Config;
use crate::config::counters::{self, Counters};
use crate::config::emulate::UpstreamVersion;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Version 1 (upstream 4.8.3; `sources`, `server`, `metrics.enableExporterMetrics` and the
/// retention keys added by 4.8.4).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawV1 {
    #[allow(dead_code)]
    version: u32,
    /// Ours: the upstream release to emulate (`--emulate-version`).
    #[serde(default)]
    emulate_version: Option<String>,
    /// Ours: `--low-cardinality`.
    #[serde(default)]
    low_cardinality: Option<bool>,
    /// Ours: `--backend`.
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    sources: Option<V1Sources>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    collection: Option<RawCollection>,
    #[serde(default)]
    server: Option<RawServer>,
}

/// Version 2 (upstream 4.8.4).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawV2 {
    #[allow(dead_code)]
    version: u32,
    #[serde(default)]
    emulate_version: Option<String>,
    #[serde(default)]
    low_cardinality: Option<bool>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    collections: Option<Vec<RawCollectionV2>>,
    #[serde(default)]
    sources: Option<V2Sources>,
    #[serde(default)]
    server: Option<RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMetrics {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    fields: Option<Vec<RawField>>,
    #[serde(default)]
    enable_exporter_metrics: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawField {
    #[serde(default)]
    name: String,
    #[serde(default)]
    prometheus_type: String,
    #[serde(default)]
    help: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawServer {
    #[serde(default)]
    max_concurrent_scrapes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct V1Sources {
    #[serde(default)]
    dcgm: Option<V1Dcgm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct V1Dcgm {
    #[serde(default)]
    detect_bind_unbind: Option<RawDetect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDetect {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    poll_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCollection {
    #[serde(default)]
    interval: Option<Interval>,
    #[serde(default)]
    retention: Option<V1Retention>,
    #[serde(default)]
    watch_groups: Vec<RawWatchGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct V1Retention {
    #[serde(default)]
    max_age: Option<String>,
    #[serde(default)]
    max_samples: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatchGroup {
    #[serde(default)]
    name: String,
    interval: Interval,
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    retention: Option<V1Retention>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCollectionV2 {
    #[serde(default)]
    name: String,
    every: Interval,
    #[serde(default)]
    metrics: V2Include,
    #[serde(default)]
    sources: Option<V2CollectionSources>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct V2Include {
    #[serde(default)]
    include: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct V2Sources {
    #[serde(default)]
    dcgm: Option<V2Dcgm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct V2Dcgm {
    #[serde(default)]
    watch: Option<RawWatch>,
    #[serde(default)]
    detect_bind_unbind: Option<RawDetect>,
}

/// A collection's own sources: only the watch policy (exporter-wide settings such as
/// detectBindUnbind do not belong to a collection, as upstream).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V2CollectionSources {
    #[serde(default)]
    dcgm: Option<V2CollectionDcgm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V2CollectionDcgm {
    #[serde(default)]
    watch: Option<RawWatch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWatch {
    #[serde(default)]
    max_keep_age: Option<String>,
    #[serde(default)]
    max_keep_samples: Option<i64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Interval {
    Millis(u64),
    Text(String),
}

impl Interval {
    /// A positive whole number of milliseconds (upstream: a Go duration of whole
    /// milliseconds; ours also takes a number of milliseconds).
    fn millis(&self, file: &str, key: &str) -> Result<u64, String> {
        let ms = match self {
            Interval::Millis(ms) => *ms,
            Interval::Text(t) => {
                let d = crate::config::duration::parse(t.trim())
                    .map_err(|e| format!("{file}: {key}: {e}"))?;
                if d.subsec_nanos() % 1_000_000 != 0 {
                    return Err(format!(
                        "{file}: {key}: '{t}' must be expressed in whole milliseconds or larger"
                    ));
                }
                d.as_millis() as u64
            }
        };
        if ms == 0 {
            return Err(format!("{file}: {key}: must be greater than 0"));
        }
        // DCGM takes a watch's frequency in microseconds as an i64, as for -c.
        if ms > crate::config::duration::MAX_MS {
            return Err(format!(
                "{file}: {key}: {ms} ms is too large (at most {} milliseconds)",
                crate::config::duration::MAX_MS
            ));
        }
        Ok(ms)
    }
}

/// A watch retention as a file states it: each property present overrides the one it
/// applies over (upstream's WatchRetentionOverride).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Retention {
    /// maxKeepAge in seconds.
    pub age_s: Option<f64>,
    pub samples: Option<i32>,
}

impl Retention {
    fn parse(
        file: &str,
        path: &str,
        (age_key, age): (&str, Option<&str>),
        (samples_key, samples): (&str, Option<i64>),
    ) -> Result<Retention, String> {
        let age_s = age
            .map(|a| {
                crate::config::duration::parse(a.trim())
                    .map(|d| d.as_secs_f64())
                    .map_err(|e| format!("{file}: {path}.{age_key}: {e}"))
            })
            .transpose()?;
        let samples = samples
            .map(|n| {
                if n < 0 {
                    Err(format!("{file}: {path}.{samples_key} must not be negative"))
                } else {
                    i32::try_from(n).map_err(|_| {
                        format!("{file}: {path}.{samples_key} must not exceed {}", i32::MAX)
                    })
                }
            })
            .transpose()?;
        Ok(Retention { age_s, samples })
    }

    fn both_zero(&self) -> bool {
        self.age_s == Some(0.0) && self.samples == Some(0)
    }
}

/// What a configuration file sets.
/// `collection.watchGroups[]`: fields watched at their own frequency.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchGroup {
    pub name: String,
    pub interval_ms: u64,
    /// Globs (`*`, `?`) over DCGM field names.
    pub fields: Vec<String>,
    /// The group's own retention (maxKeepAge s, maxKeepSamples), each over the default.
    pub keep_age_s: Option<f64>,
    pub keep_samples: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileSettings {
    /// `version` (1 or 2).
    pub schema: u32,
    /// The first key of 4.8.4's additions to version 1 that the file uses, if any.
    pub v1_extension: Option<&'static str>,
    /// `metrics.file`.
    pub counters_file: Option<PathBuf>,
    /// `metrics.fields` were given: the file itself is the counters source.
    pub inline_fields: bool,
    /// `collection.interval`, or the `every` of version 2's all-fields (`"*"`) collection,
    /// in milliseconds.
    pub interval_ms: Option<u64>,
    pub watch_groups: Vec<WatchGroup>,
    /// `emulateVersion` (ours).
    pub emulate: Option<UpstreamVersion>,
    /// `lowCardinality` (ours).
    pub low_cardinality: Option<bool>,
    /// `backend` (ours).
    pub backend: Option<crate::config::cli::Backend>,
    /// The default watch retention: `sources.dcgm.watch` and the all-fields collection's
    /// (version 2), `collection.retention` (version 1).
    pub retention: Retention,
    /// `sources.dcgm.detectBindUnbind`.
    pub bind_unbind: Option<bool>,
    pub bind_unbind_poll: Option<String>,
    /// `metrics.enableExporterMetrics`.
    pub exporter_metrics: Option<bool>,
    /// `server.maxConcurrentScrapes`.
    pub max_concurrent_scrapes: Option<i64>,
}

/// Reads the file and decodes it with the schema its `version` names.
enum Raw {
    V1(RawV1),
    V2(RawV2),
}

impl Raw {
    fn metrics(&self) -> Option<&RawMetrics> {
        match self {
            Raw::V1(r) => r.metrics.as_ref(),
            Raw::V2(r) => r.metrics.as_ref(),
        }
    }
}

fn parse_raw(path: &Path) -> Result<(String, Raw), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    // serde_norway's messages name the key path and the line ("metrics: unknown field
    // `fiels`, expected `file` or `fields` at line 3 column 3"); one value first so that
    // several documents and repeated keys are refused, as upstream does.
    let mut docs = serde_norway::Deserializer::from_str(&text);
    let first = docs.next().ok_or_else(|| format!("{name}: empty"))?;
    let header = serde_norway::Value::deserialize(first).map_err(|e| format!("{name}: {e}"))?;
    if docs.next().is_some() {
        return Err(format!("{name}: multiple YAML documents are not supported"));
    }
    let version = header
        .get("version")
        .ok_or_else(|| format!("{name}: version: missing (1 or 2)"))?;
    let raw = match version.as_u64() {
        Some(1) => Raw::V1(serde_norway::from_str(&text).map_err(|e| format!("{name}: {e}"))?),
        Some(2) => Raw::V2(serde_norway::from_str(&text).map_err(|e| format!("{name}: {e}"))?),
        _ => {
            return Err(format!(
                "{name}: version: {} is not supported (version must be 1 or 2)",
                serde_norway::to_string(version).unwrap_or_default().trim()
            ))
        }
    };
    Ok((name, raw))
}

/// Reads and checks a configuration file.
pub fn load(path: &Path) -> Result<FileSettings, String> {
    let (name, raw) = parse_raw(path)?;
    let mut out = FileSettings::default();
    let emulate = match &raw {
        Raw::V1(r) => &r.emulate_version,
        Raw::V2(r) => &r.emulate_version,
    };
    if let Some(v) = emulate {
        out.emulate = Some(
            v.parse()
                .map_err(|e| format!("{name}: emulateVersion: {e}"))?,
        );
    }
    out.low_cardinality = match &raw {
        Raw::V1(r) => r.low_cardinality,
        Raw::V2(r) => r.low_cardinality,
    };
    let backend = match &raw {
        Raw::V1(r) => &r.backend,
        Raw::V2(r) => &r.backend,
    };
    if let Some(b) = backend {
        out.backend = Some(b.parse().map_err(|e| format!("{name}: backend: {e}"))?);
    }
    let server = match &raw {
        Raw::V1(r) => r.server.as_ref(),
        Raw::V2(r) => r.server.as_ref(),
    };
    if let Some(n) = server.and_then(|s| s.max_concurrent_scrapes) {
        if n <= 0 {
            return Err(format!(
                "{name}: server.maxConcurrentScrapes must be greater than 0"
            ));
        }
        out.max_concurrent_scrapes = Some(n);
    }
    if let Some(m) = raw.metrics() {
        metrics(&name, path, m, &mut out)?;
    }
    match &raw {
        Raw::V1(r) => load_v1(&name, r, &mut out)?,
        Raw::V2(r) => load_v2(&name, r, &mut out)?,
    }
    Ok(out)
}

fn metrics(name: &str, path: &Path, m: &RawMetrics, out: &mut FileSettings) -> Result<(), String> {
    out.exporter_metrics = m.enable_exporter_metrics;
    let file = m
        .file
        .as_ref()
        .filter(|f| !f.as_os_str().to_string_lossy().trim().is_empty());
    let fields = m.fields.as_ref().filter(|f| !f.is_empty());
    match (file, fields) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{name}: metrics must specify exactly one of file or fields, not both"
            ))
        }
        (None, None) if m.enable_exporter_metrics.is_none() => {
            return Err(format!(
                "{name}: metrics must specify file, fields, or enableExporterMetrics"
            ))
        }
        _ => {}
    }
    out.counters_file = file.map(|f| {
        // Relative to the configuration file, as a user writing it next to it expects.
        match path.parent() {
            Some(dir) if f.is_relative() => dir.join(f),
            _ => f.clone(),
        }
    });
    if let Some(fields) = fields {
        // Checked now so that a bad field stops the start.
        inline_counters(name, fields)?;
        out.inline_fields = true;
    }
    Ok(())
}

fn detect(name: &str, d: &RawDetect, out: &mut FileSettings) -> Result<(), String> {
    out.bind_unbind = d.enabled;
    if let Some(p) = d.poll_interval.as_deref().map(str::trim) {
        if !p.is_empty() {
            let key = "sources.dcgm.detectBindUnbind.pollInterval";
            let dur =
                crate::config::duration::parse(p).map_err(|e| format!("{name}: {key}: {e}"))?;
            if dur.is_zero() {
                return Err(format!("{name}: {key} must be greater than 0"));
            }
            out.bind_unbind_poll = Some(p.to_string());
        }
    }
    Ok(())
}

fn patterns(name: &str, key: &str, fields: &[String]) -> Result<Vec<String>, String> {
    if fields.is_empty() {
        return Err(format!("{name}: {key} must not be empty"));
    }
    let mut out = Vec::new();
    for (j, f) in fields.iter().enumerate() {
        let f = f.trim();
        if f.is_empty() {
            return Err(format!("{name}: {key}[{j}] is required"));
        }
        if !dcgm_sys::fields::FIELDS
            .iter()
            .any(|m| field_matches(f, m.id))
        {
            return Err(format!("{name}: {key}: '{f}' matches no DCGM field"));
        }
        out.push(f.to_string());
    }
    Ok(out)
}

fn group_name(
    name: &str,
    key: &str,
    given: &str,
    seen: &mut Vec<String>,
) -> Result<String, String> {
    let n = given.trim();
    if n.is_empty() {
        return Err(format!("{name}: {key}.name is required"));
    }
    if seen.iter().any(|s| s == n) {
        return Err(format!("{name}: {key}.name \"{n}\" is duplicated"));
    }
    seen.push(n.to_string());
    Ok(n.to_string())
}

fn load_v1(name: &str, r: &RawV1, out: &mut FileSettings) -> Result<(), String> {
    out.schema = 1;
    let m = r.metrics.as_ref();
    out.v1_extension = if r.sources.is_some() {
        Some("sources")
    } else if r.server.is_some() {
        Some("server")
    } else if m.is_some_and(|m| m.enable_exporter_metrics.is_some()) {
        Some("metrics.enableExporterMetrics")
    } else if let Some(c) = &r.collection {
        if c.retention.is_some() {
            Some("collection.retention")
        } else if c.watch_groups.iter().any(|g| g.retention.is_some()) {
            Some("collection.watchGroups[].retention")
        } else {
            None
        }
    } else {
        None
    };
    if let Some(d) = r
        .sources
        .as_ref()
        .and_then(|s| s.dcgm.as_ref())
        .and_then(|d| d.detect_bind_unbind.as_ref())
    {
        detect(name, d, out)?;
    }
    let Some(c) = &r.collection else {
        return Ok(());
    };
    if let Some(i) = &c.interval {
        out.interval_ms = Some(i.millis(name, "collection.interval")?);
    }
    if let Some(ret) = &c.retention {
        out.retention = v1_retention(name, "collection.retention", ret)?;
    }
    let mut seen = Vec::new();
    for (i, g) in c.watch_groups.iter().enumerate() {
        let key = format!("collection.watchGroups[{i}]");
        let group = group_name(name, &key, &g.name, &mut seen)?;
        let interval_ms = g.interval.millis(name, &format!("{key}.interval"))?;
        let fields = patterns(name, &format!("{key}.fields"), &g.fields)?;
        let keep = match &g.retention {
            Some(ret) => v1_retention(name, &format!("{key}.retention"), ret)?,
            None => Retention::default(),
        };
        if keep.both_zero() {
            return Err(format!(
                "{name}: {key}.retention: maxAge and maxSamples cannot both be zero"
            ));
        }
        out.watch_groups.push(WatchGroup {
            name: group,
            interval_ms,
            fields,
            keep_age_s: keep.age_s,
            keep_samples: keep.samples,
        });
    }
    Ok(())
}

fn v1_retention(name: &str, path: &str, r: &V1Retention) -> Result<Retention, String> {
    Retention::parse(
        name,
        path,
        ("maxAge", r.max_age.as_deref()),
        ("maxSamples", r.max_samples),
    )
}

fn watch(name: &str, path: &str, w: &RawWatch) -> Result<Retention, String> {
    Retention::parse(
        name,
        path,
        ("maxKeepAge", w.max_keep_age.as_deref()),
        ("maxKeepSamples", w.max_keep_samples),
    )
}

fn load_v2(name: &str, r: &RawV2, out: &mut FileSettings) -> Result<(), String> {
    out.schema = 2;
    if let Some(d) = r.sources.as_ref().and_then(|s| s.dcgm.as_ref()) {
        if let Some(det) = &d.detect_bind_unbind {
            detect(name, det, out)?;
        }
        if let Some(w) = &d.watch {
            out.retention = watch(name, "sources.dcgm.watch", w)?;
        }
    }
    let Some(collections) = &r.collections else {
        return Ok(());
    };
    if collections.is_empty() {
        return Err(format!(
            "{name}: collections must contain at least one collection"
        ));
    }
    let mut seen = Vec::new();
    let mut default: Option<String> = None;
    for (i, c) in collections.iter().enumerate() {
        let key = format!("collections[{i}]");
        let group = group_name(name, &key, &c.name, &mut seen)?;
        if let Interval::Millis(n) = c.every {
            // Upstream reads `every` as a Go duration only (ours in version 1 also takes a
            // number of milliseconds).
            return Err(format!(
                "{name}: {key}.every: time: missing unit in duration \"{n}\""
            ));
        }
        let interval_ms = c.every.millis(name, &format!("{key}.every"))?;
        let include_key = format!("{key}.metrics.include");
        let fields = patterns(name, &include_key, &c.metrics.include)?;
        let keep = match c
            .sources
            .as_ref()
            .and_then(|s| s.dcgm.as_ref())
            .and_then(|d| d.watch.as_ref())
        {
            Some(w) => watch(name, &format!("{key}.sources.dcgm.watch"), w)?,
            None => Retention::default(),
        };
        if keep.both_zero() {
            return Err(format!(
                "{name}: {key}.sources.dcgm.watch: maxKeepAge and maxKeepSamples cannot both be zero"
            ));
        }
        // The all-fields collection gives the default cadence and retention; the others
        // override it for their fields.
        if fields == ["*"] {
            if let Some(first) = &default {
                return Err(format!(
                    "{name}: {include_key} duplicates the all-fields collection \"{first}\""
                ));
            }
            default = Some(group);
            out.interval_ms = Some(interval_ms);
            out.retention = Retention {
                age_s: keep.age_s.or(out.retention.age_s),
                samples: keep.samples.or(out.retention.samples),
            };
            continue;
        }
        out.watch_groups.push(WatchGroup {
            name: group,
            interval_ms,
            fields,
            keep_age_s: keep.age_s,
            keep_samples: keep.samples,
        });
    }
    Ok(())
}

/// Upstream's start-up rule for the narrower collections (watch groups): each must match
/// a configured field, and no field may be matched by two of them.
pub fn check_watch_groups(groups: &[WatchGroup], counters: &Counters) -> Result<(), String> {
    // (field id, the name the counters file gives it).
    let ids: Vec<(u16, &str)> = counters
        .all
        .iter()
        .filter_map(|c| match &c.field {
            counters::CounterField::Dcgm(m) => Some((m.id, c.name.as_str())),
            counters::CounterField::Exp(_) => None,
        })
        .collect();
    let matched = |g: &WatchGroup, id: u16| g.fields.iter().any(|p| field_matches(p, id));
    for g in groups {
        if !ids.iter().any(|&(id, _)| matched(g, id)) {
            return Err(format!(
                "watch group \"{}\" ({}) matches none of the configured fields",
                g.name,
                g.fields.join(", ")
            ));
        }
    }
    for &(id, field) in &ids {
        let mut by: Vec<&str> = groups
            .iter()
            .filter(|g| matched(g, id))
            .map(|g| g.name.as_str())
            .collect();
        by.dedup();
        if by.len() > 1 {
            return Err(format!(
                "{field} is matched by watch groups \"{}\" and \"{}\": a field may be in one only",
                by[0], by[1]
            ));
        }
    }
    Ok(())
}

fn inline_counters(file: &str, fields: &[RawField]) -> Result<Counters, String> {
    if fields.is_empty() {
        return Err(format!("{file}: metrics.fields: empty"));
    }
    let mut out = Counters::default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        // Upstream's rules: name, type and help required, each name once.
        let key = format!("{file}: metrics.fields[{i}]");
        let name = f.name.trim();
        if name.is_empty() {
            return Err(format!("{key}.name is required"));
        }
        if let Some(first) = seen.iter().position(|s| *s == name) {
            return Err(format!(
                "{key}.name duplicates metrics.fields[{first}].name \"{name}\""
            ));
        }
        seen.push(name);
        if f.prometheus_type.trim().is_empty() {
            return Err(format!("{key}.prometheusType is required"));
        }
        if f.help.trim().is_empty() {
            return Err(format!("{key}.help is required"));
        }
        // One CSV record per field, so that names, aliases and types resolve exactly as
        // in a counters CSV.
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let line = format!(
            "{},{},{}",
            quote(&f.name),
            quote(&f.prometheus_type),
            quote(&f.help)
        );
        let mut parsed = counters::parse_str(file, &line).map_err(|e| match e {
            counters::CountersError::Line { message, .. } => {
                format!("{file}: metrics.fields[{i}] ({}): {message}", f.name)
            }
            other => format!("{file}: metrics.fields[{i}]: {other}"),
        })?;
        for c in &mut parsed.all {
            c.line = i + 1;
        }
        out.all.extend(parsed.all);
    }
    Ok(out)
}

/// The counters at `path`: a counters CSV, or a configuration file with inline
/// `metrics.fields` (recognised by its `.yaml`/`.yml` extension).
/// `given`: the path was named (flag, env or config file); else a missing default file
/// means the built-in default counter set.
pub fn load_counters(
    path: &Path,
    given: bool,
    version: UpstreamVersion,
) -> Result<Counters, String> {
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    if !yaml {
        return counters::load_or_builtin(path, given, version).map_err(|e| e.to_string());
    }
    let (name, raw) = parse_raw(path)?;
    match raw.metrics().and_then(|m| m.fields.as_ref()) {
        Some(fields) => inline_counters(&name, fields),
        None => Err(format!("{name}: metrics.fields: missing")),
    }
}

/// 4.8.2 reads only the original version 1: a newer schema or key is refused by name.
fn check_schema_for_release(config: &Config, fs: &FileSettings, name: &str) -> Result<(), String> {
    if config.emulate_version.at_least_4_8_3() {
        return Ok(());
    }
    if fs.schema == 2 {
        return Err(format!(
            "{name}: version 2 is dcgm-exporter 4.8.4's schema; with --emulate-version {} \
             only version 1 is read",
            config.emulate_version
        ));
    }
    if let Some(key) = fs.v1_extension {
        return Err(format!(
            "{name}: {key}: added to version 1 by dcgm-exporter 4.8.4; not read with \
             --emulate-version {}",
            config.emulate_version
        ));
    }
    Ok(())
}

/// Applies `--config-file` to `config`: what the file sets replaces each option that was
/// not given explicitly. Returns the file's settings (for the watch groups).
pub fn apply(config: &mut Config) -> Result<FileSettings, String> {
    if config.config_file.is_empty() {
        return Ok(FileSettings::default());
    }
    let path = PathBuf::from(&config.config_file);
    let fs = load(&path)?;
    let name = path.display().to_string();
    if !config.is_explicit("emulate-version") {
        if let Some(v) = fs.emulate {
            config.emulate_version = v;
        }
    }
    check_schema_for_release(config, &fs, &name)?;
    if !config.is_explicit("collectors") {
        if let Some(f) = &fs.counters_file {
            config.collectors = f.clone();
            config.collectors_set = true;
        } else if fs.inline_fields {
            config.collectors = path.clone();
            config.collectors_set = true;
        }
    }
    if !config.is_explicit("collect-interval") {
        if let Some(ms) = fs.interval_ms {
            config.collect_interval = ms as i64;
        }
    }
    let mut set = |long: &str, apply: &mut dyn FnMut(&mut Config)| {
        if !config.is_explicit(long) {
            apply(config);
            config.set_by_file(long);
        }
    };
    if let Some(on) = fs.bind_unbind {
        set("enable-gpu-bind-unbind-watch", &mut |c| {
            c.enable_gpu_bind_unbind_watch = on
        });
    }
    if let Some(p) = &fs.bind_unbind_poll {
        set("gpu-bind-unbind-poll-interval", &mut |c| {
            c.gpu_bind_unbind_poll_interval = p.clone()
        });
    }
    if let Some(on) = fs.exporter_metrics {
        set("enable-exporter-metrics", &mut |c| {
            c.enable_exporter_metrics = on
        });
    }
    if let Some(on) = fs.low_cardinality {
        set("low-cardinality", &mut |c| c.low_cardinality = on);
    }
    if let Some(b) = fs.backend {
        set("backend", &mut |c| c.backend = b);
    }
    if let Some(n) = fs.max_concurrent_scrapes {
        set("max-concurrent-scrapes", &mut |c| {
            c.max_concurrent_scrapes = n
        });
    }
    if let Some(age) = fs.retention.age_s {
        set("watch-max-keep-age", &mut |c| {
            c.watch_max_keep_age = format!("{age}s")
        });
    }
    if let Some(n) = fs.retention.samples {
        set("watch-max-keep-samples", &mut |c| {
            c.watch_max_keep_samples = i64::from(n)
        });
    }
    tracing::info!(
        "applied the configuration file {} (version {})",
        path.display(),
        fs.schema
    );
    Ok(fs)
}

/// Whether a watch-group glob matches a field: its DCGM 4.6 name or any alias of it
/// (`DCGM_FI_DEV_GPU_TEMP` is an alias of `DCGM_FI_DEV_GPU_TEMP_CELSIUS`).
pub fn field_matches(pattern: &str, id: u16) -> bool {
    // A 4.9.0 base-unit metric is watched as its own field or as its legacy one: its name
    // matches both, and a base-unit field also matches by its legacy name.
    let base = |b: &&super::rename::BaseUnit| b.id == id || b.legacy_id == id;
    if super::rename::BASE_UNITS
        .iter()
        .filter(base)
        .any(|b| glob_match(pattern, b.name) || (b.id == id && field_matches(pattern, b.legacy_id)))
    {
        return true;
    }
    let Some(meta) = dcgm_sys::fields::by_id(id) else {
        return false;
    };
    glob_match(pattern, meta.name)
        || dcgm_sys::fields::ALIASES
            .iter()
            .any(|(alias, name)| *name == meta.name && glob_match(pattern, alias))
}

/// `*` (any run) and `?` (one character) glob over ASCII names.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn globs() {
        assert!(glob_match("DCGM_FI_DEV_POWER_*", "DCGM_FI_DEV_POWER_USAGE"));
        assert!(glob_match("*", "X"));
        assert!(glob_match("DCGM_FI_DEV_?PU_TEMP", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(glob_match("*TEMP*", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(!glob_match("DCGM_FI_DEV_POWER_*", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(!glob_match("DCGM", "DCGM_FI"));
    }

    #[test]
    fn a_full_file() {
        let (_d, p) = write(
            "version: 1\nmetrics:\n  file: c.csv\ncollection:\n  interval: 2s\n  watchGroups:\n    - name: power\n      interval: 250ms\n      fields: [\"DCGM_FI_DEV_POWER_*\"]\n    - name: temp\n      interval: 100\n      fields: [DCGM_FI_DEV_GPU_TEMP]\n",
        );
        let fs = load(&p).unwrap();
        assert_eq!(fs.counters_file, Some(p.parent().unwrap().join("c.csv")));
        assert_eq!(fs.interval_ms, Some(2000));
        assert_eq!(
            fs.watch_groups
                .iter()
                .map(|g| (g.name.as_str(), g.interval_ms))
                .collect::<Vec<_>>(),
            [("power", 250), ("temp", 100)]
        );
    }

    #[test]
    fn the_backend_comes_from_the_file_unless_given_explicitly() {
        use crate::config::cli::Backend;
        for schema in [1, 2] {
            let (_d, p) = write(&format!("version: {schema}\nbackend: nvml\n"));
            let path = p.display().to_string();
            let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
            assert_eq!(c.backend, Backend::Auto);
            apply(&mut c).unwrap();
            assert_eq!(c.backend, Backend::Nvml);
            let mut c =
                crate::config::cli::parse_from(["x", "--config-file", &path, "--backend", "dcgm"])
                    .unwrap();
            apply(&mut c).unwrap();
            assert_eq!(c.backend, Backend::Dcgm);
        }
        let (_d, p) = write("version: 2\nbackend: nvlm\n");
        let e = load(&p).unwrap_err();
        assert!(e.contains("backend") && e.contains("nvlm"), "{e}");
    }

    #[test]
    fn low_cardinality_comes_from_the_file_unless_given_explicitly() {
        for schema in [1, 2] {
            let (_d, p) = write(&format!("version: {schema}\nlowCardinality: true\n"));
            let path = p.display().to_string();
            let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
            assert!(!c.low_cardinality);
            apply(&mut c).unwrap();
            assert!(c.low_cardinality);
            let mut c = crate::config::cli::parse_from([
                "x",
                "--config-file",
                &path,
                "--low-cardinality=false",
            ])
            .unwrap();
            apply(&mut c).unwrap();
            assert!(!c.low_cardinality);
        }
        let (_d, p) = write("version: 2\nlowCardinality: often\n");
        assert!(load(&p).unwrap_err().contains("lowCardinality"));
    }

    #[test]
    fn the_emulated_version_comes_from_the_file_unless_given_explicitly() {
        let (_d, p) = write("version: 1\nemulateVersion: 4.8.2\n");
        assert_eq!(load(&p).unwrap().emulate, Some(UpstreamVersion::V4_8_2));
        let path = p.display().to_string();
        let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
        apply(&mut c).unwrap();
        assert_eq!(c.emulate_version, UpstreamVersion::V4_8_2);
        let mut c = crate::config::cli::parse_from([
            "x",
            "--config-file",
            &path,
            "--emulate-version=4.9.0",
        ])
        .unwrap();
        apply(&mut c).unwrap();
        assert_eq!(c.emulate_version, UpstreamVersion::V4_9_0);
    }

    fn parse_text(text: &str) -> Result<FileSettings, String> {
        let (_d, p) = write(text);
        load(&p)
    }

    /// The cases of upstream 4.8.4's `internal/pkg/appconfig/yaml_config_test.go`
    /// (TestParseYAMLConfig, TestParseYAMLConfigRejectsInvalidMaxConcurrentScrapes,
    /// TestParseYAMLConfigRejects{V1CollectionInV2,V2CollectionsInV1,V2WatchSettingsInV1}),
    /// with the part of upstream's message each error must contain.
    #[test]
    fn upstreams_parse_cases() {
        let ok = [
            "version: 2\nsources:\n  dcgm:\n    detectBindUnbind:\n      enabled: true\n      pollInterval: 250ms\n",
            "version: 2\nmetrics:\n  file: /etc/dcgm-exporter/default-counters.csv\ncollections:\n  - name: scrape\n    every: 45s\n    metrics:\n      include: [\"*\"]\n",
            "version: 2\nmetrics:\n  enableExporterMetrics: false\n",
            "version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n",
            "version: 1\ncollection:\n  interval: 30s\n  retention:\n    maxAge: 10m\n    maxSamples: 0\n  watchGroups:\n    - name: fast-thermals\n      interval: 5s\n      retention:\n        maxAge: 0s\n        maxSamples: 2\n      fields:\n        - DCGM_FI_DEV_GPU_TEMP\n",
            "version: 1\nsources:\n  dcgm:\n    detectBindUnbind: {}\n",
            "version: 2\nserver:\n  maxConcurrentScrapes: 8\n",
        ];
        for text in ok {
            parse_text(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
        let bad = [
            ("version: 2\nmetrics:\n  configMap:\n    namespace: default\n", "unknown field `configMap`"),
            ("version: 1\nsources:\n  dcgm:\n    enableBindUnbindWatch: true\n", "unknown field `enableBindUnbindWatch`"),
            ("version: 1\nserver:\n  gpu:\n    detectBindUnbind: true\n", "unknown field `gpu`"),
            ("version: 1\nsources:\n  dcgm:\n    detectBindUnbind:\n      pollInterval: 0s\n", "sources.dcgm.detectBindUnbind.pollInterval must be greater than 0"),
            ("version: 2\nunknown: true\n", "unknown field `unknown`"),
            ("metrics:\n  file: /tmp/counters.csv\n", "1 or 2"),
            ("version: 2\nmetrics:\n  file: /tmp/counters.csv\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n", "exactly one"),
            ("version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: counter\n      help: Duplicate.\n", "duplicates metrics.fields"),
            ("version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n    - name: \"  DCGM_FI_DEV_GPU_TEMP  \"\n      prometheusType: counter\n      help: Duplicate.\n", "duplicates metrics.fields"),
            ("version: 2\nmetrics:\n  file: /tmp/counters.csv\n  file: /tmp/other-counters.csv\n", "duplicate"),
            ("version: 2\n? [metrics]\n: value\n", "line 2"),
            ("version: 2\ncollections:\n  - name: scrape\n    every: 30000\n    metrics:\n      include: [\"*\"]\n", "missing unit"),
            ("version: 2\ncollections:\n  - name: scrape\n    every: 500us\n    metrics:\n      include: [\"*\"]\n", "whole milliseconds"),
            ("version: 2\ncollections:\n  - name: scrape\n    every: 1s\n    metrics:\n      include: [\"*\"]\n  - name: slow\n    every: 20000000000000000ms\n    metrics:\n      include: [DCGM_FI_DEV_GPU_TEMP]\n", "collections[1].every: '20000000000000000ms' is out of range"),
            ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 20000000000000000, fields: [DCGM_FI_DEV_GPU_TEMP]}\n", "collection.watchGroups[0].interval: 20000000000000000 ms is too large"),
            ("version: 1\ncollection:\n  interval: 9223372036854776\n", "collection.interval: 9223372036854776 ms is too large (at most 9223372036854775 milliseconds)"),
            ("version: 2\ncollections:\n  - name: scrape\n    every: 30s\n    metrics: {}\n", "collections[0].metrics.include must not be empty"),
            ("version: 2\ncollections:\n  - name: scrape\n    every: 30s\n    metrics:\n      include: []\n", "collections[0].metrics.include must not be empty"),
            ("version: 2\nserver:\n  maxConcurrentScrapes: 0\n", "server.maxConcurrentScrapes must be greater than 0"),
            ("version: 2\nserver:\n  maxConcurrentScrapes: -1\n", "server.maxConcurrentScrapes must be greater than 0"),
            // Mixing the schemas is refused both ways.
            ("version: 2\ncollection:\n  interval: 30s\n", "unknown field `collection`"),
            ("version: 1\ncollections:\n  - name: scrape\n    every: 30s\n    metrics:\n      include: [\"*\"]\n", "unknown field `collections`"),
            ("version: 1\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 10m\n", "unknown field `watch`"),
            // FuzzParseYAMLConfig's seed: several documents.
            ("version: 2\n---\nversion: 2\n", "multiple YAML documents"),
        ];
        for (text, needle) in bad {
            let e = parse_text(text).expect_err(text);
            assert!(e.contains(needle), "{text}\n=> {e}\n(want {needle:?})");
        }
    }

    /// The rest of yaml_config.go's rules: names, retention limits, the one all-fields
    /// collection, detectBindUnbind only exporter-wide.
    #[test]
    fn collection_and_retention_rules() {
        let bad = [
            ("version: 2\ncollections: []\n", "at least one collection"),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}}\n  - {name: b, every: 2s, metrics: {include: [\"*\"]}}\n", "duplicates the all-fields collection \"a\""),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [DCGM_FI_DEV_GPU_TEMP]}}\n  - {name: a, every: 2s, metrics: {include: [DCGM_FI_DEV_POWER_USAGE]}}\n", "collections[1].name \"a\" is duplicated"),
            ("version: 2\ncollections:\n  - {every: 1s, metrics: {include: [\"*\"]}}\n", "collections[0].name is required"),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\" \"]}}\n", "collections[0].metrics.include[0] is required"),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [X]}, sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 0}}}}\n", "matches no DCGM field"),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}, sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 0}}}}\n", "cannot both be zero"),
            ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}, sources: {dcgm: {detectBindUnbind: {enabled: true}}}}\n", "unknown field `detectBindUnbind`"),
            ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepAge: -1s}\n", "sources.dcgm.watch.maxKeepAge"),
            ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepSamples: -1}\n", "sources.dcgm.watch.maxKeepSamples must not be negative"),
            ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepSamples: 2147483648}\n", "must not exceed 2147483647"),
            ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 1s, fields: [DCGM_FI_DEV_GPU_TEMP], retention: {maxAge: 0s, maxSamples: 0}}\n", "maxAge and maxSamples cannot both be zero"),
            ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 1s, fields: [DCGM_FI_DEV_GPU_TEMP]}\n    - {name: g, interval: 2s, fields: [DCGM_FI_DEV_POWER_USAGE]}\n", "collection.watchGroups[1].name \"g\" is duplicated"),
            ("version: 2\nmetrics: {}\n", "metrics must specify file, fields, or enableExporterMetrics"),
            ("version: 2\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge}\n", "metrics.fields[0].help is required"),
        ];
        for (text, needle) in bad {
            let e = parse_text(text).expect_err(text);
            assert!(e.contains(needle), "{text}\n=> {e}\n(want {needle:?})");
        }
        // TestYAMLConfigApplyToCollections / TestYAMLConfigApplyToWatchRetention: the
        // all-fields collection sets the interval and (over sources.dcgm.watch) the
        // retention; the others become watch groups with their own retention.
        let fs = parse_text(
            "version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 2m\n      maxKeepSamples: 5\ncollections:\n  - name: scrape\n    every: 45s\n    sources: {dcgm: {watch: {maxKeepSamples: 4}}}\n    metrics:\n      include: [\"*\"]\n  - name: fast-thermals\n    every: 5s\n    sources:\n      dcgm:\n        watch:\n          maxKeepAge: 0s\n          maxKeepSamples: 2\n    metrics:\n      include:\n        - DCGM_FI_DEV_GPU_TEMP\n        - DCGM_FI_DEV_POWER_USAGE\n",
        )
        .unwrap();
        assert_eq!((fs.schema, fs.interval_ms), (2, Some(45_000)));
        assert_eq!(
            fs.retention,
            Retention {
                age_s: Some(120.0),
                samples: Some(4)
            }
        );
        assert_eq!(
            fs.watch_groups,
            [WatchGroup {
                name: "fast-thermals".into(),
                interval_ms: 5000,
                fields: vec![
                    "DCGM_FI_DEV_GPU_TEMP".into(),
                    "DCGM_FI_DEV_POWER_USAGE".into()
                ],
                keep_age_s: Some(0.0),
                keep_samples: Some(2),
            }]
        );
    }

    fn applied(text: &str, args: &[&str]) -> Result<(Config, FileSettings), String> {
        let (_d, p) = write(text);
        let path = p.display().to_string();
        let argv: Vec<&str> = ["x", "--config-file", &path]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let mut c = crate::config::cli::parse_from(argv).unwrap();
        let fs = apply(&mut c)?;
        Ok((c, fs))
    }

    /// TestYAMLConfigApplyTo{GPUBindUnbindDetection,MaxConcurrentScrapes,
    /// EnableExporterMetrics} and TestContextToConfigGPUBindUnbindCLIOverridesYAML: the
    /// file sets what no flag set explicitly.
    #[test]
    fn version_2_and_extended_version_1_apply_unless_a_flag_was_given() {
        for text in [
            "version: 2\nsources:\n  dcgm:\n    detectBindUnbind: {enabled: true, pollInterval: 250ms}\n    watch: {maxKeepAge: 2m, maxKeepSamples: 5}\nserver: {maxConcurrentScrapes: 8}\nmetrics: {enableExporterMetrics: true}\n",
            "version: 1\nsources:\n  dcgm:\n    detectBindUnbind: {enabled: true, pollInterval: 250ms}\nserver: {maxConcurrentScrapes: 8}\nmetrics: {enableExporterMetrics: true}\ncollection:\n  retention: {maxAge: 2m, maxSamples: 5}\n",
        ] {
            let (c, _) = applied(text, &[]).unwrap();
            assert!(c.enable_gpu_bind_unbind_watch && c.enable_exporter_metrics, "{text}");
            assert_eq!(c.gpu_bind_unbind_poll_interval, "250ms");
            assert_eq!(c.max_concurrent_scrapes, 8);
            assert_eq!((c.watch_max_keep_age.as_str(), c.watch_max_keep_samples), ("120s", 5));
            assert!(c.is_set("watch-max-keep-age") && !c.is_explicit("watch-max-keep-age"));
            let (c, _) = applied(
                text,
                &[
                    "--enable-gpu-bind-unbind-watch=false",
                    "--max-concurrent-scrapes=3",
                    "--watch-max-keep-age=30s",
                ],
            )
            .unwrap();
            assert!(!c.enable_gpu_bind_unbind_watch);
            assert_eq!(c.max_concurrent_scrapes, 3);
            assert_eq!((c.watch_max_keep_age.as_str(), c.watch_max_keep_samples), ("30s", 5));
        }
    }

    /// 4.8.2 had no configuration file; we read 4.8.3's version 1 there (ours), never 4.8.4's
    /// additions.
    #[test]
    fn emulating_4_8_2_reads_only_the_original_version_1() {
        let v2 = "version: 2\nserver: {maxConcurrentScrapes: 8}\n";
        let e = applied(v2, &["--emulate-version=4.8.2"]).unwrap_err();
        assert!(e.contains("version 2") && e.contains("4.8.2"), "{e}");
        let e = applied(
            "version: 1\nserver: {maxConcurrentScrapes: 8}\n",
            &["--emulate-version=4.8.2"],
        )
        .unwrap_err();
        assert!(e.contains("server") && e.contains("4.8.4"), "{e}");
        // The file's own emulateVersion counts, as the flag does.
        let e = applied(
            "version: 2\nemulateVersion: 4.8.2\nserver: {maxConcurrentScrapes: 8}\n",
            &[],
        )
        .unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        let (c, _) = applied(
            "version: 1\ncollection: {interval: 2s}\n",
            &["--emulate-version=4.8.2"],
        )
        .unwrap();
        assert_eq!(c.collect_interval, 2000);
        applied(v2, &[]).unwrap();
    }

    #[test]
    fn inline_fields_resolve_like_csv_rows() {
        let (_d, p) = write(
            "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: \"Temp, in C.\"\n    - {name: dcgm_power_usage, prometheusType: gauge, help: p}\n",
        );
        assert!(load(&p).unwrap().inline_fields);
        let c = load_counters(&p, true, UpstreamVersion::default()).unwrap();
        assert_eq!(c.all.len(), 2);
        assert_eq!(c.all[0].help, "Temp, in C.");
        assert_eq!(c.all[1].name, "dcgm_power_usage");
    }

    #[test]
    fn errors_name_the_file_key_and_line() {
        let err = |text: &str| {
            let (_d, p) = write(text);
            let e = load(&p).unwrap_err();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            e
        };
        let e = err("version: 1\nmetrics:\n  fiels: []\n");
        assert!(
            e.contains("unknown field `fiels`") && e.contains("line 3"),
            "{e}"
        );
        let e = err("version: 1\ncollection:\n  interval: [1]\n");
        assert!(
            e.contains("collection.interval") || e.contains("line 3"),
            "{e}"
        );
        let e = err("version: 1\ncollection:\n  interval: soon\n");
        assert!(
            e.contains("collection.interval") && e.contains("soon"),
            "{e}"
        );
        let e = err("version: 3\n");
        assert!(e.contains("version: 3") && e.contains("1 or 2"), "{e}");
        let e = err("metrics: {}\n");
        assert!(e.contains("version"), "{e}");
        let e = err(
            "version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_NOPE, prometheusType: gauge, help: h}\n",
        );
        assert!(e.contains("metrics.fields[0] (DCGM_FI_NOPE)"), "{e}");
        let e = err("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: meter, help: h}\n");
        assert!(
            e.contains("metrics.fields[0]") && e.contains("meter"),
            "{e}"
        );
        let e = err("version: 1\ncollection:\n  watchGroups:\n    - {name: x, interval: 1s, fields: [NOPE_*]}\n");
        assert!(
            e.contains("collection.watchGroups[0].fields") && e.contains("NOPE_*"),
            "{e}"
        );
        let e = err("version: 1\nmetrics:\n  file: a.csv\n  fields: [{name: X, prometheusType: gauge, help: h}]\n");
        assert!(e.contains("not both"), "{e}");
        let e = err("version: 1\nemulateVersion: 4.8.3\n");
        assert!(
            e.contains("emulateVersion") && e.contains("4.8.2, 4.8.4 or 4.9.0"),
            "{e}"
        );
        let e = err("version: 1\nextra: 1\n");
        assert!(
            e.contains("unknown field `extra`") && e.contains("line 2"),
            "{e}"
        );
    }
}
