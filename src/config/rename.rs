//! dcgm-exporter 4.9.0's metric names and base units, on any DCGM.
//!
//! 4.9.0 exports the default fields under the names DCGM's Field Naming Standard gives them.
//! Some keep their field id (DCGM 4.6 already has the new name, the old one a deprecated
//! alias: [`dcgm_sys::fields::ALIASES`]); the rest are other fields in base units (Hz, J,
//! bytes, bytes/s, 0-1 ratios), which DCGM 4.6.0 lacks. [`BASE_UNITS`] says, for each of
//! those, which legacy field gives the same measurement and the exact conversion; at start
//! the collector asks the loaded library's field table whether it has the base-unit field
//! with the expected value type and unit ([`choose_sources`]) and watches it, or else watches
//! the legacy field and converts its values ([`BaseUnit::convert`]). A field is never taken
//! by name alone across DCGM releases: `DCGM_FI_DEV_GPU_UTIL_RATIO` is field 203 in integer
//! percent in DCGM 4.6 and another field holding a 0-1 double in 4.7.
//!
//! dcgm-exporter 4.10.0 renames four more, same field and unit ([`RENAMED_4_10`]): either
//! name is read in every mode and exported under the emulated release's.
//!
//! The tables are `model::naming::base_units`'s; this module applies them to counter sets.

use super::counters::{Counter, CounterField, Counters};
/// For the integration tests that read them here.
use crate::model::naming::base_units::Op;
use crate::model::naming::base_units::*;
use crate::model::naming::PromType;
use dcgm_sys::fields::{self, FieldMeta};

/// The name dcgm-exporter 4.9.0 exports a 4.8.x row under: a base-unit metric, or DCGM's
/// canonical name of a deprecated `DCGM_FI_*` alias (same field). `None`: not renamed.
pub fn renamed_in_4_9(name: &str) -> Option<Rename> {
    if let Some(b) = by_legacy_name(name) {
        return Some(Rename::Unit(b));
    }
    if name == "DCGM_FI_DEV_GPU_UTIL_RATIO" {
        return None;
    }
    let m = fields::by_name(name)?;
    (name.starts_with("DCGM_FI_") && m.name != name).then_some(Rename::Name(m))
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rename {
    /// Same field, DCGM's canonical name.
    Name(&'static FieldMeta),
    /// Another field, in base units.
    Unit(&'static BaseUnit),
}

/// Which dcgm-exporter generation's names a counter set is read for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// 4.8.x: rows mean what DCGM 4.6 calls them.
    Legacy,
    /// 4.9.0: 4.8.x names become 4.9.0's (one warning per renamed row); a ratio is 0-1.
    V4_9_0,
    /// 4.10.0: as 4.9.0, and the four profiling byte rates take 4.10.0's names.
    V4_10_0,
}

/// The names an emulated release reads counters with.
pub(crate) fn names_of(version: super::emulate::UpstreamVersion) -> Names {
    use super::emulate::UpstreamVersion;
    if version >= UpstreamVersion::V4_10_0 {
        Names::V4_10_0
    } else if version >= UpstreamVersion::V4_9_0 {
        Names::V4_9_0
    } else {
        Names::Legacy
    }
}

/// Reads `counters` for a generation. From 4.9.0 every row under a 4.8.x name is exported
/// under the 4.9.0 name and unit, with one warning naming its line;
/// `DCGM_FI_DEV_GPU_UTIL_RATIO` is the 0-1 ratio. For 4.8.x, `DCGM_FI_DEV_GPU_UTIL_RATIO`
/// stays DCGM 4.6's field 203 in percent, with a warning. The four fields 4.10.0 renamed
/// take the name of the generation, either way, with a warning. Warnings are logged and
/// kept. A `label` row and a metric row of one name are a label and a metric, both kept.
pub(crate) fn for_generation(mut counters: Counters, source: &str, names: Names) -> Counters {
    let mut out = Counters {
        all: Vec::with_capacity(counters.all.len()),
        warnings: std::mem::take(&mut counters.warnings),
    };
    let mut warn = |w: String| {
        tracing::warn!("{w}");
        out.warnings.push(w);
    };
    let mut rows = Vec::with_capacity(counters.all.len());
    for mut c in counters.all {
        if let CounterField::Dcgm(m) = c.field {
            if let Some(w) = rename_row(&mut c, m, source, names) {
                warn(w);
            }
        }
        rows.push(c);
    }
    for c in rows {
        if let Some(prev) = out
            .all
            .iter()
            .find(|p| p.is_listed_again(&c.name, c.prom_type))
        {
            let w = format!(
                "{source}:{}: {} is listed again (first on line {}); using line {}",
                c.line, c.name, prev.line, prev.line
            );
            warn(w);
            continue;
        }
        out.all.push(c);
    }
    out
}

/// Renames one row of field `m` for a generation; the warning to log, if any.
fn rename_row(c: &mut Counter, m: &FieldMeta, source: &str, names: Names) -> Option<String> {
    if let Some(w) = rename_4_10(c, source, names) {
        return Some(w);
    }
    let gpu_util_ratio = c.name == "DCGM_FI_DEV_GPU_UTIL_RATIO" && c.unit.is_none();
    match names {
        Names::Legacy if gpu_util_ratio => Some(format!(
            "{source}:{}: DCGM_FI_DEV_GPU_UTIL_RATIO is field {} in integer percent, as \
             dcgm-exporter 4.8.x exports it; in 4.9.0 mode it is a 0-1 ratio",
            c.line, m.id
        )),
        Names::Legacy => None,
        Names::V4_9_0 | Names::V4_10_0 if gpu_util_ratio => {
            c.unit = by_name("DCGM_FI_DEV_GPU_UTIL_RATIO");
            None
        }
        Names::V4_9_0 | Names::V4_10_0 => rename_4_9(c, source),
    }
}

/// A row under one of the four names 4.10.0 changed, in the generation's name.
fn rename_4_10(c: &mut Counter, source: &str, names: Names) -> Option<String> {
    let (r, w) = if names == Names::V4_10_0 {
        let r = by_4_10_legacy_name(&c.name)?;
        let w = format!(
            "{source}:{}: {} is named {} in dcgm-exporter 4.10.0 (DCGM field {}, same unit); \
             exported as {}",
            c.line, c.name, r.name, r.id, r.name
        );
        (r.name, w)
    } else {
        let r = by_4_10_name(&c.name)?;
        let w = format!(
            "{source}:{}: {} is dcgm-exporter 4.10.0's name of DCGM field {}, named {} before \
             4.10.0 (same unit); exported as {}",
            c.line, c.name, r.id, r.legacy_name, r.legacy_name
        );
        (r.legacy_name, w)
    };
    c.name = r.to_string();
    Some(w)
}

/// A row under a 4.8.x name in 4.9.0's name (and unit); the warning, when renamed.
fn rename_4_9(c: &mut Counter, source: &str) -> Option<String> {
    match renamed_in_4_9(&c.name)? {
        Rename::Name(canon) => {
            let w = format!(
                "{source}:{}: {} is named {} in dcgm-exporter 4.9.0 (DCGM field {}, same unit); \
                 exported as {}",
                c.line, c.name, canon.name, canon.id, canon.name
            );
            c.name = canon.name.to_string();
            Some(w)
        }
        Rename::Unit(b) => {
            let w = format!(
                "{source}:{}: {} ({}) is {} ({}) in dcgm-exporter 4.9.0; exported as {}, its \
                 values converted ({} {})",
                c.line,
                c.name,
                b.conv.from,
                b.name,
                b.conv.to,
                b.name,
                b.conv.from,
                b.conv.op.describe()
            );
            c.name = b.name.to_string();
            c.unit = Some(b);
            if let Some(help) = help_4_9(b.name) {
                c.help = help.to_string();
            }
            Some(w)
        }
    }
}

/// The help text of a row of the built-in 4.9.0 counter set.
fn help_4_9(name: &str) -> Option<&'static str> {
    DEFAULT_4_9_0
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.splitn(3, ',');
            Some((cols.next()?.trim(), cols.nth(1)?.trim()))
        })
        .find(|(n, _)| *n == name)
        .map(|(_, h)| h)
}

/// dcgm-exporter 4.9.0's default counter set, as far as its release notes describe it.
pub(crate) const DEFAULT_4_9_0: &str = include_str!("../../etc/default-counters-4.9.0.csv");
/// How errors and warnings name the built-in 4.9.0 set.
pub(crate) const BUILTIN_4_9_0_SOURCE: &str = "built-in default-counters-4.9.0.csv";

/// The built-in 4.9.0 default counter set.
pub(crate) fn builtin_default_4_9_0() -> Result<Counters, super::counters::CountersError> {
    super::counters::parse_str(BUILTIN_4_9_0_SOURCE, DEFAULT_4_9_0)
        .map(|c| for_generation(c, BUILTIN_4_9_0_SOURCE, Names::V4_9_0))
}

/// dcgm-exporter 4.10.0's default counter set, as far as its release notes describe it
/// (the built-in set of 4.10.0 mode: `counters::builtin_default_for`).
#[cfg(test)]
pub(crate) const DEFAULT_4_10_0: &str = include_str!("../../etc/default-counters-4.10.0.csv");

/// Where a base-unit row's values come from on the loaded library.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Source {
    /// The library has the base-unit field with the expected type and unit.
    Direct,
    /// Derived from the legacy field; the reason the base-unit field is not used.
    Derived(String),
}

/// What a library's field table tells of one field: `(type, unit)`.
pub(crate) type Lookup<'a> = dyn FnMut(u16) -> Option<(u8, String)> + 'a;

/// Decides, for one base-unit metric, from the library's field table.
pub(crate) fn source_of(b: &BaseUnit, lookup: &mut Lookup<'_>) -> Source {
    match lookup(b.id) {
        None => Source::Derived(format!("the library has no field {}", b.id)),
        Some((ty, _)) if !b.conv.base_type.contains(&ty) => Source::Derived(format!(
            "the library's field {} holds type '{}', not {}",
            b.id,
            ty as char,
            type_names(b.conv.base_type)
        )),
        Some((_, unit)) if !unit_matches(&unit, b.conv.base_units) => Source::Derived(format!(
            "the library's field {} is in '{}', not {}",
            b.id,
            unit.trim(),
            b.conv.to
        )),
        Some(_) => Source::Direct,
    }
}

/// Checks that the legacy field still holds what the conversion expects.
pub(crate) fn legacy_ok(b: &BaseUnit, lookup: &mut Lookup<'_>) -> Result<(), String> {
    let expected: &[u8] = if b.conv.op == Op::Percent { INT } else { NUM };
    match lookup(b.legacy_id) {
        None => Err(format!(
            "the library has neither field {} nor field {}",
            b.id, b.legacy_id
        )),
        Some((ty, _)) if !expected.contains(&ty) => Err(format!(
            "the library's field {} holds type '{}', not {} {}",
            b.legacy_id,
            ty as char,
            type_names(expected),
            b.conv.from
        )),
        Some((_, unit)) if !unit_matches(&unit, b.conv.legacy_units) => Err(format!(
            "the library's field {} is in '{}', not {}",
            b.legacy_id,
            unit.trim(),
            b.conv.from
        )),
        Some(_) => Ok(()),
    }
}

/// DCGM's unit text holds three characters (`char unit[4]`): "MB/s" reads "MB/".
fn unit_matches(unit: &str, allowed: &[&str]) -> bool {
    let u = unit.trim();
    allowed
        .iter()
        .any(|a| *a == u || (unit.len() == 3 && a.len() > 3 && a.starts_with(unit)))
}

fn type_names(types: &[u8]) -> &'static str {
    if types == b"d" {
        "a double"
    } else if types == b"i" {
        "an integer"
    } else {
        "a number"
    }
}

/// Binds every base-unit row to its source on this library: the base-unit field when the
/// library has it ([`source_of`]) and the host engine takes it (`engine_has`: a remote
/// engine may be older than the client library), else the legacy field, whose values the
/// collector converts. A row whose legacy field does not hold what the conversion expects either is
/// left out, with a warning (returned, for the log). Returns the bound counters.
pub(crate) fn choose_sources(
    counters: &Counters,
    lookup: &mut Lookup<'_>,
    engine_has: &mut dyn FnMut(u16) -> bool,
) -> (Counters, Vec<String>) {
    let mut out = Counters {
        all: Vec::with_capacity(counters.all.len()),
        warnings: counters.warnings.clone(),
    };
    let mut notes = Vec::new();
    for c in &counters.all {
        let Some(b) = c.unit else {
            out.all.push(c.clone());
            continue;
        };
        let mut c = c.clone();
        let source = match source_of(b, lookup) {
            Source::Direct if !engine_has(b.id) => Source::Derived(format!(
                "the host engine refused field {} though the library knows it",
                b.id
            )),
            other => other,
        };
        match source {
            Source::Direct => {
                notes.push(format!(
                    "{}: watching field {} ({}) directly",
                    c.name, b.id, b.conv.to
                ));
                c.field = CounterField::Dcgm(b.base_meta());
            }
            Source::Derived(why) => {
                if let Err(e) = legacy_ok(b, lookup) {
                    notes.push(format!("skipping {}: {why}, and {e}", c.name));
                    continue;
                }
                notes.push(format!(
                    "{}: {why}; derived from field {} ({} {})",
                    c.name,
                    b.legacy_id,
                    b.conv.from,
                    b.conv.op.describe()
                ));
                c.field = CounterField::Dcgm(b.legacy_meta());
            }
        }
        out.all.push(c);
    }
    (out, notes)
}

/// The value to export for a row read from field `field`: converted when the row is a
/// base-unit metric read from its legacy field.
pub(crate) fn value_of(c: &Counter, field: u16, raw: f64) -> f64 {
    match c.unit {
        Some(b) if field == b.legacy_id => b.convert(raw),
        _ => raw,
    }
}

/// The counter row for a base-unit metric, read from its legacy field until
/// [`choose_sources`] binds it.
pub fn counter(
    b: &'static BaseUnit,
    name: String,
    prom_type: PromType,
    help: String,
    line: usize,
) -> Counter {
    Counter {
        field: CounterField::Dcgm(b.legacy_meta()),
        name,
        prom_type,
        help,
        line,
        unit: Some(b),
    }
}

#[cfg(test)]
mod tests;
