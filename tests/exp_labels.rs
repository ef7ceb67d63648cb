//! `DCGM_EXP_*` series carry their labels in dcgm-exporter's order: the identity labels,
//! then the CSV label fields and the metric's own labels sorted together by name (upstream
//! renders one label map, which Go's template walks in key order).

mod support;
use support::*;

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
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("control");
    std::fs::write(&control, "").unwrap();
    let csv = dir.path().join("exp.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
         DCGM_FI_DRIVER_VERSION, label, driver\n\
         DCGM_EXP_XID_ERRORS_COUNT, gauge, xids in window\n\
         DCGM_EXP_XID_ERRORS_TOTAL, counter, xids since start\n\
         DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, clock events in window\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n\
         DCGM_EXP_P2P_STATUS, gauge, p2p\n",
    )
    .unwrap();
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .env("DCGM_SIM_CONTROL", control.to_str().unwrap())
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
