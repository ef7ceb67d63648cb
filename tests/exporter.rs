//! The real dcgm-exporter binary against the simulated 8-GPU H100 node: series, labels,
//! endpoints, startup errors.

mod support;
use support::*;

/// The 26 active rows of etc/default-counters.csv minus the driver-version label and
/// DCGM_FI_DEV_XID_ERRORS, which has no sample (so no series) until an XID happens, as in
/// real DCGM.
const DEFAULT_METRICS: &[&str] = &[
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
];

#[test]
fn every_default_counter_appears_for_every_gpu_with_dcgm_exporter_labels() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .env("NODE_NAME", "node-a")
        .start();
    let page = e.scrape();
    for name in DEFAULT_METRICS {
        let s = series(&page, name);
        let gpus: std::collections::BTreeSet<&str> =
            s.iter().filter_map(|x| x.label("gpu")).collect();
        assert_eq!(
            gpus.len(),
            8,
            "{name}: series for GPUs {gpus:?}\n{}",
            dump(&page)
        );
        for x in &s {
            let order: Vec<&str> = x.label_order.iter().map(String::as_str).collect();
            assert_eq!(
                &order[..6],
                &[
                    "gpu",
                    "UUID",
                    "pci_bus_id",
                    "device",
                    "modelName",
                    "Hostname"
                ],
                "{name} label order"
            );
            let gpu = x.label("gpu").unwrap();
            assert_eq!(x.label("device"), Some(format!("nvidia{gpu}").as_str()));
            assert!(
                x.label("UUID").unwrap().starts_with("GPU-"),
                "{:?}",
                x.labels
            );
            assert!(
                x.label("modelName").unwrap().contains("H100"),
                "{:?}",
                x.labels
            );
            assert_eq!(x.label("Hostname"), Some("node-a"));
            assert!(
                x.label("DCGM_FI_DRIVER_VERSION")
                    .is_some_and(|v| !v.is_empty()),
                "driver label: {:?}",
                x.labels
            );
        }
    }
    assert!(
        series(&page, "DCGM_FI_DEV_XID_ERRORS").is_empty(),
        "no XID happened, so DCGM has no XID sample"
    );
    // No value is ever a DCGM sentinel.
    for s in &page {
        assert!(
            s.value < 9.2e18 && s.value != 140737488355328.0,
            "sentinel leaked: {s:?}"
        );
    }
}

#[test]
fn values_move_over_time_at_the_collect_interval() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-c", "300"])
        .start();
    let energy = |p: &[Sample]| {
        series(p, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .iter()
            .map(|s| s.value)
            .sum::<f64>()
    };
    let first = energy(&e.scrape());
    e.scrape_until(10, |p| energy(p) > first);
}

#[test]
fn health_landing_page_and_self_metrics() {
    let e = exporter().start();
    let (code, body) = e.get("/health");
    assert_eq!((code, body.as_str()), (200, "OK"));
    let (code, body) = e.get("/");
    assert_eq!(code, 200);
    assert!(body.contains("./metrics"));
    let (code, _) = e.get("/nope");
    assert_eq!(code, 404);
    let page = e.scrape();
    for m in [
        "dcgm_exporter_collection_duration_seconds",
        "dcgm_exporter_last_successful_collection_timestamp_seconds",
        "dcgm_exporter_dcgm_connected",
        "dcgm_exporter_samples_dropped_total",
    ] {
        assert!(page.iter().any(|s| s.name == m), "missing self metric {m}");
    }
    assert_eq!(series(&page, "dcgm_exporter_dcgm_connected")[0].value, 1.0);
}

#[test]
fn csv_with_label_fields_legacy_names_and_numeric_ids() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("c.csv");
    std::fs::write(
        &csv,
        "# legacy and label rows\n\
         dcgm_gpu_temp, gauge, legacy 1.x name\n\
         DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n\
         DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, deprecated alias\n\
         155, gauge,\"power, by numeric id\"\n\
         DCGM_FI_DEV_SERIAL, label, serial as a label\n\
         DCGM_FI_DRIVER_VERSION, label, driver\n",
    )
    .unwrap();
    let e = exporter()
        .arg("-f")
        .arg(csv.to_str().unwrap())
        .arg("-o")
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "dcgm_gpu_temp").len(), 8);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    assert_eq!(series(&page, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").len(), 8);
    // A numeric id exports under the canonical 4.6 name.
    assert_eq!(series(&page, "DCGM_FI_DEV_BOARD_POWER_WATTS").len(), 8);
    for s in series(&page, "dcgm_gpu_temp") {
        assert!(
            s.label("uuid").is_some() && s.label("UUID").is_none(),
            "-o uses the 1.x uuid label"
        );
        assert!(s.label("DCGM_FI_DEV_SERIAL").is_some_and(|v| !v.is_empty()));
        let order = &s.label_order;
        let serial = order
            .iter()
            .position(|k| k == "DCGM_FI_DEV_SERIAL")
            .unwrap();
        let driver = order
            .iter()
            .position(|k| k == "DCGM_FI_DRIVER_VERSION")
            .unwrap();
        assert!(
            serial < driver,
            "label fields are sorted by name: {order:?}"
        );
    }
    let (_, text) = e.get("/metrics");
    assert!(
        text.contains("# HELP DCGM_FI_DEV_BOARD_POWER_WATTS power, by numeric id"),
        "{text}"
    );
}

#[test]
fn startup_errors_are_one_clear_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let bad_csv = dir.path().join("bad.csv");
    std::fs::write(
        &bad_csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_GPU_TEMPP, gauge, typo\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--dcgm-library".into(), "/nonexistent/libdcgm.so.4".into()],
            "cannot load libdcgm",
        ),
        (
            vec!["-f".into(), bad_csv.to_str().unwrap().into()],
            "bad.csv:2",
        ),
        (
            vec!["-f".into(), "/nonexistent.csv".into()],
            "/nonexistent.csv",
        ),
        (
            vec!["-r".into(), format!("127.0.0.1:{}", free_port())],
            "host engine",
        ),
        (vec!["-d".into(), "g:42".into()], "-d"),
        (vec!["-d".into(), "x".into()], "-d"),
        (vec!["-c".into(), "abc".into()], "collect-interval"),
        // Milliseconds that overflow DCGM's microsecond i64.
        (
            vec!["-c".into(), "9223372036854776".into()],
            "-c 9223372036854776: too large",
        ),
        (
            vec!["-x".into(), "9223372036854775807".into()],
            "-x 9223372036854775807: too large",
        ),
        (
            vec![
                "--clock-events-count-window-size".into(),
                "9223372036854776".into(),
            ],
            "--clock-events-count-window-size 9223372036854776: too large",
        ),
        (vec!["-a".into(), ":notaport".into()], "-a"),
    ];
    for (args, needle) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = exporter().args(&argv).run_to_exit();
        assert_ne!(code, 0, "{argv:?} should fail");
        assert!(
            stderr.contains(needle),
            "{argv:?}: expected '{needle}' in stderr:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{argv:?} panicked:\n{stderr}");
    }
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut e = exporter().start();
    let st = e.signal_and_wait("TERM");
    assert!(st.success(), "exit status {st}; stderr: {}", e.stderr());
    let mut e = exporter().start();
    assert!(e.signal_and_wait("INT").success());
}

#[test]
fn json_logs_list_fields_and_version() {
    let e = exporter().args(&["--log-format", "json"]).start();
    let log = e.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"));
        assert!(v.get("level").is_some(), "{l}");
    }
    drop(e);

    let out = support::exporter_command()
        .arg("--list-fields")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() > 600, "every DCGM 4.6 field");
    let temp = text
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP_CELSIUS "))
        .unwrap();
    assert!(
        temp.contains(" 150 ") && temp.contains("GPU") && temp.contains("gpu_temp"),
        "{temp}"
    );

    let out = support::exporter_command().arg("-v").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("DCGM Exporter version"));
}

#[test]
fn sigquit_also_shuts_down_cleanly() {
    let mut e = exporter().start();
    assert!(e.signal_and_wait("QUIT").success(), "{}", e.stderr());
    assert!(e.stderr().contains("shutting down"));
}

#[test]
fn sighup_reloads_the_counters_and_a_bad_csv_keeps_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("c.csv");
    std::fs::write(&csv, "DCGM_FI_DEV_GPU_TEMP, gauge, t\n").unwrap();
    let e = exporter()
        .args(&["-f", csv.to_str().unwrap(), "-n"])
        .start();
    let page = e.scrape();
    assert!(
        page.iter()
            .filter(|s| s.name.starts_with("DCGM_"))
            .all(|s| s.label("Hostname").is_none()),
        "-n drops Hostname"
    );
    let hup = || {
        std::process::Command::new("kill")
            .args(["-HUP", &e.child.id().to_string()])
            .status()
            .unwrap();
    };
    std::fs::write(&csv, "DCGM_FI_DEV_POWER_USAGE, gauge, p\n").unwrap();
    hup();
    e.scrape_until(15, |p| {
        !series(p, "DCGM_FI_DEV_POWER_USAGE").is_empty()
            && series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty()
    });
    std::fs::write(&csv, "DCGM_FI_DEV_NOPE, gauge, p\n").unwrap();
    hup();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !e.stderr().contains("keeping the previous counters") {
        assert!(std::time::Instant::now() < deadline, "{}", e.stderr());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(series(&e.scrape(), "DCGM_FI_DEV_POWER_USAGE").len(), 8);
}
