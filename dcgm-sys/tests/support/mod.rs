//! Shared by the test binaries that load the simulated libdcgm.so.4.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

/// Builds dcgm-sim's library, and the `extra` targets named as cargo arguments (cargo test
/// does not build another package's cdylib), into the profile directory this test binary
/// was built into (`<target>/<profile>/deps/<binary>`), with that same profile, so that
/// `cargo test --release` neither loads nor rebuilds a debug simulator. Returns that
/// directory, which holds libdcgm.so.4.
pub fn build_simulator(extra: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let target = dir.parent().expect("a target directory above the profile");
    let st = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "dcgm-sim", "--lib"])
        .args(extra)
        .args(["--profile", &profile, "--target-dir"])
        .arg(target)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .expect("run cargo build -p dcgm-sim");
    assert!(st.success(), "building dcgm-sim failed");
    dir
}

/// A TCP port on 127.0.0.1 that nothing listens on (bound, then freed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
