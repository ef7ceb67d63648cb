//! Which git files `build.rs` watches for the embedded commit. Shared with
//! `tests/it/fresh_machine.rs` (included by path), so the rule is tested without running cargo.

use std::path::Path;

/// The files whose change means HEAD moved: HEAD itself, the branch it names, and the
/// packed refs, each only where it exists. Cargo treats a `rerun-if-changed` path that does
/// not exist as changed on every build, so naming a missing `packed-refs` (a fresh clone
/// often has none) reran the script, and recompiled the exporter, on every build. When a
/// loose branch ref is later packed, the file named here disappears, which cargo sees as a
/// change, and the next run names `packed-refs` instead. `git` runs in `dir`, and the paths
/// it prints are relative to it.
pub fn watched_git_paths(git: &dyn Fn(&[&str]) -> Option<String>, dir: &Path) -> Vec<String> {
    let mut names = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        names.push(branch);
    }
    names
        .iter()
        .filter_map(|name| git(&["rev-parse", "--git-path", name]))
        .filter(|path| dir.join(path).exists())
        .collect()
}
