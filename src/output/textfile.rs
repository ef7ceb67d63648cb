//! `--textfile-directory`: the page as `DIR/dcgm.prom` for node-exporter's textfile
//! collector, replaced atomically after every collection (a temporary file in the same
//! directory, fsync, rename, then fsync of the directory), so node-exporter never reads a
//! half-written file. During a DCGM outage the file is emptied rather than left stale, and
//! a clean exit removes it (node-exporter would otherwise serve the last values as current).
//!
//! The directory is often shared (node-exporter's, group-writable) and the exporter runs as
//! root: the temporary file has a random name and is created exclusively without following
//! a symbolic link, so nothing planted in the directory can make it write anywhere else.

use crate::model::node::Topology;
use crate::output::dirs;
use crate::output::sink::Sink;
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) const FILE_NAME: &str = "dcgm.prom";

pub(crate) struct Textfile {
    dir: PathBuf,
    /// Whether the last write failed (log once per failure streak, not every interval).
    failing: AtomicBool,
}

impl Textfile {
    /// Creates `dir` (0755) if it is missing, never through a link planted at a component
    /// it creates (`dirs`' rules for a shared directory), and checks that it is a writable
    /// directory now, so that a typo stops the start.
    pub(crate) fn new(dir: &Path) -> Result<Textfile, crate::output::Error> {
        let flag = |source| crate::output::Error::Textfile {
            dir: dir.to_path_buf(),
            source,
        };
        dirs::prepare(dir, dirs::Kind::Shared, "--textfile-directory")?;
        let t = Textfile {
            dir: dir.to_path_buf(),
            failing: AtomicBool::new(false),
        };
        let (probe, _) = create_temporary(&t.dir, FILE_NAME).map_err(flag)?;
        std::fs::remove_file(&probe).map_err(flag)?;
        Ok(t)
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    fn write(&self, bytes: &[u8]) {
        match write_atomic(&self.dir, FILE_NAME, bytes) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("writing {} works again", self.path().display());
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!("cannot write {}: {e}", self.path().display());
                }
            }
        }
    }
}

impl Sink for Textfile {
    fn published(&self, _topology: &Topology, _page: &crate::model::Page, bytes: &[u8]) {
        self.write(bytes);
    }

    fn outage(&self) {
        self.write(b"");
    }

    fn close(&self) {
        match std::fs::remove_file(self.path()) {
            Ok(()) => tracing::info!("removed {}", self.path().display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", self.path().display()),
        }
    }
}

/// A random 64-bit number (SipHash with the process's random keys over the time).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Creates a new, empty temporary file for `name` in `dir`: a random name, created only if
/// nothing (not even a dangling link) has that name (O_CREAT|O_EXCL), never through a
/// symbolic link (O_NOFOLLOW), mode 0644 whatever the umask. node-exporter reads only
/// `*.prom`, so the name does not end in `.prom`.
fn create_temporary(dir: &Path, name: &str) -> std::io::Result<(PathBuf, File)> {
    let mut last = None;
    // A name taken by chance (or planted) is skipped; a few draws make that moot.
    for _ in 0..8 {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", random_u64()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(&tmp)
        {
            Ok(f) => {
                f.set_permissions(Permissions::from_mode(0o644))?;
                return Ok((tmp, f));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// Replaces `dir/name` with `bytes` so that readers see the old or the new file, whole.
/// rename replaces a link at `dir/name` itself, never what it points to.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let (tmp, mut f) = create_temporary(dir, name)?;
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        // Make the rename itself durable.
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{DirError, DirWhy, Error};

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let t = Textfile::new(dir.path()).unwrap();
        t.write(b"a 1\n");
        t.write(b"b 2\n");
        assert_eq!(std::fs::read_to_string(t.path()).unwrap(), "b 2\n");
        t.outage();
        assert_eq!(std::fs::read_to_string(t.path()).unwrap(), "");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["dcgm.prom"]);
    }

    #[test]
    fn a_missing_directory_is_created_0755_and_a_bad_one_names_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a/b");
        let t = Textfile::new(&missing).unwrap();
        let mode = std::fs::metadata(&missing).unwrap().permissions().mode() & 0o777;
        // The umask may take bits away, never add them.
        assert_eq!(mode & !0o755, 0, "{mode:o}");
        t.write(b"a 1\n");
        assert_eq!(std::fs::read_to_string(t.path()).unwrap(), "a 1\n");
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            Textfile::new(&file).err().unwrap(),
            Error::Directory(DirError {
                flag: "--textfile-directory",
                why: DirWhy::NotDirectory(p),
                ..
            }) if p == file
        ));
        let under = file.join("under");
        let e = Textfile::new(&under).err().unwrap();
        assert!(
            matches!(&e, Error::Directory(d) if d.flag == "--textfile-directory" && d.dir == under),
            "{e}"
        );
    }

    #[test]
    fn the_file_is_0644_and_a_clean_exit_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = Textfile::new(dir.path()).unwrap();
        t.write(b"a 1\n");
        let mode = std::fs::metadata(t.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        t.close();
        assert!(!t.path().exists());
        // Nothing to remove is not an error.
        t.close();
    }

    #[test]
    fn links_planted_in_the_directory_truncate_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = |n: &str| {
            let p = elsewhere.path().join(n);
            std::fs::write(&p, "precious\n").unwrap();
            p
        };
        let pid = std::process::id();
        // The names the exporter used to write through (temporary and start-up probe),
        // predictable from its pid, and the target itself.
        let planted = [
            (format!(".dcgm.prom.{pid}.tmp"), victim("v1")),
            (format!(".dcgm.prom.probe.{pid}"), victim("v2")),
            ("dcgm.prom".to_string(), victim("v3")),
        ];
        for (name, target) in &planted {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        }
        let t = Textfile::new(dir.path()).unwrap();
        t.write(b"a 1\n");
        t.write(b"b 2\n");
        for (name, target) in &planted {
            assert_eq!(
                std::fs::read_to_string(target).unwrap(),
                "precious\n",
                "{name} -> {} was written through",
                target.display()
            );
        }
        let meta = std::fs::symlink_metadata(t.path()).unwrap();
        assert!(
            meta.file_type().is_file(),
            "dcgm.prom is a regular file now"
        );
        assert_eq!(std::fs::read_to_string(t.path()).unwrap(), "b 2\n");
    }
}
