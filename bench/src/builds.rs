//! `builds`: this tree against a previous revision, both built here and measured side by side
//! by the scale mode (`scale.rs`) in one run, so that the collection's cost per series is
//! compared on one machine under one load.
//!
//! `cargo run --release -p bench -- builds [--against REV] [the scale mode's options]`
//!
//! REV defaults to the newest tag matching `v*` (the previous release) and, where there is
//! none, to `HEAD`: the committed tree against the working tree, uncommitted changes
//! included. REV is checked out in a temporary `git worktree` under
//! `target/bench-builds/`, built in release (the exporter alone, then the simulator, as
//! `build_binaries` does) into the workspace's own target folder, so that the dependencies
//! are compiled once for both; its `dcgm-exporter` and `libdcgm.so.4` are copied to
//! `target/bench-builds/<commit>/` and the worktree is removed. The working tree is built
//! last, so `target/release` holds its binaries when the measurement starts. `--build
//! debug` compares debug builds instead (a quick check of the mode, not of the cost).

use crate::scale::{self, Build};
use crate::{arg, build_in, build_profile};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `git` in `dir`: its standard output, trimmed.
fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `--against`, else the newest `v*` tag, else `HEAD`.
fn revision(root: &Path) -> Result<String, String> {
    if std::env::args().any(|a| a == "--against") {
        return Ok(arg("--against", "HEAD"));
    }
    let tags = git(root, &["tag", "--list", "v*", "--sort=-creatordate"])?;
    Ok(tags.lines().next().unwrap_or("HEAD").to_string())
}

/// A checked-out revision, removed from disk and from git's list when dropped (an error
/// or a failed build included).
struct Worktree {
    root: PathBuf,
    dir: PathBuf,
}

impl Worktree {
    fn add(root: &Path, dir: PathBuf, commit: &str) -> Result<Worktree, String> {
        if dir.exists() {
            // Left by a run that was killed.
            let _ = git(
                root,
                &["worktree", "remove", "--force", &dir.to_string_lossy()],
            );
            let _ = std::fs::remove_dir_all(&dir);
            git(root, &["worktree", "prune"])?;
        }
        git(
            root,
            &[
                "worktree",
                "add",
                "--detach",
                &dir.to_string_lossy(),
                commit,
            ],
        )?;
        Ok(Worktree {
            root: root.to_path_buf(),
            dir,
        })
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let dir = self.dir.to_string_lossy().into_owned();
        if git(&self.root, &["worktree", "remove", "--force", &dir]).is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
            let _ = git(&self.root, &["worktree", "prune"]);
        }
    }
}

/// Builds `commit` in a temporary worktree into `target`: the folder its binaries were
/// copied to.
fn build_revision(
    root: &Path,
    target: &Path,
    commit: &str,
    build: &str,
) -> Result<PathBuf, String> {
    let scratch = target.join("bench-builds");
    let keep = scratch.join(commit);
    std::fs::create_dir_all(&keep).map_err(|e| format!("{}: {e}", keep.display()))?;
    let tree = Worktree::add(root, scratch.join(format!("worktree-{commit}")), commit)?;
    build_in(&tree.dir, Some(target), build)?;
    for f in ["dcgm-exporter", "libdcgm.so.4"] {
        // The library is a link to the cdylib: the copy is the file itself.
        std::fs::copy(target.join(build).join(f), keep.join(f))
            .map_err(|e| format!("{f} of {commit}: {e}"))?;
    }
    drop(tree);
    Ok(keep)
}

/// Builds REV and the working tree, then runs the scale mode on the two.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    let rev = revision(root)?;
    let commit = git(
        root,
        &["rev-parse", "--short=12", &format!("{rev}^{{commit}}")],
    )?;
    let target = root.join("target");
    let build = build_profile()?;
    let before = build_revision(root, &target, &commit, &build)?;
    build_in(root, None, &build)?;
    let head = git(root, &["rev-parse", "--short=12", "HEAD"])?;
    let dirty = !git(root, &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    println!(
        "builds: {rev} ({commit}) against this tree ({head}{})",
        if dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    );
    let builds = [
        Build {
            name: "rev".into(),
            dir: before,
        },
        Build {
            name: "this".into(),
            dir: target.join(&build),
        },
    ];
    scale::run(root, &builds)
}
