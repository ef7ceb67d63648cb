//! The HPA recipe (etc/prometheus/): the recording rules pass the real `promtool check
//! rules` and `promtool test rules` (idle GPUs, in-use GPUs, an empty pod label, MIG
//! instances, `-o` label names), and prometheus-adapter's configuration is valid for its
//! schema, names the recorded series, and its queries, expanded as the adapter expands
//! them, give the expected numbers when Prometheus' engine (promtool) evaluates them.

use crate::support;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn run(args: &[&str], dir: &Path) -> String {
    support::prom::promtool_in(dir, args)
}

#[test]
fn recording_rules_pass_promtool_check_and_unit_tests() {
    if !support::promtool() {
        return;
    }
    let dir = support::repo("etc/prometheus");
    let out = run(&["check", "rules", "dcgm-hpa.rules.yml"], &dir);
    assert!(out.contains("SUCCESS: 16 rules found"), "{out}");
    let out = run(&["test", "rules", "dcgm-hpa.rules.test.yml"], &dir);
    assert!(out.contains("SUCCESS"), "{out}");
}

// prometheus-adapter's configuration schema (pkg/config/config.go), strict: a misspelt key
// is an error here instead of a rule the adapter silently lacks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AdapterConfig {
    #[serde(default)]
    rules: Vec<DiscoveryRule>,
    #[serde(default)]
    external_rules: Vec<DiscoveryRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DiscoveryRule {
    series_query: String,
    #[serde(default)]
    resources: Resources,
    name: NameMapping,
    metrics_query: String,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resources {
    #[serde(default)]
    overrides: BTreeMap<String, GroupResource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupResource {
    resource: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameMapping {
    matches: String,
    #[serde(rename = "as")]
    as_: String,
}

/// The names the rules file records.
fn recorded_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(support::repo("etc/prometheus/dcgm-hpa.rules.yml")).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    doc["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .map(|r| r["record"].as_str().unwrap().to_string())
        .collect()
}

/// The metric-name regex of a series query `{__name__=~"...",...}`.
fn name_regex(series_query: &str) -> regex::Regex {
    let re = regex::Regex::new(r#"__name__=~"([^"]+)""#).unwrap();
    let pattern = &re.captures(series_query).expect("a __name__ matcher")[1];
    regex::Regex::new(pattern).unwrap()
}

/// Per rule: (API metric name -> recorded series) for every recorded series it selects.
fn api_names(rule: &DiscoveryRule, recorded: &BTreeSet<String>) -> BTreeMap<String, String> {
    let select = name_regex(&rule.series_query);
    let matches = regex::Regex::new(&rule.name.matches).unwrap();
    recorded
        .iter()
        .filter(|n| select.is_match(n))
        .map(|n| {
            let caps = matches
                .captures(n)
                .unwrap_or_else(|| panic!("{} does not match {}", n, rule.name.matches));
            let mut api = String::new();
            caps.expand(&rule.name.as_, &mut api);
            (api, n.clone())
        })
        .collect()
}

/// The adapter's query template (`<<.Series>>`, `<<.LabelMatchers>>`, `<<.GroupBy>>`).
fn expand(template: &str, series: &str, matchers: &str, group_by: &str) -> String {
    template
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", group_by)
}

#[test]
fn the_adapter_config_exposes_the_recorded_averages_and_its_queries_evaluate() {
    let text =
        std::fs::read_to_string(support::repo("etc/prometheus/prometheus-adapter.yaml")).unwrap();
    let cfg: AdapterConfig = serde_norway::from_str(&text).unwrap();
    let recorded = recorded_names();
    assert_eq!((cfg.rules.len(), cfg.external_rules.len()), (1, 2));

    let pods = &cfg.rules[0];
    let ns = &cfg.external_rules[0];
    let cluster = &cfg.external_rules[1];
    let resources = |r: &DiscoveryRule| -> Vec<(String, String)> {
        r.resources
            .overrides
            .iter()
            .map(|(k, v)| (k.clone(), v.resource.clone()))
            .collect()
    };
    assert_eq!(
        resources(pods),
        [
            ("namespace".into(), "namespace".into()),
            ("pod".into(), "pod".into())
        ]
    );
    assert_eq!(resources(ns), [("namespace".into(), "namespace".into())]);
    assert!(resources(cluster).is_empty());

    let fields = ["mem_copy_util", "gpu_util", "fb_used", "gr_engine_active"];
    let names = |r: &DiscoveryRule| api_names(r, &recorded);
    let want = |fmt: &dyn Fn(&str) -> (String, String)| -> BTreeMap<String, String> {
        fields.iter().map(|f| fmt(f)).collect()
    };
    assert_eq!(
        names(pods),
        want(&|f| (format!("gpu_{f}"), format!("namespace_pod:gpu_{f}:avg")))
    );
    assert_eq!(
        names(ns),
        want(&|f| (
            format!("gpu_{f}_avg_in_use_namespace"),
            format!("namespace:gpu_{f}:avg_in_use")
        ))
    );
    assert_eq!(
        names(cluster),
        want(&|f| (format!("gpu_{f}_avg_in_use"), format!("gpu:{f}:avg_in_use")))
    );

    if !support::promtool() {
        return;
    }
    // The queries an HPA in namespace ml (Pods metric over its two pods), one in batch
    // (external, namespace) and a cluster-wide one make, evaluated on the unit test's node.
    let pods_q = expand(
        &pods.metrics_query,
        "namespace_pod:gpu_mem_copy_util:avg",
        r#"namespace="ml",pod=~"train-a|train-b""#,
        "pod",
    );
    let ns_q = expand(
        &ns.metrics_query,
        "namespace:gpu_mem_copy_util:avg_in_use",
        r#"namespace="batch""#,
        "",
    );
    let cluster_q = expand(
        &cluster.metrics_query,
        "gpu:mem_copy_util:avg_in_use",
        "",
        "",
    );
    let unit: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(support::repo("etc/prometheus/dcgm-hpa.rules.test.yml")).unwrap(),
    )
    .unwrap();
    let case = |expr: &str, samples: &[(&str, f64)]| {
        let mut m = serde_norway::Mapping::new();
        m.insert("expr".into(), expr.into());
        m.insert("eval_time".into(), "3m".into());
        let s: Vec<serde_norway::Value> = samples
            .iter()
            .map(|(labels, value)| {
                let mut e = serde_norway::Mapping::new();
                e.insert("labels".into(), (*labels).into());
                e.insert("value".into(), (*value).into());
                serde_norway::Value::Mapping(e)
            })
            .collect();
        m.insert("exp_samples".into(), serde_norway::Value::Sequence(s));
        serde_norway::Value::Mapping(m)
    };
    let mut test = unit["tests"][0].clone();
    test["promql_expr_test"] = serde_norway::Value::Sequence(vec![
        case(
            &pods_q,
            &[(r#"{pod="train-a"}"#, 40.0), (r#"{pod="train-b"}"#, 60.0)],
        ),
        case(&ns_q, &[(r#"{namespace="batch"}"#, 60.0)]),
        case(&cluster_q, &[("{}", 55.0)]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut doc = serde_norway::Mapping::new();
    doc.insert(
        "rule_files".into(),
        vec![support::repo("etc/prometheus/dcgm-hpa.rules.yml")
            .to_str()
            .unwrap()
            .to_string()]
        .into(),
    );
    doc.insert("evaluation_interval".into(), "1m".into());
    doc.insert("tests".into(), serde_norway::Value::Sequence(vec![test]));
    std::fs::write(
        dir.path().join("adapter.test.yml"),
        serde_norway::to_string(&doc).unwrap(),
    )
    .unwrap();
    let out = run(&["test", "rules", "adapter.test.yml"], dir.path());
    assert!(out.contains("SUCCESS"), "{out}");
}
