//! Issue 30: the dump directory cannot be planted. The exporter often runs as root and the
//! default `--dump-directory` is in world-writable /tmp: a link put there (or a directory of
//! another user's) must stop the start with an error naming it, and nothing may be written
//! through a link, at start or when the directory is created again while running.

use crate::support::*;
use std::path::Path;
use std::time::Duration;

/// Runs the exporter with `args`, expecting it to refuse to start: (exit code, stderr). An
/// exporter that starts anyway (the bug) fails the test after 20 s instead of hanging it.
fn refused_at_start(args: &[&str]) -> (i32, String) {
    let mut e = exporter().args(args).spawn();
    let status = e.exit_within(20, &format!("started anyway with {args:?}"));
    // The pipe's reader may be a line behind the exit.
    e.wait_for_log(5, "level=fatal");
    (status.code().unwrap_or(-1), e.stderr())
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_link_as_the_dump_directory_stops_the_start_and_nothing_is_written() {
    let (base, target) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let link = base.path().join("dcgm-exporter-debug");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    let (code, stderr) =
        refused_at_start(&["--dump-enabled", "--dump-directory", link.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("--dump-directory {}", link.display()))
            && stderr.contains("is a symbolic link"),
        "{stderr}"
    );
    assert!(
        names(target.path()).is_empty(),
        "{:?}",
        names(target.path())
    );

    // A link above it owned by another user (who could point it anywhere): refused, and the
    // missing directory is not created behind it.
    let foreign = base.path().join("foreign");
    std::os::unix::fs::symlink(target.path(), &foreign).unwrap();
    std::os::unix::fs::lchown(&foreign, Some(65534), Some(65534)).unwrap();
    let below = foreign.join("dumps");
    let (code, stderr) = refused_at_start(&[
        "--dump-enabled",
        "--dump-directory",
        below.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
    assert!(
        names(target.path()).is_empty(),
        "{:?}",
        names(target.path())
    );
}

#[test]
fn another_users_or_an_open_dump_directory_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let (code, stderr) = refused_at_start(&[
        "--dump-enabled",
        "--dump-directory",
        theirs.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("--dump-directory {}", theirs.display()))
            && stderr.contains("owned by uid 65534"),
        "{stderr}"
    );
    assert!(names(&theirs).is_empty());
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (code, stderr) =
        refused_at_start(&["--dump-enabled", "--dump-directory", open.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("writable by group or others"), "{stderr}");
}

/// The directory is created 0700 (with what is missing above it); removed while running and
/// replaced by a link, it is not written through: the dumps stop with an error instead.
#[test]
fn a_directory_replaced_by_a_link_while_running_is_not_written_through() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let dumps = base.path().join("new/dumps");
    let e = exporter()
        .args(&[
            "-c",
            "200",
            "--dump-enabled",
            "--dump-directory",
            dumps.to_str().unwrap(),
        ])
        .start();
    e.wait_until(20, |_| !names(&dumps).is_empty());
    for d in [base.path().join("new"), dumps.clone()] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    std::fs::remove_dir_all(&dumps).unwrap();
    std::os::unix::fs::symlink(target.path(), &dumps).unwrap();
    e.wait_for_log(10, "cannot write dumps");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        names(target.path()).is_empty(),
        "{:?}",
        names(target.path())
    );
    assert!(e.stderr().contains("is a symbolic link"), "{}", e.stderr());
}
