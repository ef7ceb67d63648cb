use super::*;

fn parse(t: &str) -> Result<Counters, String> {
    parse_str("t.csv", t).map_err(|e| e.to_string())
}

fn id(c: &Counter) -> Option<u16> {
    match &c.field {
        CounterField::Dcgm(m) => Some(m.id),
        CounterField::Exp(_) => None,
    }
}

fn names(c: &Counters) -> Vec<&str> {
    c.all.iter().map(|r| r.name.as_str()).collect()
}

fn file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn every_shipped_csv_loads_cleanly() {
    let default = load(&file("etc/default-counters.csv")).unwrap();
    let dcp = load(&file("etc/dcp-metrics-included.csv")).unwrap();
    let compat = load(&file("etc/1.x-compatibility-metrics.csv")).unwrap();
    for c in [&default, &dcp, &compat] {
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }
    // Upstream's 26 active rows in both, plus our 4 `DCGM_EXP_*` rows (cumulative XIDs
    // and clock events, health action, GPU count) in our default; the 1.x names' 20,
    // plus dcgm_low_util_violation, which the Pod GPU Metrics Exporter served
    // (commented out upstream).
    assert_eq!(default.all.len(), 30, "{:?}", names(&default));
    let ours = [
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        "DCGM_EXP_GPU_HEALTH_ACTION",
        "DCGM_EXP_GPU_COUNT",
    ];
    let upstream: Vec<&str> = names(&default)
        .into_iter()
        .filter(|n| !ours.contains(n))
        .collect();
    assert_eq!(upstream, names(&dcp));
    for n in ours {
        assert!(names(&default).contains(&n), "{n} is on by default");
    }
    assert_eq!(compat.all.len(), 21, "{:?}", names(&compat));
    assert_eq!(names(&default)[0], "DCGM_FI_DEV_SM_CLOCK");
    let driver = default
        .all
        .iter()
        .position(|r| r.name == "DCGM_FI_DRIVER_VERSION");
    assert_eq!(default.all[driver.unwrap()].prom_type, PromType::Label);
    // The built-in default is the shipped file.
    assert_eq!(
        builtin_default().unwrap(),
        default_with_source(BUILTIN_SOURCE)
    );
}

/// 4.8.3 made NVLINK_BANDWIDTH_TOTAL a gauge; 4.8.4 changed the help of it and of
/// TOTAL_ENERGY_CONSUMPTION (release notes of 4.6.0-4.8.3 and 4.6.1-4.8.4). The rows are
/// the same fields in both.
#[test]
fn the_built_in_set_follows_the_emulated_release() {
    let new = builtin_default_for(UpstreamVersion::V4_8_4).unwrap();
    let old = builtin_default_for(UpstreamVersion::V4_8_2).unwrap();
    assert_eq!(builtin_default_for(UpstreamVersion::V4_9_0).unwrap(), new);
    assert!(new.warnings.is_empty() && old.warnings.is_empty());
    assert_eq!(names(&new), names(&old));
    let row = |c: &Counters, n: &str| c.all.iter().find(|r| r.name == n).unwrap().clone();
    let bw = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL";
    assert_eq!(row(&old, bw).prom_type, PromType::Counter);
    assert_eq!(row(&new, bw).prom_type, PromType::Gauge);
    assert!(row(&new, bw).help.contains("in MB/s"));
    let energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
    assert!(row(&old, energy).help.contains("since boot"));
    assert!(row(&new, energy)
        .help
        .contains("since the driver was last reloaded"));
    let differing: Vec<&str> = new
        .all
        .iter()
        .zip(&old.all)
        // Line numbers differ (the opt-in rows); what the page shows must not.
        .filter(|(a, b)| (&a.prom_type, &a.help) != (&b.prom_type, &b.help))
        .map(|(a, _)| a.name.as_str())
        .collect();
    assert_eq!(differing, [energy, bw]);
    // The opt-in rows of 4.8.4 resolve once uncommented.
    let optin: String = std::fs::read_to_string(file("etc/default-counters.csv"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("# DCGM_"))
        .filter(|l| l.contains(','))
        .map(|l| format!("DCGM_{l}\n"))
        .collect();
    let parsed = parse_str("opt-in", &optin).unwrap();
    for n in [
        "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY",
        "DCGM_FI_DEV_FABRIC_HEALTH_MASK",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
    ] {
        assert!(parsed.all.iter().any(|r| r.name == n), "{n}");
    }
    let pending = row(&parsed, "DCGM_FI_DEV_RETIRED_PENDING");
    assert_eq!(pending.prom_type, PromType::Gauge);
    assert_eq!(
        row(&parsed, "DCGM_EXP_XID_ERRORS_COUNT").prom_type,
        PromType::Gauge
    );
}

/// `etc/default-counters.csv` parsed under another source name.
fn default_with_source(name: &str) -> Counters {
    let text = std::fs::read_to_string(file("etc/default-counters.csv")).unwrap();
    parse_str(name, &text).unwrap()
}

#[test]
fn upstreams_1x_csv_loads_with_its_pcie_rows_once_and_a_warning_each() {
    let c = load(&file("tests/fixtures/upstream-1x-compatibility.csv")).unwrap();
    assert_eq!(c.all.len(), 20);
    let tx: Vec<&Counter> = c
        .all
        .iter()
        .filter(|r| r.name == "dcgm_fi_prof_pcie_tx_bytes")
        .collect();
    assert_eq!(tx.len(), 1);
    assert_eq!((tx[0].line, tx[0].help.as_str()), (18, "PCIe TX bytes."));
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(c.warnings[0].ends_with(
        "upstream-1x-compatibility.csv:42: dcgm_fi_prof_pcie_tx_bytes is listed again \
         (first on line 18); using line 18"
    ));
    // The rest matches our shipped 1.x file row for row, which also enables
    // dcgm_low_util_violation (see docs/differences.md).
    let ours = load(&file("etc/1.x-compatibility-metrics.csv")).unwrap();
    let mut a = names(&c);
    a.push("dcgm_low_util_violation");
    let mut b = names(&ours);
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

#[test]
fn the_helm_charts_default_configmap_loads() {
    let c = load(&file("tests/fixtures/helm-default-configmap.csv")).unwrap();
    assert!(c.warnings.is_empty());
    let default = load(&file("etc/default-counters.csv")).unwrap();
    let mut expected: Vec<&str> = names(&default)
        .into_iter()
        .filter(|n| !matches!(*n, "DCGM_FI_DEV_FB_RESERVED" | "DCGM_FI_DRIVER_VERSION"))
        // Our own default rows, which upstream's chart does not have.
        .filter(|n| !n.starts_with("DCGM_EXP_"))
        .collect();
    expected.sort_unstable();
    let mut got = names(&c);
    got.sort_unstable();
    assert_eq!(got, expected);
    // `DCGM_FI_DEV_DEC_UTIL ,`: the space before the comma is trimmed.
    assert!(got.contains(&"DCGM_FI_DEV_DEC_UTIL"));
}

#[test]
fn load_names_the_path() {
    let e = load(Path::new("/nonexistent/c.csv"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("/nonexistent/c.csv: "), "{e}");
}

#[test]
fn comments_blank_lines_quotes_and_trimming() {
    let c = parse(
        "# comment\n\nDCGM_FI_DEV_GPU_TEMP ,  gauge ,\"temp, in C\"\r\n\
         DCGM_FI_DEV_SM_CLOCK, gauge, a # not a comment\n\
         DCGM_FI_DEV_MEM_CLOCK, gauge,\"say \"\"hi\"\"\nover two lines\"\n\
         DCGM_FI_DEV_POWER_USAGE, gauge,\n",
    )
    .unwrap();
    let got: Vec<(&str, &str, usize)> = c
        .all
        .iter()
        .map(|r| (r.name.as_str(), r.help.as_str(), r.line))
        .collect();
    assert_eq!(
        got,
        vec![
            ("DCGM_FI_DEV_GPU_TEMP", "temp, in C", 3),
            ("DCGM_FI_DEV_SM_CLOCK", "a # not a comment", 4),
            ("DCGM_FI_DEV_MEM_CLOCK", "say \"hi\"\nover two lines", 5),
            ("DCGM_FI_DEV_POWER_USAGE", "", 7),
        ]
    );
    assert!(c.warnings.is_empty());
    // Line numbers count comment, blank and CRLF lines and multi-line records.
    let e = parse(
        "# c\r\nDCGM_FI_DEV_GPU_TEMP, gauge,\"a\r\nb\"\r\n\r\n# c, gauge, h\r\nX, gauge, h\r\n",
    )
    .unwrap_err();
    assert!(e.starts_with("t.csv:6: unknown DCGM field 'X'"), "{e}");
    // '#' only starts a comment at the start of a line.
    let e = parse(" # x, gauge, y\n").unwrap_err();
    assert!(e.starts_with("t.csv:1: unknown DCGM field '# x'"), "{e}");
    // Tabs are not trimmed.
    let e = parse("DCGM_FI_DEV_GPU_TEMP\t, gauge, h\n").unwrap_err();
    assert!(
        e.starts_with("t.csv:1: unknown DCGM field 'DCGM_FI_DEV_GPU_TEMP\t'"),
        "{e}"
    );
    assert!(parse("DCGM_FI_DEV_GPU_TEMP, gauge\t, h\n")
        .unwrap_err()
        .contains("unknown metric type 'gauge\t'"));
}

#[test]
fn quotes_follow_go_without_lazy_quotes() {
    // An unclosed quote is an error naming the line, not a help text running to the end.
    assert_eq!(
        parse("DCGM_FI_DEV_SM_CLOCK, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge,\"temp\n").unwrap_err(),
        "t.csv:2: malformed CSV: extraneous or missing \" in quoted field (column 35)"
    );
    let e =
        parse("DCGM_FI_DEV_GPU_TEMP, gauge,\"temp\nDCGM_FI_DEV_SM_CLOCK, gauge, h\n").unwrap_err();
    assert!(
        e.starts_with("t.csv:2: malformed CSV: extraneous or missing \"")
            && e.contains("opened on line 1 is not closed"),
        "{e}"
    );
    // Text after a closing quote.
    assert!(parse("DCGM_FI_DEV_GPU_TEMP, gauge,\"temp\" C\n")
        .unwrap_err()
        .starts_with(
            "t.csv:1: malformed CSV: extraneous or missing \" in quoted field (column 34)"
        ));
    // A quote after a space opens nothing: a bare quote, reported before the names.
    assert_eq!(
        parse("NOPE, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, \"a, b\"\n").unwrap_err(),
        "t.csv:2: malformed CSV: bare \" in non-quoted field (column 30); a quoted field \
         must start right after the comma, with no space before the quote"
    );
    assert!(parse("DCGM_FI_DEV_GPU_TEMP, gauge, 5\" screen\n")
        .unwrap_err()
        .contains("bare \""));
}

#[test]
fn column_count_type_and_name_errors_name_the_line() {
    assert_eq!(
        parse("DCGM_FI_DEV_GPU_TEMP, gauge\n").unwrap_err(),
        "t.csv:1: malformed CSV: wrong number of fields: expected 3 (field, type, help), found 2"
    );
    assert_eq!(
        parse("DCGM_FI_DEV_GPU_TEMP, gauge, h\n\nDCGM_FI_DEV_SM_CLOCK, gauge, h, x\n").unwrap_err(),
        "t.csv:3: malformed CSV: wrong number of fields: expected 3 (field, type, help), \
         found 4 (quote a help text that contains commas)"
    );
    // Only an empty line is skipped: one of spaces is a record of one field, in Go too.
    assert!(parse("DCGM_FI_DEV_GPU_TEMP, gauge, h\n   \n")
        .unwrap_err()
        .starts_with("t.csv:2: malformed CSV: wrong number of fields: expected 3 (field, type, help), found 1 (a line of spaces"));
    assert_eq!(
        parse("DCGM_FI_DEV_GPU_TEMP, gaugee, h\n").unwrap_err(),
        "t.csv:1: unknown metric type 'gaugee' for DCGM_FI_DEV_GPU_TEMP \
         (allowed: gauge, counter, histogram, summary or label)"
    );
    assert!(parse("DCGM_FI_DEV_GPU_TEMP, Gauge, h\n")
        .unwrap_err()
        .contains("unknown metric type 'Gauge'"));
    let e = parse("\nDCGM_FI_DEV_GPU_TEMPP, gauge, h\n").unwrap_err();
    assert!(
        e.starts_with("t.csv:2: unknown DCGM field 'DCGM_FI_DEV_GPU_TEMPP' (did you mean ")
            && e.contains("DCGM_FI_DEV_GPU_TEMP,")
            && e.ends_with("?)"),
        "{e}"
    );
    // The name is checked before the type.
    assert!(parse("NOPE, nope, h\n")
        .unwrap_err()
        .contains("unknown DCGM field 'NOPE'"));
    assert_eq!(
        parse(" , gauge, h\n").unwrap_err(),
        "t.csv:1: empty field name"
    );
    // Names are case-sensitive.
    assert!(parse("dcgm_fi_dev_gpu_temp, gauge, h\n")
        .unwrap_err()
        .contains("unknown DCGM field"));
    assert_eq!(
        parse("# only comments\n\n").unwrap_err(),
        "t.csv: no metrics: every line is empty or a comment"
    );
}

#[test]
fn a_metric_listed_twice_keeps_its_first_row_with_one_warning() {
    let c = parse(
        "DCGM_FI_DEV_GPU_TEMP, gauge, first\n# c\nDCGM_FI_DEV_GPU_TEMP, counter, second\n\
         DCGM_EXP_P2P_STATUS, gauge, h\nDCGM_EXP_P2P_STATUS, counter, h2\n",
    )
    .unwrap();
    assert_eq!(c.all.len(), 2);
    assert_eq!(
        (c.all[0].prom_type, c.all[0].help.as_str(), c.all[0].line),
        (PromType::Gauge, "first", 1)
    );
    assert_eq!(c.all[1].prom_type, PromType::Gauge);
    assert_eq!(
        c.warnings,
        [
            "t.csv:3: DCGM_FI_DEV_GPU_TEMP is listed again (first on line 1); using line 1",
            "t.csv:5: DCGM_EXP_P2P_STATUS is listed again (first on line 4); using line 4"
        ]
    );
    // A numeric id exports under the 4.6 name, so it is that metric again.
    let c = parse("DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, h\n150, gauge, h\n").unwrap();
    assert_eq!((c.all.len(), c.warnings.len()), (1, 1));
    // The same field under two names is two metrics.
    let c = parse("dcgm_gpu_temp, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, h\n").unwrap();
    assert_eq!(c.all.iter().map(id).collect::<Vec<_>>(), [Some(150); 2]);
    assert!(c.warnings.is_empty());
}

#[test]
fn legacy_alias_numeric_exp_and_label_rows_resolve() {
    let c = parse(
        "dcgm_gpu_temp, gauge, a\n\
         DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, b\n\
         155, gauge, c\n\
         DCGM_EXP_XID_ERRORS_COUNT, counter, d\n\
         DCGM_FI_DRIVER_VERSION, label, e\n\
         DCGM_FI_DEV_GPU_TEMP, label, f\n\
         DCGM_EXP_CLOCK_EVENTS_TOTAL, gauge, g\n\
         DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, h\n",
    )
    .unwrap();
    assert_eq!(
        c.all.iter().map(id).collect::<Vec<_>>(),
        vec![
            Some(150),
            Some(112),
            Some(155),
            None,
            Some(1),
            Some(150),
            None,
            Some(449)
        ]
    );
    assert_eq!(c.all[0].name, "dcgm_gpu_temp");
    assert_eq!(c.all[1].name, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS");
    assert_eq!(c.all[2].name, "DCGM_FI_DEV_BOARD_POWER_WATTS");
    assert_eq!(c.all[4].prom_type, PromType::Label);
    assert_eq!(c.all[4].prom_type.to_string(), "label");
    let names = |it: &mut dyn Iterator<Item = &Counter>| -> Vec<String> {
        it.map(|c| c.name.clone()).collect()
    };
    assert_eq!(
        names(&mut c.exp()),
        ["DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_TOTAL"]
    );
    assert_eq!(
        c.exp().map(|c| c.field.clone()).collect::<Vec<_>>(),
        [
            CounterField::Exp("DCGM_EXP_XID_ERRORS_COUNT"),
            CounterField::Exp("DCGM_EXP_CLOCK_EVENTS_TOTAL")
        ]
    );
}

/// A `DCGM_EXP_*` row is accepted when its name is one of those given, and is an unknown
/// field otherwise, as any other unknown name.
#[test]
fn exp_names_are_the_callers() {
    let text = "DCGM_EXP_A, gauge, h\n";
    let c = parse_with("t.csv", text, &["DCGM_EXP_B", "DCGM_EXP_A"]).unwrap();
    assert_eq!(c.all[0].field, CounterField::Exp("DCGM_EXP_A"));
    let e = parse_with("t.csv", text, &["DCGM_EXP_B"]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("t.csv:1: unknown DCGM field 'DCGM_EXP_A'"),
        "{e}"
    );
    let e = parse("DCGM_EXP_XID_ERRORS_COUNTS, gauge, h\n").unwrap_err();
    assert!(
        e.starts_with("t.csv:1: unknown DCGM field 'DCGM_EXP_XID_ERRORS_COUNTS'"),
        "{e}"
    );
}

#[test]
fn numeric_ids_exp_types_and_binary_fields() {
    // DCGM 4.6 renamed field 150; DCGM_FI_DEV_GPU_TEMP is now an alias.
    assert_eq!(
        parse("150, gauge, h\n").unwrap().all[0].name,
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
    );
    assert_eq!(
        parse("9999, gauge, h\n").unwrap_err(),
        "t.csv:1: no DCGM field has id 9999"
    );
    assert!(parse("99999999999, gauge, h\n")
        .unwrap_err()
        .contains("no DCGM field has id 99999999999"));
    assert!(parse("+150, gauge, h\n")
        .unwrap_err()
        .contains("unknown DCGM field '+150'"));
    for ty in ["label", "histogram", "summary"] {
        assert!(parse(&format!("DCGM_EXP_GPU_HEALTH_STATUS, {ty}, h\n"))
            .unwrap_err()
            .contains("DCGM_EXP_GPU_HEALTH_STATUS must be a gauge or a counter"));
    }
    let binary = fields::FIELDS
        .iter()
        .find(|f| f.field_type == b'b')
        .expect("the 4.6 table has binary fields");
    for ty in ["gauge", "label"] {
        let e = parse(&format!("{}, {ty}, h\n", binary.name)).unwrap_err();
        assert!(
            e.contains("holds binary data and cannot be exported"),
            "{e}"
        );
        let e = parse(&format!("{}, {ty}, h\n", binary.id)).unwrap_err();
        assert!(e.contains("holds binary data"), "{e}");
    }
}
