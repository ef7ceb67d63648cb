//! Lays the exporter's text out by use: the functions a start and steady collection run
//! (`etc/symbol-order.txt`, made by `bench/symbol-order.sh`) go first, together. The
//! kernel maps an executable's pages 64 KiB at a time around each page touched, so with
//! the linker's default order, where used and unused functions lie side by side, most of
//! the text becomes resident; laid out by use, the NVML backend on 8 GPUs keeps ~1.8 MiB
//! of it resident instead of ~8 (bench/README.md, "Build profiles and the binary's working
//! set").
//!
//! Only where the linker is lld: GNU ld (and gold) refuse `--symbol-ordering-file`, so the
//! release link would fail. Which linker links is not assumed from rustc's version (a
//! distribution's rustc may lack the bundled lld; a configured linker, `-C linker=`,
//! `-C link-arg=-fuse-ld=...` in RUSTFLAGS change it): the build script has the same
//! rustc, with the same target, RUSTFLAGS and configured linker, link an empty program
//! with the ordering arguments, and orders only when that link succeeds and the command
//! line rustc printed for it (`--print link-args`) names lld (a linker wrapper that picks
//! GNU ld itself fails the link). Release builds only; `DCGM_EXPORTER_SYMBOL_ORDER=0`
//! turns it off. A stale list (other
//! dependency versions, another rustc) orders less, never fails: names it does not find
//! are skipped without warnings.

use std::path::Path;
use std::process::Command;

pub const LIST: &str = "etc/symbol-order.txt";

/// The link arguments for the release `dcgm-exporter` binary, or why there are none.
pub fn link_args() -> Result<Vec<String>, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if env("DCGM_EXPORTER_SYMBOL_ORDER").as_deref() == Some("0") {
        return Err("DCGM_EXPORTER_SYMBOL_ORDER=0".into());
    }
    let list = Path::new(&env("CARGO_MANIFEST_DIR").unwrap_or_default()).join(LIST);
    if !list.is_file() {
        return Err(format!("{} is missing", list.display()));
    }
    let args = vec![
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    let probe = probe_link(&env, &args)?;
    lld_links(&probe.line)?;
    match probe.failed {
        None => Ok(args),
        Some(why) => Err(format!("an empty program does not link with them: {why}")),
    }
}

/// rustc's arguments for linking an empty program as this build links, with `link_args`:
/// its target, the linker cargo resolved (`RUSTC_LINKER`, from `target.<triple>.linker` or
/// `CARGO_TARGET_<TRIPLE>_LINKER`) and RUSTFLAGS (`CARGO_ENCODED_RUSTFLAGS`, which cargo
/// gives build scripts; a plain `RUSTFLAGS` where it is not set), last as cargo puts them.
fn probe_args(
    env: &dyn Fn(&str) -> Option<String>,
    link_args: &[String],
    source: &Path,
    out: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--crate-type=bin".into(),
        "--crate-name=symbol_order_probe".into(),
        "--print=link-args".into(),
        "-o".into(),
        out.display().to_string(),
    ];
    let target = env("TARGET");
    if let Some(t) = &target {
        args.push(format!("--target={t}"));
    }
    let configured = target.as_deref().and_then(|t| {
        let key = format!(
            "CARGO_TARGET_{}_LINKER",
            t.to_uppercase().replace(['-', '.'], "_")
        );
        env("RUSTC_LINKER").or_else(|| env(&key))
    });
    if let Some(l) = configured {
        args.push(format!("-Clinker={l}"));
    }
    match env("CARGO_ENCODED_RUSTFLAGS") {
        Some(flags) => args.extend(flags.split('\x1f').map(str::to_string)),
        None => args.extend(
            env("RUSTFLAGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string),
        ),
    }
    args.extend(link_args.iter().map(|a| format!("-Clink-arg={a}")));
    args.push(source.display().to_string());
    args
}

/// What linking the empty program showed: rustc's link line, and why the link failed.
struct Probe {
    line: String,
    failed: Option<String>,
}

/// Links an empty program as this build would, with `link_args`.
fn probe_link(env: &dyn Fn(&str) -> Option<String>, link_args: &[String]) -> Result<Probe, String> {
    let rustc = env("RUSTC").unwrap_or_else(|| "rustc".into());
    let dir = Path::new(&env("OUT_DIR").ok_or("OUT_DIR is not set")?).join("symbol-order-probe");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let source = dir.join("main.rs");
    std::fs::write(&source, "fn main() {}\n").map_err(|e| format!("{}: {e}", source.display()))?;
    let out = Command::new(&rustc)
        .args(probe_args(env, link_args, &source, &dir.join("probe")))
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The linker's own complaint where there is one, else rustc's first line.
    let why = stderr
        .lines()
        .find(|l| l.contains("unrecognized") || l.contains("unknown option"))
        .or_else(|| stderr.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message")
        .trim()
        .trim_start_matches("= note: ")
        .to_string();
    // Printed before the linker runs: a linker that then fails still names itself.
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().rev().find(|l| l.contains('"')) {
        Some(line) => Ok(Probe {
            line: line.to_string(),
            failed: (!out.status.success()).then_some(why),
        }),
        None => Err(format!(
            "{rustc} --print link-args gave no link line: {why}"
        )),
    }
}

/// `Ok` when the link command line `line` (rustc's `--print link-args`) links with lld:
/// lld itself, or a C compiler driver told `-fuse-ld=lld` (rustc's own choice on
/// x86_64 Linux since 1.90, with its bundled lld under `-B`) or `--ld-path` to an lld, the
/// last such flag winning as it does for the driver. `Err` says which linker it is.
pub fn lld_links(line: &str) -> Result<(), String> {
    let words = shell_words(line);
    // Leading `NAME=value` words are the environment rustc gives the linker.
    let mut words = words.iter().skip_while(|w| {
        w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
    });
    let program = words.next().ok_or("an empty link line")?;
    let is_lld = |p: &str| {
        let name = Path::new(p)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(p);
        matches!(
            name,
            "lld" | "ld.lld" | "rust-lld" | "ld64.lld" | "lld-link"
        )
    };
    if is_lld(program) {
        return Ok(());
    }
    let chosen = words
        .filter_map(|w| {
            w.strip_prefix("-fuse-ld=")
                .or_else(|| w.strip_prefix("--ld-path="))
                .map(|l| (w.as_str(), l))
        })
        .last();
    match chosen {
        Some((_, l)) if is_lld(l) => Ok(()),
        Some((flag, _)) => Err(format!("{program} links with {flag}, not lld")),
        None => Err(format!(
            "{program} links with its default linker (GNU ld on most systems), not lld"
        )),
    }
}

/// The words of a line rustc printed: space-separated, each maybe double-quoted (with
/// backslash escapes inside quotes).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            '\\' if quoted => word.get_or_insert_with(String::new).extend(chars.next()),
            c if c.is_whitespace() && !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}
