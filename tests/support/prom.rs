//! A real Prometheus server scraping given targets every second, for tests that run PromQL
//! over what the exporter serves. Killed on drop.

use super::free_port;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Prometheus {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

/// A tool this test needs, by name; fails the test, saying how to install it, when absent.
pub fn tool(name: &str) -> String {
    assert!(
        super::have_tool(name),
        "`{name}` is required by this test and was not found: apt-get install prometheus (.ci/run does this)"
    );
    name.to_string()
}

/// `promtool check rules` on `rules` in etc/prometheus, which must hold `count` rules, and
/// `promtool test rules` on its tests, `tests`.
pub fn check_and_test_rules(rules: &str, count: usize, tests: &str) {
    let dir = super::repo("etc/prometheus");
    let out = promtool_in(&dir, &["check", "rules", rules]);
    assert!(
        out.contains(&format!("SUCCESS: {count} rules found")),
        "{out}"
    );
    let out = promtool_in(&dir, &["test", "rules", tests]);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Runs `promtool ARGS` in `dir` and returns what it printed; fails the test when promtool
/// does (rules that do not load, a rule test that does not pass).
pub fn promtool_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = super::output_within(
        Command::new("promtool").args(args).current_dir(dir),
        super::QUICK,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// What `promtool check metrics` reports on a page (empty when it finds nothing).
pub fn promtool_check(page: &str) -> String {
    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    super::run::feed(&mut child, page.as_bytes().to_vec());
    let out = super::child_output_within(child, super::QUICK, "promtool check metrics");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What `promtool check metrics` finds wrong with a page, less the naming-style lints that
/// are inherent to dcgm-exporter's metric and label names, which users' dashboards rely on:
/// counters without a _total suffix (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION), a type in the
/// name (DCGM_FI_DEV_PCIE_REPLAY_COUNTER) and camelCase labels (modelName, UUID).
pub fn promtool_problems(page: &str) -> Vec<String> {
    const NAMING_LINTS: [&str; 3] = [
        "counter metrics should have \"_total\" suffix",
        "label names should be written in 'snake_case' not 'camelCase'",
        "metric name should not include type 'counter'",
    ];
    promtool_check(page)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !NAMING_LINTS.iter().any(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (host:port) as job `dcgm`.
    pub fn start(targets: &[String]) -> Prometheus {
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        Prometheus::with_scrape_configs(&format!(
            "  - job_name: dcgm\n    static_configs:\n      - targets: [{list}]\n"
        ))
    }

    /// Starts Prometheus with these `scrape_configs` entries (YAML, indented by two),
    /// scraping every second.
    pub fn with_scrape_configs(scrape_configs: &str) -> Prometheus {
        Prometheus::launch(&format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape_configs}"
        ))
    }

    /// As [`Prometheus::with_scrape_configs`], also loading alerting/recording rule files,
    /// evaluated every second (the rules' own `for:` durations unchanged).
    pub fn with_rules(scrape_configs: &str, rule_files: &[&std::path::Path]) -> Prometheus {
        let files: String = rule_files
            .iter()
            .map(|f| format!("  - '{}'\n", f.display()))
            .collect();
        Prometheus::launch(&format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{files}scrape_configs:\n{scrape_configs}"
        ))
    }

    /// The alerts Prometheus holds now (`/api/v1/alerts`): pending and firing.
    pub fn alerts(&self) -> Result<Vec<serde_json::Value>, String> {
        let v = self.api("/api/v1/alerts", &[])?;
        Ok(v["data"]["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// Each rule group's `lastEvaluation` (`/api/v1/rules`), by group name.
    pub fn rule_evaluations(&self) -> Result<Vec<(String, String)>, String> {
        let v = self.api("/api/v1/rules", &[])?;
        Ok(v["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                (
                    g["name"].as_str().unwrap_or_default().to_string(),
                    g["lastEvaluation"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect())
    }

    /// Polls until every rule group has been evaluated twice more from now (so at least
    /// once entirely over data scraped before this call), or panics after `secs`.
    pub fn wait_rule_evaluations(&self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let start = self.rule_evaluations().unwrap_or_default();
        let mut changes = vec![0u32; start.len()];
        let mut last = start.clone();
        while changes.is_empty() || changes.iter().any(|c| *c < 2) {
            assert!(
                Instant::now() < deadline,
                "rule groups not evaluated within {secs}s: {last:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
            let now = self.rule_evaluations().unwrap_or_default();
            if now.len() != last.len() {
                changes = vec![0; now.len()];
            } else {
                for (i, (a, b)) in now.iter().zip(&last).enumerate() {
                    if a.1 != b.1 {
                        changes[i] += 1;
                    }
                }
            }
            last = now;
        }
    }

    /// Starts Prometheus on a free port and returns once that port answers as this very
    /// Prometheus (its storage path is ours): a port found free can be taken by another
    /// test's Prometheus before ours binds it, and then ours exits and is started again on
    /// another port, never queried in place of the other.
    fn launch(config: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(&cfg, config).expect("write prometheus.yml");
        let data = dir.path().join("data").display().to_string();
        for _ in 0..3 {
            let port = free_port();
            let mut child = Command::new("prometheus")
                .arg(format!("--config.file={}", cfg.display()))
                .arg(format!("--storage.tsdb.path={data}"))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start prometheus");
            if answers_as(&mut child, port, &data) {
                return Prometheus {
                    child,
                    port,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("prometheus did not start on a port of its own in 3 tries");
    }

    fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<serde_json::Value, String> {
        let mut req = ureq::get(&format!("http://127.0.0.1:{}{path}", self.port))
            .timeout(Duration::from_secs(10));
        for (k, v) in params {
            req = req.query(k, v);
        }
        let body = match req.call() {
            Ok(r) => {
                let mut s = String::new();
                r.into_reader()
                    .read_to_string(&mut s)
                    .map_err(|e| e.to_string())?;
                s
            }
            Err(ureq::Error::Status(code, r)) => {
                return Err(format!(
                    "HTTP {code}: {}",
                    r.into_string().unwrap_or_default()
                ))
            }
            Err(e) => return Err(e.to_string()),
        };
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }

    /// An instant query's result vector (an error for a PromQL Prometheus rejects).
    pub fn query(&self, expr: &str) -> Result<Vec<serde_json::Value>, String> {
        let v = self.api("/api/v1/query", &[("query", expr)])?;
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Grafana's `label_values(selector, label)`: the label's values over matching series.
    pub fn label_values(&self, selector: &str, label: &str) -> Result<Vec<String>, String> {
        let v = self.api(
            &format!("/api/v1/label/{label}/values"),
            &[("match[]", selector)],
        )?;
        Ok(v["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The value of an instant query's first series, polled until there is one (60 s at
    /// most).
    pub fn value(&self, expr: &str) -> String {
        let r = self.wait_for(expr, 60);
        r[0]["value"][1].as_str().unwrap_or("").to_string()
    }

    /// Polls until `expr` returns at least one series, or panics after `secs`.
    pub fn wait_for(&self, expr: &str, secs: u64) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            match self.query(expr) {
                Ok(r) if !r.is_empty() => return r,
                last => assert!(
                    Instant::now() < deadline,
                    "Prometheus returned no data for {expr} within {secs}s: {last:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls (30 s) until the Prometheus `child` answers on `port`; false when it exited first
/// (its port was taken) or another Prometheus answers there.
fn answers_as(child: &mut std::process::Child, port: u16, data: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        let flags = ureq::get(&format!("http://127.0.0.1:{port}/api/v1/status/flags"))
            .timeout(Duration::from_secs(5))
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok());
        if let Some(v) = flags {
            return v["data"]["storage.tsdb.path"].as_str() == Some(data);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("prometheus did not answer on 127.0.0.1:{port} within 30s");
}
