//! HPC job mapping (`--hpc-job-mapping-dir`): a directory with one file per GPU (`<gpu>`) or
//! GPU instance (`<gpu>.<GPU_I_ID>`), each line a job id, written by the batch system.
//! Re-read on every collection, never during a scrape. A file that fails to read keeps its
//! last jobs for a bounded grace ([`GRACE`] reads), marked unknown: one failed read (the
//! batch system rewriting it, a bad byte) says nothing about who left. So does a failed
//! read of the directory itself (`EIO`/`ESTALE` on NFS or Lustre, `EMFILE`, a permission
//! change, a listing cut short): every file it held fails that read. Only a directory or a
//! file that is gone ends its jobs at once.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Reads in a row a file may fail while its last jobs are kept: usage accounting's bound
/// for a failing source's consumers, so that labels and usage series go together.
pub(crate) const GRACE: usize = super::usage::ledger::MAX_UNKNOWN;

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
    /// naming it, and keeps its last jobs for [`GRACE`] reads in a row; a directory that
    /// fails to list is an error naming it, and each file it held keeps its last jobs so.
    pub fn read(&mut self) -> Read {
        let mut out = Read::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.present {
                    out.errors.push(format!("{}: {e}", self.dir.display()));
                }
                self.present = false;
                self.last.clear();
                return out;
            }
            Err(e) => {
                out.errors.push(format!("{}: {e}", self.dir.display()));
                self.keep_unlisted(&BTreeSet::new(), &mut out);
                return out;
            }
        };
        self.present = true;
        let mut seen = BTreeSet::new();
        let mut listed = true;
        for entry in entries {
            match entry {
                Ok(entry) => self.read_file(&entry.path(), &mut seen, &mut out),
                Err(e) => {
                    // The rest of the listing is lost: its files are not known removed.
                    out.errors.push(format!("{}: {e}", self.dir.display()));
                    listed = false;
                    break;
                }
            }
        }
        if listed {
            // A file removed is its jobs ended (the batch system's epilog).
            self.last.retain(|name, _| seen.contains(name));
        } else {
            self.keep_unlisted(&seen, &mut out);
        }
        out
    }

    /// One entry of the directory: its jobs, or its last ones if it fails to read.
    fn read_file(&mut self, path: &Path, seen: &mut BTreeSet<String>, out: &mut Read) {
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return;
        };
        if !is_gpu_file_name(&name) {
            return;
        }
        let text = match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return,
            // Gone between the listing and now: removed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Ok(_) => std::fs::read_to_string(path),
            Err(e) => Err(e),
        };
        seen.insert(name.clone());
        match text {
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
                self.keep_last(name, out);
            }
        }
    }

    /// The directory could not be listed (or not wholly): each file not listed this time
    /// failed its read.
    fn keep_unlisted(&mut self, listed: &BTreeSet<String>, out: &mut Read) {
        let names: Vec<String> = self
            .last
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        for name in names {
            self.keep_last(name, out);
        }
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

    /// A directory that cannot be listed (here a file put in its place: `ENOTDIR` stands
    /// for `EIO`, `ESTALE`, `EMFILE` or a permission change, which root does not get) is
    /// every file failing that read: each keeps its last jobs, unknown, for the grace;
    /// listed again, they are known again. Removed, the jobs end at once.
    #[test]
    fn an_unlistable_directory_keeps_every_files_jobs_for_the_grace_only() {
        let top = tempfile::tempdir().unwrap();
        let p = top.path().join("slurm");
        let aside = top.path().join("slurm.aside");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("0"), "a\n").unwrap();
        std::fs::write(p.join("1.3"), "b\nc\n").unwrap();
        let mut hpc = HpcDir::new(p.clone());
        assert!(hpc.read().unknown.is_empty());
        let unlistable = |on: bool| {
            if on {
                std::fs::rename(&p, &aside).unwrap();
                std::fs::write(&p, "not a directory").unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
                std::fs::rename(&aside, &p).unwrap();
            }
        };
        let both = BTreeSet::from(["0".to_string(), "1.3".to_string()]);
        unlistable(true);
        for i in 0..GRACE {
            let r = hpc.read();
            assert_eq!(r.jobs.get("0").map(Vec::len), Some(1), "read {i}: {r:?}");
            assert_eq!(r.jobs["1.3"], ["b", "c"], "read {i}");
            assert_eq!(r.unknown, both, "read {i}");
            assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
            assert!(r.errors[0].contains("slurm"), "{:?}", r.errors);
        }
        // Past the grace: gone, as a file's.
        let r = hpc.read();
        assert!(r.jobs.is_empty() && r.unknown.is_empty(), "{r:?}");
        unlistable(false);
        let r = hpc.read();
        assert_eq!((r.jobs.len(), r.unknown.len()), (2, 0), "{r:?}");
        // Within the grace and back: known again, with a grace of their own again.
        unlistable(true);
        assert_eq!(hpc.read().unknown, both);
        unlistable(false);
        assert!(hpc.read().unknown.is_empty());
        // Removed: ended at once.
        std::fs::remove_dir_all(&p).unwrap();
        let r = hpc.read();
        assert!(r.jobs.is_empty() && r.unknown.is_empty(), "{r:?}");
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
