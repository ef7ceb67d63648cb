//! `DCGM_EXP_*` series carry their labels in dcgm-exporter's order: the identity labels,
//! then the CSV label fields and the metric's own labels sorted together by name (upstream
//! renders one label map, which Go's template walks in key order).

use crate::support::*;

/// The fields of the test: a label field among them, and every kind of `DCGM_EXP_*` label.
const CSV: &str = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
                   DCGM_FI_DRIVER_VERSION, label, driver\n\
                   DCGM_EXP_XID_ERRORS_COUNT, gauge, xids in window\n\
                   DCGM_EXP_XID_ERRORS_TOTAL, counter, xids since start\n\
                   DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, clock events in window\n\
                   DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n\
                   DCGM_EXP_P2P_STATUS, gauge, p2p\n";

fn after_hostname(s: &Sample) -> Vec<&str> {
    let at = s
        .label_order
        .iter()
        .position(|k| k == "hostname")
        .expect("a hostname label");
    s.label_order[at + 1..].iter().map(String::as_str).collect()
}

#[test]
fn exp_labels_follow_upstreams_order() {
    let (_dir, control, csv) = control_and_file("exp.csv", CSV);
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&control)
        .args(&["-f", csv.to_str().unwrap(), "-c", "250"])
        .start();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&control)
        .unwrap();
    use std::io::Write;
    writeln!(f, "xid 2 79").unwrap();
    writeln!(f, "clock_event 1 0x8").unwrap();
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_EXP_XID_ERRORS_COUNT")
            .iter()
            .any(|s| s.label("xid") == Some("79"))
            && series(p, "DCGM_EXP_CLOCK_EVENTS_COUNT")
                .iter()
                .any(|s| s.label("clock_event").is_some())
    });
    let one = |name: &str, pred: &dyn Fn(&Sample) -> bool| -> Vec<String> {
        let s = series(&page, name)
            .into_iter()
            .find(|s| pred(s))
            .unwrap_or_else(|| panic!("no {name}: {}", dump(&page)));
        after_hostname(s).into_iter().map(String::from).collect()
    };
    assert_eq!(
        one("DCGM_EXP_XID_ERRORS_COUNT", &|s| s.label("xid").is_some()),
        ["DCGM_FI_DRIVER_VERSION", "window_size_in_ms", "xid"]
    );
    assert_eq!(
        one("DCGM_EXP_XID_ERRORS_COUNT", &|s| s.label("xid").is_none()),
        ["DCGM_FI_DRIVER_VERSION", "window_size_in_ms"]
    );
    assert_eq!(
        one("DCGM_EXP_XID_ERRORS_TOTAL", &|s| s.label("xid").is_some()),
        ["DCGM_FI_DRIVER_VERSION", "xid"]
    );
    assert_eq!(
        one("DCGM_EXP_CLOCK_EVENTS_COUNT", &|s| s
            .label("clock_event")
            .is_some()),
        ["DCGM_FI_DRIVER_VERSION", "clock_event", "window_size_in_ms"]
    );
    assert_eq!(
        one("DCGM_EXP_GPU_HEALTH_STATUS", &|_| true),
        [
            "DCGM_FI_DRIVER_VERSION",
            "health_error_code",
            "health_watch"
        ]
    );
    assert_eq!(
        one("DCGM_EXP_P2P_STATUS", &|_| true),
        ["DCGM_FI_DRIVER_VERSION", "link_status", "peer_gpu"]
    );
}

/// Every series the exporter adds (each `DCGM_EXP_*` family, the info series, the usage
/// families) and every self-metric names the hostname as the emulated release does:
/// `Hostname` in 4.8.2, `hostname` from 4.8.3 on, like the DCGM series beside them.
#[test]
fn every_added_series_names_the_hostname_as_the_emulated_release() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("all-exp.csv");
    let exp = [
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        "DCGM_EXP_GPU_HEALTH_STATUS",
        "DCGM_EXP_GPU_HEALTH_ACTION",
        "DCGM_EXP_GPU_COUNT",
        "DCGM_EXP_P2P_STATUS",
    ];
    let mut text = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
                    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, e\n\
                    DCGM_FI_DEV_GPU_UTIL, gauge, u\n"
        .to_string();
    for e in exp {
        text.push_str(&format!("{e}, gauge, {e}\n"));
    }
    std::fs::write(&csv, text).unwrap();
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let mut covered = 0;
    for (version, ours, theirs) in [
        ("4.8.2", "Hostname", "hostname"),
        ("4.8.4", "hostname", "Hostname"),
        ("4.9.0", "hostname", "Hostname"),
    ] {
        let e = exporter()
            .profile("h100-8gpu-nvswitch.toml")
            .args(&["-f", csv.to_str().unwrap(), "-c", "250"])
            .args(&["--emulate-version", version, "--low-cardinality"])
            .args(&["--usage-accounting", "--hpc-job-mapping-dir"])
            .arg(jobs.to_str().unwrap())
            .start();
        let page = e.scrape_until(15, |p| {
            exp.iter().all(|f| !series(p, f).is_empty())
                && !series(p, "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL").is_empty()
        });
        let added: Vec<&Sample> = page
            .iter()
            .filter(|s| s.name.starts_with("DCGM_EXP_") || s.name.starts_with("dcgm_exporter_"))
            // Links carry `hostname` in every release (upstream's link template).
            .filter(|s| s.label("nvlink").is_none())
            .collect();
        let families: std::collections::BTreeSet<&str> = added
            .iter()
            .filter(|s| s.name.starts_with("DCGM_EXP_"))
            .map(|s| s.name.as_str())
            .collect();
        let more = ["DCGM_EXP_GPU_INFO", "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL"];
        for f in exp.iter().chain(&more) {
            assert!(families.contains(f), "{version}: no {f}: {families:?}");
        }
        for s in &added {
            assert!(
                s.label(theirs).is_none(),
                "{version}: {} has {theirs}: {s:?}",
                s.name
            );
            if s.name.starts_with("DCGM_EXP_") {
                assert!(
                    s.label(ours).is_some(),
                    "{version}: {} lacks {ours}: {s:?}",
                    s.name
                );
            }
        }
        covered += families.len();
        println!(
            "{version}: {} families checked: {families:?}",
            families.len()
        );
    }
    assert!(covered >= 3 * 10, "{covered}");
}
