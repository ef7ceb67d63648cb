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
                let mut settle = Settle::new(mtime(&path));
                loop {
                    std::thread::sleep(POLL);
                    beat.alive();
                    if settle.poll(mtime(&path), Instant::now()) {
                        tracing::info!(
                            file = %path.display(),
                            "counters file changed on disk: reloading"
                        );
                        if control.send(Control::Reload).is_err() {
                            return Ok(());
                        }
                    }
                }
            },
        )
        .map(|_| ())
}

/// When a changed file has settled, apart from the clock and the file system so that the
/// debounce is tested on made-up instants rather than on this machine's scheduling.
struct Settle {
    /// The modification time last loaded.
    loaded: Option<SystemTime>,
    /// (mtime seen, when it was first seen) while waiting for the file to settle.
    pending: Option<(Option<SystemTime>, Instant)>,
}

impl Settle {
    fn new(loaded: Option<SystemTime>) -> Settle {
        Settle {
            loaded,
            pending: None,
        }
    }

    /// One poll seeing modification time `now` at `at`: true when a reload is due.
    fn poll(&mut self, now: Option<SystemTime>, at: Instant) -> bool {
        match self.pending {
            Some((seen, _)) if seen != now => self.pending = Some((now, at)),
            Some((seen, since)) if at.saturating_duration_since(since) >= DEBOUNCE => {
                self.pending = None;
                // A missing file (mid-rename) is not a change to load.
                if seen.is_some() && seen != self.loaded {
                    self.loaded = seen;
                    return true;
                }
            }
            Some(_) => {}
            None if now != self.loaded => self.pending = Some((now, at)),
            None => {}
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls every [`POLL`] for `until` while the file's mtime follows `writes` (ms after
    /// the start, each a new mtime; `None` mtime for a missing file): the reloads, as (ms,
    /// mtime loaded).
    fn replay(writes: &[(u64, Option<u64>)], until: u64) -> Vec<(u64, Option<SystemTime>)> {
        let t0 = Instant::now();
        let at_ms = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + ms);
        let mut settle = Settle::new(Some(SystemTime::UNIX_EPOCH));
        let mut current = Some(SystemTime::UNIX_EPOCH);
        let mut reloads = Vec::new();
        let step = POLL.as_millis() as u64;
        for ms in (step..=until).step_by(step as usize) {
            for (w, m) in writes {
                if *w <= ms && *w > ms - step {
                    current = m.map(at_ms);
                }
            }
            if settle.poll(current, t0 + Duration::from_millis(ms)) {
                reloads.push((ms, settle.loaded));
            }
        }
        reloads
    }

    #[test]
    fn writes_20_ms_apart_settle_into_one_reload_of_the_last() {
        let burst: Vec<(u64, Option<u64>)> = (0..5).map(|i| (10 + 20 * i, Some(i))).collect();
        let reloads = replay(&burst, 2_000);
        assert_eq!(reloads.len(), 1, "{reloads:?}");
        let last = SystemTime::UNIX_EPOCH + Duration::from_secs(1_004);
        assert_eq!(reloads[0].1, Some(last));
        // Not before the debounce has passed since the last write (at 90 ms).
        assert!(
            reloads[0].0 >= 90 + DEBOUNCE.as_millis() as u64,
            "{reloads:?}"
        );
    }

    #[test]
    fn changes_further_apart_than_the_debounce_reload_each() {
        let reloads = replay(&[(10, Some(1)), (1_000, Some(2))], 2_000);
        assert_eq!(reloads.len(), 2, "{reloads:?}");
    }

    #[test]
    fn a_file_that_keeps_changing_waits_and_a_missing_one_is_not_loaded() {
        // A write every 100 ms for a second: nothing until it stops.
        let busy: Vec<(u64, Option<u64>)> = (0..10).map(|i| (10 + 100 * i, Some(i))).collect();
        let reloads = replay(&busy, 2_000);
        assert_eq!(reloads.len(), 1, "{reloads:?}");
        assert!(reloads[0].0 >= 910 + DEBOUNCE.as_millis() as u64);
        // Removed and not put back: no reload; removed and replaced (a rename): one.
        assert_eq!(replay(&[(10, None)], 2_000), []);
        assert_eq!(
            replay(&[(10, Some(7)), (60, None), (110, Some(7))], 2_000).len(),
            1
        );
    }
}
