//! The alert pack (etc/prometheus/dcgm-alerts.rules.yml, and dcgm-profiling.rules.yml for
//! profiling that heals): the real `promtool check rules`
//! and `promtool test rules` pass; every alert has a severity, a summary, a runbook link to
//! a section that exists in docs/alerts-and-dashboards.md, and test cases where it fires
//! and where it stays silent; the chart ships the same file. End to end: a real Prometheus
//! loads the rules (evaluated every second, `for:` durations as shipped), scrapes the
//! exporter on the simulator, and an XID 79 and a lost GPU injected through the control
//! file bring the matching alerts to firing.

use crate::support::*;
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

const RULES: &str = "etc/prometheus/dcgm-alerts.rules.yml";
const TESTS: &str = "etc/prometheus/dcgm-alerts.rules.test.yml";
/// Profiling that heals (NVIDIA/DCGM#303): its own file, not shipped by the chart yet.
const PROFILING_RULES: &str = "etc/prometheus/dcgm-profiling.rules.yml";
const PROFILING_TESTS: &str = "etc/prometheus/dcgm-profiling.rules.test.yml";

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// alert name -> its rule.
fn alerts() -> BTreeMap<String, Value> {
    alerts_in(RULES)
}

fn alerts_in(rules: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for g in yaml(rules)["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            if let Some(name) = r["alert"].as_str() {
                assert!(
                    out.insert(name.to_string(), r.clone()).is_none(),
                    "{name} twice"
                );
            }
        }
    }
    out
}

/// `promtool check rules` and `promtool test rules` on one rules file and its tests.
fn promtool_passes(rules: &str, tests: &str) {
    if !promtool() {
        return;
    }
    let n = alerts_in(rules).len();
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    prom::check_and_test_rules(&name(rules), n, &name(tests));
}

/// Whether the real Prometheus is installed (else the skip line, or a failure under CI).
fn prometheus_here() -> bool {
    require_tool(
        "prometheus",
        "apt-get install prometheus; .ci/run does this",
    )
}

#[test]
fn the_alert_pack_passes_promtool_check_and_unit_tests() {
    promtool_passes(RULES, TESTS);
}

#[test]
fn every_alert_has_severity_summary_runbook_and_fires_and_stays_silent_in_the_tests() {
    let all = alerts();
    assert!(all.len() >= 20, "{:?}", all.keys());
    check_pack(&all, TESTS);
}

/// The profiling alerts (DcgmGpuProfilingStuck, DcgmGpuProfilingRearmed) as the pack's.
#[test]
fn the_profiling_alerts_pass_promtool_and_have_runbooks_and_tests() {
    promtool_passes(PROFILING_RULES, PROFILING_TESTS);
    let all = alerts_in(PROFILING_RULES);
    assert_eq!(
        all.keys().map(String::as_str).collect::<Vec<_>>(),
        ["DcgmGpuProfilingRearmed", "DcgmGpuProfilingStuck"]
    );
    check_pack(&all, PROFILING_TESTS);
}

/// Every alert has a severity, a summary and a runbook section, and test cases where it
/// fires and where it stays silent.
fn check_pack(all: &BTreeMap<String, Value>, tests: &str) {
    let docs = std::fs::read_to_string(repo("docs/alerts-and-dashboards.md")).unwrap();
    let anchors: BTreeSet<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    for (name, r) in all {
        let sev = r["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            matches!(sev, "critical" | "warning" | "info"),
            "{name}: severity {sev:?}"
        );
        assert!(
            r["annotations"]["summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{name}: no summary"
        );
        let url = r["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let anchor = url
            .strip_prefix("docs/alerts-and-dashboards.md#")
            .unwrap_or_else(|| panic!("{name}: runbook_url {url:?}"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: anchor");
        assert!(
            anchors.contains(anchor),
            "{name}: no '### {name}' section in docs/alerts-and-dashboards.md"
        );
    }
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for t in yaml(tests)["tests"].as_sequence().unwrap() {
        for c in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = c["alertname"].as_str().unwrap().to_string();
            assert!(all.contains_key(&name), "a test of unknown alert {name}");
            let empty = c["exp_alerts"].as_sequence().is_none_or(|a| a.is_empty());
            if empty {
                silent.insert(name);
            } else {
                fires.insert(name);
            }
        }
    }
    for name in all.keys() {
        assert!(fires.contains(name), "no test where {name} fires");
        assert!(silent.contains(name), "no test where {name} stays silent");
    }
}

#[test]
fn the_chart_ships_the_same_rules() {
    for rules in [RULES, "etc/prometheus/dcgm-profiling.rules.yml"] {
        let ours = std::fs::read_to_string(repo(rules)).unwrap();
        let name = Path::new(rules).file_name().unwrap().to_str().unwrap();
        let chart = std::fs::read_to_string(repo(&format!("deployment/files/{name}"))).unwrap();
        assert!(
            ours == chart,
            "deployment/files/{name} differs from {rules}: cp {rules} deployment/files/"
        );
    }
}

/// Alert name -> the `gpu` labels (or "" for node-level) of its firing alerts.
fn firing(p: &prom::Prometheus) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in p.alerts().unwrap_or_default() {
        if a["state"] != "firing" {
            continue;
        }
        let name = a["labels"]["alertname"].as_str().unwrap_or_default();
        let gpu = a["labels"]["gpu"].as_str().unwrap_or_default();
        out.entry(name.to_string())
            .or_default()
            .insert(gpu.to_string());
    }
    out
}

fn wait_firing(
    p: &prom::Prometheus,
    secs: u64,
    want: &[(&str, &str)],
) -> BTreeMap<String, BTreeSet<String>> {
    poll(secs, Duration::from_millis(500), || {
        let f = firing(p);
        let missing: Vec<_> = want
            .iter()
            .filter(|(a, g)| !f.get(*a).is_some_and(|s| s.contains(*g)))
            .collect();
        match missing.is_empty() {
            true => Ok(f),
            false => Err(format!(
                "not firing within {secs}s: {missing:?}; firing: {f:?}; all: {:?}",
                p.alerts()
            )),
        }
    })
}

/// Where Prometheus is installed, [`scraped_with`] once `ready` holds and the rules have
/// been evaluated again (within `settle_secs`) with nothing firing; and the simulator's
/// control file.
fn healthy(
    rules: &str,
    control: &str,
    ready: &str,
    settle_secs: u64,
) -> Option<(tempfile::TempDir, Exporter, prom::Prometheus, PathBuf)> {
    if !prometheus_here() {
        return None;
    }
    let (dir, e, p) = scraped_with(rules, control);
    let ctl = dir.path().join("control");
    p.wait_for(ready, 60);
    p.wait_rule_evaluations(settle_secs);
    assert_eq!(firing(&p), BTreeMap::new(), "a healthy node fires nothing");
    Some((dir, e, p, ctl))
}

/// The simulated 8-GPU node at `-c 500` with a control file starting as `control`, scraped
/// by a real Prometheus that loads `rules`: (the control file's directory, the exporter, it).
fn scraped_with(rules: &str, control: &str) -> (tempfile::TempDir, Exporter, prom::Prometheus) {
    let (dir, ctl) = temp_file("control", control);
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&ctl)
        .args(&["-c", "500"])
        .start();
    let target = e
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let rules = repo(rules);
    let p = prom::Prometheus::with_rules(
        &format!(
            "  - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['{target}']\n"
        ),
        &[rules.as_path()],
    );
    (dir, e, p)
}

#[test]
fn an_xid_79_and_a_lost_gpu_fire_their_alerts_in_a_real_prometheus() {
    // Healthy: the exporter is scraped, its GPUs counted, and nothing fires.
    let Some((_dir, _e, p, ctl)) =
        healthy(RULES, "", "DCGM_EXP_GPU_COUNT{state=\"present\"} == 8", 30)
    else {
        return;
    };

    control(&ctl, "xid 1 79");
    control(&ctl, "gpu_lost 3");
    // XID 79 on GPU 1: off the bus, and its action says reboot; GPU 3 lost: off the bus
    // (reason gpu_lost) and reboot; the node has 7 of 8 GPUs (after its 1m `for:`).
    let f = wait_firing(
        &p,
        150,
        &[
            ("DcgmGpuFallenOffBus", "1"),
            ("DcgmGpuFallenOffBus", "3"),
            ("DcgmGpuRebootNode", "1"),
            ("DcgmGpuRebootNode", "3"),
            ("DcgmXidErrors", "1"),
            ("DcgmGpusFewerThanExpected", ""),
        ],
    );
    // Only the faulty GPUs are named.
    for (alert, gpus) in &f {
        for g in gpus {
            assert!(
                matches!(g.as_str(), "1" | "3" | ""),
                "{alert} fired for GPU {g}"
            );
        }
    }
    assert!(!f.contains_key("DcgmExporterDown"), "{f:?}");
    assert!(!f.contains_key("DcgmExporterDcgmDisconnected"), "{f:?}");
}

/// A simulated DCGM#303 episode end to end: GPU 0 busy, its profiling stuck at 0 after an
/// XID 31 (`prof_stuck`), the exporter re-arms it, and a real Prometheus loading
/// dcgm-profiling.rules.yml fires DcgmGpuProfilingRearmed for GPU 0 only;
/// DcgmGpuProfilingStuck stays silent (healed long before its 15 minutes).
#[test]
fn a_stuck_profiling_episode_fires_the_rearm_alert_in_a_real_prometheus() {
    // GPU 0 busy (DCGM_FI_DEV_GPU_UTIL 100).
    let ready = "dcgm_exporter_profiling_stuck{gpu=\"0\"} == 0";
    let Some((_dir, _e, p, ctl)) = healthy(PROFILING_RULES, "set 0 203 100\n", ready, 5) else {
        return;
    };
    control(&ctl, "xid 0 31");
    control(&ctl, "prof_stuck 0");
    let f = wait_firing(&p, 60, &[("DcgmGpuProfilingRearmed", "0")]);
    assert_eq!(
        f.get("DcgmGpuProfilingRearmed"),
        Some(&BTreeSet::from(["0".to_string()]))
    );
    assert!(!f.contains_key("DcgmGpuProfilingStuck"), "{f:?}");
}
