//! Reloads when the counters file changes on disk, as dcgm-exporter does: changes are
//! debounced (200 ms without a further change) and a reload fires only when the file's
//! modification time differs from the one last loaded. The thread sleeps until inotify
//! reports a change in the file's directory (see [`crate::runtime::wakeup`]), which sees
//! editors that write in place, tools that rename a new file into place and ConfigMap
//! symlink swaps alike; only while a change settles is the file's metadata checked, every
//! 50 ms. Where inotify cannot be used, the metadata is checked every 50 ms all the time
//! (logged once). A broken new file is handled by the reload itself: the old counters stay,
//! the error names file and line.

use crate::lifecycle::control::{Control, Trigger};
use crate::runtime::supervisor::{Beat, Supervisor};
use crate::runtime::wakeup::{DirEvents, Wake};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);
const POLL: Duration = Duration::from_millis(50);

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// How the file is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Woken by inotify; idle costs nothing.
    Events,
    /// Checked every [`POLL`] (inotify unavailable).
    Polling,
}

fn fall_back(path: &Path, why: &dyn std::fmt::Display) {
    tracing::warn!(
        file = %path.display(),
        error = %why,
        "cannot watch the counters file with inotify: checking it every 50 ms instead"
    );
}

/// Watches `path` until the collection loop is gone.
pub(crate) fn spawn(path: PathBuf, control: Sender<Control>) -> std::io::Result<Mode> {
    // Started before the thread so that no change made after this returns is missed.
    let events = match DirEvents::new(&path) {
        Ok(events) => Some(events),
        Err(e) => {
            fall_back(&path, &e);
            None
        }
    };
    // Read here, not in the thread: a change made before the thread first runs must still
    // differ from what it compares against.
    let loaded = mtime(&path);
    let mode = if events.is_some() {
        Mode::Events
    } else {
        Mode::Polling
    };
    let mut events = events;
    // No stall limit: with inotify the thread rightly sleeps until the directory changes.
    // A panic or an end is still restarted, keeping the watcher it had.
    Supervisor::global()
        .spawn("counters-watch", None, move |beat| {
            run(&path, loaded, &mut events, &control, beat);
            Ok(())
        })
        .map(|_| mode)
}

fn run(
    path: &Path,
    loaded: Option<SystemTime>,
    events: &mut Option<DirEvents>,
    control: &Sender<Control>,
    beat: &Beat,
) {
    let mut settle = Settle::new(loaded);
    loop {
        beat.alive();
        let wake = match &*events {
            None => {
                std::thread::sleep(POLL);
                Wake::Timeout
            }
            // Nothing pending: sleep until the directory changes.
            Some(ev) if settle.pending.is_none() => ev.wait(),
            // A change is settling: look again after POLL, or sooner on a further event.
            Some(ev) => ev.wait_timeout(POLL),
        };
        if wake == Wake::Gone {
            fall_back(path, &"the inotify watcher stopped");
            *events = None;
        }
        if settle.poll(mtime(path), Instant::now()) {
            tracing::info!(
                file = %path.display(),
                "counters file changed on disk: reloading"
            );
            if control
                .send(Control::Reload(Trigger::CountersFile))
                .is_err()
            {
                return;
            }
        }
    }
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
    use std::sync::mpsc::Receiver;

    /// Writes `text` to `path` with modification time `secs` after the epoch, so that each
    /// version of the file has its own mtime whatever the file system's clock granularity.
    fn write_at(path: &Path, text: &str, secs: u64) {
        std::fs::write(path, text).unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    }

    /// Bounded wait for the watcher's reload request (a missed change fails, not hangs).
    fn reloaded(rx: &Receiver<Control>) -> bool {
        matches!(
            rx.recv_timeout(Duration::from_secs(20)),
            Ok(Control::Reload(Trigger::CountersFile))
        )
    }

    #[test]
    fn a_file_renamed_into_place_is_seen_by_inotify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counters.csv");
        write_at(&path, "DCGM_FI_DEV_GPU_TEMP, gauge, t\n", 1_000);
        let (tx, rx) = std::sync::mpsc::channel();
        assert_eq!(spawn(path.clone(), tx).unwrap(), Mode::Events);
        let tmp = dir.path().join(".counters.csv.tmp");
        write_at(&tmp, "DCGM_FI_DEV_POWER_USAGE, gauge, p\n", 2_000);
        std::fs::rename(&tmp, &path).unwrap();
        assert!(reloaded(&rx), "no reload after a rename into place");
    }

    /// The layout the kubelet gives a ConfigMap volume: `counters.csv -> ..data/counters.csv`,
    /// `..data -> ..<timestamp>`, updated by renaming a new `..data` symlink over the old one.
    #[test]
    fn configmap_data_symlink_swaps_are_seen_by_inotify() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let version = |name: &str, secs: u64| {
            std::fs::create_dir(d.join(name)).unwrap();
            write_at(&d.join(name).join("counters.csv"), name, secs);
        };
        let swap_to = |name: &str| {
            std::os::unix::fs::symlink(name, d.join("..data_tmp")).unwrap();
            std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        };
        version("..2026_01", 1_000);
        std::os::unix::fs::symlink("..2026_01", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/counters.csv", d.join("counters.csv")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        assert_eq!(spawn(d.join("counters.csv"), tx).unwrap(), Mode::Events);
        for (i, name) in ["..2026_02", "..2026_03"].into_iter().enumerate() {
            version(name, 2_000 + i as u64);
            swap_to(name);
            assert!(reloaded(&rx), "no reload after swapping ..data to {name}");
        }
    }

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
