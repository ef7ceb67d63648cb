//! Placing MIG devices named by UUID (by the kubelet, a DRA ResourceSlice or a label source)
//! on their GPU instance, through NVML, without trusting any one NVML call and without
//! letting NVML hold the collection.
//!
//! * Each UUID is first asked directly (`NvmlView::mig_location`); where that fails (an
//!   error, or a NULL handle answered as success, as DCGM's injection library does), one walk
//!   of every GPU's MIG devices by index places it (`NvmlView::mig_devices`).
//! * Every call runs on the `nvml` thread. The collection waits for an answer until a
//!   deadline; an answer that comes later is used by the next collection, and while a call
//!   is stuck no other is queued behind it and `/health` says so. A hung driver costs the
//!   pods on MIG devices their labels, never the GPU metrics.
//! * What was placed is cached by UUID, bounded, and emptied whenever the MIG layout changes
//!   (a re-partition gives the instances new UUIDs; the old ones must not pile up). A device
//!   that cannot be placed is retried after `RETRY` or on the next layout change.

use super::device_ids::{self, MigLocation};
use super::nvml::{MigDevice, NvmlView, Process};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Most MIG devices remembered (placed, or failed): far above any node's (8 GPUs x 7).
pub(crate) const MAX_CACHED: usize = 4096;

/// How long a device that could not be placed waits before it is asked again (a layout
/// change asks again at once).
pub(crate) const RETRY: Duration = Duration::from_secs(30);

/// A GPU's MIG layout as the page shows it: (GPU UUID, GPU-instance id, profile) of each
/// MIG-instance series.
pub(crate) type Layout = BTreeSet<(String, String, String)>;

/// One round of NVML work.
struct Job {
    generation: u64,
    mig: Vec<String>,
    processes: Vec<String>,
}

/// Its answer.
struct Answer {
    generation: u64,
    placed: Vec<MigDevice>,
    /// UUIDs neither the direct calls nor the walk placed, with why.
    failed: Vec<(String, String)>,
    processes: HashMap<String, Result<Vec<Process>, String>>,
}

/// Direct lookups first; one walk of every GPU's MIG devices for those they could not
/// place. The walk's whole table comes back, so the next new UUID is usually a cache hit.
pub(crate) fn locate(
    nvml: &dyn NvmlView,
    uuids: &[String],
) -> (Vec<MigDevice>, Vec<(String, String)>) {
    let mut placed = Vec::new();
    let mut missed = Vec::new();
    for u in uuids {
        match nvml.mig_location(u) {
            Ok(location) => placed.push(MigDevice {
                uuid: u.clone(),
                location,
            }),
            Err(e) => missed.push((u.clone(), e)),
        }
    }
    if missed.is_empty() {
        return (placed, Vec::new());
    }
    let walk = nvml.mig_devices();
    let mut failed = Vec::new();
    for (u, direct) in missed {
        if !walk.devices.iter().any(|d| d.uuid == u) {
            let mut why = format!(
                "{direct}; not among the {} MIG device(s) NVML lists by index",
                walk.devices.len()
            );
            if !walk.problems.is_empty() {
                why.push_str(&format!(" ({})", walk.problems.join("; ")));
            }
            failed.push((u, why));
        }
    }
    placed.extend(walk.devices);
    (placed, failed)
}

fn run(nvml: &dyn NvmlView, job: Job) -> Answer {
    let (placed, failed) = if job.mig.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        locate(nvml, &job.mig)
    };
    let processes = job
        .processes
        .into_iter()
        .map(|gpu| {
            let p = nvml.processes(&gpu);
            (gpu, p)
        })
        .collect();
    Answer {
        generation: job.generation,
        placed,
        failed,
        processes,
    }
}

/// The thread that owns the library and makes every NVML call.
struct NvmlThread {
    jobs: Sender<Job>,
    answers: Receiver<Answer>,
    /// When the job still without an answer was sent.
    pending: Option<Instant>,
    /// Why the thread is gone, once it is.
    gone: Option<String>,
}

impl NvmlThread {
    fn start(nvml: Box<dyn NvmlView>) -> Result<NvmlThread, String> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (reply, answers) = mpsc::channel::<Answer>();
        std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || {
                for job in inbox {
                    let (generation, mig) = (job.generation, job.mig.clone());
                    let answer = catch_unwind(AssertUnwindSafe(|| run(nvml.as_ref(), job)))
                        .unwrap_or_else(|_| Answer {
                            generation,
                            placed: Vec::new(),
                            failed: mig
                                .into_iter()
                                .map(|u| (u, "the NVML call panicked".to_string()))
                                .collect(),
                            processes: HashMap::new(),
                        });
                    if reply.send(answer).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start the NVML thread: {e}"))?;
        Ok(NvmlThread {
            jobs,
            answers,
            pending: None,
            gone: None,
        })
    }

    fn send(&mut self, job: Job) {
        if self.jobs.send(job).is_ok() {
            self.pending = Some(Instant::now());
        } else {
            self.gone = Some("the NVML thread has ended".into());
        }
    }

    /// The pending job's answer, waiting until `deadline` at most.
    fn wait(&mut self, deadline: Instant) -> Option<Answer> {
        self.pending?;
        let left = deadline.saturating_duration_since(Instant::now());
        match self.answers.recv_timeout(left) {
            Ok(a) => {
                self.pending = None;
                Some(a)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.pending = None;
                self.gone = Some("the NVML thread has ended".into());
                None
            }
        }
    }
}

/// What one collection learnt from NVML.
#[derive(Default)]
pub(crate) struct Round {
    /// Processes per GPU UUID, when NVML answered this collection.
    pub processes: Option<HashMap<String, Result<Vec<Process>, String>>>,
    /// NVML itself not answering (stuck, gone).
    pub problem: Option<String>,
    /// MIG devices asked for that are not placed, with why, sorted by UUID.
    pub unplaced: BTreeMap<String, String>,
    /// How many of `unplaced` were not unplaced on the previous collection.
    pub newly_unplaced: usize,
}

/// The MIG placement cache and the NVML thread. Owned by the attribution stage.
pub(crate) struct Placer {
    thread: Option<NvmlThread>,
    /// Why there is no NVML (not loaded), for the unplaced devices' reason.
    absent: String,
    cache: HashMap<String, MigLocation>,
    /// Devices NVML could not place: why, and when it said so.
    failed: HashMap<String, (String, Instant)>,
    /// Bumped on each layout change; answers to older jobs place nothing.
    generation: u64,
    layout: Option<Layout>,
    unplaced: HashSet<String>,
}

impl Placer {
    /// `nvml`: the library, or why there is none. Starting the thread can fail (no
    /// threads left): then, as without NVML, nothing is placed, and the error says why.
    pub(crate) fn new(nvml: Result<Box<dyn NvmlView>, String>) -> (Placer, Option<String>) {
        let (thread, absent) = match nvml.and_then(NvmlThread::start) {
            Ok(t) => (Some(t), String::new()),
            Err(e) => (None, e),
        };
        let error = thread.is_none().then(|| absent.clone());
        (
            Placer {
                thread,
                absent,
                cache: HashMap::new(),
                failed: HashMap::new(),
                generation: 0,
                layout: None,
                unplaced: HashSet::new(),
            },
            error,
        )
    }

    /// The MIG layout changed (a re-partition): forget every placement.
    pub(crate) fn layout_changed(&mut self) {
        self.cache = HashMap::new();
        self.failed = HashMap::new();
        self.generation += 1;
    }

    /// The layout the page shows; a change from the last one empties the caches.
    pub(crate) fn observe(&mut self, layout: Layout) {
        if self.layout.as_ref() != Some(&layout) {
            if self.layout.is_some() {
                self.layout_changed();
            }
            self.layout = Some(layout);
        }
    }

    /// Where a MIG device (`MIG-…`, a `::N` replica suffix allowed) is, if placed.
    pub(crate) fn lookup(&self, uuid: &str) -> Option<MigLocation> {
        self.cache.get(device_ids::strip_vgpu_suffix(uuid)).cloned()
    }

    /// Placed devices remembered (for tests of the bound and of re-partitions).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.cache.len()
    }

    fn absorb(&mut self, a: Answer) {
        if a.generation != self.generation {
            return;
        }
        if self.cache.len() + a.placed.len() > MAX_CACHED {
            self.cache = HashMap::new();
        }
        for d in a.placed.into_iter().take(MAX_CACHED) {
            self.failed.remove(&d.uuid);
            self.cache.insert(d.uuid, d.location);
        }
        let now = Instant::now();
        if self.failed.len() + a.failed.len() > MAX_CACHED {
            self.failed = HashMap::new();
        }
        for (u, why) in a.failed.into_iter().take(MAX_CACHED) {
            self.failed.insert(u, (why, now));
        }
    }

    /// Places `wanted` (MIG UUIDs, replica suffixes already stripped) and fetches the
    /// processes of `process_gpus`, waiting for NVML `wait` at most.
    pub(crate) fn refresh(
        &mut self,
        wanted: &BTreeSet<String>,
        process_gpus: Vec<String>,
        wait: Duration,
    ) -> Round {
        let deadline = Instant::now() + wait;
        let mut round = Round::default();
        if let Some(mut t) = self.thread.take() {
            // An answer to an earlier collection's question, late but still of use.
            if let Some(a) = t.wait(deadline) {
                round.processes = Some(self.absorb_keep(a));
            }
            let misses: Vec<String> = wanted
                .iter()
                .filter(|u| !self.cache.contains_key(*u))
                .filter(|u| !matches!(self.failed.get(*u), Some((_, at)) if at.elapsed() < RETRY))
                .take(MAX_CACHED)
                .cloned()
                .collect();
            if t.pending.is_none()
                && t.gone.is_none()
                && (!misses.is_empty() || !process_gpus.is_empty())
            {
                t.send(Job {
                    generation: self.generation,
                    mig: misses,
                    processes: process_gpus,
                });
                if let Some(a) = t.wait(deadline) {
                    let fresh = self.absorb_keep(a);
                    round.processes = Some(match round.processes.take() {
                        Some(late) => combine_processes(late, fresh),
                        None => fresh,
                    });
                }
            }
            if let Some(why) = &t.gone {
                round.problem = Some(why.clone());
            } else if let Some(since) = t.pending {
                round.problem = Some(format!(
                    "NVML has not answered for {:.1?} (a call is stuck in the library); MIG devices named by UUID are not placed meanwhile",
                    since.elapsed()
                ));
            }
            self.thread = Some(t);
        }
        for u in wanted.iter().filter(|u| !self.cache.contains_key(*u)) {
            let why = match (&self.thread, self.failed.get(u)) {
                (None, _) => self.absent.clone(),
                (Some(_), Some((why, _))) => why.clone(),
                (Some(_), None) => "NVML has not answered yet".to_string(),
            };
            round.unplaced.insert(u.clone(), why);
        }
        round.newly_unplaced = round
            .unplaced
            .keys()
            .filter(|u| !self.unplaced.contains(*u))
            .count();
        self.unplaced = round.unplaced.keys().cloned().collect();
        round
    }

    /// Absorbs an answer's placements and hands back its processes.
    fn absorb_keep(&mut self, mut a: Answer) -> HashMap<String, Result<Vec<Process>, String>> {
        let processes = std::mem::take(&mut a.processes);
        self.absorb(a);
        processes
    }
}

/// Processes per GPU, as one NVML answer gives them.
type ProcessAnswers = HashMap<String, Result<Vec<Process>, String>>;

/// A late answer and a fresh one arriving in the same collection: every ask hands out the
/// samples newer than the previous ask's, so the late answer's samples are the first part
/// of the interval and must not be lost. The fresh answer says which processes exist now;
/// each keeps the late samples of the same pid before its own. A GPU the fresh answer
/// failed on keeps the late answer.
fn combine_processes(mut late: ProcessAnswers, fresh: ProcessAnswers) -> ProcessAnswers {
    let mut out = HashMap::with_capacity(fresh.len());
    for (uuid, answer) in fresh {
        let earlier = late.remove(&uuid);
        let combined = match (answer, earlier) {
            (Ok(mut procs), Some(Ok(old))) => {
                for p in &mut procs {
                    if let Some(o) = old.iter().find(|o| o.pid == p.pid) {
                        let mut samples = o.samples.clone();
                        samples.append(&mut p.samples);
                        p.samples = samples;
                        p.sm_util = p.sm_util.or(o.sm_util);
                    }
                }
                Ok(procs)
            }
            (Err(_), Some(Ok(old))) => Ok(old),
            (answer, _) => answer,
        };
        out.insert(uuid, combined);
    }
    out.extend(late);
    out
}

#[cfg(test)]
mod tests;
