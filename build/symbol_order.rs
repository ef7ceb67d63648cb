//! Lays the exporter's text out by use: the functions a start and steady collection run
//! (`etc/symbol-order.txt`, made by `bench/symbol-order.sh`) go first, together. The
//! kernel maps an executable's pages 64 KiB at a time around each page touched, so with
//! the linker's default order, where used and unused functions lie side by side, most of
//! the text becomes resident; laid out by use, the NVML backend on 8 GPUs keeps ~1.8 MiB
//! of it resident instead of ~8 (bench/README.md, "Build profiles and the binary's working
//! set").
//!
//! Only where the linker is known to be lld (rustc 1.90 and later link
//! x86_64-unknown-linux-gnu with its bundled lld unless told otherwise): GNU ld has no
//! `--symbol-ordering-file`. Release builds only; `DCGM_EXPORTER_SYMBOL_ORDER=0` turns it
//! off. A stale list (other dependency versions, another rustc) orders less, never fails:
//! names it does not find are skipped without warnings.

use std::process::Command;

pub const LIST: &str = "etc/symbol-order.txt";

/// The link arguments for the release `dcgm-exporter` binary, or why there are none.
pub fn link_args() -> Result<Vec<String>, String> {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    if env("DCGM_EXPORTER_SYMBOL_ORDER") == "0" {
        return Err("DCGM_EXPORTER_SYMBOL_ORDER=0".into());
    }
    if env("TARGET") != "x86_64-unknown-linux-gnu" {
        return Err(format!(
            "target {}: lld is not its default linker",
            env("TARGET")
        ));
    }
    if !env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty() {
        return Err("a linker is configured".into());
    }
    let flags = env("CARGO_ENCODED_RUSTFLAGS");
    if ["linker", "link-self-contained", "fuse-ld"]
        .iter()
        .any(|f| flags.contains(f))
    {
        return Err("RUSTFLAGS choose the linker".into());
    }
    let minor = rustc_minor().ok_or("rustc's version is unknown")?;
    if minor < 90 {
        return Err(format!("rustc 1.{minor} links with the system's linker"));
    }
    let list = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join(LIST);
    if !list.is_file() {
        return Err(format!("{} is missing", list.display()));
    }
    Ok(vec![
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ])
}

/// The minor version of the rustc that builds this crate (`1.95.0` -> 95).
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var("RUSTC").ok()?;
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let release = text.lines().find_map(|l| l.strip_prefix("release: "))?;
    release.split('.').nth(1)?.parse().ok()
}
