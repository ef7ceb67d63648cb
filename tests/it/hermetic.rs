//! The test helpers start the exporter and the host engines with a cleared environment plus
//! an allowlist (`support::hermetic`): a developer's own `DCGM_EXPORTER_*` (or
//! `DCGM_SIM_*`, `KUBECONFIG`...) settings never reach the programs under test.
//!
//! The test sets its process's environment, which every other test would see: it runs
//! alone in a child process (`support::alone!`).

use crate::support::*;

/// Settings that each stop or divert an exporter or a simulated host engine that sees them.
const DEVELOPERS_ENV: &[(&str, &str)] = &[
    ("DCGM_EXPORTER_INTERVAL", "abc"),
    (
        "DCGM_EXPORTER_WEB_CONFIG_FILE",
        "/nonexistent/web-config.yml",
    ),
    ("DCGM_EXPORTER_CONFIG_FILE", "/nonexistent/config.yaml"),
    ("DCGM_EXPORTER_DEVICES_STR", "g:99"),
    ("DCGM_EXPORTER_WEB_TELEMETRY_PATH", "/elsewhere"),
    ("DCGM_REMOTE_HOSTENGINE_INFO", "127.0.0.1:1"),
    ("DCGM_SIM_PROFILE", "/nonexistent/profile.toml"),
    ("KUBECONFIG", "/nonexistent/kubeconfig"),
];

#[test]
fn a_developers_own_settings_do_not_reach_the_exporters_the_tests_start() {
    crate::support::alone!(a_developers_own_settings_do_not_reach_the_exporters_the_tests_start);
    // What such settings do where they reach the exporter: it will not start, so the runs
    // below would fail if the helpers passed them on.
    for k in [
        "DCGM_EXPORTER_WEB_CONFIG_FILE",
        "DCGM_EXPORTER_CONFIG_FILE",
        "DCGM_EXPORTER_DEVICES_STR",
    ] {
        let v = DEVELOPERS_ENV.iter().find(|(n, _)| *n == k).unwrap().1;
        let (code, err) = exporter().env(k, v).run_to_exit();
        assert_ne!(code, 0, "{k}={v} was accepted: {err}");
    }
    // (The builder passes -c, which wins over the variable; without it: refused.)
    let out = output_within(
        exporter_command()
            .env("DCGM_EXPORTER_INTERVAL", "abc")
            .arg("--dcgm-library")
            .arg(sim_library()),
        QUICK,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("abc"));
    for (k, v) in DEVELOPERS_ENV {
        std::env::set_var(k, v);
    }

    let e = exporter().profile("one-gpu.toml").start();
    assert_eq!(series(&e.scrape(), "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    drop(e);

    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}")])
        .start();
    assert_eq!(series(&e.scrape(), "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    drop(e);

    let out = output_within(exporter_command().arg("-v"), QUICK);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
