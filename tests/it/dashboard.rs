//! The Grafana dashboard in etc/dashboards/ works on our output: every PromQL expression in
//! it, with the dashboard's variables resolved the way Grafana resolves them, returns data
//! from a real Prometheus scraping the exporter on a simulated node (MIG panels on the mixed
//! MIG profile), in 4.8.x names, in dcgm-exporter 4.9.0's names and units, and on a fleet
//! running both (each node's series once); with and without `--low-cardinality`, where the
//! inventory and MIG panels take the static labels from the `DCGM_EXP_*_INFO` series. Every
//! legend that shows the host shows it under both spellings of the label.

use crate::support::prom::Prometheus;
use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn dashboard() -> Value {
    let path = repo("etc/dashboards/dcgm-exporter-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("read the dashboard");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (panel title, expression) for every query target, rows' nested panels included.
fn expressions(dash: &Value) -> Vec<(String, String)> {
    queries(dash).into_iter().map(|(t, e, _)| (t, e)).collect()
}

/// (panel title, expression, legend format) for every query target.
fn queries(dash: &Value) -> Vec<(String, String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String, String)>) {
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let title = p["title"].as_str().unwrap_or("").to_string();
                    let legend = t["legendFormat"].as_str().unwrap_or("").to_string();
                    out.push((title, e.into(), legend));
                }
            }
            walk(p["panels"].as_array().map_or(&[], |v| v), out);
        }
    }
    let mut out = Vec::new();
    walk(dash["panels"].as_array().expect("panels"), &mut out);
    out
}

/// The host in a legend under both spellings of the label: `hostname` (dcgm-exporter
/// 4.8.3 on, the default) and `Hostname` (4.8.2); only one is ever set on a series.
const HOST: &str = "{{hostname}}{{Hostname}}";

/// Every legend that shows the host shows it under both label spellings (dcgm-exporter
/// 4.10.0's dashboard shows the host; `{{Hostname}}` alone is empty under the default
/// `hostname`), and a query behind such a legend that aggregates keeps both labels.
#[test]
fn every_legend_shows_the_host_under_both_label_spellings() {
    let all = queries(&dashboard());
    let mut with_host = 0;
    for (title, expr, legend) in &all {
        let bare = legend.replace(HOST, "");
        assert!(
            !bare.to_lowercase().contains("{{hostname}}"),
            "{title}: {legend:?} names the host under one spelling only"
        );
        if !legend.contains(HOST) {
            continue;
        }
        with_host += 1;
        for clause in expr.split(" by (").skip(1) {
            let labels = clause.split(')').next().unwrap_or_default();
            assert!(
                labels.contains("hostname") && labels.contains("Hostname"),
                "{title}: {expr} drops a host label its legend {legend:?} shows"
            );
        }
    }
    // The per-GPU panels: temperature, power, clocks, utilisation, memory, tensor, energy,
    // XIDs, the MIG panels and the health row.
    assert!(with_host >= 13, "{with_host} legends show the host");
}

/// Grafana's interpolation of a multi-value variable in a regex matcher: `(a|b)`, or the
/// variable's allValue (`.*`) when it has no values.
fn interpolate(expr: &str, vars: &BTreeMap<String, String>) -> String {
    let mut s = expr.replace("$__rate_interval", "10s");
    // Longest names first, so `$gpu` never eats part of a longer name.
    let mut names: Vec<_> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        s = s.replace(&format!("${n}"), &vars[n]);
    }
    assert!(!s.contains('$'), "unresolved variable in {s}");
    s
}

fn regex_alternation(values: &[String]) -> String {
    if values.is_empty() {
        ".*".into()
    } else {
        format!("({})", values.join("|"))
    }
}

/// Resolves the dashboard's query variables in order, each through Prometheus's label
/// values API as Grafana's `label_values(selector, label)` does, all values selected.
fn resolve_variables(dash: &Value, prom: &Prometheus) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for v in dash["templating"]["list"].as_array().expect("templating") {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap().to_string();
        let def = v["definition"].as_str().unwrap();
        let inner = def
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: unsupported query {def}"));
        let (selector, label) = inner.rsplit_once(',').expect("selector, label");
        let selector = interpolate(selector.trim(), &vars);
        let values = prom
            .label_values(&selector, label.trim())
            .unwrap_or_else(|e| panic!("variable {name}: {e}"));
        vars.insert(name, regex_alternation(&values));
    }
    vars
}

fn needs_pods(expr: &str) -> bool {
    expr.contains("pod!=")
}

#[test]
fn the_dashboard_declares_its_variables_and_queries() {
    let dash = dashboard();
    let exprs = expressions(&dash);
    assert!(exprs.len() >= 15, "{exprs:?}");
    let mig = exprs
        .iter()
        .filter(|(_, e)| e.contains("GPU_I_ID!="))
        .count();
    let pods = exprs.iter().filter(|(_, e)| needs_pods(e)).count();
    assert!(mig >= 3 && pods >= 3, "MIG {mig}, pod {pods} queries");
    let health = exprs
        .iter()
        .filter(|(_, e)| {
            e.contains("DCGM_EXP_GPU_HEALTH_ACTION") || e.contains("DCGM_EXP_GPU_COUNT")
        })
        .count();
    let alerts = exprs.iter().filter(|(_, e)| e.contains("ALERTS{")).count();
    assert!(
        health >= 3 && alerts >= 1,
        "health {health}, alert {alerts} queries"
    );
    // Every info join falls back to the data series' own labels where a node has no info
    // series (no --low-cardinality), or those nodes would vanish from the panel.
    let joins: Vec<_> = exprs.iter().filter(|(_, e)| e.contains("_INFO{")).collect();
    assert!(joins.len() >= 8, "{joins:?}");
    for (title, e) in joins {
        assert!(
            e.contains("group_left(") && e.contains(" or on(instance, gpu"),
            "{title}: {e}"
        );
    }
    let names: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["datasource", "instance", "gpu", "namespace"]);
}

#[test]
fn every_gpu_and_mig_query_returns_data_in_a_real_prometheus() {
    gpu_and_mig_queries(&[("4.8.4", false)]);
}

/// `--low-cardinality`: the data series carry ids only, the panels that show a model,
/// driver, UUID or MIG profile join them from the info series.
#[test]
fn every_gpu_and_mig_query_returns_data_with_low_cardinality() {
    gpu_and_mig_queries(&[("4.8.4", true)]);
}

#[test]
fn every_gpu_and_mig_query_returns_data_on_4_9_0_names_with_low_cardinality() {
    gpu_and_mig_queries(&[("4.9.0", true)]);
}

/// A fleet turning the flag on node by node, across both generations of names.
#[test]
fn every_gpu_and_mig_query_returns_a_fleet_with_and_without_low_cardinality() {
    gpu_and_mig_queries(&[("4.8.4", true), ("4.9.0", false)]);
}

/// dcgm-exporter 4.9.0's names and units (the chart's 4.8.x metric list, renamed).
#[test]
fn every_gpu_and_mig_query_returns_data_on_4_9_0_names() {
    gpu_and_mig_queries(&[("4.9.0", false)]);
}

/// A fleet half-way through the upgrade: one node on each generation, each shown once.
#[test]
fn every_gpu_and_mig_query_returns_both_generations_of_a_mixed_fleet() {
    gpu_and_mig_queries(&[("4.8.4", false), ("4.9.0", false)]);
}

/// The oldest and the newest release emulated side by side: `Hostname` on one node,
/// `hostname` and 4.10.0's names on the other; every legend that shows the host has it.
#[test]
fn every_gpu_and_mig_query_returns_a_fleet_of_4_8_2_and_4_10_0() {
    gpu_and_mig_queries(&[("4.8.2", false), ("4.10.0", true)]);
}

/// Starts one exporter per (emulated release, `--low-cardinality`) on the MIG profile, one
/// Prometheus scraping all of them, and checks every GPU and MIG query of the dashboard
/// against it.
fn gpu_and_mig_queries(nodes: &[(&str, bool)]) {
    let versions: Vec<&str> = nodes.iter().map(|n| n.0).collect();
    if !require_tool(
        "prometheus",
        "apt-get install prometheus; .ci/run does this",
    ) {
        return;
    }
    // The chart's metric list: the profiling fields the dashboard shows are in it; with
    // the driver version's label field, which the inventory panels show. The XID panel
    // needs an XID: DCGM has no XID sample before one.
    let dir = tempfile::tempdir().unwrap();
    let counters = dir.path().join("counters.csv");
    let chart = std::fs::read_to_string(repo("deployment/files/default-counters.csv")).unwrap();
    std::fs::write(
        &counters,
        format!("{chart}\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n"),
    )
    .unwrap();
    let mut exporters = Vec::new();
    for (i, (v, low)) in nodes.iter().enumerate() {
        let faults = dir.path().join(format!("control-{i}"));
        let e = exporter()
            .profile("a100-mixed-mig.toml")
            .control(&faults)
            .args(&[
                "-f",
                counters.to_str().unwrap(),
                &format!("--emulate-version={v}"),
            ])
            .args(if *low { &["--low-cardinality"] } else { &[] })
            .start();
        control(&faults, "xid 5 79");
        exporters.push(e);
    }
    let targets: Vec<String> = exporters
        .iter()
        .map(|e| format!("127.0.0.1:{}", e.port))
        .collect();
    // The alert pack loaded, so that the alert panel has ALERTS to show (XID 79 fires
    // DcgmGpuFallenOffBus at once).
    let rules = repo("etc/prometheus/dcgm-alerts.rules.yml");
    let list = targets
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let prom = Prometheus::with_rules(
        &format!("  - job_name: dcgm\n    static_configs:\n      - targets: [{list}]\n"),
        &[rules.as_path()],
    );
    for (e, v) in exporters.iter().zip(&versions) {
        let i = format!("instance=\"127.0.0.1:{}\"", e.port);
        let (temp, xid, energy) = if matches!(*v, "4.9.0" | "4.10.0") {
            (
                "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                "DCGM_FI_DEV_XID_ERROR",
                "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            )
        } else {
            (
                "DCGM_FI_DEV_GPU_TEMP",
                "DCGM_FI_DEV_XID_ERRORS",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            )
        };
        prom.wait_for(&format!("{temp}{{{i}}}"), 60);
        prom.wait_for(&format!("{xid}{{{i}}}"), 30);
        // rate() needs two scrapes inside its window.
        prom.wait_for(&format!("rate({energy}{{{i}}}[10s])"), 30);
    }

    let dash = dashboard();
    let vars = resolve_variables(&dash, &prom);
    let mut instances = targets.clone();
    instances.sort();
    assert_eq!(vars["instance"], format!("({})", instances.join("|")));
    assert_eq!(vars["gpu"], "(0|1|2|3|4|5|6|7)", "every GPU of the profile");
    let mut checked = 0;
    for (title, expr, legend) in queries(&dash) {
        if needs_pods(&expr) {
            continue;
        }
        let q = interpolate(&expr, &vars);
        let result = prom.wait_for(&q, 20);
        checked += 1;
        // The legend's host is there, under whichever spelling the node's release uses.
        if legend.contains(HOST) {
            for r in &result {
                let m = &r["metric"];
                assert!(
                    nonempty(m, "hostname") || nonempty(m, "Hostname"),
                    "{title}: no host for {legend:?}: {r}"
                );
            }
        }
        // Each node's series once, whichever generation it runs (panels that aggregate
        // over nodes drop the instance label).
        let mut per_series: BTreeMap<String, usize> = BTreeMap::new();
        for r in &result {
            let m = &r["metric"];
            if let Some(inst) = m["instance"].as_str() {
                // `state` tells the node-level GPU count's series apart, `alertname` the
                // firing alerts of one GPU.
                let key = format!(
                    "{inst}/{}/{}/{}/{}",
                    m["gpu"], m["GPU_I_ID"], m["state"], m["alertname"]
                );
                *per_series.entry(key).or_default() += 1;
            }
        }
        if !per_series.is_empty() && !expr.contains("max by") {
            for t in &targets {
                assert!(
                    per_series.keys().any(|k| k.starts_with(&format!("{t}/"))),
                    "{title}: no series of {t}: {q}"
                );
            }
            assert!(
                per_series.values().all(|&n| n == 1),
                "{title}: {per_series:?}"
            );
        }
        if expr.contains("GPU_I_ID!=") {
            // MIG panels show GPU instances only, each named by its profile (from
            // DCGM_EXP_MIG_INFO on a --low-cardinality node).
            for r in &result {
                let m = &r["metric"];
                if title != "MIG instances by profile" {
                    assert!(nonempty(m, "GPU_I_ID"), "{title}: {r}");
                }
                assert!(nonempty(m, "GPU_I_PROFILE"), "{title}: {r}");
            }
        }
        check_inventory(&title, &result, &targets, &q);
        // The health row names GPU 5, the one with the XID, and no other.
        if matches!(title.as_str(), "GPUs needing action" | "Firing GPU alerts") {
            for r in &result {
                assert_eq!(r["metric"]["gpu"], "5", "{title}: {r}");
            }
        }
        if title == "GPUs needing action" {
            assert_eq!(result[0]["metric"]["action"], "reboot_node", "{result:?}");
            assert_eq!(result[0]["metric"]["reason"], "xid", "{result:?}");
        }
        if title == "MIG instances by profile" {
            let by: BTreeMap<String, String> = result
                .iter()
                .map(|r| {
                    (
                        r["metric"]["GPU_I_PROFILE"].as_str().unwrap().to_string(),
                        r["value"][1].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            // etc/sim/a100-mixed-mig.toml: 7+2 1g.10gb, one 2g.20gb, 3g.40gb on GPUs 1 and
            // 3, one 4g.40gb and one 7g.80gb; per node.
            let n = versions.len();
            let want: BTreeMap<String, String> = [
                ("1g.10gb", 9),
                ("2g.20gb", 1),
                ("3g.40gb", 2),
                ("4g.40gb", 1),
                ("7g.80gb", 1),
            ]
            .into_iter()
            .map(|(a, b)| (a.to_string(), (b * n).to_string()))
            .collect();
            assert_eq!(by, want, "{q}");
        }
    }
    assert!(checked >= 23, "checked {checked} queries");
}

fn nonempty(m: &Value, label: &str) -> bool {
    m[label].as_str().is_some_and(|v| !v.is_empty())
}

/// The driver version, under the label field's name in either generation.
fn driver(m: &Value) -> Option<&str> {
    ["DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"]
        .iter()
        .find_map(|l| m[*l].as_str().filter(|v| !v.is_empty()))
}

/// The inventory row: every GPU of every node counted once under its model and driver,
/// whether its node publishes those labels on the data series or on DCGM_EXP_GPU_INFO
/// (etc/sim/a100-mixed-mig.toml: eight A100-SXM4-80GB on driver 550.54.15).
fn check_inventory(title: &str, result: &[Value], targets: &[String], q: &str) {
    const MODEL: &str = "NVIDIA A100-SXM4-80GB";
    let gpus = 8 * targets.len();
    let value = |r: &Value| r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
    match title {
        "GPU utilization by model" => {
            assert_eq!(result.len(), 1, "{q}: {result:?}");
            assert_eq!(result[0]["metric"]["modelName"], MODEL, "{result:?}");
        }
        "GPUs by model" => {
            assert_eq!(result.len(), 1, "{q}: {result:?}");
            assert_eq!(result[0]["metric"]["modelName"], MODEL, "{result:?}");
            assert_eq!(value(&result[0]), gpus as f64, "{q}: {result:?}");
        }
        "Framebuffer memory used by driver version" => {
            // One row per generation of the label's name, each with the version.
            for r in result {
                assert_eq!(driver(&r["metric"]), Some("550.54.15"), "{q}: {r}");
                assert!(value(r) > 0.0, "{r}");
            }
        }
        "GPU inventory" => {
            let mut seen = std::collections::BTreeSet::new();
            for r in result {
                let m = &r["metric"];
                for l in ["UUID", "modelName", "pci_bus_id"] {
                    assert!(nonempty(m, l), "{l} of {r}");
                }
                assert_eq!(driver(m), Some("550.54.15"), "{r}");
                assert!(seen.insert((m["instance"].to_string(), m["gpu"].to_string())));
            }
            assert_eq!(seen.len(), gpus, "{q}: {result:?}");
        }
        _ => return,
    }
    assert!(!result.is_empty(), "{title}: {q}");
}

/// The pod row: pods hold a whole GPU (by UUID) and a MIG instance (GKE's
/// `nvidia<gpu>/gi<id>` form) through a fake kubelet; every pod query, `$namespace`
/// resolved from the data, returns those pods.
#[test]
fn every_pod_query_returns_the_pods_holding_gpus() {
    use crate::support::kubelet::{trainer_and_mig_server, FakeKubelet};
    if !require_tool(
        "prometheus",
        "apt-get install prometheus; .ci/run does this",
    ) {
        return;
    }
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .kubelet(&kubelet)
        .args(&[
            "-f",
            repo("deployment/files/default-counters.csv")
                .to_str()
                .unwrap(),
        ])
        .start();
    let page = e.scrape();
    let whole = page
        .iter()
        .find(|s| s.label("gpu") == Some("5") && s.label("UUID").is_some())
        .and_then(|s| s.label("UUID"))
        .expect("GPU 5 is whole")
        .to_string();
    let gi = page
        .iter()
        .find(|s| s.label("gpu") == Some("3") && s.label("GPU_I_ID").is_some())
        .and_then(|s| s.label("GPU_I_ID"))
        .expect("GPU 3 has instances")
        .to_string();
    kubelet.set_pods(trainer_and_mig_server(&whole, &gi));
    e.scrape_until(15, |s| {
        s.iter()
            .filter(|x| x.label("pod").is_some())
            .map(|x| x.label("pod"))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == 2
    });
    let prom = Prometheus::start(&[format!("127.0.0.1:{}", e.port)]);
    prom.wait_for(
        "count(count by (pod) (DCGM_FI_DEV_FB_USED{pod!=\"\"})) == 2",
        60,
    );
    let dash = dashboard();
    let vars = resolve_variables(&dash, &prom);
    assert_eq!(vars["namespace"], "(inference|ml)");
    let mut checked = 0;
    for (title, expr) in expressions(&dash)
        .into_iter()
        .filter(|(_, e)| needs_pods(e))
    {
        let q = interpolate(&expr, &vars);
        let result = prom.wait_for(&q, 20);
        let found: std::collections::BTreeSet<String> = result
            .iter()
            .map(|r| {
                let m = &r["metric"];
                match m["pod"].as_str() {
                    Some(p) => format!("{}/{p}", m["namespace"].as_str().unwrap()),
                    None => m["namespace"].as_str().unwrap().to_string(),
                }
            })
            .collect();
        // Every pod query finds both pods: memory is per instance, and utilisation and power
        // (GPU-level fields) are read from the parent GPU on a MIG instance, as DCGM does.
        let want: Vec<&str> = if expr.contains("pod)") {
            vec!["inference/llm-0", "ml/trainer-0"]
        } else {
            vec!["inference", "ml"]
        };
        let want: std::collections::BTreeSet<String> = want.into_iter().map(String::from).collect();
        assert_eq!(found, want, "{title}: {q}");
        checked += 1;
    }
    assert_eq!(checked, 4);
}
