//! Our output checked by real Prometheus tools: `promtool check metrics` lints every
//! simulator profile's page, and a real Prometheus server scrapes the exporter and answers
//! a PromQL query over it.

mod support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success());
    assert!(
        found.unwrap_or(false),
        "`{name}` is required by this test and was not found: apt-get install prometheus (.ci/run does this)"
    );
    name.to_string()
}

fn promtool_check(page: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn promtool_finds_nothing_to_report_on_any_profile() {
    let profiles: Vec<String> = std::fs::read_dir(repo("etc/sim"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    assert!(profiles.len() >= 4, "profiles: {profiles:?}");
    for p in profiles {
        for csv in [
            "etc/default-counters.csv",
            "etc/dcp-metrics-included.csv",
            "etc/1.x-compatibility-metrics.csv",
        ] {
            let e = exporter()
                .profile(&p)
                .args(&["-f", repo(csv).to_str().unwrap()])
                .start();
            let (_, page) = e.get("/metrics");
            let report = promtool_check(&page);
            // Naming-style lints are inherent to dcgm-exporter's metric and label names, which
            // users' dashboards rely on: counters without a _total suffix
            // (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION), a type in the name
            // (DCGM_FI_DEV_PCIE_REPLAY_COUNTER) and camelCase labels (modelName, UUID).
            // Everything else promtool says counts as a failure.
            const NAMING_LINTS: [&str; 3] = [
                "counter metrics should have \"_total\" suffix",
                "label names should be written in 'snake_case' not 'camelCase'",
                "metric name should not include type 'counter'",
            ];
            let problems: Vec<&str> = report
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter(|l| !NAMING_LINTS.iter().any(|n| l.contains(n)))
                .collect();
            assert!(
                problems.is_empty(),
                "{p} with {csv}: promtool reported:\n{}",
                problems.join("\n")
            );
        }
    }
}

#[test]
fn a_real_prometheus_scrapes_and_answers_promql() {
    let e = exporter().profile("h100-8gpu-nvswitch.toml").start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            e.port
        ),
    )
    .unwrap();
    let mut prom = Command::new(tool("prometheus"))
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let deadline = Instant::now() + Duration::from_secs(60);
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=count(DCGM_FI_DEV_GPU_TEMP%7Bjob%3D%22dcgm%22%7D)");
    let result = loop {
        if let Ok((200, body)) = http_get(&query) {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(r) = v["data"]["result"].as_array().and_then(|a| a.first()) {
                break r["value"][1].as_str().unwrap_or("").to_string();
            }
        }
        if Instant::now() > deadline {
            let _ = prom.kill();
            panic!("Prometheus never returned DCGM_FI_DEV_GPU_TEMP");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let up = format!("http://127.0.0.1:{port}/api/v1/query?query=up%7Bjob%3D%22dcgm%22%7D");
    let (_, body) = http_get(&up).unwrap();
    let _ = prom.kill();
    let _ = prom.wait();
    assert_eq!(result, "8", "one temperature series per GPU");
    assert!(body.contains("\"1\""), "target up: {body}");
}
