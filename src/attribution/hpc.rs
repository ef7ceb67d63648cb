//! HPC job mapping (`--hpc-job-mapping-dir`): a directory with one file per GPU (`<gpu>`) or
//! GPU instance (`<gpu>.<GPU_I_ID>`), each line a job id, written by the batch system.
//! Re-read on every collection, never during a scrape. A file that fails to read keeps its
//! last jobs for a bounded grace ([`GRACE`] reads), marked unknown: one failed read (the
//! batch system rewriting it, a bad byte) says nothing about who left.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Reads in a row a file may fail while its last jobs are kept: usage accounting's bound
/// for a failing source's consumers, so that labels and usage series go together.
pub const GRACE: usize = super::usage::ledger::MAX_UNKNOWN;

/// One read of the directory.
#[derive(Debug, Default, PartialEq)]
pub struct Read {
    /// Jobs by file name (`"<gpu>"` or `"<gpu>.<gi>"`), those of the `unknown` files
    /// included.
    pub jobs: HashMap<String, Vec<String>>,
    /// Files that failed to read this time whose last jobs are kept (within [`GRACE`]).
    pub unknown: BTreeSet<String>,
    /// Each failure, naming its file.
    pub errors: Vec<String>,
}

/// Whether a file name is `<gpu>` or `<gpu>.<gi>` (dcgm-exporter's `^\d+(\.\d+)?$`).
pub fn is_gpu_file_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match name.split_once('.') {
        Some((gpu, gi)) => digits(gpu) && digits(gi),
        None => digits(name),
    }
}

pub struct HpcDir {
    dir: PathBuf,
    /// Whether the directory existed when last read (a disappearance is logged once).
    present: bool,
    /// Each file's jobs at its last good read, and how many reads in a row failed since.
    last: HashMap<String, (Vec<String>, usize)>,
}

impl HpcDir {
    pub fn new(dir: PathBuf) -> HpcDir {
        let present = dir.is_dir();
        if !present {
            tracing::info!(
                "--hpc-job-mapping-dir {}: not there yet; no hpc_job labels until it is",
                dir.display()
            );
        }
        HpcDir {
            dir,
            present,
            last: HashMap::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Jobs by file name. A missing directory is no jobs; an unreadable file is an error
    /// naming it, and keeps its last jobs for [`GRACE`] reads in a row.
    pub fn read(&mut self) -> Read {
        let mut out = Read::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                if self.present {
                    out.errors.push(format!("{}: {e}", self.dir.display()));
                }
                self.present = false;
                self.last.clear();
                return out;
            }
        };
        self.present = true;
        let mut seen = BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !is_gpu_file_name(&name) || !path.is_file() {
                continue;
            }
            seen.insert(name.clone());
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let ids: Vec<String> = text
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string)
                        .collect();
                    if !ids.is_empty() {
                        out.jobs.insert(name.clone(), ids.clone());
                    }
                    self.last.insert(name, (ids, 0));
                }
                Err(e) => {
                    out.errors.push(format!("{}: {e}", path.display()));
                    self.keep_last(name, &mut out);
                }
            }
        }
        // A file removed is its jobs ended (the batch system's epilog).
        self.last.retain(|name, _| seen.contains(name));
        out
    }

    /// A file that failed to read: its last jobs, while within the grace.
    fn keep_last(&mut self, name: String, out: &mut Read) {
        let Some((ids, failed)) = self.last.get_mut(&name) else {
            return;
        };
        if *failed >= GRACE {
            self.last.remove(&name);
            return;
        }
        *failed += 1;
        if !ids.is_empty() {
            out.jobs.insert(name.clone(), ids.clone());
            out.unknown.insert(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // dcgm-exporter's getGPUFiles table.
    #[test]
    fn gpu_file_names() {
        for ok in ["0", "1", "42", "0.0", "2.1", "3.10"] {
            assert!(is_gpu_file_name(ok), "{ok}");
        }
        for bad in [
            "foo", "bar.txt", ".gitkeep", "1e5", "NaN", "Inf", "+3", "-2", ".5", "1.2.3", "0.1.2",
        ] {
            assert!(!is_gpu_file_name(bad), "{bad}");
        }
    }

    #[test]
    fn reads_jobs_per_file_and_skips_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("0"), "job1-0\n").unwrap();
        std::fs::write(p.join("1"), "job1-1\njob2-1\n").unwrap();
        std::fs::write(p.join("3.0"), "job3.0-0").unwrap();
        std::fs::write(p.join("2"), "").unwrap();
        std::fs::write(p.join("notes.txt"), "x").unwrap();
        std::fs::create_dir(p.join("4")).unwrap();
        let mut hpc = HpcDir::new(p.to_path_buf());
        let Read { jobs, errors, .. } = hpc.read();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(jobs["0"], ["job1-0"]);
        assert_eq!(jobs["1"], ["job1-1", "job2-1"]);
        assert_eq!(jobs["3.0"], ["job3.0-0"]);
        assert_eq!(jobs.len(), 3);
    }

    #[test]
    fn a_vanished_directory_is_reported_once_then_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slurm");
        std::fs::create_dir(&path).unwrap();
        let mut hpc = HpcDir::new(path.clone());
        std::fs::remove_dir(&path).unwrap();
        assert_eq!(hpc.read().errors.len(), 1);
        assert!(hpc.read().errors.is_empty());
    }

    /// Invalid UTF-8 stands for any read that fails (as root, permissions do not).
    #[test]
    fn an_unreadable_file_keeps_its_last_jobs_for_the_grace_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("0"), "a\n").unwrap();
        std::fs::write(p.join("1"), "b\nc\n").unwrap();
        let mut hpc = HpcDir::new(p.to_path_buf());
        assert!(hpc.read().unknown.is_empty());
        std::fs::write(p.join("1"), b"\xff\xfe").unwrap();
        for _ in 0..GRACE {
            let r = hpc.read();
            assert_eq!(r.jobs["0"], ["a"]);
            assert_eq!(r.jobs["1"], ["b", "c"]);
            assert_eq!(r.unknown, BTreeSet::from(["1".to_string()]));
            assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        }
        // Past the grace: gone, and still an error.
        let r = hpc.read();
        assert!(!r.jobs.contains_key("1") && r.unknown.is_empty(), "{r:?}");
        assert_eq!(r.errors.len(), 1);
        // Readable again: known again, and a new failure has its grace again.
        std::fs::write(p.join("1"), "d\n").unwrap();
        assert_eq!(hpc.read().jobs["1"], ["d"]);
        std::fs::write(p.join("1"), b"\xff").unwrap();
        assert_eq!(hpc.read().jobs["1"], ["d"]);
        // A file that never read well has nothing to keep; one removed, nothing either.
        std::fs::write(p.join("2"), b"\xff").unwrap();
        assert!(!hpc.read().jobs.contains_key("2"));
        std::fs::remove_file(p.join("1")).unwrap();
        assert!(!hpc.read().jobs.contains_key("1"));
        std::fs::write(p.join("1"), b"\xff").unwrap();
        assert!(!hpc.read().jobs.contains_key("1"));
    }
}
