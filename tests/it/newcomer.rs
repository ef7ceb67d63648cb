//! What a first run on a fresh machine meets: no counters file at the default path, a
//! mistyped counters path, a selector naming a device the node lacks. What this machine has
//! under /etc/dcgm-exporter never counts: the runs that meet the default path do not see it
//! (`support::exporter_without_etc`).

use crate::support::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

const DEFAULT_PATH: &str = "/etc/dcgm-exporter/default-counters.csv";

/// Runs the exporter with `extra` and no -f until it serves a GPU temperature; returns the
/// page and what it logged.
fn run_without_f(extra: &[&str], profile_env: Option<&str>) -> (String, String) {
    sim_built();
    let port = free_port();
    // The support builder always passes -f; this run must not.
    let mut cmd = exporter_without_etc();
    cmd.args(["-a", &format!("127.0.0.1:{port}"), "-c", "500"])
        .args(extra)
        .arg("--dcgm-library")
        .arg(sim_library())
        .env_remove("DCGM_EXPORTER_COLLECTORS")
        .env_remove("DCGM_REMOTE_HOSTENGINE_INFO")
        .env_remove("DCGM_SIM_PROFILE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(p) = profile_env {
        cmd.env("DCGM_SIM_PROFILE", repo(&format!("etc/sim/{p}")));
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        if let Ok((200, body)) = http_get(&format!("http://127.0.0.1:{port}/metrics")) {
            if body.contains("DCGM_FI_DEV_GPU_TEMP{") {
                break body;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("exited early: {st}");
        }
        assert!(Instant::now() < deadline, "no GPU series within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let out = child_output_within(child, QUICK, "dcgm-exporter");
    (page, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_builtin_set(page: &str, stderr: &str, gpus: usize) {
    // The default-counters.csv rows: temperatures, power, the driver-version label.
    let samples = parse(page);
    for name in [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
    ] {
        assert_eq!(series(&samples, name).len(), gpus, "{name}: {page}");
    }
    assert!(series(&samples, "DCGM_FI_DEV_GPU_TEMP")[0]
        .label("DCGM_FI_DRIVER_VERSION")
        .is_some());
    let said = lines_with(stderr, "built-in default counter set");
    assert_eq!(said.len(), 1, "one log line says so: {stderr}");
    assert!(said[0].contains(DEFAULT_PATH), "{}", said[0]);
}

#[test]
fn without_f_and_without_the_default_file_the_builtin_counters_run() {
    let (page, stderr) = run_without_f(&[], Some("one-gpu.toml"));
    assert_builtin_set(&page, &stderr, 1);
}

#[test]
fn the_readmes_remote_example_runs_as_written() {
    sim_built();
    let port = free_port();
    let mut engine = HostEngine::start(port, Some("a100-mixed-mig.toml"));
    let (page, stderr) = run_without_f(&["-r", &format!("localhost:{port}")], None);
    engine.kill();
    // 4 whole GPUs and 14 MIG instances.
    assert_builtin_set(&page, &stderr, 4 + 14);
}

#[test]
fn a_counters_path_that_was_given_must_exist() {
    let (code, stderr) = exporter()
        .args(&["-f", "/nonexistent/counters.csv"])
        .run_to_exit();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/counters.csv"), "{stderr}");
    assert!(!stderr.contains("built-in"), "{stderr}");
    // The default path given explicitly is given too (and nothing is there, whatever this
    // machine has at that path).
    let (code, stderr) = exporter()
        .without_etc()
        .args(&["-f", DEFAULT_PATH])
        .run_to_exit();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(DEFAULT_PATH), "{stderr}");
}

#[test]
fn a_selector_naming_a_missing_device_is_a_selector_error() {
    for (args, flag, what) in [
        (&["-d", "g:0,9"][..], "-d", "GPU 9 does not exist"),
        (&["-d", "i:99"], "-d", "GPU instance 99 does not exist"),
        (&["-s", "g:7"], "-s", "NvSwitch 7 does not exist"),
        (&["-p", "g:3"], "-p", "CPU 3 does not exist"),
    ] {
        let (code, stderr) = exporter()
            .profile("h100-8gpu-nvswitch.toml")
            .args(args)
            .run_to_exit();
        assert_eq!(code, 1, "{args:?}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("level=fatal"))
            .unwrap_or_else(|| panic!("{args:?}: no error line: {stderr}"));
        assert!(
            line.contains(&format!("{flag}: {what}")),
            "{args:?}: {line}"
        );
        assert!(!line.contains("host engine"), "{args:?}: {line}");
    }
    // A selector that does not parse names the flag before DCGM is touched.
    let (code, stderr) = exporter().args(&["-d", "x:1"]).run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains("-d") && !stderr.contains("host engine"),
        "{stderr}"
    );
}

#[test]
fn the_documented_nvlink_query_groups_by_labels_the_link_series_carry() {
    let readme = std::fs::read_to_string(repo("docs/metrics.md")).unwrap();
    let query = readme
        .lines()
        .find(|l| l.contains("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_LINK") && l.starts_with("sum by ("))
        .expect("the per-link NVLink PromQL of docs/metrics.md");
    let by: Vec<&str> = query["sum by (".len()..]
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .map(str::trim)
        .collect();
    let (_dir, csv) = temp_file(
        "links.csv",
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, tx\n\
         DCGM_FI_PROF_NVLINK_RX_BYTES_PER_LINK, gauge, rx\n",
    );
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    let gpu_links: Vec<&Sample> = series(&page, "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_LINK")
        .into_iter()
        .filter(|s| s.label("gpu").is_some_and(|g| !g.is_empty()))
        .collect();
    assert!(!gpu_links.is_empty(), "{}", dump(&page));
    for s in &gpu_links {
        for l in &by {
            assert!(
                s.label(l).is_some_and(|v| !v.is_empty()),
                "docs/metrics.md groups by {l}, which {:?} lacks",
                s.labels
            );
        }
    }
}
