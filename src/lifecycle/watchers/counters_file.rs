//! Reloads when the counters file changes on disk, as dcgm-exporter does: changes are
//! debounced (200 ms without a further change) and a reload fires only when the file's
//! modification time differs from the one last loaded. Polling the file's metadata (every
//! 50 ms) sees editors that write in place and tools that replace the file by rename alike.
//! A broken new file is handled by the reload itself: the old counters stay, the error
//! names file and line.

use crate::lifecycle::app::Control;
use crate::lifecycle::supervisor::Supervisor;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

pub const DEBOUNCE: Duration = Duration::from_millis(200);
const POLL: Duration = Duration::from_millis(50);

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Watches `path` until the collection loop is gone.
pub fn spawn(path: PathBuf, control: Sender<Control>) -> std::io::Result<()> {
    // A round is one 50 ms poll: seconds of silence mean a stuck thread.
    Supervisor::global()
        .spawn(
            "counters-watch",
            Some(Duration::from_secs(10)),
            move |beat| {
                let mut loaded = mtime(&path);
                // (mtime seen, when it was first seen) while waiting for the file to settle.
                let mut pending: Option<(Option<SystemTime>, Instant)> = None;
                loop {
                    std::thread::sleep(POLL);
                    beat.alive();
                    let now = mtime(&path);
                    match pending {
                        Some((seen, _)) if seen != now => pending = Some((now, Instant::now())),
                        Some((seen, since)) if since.elapsed() >= DEBOUNCE => {
                            pending = None;
                            // A missing file (mid-rename) is not a change to load.
                            if seen.is_some() && seen != loaded {
                                loaded = seen;
                                tracing::info!(
                                    file = %path.display(),
                                    "counters file changed on disk: reloading"
                                );
                                if control.send(Control::Reload).is_err() {
                                    return Ok(());
                                }
                            }
                        }
                        Some(_) => {}
                        None if now != loaded => pending = Some((now, Instant::now())),
                        None => {}
                    }
                }
            },
        )
        .map(|_| ())
}
