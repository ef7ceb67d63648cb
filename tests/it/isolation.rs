//! A piece of the collection that DCGM refuses (the profiling module absent, a failing P2P
//! query, CPUs without DCGM's sysmon module) costs only its own series, against the
//! simulator switches that reproduce what the real DCGM 4.6 answers (tests/it/real_dcgm.rs).

use crate::support::*;

fn profile(dir: &std::path::Path, toml: &str) -> String {
    let p = dir.join("node.toml");
    std::fs::write(&p, toml).unwrap();
    p.display().to_string()
}

fn total(page: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    page.iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

#[test]
fn without_the_profiling_module_the_default_counters_load_minus_the_profiling_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = profile(
        dir.path(),
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\nprofiling_module = false\n",
    );
    let e = exporter().env("DCGM_SIM_PROFILE", &p).start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 2);
    assert_eq!(series(&page, "DCGM_FI_DEV_FB_USED").len(), 2);
    assert!(page.iter().all(|s| !s.name.starts_with("DCGM_FI_PROF_")));
    let log = e.stderr();
    assert_profiling_rows_skipped_once(&log);
    assert!(log.contains("ModuleNotLoaded"), "{log}");
    assert_eq!(
        total(
            &page,
            "dcgm_exporter_collections_total",
            &[("result", "error")]
        ),
        0.0
    );
}

#[test]
fn a_failing_p2p_query_is_counted_logged_once_and_the_rest_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let p = profile(
        dir.path(),
        "[gpus]\ncount = 3\nmodel = \"NVIDIA H100 80GB HBM3\"\np2p = \"error\"\n",
    );
    let csv = write_in(
        dir.path(),
        "p2p.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_EXP_P2P_STATUS, gauge, P2P status\n\
         DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs\n",
    );
    let e = exporter()
        .env("DCGM_SIM_PROFILE", &p)
        .args(&["-f", csv.to_str().unwrap(), "-c", "200"])
        .start();
    let page = e.scrape_until(10, |p| {
        total(
            p,
            "dcgm_exporter_collection_errors_total",
            &[("source", "DCGM_EXP_P2P_STATUS"), ("reason", "BadParam")],
        ) >= 3.0
    });
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 3);
    assert_eq!(series(&page, "DCGM_EXP_XID_ERRORS_COUNT").len(), 3);
    assert!(series(&page, "DCGM_EXP_P2P_STATUS").is_empty());
    assert_eq!(
        total(
            &page,
            "dcgm_exporter_collections_total",
            &[("result", "error")]
        ),
        0.0
    );
    assert_eq!(total(&page, "dcgm_exporter_dcgm_connected", &[]), 1.0);
    assert_eq!(e.get("/health").0, 200);
    assert_eq!(
        e.stderr().matches("DCGM_EXP_P2P_STATUS: ").count(),
        1,
        "{}",
        e.stderr()
    );
}

#[test]
fn derived_metrics_alone_are_served() {
    let (_dir, csv) = temp_file("derived.csv", "DCGM_EXP_P2P_STATUS, gauge, P2P status\n");
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    let p2p = series(&page, "DCGM_EXP_P2P_STATUS");
    assert_eq!(p2p.len(), 8 * 7);
    assert!(p2p.iter().all(|s| s.label("UUID").is_some()));
}

#[test]
fn cpu_rows_on_a_node_without_the_sysmon_module_cost_nothing_else() {
    let (_dir, csv) = temp_file(
        "cpu.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_FI_DEV_CPU_UTIL_TOTAL, gauge, CPU utilisation\n",
    );
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    assert!(series(&page, "DCGM_FI_DEV_CPU_UTIL_TOTAL").is_empty());
    assert_eq!(
        total(
            &page,
            "dcgm_exporter_collections_total",
            &[("result", "error")]
        ),
        0.0
    );
}

/// Two H100s with 4 NVLinks each and no profiling module, and counters whose link set holds
/// a per-link profiling field DCGM refuses (so that set is probed field by field): the
/// profile's path and the counters file.
fn links_without_profiling(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let p = profile(
        dir,
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\nnvlinks = 4\n\
         profiling_module = false\n",
    );
    let csv = dir.join("links.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, energy\n\
         DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, per-link tx\n\
         DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, link down events\n",
    )
    .unwrap();
    (p, csv)
}

/// A watch DCGM refuses whole for one field (here a per-link profiling field while the
/// profiling module is absent) is retried field by field: only the refused field is lost.
#[test]
fn a_field_dcgm_refuses_to_watch_costs_only_its_own_series() {
    let dir = tempfile::tempdir().unwrap();
    let (p, csv) = links_without_profiling(dir.path());
    let e = exporter()
        .env("DCGM_SIM_PROFILE", &p)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(10, |p| {
        series(p, "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL").len() == 2 * 4
    });
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 2);
    assert!(series(&page, "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK").is_empty());
    assert_eq!(
        total(
            &page,
            "dcgm_exporter_collection_errors_total",
            &[
                ("source", "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK"),
                ("reason", "ModuleNotLoaded")
            ],
        ),
        1.0,
        "counted once, at start: {}",
        dump(&page)
    );
    assert_eq!(
        e.stderr()
            .matches("not collecting DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK")
            .count(),
        1
    );
}

/// A watch DCGM refuses whole is retried field by field, each watched and then unwatched
/// alone. DCGM removes every pair of an unwatch and reports a failing one after; the real
/// DCGM 4.6 kit answers NotWatched for the profiling fields of GPUs it samples through GPM.
/// A probe whose unwatch reports that was still accepted: its field is served.
#[test]
fn a_probe_whose_unwatch_reports_not_watched_keeps_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let (p, csv) = links_without_profiling(dir.path());
    let ctl = dir.path().join("control");
    // DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL (585): NOT_WATCHED (-16).
    control(&ctl, "unwatch_fails 585 -16");
    let e = exporter()
        .env("DCGM_SIM_PROFILE", &p)
        .control(&ctl)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let energy = |p: &[Sample]| total(p, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", &[]);
    let first = e.scrape_until(10, |p| {
        series(p, "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL").len() == 2 * 4
    });
    let before = energy(&first);
    let later = e.scrape_until(10, |p| energy(p) > before);
    assert_eq!(
        series(&later, "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL").len(),
        2 * 4
    );
    let log = e.stderr();
    assert_eq!(log.matches("not collecting").count(), 1, "{log}");
    assert!(
        log.contains("not collecting DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK"),
        "{log}"
    );
}
