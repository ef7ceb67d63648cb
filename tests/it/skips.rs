//! `support::skip`: a skipped test prints one `SKIPPED: <test>: <reason>` line that reaches
//! the log even though libtest captures passing tests' output, and under CI (`CI=true`) it
//! fails instead. Checked by running this binary's probe test in a child process.

use crate::support;
use std::process::{Command, Output};

/// Skips (or, under CI, fails) when run as the probe; otherwise nothing to do.
#[test]
fn skip_probe() {
    if std::env::var_os("SKIP_PROBE").is_some() {
        support::skip("probe reason");
    }
}

fn probe(ci: Option<&str>) -> Output {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    // No --nocapture: the line must get past libtest's capture on its own.
    cmd.args(["--exact", "skips::skip_probe", "--test-threads=2"])
        .env("SKIP_PROBE", "1")
        .env_remove("CI")
        .env_remove("DCGM_REAL_REQUIRED");
    if let Some(v) = ci {
        cmd.env("CI", v);
    }
    support::output_within(&mut cmd, support::QUICK)
}

#[test]
fn a_skip_prints_a_countable_line_and_fails_under_ci() {
    let out = probe(None);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let skipped = |l: &&str| l.starts_with("SKIPPED: ");
    let lines: Vec<&str> = text.lines().filter(skipped).collect();
    assert_eq!(
        lines,
        ["SKIPPED: skips::skip_probe: probe reason"],
        "{text}"
    );

    // CI=false is a developer's machine too.
    assert!(probe(Some("false")).status.success());

    for ci in ["true", "1"] {
        let out = probe(Some(ci));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "CI={ci}: {text}");
        assert!(text.contains("which CI forbids"), "{text}");
        assert!(text.contains("probe reason"), "{text}");
    }
}

/// `.ci/run` stops, saying what, when it cannot install a tool the tests need (here: no
/// promtool and no apt-get on PATH), rather than going on to tests that would skip.
#[test]
fn ci_stops_when_it_cannot_install_what_the_tests_need() {
    let bin = tempfile::tempdir().unwrap();
    for tool in ["bash", "dirname"] {
        let path = support::output_within(
            Command::new("sh").args(["-c", &format!("command -v {tool}")]),
            support::QUICK,
        );
        let path = String::from_utf8(path.stdout).unwrap();
        std::os::unix::fs::symlink(path.trim(), bin.path().join(tool)).unwrap();
    }
    let out = support::output_within(
        Command::new(bin.path().join("bash"))
            .arg(support::repo(".ci/run"))
            .env_clear()
            .env("PATH", bin.path()),
        support::QUICK,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "ci: cannot install prometheus (no apt-get here); install them and run again"
    );
}
