//! Profiling that heals (NVIDIA/DCGM#303): after an XID 31, DCGM's profiling fields of a
//! GPU can read 0 (or fail, `GetSamples` -37) for good while `DCGM_FI_DEV_GPU_UTIL` says the
//! GPU is busy; dashboards and autoscalers then see an idle GPU. Only restarting DCGM was
//! known to help.
//!
//! A GPU is judged at each collection: **stuck** when it is busy
//! (`DCGM_FI_DEV_GPU_UTIL` >= [`BUSY_UTIL`] %) and every profiling field watched on it reads
//! 0 or fails; **well** when it is busy and one reads above 0; not judged while idle, or
//! without `DCGM_FI_DEV_GPU_UTIL` or a profiling field in the counters. After
//! `--profiling-rearm-after` (N) stuck collections in a row its profiling watches are
//! re-armed (unwatched and watched again, that GPU's pairs only: DCGM keys a watch by
//! entity, field and connection, so nothing else is touched), up to [`MAX_REARMS`] times
//! with a growing wait (N, 2N, 4N collections), then, in embedded mode, the embedded host
//! engine is restarted, at most once per `--profiling-restart-period`; past that, re-arms
//! go on every 8N collections. Each action is one log line and one increment of
//! `dcgm_exporter_profiling_rearms_total{gpu,UUID,action}`; `dcgm_exporter_profiling_stuck`
//! is 1 while a GPU is judged stuck.

use dcgm_sys::{Entity, EntityGroup, Reading, Value};
use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// `DCGM_FI_DEV_GPU_UTIL` at or above this (%) is busy.
pub(crate) const BUSY_UTIL: f64 = 50.0;
/// Re-arms of a stuck GPU before the embedded engine is restarted.
pub(crate) const MAX_REARMS: u32 = 3;
/// The longest wait between two re-arms, in multiples of N.
const MAX_BACKOFF: u32 = 8;
/// DCGM_FI_DEV_GPU_UTIL.
const GPU_UTIL: u16 = 203;

/// `--profiling-rearm-after`, `--profiling-restart-period`, and the modules the embedded
/// engine is started without (`--dcgm-denylist-modules`).
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Stuck collections in a row before the first re-arm; 0 turns the healing off.
    pub rearm_after: u32,
    /// The shortest time between two restarts of the embedded engine; zero: never.
    pub restart_period: Duration,
    pub denylist: Vec<dcgm_sys::Module>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rearm_after: 3,
            restart_period: Duration::from_secs(3600),
            denylist: Vec::new(),
        }
    }
}

impl Options {
    /// From the flags: (`--profiling-rearm-after`, `--profiling-restart-period`) and
    /// `--dcgm-denylist-modules`.
    pub(crate) fn from_flags(healing: (u32, Duration), denylist: Vec<dcgm_sys::Module>) -> Options {
        Options {
            rearm_after: healing.0,
            restart_period: healing.1,
            denylist,
        }
    }
}

/// Puts the denylist on the library, for every embedded engine started from it, and says
/// so once; in remote mode the flag has nothing to act on (the engine is started by its
/// own command line: `nv-hostengine --denylist-modules 8`).
pub(crate) fn apply_denylist(library: &dcgm_sys::Library, opts: &Options, embedded: bool) {
    if opts.denylist.is_empty() {
        return;
    }
    let names: Vec<&str> = opts.denylist.iter().map(|m| m.name()).collect();
    if embedded {
        library.set_module_denylist(&opts.denylist);
        tracing::info!(
            "the embedded DCGM host engine is started without the module(s) {} \
             (--dcgm-denylist-modules)",
            names.join(", ")
        );
    } else {
        tracing::warn!(
            "--dcgm-denylist-modules {} applies to the embedded host engine only: deny \
             modules on the remote engine's command line (nv-hostengine --denylist-modules)",
            names.join(",")
        );
    }
}

/// What to do about one GPU after a collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Rearm,
    RestartEngine,
}

impl Action {
    fn label(self) -> &'static str {
        match self {
            Action::Rearm => "rearm",
            Action::RestartEngine => "restart_engine",
        }
    }
}

#[derive(Default)]
struct GpuState {
    /// Stuck collections in a row.
    stuck: u32,
    /// Collections to let pass before the next action.
    wait: u32,
    /// Re-arms since it was last well (or since the engine restart).
    rearms: u32,
}

/// The judgement of every GPU of one collector.
pub(crate) struct Healer {
    opts: Options,
    embedded: bool,
    gpus: BTreeMap<u32, GpuState>,
    /// GPU id -> (`gpu` label, `UUID` label).
    labels: BTreeMap<u32, (String, String)>,
    /// A restart of the embedded engine asked for, with why.
    restart: Option<String>,
}

/// When the embedded engine was last restarted for this, process-wide: a restart makes a
/// new collector (and healer).
static LAST_RESTART: Mutex<Option<Instant>> = Mutex::new(None);

impl Healer {
    pub(crate) fn new(
        opts: Options,
        embedded: bool,
        labels: BTreeMap<u32, (String, String)>,
    ) -> Healer {
        // Every GPU's series from the start, at 0: an increase() over the counter sees its
        // first action.
        for (gpu, uuid) in labels.values() {
            stuck_gauge().with_label_values(&[gpu, uuid]).set(0);
            for a in [Action::Rearm, Action::RestartEngine] {
                rearm_counter().with_label_values(&[gpu, uuid, a.label()]);
            }
        }
        Healer {
            opts,
            embedded,
            gpus: BTreeMap::new(),
            labels,
            restart: None,
        }
    }

    /// Judges GPU `gpu` (entity `entity`) from one collection's readings of its watched
    /// profiling fields `prof`; the action due, if any.
    pub(crate) fn judge(
        &mut self,
        gpu: u32,
        entity: Entity,
        prof: &[u16],
        readings: &[dcgm_sys::FieldReading],
    ) -> Option<Action> {
        if self.opts.rearm_after == 0 || entity.group != EntityGroup::Gpu || prof.is_empty() {
            return None;
        }
        let mine = readings.iter().filter(|r| r.entity == entity);
        let (mut util, mut active) = (None, false);
        for r in mine {
            if r.field_id == GPU_UTIL {
                util = number(&r.reading);
            } else if prof.contains(&r.field_id) {
                active |= number(&r.reading).is_some_and(|v| v > 0.0);
            }
        }
        match util {
            Some(u) if u >= BUSY_UTIL && !active => self.stuck(gpu, u),
            _ => {
                self.well(gpu);
                None
            }
        }
    }

    fn well(&mut self, gpu: u32) {
        let Some(s) = self.gpus.remove(&gpu) else {
            return;
        };
        if s.stuck >= self.opts.rearm_after {
            let (g, uuid) = self.labels(gpu);
            stuck_gauge().with_label_values(&[&g, &uuid]).set(0);
            tracing::info!(
                "profiling of GPU {g} ({uuid}) reads again after {} re-arm(s)",
                s.rearms
            );
        }
    }

    fn stuck(&mut self, gpu: u32, util: f64) -> Option<Action> {
        let n = self.opts.rearm_after;
        let s = self.gpus.entry(gpu).or_default();
        s.stuck += 1;
        if s.stuck < n {
            return None;
        }
        if s.stuck == n {
            let (g, uuid) = self.labels(gpu);
            stuck_gauge().with_label_values(&[&g, &uuid]).set(1);
        }
        let s = self.gpus.entry(gpu).or_default();
        if s.wait > 0 {
            s.wait -= 1;
            return None;
        }
        let restart = s.rearms >= MAX_REARMS && self.embedded && restart_allowed(&self.opts);
        let action = if restart {
            s.rearms = 0;
            s.wait = n;
            Action::RestartEngine
        } else {
            s.rearms += 1;
            s.wait = n * (1 << (s.rearms - 1).min(3)).min(MAX_BACKOFF);
            Action::Rearm
        };
        let (rearms, stuck) = (s.rearms, s.stuck);
        self.record(gpu, action, util, stuck, rearms);
        Some(action)
    }

    /// The log line and the counter of one action.
    fn record(&mut self, gpu: u32, action: Action, util: f64, stuck: u32, rearms: u32) {
        let (g, uuid) = self.labels(gpu);
        rearm_counter()
            .with_label_values(&[&g, &uuid, action.label()])
            .inc();
        let why = format!(
            "profiling of GPU {g} ({uuid}) reads 0 or fails while DCGM_FI_DEV_GPU_UTIL is \
             {util} % for {stuck} collections (NVIDIA/DCGM#303)"
        );
        crate::model::events::profiling_rearm(gpu, &uuid, action.label(), &why);
        match action {
            Action::Rearm => tracing::warn!(
                "{why}: re-arming its profiling watches (re-arm {rearms}; after {MAX_REARMS}, {})",
                if self.embedded && !self.opts.restart_period.is_zero() {
                    "the embedded host engine is restarted"
                } else {
                    "re-arms go on with a longer wait"
                }
            ),
            Action::RestartEngine => {
                *LAST_RESTART.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
                tracing::warn!(
                    "{why}: {MAX_REARMS} re-arms did not help; restarting the embedded DCGM \
                     host engine (at most once per {:?})",
                    self.opts.restart_period
                );
                self.restart = Some(format!(
                    "restarting the embedded host engine: profiling of GPU {g} stuck"
                ));
            }
        }
    }

    /// A restart of the embedded engine that was decided (once).
    pub(crate) fn take_restart(&mut self) -> Option<String> {
        self.restart.take()
    }

    fn labels(&self, gpu: u32) -> (String, String) {
        self.labels
            .get(&gpu)
            .cloned()
            .unwrap_or_else(|| (gpu.to_string(), String::new()))
    }
}

/// Whether the period since the last restart of the embedded engine has passed.
fn restart_allowed(opts: &Options) -> bool {
    if opts.restart_period.is_zero() {
        return false;
    }
    LAST_RESTART
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_none_or(|t| t.elapsed() >= opts.restart_period)
}

/// A reading as a number: values only (a failed read or a sentinel is none).
fn number(r: &Reading) -> Option<f64> {
    match r {
        Reading::Value(Value::Int64(v)) => Some(*v as f64),
        Reading::Value(Value::Double(v)) => Some(*v),
        _ => None,
    }
}

/// The profiling fields of `fields` watched on `entity` (`unsupported` pairs left out).
pub(crate) fn watched_profiling(
    fields: &[u16],
    entity: Entity,
    unsupported: &HashSet<(Entity, u16)>,
) -> Vec<u16> {
    fields
        .iter()
        .copied()
        .filter(|f| super::profiling::is_profiling(*f) && !unsupported.contains(&(entity, *f)))
        .collect()
}

/// `dcgm_exporter_profiling_rearms_total{gpu,UUID,action}`, process-wide (registered by
/// the self metrics).
pub(crate) fn rearm_counter() -> &'static IntCounterVec {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        IntCounterVec::new(
            Opts::new(
                format!("{}profiling_rearms_total", crate::model::naming::PREFIX),
                "Actions taken on a GPU whose profiling fields read 0 or fail while it is busy \
                 (NVIDIA/DCGM#303): rearm (its profiling watches unwatched and watched again) \
                 or restart_engine (the embedded host engine restarted).",
            ),
            &["gpu", "UUID", "action"],
        )
        .expect("static metric options are valid")
    })
}

/// `dcgm_exporter_profiling_stuck{gpu,UUID}`: 1 while the GPU is judged stuck.
pub(crate) fn stuck_gauge() -> &'static IntGaugeVec {
    static G: OnceLock<IntGaugeVec> = OnceLock::new();
    G.get_or_init(|| {
        IntGaugeVec::new(
            Opts::new(
                format!("{}profiling_stuck", crate::model::naming::PREFIX),
                "1 while a busy GPU's profiling fields have read 0 or failed for \
                 --profiling-rearm-after collections in a row (NVIDIA/DCGM#303), else 0.",
            ),
            &["gpu", "UUID"],
        )
        .expect("static metric options are valid")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dcgm_sys::FieldReading;

    fn reading(field: u16, v: Reading) -> FieldReading {
        FieldReading {
            entity: Entity::gpu(7),
            field_id: field,
            ts_us: 1,
            reading: v,
        }
    }

    fn page(util: i64, prof: f64) -> Vec<FieldReading> {
        vec![
            reading(GPU_UTIL, Reading::Value(Value::Int64(util))),
            reading(1001, Reading::Value(Value::Double(prof))),
        ]
    }

    fn healer(embedded: bool) -> Healer {
        let labels = BTreeMap::from([(7, ("7".to_string(), "GPU-test-heal".to_string()))]);
        Healer::new(Options::default(), embedded, labels)
    }

    /// N stuck collections, a re-arm; the waits grow (N, 2N, 4N); after three re-arms the
    /// embedded engine is restarted, once per period; an idle or working GPU is well.
    #[test]
    fn stuck_gpus_are_re_armed_with_a_growing_wait_then_the_engine_restarted() {
        let mut h = healer(true);
        let e = Entity::gpu(7);
        let mut actions = Vec::new();
        for i in 0..40 {
            if let Some(a) = h.judge(7, e, &[1001], &page(100, 0.0)) {
                actions.push((i, a));
            }
        }
        let rearms: Vec<usize> = actions
            .iter()
            .filter(|a| a.1 == Action::Rearm)
            .map(|a| a.0)
            .collect();
        assert_eq!(&rearms[..3], &[2, 6, 13], "{actions:?}");
        let restarts: Vec<usize> = actions
            .iter()
            .filter(|a| a.1 == Action::RestartEngine)
            .map(|a| a.0)
            .collect();
        assert_eq!(restarts, vec![26], "{actions:?}");
        assert!(h.take_restart().is_some());
        assert!(h.take_restart().is_none());
        // Idle: not judged; busy and active: well again, and the gauge back to 0.
        assert_eq!(h.judge(7, e, &[1001], &page(10, 0.0)), None);
        assert_eq!(
            stuck_gauge()
                .with_label_values(&["7", "GPU-test-heal"])
                .get(),
            0
        );
        assert_eq!(h.judge(7, e, &[1001], &page(100, 0.4)), None);
        // Remote (or the period not over): no restart, re-arms go on.
        let mut r = healer(false);
        let n = (0..60)
            .filter_map(|_| r.judge(7, e, &[1001], &page(100, 0.0)))
            .inspect(|a| assert_eq!(*a, Action::Rearm))
            .count();
        assert_eq!(n, 5, "re-arms at 2, 6, 13, 26 and 51");
        // A failed read counts as stuck; no profiling field or no utilisation: not judged.
        let mut f = healer(false);
        let failing = vec![
            reading(GPU_UTIL, Reading::Value(Value::Int64(90))),
            reading(
                1001,
                Reading::Error(dcgm_sys::Status::ProfilingLibraryError),
            ),
        ];
        let got: Vec<_> = (0..3).map(|_| f.judge(7, e, &[1001], &failing)).collect();
        assert_eq!(got, vec![None, None, Some(Action::Rearm)]);
        assert_eq!(f.judge(7, e, &[], &failing), None);
    }
}
