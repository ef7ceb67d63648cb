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
//!     hostEngines:                 # ours: several nv-hostengines (each series: engine=NAME)
//!       - {name: vm0, address: "10.0.0.1:5555"}
//!       - {name: vm1, address: "unix:///run/dcgm/vm1.sock"}
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

mod error;
mod globs;
mod model;
#[cfg(test)]
mod tests;
mod v1;
mod v2;

pub use error::{Error, Problem};
pub use globs::{check_watch_groups, field_matches, glob_match};
pub use model::{FileSettings, HostEngine, Retention, WatchGroup};

use crate::config::cli::Config;
use crate::config::counters::{self, Counters};
use crate::config::emulate::UpstreamVersion;
use model::{inline_counters, RawMetrics};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file decoded with the schema its `version` names.
enum Raw {
    V1(v1::RawV1),
    V2(v2::RawV2),
}

impl Raw {
    fn metrics(&self) -> Option<&RawMetrics> {
        match self {
            Raw::V1(r) => r.metrics.as_ref(),
            Raw::V2(r) => r.metrics.as_ref(),
        }
    }
}

fn parse_raw(path: &Path) -> Result<(String, Raw), Error> {
    let name = path.display().to_string();
    let at = |problem| Error::at(&name, problem);
    let text = std::fs::read_to_string(path).map_err(|e| at(Problem::Read(e)))?;
    // serde_norway's messages name the key path and the line ("metrics: unknown field
    // `fiels`, expected `file` or `fields` at line 3 column 3"); one value first so that
    // several documents and repeated keys are refused, as upstream does.
    let mut docs = serde_norway::Deserializer::from_str(&text);
    let first = docs.next().ok_or_else(|| at(Problem::EmptyFile))?;
    let header = serde_norway::Value::deserialize(first).map_err(|e| at(Problem::Yaml(e)))?;
    if docs.next().is_some() {
        return Err(at(Problem::Documents));
    }
    let version = header
        .get("version")
        .ok_or_else(|| at(Problem::NoVersion))?;
    let yaml = |e| at(Problem::Yaml(e));
    let raw = match version.as_u64() {
        Some(1) => Raw::V1(serde_norway::from_str(&text).map_err(yaml)?),
        Some(2) => Raw::V2(serde_norway::from_str(&text).map_err(yaml)?),
        _ => {
            let v = serde_norway::to_string(version).unwrap_or_default();
            return Err(at(Problem::Version(v.trim().to_string())));
        }
    };
    Ok((name, raw))
}

/// Reads and checks a configuration file.
pub fn read(path: &Path) -> Result<FileSettings, Error> {
    let (name, raw) = parse_raw(path)?;
    let model = match &raw {
        Raw::V1(r) => r.model(),
        Raw::V2(r) => r.model(&name)?,
    };
    model.check(&name, path)
}

/// The counters at `path`: a counters CSV, or a configuration file with inline
/// `metrics.fields` (recognised by its `.yaml`/`.yml` extension).
/// `given`: the path was named (flag, env or config file); else a missing default file
/// means the built-in default counter set.
pub fn load_counters(
    path: &Path,
    given: bool,
    version: UpstreamVersion,
) -> Result<Counters, Error> {
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    if !yaml {
        return Ok(counters::load_or_builtin(path, given, version)?);
    }
    let (name, raw) = parse_raw(path)?;
    match raw.metrics().and_then(|m| m.fields.as_ref()) {
        Some(fields) => inline_counters(&name, fields),
        None => Err(Error::at(
            &name,
            Problem::Missing {
                key: "metrics.fields".into(),
            },
        )),
    }
}

/// 4.8.2 reads only the original version 1: a newer schema or key is refused by name.
fn check_schema_for_release(config: &Config, fs: &FileSettings, name: &str) -> Result<(), Error> {
    let release = config.emulate_version;
    if release.at_least_4_8_3() {
        return Ok(());
    }
    if fs.schema == 2 {
        return Err(Error::at(name, Problem::SchemaForRelease(release)));
    }
    if let Some(key) = fs.v1_extension {
        return Err(Error::at(name, Problem::KeyForRelease { key, release }));
    }
    Ok(())
}

/// Applies `--config-file` to `config`: what the file sets replaces each option that was
/// not given explicitly. Returns the file's settings (for the watch groups).
pub fn apply(config: &mut Config) -> Result<FileSettings, Error> {
    if config.config_file.is_empty() {
        return Ok(FileSettings::default());
    }
    let path = PathBuf::from(&config.config_file);
    let fs = read(&path)?;
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
    if let Some(f) = &fs.aggregate_fields {
        set("aggregate", &mut |c| c.aggregate = f.join(","));
    }
    if let Some(p) = &fs.aggregate_period {
        set("aggregate-period", &mut |c| c.aggregate_period = p.clone());
    }
    if let Some(list) = &fs.denylist_modules {
        set("dcgm-denylist-modules", &mut |c| {
            c.dcgm_denylist_modules = list.join(",")
        });
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
