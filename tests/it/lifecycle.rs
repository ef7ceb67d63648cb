//! The exporter's life around its collections on the simulator (issue 28): signals and
//! counters-file edits while it starts (which can take 30 s against a slow engine), the
//! bind/unbind watch against an engine that is not up yet, and `/health` on a page DCGM
//! leaves without a fresh value while connected.

use crate::support::*;
use std::time::Duration;

/// A simulated host engine that accepts connections but answers nothing until SIGCONT: a
/// start that stays inside its first DCGM call for as long as the test wants.
fn stopped_engine(port: u16) -> HostEngine {
    let engine = HostEngine::start(port, Some("one-gpu.toml"));
    signal(engine.child.id(), "STOP");
    engine
}

/// An exporter inside its first DCGM call: the line before it is logged.
fn starting(e: &Exporter) {
    e.wait_for_log(30, "mode: remote DCGM host engine");
    std::thread::sleep(Duration::from_millis(500));
    e.assert_not_logged("connected to the DCGM host engine");
}

#[test]
fn sigterm_while_starting_exits_cleanly() {
    let port = free_port();
    let engine = stopped_engine(port);
    let mut e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "500"])
        .spawn();
    starting(&e);
    let st = e.signal_and_wait("TERM");
    assert_eq!(st.code(), Some(0), "{st}: {}", e.stderr());
    signal(engine.child.id(), "CONT");
}

#[test]
fn sighup_while_starting_reloads_once_running() {
    let port = free_port();
    let engine = stopped_engine(port);
    let e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "500"])
        .spawn();
    starting(&e);
    signal(e.child.id(), "HUP");
    std::thread::sleep(Duration::from_millis(300));
    signal(engine.child.id(), "CONT");
    e.wait_for_log(40, "reloaded ");
    let page = e.scrape_until(20, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 1);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
}

#[test]
fn a_counters_file_edited_while_starting_is_reloaded() {
    let (_dir, csv) = temp_file("counters.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n");
    let port = free_port();
    let engine = stopped_engine(port);
    let e = exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "-c",
            "500",
            "-f",
            csv.to_str().unwrap(),
        ])
        .spawn();
    starting(&e);
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\nDCGM_FI_DEV_POWER_USAGE, gauge, power\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(engine.child.id(), "CONT");
    let page = e.scrape_until(40, |p| series(p, "DCGM_FI_DEV_POWER_USAGE").len() == 1);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
}

/// The bind/unbind watch needs the engine like everything else: not up yet at start, it is
/// retried rather than ending the process.
#[test]
fn the_bind_unbind_watch_waits_for_a_late_engine() {
    let port = free_port();
    let e = exporter()
        .engine_at(port)
        .args(&[
            "-c",
            "300",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=200ms",
        ])
        .spawn();
    e.wait_for_log(30, "retrying");
    std::thread::sleep(Duration::from_millis(500));
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let page = e.scrape_until(30, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 1);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    // The watch was set up on the session the loop opened: its polls work.
    e.wait_until(10, |e| e.get("/ready").0 == 200);
    std::thread::sleep(Duration::from_secs(1));
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("bind/unbind"), "{body}");
}

/// Connected, watched, every call answered, yet DCGM samples none of the watched fields:
/// the node's only GPU unbound from its driver with no bind/unbind watch to rebuild (DCGM
/// 4.6 drops a detached GPU's watches and samples). The page holds no DCGM series; that is
/// an outage: `/ready` fails until the GPU is back and sampled. `/health` keeps upstream's
/// liveness contract (200) and says why in its body: NVIDIA's liveness probe must not
/// restart an exporter for what a restart cannot fix.
#[test]
fn ready_is_503_and_health_200_while_dcgm_samples_nothing_the_page_could_serve() {
    let (_dir, ctl, b) = controlled("one-gpu.toml");
    let e = b.args(&["-c", "300"]).start();
    e.wait_until(10, |e| e.get("/ready").0 == 200);
    control(&ctl, "gpu_unbind 0");
    e.wait_until(15, |e| {
        e.try_get("/ready")
            .is_ok_and(|b| b.contains("sampled none of the watched fields"))
    });
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    let (code, health) = e.get("/health");
    assert_eq!(code, 200, "{health}");
    assert!(
        health.starts_with("OK - not ready: DCGM has sampled none of the watched fields"),
        "{health}"
    );
    // The gauge follows at the next collection.
    let stalled = |p: &[Sample]| series(p, "dcgm_exporter_dcgm_sampling_stalled")[0].value;
    let page = e.scrape_until(5, |p| stalled(p) == 1.0);
    assert!(series(&page, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    assert_eq!(series(&page, "dcgm_exporter_dcgm_connected")[0].value, 1.0);
    // Bound again and rebuilt (a SIGHUP): sampled, healthy, the gauge back to 0.
    control(&ctl, "gpu_bind 0");
    signal(e.child.id(), "HUP");
    e.wait_until(15, |e| e.get("/ready").0 == 200);
    let page = e.scrape_until(10, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 1);
    assert_eq!(stalled(&page), 0.0);
}

/// Connected, watched, every call answered, yet DCGM stops sampling the fields (the
/// simulator's `sampling_stop`): every value grows older than its watch interval and is
/// dropped as stale, and the page holds no DCGM series. That is an outage, not health. (A
/// watch group slower than `-c` is no such case: its samples are fresh for its own
/// interval, `tests/config_v2.rs`.)
#[test]
fn ready_is_503_while_dcgm_stops_sampling_every_field() {
    let (dir, ctl) = temp_file("control", "");
    let e = with_config_file(
        dir.path(),
        "version: 2\n\
         metrics:\n\
         \x20 fields:\n\
         \x20   - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n\
         collections:\n\
         \x20 - name: scrape\n\
         \x20   every: 300ms\n\
         \x20   metrics: {include: [\"*\"]}\n",
        &[("DCGM_SIM_CONTROL", &ctl)],
    );
    // Healthy first: a page with the field.
    e.wait_until(15, |e| {
        e.try_get("/metrics")
            .is_ok_and(|b| b.contains("DCGM_FI_DEV_GPU_TEMP{"))
    });
    control(&ctl, "sampling_stop");
    e.wait_until(15, |e| {
        e.try_get("/ready")
            .is_ok_and(|b| b.contains("sampled none of the watched fields"))
    });
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    // /ready judges the stall when asked; the page's gauge is set by the collection that
    // follows, at most one interval later.
    let page = e.scrape_until(15, |p| {
        series(p, "dcgm_exporter_dcgm_sampling_stalled")
            .first()
            .is_some_and(|s| s.value == 1.0)
    });
    assert!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP").is_empty(),
        "{}",
        dump(&page)
    );
    assert_eq!(series(&page, "dcgm_exporter_dcgm_connected")[0].value, 1.0);
    // Sampling again: healthy once fresh values are read.
    control(&ctl, "sampling_resume");
    e.wait_until(15, |e| e.get("/ready").0 == 200);
}

/// The exporter on one simulated GPU with `--config-file` holding `yaml` (the builder's
/// default `-f` would take the fields' place), `env` added to the simulator's.
fn with_config_file(
    dir: &std::path::Path,
    yaml: &str,
    env: &[(&str, &std::path::Path)],
) -> Exporter {
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let (mut cmd, port) = config_file_command(&cfg);
    for (k, v) in env {
        cmd.env(k, v);
    }
    sim_built();
    Exporter::spawn(cmd, port)
}

/// (freq µs, fields) of each `dcgmWatchFields` the simulator logged, in order.
fn watch_calls(path: &std::path::Path) -> Vec<(i64, Vec<u16>)> {
    let calls = watch_log(path).into_iter();
    calls.map(|(freq, _, _, fields)| (freq, fields)).collect()
}

/// DCGM samples a pair at the interval its connection's last `dcgmWatchFields` set. The
/// XID window watches `DCGM_FI_DEV_XID_ERRORS` after the counters' own watch of it: a watch
/// group's faster interval must win, at start and after a rebuild's second round of watches.
#[test]
fn the_fastest_interval_of_a_shared_field_wins_also_after_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let e = with_config_file(
        dir.path(),
        "version: 2\n\
         metrics:\n\
         \x20 fields:\n\
         \x20   - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n\
         \x20   - {name: DCGM_FI_DEV_XID_ERRORS, prometheusType: gauge, help: x}\n\
         \x20   - {name: DCGM_EXP_XID_ERRORS_COUNT, prometheusType: gauge, help: c}\n\
         collections:\n\
         \x20 - name: scrape\n\
         \x20   every: 1s\n\
         \x20   metrics: {include: [\"*\"]}\n\
         \x20 - name: xid\n\
         \x20   every: 100ms\n\
         \x20   metrics: {include: [\"DCGM_FI_DEV_XID_ERRORS\"]}\n",
        &[("DCGM_SIM_WATCH_LOG", &log)],
    );
    e.wait_until(30, |e| {
        e.try_get("/metrics")
            .is_ok_and(|b| b.contains("DCGM_FI_DEV_GPU_TEMP{"))
    });
    let last_xid = || {
        watch_calls(&log)
            .into_iter()
            .rfind(|(_, f)| f.contains(&230))
            .map(|(freq, _)| freq)
    };
    assert_eq!(last_xid(), Some(100_000), "{:?}", watch_calls(&log));
    let before = watch_calls(&log).len();
    signal(e.child.id(), "HUP");
    e.wait_for_log(20, "reloaded ");
    assert!(watch_calls(&log).len() > before);
    assert_eq!(last_xid(), Some(100_000), "{:?}", watch_calls(&log));
}

/// A MIG re-partition rebuilds the watches on the live session: every series of the GPUs
/// it did not touch stays on the page, fresh, for 6 intervals after it (with DCGM 4.6's
/// watch model, which the simulator follows, the old watches' removal used to take every
/// pair the new ones share with it).
#[test]
fn a_mig_repartition_keeps_every_other_gpus_series_fresh() {
    let (_dir, ctl, b) = controlled("a100-mixed-mig.toml");
    let e = b.args(&["-c", "300"]).start();
    let untouched = |p: &[Sample]| -> std::collections::BTreeSet<(String, String)> {
        p.iter()
            .filter(|s| s.name.starts_with("DCGM_FI_") && s.label("gpu") != Some("1"))
            .map(|s| (s.name.clone(), format!("{:?}", s.labels)))
            .collect()
    };
    let before = untouched(&e.scrape_until(10, |p| untouched(p).len() > 10));
    control(&ctl, "mig 1 7g.80gb");
    e.wait_for_log(20, "MIG configuration changed");
    for _ in 0..12 {
        let now = untouched(&e.scrape());
        let lost: Vec<_> = before.difference(&now).collect();
        assert!(lost.is_empty(), "{} gone: {lost:?}", lost.len());
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// A collection that fails with the session still up drops the watches for a rebuild at the
/// next tick; a reload in between rebuilds them itself. The next tick then collects on the
/// reload's watches instead of building them a second time.
#[test]
fn a_reload_after_a_failed_collection_builds_the_watches_once() {
    // One watch set and nothing derived: its failed read fails the whole collection.
    let (_dir, ctl, csv) =
        control_and_file("counters.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n");
    let e = exporter()
        .profile("one-gpu.toml")
        .control(&ctl)
        .args(&["-c", "2000", "-f", csv.to_str().unwrap()])
        .start();
    let builds = |e: &Exporter| e.stderr().matches("msg=\"watching ").count();
    assert_eq!(builds(&e), 1, "{}", e.stderr());
    control(&ctl, "fail_reads 1");
    e.wait_for_log(10, "collection failed");
    signal(e.child.id(), "HUP");
    e.wait_until(10, |e| builds(e) == 2);
    // Three more ticks: collected on the reload's watches, never rebuilt again.
    std::thread::sleep(Duration::from_millis(6500));
    assert_eq!(builds(&e), 2, "{}", e.stderr());
    let page = e.scrape();
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP").len(),
        1,
        "{}",
        dump(&page)
    );
}

/// A counters file that watched the bind/unbind field and then drops it: the rebuild
/// unwatches the old field groups, and DCGM keys a watch by (entity, field, connection), so
/// that also removed the bind/unbind watch's own pair (the field then reads its last sample
/// forever). The watch is made again after every rebuild, so a later unbind still rebuilds.
#[test]
fn the_bind_unbind_watch_outlives_a_rebuild_that_unwatched_its_field() {
    let (dir, ctl) = temp_file("ctl", "");
    let csv = dir.path().join("counters.csv");
    let base = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n";
    std::fs::write(
        &csv,
        format!("{base}DCGM_FI_BIND_UNBIND_EVENT, gauge, Bind/unbind state.\n"),
    )
    .unwrap();
    let e = exporter()
        .control(&ctl)
        .args(&[
            "-c",
            "1000",
            "-f",
            csv.to_str().unwrap(),
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=200ms",
        ])
        .start();
    e.scrape_until(15, |p| !series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    std::fs::write(&csv, base).unwrap();
    e.wait_for_log(15, "reloaded");
    // Past the rebuild: a collection with the new file.
    std::thread::sleep(Duration::from_millis(1500));
    control(&ctl, "gpu_unbind 3");
    e.wait_for_log(15, "reinitialization completed");
    e.scrape_until(15, |p| {
        let g: Vec<_> = series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .filter_map(|s| s.label("gpu").map(str::to_string))
            .collect();
        g.len() == 7 && !g.contains(&"3".to_string())
    });
}

/// A GPU lost when the watches are built (here before the exporter starts; as well during a
/// reconnect, a reload or after a failed collection) is left out of them; once DCGM
/// redetects it the watches are rebuilt with it, or its series would never come back.
#[test]
fn a_gpu_lost_at_start_comes_back_when_it_answers_again() {
    let (_dir, ctl) = temp_file("ctl", "gpu_lost 1\n");
    let e = exporter().control(&ctl).args(&["-c", "1000"]).start();
    let gpus = |p: &[Sample]| -> Vec<String> {
        let mut g: Vec<String> = series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .filter_map(|s| s.label("gpu").map(str::to_string))
            .collect();
        g.sort();
        g
    };
    let before = gpus(&e.scrape_until(15, |p| !gpus(p).is_empty()));
    assert!(!before.contains(&"1".to_string()), "{before:?}");
    control(&ctl, "gpu_recovered 1");
    e.scrape_until(15, |p| gpus(p).contains(&"1".to_string()));
    e.wait_for_log(5, "a lost GPU answers again; rebuilding watches");
    // And it stays: one rebuild, then GPU 1 sampled on every collection.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1000));
        assert!(gpus(&e.scrape()).contains(&"1".to_string()));
    }
    assert_eq!(
        e.stderr().matches("a lost GPU answers again").count(),
        1,
        "{}",
        e.stderr()
    );
}
