//! The exporter's own metrics that say what it is and how its collections go:
//! `dcgm_exporter_build_info` (version, commit, the loaded DCGM library's version, mode) and
//! the `dcgm_exporter_collection_seconds` histogram, in embedded and remote mode; the
//! per-field drop counts `dcgm_exporter_field_values_dropped_total{field,reason}` for each
//! reason the simulator can cause (not_supported, blank, not_permissioned, not_found,
//! non_numeric); `dcgm_exporter_entity_series`.

use crate::support::*;

fn build_info(p: &[Sample]) -> Vec<&Sample> {
    series(p, "dcgm_exporter_build_info")
}

fn collections_observed(p: &[Sample]) -> f64 {
    series(p, "dcgm_exporter_collection_seconds_count")
        .first()
        .map_or(0.0, |s| s.value)
}

/// The DCGM version the start-up line names.
fn logged_dcgm_version(e: &Exporter) -> String {
    let log = e.stderr();
    let at = log.find("DCGM library ").expect("start-up line") + "DCGM library ".len();
    log[at..].split_whitespace().next().unwrap().to_string()
}

fn check(e: &Exporter, mode: &str) {
    let page = e.scrape_until(10, |p| collections_observed(p) >= 2.0);
    let info = build_info(&page);
    assert_eq!(info.len(), 1, "{}", dump(&page));
    assert_eq!(info[0].value, 1.0);
    assert_eq!(info[0].label("version"), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(info[0].label("mode"), Some(mode));
    assert_eq!(info[0].label("emulated"), Some("4.8.4"));
    let commit = info[0].label("commit").unwrap_or_default();
    assert!(!commit.is_empty(), "{}", dump(&page));
    assert_eq!(
        info[0].label("dcgm_version"),
        Some(logged_dcgm_version(e).as_str())
    );
    // Every collection lands in the histogram; its buckets are cumulative up to +Inf.
    let before = collections_observed(&page);
    let page = e.scrape_until(10, |p| collections_observed(p) >= before + 2.0);
    let inf = series(&page, "dcgm_exporter_collection_seconds_bucket")
        .into_iter()
        .find(|s| s.label("le") == Some("+Inf"))
        .map(|s| s.value);
    assert_eq!(inf, Some(collections_observed(&page)));
    assert!(prom::promtool_problems(&e.get("/metrics").1).is_empty());
}

#[test]
fn build_info_and_the_collection_histogram_in_embedded_mode() {
    let e = started("one-gpu.toml", &["-c", "200"]);
    check(&e, "embedded");
}

#[test]
fn build_info_and_the_collection_histogram_in_remote_mode() {
    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "200"])
        .start();
    check(&e, "remote");
}

#[test]
fn build_info_names_the_emulated_release() {
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-c", "200", "--emulate-version=4.8.2"])
        .start();
    let page = e.scrape_until(10, |p| !build_info(p).is_empty());
    assert_eq!(build_info(&page)[0].label("emulated"), Some("4.8.2"));
}

fn dropped(p: &[Sample], field: &str, reason: &str) -> f64 {
    series(p, "dcgm_exporter_field_values_dropped_total")
        .iter()
        .find(|s| s.label("field") == Some(field) && s.label("reason") == Some(reason))
        .map_or(0.0, |s| s.value)
}

/// The (field, reason) pairs with a non-zero drop count, sorted.
fn drop_keys(p: &[Sample]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = series(p, "dcgm_exporter_field_values_dropped_total")
        .iter()
        .filter(|s| s.value > 0.0)
        .map(|s| {
            let l = |k| s.label(k).unwrap_or_default().to_string();
            (l("field"), l("reason"))
        })
        .collect();
    v.sort();
    v
}

/// A field that stops reading (unsupported, blank) is named on the page with the reason,
/// while its series are missing.
#[test]
fn field_drops_name_the_field_and_the_reason() {
    let (_dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let e = b.args(&["-c", "200"]).start();
    let page = e.scrape_until(10, |p| collections_observed(p) >= 1.0);
    assert_eq!(dropped(&page, "DCGM_FI_DEV_GPU_TEMP", "not_supported"), 0.0);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    let before: Vec<(String, String)> = drop_keys(&page)
        .into_iter()
        .filter(|(f, _)| f != "DCGM_FI_DEV_GPU_TEMP")
        .collect();
    // 150: DCGM_FI_DEV_GPU_TEMP.
    control(&ctl, "not_supported 3 150");
    let page = e.scrape_until(10, |p| {
        dropped(p, "DCGM_FI_DEV_GPU_TEMP", "not_supported") >= 2.0
    });
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP").len(),
        7,
        "{}",
        dump(&page)
    );
    // The injection adds one (field, reason) pair; what was dropped before (fields this
    // GPU model never has) stays as it was.
    let mut want = before;
    want.push(("DCGM_FI_DEV_GPU_TEMP".into(), "not_supported".into()));
    want.sort();
    assert_eq!(drop_keys(&page), want, "{}", dump(&page));
}

/// An exporter on the 8-GPU profile following a fresh control file, every 200 ms.
fn with_control() -> (tempfile::TempDir, std::path::PathBuf, Exporter) {
    let (dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let e = b.args(&["-c", "200"]).start();
    (dir, ctl, e)
}

/// DCGM's sentinels in a value (what its cache stores when the driver had nothing or
/// refused) drop that entity's series and count under the sentinel's name, field by field:
/// `blank` on GPU 3, `not_permissioned` on GPU 4, `not_found` on GPU 5.
#[test]
fn blank_and_refused_values_are_counted_per_field() {
    let (_dir, ctl, e) = with_control();
    let page = e.scrape_until(10, |p| collections_observed(p) >= 1.0);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    for r in ["blank", "not_permissioned", "not_found"] {
        assert_eq!(dropped(&page, "DCGM_FI_DEV_GPU_TEMP", r), 0.0, "{r}");
    }
    let power = dropped(&page, "DCGM_FI_DEV_POWER_USAGE", "blank");
    // 150: DCGM_FI_DEV_GPU_TEMP.
    control(&ctl, "sentinel 3 150 blank");
    control(&ctl, "sentinel 4 150 not_permissioned");
    control(&ctl, "sentinel 5 150 not_found");
    let page = e.scrape_until(10, |p| {
        ["blank", "not_permissioned", "not_found"]
            .iter()
            .all(|r| dropped(p, "DCGM_FI_DEV_GPU_TEMP", r) >= 2.0)
    });
    let temps: Vec<&str> = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .filter_map(|s| s.label("gpu"))
        .collect();
    assert_eq!(temps, ["0", "1", "2", "6", "7"], "{}", dump(&page));
    // Counted against the field that read it, not its neighbours.
    assert_eq!(dropped(&page, "DCGM_FI_DEV_POWER_USAGE", "blank"), power);

    // Restored: the series come back and the counts stop growing.
    control(&ctl, "restored 3 150");
    control(&ctl, "restored 4 150");
    control(&ctl, "restored 5 150");
    let page = e.scrape_until(10, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 8);
    let blank = dropped(&page, "DCGM_FI_DEV_GPU_TEMP", "blank");
    let collections = collections_observed(&page);
    let page = e.scrape_until(10, |p| collections_observed(p) >= collections + 3.0);
    assert_eq!(dropped(&page, "DCGM_FI_DEV_GPU_TEMP", "blank"), blank);
}

/// A value of the wrong type, text where the CSV row expects a number (a string field such
/// as the VBIOS version listed as a gauge), drops every entity's series of that row and
/// counts as `non_numeric` for it, collection after collection.
#[test]
fn non_numeric_values_are_counted_per_field() {
    let (_dir, csv) = temp_file("counters.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\nDCGM_FI_DEV_VBIOS_VERSION, gauge, not a number\n");
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-c", "200", "-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(10, |p| {
        dropped(p, "DCGM_FI_DEV_VBIOS_VERSION", "non_numeric") >= 16.0
    });
    // One per GPU and collection.
    let n = dropped(&page, "DCGM_FI_DEV_VBIOS_VERSION", "non_numeric");
    assert_eq!(n % 8.0, 0.0, "{}", dump(&page));
    assert!(series(&page, "DCGM_FI_DEV_VBIOS_VERSION").is_empty());
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    let non_numeric: Vec<(String, String)> = drop_keys(&page)
        .into_iter()
        .filter(|(_, r)| r == "non_numeric")
        .collect();
    assert_eq!(
        non_numeric,
        [(
            "DCGM_FI_DEV_VBIOS_VERSION".to_string(),
            "non_numeric".to_string()
        )]
    );
    let later = e.scrape_until(10, |p| {
        dropped(p, "DCGM_FI_DEV_VBIOS_VERSION", "non_numeric") > n
    });
    assert_eq!(
        dropped(&later, "DCGM_FI_DEV_VBIOS_VERSION", "non_numeric") % 8.0,
        0.0
    );
}

/// `dcgm_exporter_entity_series{entity_type}` adds up to the page, type by type.
#[test]
fn entity_series_count_the_page_by_entity_type() {
    let csv = repo("bench/bench-counters.csv");
    let e = exporter()
        .profile("large-bench.toml")
        .args(&["-c", "200", "-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(10, |p| {
        !series(p, "dcgm_exporter_entity_series").is_empty()
            && !series(p, "DCGM_FI_DEV_CPU_TEMP_CELSIUS").is_empty()
    });
    // The counts describe the page published with them: scrape both at once.
    let exported: Vec<&Sample> = page
        .iter()
        .filter(|s| !s.name.starts_with("dcgm_exporter_"))
        .collect();
    let by = |t: &str| {
        series(&page, "dcgm_exporter_entity_series")
            .iter()
            .find(|s| s.label("entity_type") == Some(t))
            .map_or(0, |s| s.value as usize)
    };
    let has = |s: &Sample, k: &str| s.label(k).is_some();
    let count = |f: &dyn Fn(&Sample) -> bool| exported.iter().filter(|s| f(s)).count();
    assert_eq!(
        by("nvlink"),
        count(&|s| has(s, "nvlink")),
        "{}",
        dump(&page)
    );
    assert_eq!(by("cpu_core"), count(&|s| has(s, "cpucore")));
    assert_eq!(by("cpu"), count(&|s| has(s, "cpu") && !has(s, "cpucore")));
    assert_eq!(
        by("nvswitch"),
        count(&|s| has(s, "nvswitch") && !has(s, "nvlink"))
    );
    assert_eq!(by("gpu"), count(&|s| has(s, "gpu") && !has(s, "nvlink")));
    assert!(by("gpu") > 0 && by("nvlink") > 0 && by("cpu_core") > 0 && by("nvswitch") > 0);
    let total: usize = series(&page, "dcgm_exporter_entity_series")
        .iter()
        .map(|s| s.value as usize)
        .sum();
    assert_eq!(total, exported.len());
}

/// Every series of ours a page can carry (the DCGM_EXP_* families, info series, the
/// exporter's own metrics) is named in docs/metrics.md: a large node with every DCGM_EXP
/// row, `--low-cardinality`, an XID and a clock event, so each family has series.
#[test]
fn every_series_of_ours_is_in_the_metrics_reference() {
    let (dir, ctl) = temp_file("control", "");
    let csv = dir.path().join("counters.csv");
    let bench = std::fs::read_to_string(repo("bench/bench-counters.csv")).unwrap();
    std::fs::write(
        &csv,
        format!(
            "{bench}\nDCGM_FI_DRIVER_VERSION, label, driver\n\
             DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, c\nDCGM_EXP_CLOCK_EVENTS_TOTAL, counter, c\n\
             DCGM_EXP_XID_ERRORS_TOTAL, counter, x\nDCGM_EXP_P2P_STATUS, gauge, p\n\
             DCGM_EXP_GPU_HEALTH_ACTION, gauge, a\nDCGM_EXP_GPU_COUNT, gauge, n\n"
        ),
    )
    .unwrap();
    // An empty web configuration (plain HTTP, no users) brings its reload self-metrics.
    let web = write_in(dir.path(), "web.yml", "");
    let e = exporter()
        .profile("large-bench.toml")
        .control(&ctl)
        .args(&[
            "-c",
            "200",
            "-f",
            csv.to_str().unwrap(),
            "--low-cardinality",
            "--web-config-file",
            web.to_str().unwrap(),
        ])
        .start();
    control(&ctl, "xid 1 79");
    control(&ctl, "clock_event 2 0x8");
    let want = [
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        "DCGM_EXP_GPU_HEALTH_STATUS",
        "DCGM_EXP_GPU_HEALTH_ACTION",
        "DCGM_EXP_GPU_COUNT",
        "DCGM_EXP_P2P_STATUS",
        "DCGM_EXP_GPU_INFO",
        "DCGM_EXP_NVSWITCH_INFO",
        "DCGM_EXP_CPU_INFO",
        "dcgm_exporter_build_info",
        "dcgm_exporter_field_values_dropped_total",
        "dcgm_exporter_entity_series",
        "dcgm_exporter_last_successful_collection_timestamp_seconds",
        "dcgm_exporter_web_config_last_reload_successful",
    ];
    let page = e.scrape_until(20, |p| want.iter().all(|w| !series(p, w).is_empty()));
    let reference = std::fs::read_to_string(repo("docs/metrics.md")).unwrap();
    let mut names: Vec<String> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_EXP_") || s.name.starts_with("dcgm_exporter_"))
        .map(|s| {
            // A histogram is documented under its own name.
            let n = s.name.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|x| n.strip_suffix(x).filter(|b| b.ends_with("_seconds")))
                .unwrap_or(n)
                .to_string()
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= want.len() + 5, "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !reference.contains(&format!("`{n}")))
        .collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
}
