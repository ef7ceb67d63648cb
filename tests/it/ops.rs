//! Operational options end to end against the simulator: textfile output read by the real
//! node-exporter, logs, the YAML configuration, watch retention, health, exporter metrics,
//! debug dumps, fake GPUs, GPU bind/unbind and the counters-file reload.

use crate::support;
use crate::support::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn wait_until(secs: u64, what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The real `prometheus-node-exporter` with only the textfile collector, on a free port.
struct NodeExporter {
    child: std::process::Child,
    port: u16,
}

impl NodeExporter {
    fn start(dir: &Path) -> Option<NodeExporter> {
        let bin = ["prometheus-node-exporter", "node_exporter"]
            .into_iter()
            .find(|b| have_tool(b));
        let Some(bin) = bin else {
            skip("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)");
            return None;
        };
        let port = free_port();
        let child = Command::new(bin)
            .args([
                "--collector.disable-defaults",
                "--collector.textfile",
                &format!("--collector.textfile.directory={}", dir.display()),
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node-exporter");
        Some(NodeExporter { child, port })
    }

    fn scrape(&self) -> Option<Vec<Sample>> {
        http_get(&format!("http://127.0.0.1:{}/metrics", self.port))
            .ok()
            .map(|(_, body)| parse(&body))
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn node_exporter_reads_the_textfile_with_1x_names_and_labels_and_no_http() {
    let dir = tempfile::tempdir().unwrap();
    let csv = repo("etc/1.x-compatibility-metrics.csv");
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&[
            "-a",
            "",
            "-o",
            "-f",
            csv.to_str().unwrap(),
            "--textfile-directory",
            dir.path().to_str().unwrap(),
        ])
        .spawn();
    let prom = dir.path().join("dcgm.prom");
    wait_until(30, "dcgm.prom", || {
        std::fs::read_to_string(&prom).is_ok_and(|t| t.contains("dcgm_gpu_temp"))
    });
    assert!(e.stderr().contains("HTTP listener off"), "{}", e.stderr());
    assert!(
        http_get(&e.url("/metrics")).is_err(),
        "-a \"\" must not listen on the port the test would have used"
    );

    let Some(ne) = NodeExporter::start(dir.path()) else {
        return;
    };
    let mut page = Vec::new();
    wait_until(20, "node-exporter serving our series", || {
        page = ne.scrape().unwrap_or_default();
        !series(&page, "dcgm_gpu_temp").is_empty()
    });
    let err = series(&page, "node_textfile_scrape_error");
    assert_eq!(err.len(), 1, "{}", dump(&page));
    assert_eq!(err[0].value, 0.0, "node-exporter could not parse dcgm.prom");
    // The names and labels of the 1.x exporter (seed 003): dcgm_<name>{gpu, uuid, ...}.
    for name in [
        "dcgm_gpu_temp",
        "dcgm_power_usage",
        "dcgm_sm_clock",
        "dcgm_fb_used",
    ] {
        let s = series(&page, name);
        assert_eq!(s.len(), 1, "{name}: {}", dump(&page));
        assert_eq!(s[0].label("gpu"), Some("0"));
        assert!(
            s[0].label("uuid").is_some_and(|u| u.starts_with("GPU-")),
            "{name}"
        );
        assert!(s[0].label("UUID").is_none());
    }
    let mtime = series(&page, "node_textfile_mtime_seconds");
    assert!(
        mtime
            .iter()
            .any(|s| s.label("file").is_some_and(|f| f.ends_with("dcgm.prom"))),
        "{}",
        dump(&page)
    );
    // Rewritten after every collection (-c 500 in the tests), never half-written.
    let first = std::fs::metadata(&prom).unwrap().modified().unwrap();
    wait_until(10, "a newer dcgm.prom", || {
        std::fs::metadata(&prom).unwrap().modified().unwrap() > first
    });
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "dcgm.prom")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    drop(e);
}

#[test]
fn textfile_mode_needs_a_directory_and_checks_it() {
    let (code, err) = exporter().args(&["-a", ""]).run_to_exit();
    assert_eq!(code, 1);
    assert!(err.contains("--textfile-directory"), "{err}");
    // A missing directory is created; one that cannot be is a start-up error.
    let (_parent, file) = temp_file("file", "");
    let bad = file.join("dir");
    let (code, err) = exporter()
        .args(&["--textfile-directory", bad.to_str().unwrap()])
        .run_to_exit();
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("--textfile-directory {}", bad.display())),
        "{err}"
    );
    // The environment variable works like the flag, and HTTP keeps serving beside it.
    let dir = tempfile::tempdir().unwrap();
    let e = exporter()
        .profile("one-gpu.toml")
        .env(
            "DCGM_EXPORTER_TEXTFILE_DIRECTORY",
            dir.path().to_str().unwrap(),
        )
        .start();
    wait_until(20, "dcgm.prom from the env var", || {
        std::fs::read_to_string(dir.path().join("dcgm.prom"))
            .is_ok_and(|t| t.contains("DCGM_FI_DEV_GPU_TEMP"))
    });
    assert!(!series(&e.scrape(), "DCGM_FI_DEV_GPU_TEMP").is_empty());
}

fn is_logrus_line(l: &str) -> bool {
    // time="2024-01-01T00:00:00Z" level=info msg=... [key=value ...]
    let Some(rest) = l.strip_prefix("time=\"") else {
        return false;
    };
    let (ts, rest) = rest.split_at(20.min(rest.len()));
    let ts_ok = ts.len() == 20
        && ts.as_bytes()[4] == b'-'
        && ts.as_bytes()[10] == b'T'
        && ts.ends_with('Z')
        && ts
            .chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19].contains(&i) || c.is_ascii_digit());
    let Some(rest) = rest.strip_prefix("\" level=") else {
        return false;
    };
    let (level, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    ts_ok
        && ["debug", "info", "warning", "error", "fatal"].contains(&level)
        && rest.starts_with("msg=")
}

#[test]
fn text_logs_have_logrus_shape_without_colour() {
    let e = exporter().profile("one-gpu.toml").start();
    let log = e.stderr();
    assert!(!log.is_empty());
    for l in log.lines() {
        assert!(is_logrus_line(l), "not logrus-shaped: {l:?}");
    }
    assert!(!log.contains('\x1b'), "ANSI colour on a pipe: {log:?}");
    assert!(
        log.lines()
            .any(|l| l.contains("level=info msg=\"listening on 127.0.0.1:")),
        "{log}"
    );
    drop(e);

    // A fatal start-up error is a log line too.
    let (code, err) = exporter().args(&["-f", "/nonexistent/c.csv"]).run_to_exit();
    assert_eq!(code, 1);
    let lines: Vec<&str> = err.lines().collect();
    let last = lines.last().copied().unwrap_or_default();
    assert!(is_logrus_line(last), "{err}");
    assert!(
        last.contains(" level=fatal msg=\"/nonexistent/c.csv: "),
        "{last}"
    );
    assert!(!err.contains("dcgm-exporter: error"), "{err}");
}

#[test]
fn json_logs_include_the_fatal_start_up_error() {
    let (code, err) = exporter()
        .args(&["--log-format", "json", "-f", "/nonexistent/c.csv"])
        .run_to_exit();
    assert_eq!(code, 1);
    let lines: Vec<&str> = err.lines().collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "keys sorted: {l}");
    }
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["level"], "fatal");
    assert!(last["msg"]
        .as_str()
        .unwrap()
        .starts_with("/nonexistent/c.csv: "));
    assert!(last["time"].as_str().unwrap().ends_with('Z'));

    // A bad flag value is a fatal start-up error too: one JSON line naming the flag.
    for (args, env) in [
        (&["--log-format", "json", "-c", "abc"][..], None),
        (&["-c", "abc"], Some("json")),
    ] {
        let mut b = exporter().args(args);
        if let Some(f) = env {
            b = b.env("DCGM_EXPORTER_LOG_FORMAT", f);
        }
        let (code, err) = b.run_to_exit();
        assert_eq!(code, 1, "{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["level"], "fatal");
        assert!(
            v["msg"].as_str().unwrap().contains("--collect-interval"),
            "{err}"
        );
    }
    // In text format: the same one logrus line as any other bad value.
    let (code, err) = exporter().args(&["-c", "abc"]).run_to_exit();
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("level=fatal") && err.contains("--collect-interval abc"),
        "{err}"
    );
}

#[test]
fn debug_shows_our_lines_not_the_http_stacks() {
    // The kubelet client speaks gRPC (tonic, h2) every tick: the HTTP stack's chatter.
    let kubelet = support::kubelet::FakeKubelet::start();
    let with_kubelet = |e: ExporterBuilder| {
        e.profile("one-gpu.toml").args(&[
            "-k",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
    };
    let e = with_kubelet(exporter()).args(&["--debug"]).start();
    for _ in 0..3 {
        e.scrape();
    }
    let calls = kubelet.calls();
    let deadline = Instant::now() + Duration::from_secs(10);
    while kubelet.calls() < calls + 2 {
        assert!(Instant::now() < deadline, "the kubelet is not being asked");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = e.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("level=debug") && l.contains("watching")),
        "{log}"
    );
    // h2 logs "binding client connection" and every frame it sends at debug.
    for noise in ["binding client connection", "msg=send", "frame="] {
        assert!(!log.contains(noise), "HTTP internals in --debug: {log}");
    }
    drop(e);
    // Without the filter they would be there: the test above can fail.
    let e = with_kubelet(exporter()).env("RUST_LOG", "debug").start();
    e.scrape();
    e.wait_for_log(10, "binding client connection");
}

/// Starts the exporter on one simulated GPU with `args` and `env`, the simulator logging
/// the watches it is asked for to `log`.
fn start_logging_watches(log: &Path, args: &[&str], env: &[(&str, &str)]) {
    let mut b = exporter().profile("one-gpu.toml").args(args);
    for (k, v) in env {
        b = b.env(k, v);
    }
    let _e = b.env("DCGM_SIM_WATCH_LOG", log.to_str().unwrap()).start();
}

#[test]
fn watch_retention_flags_reach_dcgm_watch_fields() {
    let (dir, csv) = temp_file("c.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, t\n");
    let log = dir.path().join("default.log");
    start_logging_watches(&log, &["-f", csv.to_str().unwrap()], &[]);
    let temp = watch_log(&log).into_iter().find(|w| w.3 == [150]).unwrap();
    assert_eq!(
        (temp.0, temp.1, temp.2),
        (500_000, 0.0, 4),
        "by default a field whose latest value is exported keeps a few samples, not 600 s"
    );

    // A field read back over a window keeps that window (plus one interval), whatever the
    // count of samples in it.
    let xid_csv = write_in(
        dir.path(),
        "xid.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_EXP_XID_ERRORS_COUNT, gauge, xids in window\n",
    );
    let log = dir.path().join("xid.log");
    start_logging_watches(&log, &["-f", xid_csv.to_str().unwrap(), "-x", "60000"], &[]);
    let watches = watch_log(&log);
    let xid = watches.iter().find(|w| w.3 == [230]).unwrap();
    assert_eq!((xid.1, xid.2), (60.5, 0), "{watches:?}");
    let temp = watches.iter().find(|w| w.3 == [150]).unwrap();
    assert_eq!((temp.1, temp.2), (0.0, 4));

    // Upstream's 600 s given explicitly is kept, on every watch.
    let log = dir.path().join("explicit.log");
    start_logging_watches(
        &log,
        &["-f", xid_csv.to_str().unwrap(), "--watch-max-keep-age=600s"],
        &[],
    );
    let watches = watch_log(&log);
    let temp = watches.iter().find(|w| w.3 == [150]).unwrap();
    assert_eq!((temp.1, temp.2), (600.0, 0), "{watches:?}");
    let xid = watches.iter().find(|w| w.3 == [230]).unwrap();
    assert_eq!((xid.1, xid.2), (600.0, 0), "{watches:?}");

    let log = dir.path().join("samples.log");
    start_logging_watches(
        &log,
        &[
            "-f",
            csv.to_str().unwrap(),
            "--watch-max-keep-age=0s",
            "--watch-max-keep-samples=5",
        ],
        &[],
    );
    let temp = watch_log(&log).into_iter().find(|w| w.3 == [150]).unwrap();
    assert_eq!((temp.1, temp.2), (0.0, 5));

    let log = dir.path().join("env.log");
    start_logging_watches(
        &log,
        &["-f", csv.to_str().unwrap()],
        &[("DCGM_EXPORTER_WATCH_MAX_KEEP_AGE", "90s")],
    );
    let temp = watch_log(&log).into_iter().find(|w| w.3 == [150]).unwrap();
    assert_eq!((temp.1, temp.2), (90.0, 0));

    for (args, needle) in [
        (&["--watch-max-keep-age=0s"][..], "--watch-max-keep-samples"),
        (&["--watch-max-keep-age=soon"], "--watch-max-keep-age"),
        (
            &["--watch-max-keep-samples=-1"],
            "--watch-max-keep-samples -1",
        ),
    ] {
        let (code, err) = exporter().args(args).run_to_exit();
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn config_file_sets_fields_interval_and_watch_groups_and_flags_win() {
    let (dir, cfg) = temp_file(
        "config.yaml",
        "version: 1\n\
         metrics:\n\
         \x20 fields:\n\
         \x20   - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: \"GPU temperature (in C).\"}\n\
         \x20   - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: \"Power draw (in W).\"}\n\
         collection:\n\
         \x20 interval: 700ms\n\
         \x20 watchGroups:\n\
         \x20   - name: power\n\
         \x20     interval: 100ms\n\
         \x20     fields: [\"DCGM_FI_DEV_POWER_*\"]\n",
    );
    let log = dir.path().join("w.log");
    // The test helper passes -f and -c itself; give only the config file here.
    let mut e = exporter()
        .profile("one-gpu.toml")
        .args(&["--config-file", cfg.to_str().unwrap()])
        .env("DCGM_SIM_WATCH_LOG", log.to_str().unwrap())
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    assert_eq!(series(&page, "DCGM_FI_DEV_POWER_USAGE").len(), 1);
    assert_eq!(
        series(&page, "DCGM_FI_DEV_SM_CLOCK").len(),
        1,
        "-f on the command line wins over metrics.fields"
    );
    // -c 500 from the command line wins over collection.interval; the watch group's
    // interval applies to its fields only.
    let w = watch_log(&log);
    let freq_of = |f: u16| w.iter().find(|x| x.3.contains(&f)).map(|x| x.0);
    assert_eq!(freq_of(150), Some(500_000), "{w:?}");
    assert_eq!(freq_of(155), Some(100_000), "{w:?}");
    e.signal_and_wait("TERM");

    // Without -c on the command line, collection.interval applies; the file's fields
    // replace the default -f.
    let log = dir.path().join("w2.log");
    let out = exporter_command()
        .args([
            "--config-file",
            cfg.to_str().unwrap(),
            "--dcgm-library",
            sim_library().to_str().unwrap(),
            "-a",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .env("DCGM_SIM_PROFILE", repo("etc/sim/one-gpu.toml"))
        .env("DCGM_SIM_WATCH_LOG", &log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(out);
    wait_until(20, "watches from the config file", || {
        watch_log(&log).iter().any(|x| x.3.contains(&150))
    });
    let w = watch_log(&log);
    assert_eq!(
        w.iter().find(|x| x.3.contains(&150)).map(|x| x.0),
        Some(700_000),
        "{w:?}"
    );
    // Beside them, only the XIDs, for the event history.
    assert!(
        w.iter()
            .all(|x| x.3.iter().all(|f| [150, 155].contains(f)) || x.3 == [230]),
        "only the file's fields are watched: {w:?}"
    );
    let _ = child.0.kill();

    // Errors name the file and the key or line.
    let bad = dir.path().join("bad.yaml");
    for (text, needle) in [
        (
            "version: 1\nmetrics:\n  fiels: []\n",
            "unknown field `fiels`",
        ),
        (
            "version: 1\ncollection:\n  interval: soon\n",
            "collection.interval",
        ),
        ("version: 3\n", "version: 3"),
    ] {
        std::fs::write(&bad, text).unwrap();
        let (code, err) = exporter()
            .args(&["--config-file", bad.to_str().unwrap()])
            .run_to_exit();
        assert_eq!(code, 1, "{text}");
        assert!(
            err.contains(bad.to_str().unwrap()) && err.contains(needle),
            "{text}: {err}"
        );
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn health_require_gpus_fails_health_when_no_gpu_is_collected() {
    let dir = tempfile::tempdir().unwrap();
    // Only NvSwitch fields: nothing is collected on GPUs.
    let csv = write_in(
        dir.path(),
        "switch.csv",
        "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT, gauge, switch temperature\n",
    );
    let start = |extra: &[&str]| {
        let mut args = vec!["-f", csv.to_str().unwrap()];
        args.extend_from_slice(extra);
        let e = exporter()
            .profile("h100-8gpu-nvswitch.toml")
            .args(&args)
            .spawn();
        wait_until(30, "a page with switch series", || {
            e.try_get("/metrics")
                .is_ok_and(|b| b.contains("DCGM_FI_DEV_NVSWITCH"))
        });
        e
    };
    let e = start(&[]);
    assert_eq!(e.get("/ready").0, 200);
    assert_eq!(e.get("/health").0, 200);
    drop(e);
    // Upstream's opt-in: the liveness endpoint fails too, as the flag asks.
    let e = start(&["--health-require-gpus"]);
    for path in ["/ready", "/health"] {
        let (code, body) = e.get(path);
        assert_eq!(code, 503, "{path}: {body}");
        assert!(body.contains("no GPU"), "{path}: {body}");
    }
    drop(e);
    // With GPU fields the same flag is healthy.
    let e = exporter()
        .profile("one-gpu.toml")
        .env("DCGM_EXPORTER_HEALTH_REQUIRE_GPUS", "true")
        .start();
    wait_until(10, "healthy", || e.get("/ready").0 == 200);
    assert_eq!(e.get("/health").0, 200);
}

#[test]
fn exporter_metrics_only_with_the_flag() {
    let e = exporter().profile("one-gpu.toml").start();
    let page = e.scrape();
    assert!(
        !page
            .iter()
            .any(|s| s.name.starts_with("process_") || s.name.starts_with("promhttp_")),
        "off by default, as upstream"
    );
    assert!(!series(&page, "dcgm_exporter_dcgm_connected").is_empty());
    drop(e);
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["--enable-exporter-metrics"])
        .start();
    e.scrape();
    let page = e.scrape();
    for m in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
        "promhttp_metric_handler_requests_in_flight",
    ] {
        assert_eq!(series(&page, m).len(), 1, "{m}: {}", dump(&page));
    }
    let ok: Vec<_> = series(&page, "promhttp_metric_handler_requests_total")
        .into_iter()
        .filter(|s| s.label("code") == Some("200"))
        .collect();
    // Counted when each response is done: the start-up probe and the first scrape at least.
    assert!(ok[0].value >= 2.0, "{}", dump(&page));
    assert_eq!(
        series(&page, "promhttp_metric_handler_requests_in_flight")[0].value,
        1.0,
        "this scrape"
    );
}

fn gunzip(path: &Path) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    s
}

fn dumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn debug_dumps_are_written_per_entity_group_and_files_not_ours_kept() {
    let dir = tempfile::tempdir().unwrap();
    let dump_dir = dir.path().join("dumps");
    std::fs::create_dir(&dump_dir).unwrap();
    // A dump-like file from two days ago and an unrelated file, neither written by this
    // exporter: the retention removes only what the process wrote, so both stay.
    let old = dump_dir.join("metrics-GPU-20240101-000000-deadbeef.json.gz");
    std::fs::write(&old, "").unwrap();
    let two_days = std::time::SystemTime::now() - Duration::from_secs(48 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(two_days)
        .unwrap();
    std::fs::write(dump_dir.join("notes.txt"), "keep").unwrap();

    let csv = write_in(
        dir.path(),
        "c.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT, gauge, s\n",
    );
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-f", csv.to_str().unwrap(), "--dump-enabled"])
        .args(&["--dump-directory", dump_dir.to_str().unwrap()])
        .start();
    let name_of = |p: &PathBuf| p.file_name().unwrap().to_str().unwrap().to_string();
    wait_until(20, "GPU and Switch dumps", || {
        let names: Vec<String> = dumps(&dump_dir).iter().map(name_of).collect();
        [
            "metrics-GPU-",
            "deviceinfo-GPU-",
            "metrics-Switch-",
            "deviceinfo-Switch-",
        ]
        .iter()
        .all(|p| {
            names
                .iter()
                .any(|n| n.starts_with(p) && n.ends_with(".json.gz"))
        })
    });
    drop(e);
    let all = dumps(&dump_dir);
    assert!(
        all.contains(&old),
        "the retention never removes a file this exporter did not write"
    );
    assert!(all.iter().any(|p| name_of(p) == "notes.txt"));
    // metrics-GPU-YYYYMMDD-HHMMSS-xxxxxxxx.json.gz
    let m = all
        .iter()
        .find(|p| name_of(p).starts_with("metrics-GPU-") && **p != old)
        .unwrap();
    let n = name_of(m);
    let parts: Vec<&str> = n.trim_end_matches(".json.gz").split('-').collect();
    assert_eq!(parts.len(), 5, "{n}");
    assert!(
        parts[2].len() == 8 && parts[3].len() == 6 && parts[4].len() == 8,
        "{n}"
    );
    let v: serde_json::Value = serde_json::from_str(&gunzip(m)).unwrap();
    let temps: Vec<&serde_json::Value> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "DCGM_FI_DEV_GPU_TEMP")
        .collect();
    assert_eq!(temps.len(), 8);
    assert!(temps[0]["labels"]["UUID"]
        .as_str()
        .unwrap()
        .starts_with("GPU-"));
    assert!(temps[0]["value"].is_number());
    let d = all
        .iter()
        .find(|p| name_of(p).starts_with("deviceinfo-GPU-"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&gunzip(d)).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);

    // --dump-compression=false writes plain JSON.
    let plain = dir.path().join("plain");
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&[
            "--dump-enabled",
            "--dump-compression=false",
            "--dump-directory",
            plain.to_str().unwrap(),
        ])
        .start();
    wait_until(20, "a plain dump", || {
        dumps(&plain)
            .iter()
            .any(|p| name_of(p).starts_with("metrics-GPU-") && name_of(p).ends_with(".json"))
    });
    drop(e);
    let m = dumps(&plain)
        .into_iter()
        .find(|p| name_of(p).starts_with("metrics-GPU-"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(m).unwrap()).unwrap();
    assert!(!v.as_array().unwrap().is_empty());
}

#[test]
fn fake_gpus_stand_in_for_gpus_whose_attributes_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("ctl");
    // DCGM cannot read GPU 1's attributes (dcgmGetDeviceAttributes fails).
    control(&ctl, "attributes_fail 1");
    let (code, err) = exporter().control(&ctl).run_to_exit();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("dcgmGetDeviceAttributes"), "{err}");

    let e = exporter().control(&ctl).args(&["--fake-gpus"]).start();
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .any(|s| s.label("gpu") == Some("1"))
    });
    let gpu1 = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .find(|s| s.label("gpu") == Some("1"))
        .unwrap()
        .clone();
    assert_eq!(gpu1.label("UUID"), Some("fake1"));
    assert_eq!(gpu1.label("modelName"), Some(""));
    let gpu0 = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .find(|s| s.label("gpu") == Some("0"))
        .unwrap()
        .clone();
    assert!(gpu0.label("UUID").unwrap().starts_with("GPU-"));
}

fn gpus_with_temp(p: &[Sample]) -> Vec<String> {
    let mut v: Vec<String> = series(p, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .filter_map(|s| s.label("gpu").map(str::to_string))
        .collect();
    v.sort();
    v
}

#[test]
fn gpu_bind_unbind_events_rebuild_the_watches() {
    let (dir, ctl) = temp_file("ctl", "");
    let e = exporter()
        .control(&ctl)
        .args(&[
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=200ms",
        ])
        .start();
    assert_eq!(gpus_with_temp(&e.scrape()).len(), 8);
    control(&ctl, "gpu_unbind 3");
    e.scrape_until(15, |p| {
        let g = gpus_with_temp(p);
        g.len() == 7 && !g.contains(&"3".to_string())
    });
    let log = e.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("reinitialization completed"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(" event_state=2 timestamp="), "{line}");
    control(&ctl, "gpu_bind 3");
    e.scrape_until(15, |p| gpus_with_temp(p).len() == 8);
    drop(e);

    // Without the watch nothing rebuilds; DCGM itself drops the unbound GPU's watches and
    // takes it out of the groups when the driver re-attaches ("Remove watches on
    // still-detached GPUs", DcgmGroupManager::AttachGpus), so its series leave the page
    // and the other GPUs' stay.
    let ctl2 = write_in(dir.path(), "ctl2", "");
    let e = exporter().control(&ctl2).start();
    control(&ctl2, "gpu_unbind 3");
    // Markers after the unbind (the simulator applies the file in order): once GPU 0 shows
    // them, collections ran with GPU 3 unbound.
    for marker in [91, 92] {
        control(&ctl2, &format!("set 0 150 {marker}"));
        e.scrape_until(15, |p| {
            series(p, "DCGM_FI_DEV_GPU_TEMP")
                .iter()
                .any(|s| s.label("gpu") == Some("0") && s.value == f64::from(marker))
        });
    }
    let left = gpus_with_temp(&e.scrape());
    assert_eq!(left.len(), 7, "{left:?}");
    assert!(!left.contains(&"3".to_string()), "{left:?}");
    assert!(!e.stderr().contains("bind/unbind"));
}

#[test]
fn a_changed_counters_file_reloads_without_a_signal_and_a_broken_one_keeps_the_old() {
    let (dir, csv) = temp_file("c.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, t\n");
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    // Replaced by rename, as editors and ConfigMap updates do.
    let tmp = write_in(
        dir.path(),
        "c.csv.new",
        "DCGM_FI_DEV_POWER_USAGE, gauge, p\n",
    );
    std::fs::rename(&tmp, &csv).unwrap();
    e.scrape_until(10, |p| {
        !series(p, "DCGM_FI_DEV_POWER_USAGE").is_empty()
            && series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty()
    });
    // A logrus line with the file as a key=value field.
    e.wait_for_log(
        5,
        &format!(
            "level=info msg=\"counters file changed on disk: reloading\" file={}",
            csv.display()
        ),
    );
    // Written in place, broken on line 2: the old set keeps running, the error says where.
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_NOPE, gauge, x\n",
    )
    .unwrap();
    e.wait_for_log(10, &format!("{}:2:", csv.display()));
    assert!(e.stderr().contains("keeping the previous counters"));
    assert_eq!(series(&e.scrape(), "DCGM_FI_DEV_POWER_USAGE").len(), 1);
    // The history names the file as what asked for both reloads, and each outcome.
    let reloads = crate::support::events::wait_for_events(&e, 10, "type=reload", |ev| {
        ev.iter().any(|r| r["details"]["outcome"] == "refused")
    });
    let told: Vec<(&str, &str)> = reloads
        .iter()
        .map(|r| {
            let d = &r["details"];
            (
                d["trigger"].as_str().unwrap(),
                d["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    // (An in-place write may be seen part-written first: how many refusals is the
    // machine's scheduling; the rename's reload comes first and was loaded.)
    assert_eq!(told.first(), Some(&("counters-file", "ok")), "{reloads:#?}");
    assert!(told.iter().all(|t| t.0 == "counters-file"), "{reloads:#?}");
    // Several quick writes end with the last content loaded. How many reloads they make
    // here depends on this machine's scheduling; that writes inside the debounce make one
    // is tested on a made-up clock (src/lifecycle/watchers/counters_file.rs).
    let reloads = |e: &Exporter| e.stderr().matches("changed on disk").count();
    let before = reloads(&e);
    for i in 0..5 {
        std::fs::write(&csv, format!("DCGM_FI_DEV_SM_CLOCK, gauge, s{i}\n")).unwrap();
    }
    wait_until(10, "the last write's help text", || {
        e.try_get("/metrics")
            .is_ok_and(|page| page.contains("# HELP DCGM_FI_DEV_SM_CLOCK s4\n"))
    });
    assert!(reloads(&e) > before, "{}", e.stderr());
}

#[test]
fn the_textfile_is_emptied_while_the_host_engine_is_gone_and_refilled_after() {
    let port = free_port();
    let mut engine = HostEngine::start(port, Some("one-gpu.toml"));
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("dcgm.prom");
    let has_temp =
        || std::fs::read_to_string(&prom).is_ok_and(|t| t.contains("DCGM_FI_DEV_GPU_TEMP"));
    let e = exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "-c",
            "300",
            "-a",
            "",
            "--textfile-directory",
            dir.path().to_str().unwrap(),
        ])
        .spawn();
    wait_until(20, "dcgm.prom with series", has_temp);
    engine.kill();
    wait_until(20, "an empty dcgm.prom during the outage", || {
        std::fs::read_to_string(&prom).is_ok_and(|t| t.is_empty())
    });
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    wait_until(30, "dcgm.prom refilled after the reconnect", has_temp);
    drop(e);
}
