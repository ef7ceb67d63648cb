//! The one model both schemas read into ([`Model`]: what a file states, each value with the
//! key it came from), its checks, and what they yield ([`FileSettings`]). The keys both
//! versions share are deserialised here too.

use super::globs::field_matches;
use super::{Error, Problem};
use crate::config::counters::{self, Counters};
use crate::config::duration;
use crate::config::emulate::UpstreamVersion;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMetrics {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    pub(super) fields: Option<Vec<RawField>>,
    #[serde(default)]
    pub(super) enable_exporter_metrics: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawField {
    #[serde(default)]
    name: String,
    #[serde(default)]
    prometheus_type: String,
    #[serde(default)]
    help: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawServer {
    #[serde(default)]
    max_concurrent_scrapes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDetect {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    poll_interval: Option<String>,
}

/// `aggregate` (ours): sub-interval aggregation, `--aggregate` and `--aggregate-period`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAggregate {
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    period: Option<String>,
}

/// `sources.dcgm.hostEngines[]` (ours): one remote host engine of several.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostEngine {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    address: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Interval {
    Millis(u64),
    Text(String),
}

/// What a file states, whichever its schema: each value with its key (for the errors).
pub(super) struct Model<'a> {
    pub schema: u32,
    /// The first key of 4.8.4's additions to version 1 that the file uses, if any.
    pub v1_extension: Option<&'static str>,
    pub emulate_version: Option<&'a str>,
    pub low_cardinality: Option<bool>,
    /// `aggregate` (ours).
    pub aggregate: Option<&'a RawAggregate>,
    pub backend: Option<&'a str>,
    pub server: Option<&'a RawServer>,
    pub metrics: Option<&'a RawMetrics>,
    pub detect: Option<&'a RawDetect>,
    /// `sources.dcgm.hostEngines` (ours).
    pub host_engines: Option<&'a [RawHostEngine]>,
    /// `sources.dcgm.denylistModules` (ours).
    pub denylist_modules: Option<&'a [String]>,
    /// The default cadence (version 1's `collection.interval`).
    pub interval: Option<IntervalText<'a>>,
    /// The default retention (`collection.retention`, `sources.dcgm.watch`).
    pub retention: Option<RetentionText<'a>>,
    pub groups: Vec<Group<'a>>,
    /// A group of every field (`["*"]`) gives the default cadence and retention rather than
    /// being a watch group (version 2's collections; one at most).
    pub all_fields_is_default: bool,
}

/// An interval as written, and its key path.
pub(super) struct IntervalText<'a> {
    pub key: String,
    pub value: &'a Interval,
    /// A number of milliseconds alone is accepted (ours, version 1); upstream reads a Go
    /// duration only.
    pub numbers: bool,
}

/// A retention as written: its key path and each property's own key and value.
pub(super) struct RetentionText<'a> {
    pub path: String,
    pub age: (&'static str, Option<&'a str>),
    pub samples: (&'static str, Option<i64>),
}

impl<'a> RetentionText<'a> {
    /// A retention at `path` whose age and sample-count keys are named `keys`.
    pub(super) fn new(
        path: String,
        keys: [&'static str; 2],
        age: Option<&'a str>,
        samples: Option<i64>,
    ) -> Self {
        let [age_key, samples_key] = keys;
        Self {
            path,
            age: (age_key, age),
            samples: (samples_key, samples),
        }
    }
}

/// A watch group (`collection.watchGroups[]`, `collections[]`) as written.
pub(super) struct Group<'a> {
    /// `collection.watchGroups[i]`, `collections[i]`.
    pub key: String,
    pub name: &'a str,
    pub interval: IntervalText<'a>,
    /// `fields`, `metrics.include`: its key path and the globs.
    pub fields: (String, &'a [String]),
    pub retention: Option<RetentionText<'a>>,
}

/// A watch retention as a file states it: each property present overrides the one it
/// applies over (upstream's WatchRetentionOverride).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Retention {
    /// maxKeepAge in seconds.
    pub age_s: Option<f64>,
    pub samples: Option<i32>,
}

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

/// What a configuration file sets.
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
    /// `aggregate.fields` and `aggregate.period` (ours): `--aggregate` (joined with
    /// commas) and `--aggregate-period`, checked where the flags are.
    pub aggregate_fields: Option<Vec<String>>,
    pub aggregate_period: Option<String>,
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
    /// `sources.dcgm.hostEngines` (ours): each engine's name (the `engine` label) and
    /// address as written; the address is checked where `-r`'s are.
    pub host_engines: Vec<HostEngine>,
    /// `sources.dcgm.denylistModules` (ours, `--dcgm-denylist-modules`): module names or
    /// ids, checked where the flag's are.
    pub denylist_modules: Option<Vec<String>>,
}

/// One entry of `sources.dcgm.hostEngines`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostEngine {
    pub name: String,
    pub address: String,
    /// `sources.dcgm.hostEngines[i]`, for errors about the address.
    pub key: String,
}

impl Model<'_> {
    /// Checks every value; `name` is the file as errors name it, `path` the file itself
    /// (a relative `metrics.file` is read next to it).
    pub(super) fn check(self, name: &str, path: &Path) -> Result<FileSettings, Error> {
        let mut out = FileSettings {
            schema: self.schema,
            v1_extension: self.v1_extension,
            low_cardinality: self.low_cardinality,
            denylist_modules: self.denylist_modules.map(<[String]>::to_vec),
            ..FileSettings::default()
        };
        if let Some(v) = self.emulate_version {
            out.emulate = Some(v.parse().map_err(|e| value(name, "emulateVersion", e))?);
        }
        if let Some(b) = self.backend {
            out.backend = Some(b.parse().map_err(|e| value(name, "backend", e))?);
        }
        if let Some(a) = self.aggregate {
            aggregate(name, a, &mut out)?;
        }
        if let Some(n) = self.server.and_then(|s| s.max_concurrent_scrapes) {
            if n <= 0 {
                let key = "server.maxConcurrentScrapes".into();
                return Err(Error::at(name, Problem::NotPositive { key }));
            }
            out.max_concurrent_scrapes = Some(n);
        }
        if let Some(m) = self.metrics {
            metrics(name, path, m, &mut out)?;
        }
        if let Some(d) = self.detect {
            detect(name, d, &mut out)?;
        }
        if let Some(i) = &self.interval {
            out.interval_ms = Some(millis(name, i)?);
        }
        if let Some(r) = &self.retention {
            out.retention = retention(name, r)?;
        }
        self.check_groups(name, &mut out)?;
        if let Some(list) = self.host_engines {
            out.host_engines = host_engines(name, list)?;
        }
        Ok(out)
    }

    fn check_groups(&self, name: &str, out: &mut FileSettings) -> Result<(), Error> {
        let mut seen = Vec::new();
        let mut default: Option<String> = None;
        for g in &self.groups {
            let group = group_name(name, &g.key, g.name, &mut seen)?;
            let interval_ms = millis(name, &g.interval)?;
            let fields = patterns(name, &g.fields.0, g.fields.1)?;
            let keep = match &g.retention {
                Some(r) => group_retention(name, r)?,
                None => Retention::default(),
            };
            // The all-fields collection gives the default cadence and retention; the
            // others override it for their fields.
            if self.all_fields_is_default && fields == ["*"] {
                if let Some(first) = &default {
                    let (key, first) = (g.fields.0.clone(), first.clone());
                    return Err(Error::at(name, Problem::DuplicateDefault { key, first }));
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
}

/// `sources.dcgm.hostEngines`: at least one engine, each with an address and a name of
/// its own (the label telling their series apart).
fn host_engines(file: &str, list: &[RawHostEngine]) -> Result<Vec<HostEngine>, Error> {
    const KEY: &str = "sources.dcgm.hostEngines";
    if list.is_empty() {
        return Err(Error::at(file, Problem::NoHostEngines));
    }
    let mut out: Vec<HostEngine> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let key = format!("{KEY}[{i}]");
        let address = match e.address.as_deref().map(str::trim) {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => return Err(missing(file, format!("{key}.address"))),
        };
        let name = match e.name.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => return Err(missing(file, format!("{key}.name"))),
        };
        if let Some(first) = out.iter().position(|o| o.name == name) {
            let problem = Problem::EngineNameTaken { key, name, first };
            return Err(Error::at(file, problem));
        }
        out.push(HostEngine { name, address, key });
    }
    Ok(out)
}

/// A positive whole number of milliseconds that DCGM can take in microseconds as an i64
/// (upstream: a Go duration of whole milliseconds; ours in version 1 also a number of
/// milliseconds).
fn millis(file: &str, i: &IntervalText) -> Result<u64, Error> {
    let key = i.key.clone();
    let ms = match i.value {
        Interval::Millis(n) if !i.numbers => {
            return Err(Error::at(file, Problem::MissingUnit { key, value: *n }))
        }
        Interval::Millis(ms) => *ms,
        Interval::Text(t) => {
            let d = duration::parse(t.trim()).map_err(|e| value(file, &key, e))?;
            if d.subsec_nanos() % 1_000_000 != 0 {
                let value = t.to_string();
                return Err(Error::at(file, Problem::SubMillisecond { key, value }));
            }
            d.as_millis() as u64
        }
    };
    if ms == 0 {
        return Err(Error::at(file, Problem::ZeroInterval { key }));
    }
    if ms > duration::MAX_MS {
        return Err(Error::at(file, Problem::TooLarge { key, ms }));
    }
    Ok(ms)
}

fn retention(file: &str, r: &RetentionText) -> Result<Retention, Error> {
    let path = &r.path;
    let ((age_key, age), (samples_key, samples)) = (r.age, r.samples);
    let age_s = age
        .map(|a| {
            duration::parse(a.trim())
                .map(|d| d.as_secs_f64())
                .map_err(|e| value(file, &format!("{path}.{age_key}"), e))
        })
        .transpose()?;
    let samples = samples
        .map(|n| {
            let key = format!("{path}.{samples_key}");
            if n < 0 {
                Err(Error::at(file, Problem::Negative { key }))
            } else {
                i32::try_from(n).map_err(|_| Error::at(file, Problem::TooMany { key }))
            }
        })
        .transpose()?;
    Ok(Retention { age_s, samples })
}

/// A watch group's own retention: it must keep something.
fn group_retention(file: &str, r: &RetentionText) -> Result<Retention, Error> {
    let keep = retention(file, r)?;
    if keep.age_s == Some(0.0) && keep.samples == Some(0) {
        let (key, age, samples) = (r.path.clone(), r.age.0, r.samples.0);
        return Err(Error::at(file, Problem::KeepsNothing { key, age, samples }));
    }
    Ok(keep)
}

fn metrics(name: &str, path: &Path, m: &RawMetrics, out: &mut FileSettings) -> Result<(), Error> {
    out.exporter_metrics = m.enable_exporter_metrics;
    let file = m
        .file
        .as_ref()
        .filter(|f| !f.as_os_str().to_string_lossy().trim().is_empty());
    let fields = m.fields.as_ref().filter(|f| !f.is_empty());
    match (file, fields) {
        (Some(_), Some(_)) => return Err(Error::at(name, Problem::FileAndFields)),
        (None, None) if m.enable_exporter_metrics.is_none() => {
            return Err(Error::at(name, Problem::NoMetrics))
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

fn detect(name: &str, d: &RawDetect, out: &mut FileSettings) -> Result<(), Error> {
    out.bind_unbind = d.enabled;
    if let Some(p) = d.poll_interval.as_deref().map(str::trim) {
        if !p.is_empty() {
            let key = "sources.dcgm.detectBindUnbind.pollInterval";
            let dur = duration::parse(p).map_err(|e| value(name, key, e))?;
            if dur.is_zero() {
                let key = key.into();
                return Err(Error::at(name, Problem::NotPositive { key }));
            }
            out.bind_unbind_poll = Some(p.to_string());
        }
    }
    Ok(())
}

fn patterns(name: &str, key: &str, fields: &[String]) -> Result<Vec<String>, Error> {
    if fields.is_empty() {
        let key = key.into();
        return Err(Error::at(name, Problem::EmptyList { key }));
    }
    let mut out = Vec::new();
    for (j, f) in fields.iter().enumerate() {
        let f = f.trim();
        if f.is_empty() {
            return Err(required(name, format!("{key}[{j}]")));
        }
        if !dcgm_sys::fields::FIELDS
            .iter()
            .any(|m| field_matches(f, m.id))
        {
            let (key, pattern) = (key.into(), f.into());
            return Err(Error::at(name, Problem::NoSuchField { key, pattern }));
        }
        out.push(f.to_string());
    }
    Ok(out)
}

fn group_name(name: &str, key: &str, given: &str, seen: &mut Vec<String>) -> Result<String, Error> {
    let n = given.trim();
    if n.is_empty() {
        return Err(required(name, format!("{key}.name")));
    }
    if seen.iter().any(|s| s == n) {
        let (key, name_given) = (key.into(), n.into());
        let problem = Problem::DuplicateGroup {
            key,
            name: name_given,
        };
        return Err(Error::at(name, problem));
    }
    seen.push(n.to_string());
    Ok(n.to_string())
}

/// `metrics.fields` as counters: each field one counters-CSV record, so that names,
/// aliases and types resolve exactly as in a counters CSV.
pub(super) fn inline_counters(file: &str, fields: &[RawField]) -> Result<Counters, Error> {
    if fields.is_empty() {
        let key = "metrics.fields".into();
        return Err(Error::at(file, Problem::EmptyKey { key }));
    }
    let mut out = Counters::default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        // Upstream's rules: name, type and help required, each name once.
        let key = format!("metrics.fields[{i}]");
        let name = f.name.trim();
        if name.is_empty() {
            return Err(required(file, format!("{key}.name")));
        }
        if let Some(first) = seen.iter().position(|s| *s == name) {
            let name = name.to_string();
            let problem = Problem::DuplicateField {
                index: i,
                first,
                name,
            };
            return Err(Error::at(file, problem));
        }
        seen.push(name);
        if f.prometheus_type.trim().is_empty() {
            return Err(required(file, format!("{key}.prometheusType")));
        }
        if f.help.trim().is_empty() {
            return Err(required(file, format!("{key}.help")));
        }
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let line = format!(
            "{},{},{}",
            quote(&f.name),
            quote(&f.prometheus_type),
            quote(&f.help)
        );
        let mut parsed = counters::parse_str(file, &line).map_err(|e| {
            let problem = match e {
                counters::CountersError::Line { message, .. } => Problem::Field {
                    index: i,
                    name: f.name.clone(),
                    message,
                },
                source => Problem::Fields { index: i, source },
            };
            Error::at(file, problem)
        })?;
        for c in &mut parsed.all {
            c.line = i + 1;
        }
        out.all.extend(parsed.all);
    }
    Ok(out)
}

/// `aggregate` (ours): the fields (names, globs or ids; each a string) and the period (a Go
/// duration); what they name is checked where `--aggregate`'s are.
fn aggregate(name: &str, a: &RawAggregate, out: &mut FileSettings) -> Result<(), Error> {
    if let Some(f) = a
        .fields
        .iter()
        .find(|f| f.trim().is_empty() || f.contains(','))
    {
        let field = f.clone();
        return Err(Error::at(name, Problem::NotOneField { field }));
    }
    if let Some(p) = &a.period {
        duration::parse(p).map_err(|e| value(name, "aggregate.period", e))?;
        out.aggregate_period = Some(p.clone());
    }
    out.aggregate_fields = Some(a.fields.clone());
    Ok(())
}

/// `key`'s value refused by its own parser, in its words.
fn value(file: &str, key: &str, why: impl std::fmt::Display) -> Error {
    let (key, why) = (key.to_string(), why.to_string());
    Error::at(file, Problem::Value { key, why })
}

fn missing(file: &str, key: String) -> Error {
    Error::at(file, Problem::Missing { key })
}

fn required(file: &str, key: String) -> Error {
    Error::at(file, Problem::Required { key })
}
