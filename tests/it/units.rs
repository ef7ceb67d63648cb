//! dcgm-exporter 4.9.0's names and base units on the simulator (issue 21, items 2 and 5):
//! the page of 4.9.0 mode against a fixture, converted values against the legacy ones in one
//! scrape, a library that knows the base-unit fields watched directly, and 4.8.x / 4.9.0
//! counters files read across modes.
//!
//! No upstream test pins 4.9.0's page (its sources are not readable here): the fixture's
//! names follow the 4.9.0 release notes, its field ids go-dcgm v1.4611's
//! `TestBaseUnitFieldCanonicalNamesResolve` / `TestBaseUnitFieldLegacyNumericNamesRemainIndependent`
//! (`pkg/dcgm/base_unit_fields_test.go`), and its values are the profile's legacy values
//! converted by hand.

use crate::support::*;
use std::collections::BTreeMap;

fn gpu0(page: &[Sample], name: &str) -> f64 {
    let s: Vec<&Sample> = series(page, name)
        .into_iter()
        .filter(|s| s.label("gpu") == Some("0"))
        .collect();
    assert_eq!(s.len(), 1, "{name}:\n{}", dump(page));
    s[0].value
}

fn v49() -> &'static str {
    "--emulate-version=4.9.0"
}

/// `# TYPE` and `# HELP` lines and GPU 0's value per DCGM metric, in page order.
fn page_summary(text: &str, page: &[Sample]) -> String {
    let mut out = String::new();
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            // DCGM fields only: the renames and units are what the fixture pins (our
            // DCGM_EXP_* rows are the same in every release, and the GPU count is per node).
            if rest.starts_with("DCGM_FI_") {
                out.push_str(line);
                out.push('\n');
                let name = rest.split(' ').next().unwrap_or_default();
                if !seen.contains_key(name) {
                    seen.insert(name.to_string(), ());
                    out.push_str(&format!("{name} {}\n", gpu0(page, name)));
                }
            }
        }
    }
    out
}

#[test]
fn the_4_9_0_page_on_a_dcgm_4_6_simulator_matches_the_fixture() {
    let csv = repo("etc/default-counters-4.9.0.csv");
    let e = exporter()
        .profile("units-fixed.toml")
        .args(&["-f", csv.to_str().unwrap(), v49()])
        .start();
    // NVLink throughput is a rate between two of DCGM's samples: 0 on the first.
    let page = e.scrape_until(30, |p| {
        !series(p, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").is_empty()
            && series(p, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND")
                .iter()
                .any(|s| s.value != 0.0)
    });
    let text = e.get("/metrics").1;
    let got = page_summary(&text, &page);
    let want = std::fs::read_to_string(repo("tests/fixtures/units-4.9.0-page.txt")).unwrap();
    let want: String = want
        .lines()
        .filter(|l| !l.starts_with("## "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(got, want, "stderr:\n{}", e.stderr());
    // The driver version label under its 4.9.0 name, on every series.
    let temp = series(&page, "DCGM_FI_DEV_GPU_TEMP_CELSIUS");
    assert_eq!(
        temp[0].label("DCGM_FI_SYSTEM_DRIVER_VERSION"),
        Some("580.159.04")
    );
    assert!(temp[0].label("DCGM_FI_DRIVER_VERSION").is_none());
    // The start-up log says which metrics are derived and from what.
    e.assert_logged(
        "DCGM_FI_DEV_SM_CLOCK_HERTZ: the library has no field 1603; derived from field 100 \
         (MHz x 10^6)",
    );
}

/// (4.8.x metric, 4.9.0 metric, conversion from the first to the second).
type Pair = (&'static str, &'static str, fn(f64) -> f64);

#[test]
fn converted_values_equal_the_legacy_ones_in_one_scrape() {
    // The 8-GPU default node, values moving: both rows of a pair come from one reading.
    let csv = repo("tests/fixtures/units-both-generations.csv");
    let e = exporter().args(&["-f", csv.to_str().unwrap()]).start();
    let page = e.scrape_until(30, |p| {
        series(p, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND").len() == 8
    });
    let pairs: [Pair; 13] = [
        ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", |v| {
            v * 1e6
        }),
        (
            "DCGM_FI_DEV_MEM_CLOCK",
            "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
            |v| v * 1e6,
        ),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            |v| v / 1000.0,
        ),
        (
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
            |v| v / 100.0,
        ),
        ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_ENC_UTIL_RATIO", |v| {
            v / 100.0
        }),
        ("DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_DEC_UTIL_RATIO", |v| {
            v / 100.0
        }),
        (
            "DCGM_FI_DEV_FB_TOTAL",
            "DCGM_FI_DEV_FB_CAPACITY_BYTES",
            |v| v * 1_048_576.0,
        ),
        ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", |v| {
            v * 1_048_576.0
        }),
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", |v| {
            v * 1_048_576.0
        }),
        (
            "DCGM_FI_DEV_FB_RESERVED",
            "DCGM_FI_DEV_FB_RESERVED_BYTES",
            |v| v * 1_048_576.0,
        ),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
            |v| v * 1e6,
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
            |v| v,
        ),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_BOARD_POWER_WATTS",
            |v| v,
        ),
    ];
    for gpu in 0..8 {
        let g = gpu.to_string();
        let one = |name: &str| -> f64 {
            let s: Vec<&Sample> = series(&page, name)
                .into_iter()
                .filter(|s| s.label("gpu") == Some(g.as_str()))
                .collect();
            assert_eq!(s.len(), 1, "{name} gpu {g}:\n{}", dump(&page));
            s[0].value
        };
        for (legacy, base, f) in pairs {
            let (l, b) = (one(legacy), one(base));
            assert_eq!(b, f(l), "gpu {g}: {base} = {b}, {legacy} = {l}");
        }
        // The generator moves: a ratio is a fraction, not the percent.
        assert!(one("DCGM_FI_DEV_MEMORY_UTIL_RATIO") <= 1.0);
    }
    // In the default (4.8.4) mode DCGM_FI_DEV_GPU_UTIL_RATIO is not in this file; the
    // percent row is exported as written.
    assert!(series(&page, "DCGM_FI_DEV_GPU_UTIL_RATIO").is_empty());
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_UTIL").len(), 8);
}

#[test]
fn a_library_that_knows_the_base_unit_fields_is_read_directly() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("later.toml");
    let fixed = std::fs::read_to_string(repo("etc/sim/units-fixed.toml")).unwrap();
    std::fs::write(
        &profile,
        fixed.replace("seed = 11\n", "seed = 11\nbase_unit_fields = true\n"),
    )
    .unwrap();
    let log = dir.path().join("watches.log");
    let csv = repo("etc/default-counters-4.9.0.csv");
    let e = exporter()
        .args(&["-f", csv.to_str().unwrap(), v49()])
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .env("DCGM_SIM_WATCH_LOG", log.to_str().unwrap())
        .start();
    let page = e.scrape_until(30, |p| {
        !series(p, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").is_empty()
    });
    let watched: Vec<u16> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| l.split("fields=").nth(1))
        .flat_map(|f| f.split(',').map(|x| x.parse::<u16>().unwrap()))
        .collect();
    for id in [
        1603, 1604, 1611, 1613, 1614, 1615, 1616, 1625, 1626, 1627, 1628,
    ] {
        assert!(watched.contains(&id), "field {id} not watched: {watched:?}");
    }
    for id in [100, 101, 156, 203, 204, 206, 207, 250, 251, 252, 253] {
        assert!(
            !watched.contains(&id),
            "legacy field {id} watched: {watched:?}"
        );
    }
    // DCGM keeps whole joules: 123456 from the base-unit field, where the legacy field
    // would give 123456.789.
    assert_eq!(
        gpu0(&page, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"),
        123_456.0
    );
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_SM_CLOCK_HERTZ"), 1_410_000_000.0);
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_GPU_UTIL_RATIO"), 0.37);
    assert_eq!(
        gpu0(&page, "DCGM_FI_DEV_FB_USED_BYTES"),
        10979.0 * 1_048_576.0
    );
    assert!(e
        .stderr()
        .contains("DCGM_FI_DEV_SM_CLOCK_HERTZ: watching field 1603 (Hz) directly"));
}

/// The line of etc/default-counters.csv that starts with `prefix`.
fn line_of(prefix: &str) -> usize {
    std::fs::read_to_string(repo("etc/default-counters.csv"))
        .unwrap()
        .lines()
        .position(|l| l.starts_with(prefix))
        .expect("the row")
        + 1
}

#[test]
fn a_4_8_counters_file_in_4_9_0_mode_is_renamed_with_one_warning_per_row() {
    let old = repo("etc/default-counters.csv");
    let e = exporter()
        .profile("units-fixed.toml")
        .args(&["-f", old.to_str().unwrap(), v49()])
        .start();
    let page = e.scrape_until(30, |p| {
        !series(p, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").is_empty()
    });
    let log = e.stderr();
    let warned = lines_with(&log, "in dcgm-exporter 4.9.0");
    // 11 rows change field and unit; 11 metrics and the driver label keep their field.
    assert_eq!(warned.len(), 23, "{log}");
    assert!(
        warned.iter().any(|l| l.contains(&format!(
            "default-counters.csv:{}: DCGM_FI_DEV_SM_CLOCK (MHz) is \
                 DCGM_FI_DEV_SM_CLOCK_HERTZ (Hz) in dcgm-exporter 4.9.0; exported as \
                 DCGM_FI_DEV_SM_CLOCK_HERTZ",
            line_of("DCGM_FI_DEV_SM_CLOCK,")
        ))),
        "{log}"
    );
    assert!(
        warned.iter().any(|l| l.contains(&format!(
            "default-counters.csv:{}: DCGM_FI_DEV_GPU_TEMP is named \
                 DCGM_FI_DEV_GPU_TEMP_CELSIUS",
            line_of("DCGM_FI_DEV_GPU_TEMP,")
        ))),
        "{log}"
    );
    // The same page as the 4.9.0 file gives, less the row 4.8.x did not have.
    let fixture = std::fs::read_to_string(repo("tests/fixtures/units-4.9.0-page.txt")).unwrap();
    let mut want: Vec<&str> = fixture
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .filter(|n| *n != "DCGM_FI_DEV_FB_CAPACITY_BYTES")
        .collect();
    let mut got: Vec<&str> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_") && s.label("gpu") == Some("0"))
        .map(|s| s.name.as_str())
        .collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_SM_CLOCK_HERTZ"), 1_410_000_000.0);
}

#[test]
fn a_4_9_0_counters_file_loads_in_the_default_mode_on_dcgm_4_6() {
    let csv = repo("etc/default-counters-4.9.0.csv");
    let e = exporter()
        .profile("units-fixed.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(30, |p| !series(p, "DCGM_FI_DEV_SM_CLOCK_HERTZ").is_empty());
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_SM_CLOCK_HERTZ"), 1_410_000_000.0);
    assert_eq!(
        gpu0(&page, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"),
        123_456.789
    );
    // Not by name across versions: in 4.8.x, as upstream 4.8.x reads it, this name is DCGM
    // 4.6's field 203 in percent, and the log says so.
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_GPU_UTIL_RATIO"), 37.0);
    assert!(e.stderr().contains(
        "default-counters-4.9.0.csv:28: DCGM_FI_DEV_GPU_UTIL_RATIO is field 203 in integer percent"
    ));
}

#[test]
fn list_fields_shows_the_base_unit_metrics_and_their_legacy_source() {
    let out = output_within(exporter_command().arg("--list-fields"), QUICK);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let hz = text
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_SM_CLOCK_HERTZ "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        hz.contains(" 1603 ") && hz.ends_with("(DCGM 4.6.1; else field 100 in MHz x 10^6)"),
        "{hz}"
    );
    assert!(text
        .lines()
        .any(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL_RATIO ") && l.contains(" 1613 ")));
    // dcgm-exporter 4.10.0's names: the same fields.
    let tx = text
        .lines()
        .find(|l| l.starts_with("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        tx.contains(" 1009 ")
            && tx.ends_with("(dcgm-exporter 4.10.0's name of DCGM_FI_PROF_PCIE_TX_BYTES)"),
        "{tx}"
    );
}

#[test]
fn a_host_engine_older_than_the_library_gets_the_legacy_field() {
    // The client library knows the base-unit fields (its DCGM_SIM_PROFILE says so); the
    // remote engine, on a DCGM 4.6.0 profile, does not: the rows are derived, not lost.
    let dir = tempfile::tempdir().unwrap();
    let later = dir.path().join("later.toml");
    let fixed = std::fs::read_to_string(repo("etc/sim/units-fixed.toml")).unwrap();
    std::fs::write(
        &later,
        fixed.replace("seed = 11\n", "seed = 11\nbase_unit_fields = true\n"),
    )
    .unwrap();
    let port = free_port();
    let _engine = HostEngine::start(port, Some("units-fixed.toml"));
    let csv = repo("etc/default-counters-4.9.0.csv");
    let e = exporter()
        .args(&["-f", csv.to_str().unwrap(), v49()])
        .args(&["-r", &format!("127.0.0.1:{port}")])
        .env("DCGM_SIM_PROFILE", later.to_str().unwrap())
        .start();
    let page = e.scrape_until(30, |p| {
        !series(p, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").is_empty()
    });
    // Derived: the legacy value / 1000, not DCGM's whole joules.
    assert_eq!(
        gpu0(&page, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"),
        123_456.789
    );
    assert_eq!(gpu0(&page, "DCGM_FI_DEV_SM_CLOCK_HERTZ"), 1_410_000_000.0);
    let log = e.stderr();
    assert!(
        log.contains(
            "DCGM_FI_DEV_SM_CLOCK_HERTZ: the host engine refused field 1603 though the library \
             knows it; derived from field 100"
        ),
        "{log}"
    );
    assert!(
        !log.contains("level=warning msg=\"DCGM_FI_DEV_SM_CLOCK_HERTZ"),
        "{log}"
    );
}

#[test]
fn a_base_unit_label_row_is_converted_too() {
    let (_dir, csv) = temp_file(
        "label.csv",
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t\nDCGM_FI_DEV_FB_CAPACITY_BYTES, label, capacity\n\
         DCGM_FI_DEV_SM_CLOCK_HERTZ, label, clock\n",
    );
    let e = exporter()
        .profile("units-fixed.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(30, |p| {
        series(p, "DCGM_FI_DEV_GPU_TEMP_CELSIUS")
            .first()
            .is_some_and(|s| s.label("DCGM_FI_DEV_SM_CLOCK_HERTZ").is_some())
    });
    let t = series(&page, "DCGM_FI_DEV_GPU_TEMP_CELSIUS")[0];
    assert_eq!(
        t.label("DCGM_FI_DEV_FB_CAPACITY_BYTES"),
        Some("85520809984")
    );
    assert_eq!(t.label("DCGM_FI_DEV_SM_CLOCK_HERTZ"), Some("1410000000"));
}
