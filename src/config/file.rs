//! `--config-file`: the newer dcgm-exporter's YAML configuration.
//!
//! ```yaml
//! version: 1
//! metrics:
//!   file: /etc/dcgm-exporter/default-counters.csv   # or, instead of a CSV:
//!   fields:
//!     - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: "GPU temperature (in C)."}
//! collection:
//!   interval: 30s                # a Go duration, or milliseconds as a number
//!   watchGroups:
//!     - {name: power, interval: 1s, fields: ["DCGM_FI_DEV_POWER_*"]}
//! ```
//!
//! A flag or environment variable that is set explicitly wins over the file. Unknown keys and
//! wrong types are errors naming the file, the key and the line. A configuration with inline
//! `metrics.fields` is its own counters source: reloads (SIGHUP, a change on disk) re-read
//! its fields.

use crate::collect::WatchGroup;
use crate::config::cli::Config;
use crate::config::counters::{self, Counters};
use crate::config::emulate::UpstreamVersion;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    version: u32,
    /// Ours: the upstream release to emulate (`--emulate-version`).
    #[serde(default, rename = "emulateVersion")]
    emulate_version: Option<String>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    collection: Option<RawCollection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    fields: Option<Vec<RawField>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawField {
    name: String,
    prometheus_type: String,
    #[serde(default)]
    help: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCollection {
    #[serde(default)]
    interval: Option<Interval>,
    #[serde(default)]
    watch_groups: Vec<RawWatchGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatchGroup {
    name: String,
    interval: Interval,
    fields: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Interval {
    Millis(u64),
    Text(String),
}

impl Interval {
    fn millis(&self, file: &str, key: &str) -> Result<u64, String> {
        let ms = match self {
            Interval::Millis(ms) => *ms,
            Interval::Text(t) => crate::config::duration::parse(t)
                .map_err(|e| format!("{file}: {key}: {e}"))?
                .as_millis() as u64,
        };
        if ms == 0 {
            return Err(format!("{file}: {key}: must be at least 1ms"));
        }
        Ok(ms)
    }
}

/// What a configuration file sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileSettings {
    /// `metrics.file`.
    pub counters_file: Option<PathBuf>,
    /// `metrics.fields` were given: the file itself is the counters source.
    pub inline_fields: bool,
    /// `collection.interval` in milliseconds.
    pub interval_ms: Option<u64>,
    pub watch_groups: Vec<WatchGroup>,
    /// `emulateVersion` (ours).
    pub emulate: Option<UpstreamVersion>,
}

fn parse_raw(path: &Path) -> Result<(String, Raw), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    // serde_norway's message names the key path and the line ("metrics: unknown field
    // `fiels`, expected `file` or `fields` at line 3 column 3").
    let raw: Raw = serde_norway::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    if raw.version != 1 {
        return Err(format!(
            "{name}: version: {} is not supported (only version 1)",
            raw.version
        ));
    }
    Ok((name, raw))
}

/// Reads and checks a configuration file.
pub fn load(path: &Path) -> Result<FileSettings, String> {
    let (name, raw) = parse_raw(path)?;
    let mut out = FileSettings::default();
    if let Some(v) = &raw.emulate_version {
        out.emulate = Some(
            v.parse()
                .map_err(|e| format!("{name}: emulateVersion: {e}"))?,
        );
    }
    if let Some(m) = &raw.metrics {
        if m.file.is_some() && m.fields.is_some() {
            return Err(format!(
                "{name}: metrics: give either file or fields, not both"
            ));
        }
        out.counters_file = m.file.as_ref().map(|f| {
            // Relative to the configuration file, as a user writing it next to it expects.
            match path.parent() {
                Some(dir) if f.is_relative() => dir.join(f),
                _ => f.clone(),
            }
        });
        if let Some(fields) = &m.fields {
            // Checked now so that a bad field stops the start.
            inline_counters(&name, fields)?;
            out.inline_fields = true;
        }
    }
    if let Some(c) = &raw.collection {
        if let Some(i) = &c.interval {
            out.interval_ms = Some(i.millis(&name, "collection.interval")?);
        }
        for (i, g) in c.watch_groups.iter().enumerate() {
            let key = format!("collection.watchGroups[{i}]");
            if g.fields.is_empty() {
                return Err(format!("{name}: {key}.fields: empty"));
            }
            if let Some(bad) = g.fields.iter().find(|p| {
                !dcgm_sys::fields::FIELDS
                    .iter()
                    .any(|f| field_matches(p, f.id))
            }) {
                return Err(format!(
                    "{name}: {key}.fields: '{bad}' matches no DCGM field"
                ));
            }
            out.watch_groups.push(WatchGroup {
                name: g.name.clone(),
                interval_ms: g.interval.millis(&name, &format!("{key}.interval"))?,
                fields: g.fields.clone(),
            });
        }
    }
    Ok(out)
}

fn inline_counters(file: &str, fields: &[RawField]) -> Result<Counters, String> {
    if fields.is_empty() {
        return Err(format!("{file}: metrics.fields: empty"));
    }
    let mut out = Counters::default();
    for (i, f) in fields.iter().enumerate() {
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
pub fn load_counters(path: &Path, given: bool) -> Result<Counters, String> {
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    if !yaml {
        return counters::load_or_builtin(path, given).map_err(|e| e.to_string());
    }
    let (name, raw) = parse_raw(path)?;
    match raw.metrics.and_then(|m| m.fields) {
        Some(fields) => inline_counters(&name, &fields),
        None => Err(format!("{name}: metrics.fields: missing")),
    }
}

/// Applies `--config-file` to `config`: what the file sets replaces each option that was
/// not given explicitly. Returns the file's settings (for the watch groups).
pub fn apply(config: &mut Config) -> Result<FileSettings, String> {
    if config.config_file.is_empty() {
        return Ok(FileSettings::default());
    }
    let path = PathBuf::from(&config.config_file);
    let fs = load(&path)?;
    if !config.is_explicit("collectors") {
        if let Some(f) = &fs.counters_file {
            config.collectors = f.clone();
            config.collectors_set = true;
        } else if fs.inline_fields {
            config.collectors = path.clone();
            config.collectors_set = true;
        }
    }
    if !config.is_explicit("emulate-version") {
        if let Some(v) = fs.emulate {
            config.emulate_version = v;
        }
    }
    if !config.is_explicit("collect-interval") {
        if let Some(ms) = fs.interval_ms {
            config.collect_interval = ms as i64;
        }
    }
    tracing::info!("applied the configuration file {}", path.display());
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

    #[test]
    fn inline_fields_resolve_like_csv_rows() {
        let (_d, p) = write(
            "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: \"Temp, in C.\"\n    - {name: dcgm_power_usage, prometheusType: gauge}\n",
        );
        assert!(load(&p).unwrap().inline_fields);
        let c = load_counters(&p, true).unwrap();
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
        let e = err("version: 2\n");
        assert!(e.contains("version: 2"), "{e}");
        let e = err("metrics: {}\n");
        assert!(e.contains("version"), "{e}");
        let e = err(
            "version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_NOPE, prometheusType: gauge}\n",
        );
        assert!(e.contains("metrics.fields[0] (DCGM_FI_NOPE)"), "{e}");
        let e = err("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: meter}\n");
        assert!(
            e.contains("metrics.fields[0]") && e.contains("meter"),
            "{e}"
        );
        let e = err("version: 1\ncollection:\n  watchGroups:\n    - {name: x, interval: 1s, fields: [NOPE_*]}\n");
        assert!(
            e.contains("collection.watchGroups[0].fields") && e.contains("NOPE_*"),
            "{e}"
        );
        let e = err("version: 1\nmetrics:\n  file: a.csv\n  fields: []\n");
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
