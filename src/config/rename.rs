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
mod tests {
    use super::*;
    use crate::model::naming::base_units::RENAMED_4_10;

    #[test]
    fn the_table_pairs_go_dcgms_ids_with_dcgm_4_6s_legacy_fields() {
        // go-dcgm v1.4611 pkg/dcgm/base_unit_fields_test.go: baseUnitFieldCases.
        let go_dcgm: [(&str, u16, &str, u16); 13] = [
            (
                "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
                1600,
                "DCGM_FI_DEV_BAR1_TOTAL",
                90,
            ),
            (
                "DCGM_FI_DEV_BAR1_USED_BYTES",
                1601,
                "DCGM_FI_DEV_BAR1_USED",
                92,
            ),
            (
                "DCGM_FI_DEV_BAR1_FREE_BYTES",
                1602,
                "DCGM_FI_DEV_BAR1_FREE",
                93,
            ),
            (
                "DCGM_FI_DEV_SM_CLOCK_HERTZ",
                1603,
                "DCGM_FI_DEV_SM_CLOCK",
                100,
            ),
            (
                "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
                1604,
                "DCGM_FI_DEV_MEM_CLOCK",
                101,
            ),
            (
                "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
                1605,
                "DCGM_FI_DEV_VIDEO_CLOCK",
                102,
            ),
            (
                "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ",
                1606,
                "DCGM_FI_DEV_APP_SM_CLOCK",
                110,
            ),
            (
                "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ",
                1607,
                "DCGM_FI_DEV_APP_MEM_CLOCK",
                111,
            ),
            (
                "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
                1608,
                "DCGM_FI_DEV_MAX_SM_CLOCK",
                113,
            ),
            (
                "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
                1609,
                "DCGM_FI_DEV_MAX_MEM_CLOCK",
                114,
            ),
            (
                "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
                1610,
                "DCGM_FI_DEV_MAX_VIDEO_CLOCK",
                115,
            ),
            (
                "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
                1611,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                156,
            ),
            (
                "DCGM_FI_DEV_FAN_SPEED_RATIO",
                1612,
                "DCGM_FI_DEV_FAN_SPEED",
                191,
            ),
        ];
        for (name, id, legacy, legacy_id) in go_dcgm {
            let b = by_name(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(
                (b.id, b.legacy_id, b.since),
                (id, legacy_id, "4.6.1"),
                "{name}"
            );
            // The legacy name resolves to the legacy field in DCGM 4.6 (go-dcgm's
            // TestBaseUnitFieldLegacyNumericNamesRemainIndependent).
            assert_eq!(fields::by_name(legacy).map(|m| m.id), Some(legacy_id));
            assert_eq!(b.legacy_meta().id, legacy_id);
            assert_eq!(b.base_meta().name, name);
            // DCGM 4.6.0 has none of them.
            assert!(fields::by_id(id).is_none());
        }
        for b in BASE_UNITS {
            assert_eq!(b.base_meta().id, b.id);
            assert_eq!(
                b.base_meta().entity_level,
                b.legacy_meta().entity_level,
                "{}",
                b.name
            );
            assert_ne!(b.id, b.legacy_id);
        }
        // The eleven 4.9.0 default rows that change field and unit.
        let changed: Vec<&str> = [
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_ENC_UTIL",
            "DCGM_FI_DEV_DEC_UTIL",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_RESERVED",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        ]
        .into_iter()
        .filter(|n| matches!(renamed_in_4_9(n), Some(Rename::Unit(_))))
        .collect();
        assert_eq!(changed.len(), 11);
    }

    #[test]
    fn watch_group_globs_match_a_base_unit_metric_on_either_field() {
        use super::super::file::field_matches;
        // Derived: read from field 100; direct: field 1603. Either way the 4.9.0 name and the
        // 4.8.x name select it; other fields are not caught.
        for id in [100, 1603] {
            assert!(field_matches("DCGM_FI_DEV_SM_CLOCK_HERTZ", id), "{id}");
            assert!(field_matches("DCGM_FI_DEV_SM_CLOCK*", id), "{id}");
            assert!(field_matches("DCGM_FI_DEV_SM_CLOCK", id), "{id}");
        }
        assert!(!field_matches("DCGM_FI_DEV_SM_CLOCK_HERTZ", 101));
        assert!(!field_matches("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1603));
        assert!(field_matches("DCGM_FI_DEV_GPU_TEMP", 150));
        // 4.10.0's names of fields 1009-1012 select them too, in every mode.
        assert!(field_matches("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", 1009));
        assert!(field_matches("DCGM_FI_PROF_*_BYTES_PER_SECOND", 1012));
        assert!(!field_matches(
            "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
            1010
        ));
    }

    #[test]
    fn conversions_are_exact() {
        let b = |n| by_name(n).unwrap();
        assert_eq!(
            b("DCGM_FI_DEV_SM_CLOCK_HERTZ").convert(1410.0),
            1_410_000_000.0
        );
        assert_eq!(
            b("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").convert(123_456_789.0),
            123_456.789
        );
        assert_eq!(b("DCGM_FI_DEV_GPU_UTIL_RATIO").convert(37.0), 0.37);
        assert_eq!(
            b("DCGM_FI_DEV_FB_USED_BYTES").convert(80_979.0),
            84_912_635_904.0
        );
        assert_eq!(
            b("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND").convert(250.0),
            250_000_000.0
        );
        // The largest MiB value DCGM could report still converts exactly.
        let big = (1u64 << 33) as f64;
        assert_eq!(
            b("DCGM_FI_DEV_FB_FREE_BYTES").convert(big),
            (1u64 << 53) as f64
        );
    }

    #[test]
    fn renames_same_field_and_unit_changes() {
        assert_eq!(
            renamed_in_4_9("DCGM_FI_DEV_GPU_TEMP"),
            Some(Rename::Name(fields::by_id(150).unwrap()))
        );
        assert_eq!(
            renamed_in_4_9("DCGM_FI_DRIVER_VERSION"),
            Some(Rename::Name(fields::by_id(1).unwrap()))
        );
        assert_eq!(
            renamed_in_4_9("DCGM_FI_DEV_GPU_UTIL"),
            by_name("DCGM_FI_DEV_GPU_UTIL_RATIO").map(Rename::Unit)
        );
        // Canonical names, 1.x names and DCGM_EXP_* are not renamed.
        for n in [
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "dcgm_gpu_temp",
            "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        ] {
            assert_eq!(renamed_in_4_9(n), None, "{n}");
        }
    }

    fn lib(table: &'static [(u16, u8, &'static str)]) -> impl FnMut(u16) -> Option<(u8, String)> {
        move |id| {
            table
                .iter()
                .find(|(i, _, _)| *i == id)
                .map(|(_, t, u)| (*t, u.to_string()))
        }
    }

    #[test]
    fn a_base_unit_field_is_used_only_with_the_expected_type_and_unit() {
        let sm = by_name("DCGM_FI_DEV_SM_CLOCK_HERTZ").unwrap();
        let util = by_name("DCGM_FI_DEV_GPU_UTIL_RATIO").unwrap();
        let energy = by_name("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").unwrap();
        // DCGM 4.6.0: no base-unit field.
        let mut v460 = lib(&[
            (100, b'i', ""),
            (203, b'i', ""),
            (156, b'i', " mJ"),
            (449, b'i', "MB/"),
        ]);
        assert!(
            matches!(source_of(sm, &mut v460), Source::Derived(w) if w.contains("no field 1603"))
        );
        assert_eq!(legacy_ok(sm, &mut v460), Ok(()));
        assert_eq!(legacy_ok(energy, &mut v460), Ok(()));
        // "MB/s" does not fit DCGM's four-byte unit text.
        let nvl = by_name("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND").unwrap();
        assert_eq!(legacy_ok(nvl, &mut v460), Ok(()));
        assert!(legacy_ok(nvl, &mut lib(&[(449, b'i', "KB/")])).is_err());
        // A later library with the fields in the expected units.
        let mut later = lib(&[(1603, b'i', "Hz"), (1613, b'd', ""), (1611, b'i', " J")]);
        assert_eq!(source_of(sm, &mut later), Source::Direct);
        assert_eq!(source_of(util, &mut later), Source::Direct);
        assert_eq!(source_of(energy, &mut later), Source::Direct);
        // Hostile: the id exists but holds another unit or type.
        let mut odd = lib(&[(1603, b'i', "MHz"), (1613, b'i', ""), (203, b'd', "")]);
        assert!(matches!(source_of(sm, &mut odd), Source::Derived(w) if w.contains("'MHz'")));
        assert!(matches!(source_of(util, &mut odd), Source::Derived(w) if w.contains("type 'i'")));
        // ... and a legacy percent field that is no longer an integer is not divided.
        assert!(legacy_ok(util, &mut odd)
            .unwrap_err()
            .contains("field 203 holds type 'd'"));
    }

    fn parse(text: &str) -> Counters {
        super::super::counters::parse_str("t.csv", text).unwrap()
    }

    #[test]
    fn choose_sources_binds_each_row_and_value_of_converts_only_legacy_reads() {
        let c = parse(
            "DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, h\nDCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, h\n\
             DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, h\n",
        );
        let c = for_generation(c, "t.csv", Names::V4_9_0);
        let mut later = lib(&[(1603, b'i', "Hz"), (156, b'i', " mJ"), (203, b'i', "")]);
        let (bound, notes) = choose_sources(&c, &mut later, &mut |_| true);
        let ids: Vec<u16> = bound
            .all
            .iter()
            .map(|r| match r.field {
                CounterField::Dcgm(m) => m.id,
                CounterField::Exp(_) => 0,
            })
            .collect();
        assert_eq!(ids, [1603, 156, 203, 150]);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].contains("watching field 1603 (Hz) directly"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("derived from field 156 (mJ / 1000)"),
            "{notes:?}"
        );
        assert_eq!(
            value_of(&bound.all[0], 1603, 1_410_000_000.0),
            1_410_000_000.0
        );
        assert_eq!(value_of(&bound.all[1], 156, 5_000.0), 5.0);
        assert_eq!(value_of(&bound.all[2], 203, 50.0), 0.5);
        assert_eq!(value_of(&bound.all[3], 150, 45.0), 45.0);
        // A library whose legacy field is not what the conversion expects: the row is left out.
        let mut odd = lib(&[(203, b'd', "")]);
        let one = for_generation(
            parse("DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, h\n"),
            "t",
            Names::V4_9_0,
        );
        let (bound, notes) = choose_sources(&one, &mut odd, &mut |_| true);
        assert!(bound.all.is_empty());
        assert!(
            notes[0].starts_with("skipping DCGM_FI_DEV_GPU_UTIL_RATIO"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_4_8_csv_in_4_9_mode_is_renamed_with_a_warning_per_row() {
        let c = parse(
            "# c\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz).\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n\
             DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t2\nDCGM_FI_DRIVER_VERSION, label, d\n\
             dcgm_gpu_temp, gauge, x\nDCGM_EXP_XID_ERRORS_COUNT, gauge, x\n",
        );
        let c = for_generation(c, "old.csv", Names::V4_9_0);
        let names: Vec<&str> = c.all.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "DCGM_FI_DEV_SM_CLOCK_HERTZ",
                "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                "DCGM_FI_SYSTEM_DRIVER_VERSION",
                "dcgm_gpu_temp",
                "DCGM_EXP_XID_ERRORS_COUNT"
            ]
        );
        assert_eq!(
            c.all[0].help,
            help_4_9("DCGM_FI_DEV_SM_CLOCK_HERTZ").unwrap()
        );
        assert!(c.all[0].help.contains("Hz"));
        assert_eq!(c.warnings.len(), 4, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with(
            "old.csv:2: DCGM_FI_DEV_SM_CLOCK (MHz) is DCGM_FI_DEV_SM_CLOCK_HERTZ (Hz) in \
             dcgm-exporter 4.9.0"
        ));
        assert!(c.warnings[1]
            .starts_with("old.csv:3: DCGM_FI_DEV_GPU_TEMP is named DCGM_FI_DEV_GPU_TEMP_CELSIUS"));
        assert!(c.warnings[2].starts_with("old.csv:5: DCGM_FI_DRIVER_VERSION is named"));
        // The renamed GPU_TEMP row comes first, so the row already written in 4.9.0's name
        // is the one listed again.
        assert_eq!(
            c.warnings[3],
            "old.csv:4: DCGM_FI_DEV_GPU_TEMP_CELSIUS is listed again (first on line 3); using line 3"
        );
        // The same file for 4.8.x: unchanged, no warning.
        let legacy = for_generation(
            parse("DCGM_FI_DEV_SM_CLOCK, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n"),
            "old.csv",
            Names::Legacy,
        );
        assert!(legacy.warnings.is_empty());
        assert_eq!(legacy.all[0].name, "DCGM_FI_DEV_SM_CLOCK");
        assert_eq!(legacy.all[0].unit, None);
    }

    #[test]
    fn gpu_util_ratio_is_resolved_per_generation_not_by_name() {
        let text = "DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, h\n";
        let legacy = for_generation(parse(text), "t.csv", Names::Legacy);
        assert_eq!(legacy.all[0].unit, None);
        assert!(legacy.warnings[0].contains("field 203 in integer percent"));
        let v49 = for_generation(parse(text), "t.csv", Names::V4_9_0);
        assert_eq!(v49.all[0].unit.map(|b| b.id), Some(1613));
        assert!(v49.warnings.is_empty());
    }

    #[test]
    fn the_builtin_4_9_0_set_is_the_4_8_set_renamed_plus_fb_capacity() {
        let v49 = builtin_default_4_9_0().unwrap();
        assert!(v49.warnings.is_empty(), "{:?}", v49.warnings);
        let old = super::super::counters::builtin_default().unwrap();
        let renamed = for_generation(old, "x", Names::V4_9_0);
        let mut want: Vec<&str> = renamed.all.iter().map(|r| r.name.as_str()).collect();
        want.push("DCGM_FI_DEV_FB_CAPACITY_BYTES");
        let mut got: Vec<&str> = v49.all.iter().map(|r| r.name.as_str()).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        let label = v49
            .all
            .iter()
            .find(|r| r.prom_type == PromType::Label)
            .unwrap();
        assert_eq!(label.name, "DCGM_FI_SYSTEM_DRIVER_VERSION");
        // Every renamed unit row carries its base-unit binding.
        for r in &v49.all {
            if let Some(b) = by_name(&r.name) {
                assert_eq!(r.unit, Some(b), "{}", r.name);
            }
        }
    }

    #[test]
    fn the_4_10_renames_are_dcgm_4_6s_fields_1009_to_1012_under_names_it_lacks() {
        assert_eq!(RENAMED_4_10.len(), 4);
        for (r, id) in RENAMED_4_10.iter().zip(1009..) {
            assert_eq!(r.id, id, "{}", r.name);
            assert_eq!(r.meta().name, r.legacy_name);
            assert_eq!(r.name, format!("{}_PER_SECOND", r.legacy_name));
            // DCGM 4.6 knows the old name only; no 4.9.0 rename touches either.
            assert!(fields::by_name(r.name).is_none(), "{}", r.name);
            assert_eq!(renamed_in_4_9(r.legacy_name), None);
            assert_eq!(renamed_in_4_9(r.name), None);
        }
    }

    #[test]
    fn either_name_of_a_4_10_rename_is_read_in_every_generation_under_its_own_name() {
        let text = "DCGM_FI_PROF_PCIE_TX_BYTES, gauge, tx\n\
                    DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND, gauge, rx\n\
                    DCGM_FI_DEV_GPU_TEMP, gauge, t\n";
        for (names, want) in [
            (
                Names::Legacy,
                [
                    "DCGM_FI_PROF_PCIE_TX_BYTES",
                    "DCGM_FI_PROF_NVLINK_RX_BYTES",
                    "DCGM_FI_DEV_GPU_TEMP",
                ],
            ),
            (
                Names::V4_9_0,
                [
                    "DCGM_FI_PROF_PCIE_TX_BYTES",
                    "DCGM_FI_PROF_NVLINK_RX_BYTES",
                    "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                ],
            ),
            (
                Names::V4_10_0,
                [
                    "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
                    "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",
                    "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                ],
            ),
        ] {
            let c = for_generation(parse(text), "t.csv", names);
            let got: Vec<(&str, u16)> = c
                .all
                .iter()
                .map(|r| match r.field {
                    CounterField::Dcgm(m) => (r.name.as_str(), m.id),
                    CounterField::Exp(_) => (r.name.as_str(), 0),
                })
                .collect();
            assert_eq!(got, [(want[0], 1009), (want[1], 1012), (want[2], 150)]);
            assert!(c.all.iter().all(|r| r.unit.is_none()), "{names:?}");
            // One warning per row in a name of the other generation, naming its line.
            let w = &c.warnings;
            match names {
                Names::V4_10_0 => assert_eq!(
                    w[0],
                    "t.csv:1: DCGM_FI_PROF_PCIE_TX_BYTES is named \
                     DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND in dcgm-exporter 4.10.0 (DCGM field \
                     1009, same unit); exported as DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
                ),
                _ => assert_eq!(
                    w[0],
                    "t.csv:2: DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND is dcgm-exporter \
                     4.10.0's name of DCGM field 1012, named DCGM_FI_PROF_NVLINK_RX_BYTES before \
                     4.10.0 (same unit); exported as DCGM_FI_PROF_NVLINK_RX_BYTES"
                ),
            }
            let expected = if names == Names::Legacy { 1 } else { 2 };
            assert_eq!(w.len(), expected, "{names:?}: {w:?}");
        }
        // Both names of one field in a 4.10.0 file: one metric, the first row's.
        let both = for_generation(
            parse("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, a\nDCGM_FI_PROF_PCIE_TX_BYTES, gauge, b\n"),
            "t.csv",
            Names::V4_10_0,
        );
        assert_eq!(both.all.len(), 1);
        assert_eq!(both.all[0].help, "a");
        assert!(both.warnings[1].contains("is listed again (first on line 1)"));
    }

    #[test]
    fn a_label_row_and_a_metric_row_of_one_name_are_both_kept() {
        // The XID field as a label beside its gauge, in 4.8.x's names (one name) and in a
        // 4.9.0 file that kept the label's 4.8.x name (renamed to the gauge's).
        for (text, names) in [
            (
                "DCGM_FI_DEV_XID_ERRORS, label, l\nDCGM_FI_DEV_XID_ERRORS, gauge, g\n",
                Names::Legacy,
            ),
            (
                "DCGM_FI_DEV_XID_ERRORS, label, l\nDCGM_FI_DEV_XID_ERROR, gauge, g\n",
                Names::V4_10_0,
            ),
        ] {
            let c = for_generation(parse(text), "t.csv", names);
            let types: Vec<PromType> = c.all.iter().map(|r| r.prom_type).collect();
            assert_eq!(types, [PromType::Label, PromType::Gauge], "{names:?}");
            assert_eq!(c.all[0].name, c.all[1].name);
            assert!(
                !c.warnings.iter().any(|w| w.contains("listed again")),
                "{:?}",
                c.warnings
            );
        }
        // Two label rows of one name are still one label.
        let c = for_generation(
            parse("DCGM_FI_DRIVER_VERSION, label, a\nDCGM_FI_DRIVER_VERSION, label, b\n"),
            "t.csv",
            Names::Legacy,
        );
        assert_eq!(c.all.len(), 1);
    }

    #[test]
    fn the_builtin_4_10_0_set_is_4_9_0s_with_the_pcie_rates_renamed() {
        let v410 = for_generation(
            super::super::counters::parse_str("x", DEFAULT_4_10_0).unwrap(),
            "x",
            Names::V4_10_0,
        );
        assert!(v410.warnings.is_empty(), "{:?}", v410.warnings);
        let v49 = builtin_default_4_9_0().unwrap();
        let renamed = for_generation(v49.clone(), "x", Names::V4_10_0);
        assert_eq!(renamed.warnings.len(), 2, "{:?}", renamed.warnings);
        let names =
            |c: &Counters| -> Vec<String> { c.all.iter().map(|r| r.name.clone()).collect() };
        assert_eq!(names(&v410), names(&renamed));
        for (a, b) in v410.all.iter().zip(&v49.all) {
            assert_eq!(
                (a.prom_type, &a.help, a.unit),
                (b.prom_type, &b.help, b.unit)
            );
        }
        let n = names(&v410);
        for r in &RENAMED_4_10[..2] {
            assert!(n.contains(&r.name.to_string()) && !n.contains(&r.legacy_name.to_string()));
        }
        // The NVLink rates are optional (commented out), as in 4.10.0's notes.
        assert!(DEFAULT_4_10_0.contains("\n# DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND,"));
        assert_eq!(
            super::super::counters::builtin_default_for(
                super::super::emulate::UpstreamVersion::V4_10_0
            )
            .unwrap(),
            super::super::counters::parse_str(
                super::super::counters::BUILTIN_SOURCE,
                DEFAULT_4_10_0
            )
            .unwrap()
        );
    }

    #[test]
    fn each_release_reads_counters_with_its_generations_names() {
        use super::super::emulate::UpstreamVersion::*;
        let got = [V4_8_2, V4_8_4, V4_9_0, V4_10_0].map(names_of);
        assert_eq!(
            got,
            [Names::Legacy, Names::Legacy, Names::V4_9_0, Names::V4_10_0]
        );
    }
}
