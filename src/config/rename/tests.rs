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
    assert!(matches!(source_of(sm, &mut v460), Source::Derived(w) if w.contains("no field 1603")));
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
    let names = |c: &Counters| -> Vec<String> { c.all.iter().map(|r| r.name.clone()).collect() };
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
        super::super::counters::parse_str(super::super::counters::BUILTIN_SOURCE, DEFAULT_4_10_0)
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
