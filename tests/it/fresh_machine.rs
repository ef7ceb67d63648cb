//! What a clean clone on a fresh machine needs (issue 30, item 7): the HTTP-stack check of
//! `.ci/run` reads `Cargo.lock` alone (no crate downloaded, no cargo home), the build script
//! names only git files that exist (a missing one makes cargo rerun it, and recompile the
//! exporter, on every build), and `rust-version` is the true minimum.

#[path = "../../build/commit.rs"]
mod commit;

use crate::support::{output_within, status_within, QUICK};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a copy of `.ci/single-http-stack` beside `lock` (the script reads `../Cargo.lock`
/// from its own folder) with an empty cargo home and no cargo on PATH.
fn http_stack_check(lock: &str) -> Output {
    let dir = tempdir("http-stack");
    fs::create_dir_all(dir.join(".ci")).unwrap();
    fs::copy(
        root().join(".ci/single-http-stack"),
        dir.join(".ci/single-http-stack"),
    )
    .unwrap();
    fs::write(dir.join("Cargo.lock"), lock).unwrap();
    let empty_home = dir.join("cargo-home");
    fs::create_dir_all(&empty_home).unwrap();
    output_within(
        Command::new("bash")
            .arg(dir.join(".ci/single-http-stack"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("CARGO_HOME", &empty_home),
        QUICK,
    )
}

/// A new empty directory (tests run in parallel: one each).
fn tempdir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("fresh-machine-{what}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_http_stack_check_passes_on_our_lock_without_cargo_or_downloaded_crates() {
    let lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let out = http_stack_check(&lock);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("one version each of hyper"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_second_hyper_in_the_lock_fails_the_check_naming_both_versions() {
    let mut lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    lock.push_str("\n[[package]]\nname = \"hyper\"\nversion = \"0.14.32\"\n");
    let out = http_stack_check(&lock);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("hyper:") && said.contains("0.14.32"),
        "{said}"
    );
}

#[test]
fn a_lock_that_is_not_ours_fails_the_check_instead_of_passing_as_no_duplicates() {
    for lock in [
        "",
        "version = 4\n\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\n",
    ] {
        let out = http_stack_check(lock);
        assert_eq!(out.status.code(), Some(1), "{lock:?}: {}", text(&out));
        assert!(
            text(&out).contains("cannot check Cargo.lock"),
            "{}",
            text(&out)
        );
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = output_within(
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1"),
        QUICK,
    );
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// A repository with one commit on `main` and no `packed-refs`, as a fresh clone can be.
fn repo_with_one_commit() -> Option<PathBuf> {
    if !crate::support::require_tool("git", "apt-get install git") {
        return None;
    }
    let dir = tempdir("git");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "one",
        ],
    ] {
        let ok = status_within(
            Command::new("git")
                .args(args)
                .current_dir(&dir)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1"),
            QUICK,
        )
        .success();
        assert!(ok, "git {args:?}");
    }
    Some(dir)
}

/// Whether one of `paths` ends with `end`.
fn names(paths: &[String], end: &str) -> bool {
    paths.iter().any(|p| p.ends_with(end))
}

fn watched(dir: &Path) -> Vec<String> {
    let paths = commit::watched_git_paths(&|args: &[&str]| git(dir, args), dir);
    // Relative to the directory git ran in, as cargo reads them from the package root.
    for p in &paths {
        assert!(dir.join(p).exists(), "{p} is named but does not exist");
    }
    paths
}

#[test]
fn without_packed_refs_the_build_script_names_only_head_and_the_loose_branch() {
    let Some(dir) = repo_with_one_commit() else {
        return;
    };
    assert!(!dir.join(".git/packed-refs").exists());
    let paths = watched(&dir);
    assert!(names(&paths, "HEAD"), "{paths:?}");
    assert!(names(&paths, "refs/heads/main"), "{paths:?}");
    assert!(!names(&paths, "packed-refs"), "{paths:?}");
}

#[test]
fn with_packed_refs_and_no_loose_branch_the_build_script_names_packed_refs() {
    let Some(dir) = repo_with_one_commit() else {
        return;
    };
    git(&dir, &["pack-refs", "--all", "--prune"]);
    assert!(!dir.join(".git/refs/heads/main").exists());
    let paths = watched(&dir);
    let packed_not_loose = (
        names(&paths, "packed-refs"),
        names(&paths, "refs/heads/main"),
    );
    assert_eq!(packed_not_loose, (true, false), "{paths:?}");
}

#[test]
fn a_detached_head_names_head_alone() {
    let Some(dir) = repo_with_one_commit() else {
        return;
    };
    let head = git(&dir, &["rev-parse", "HEAD"]).unwrap();
    git(&dir, &["checkout", "-q", "--detach", &head]);
    let paths = watched(&dir);
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert!(paths[0].ends_with("HEAD"), "{paths:?}");
}

/// What our own code needs: `Box::new_zeroed` (stable in 1.92; `dcgm-sys/src/session.rs`).
/// Clippy's `incompatible_msrv` (in `.ci/run`) checks every use against `rust-version`, so
/// this number cannot fall behind the code unnoticed.
const OWN_CODE_NEEDS: (u32, u32) = (1, 92);

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// `rust-version = "X.Y[.Z]"` in a manifest's `section` (published manifests are
/// normalised, so never `workspace = true`).
fn rust_version_of(manifest: &str, section: &str) -> Option<(u32, u32)> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != section)
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix("rust-version = "))
        .and_then(|v| parse_version(v.trim_matches('"')))
}

/// Every package of `Cargo.lock` as (name, version).
fn locked_packages() -> Vec<(String, String)> {
    let lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let mut out = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            out.push((n, v.trim_matches('"').to_string()));
        }
    }
    out
}

#[test]
fn rust_version_is_the_highest_minimum_of_our_dependencies_and_our_own_code() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let registries: Vec<PathBuf> = fs::read_dir(home.join("registry/src"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut highest = (OWN_CODE_NEEDS, "our own code".to_string());
    let mut read = Vec::new();
    for (name, version) in locked_packages() {
        // Only the crates this platform builds are unpacked; the others never compile here.
        let Some(manifest) = registries
            .iter()
            .map(|r| r.join(format!("{name}-{version}/Cargo.toml")))
            .find(|m| m.exists())
        else {
            continue;
        };
        read.push(name.clone());
        if let Some(v) = rust_version_of(&fs::read_to_string(&manifest).unwrap(), "[package]") {
            if v > highest.0 {
                highest = (v, format!("{name} {version}"));
            }
        }
    }
    // The crates this test was itself built with are unpacked, so an empty list means the
    // registry was not found, not that there is nothing to check.
    for needed in ["tokio", "hyper", "kube"] {
        assert!(
            read.iter().any(|n| n == needed),
            "{needed} not found under {home:?}/registry/src"
        );
    }
    let ours = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let declared =
        rust_version_of(&ours, "[workspace.package]").expect("[workspace.package] rust-version");
    let (v, by) = highest;
    assert_eq!(
        declared, v,
        "rust-version is {}.{}, the true minimum is {}.{} (set by {by})",
        declared.0, declared.1, v.0, v.1
    );
}

#[test]
fn every_crate_of_the_workspace_inherits_the_rust_version() {
    for manifest in [
        "Cargo.toml",
        "dcgm-sys/Cargo.toml",
        "dcgm-sim/Cargo.toml",
        "dcgm-sim/model/Cargo.toml",
        "dcgm-sim/nvml/Cargo.toml",
        "bench/Cargo.toml",
    ] {
        let text = fs::read_to_string(root().join(manifest)).unwrap();
        let package = &text[text.find("[package]").unwrap()..];
        let package = &package[..package[1..].find("\n[").map_or(package.len(), |i| i + 1)];
        assert!(
            package.contains("rust-version.workspace = true"),
            "{manifest}: [package] lacks rust-version.workspace = true"
        );
    }
}
