//! HPC job mapping (`--hpc-job-mapping-dir`): a directory with one file per GPU (`<gpu>`) or
//! GPU instance (`<gpu>.<GPU_I_ID>`), each line a job id, written by the batch system.
//! Re-read on every collection, never during a scrape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
        HpcDir { dir, present }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Jobs by file name (`"<gpu>"` or `"<gpu>.<gi>"`). A missing directory is no jobs; an
    /// unreadable file is an error naming it (its GPU keeps its previous labelling: none).
    pub fn read(&mut self) -> (HashMap<String, Vec<String>>, Vec<String>) {
        let mut jobs = HashMap::new();
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                if self.present {
                    errors.push(format!("{}: {e}", self.dir.display()));
                }
                self.present = false;
                return (jobs, errors);
            }
        };
        self.present = true;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !is_gpu_file_name(&name) || !path.is_file() {
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let ids: Vec<String> = text
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string)
                        .collect();
                    if !ids.is_empty() {
                        jobs.insert(name, ids);
                    }
                }
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
        (jobs, errors)
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
        let (jobs, errors) = hpc.read();
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
        assert_eq!(hpc.read().1.len(), 1);
        assert!(hpc.read().1.is_empty());
    }
}
