//! Remote mode against the simulated nv-hostengine: the exporter survives the engine being
//! killed (serving no stale DCGM values meanwhile) and recovers when it comes back.

mod support;
use support::*;

#[test]
fn survives_a_host_engine_restart_without_serving_stale_values() {
    let port = free_port();
    let mut engine = HostEngine::start(port, Some("h100-8gpu-nvswitch.toml"));
    let mut e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "300"])
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    // Remote mode labels series with the engine's host (dcgm-exporter's rule).
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP")[0].label("Hostname"),
        Some("127.0.0.1")
    );

    engine.kill();
    let outage = e.scrape_until(20, |p| {
        p.iter()
            .any(|s| s.name == "dcgm_exporter_dcgm_connected" && s.value == 0.0)
    });
    assert!(
        outage.iter().all(|s| !s.name.starts_with("DCGM_")),
        "stale DCGM values served during the outage"
    );
    let (code, body) = e.get("/health");
    assert_eq!(code, 503, "{body}");

    let _engine = HostEngine::start(port, Some("h100-8gpu-nvswitch.toml"));
    let back = e.scrape_until(30, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 8);
    assert!(series(&back, "dcgm_exporter_reconnects_total")[0].value >= 1.0);
    let (code, _) = e.get("/health");
    assert_eq!(code, 200);
    assert!(e.signal_and_wait("TERM").success());
}

#[test]
fn remote_mode_is_selected_by_the_environment_variable_alone() {
    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .env("DCGM_REMOTE_HOSTENGINE_INFO", &format!("localhost:{port}"))
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP")[0].label("Hostname"),
        Some("localhost")
    );
}
