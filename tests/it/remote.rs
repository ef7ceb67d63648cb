//! Remote mode against the simulated nv-hostengine: the exporter survives the engine being
//! killed (serving no stale DCGM values meanwhile) and recovers when it comes back.

use crate::support::*;

#[test]
fn survives_a_host_engine_restart_without_serving_stale_values() {
    let port = free_port();
    let mut engine = HostEngine::start(port, Some("h100-8gpu-nvswitch.toml"));
    let mut e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "300"])
        .env("NODE_NAME", "gpu-node-3")
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    // An engine on loopback is this node: NODE_NAME (upstream 4.8.3, #697), not 127.0.0.1.
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP")[0].label("hostname"),
        Some("gpu-node-3")
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
    // Not ready; alive (upstream's liveness contract: a restart brings no engine back).
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    assert_eq!(e.get("/health").0, 200);

    let _engine = HostEngine::start(port, Some("h100-8gpu-nvswitch.toml"));
    let back = e.scrape_until(30, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 8);
    assert!(series(&back, "dcgm_exporter_reconnects_total")[0].value >= 1.0);
    let (code, _) = e.get("/ready");
    assert_eq!(code, 200);
    assert!(e.signal_and_wait("TERM").success());
}

#[test]
fn remote_mode_is_selected_by_the_environment_variable_alone() {
    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .env("DCGM_REMOTE_HOSTENGINE_INFO", &format!("localhost:{port}"))
        .env("DCGM_EXPORTER_EMULATE_VERSION", "4.8.2")
        .env("NODE_NAME", "gpu-node-3")
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    // 4.8.2 named the series after -r's host even on loopback, under `Hostname`.
    let temp = &series(&page, "DCGM_FI_DEV_GPU_TEMP")[0];
    assert_eq!(temp.label("Hostname"), Some("localhost"));
    assert_eq!(temp.label("hostname"), None);
}

/// In a sidecar set-up the exporter often starts before the engine: it serves /ready 503
/// (HTTP up; /health 200, saying why) and connects once the engine comes, with the start-up
/// lines naming the engine.
#[test]
fn an_engine_not_reachable_at_start_is_retried_with_ready_503_meanwhile() {
    let port = free_port();
    let e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "300"])
        .spawn();
    // The HTTP server answers while DCGM is not there (status 0: no answer yet).
    e.wait_until(30, |e| e.get_with("/ready", &[]).0 == 503);
    let (code, body) = e.get("/health");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("127.0.0.1:{port}")), "{body}");
    assert!(
        e.stderr()
            .contains("mode: remote DCGM host engine at 127.0.0.1:"),
        "{}",
        e.stderr()
    );
    e.wait_for_log(30, "retrying");
    let _engine = HostEngine::start(port, Some("h100-8gpu-nvswitch.toml"));
    let page = e.scrape_until(30, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 8);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 8);
    e.wait_until(30, |e| e.get_with("/ready", &[]).0 == 200);
    assert!(
        e.stderr().contains(&format!(
            "connected to the DCGM host engine at 127.0.0.1:{port}"
        )),
        "{}",
        e.stderr()
    );
}

/// `--exit-if-hostengine-unreachable` keeps dcgm-exporter's behaviour: one fatal line,
/// exit 1 (the env var does the same).
#[test]
fn the_flag_keeps_the_exit_at_start() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    for b in [
        exporter().args(&["-r", &addr, "--exit-if-hostengine-unreachable"]),
        exporter()
            .args(&["-r", &addr])
            .env("DCGM_EXPORTER_EXIT_IF_HOSTENGINE_UNREACHABLE", "true"),
    ] {
        let (code, stderr) = b.run_to_exit();
        assert_eq!(code, 1, "{stderr}");
        let fatal = lines_with(&stderr, "level=fatal");
        assert_eq!(fatal.len(), 1, "{stderr}");
        assert!(fatal[0].contains(&addr), "{stderr}");
    }
}
