//! Our output checked by real Prometheus tools: `promtool check metrics` lints every
//! simulator profile's page, and a real Prometheus server scrapes the exporter and answers
//! a PromQL query over it.

use crate::support::prom::{promtool_check, promtool_problems, tool, Prometheus};
use crate::support::*;
use std::process::Command;

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
            let problems = promtool_problems(&page);
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
    let prom = Prometheus::start(&[format!("127.0.0.1:{}", e.port)]);
    let result = prom.value("count(DCGM_FI_DEV_GPU_TEMP{job=\"dcgm\"})");
    let up = prom.value("up{job=\"dcgm\"}");
    assert_eq!(result, "8", "one temperature series per GPU");
    assert_eq!(up, "1", "target up");
}

/// Whether this Prometheus knows `scrape_protocols` (2.49 and later); older ones already ask
/// for OpenMetrics 1.0 first in their default Accept header.
fn knows_scrape_protocols() -> bool {
    let (_dir, cfg) = temp_file("p.yml", "scrape_configs:\n  - job_name: x\n    scrape_protocols: [OpenMetricsText1.0.0]\n    static_configs:\n      - targets: ['127.0.0.1:1']\n");
    output_within(
        Command::new(tool("promtool")).args(["check", "config", cfg.to_str().unwrap()]),
        QUICK,
    )
    .status
    .success()
}

#[test]
fn prometheus_scrapes_openmetrics_and_a_custom_metrics_path() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&[
            "--web-enable-openmetrics",
            "--web-telemetry-path=/gpu/metrics",
        ])
        .start_at("/gpu/metrics");
    let protocols = if knows_scrape_protocols() {
        "    scrape_protocols: [OpenMetricsText1.0.0]\n"
    } else {
        eprintln!("this Prometheus predates scrape_protocols; its default Accept header prefers OpenMetrics 1.0");
        ""
    };
    let p = Prometheus::with_scrape_configs(&format!(
        "  - job_name: dcgm\n    metrics_path: /gpu/metrics\n{protocols}    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
        e.port
    ));
    // Only an OpenMetrics parse gives a counter family's sample the _total suffix.
    assert_eq!(
        p.value("count(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{job=\"dcgm\"})"),
        "8"
    );
    assert_eq!(p.value("count(DCGM_FI_DEV_GPU_TEMP{job=\"dcgm\"})"), "8");
    assert_eq!(p.value("up{job=\"dcgm\"}"), "1");
    // What Prometheus was sent: OpenMetrics, ending in # EOF.
    let (status, page) = e.get_with(
        "/gpu/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    );
    assert_eq!(status, 200);
    assert!(
        page.ends_with("# EOF\n"),
        "{}",
        &page[page.len().saturating_sub(200)..]
    );
    assert!(page.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
    assert!(page.contains("# TYPE dcgm_exporter_collections counter\n"));
    // The 0.0.4 page stays what promtool accepts.
    let (_, text) = e.get_with("/gpu/metrics", &[("Accept", "text/plain;version=0.0.4")]);
    assert!(!text.contains("# EOF"));
    let report = promtool_check(&text);
    assert!(
        !report.contains("error") && !report.contains("parse"),
        "promtool: {report}"
    );
}

#[test]
fn without_the_flag_prometheus_gets_the_text_format_and_the_usual_names() {
    let e = exporter().profile("h100-8gpu-nvswitch.toml").start();
    let p = Prometheus::with_scrape_configs(&format!(
        "  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
        e.port
    ));
    assert_eq!(
        p.value("count(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{job=\"dcgm\"})"),
        "8"
    );
}
