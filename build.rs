//! Generates the kubelet PodResources client and server (the server serves the test suite's
//! fake kubelet) from `proto/podresources.proto`, and the OTLP metrics and logs clients and
//! servers (the servers are the test suite's receiver) from OpenTelemetry's own `.proto`
//! files, vendored unchanged under `proto/opentelemetry/` (opentelemetry-proto v1.11.0).
//! protox parses them in pure Rust, so a clean clone builds without protoc. It also embeds
//! the git commit for the start-up line, and orders the release binary's text by use
//! (`build/symbol_order.rs`).

use std::process::Command;

#[path = "build/commit.rs"]
mod commit;
#[path = "build/symbol_order.rs"]
mod symbol_order;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    embed_commit();
    println!("cargo:rerun-if-changed=build/commit.rs");
    order_symbols();
    let proto = "proto/podresources.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    let otlp = "proto/opentelemetry/proto/collector/metrics/v1/metrics_service.proto";
    // The logs service: the event history's events as OTLP log records.
    let logs = "proto/opentelemetry/proto/collector/logs/v1/logs_service.proto";
    println!("cargo:rerun-if-changed=proto/opentelemetry");
    let descriptors = protox::compile([otlp, logs], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}

/// The release binary's text laid out by use, where the linker is lld (`build/symbol_order.rs`).
fn order_symbols() {
    println!("cargo:rerun-if-changed=build/symbol_order.rs");
    println!("cargo:rerun-if-changed={}", symbol_order::LIST);
    println!("cargo:rerun-if-env-changed=DCGM_EXPORTER_SYMBOL_ORDER");
    // The configured linker (`build/symbol_order.rs` asks rustc with it; RUSTFLAGS rebuild
    // everything anyway).
    for v in [
        "RUSTC_LINKER",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    // Test and debug builds keep the default layout: memory is measured on release.
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    match symbol_order::link_args() {
        Ok(args) => {
            for a in args {
                println!("cargo:rustc-link-arg-bin=dcgm-exporter={a}");
            }
            // A new list under the same name must relink: cargo rebuilds on a changed
            // build-script output, not on a file the linker reads.
            let list = std::fs::read(symbol_order::LIST).unwrap_or_default();
            let hash = list.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
            });
            println!("cargo:rustc-env=DCGM_EXPORTER_SYMBOL_ORDER_FNV={hash:016x}");
        }
        // Not an error: the binary is the same, its text only laid out by name.
        Err(why) => println!("cargo:warning=text not ordered by use: {why}"),
    }
}

/// Sets `DCGM_EXPORTER_COMMIT` to the checkout's commit, or
/// `unknown` outside a git checkout (a source tarball, a crate) or without git.
fn embed_commit() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    if commit.is_some() {
        // Rebuilt when HEAD moves.
        for path in commit::watched_git_paths(&git, std::path::Path::new(".")) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // No `+dirty`: the script reruns only when HEAD moves, so it would go stale.
    let value = commit.unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=DCGM_EXPORTER_COMMIT={value}");
}
