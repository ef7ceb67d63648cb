//! The counters CSV, in dcgm-exporter's format: `<field>, <type>, <help>` per record, read
//! as Go's encoding/csv reads it ([`super::gocsv`]), columns trimmed of spaces only.

use crate::config::emulate::UpstreamVersion;
use crate::model::naming::PromType;
use dcgm_sys::fields::{self, FieldMeta};
use std::path::Path;
use std::sync::OnceLock;

#[derive(Clone, Debug, PartialEq)]
pub enum CounterField {
    Dcgm(&'static FieldMeta),
    /// A derived metric, by its `DCGM_EXP_*` name (one of those given to [`know_exp_names`]).
    Exp(&'static str),
}

/// The `DCGM_EXP_*` names a row may ask for: those the derived collectors serve. Collection
/// owns them and comes after configuration, so start-up, which wires the stages, hands
/// them over before any counters are read (`lifecycle::know_derived_metrics`).
static EXP_NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Sets the `DCGM_EXP_*` names rows may ask for; the first call wins (every caller passes
/// collection's one list).
pub fn know_exp_names(names: impl IntoIterator<Item = &'static str>) {
    let _ = EXP_NAMES.set(names.into_iter().collect());
}

fn exp_names() -> &'static [&'static str] {
    EXP_NAMES.get().map_or_else(unregistered, Vec::as_slice)
}

/// One CSV record.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub field: CounterField,
    /// The metric name: column 1 as written, or the 4.6 name when column 1 is a field id.
    pub name: String,
    pub prom_type: PromType,
    /// Column 3 verbatim (the renderer escapes it).
    pub help: String,
    /// 1-based line of the CSV the record starts on.
    pub line: usize,
    /// A base-unit metric (dcgm-exporter 4.9.0's name): read from the base-unit field where
    /// the library has it, else converted from the legacy field in `field`
    /// (see [`super::rename`]).
    pub unit: Option<&'static crate::model::naming::base_units::BaseUnit>,
}

impl Counter {
    /// Whether a row `name` of type `ty` is this row listed again. A `label` row and a
    /// metric row of one name are a label and a metric, both kept (the XID field as a label
    /// beside its gauge: dcgm-exporter 4.10.0 keeps both).
    pub(crate) fn is_listed_again(&self, name: &str, ty: PromType) -> bool {
        self.name == name && (self.prom_type == PromType::Label) == (ty == PromType::Label)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Records in file order.
    pub all: Vec<Counter>,
    /// What was accepted but deserves a look (a metric listed twice), `file:line: ...`.
    pub warnings: Vec<String>,
}

impl Counters {
    /// Exporter-synthesised records (`DCGM_EXP_*`).
    pub fn exp(&self) -> impl Iterator<Item = &Counter> {
        self.all
            .iter()
            .filter(|c| matches!(c.field, CounterField::Exp(_)))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Line {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: no metrics: every line is empty or a comment")]
    Empty { file: String },
}

/// Reads and parses the CSV at `path`; every error names the path.
pub fn load(path: &Path) -> Result<Counters, CountersError> {
    let text = std::fs::read_to_string(path).map_err(|source| CountersError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let counters = parse_str(&path.display().to_string(), &text)?;
    for w in &counters.warnings {
        tracing::warn!("{w}");
    }
    Ok(counters)
}

/// `etc/default-counters.csv` (4.8.4's set), compiled in: what runs when `-f` was not given
/// and its default path does not exist (a fresh machine without the package's `/etc` files).
const BUILTIN_CSV: &str = include_str!("../../etc/default-counters.csv");
/// 4.8.2's set, for `--emulate-version=4.8.2`.
const BUILTIN_CSV_4_8_2: &str = include_str!("../../etc/default-counters-4.8.2.csv");
/// 4.10.0's set, for `--emulate-version=4.10.0` (its names are 4.10.0's already).
const BUILTIN_CSV_4_10_0: &str = include_str!("../../etc/default-counters-4.10.0.csv");
/// How errors and warnings name the built-in set.
pub(crate) const BUILTIN_SOURCE: &str = "built-in default-counters.csv";

/// The built-in default counter set of the default release (4.8.4).
#[cfg(test)]
pub(crate) fn builtin_default() -> Result<Counters, CountersError> {
    builtin_default_for(UpstreamVersion::default())
}

/// The built-in default counter set of an emulated release: upstream changed types and help
/// texts of its `default-counters.csv` in 4.8.3 and 4.8.4.
pub(crate) fn builtin_default_for(version: UpstreamVersion) -> Result<Counters, CountersError> {
    let text = match version {
        UpstreamVersion::V4_8_2 => BUILTIN_CSV_4_8_2,
        UpstreamVersion::V4_8_4 | UpstreamVersion::V4_9_0 => BUILTIN_CSV,
        UpstreamVersion::V4_10_0 => BUILTIN_CSV_4_10_0,
    };
    parse_str(BUILTIN_SOURCE, text)
}

/// Like [`load`], except that when `path` was not given (it is `-f`'s default) and does not
/// exist, the built-in default set is used, with one log line saying so. A path that was
/// given must exist.
pub(crate) fn load_or_builtin(
    path: &Path,
    given: bool,
    version: UpstreamVersion,
) -> Result<Counters, CountersError> {
    match load(path) {
        Err(CountersError::Read { source, .. })
            if !given && source.kind() == std::io::ErrorKind::NotFound =>
        {
            tracing::info!(
                "no counters file at {} (the -f default); using the built-in default counter set \
                 (dcgm-exporter {version}'s default-counters.csv)",
                path.display()
            );
            builtin_default_for(version)
        }
        other => other,
    }
}

const TYPES: &str = "gauge, counter, histogram, summary or label";

/// Parses CSV text; `source_name` prefixes every error (`<source_name>:<line>: ...`).
pub fn parse_str(source_name: &str, text: &str) -> Result<Counters, CountersError> {
    parse_with(source_name, text, exp_names())
}

/// [`parse_str`] accepting the `DCGM_EXP_*` names in `exp_names`.
pub(crate) fn parse_with(
    source_name: &str,
    text: &str,
    exp_names: &[&'static str],
) -> Result<Counters, CountersError> {
    let err = |line: usize, message: String| CountersError::Line {
        file: source_name.to_string(),
        line,
        message,
    };
    // Every record is read before any is resolved, as dcgm-exporter's ReadAll does: a
    // syntax error anywhere is the one reported.
    let records = super::gocsv::read_all(text, 3).map_err(|e| {
        let (line, message) = malformed(&e);
        err(line, message)
    })?;
    let mut out = Counters::default();
    for rec in records {
        let line = rec.line;
        // Only spaces are trimmed, as dcgm-exporter does (a tab stays part of the name).
        let cols: Vec<&str> = rec.fields.iter().map(|c| c.trim_matches(' ')).collect();
        let (name, ty, help) = (cols[0], cols[1], cols[2]);
        // Resolve the name first, as dcgm-exporter does: an unknown name is the error shown.
        let (field, metric_name, unit) = match crate::model::naming::base_units::resolve(name) {
            // A base-unit name DCGM 4.6 does not know (all but GPU_UTIL_RATIO, which is field
            // 203 there: which one it means depends on the generation, see rename.rs).
            Some((b, n)) if fields::by_name(name).is_none() => {
                (CounterField::Dcgm(b.legacy_meta()), n, Some(b))
            }
            _ => {
                let (f, n) = resolve(name, exp_names).map_err(|m| err(line, m))?;
                (f, n, None)
            }
        };
        let prom_type = PromType::parse(ty).ok_or_else(|| {
            err(
                line,
                format!("unknown metric type '{ty}' for {name} (allowed: {TYPES})"),
            )
        })?;
        check_exportable(&field, prom_type, name, ty).map_err(|m| err(line, m))?;
        // A metric listed twice: dcgm-exporter files its values under the first row
        // (its collector finds the first counter of a field), so the first row wins. Its
        // own 1.x-compatibility CSV lists the PCIe byte counters twice.
        if let Some(prev) = out
            .all
            .iter()
            .find(|c| c.is_listed_again(&metric_name, prom_type))
        {
            out.warnings.push(format!(
                "{source_name}:{line}: {metric_name} is listed again (first on line {}); \
                 using line {}",
                prev.line, prev.line
            ));
            continue;
        }
        // The same field under two names is two metrics, e.g. a 1.x name next to the 4.x
        // one while dashboards migrate.
        out.all.push(Counter {
            field,
            name: metric_name,
            prom_type,
            help: help.to_string(),
            line,
            unit,
        });
    }
    if out.all.is_empty() {
        return Err(CountersError::Empty {
            file: source_name.to_string(),
        });
    }
    Ok(out)
}

/// A `DCGM_EXP_*` row must be a gauge or a counter; a binary field cannot be exported.
fn check_exportable(
    field: &CounterField,
    prom_type: PromType,
    name: &str,
    ty: &str,
) -> Result<(), String> {
    match field {
        CounterField::Exp(_) if !matches!(prom_type, PromType::Gauge | PromType::Counter) => {
            Err(format!("{name} must be a gauge or a counter, not {ty}"))
        }
        CounterField::Dcgm(m) if m.field_type == b'b' => Err(format!(
            "{name} (field {}) holds binary data and cannot be exported",
            m.id
        )),
        _ => Ok(()),
    }
}

/// The line and message of a CSV syntax error, with a hint for the usual mistakes.
fn malformed(e: &super::gocsv::ParseError) -> (usize, String) {
    let line = match e.kind {
        super::gocsv::ErrorKind::FieldCount { .. } => e.start_line,
        _ => e.line,
    };
    let hint = match e.kind {
        super::gocsv::ErrorKind::FieldCount { found, .. } if found > 3 => {
            " (quote a help text that contains commas)"
        }
        super::gocsv::ErrorKind::FieldCount { found: 1, .. } => {
            " (a line of spaces is a record; only an empty line is skipped)"
        }
        _ => "",
    };
    (line, format!("malformed CSV: {e}{hint}"))
}

/// Column 1: a DCGM name (4.6, deprecated alias or 1.x), a `DCGM_EXP_*` name, or a
/// decimal field id (our extension, exported under the 4.6 name). Base-unit names and ids
/// (dcgm-exporter 4.9.0's) are resolved before, by [`crate::model::naming::base_units::resolve`].
fn resolve(name: &str, exp_names: &[&'static str]) -> Result<(CounterField, String), String> {
    if let Some(m) = fields::by_name(name) {
        return Ok((CounterField::Dcgm(m), name.to_string()));
    }
    if let Some(x) = exp_names.iter().find(|x| **x == name) {
        return Ok((CounterField::Exp(x), name.to_string()));
    }
    // dcgm-exporter 4.10.0's names of DCGM 4.6 fields (the generation's name: rename.rs).
    if let Some(r) = crate::model::naming::base_units::by_4_10_name(name) {
        return Ok((CounterField::Dcgm(r.meta()), name.to_string()));
    }
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
        let m = name
            .parse::<u16>()
            .ok()
            .and_then(fields::by_id)
            .ok_or_else(|| format!("no DCGM field has id {name}"))?;
        return Ok((CounterField::Dcgm(m), m.name.to_string()));
    }
    if name.is_empty() {
        return Err("empty field name".into());
    }
    let hint = fields::closest_names(name, 3);
    Err(if hint.is_empty() {
        format!("unknown DCGM field '{name}'")
    } else {
        format!(
            "unknown DCGM field '{name}' (did you mean {}?)",
            hint.join(", ")
        )
    })
}

/// Counters read before start-up handed the names over: a wiring mistake, not an input's.
#[cfg(not(test))]
fn unregistered() -> &'static [&'static str] {
    panic!("counters read before lifecycle::know_derived_metrics")
}

/// Unit tests read counters without start-up: collection's names, as start-up passes them.
#[cfg(test)]
fn unregistered() -> &'static [&'static str] {
    EXP_NAMES.get_or_init(|| crate::collect::exp::names().collect())
}

#[cfg(test)]
mod tests;
