//! Wake-ups when a file may have changed, from the kernel (inotify through `notify`) rather
//! than a timer. The file's directory is watched, not the file: tools that replace a file by
//! renaming a new one into place, and Kubernetes ConfigMap volumes that swap a `..data`
//! symlink, change the directory entry and never touch the inode a file watch would hold.
//! Callers still decide from the file itself (e.g. its modification time) whether it
//! changed; an event only says when to look.

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Directory events for one file, for as long as this value lives.
pub(crate) struct DirEvents {
    // Dropping the watcher ends the watch; it only has to be kept alive.
    _watcher: RecommendedWatcher,
    rx: Receiver<()>,
}

/// What [`DirEvents::wait_timeout`] saw.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    Event,
    Timeout,
    /// The watcher is gone (its thread ended): no further events will come.
    Gone,
}

/// The directories whose entries decide what `file` is: its own directory and, when it is
/// reached through symlinks, the directory of the file it resolves to now.
fn dirs_of(file: &Path) -> Vec<PathBuf> {
    let parent = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut dirs = vec![parent(file)];
    if let Ok(real) = std::fs::canonicalize(file) {
        let d = parent(&real);
        let same = std::fs::canonicalize(&dirs[0]).is_ok_and(|own| own == d);
        if !same {
            dirs.push(d);
        }
    }
    dirs
}

impl DirEvents {
    /// Starts watching `file`'s directory (an error when inotify cannot be used: no
    /// instances or watches left, or a file system without it; callers fall back to polling).
    pub(crate) fn new(file: &Path) -> notify::Result<DirEvents> {
        DirEvents::for_files(std::slice::from_ref(&file.to_path_buf()))
    }

    /// As [`Self::new`], for several files (a web configuration and the certificates it
    /// names): the union of their directories.
    pub(crate) fn for_files(files: &[PathBuf]) -> notify::Result<DirEvents> {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |_event: notify::Result<_>| {
            // Errors (e.g. a queue overflow) wake the caller too: it re-reads the file.
            let _ = tx.send(());
        })?;
        let mut watched: Vec<PathBuf> = Vec::new();
        for file in files {
            let mut dirs = dirs_of(file).into_iter();
            // The file's own directory must be watched; the symlink target's is best effort
            // (a ConfigMap's timestamped directory disappears at the next swap anyway, which
            // the own directory sees).
            if let Some(own) = dirs.next() {
                if !watched.contains(&own) {
                    watcher.watch(&own, RecursiveMode::NonRecursive)?;
                    watched.push(own);
                }
            }
            for d in dirs {
                if watched.contains(&d) {
                    continue;
                }
                match watcher.watch(&d, RecursiveMode::NonRecursive) {
                    Ok(()) => watched.push(d),
                    Err(e) => {
                        tracing::debug!(dir = %d.display(), error = %e, "cannot watch the symlink target's directory")
                    }
                }
            }
        }
        Ok(DirEvents {
            _watcher: watcher,
            rx,
        })
    }

    /// Blocks until something changes in the watched directories.
    pub(crate) fn wait(&self) -> Wake {
        match self.rx.recv() {
            Ok(()) => Wake::Event,
            Err(_) => Wake::Gone,
        }
    }

    /// As [`Self::wait`], for at most `d`.
    pub(crate) fn wait_timeout(&self, d: Duration) -> Wake {
        match self.rx.recv_timeout(d) {
            Ok(()) => Wake::Event,
            Err(RecvTimeoutError::Timeout) => Wake::Timeout,
            Err(RecvTimeoutError::Disconnected) => Wake::Gone,
        }
    }
}
