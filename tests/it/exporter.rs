//! The real dcgm-exporter binary against the simulated 8-GPU H100 node: series, labels,
//! endpoints, startup errors.

use crate::support;
use crate::support::*;

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
                    "hostname"
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
            assert_eq!(x.label("hostname"), Some("node-a"));
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
    let e = started("h100-8gpu-nvswitch.toml", &["-c", "300"]);
    let energy = |p: &[Sample]| {
        series(p, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .iter()
            .map(|s| s.value)
            .sum::<f64>()
    };
    let first = energy(&e.scrape());
    e.scrape_until(10, |p| energy(p) > first);
}

/// The first page comes from a collection made as soon as the watches are set, not one
/// interval later: with an hour's interval the series are there at once (start() waits at
/// most 30 s for them), from exactly one collection.
#[test]
fn the_first_page_is_served_without_waiting_an_interval() {
    let e = exporter().args(&["-c", "3600000"]).start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8, "{page:?}");
    let ok = page
        .iter()
        .find(|s| {
            s.name == "dcgm_exporter_collections_total" && s.label("result") == Some("success")
        })
        .map(|s| s.value);
    assert_eq!(ok, Some(1.0), "one collection, made at start");
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
    let (_dir, csv) = temp_file(
        "c.csv",
        "# legacy and label rows\n\
         dcgm_gpu_temp, gauge, legacy 1.x name\n\
         DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n\
         DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, deprecated alias\n\
         155, gauge,\"power, by numeric id\"\n\
         DCGM_FI_DEV_SERIAL, label, serial as a label\n\
         DCGM_FI_DRIVER_VERSION, label, driver\n",
    );
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
    let (_dir, bad_csv) = temp_file(
        "bad.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_GPU_TEMPP, gauge, typo\n",
    );
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
            // Without the flag an unreachable engine is retried (tests/it/remote.rs).
            vec![
                "-r".into(),
                format!("127.0.0.1:{}", free_port()),
                "--exit-if-hostengine-unreachable".into(),
            ],
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

    let out = output_within(support::exporter_command().arg("--list-fields"), QUICK);
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

    let out = output_within(support::exporter_command().arg("-v"), QUICK);
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
    let (_dir, csv) = temp_file("c.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, t\n");
    let e = exporter()
        .args(&["-f", csv.to_str().unwrap(), "-n"])
        .start();
    let page = e.scrape();
    assert!(
        page.iter()
            .filter(|s| s.name.starts_with("DCGM_"))
            .all(|s| s.label("hostname").is_none()),
        "-n drops hostname"
    );
    let hup = || {
        signal(e.child.id(), "HUP");
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

/// The commit the build embedded: the checkout's HEAD, `unknown` without git.
fn expected_commit() -> String {
    Some(output_within(
        std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(repo(".")),
        QUICK,
    ))
    .filter(|o| o.status.success())
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .unwrap_or_else(|| "unknown".into())
}

#[test]
fn start_up_says_version_commit_dcgm_mode_and_what_is_watched() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .arg("--debug")
        .start();
    let log = e.stderr();
    let has = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    let version = format!(
        "dcgm-exporter {} (commit {}), DCGM library 4.6.0 (",
        env!("CARGO_PKG_VERSION"),
        expected_commit()
    );
    assert_eq!(has(&version), 1, "{version}: {log}");
    assert_eq!(has("mode: embedded DCGM host engine"), 1, "{log}");
    // One summary for every entity type watched.
    assert_eq!(has("msg=\"watching "), 1, "{log}");
    let summary = log.lines().find(|l| l.contains("msg=\"watching ")).unwrap();
    assert!(
        summary.contains("level=info") && summary.contains("8 GPU entities x "),
        "{summary}"
    );
    // The types with nothing to collect: one debug line, none at info.
    let idle = lines_with(&log, "not collecting");
    assert_eq!(idle.len(), 1, "{log}");
    assert!(idle[0].contains("level=debug"), "{}", idle[0]);
    assert!(idle[0].contains("CPU, CPU core metrics"), "{}", idle[0]);
    // Nothing was selected explicitly: nothing is degraded.
    assert_eq!(e.get("/health"), (200, "OK".to_string()));
}

#[test]
fn a_selection_that_matches_no_entity_is_a_warning_and_a_degraded_note() {
    // No MIG on this node, no NvSwitch: `-d i` and `-s g` select nothing.
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-d", "i", "-s", "g"])
        .spawn();
    e.wait_until(30, |e| {
        let (code, body) = e.get_with("/health", &[]);
        code == 200 && body.contains("degraded")
    });
    let (_, body) = e.get("/health");
    let notes: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("degraded: "))
        .collect();
    assert_eq!(
        notes,
        [
            "degraded: -d/--devices selects no GPU instance (MIG) on this node: none is exported",
            "degraded: -s/--switch-devices selects no NvSwitch on this node: none is exported",
        ],
        "{body}"
    );
    let log = e.stderr();
    for n in &notes {
        let n = &n["degraded: ".len()..];
        assert!(
            log.lines()
                .any(|l| l.contains("level=warning") && l.contains(n)),
            "{n}: {log}"
        );
    }
    assert!(series(&e.scrape(), "DCGM_FI_DEV_GPU_TEMP").is_empty());
}

#[test]
fn list_fields_into_a_closed_pipe_exits_0_quietly() {
    use std::os::fd::OwnedFd;
    // The reading end is gone before the exporter writes: every write fails with EPIPE,
    // deterministically (a `| head` races with the pipe's buffer).
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(ours);
    let child = support::exporter_command()
        .arg("--list-fields")
        .stdout(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child_output_within(child, QUICK, "dcgm-exporter --list-fields");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "no panic, no message");
    // And as an operator writes it.
    let out = output_within(
        std::process::Command::new("bash").args([
            "-c",
            "set -o pipefail; \"$0\" --list-fields | head -n 1",
            env!("CARGO_BIN_EXE_dcgm-exporter"),
        ]),
        QUICK,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("NAME "));
}

#[test]
fn port_0_listens_on_one_port_for_ipv4_and_ipv6() {
    let e = exporter().args(&["-a", ":0"]).spawn();
    e.wait_for_log(30, "listening on");
    let log = e.stderr();
    let line = log.lines().find(|l| l.contains("listening on")).unwrap();
    let ports: std::collections::BTreeSet<&str> = line
        .split("listening on ")
        .nth(1)
        .unwrap()
        .split(" (")
        .next()
        .unwrap()
        .split(", ")
        .map(|a| a.rsplit(':').next().unwrap())
        .collect();
    assert_eq!(ports.len(), 1, "{line}");
    assert!(!ports.contains("0"), "{line}");
    let port = ports.first().unwrap();
    let (code, _) = http_get(&format!("http://127.0.0.1:{port}/health")).unwrap();
    assert!(code == 200 || code == 503, "{code}");
}

#[test]
fn no_color_is_honoured_on_a_terminal() {
    // `script` gives the exporter a terminal; `-d g:9` logs the start-up line, then fails.
    let run = |no_color: Option<&str>| -> String {
        let cmd = format!(
            "{} -f {} -a 127.0.0.1:0 --dcgm-library {} -d g:9",
            env!("CARGO_BIN_EXE_dcgm-exporter"),
            repo("etc/default-counters.csv").display(),
            sim_library().display(),
        );
        let mut c = std::process::Command::new("script");
        support::hermetic(&mut c);
        c.env("DCGM_SIM_PROFILE", repo("etc/sim/one-gpu.toml"));
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let out = output_within(c.args(["-q", "-e", "-c", &cmd, "/dev/null"]), QUICK);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    if !require_tool("script", "util-linux: apt-get install bsdutils") {
        return;
    }
    let coloured = run(None);
    assert!(
        coloured.contains("level=\u{1b}[36minfo\u{1b}[0m"),
        "a terminal gets colour: {coloured:?}"
    );
    let plain = run(Some("1"));
    assert!(plain.contains("level=info"), "{plain:?}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR=1: {plain:?}");
}

#[test]
fn every_bad_flag_value_gets_one_fatal_line_and_exit_1() {
    for (args, start) in [
        (&["-c", "abc"][..], "-c/--collect-interval abc: "),
        (&["-c", "0"], "-c 0: "),
        (&["-x", "soon"], "-x/--xid-count-window-size soon: "),
        (&["--log-format", "yaml"], "--log-format yaml: "),
        (&["-n=maybe"], "-n/--no-hostname maybe: "),
        (
            &["--kubernetes-gpu-id-type", "serial"],
            "--kubernetes-gpu-id-type serial: ",
        ),
        (&["-d", "x:1"], "-d x:1: "),
        (
            &["--watch-max-keep-samples", "1e3"],
            "--watch-max-keep-samples 1e3: ",
        ),
    ] {
        let (code, stderr) = exporter().args(args).run_to_exit();
        assert_eq!(code, 1, "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {stderr}");
        let line = lines[0];
        assert!(
            line.starts_with("time=\"") && line.contains(" level=fatal msg="),
            "{args:?}: {line}"
        );
        let msg = line.split(" msg=").nth(1).unwrap().trim_matches('"');
        assert!(msg.starts_with(start), "{args:?}: {msg}");
    }
}
