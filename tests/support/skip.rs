//! Skipping a test honestly. A test that cannot run here (a tool or package is missing)
//! calls [`skip`] or [`require_tool`]: on a developer's machine that prints one line,
//! `SKIPPED: <test>: <reason>`, and the test returns early; under CI (`CI=true`, or the
//! real-DCGM tier's `DCGM_REAL_REQUIRED`) it fails the test instead, so a CI run whose
//! closing line says "0 skipped" ran every test. `.ci/run` counts the lines.
//!
//! Shared by the exporter's and the simulators' integration tests (`#[path]` includes it).

#![allow(dead_code)]

use std::io::Write;

/// The prefix `.ci/run` counts.
pub const SKIPPED: &str = "SKIPPED: ";

/// Whether skipping is forbidden: CI sets `CI=true` (the real-DCGM tier's older
/// `DCGM_REAL_REQUIRED` counts too).
pub fn skips_forbidden() -> bool {
    let ci = std::env::var("CI").unwrap_or_default();
    let ci = !ci.is_empty() && ci != "0" && !ci.eq_ignore_ascii_case("false");
    ci || std::env::var_os("DCGM_REAL_REQUIRED").is_some_and(|v| !v.is_empty())
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("<unknown test>")
        .to_string()
}

/// The test cannot run here for `reason`: fails it under CI, otherwise prints the
/// `SKIPPED:` line. The caller returns early after this.
pub fn skip(reason: &str) {
    let what = format!("{}: {reason}", test_name());
    // (Without the prefix: a failure is not counted as a skip.)
    assert!(
        !skips_forbidden(),
        "this test would be skipped, which CI forbids (CI/DCGM_REAL_REQUIRED set): {what}"
    );
    let line = format!("{SKIPPED}{what}\n");
    // Straight to the stderr handle, not `eprintln!`: libtest captures the macros' output of
    // passing tests, and the line must reach the log that `.ci/run` counts. One write, so
    // parallel tests' lines do not interleave.
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Whether `name` is a program on PATH (read here, not asked of a shell: no child process
/// to wait on).
pub fn have_tool(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// True when `name` is on PATH; otherwise [`skip`]s (fails under CI) naming the tool and
/// `install_hint`, and returns false.
pub fn require_tool(name: &str, install_hint: &str) -> bool {
    if have_tool(name) {
        return true;
    }
    skip(&format!("`{name}` is not installed ({install_hint})"));
    false
}
