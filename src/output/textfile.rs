//! `--textfile-directory`: the page as `DIR/dcgm.prom` for node-exporter's textfile
//! collector, replaced atomically after every collection (a temporary file in the same
//! directory, fsync, rename, then fsync of the directory), so node-exporter never reads a
//! half-written file. During a DCGM outage the file is emptied rather than left stale.

use crate::collect::topology::Topology;
use crate::output::sink::Sink;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub const FILE_NAME: &str = "dcgm.prom";

pub struct Textfile {
    dir: PathBuf,
    /// Whether the last write failed (log once per failure streak, not every interval).
    failing: AtomicBool,
}

impl Textfile {
    /// Checks that `dir` is a writable directory now, so that a typo stops the start.
    pub fn new(dir: &Path) -> Result<Textfile, String> {
        let meta = std::fs::metadata(dir)
            .map_err(|e| format!("--textfile-directory {}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!(
                "--textfile-directory {}: not a directory",
                dir.display()
            ));
        }
        let t = Textfile {
            dir: dir.to_path_buf(),
            failing: AtomicBool::new(false),
        };
        let probe = t
            .dir
            .join(format!(".dcgm.prom.probe.{}", std::process::id()));
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| format!("--textfile-directory {}: {e}", dir.display()))?;
        Ok(t)
    }

    pub fn path(&self) -> PathBuf {
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
    fn published(
        &self,
        _topology: &Topology,
        _families: &[prometheus::proto::MetricFamily],
        bytes: &[u8],
    ) {
        self.write(bytes);
    }

    fn outage(&self) {
        self.write(b"");
    }
}

/// Replaces `dir/name` with `bytes` so that readers see the old or the new file, whole.
/// node-exporter reads only `*.prom`, so the temporary name does not end in `.prom`.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
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
    fn a_missing_directory_is_an_error_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let e = Textfile::new(&dir.path().join("nope")).err().unwrap();
        assert!(
            e.starts_with("--textfile-directory ") && e.contains("nope"),
            "{e}"
        );
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(Textfile::new(&file)
            .err()
            .unwrap()
            .contains("not a directory"));
    }
}
