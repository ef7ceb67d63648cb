//! `--backend auto`'s failover: while the DCGM session is lost or cannot be opened (a
//! remote engine killed, stopped, restarting), the core GPU series are collected from NVML
//! on a worker of their own and published in place of DCGM's page, so the series only DCGM
//! answers are withdrawn at once and never kept stale. The loop keeps reconnecting to DCGM;
//! while a reconnect waits (up to the setup deadline for a stopped engine) NVML is still
//! read once per interval, through the wait's poll. The first DCGM page ends the failover.
//! Each direction is logged once.
//!
//! NVML sees this machine's GPUs. The embedded engine's are the same by construction; a
//! remote engine (TCP, unix socket, vsock) may be another machine's, so NVML stands in for
//! it only for the GPUs whose UUIDs it reported when its watches were last built, and not
//! at all before it has answered once or where it shares none with NVML.
//!
//! A hung NVML (a driver in trouble) is treated as a hung DCGM: the worker is let go, at
//! most [`MAX_STUCK`] are let go while still stuck, and tries back off.

use super::{Dcgm, Engine, Failure, Runner, TickResult};
use crate::collect::engines::Collected;
use crate::runtime::worker::{Abandoned, Worker};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// NVML collections made while waiting for DCGM are bounded by this at most, so that a
/// stuck NVML call cannot hold the loop longer than one interval.
const MIN_DEADLINE: Duration = Duration::from_secs(1);
/// NVML workers still stuck in a call beyond which no new one is started (each holds a
/// thread until its call returns).
const MAX_STUCK: usize = 4;
/// The longest wait between NVML tries after failures (or the interval, if longer).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The GPUs (UUIDs) a DCGM engine's watches were last built on, recorded by the build job:
/// what NVML may stand in for.
#[derive(Clone, Default)]
pub(crate) struct EngineGpus(Arc<Mutex<Option<Vec<String>>>>);

impl EngineGpus {
    pub(super) fn set(&self, uuids: Vec<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(uuids);
    }

    fn get(&self) -> Option<Vec<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which GPUs NVML may serve in the engine's place.
#[derive(Clone, Debug, PartialEq)]
enum Covers {
    /// The embedded engine's: this machine's, all of them.
    All,
    /// A remote engine that has not said which GPUs it has yet.
    Unknown,
    /// These of a remote engine's GPUs, which NVML lists too (none: another machine's).
    Gpus(Vec<String>),
}

impl Covers {
    fn of(runner: &Runner) -> Covers {
        if matches!(runner.engine, Engine::Embedded) {
            return Covers::All;
        }
        match runner.engine_gpus.get() {
            None => Covers::Unknown,
            Some(engine) => Covers::Gpus(
                engine
                    .into_iter()
                    .filter(|u| runner.failover_gpus.contains(u))
                    .collect(),
            ),
        }
    }

    /// The GPUs the NVML collector is limited to (`None`: every GPU NVML lists).
    fn only(&self) -> Option<Vec<String>> {
        match self {
            Covers::All => None,
            Covers::Unknown => Some(Vec::new()),
            Covers::Gpus(g) => Some(g.clone()),
        }
    }

    fn serves(&self) -> bool {
        match self {
            Covers::All => true,
            Covers::Unknown => false,
            Covers::Gpus(g) => !g.is_empty(),
        }
    }
}

#[derive(Default)]
pub(super) struct Fallback {
    /// The NVML source's worker, built on first use and kept while NVML answers.
    worker: Option<Worker<Dcgm>>,
    /// NVML workers let go while stuck in a call.
    abandoned: Vec<Abandoned>,
    /// Why DCGM is not used, while NVML serves; `None` while DCGM serves.
    serving: Option<(String, Instant)>,
    /// When the next NVML page is due while DCGM is away.
    next_due: Option<Instant>,
    /// The wait before the next try after a failure (0: none failed).
    backoff: Duration,
    /// The NVML failure last logged: each different one is logged once.
    failing: Option<String>,
    /// What the engine's GPUs allowed when last looked at (`None` before).
    covers: Option<Covers>,
    /// The engine's GPUs when last looked at, for the line logged when they change.
    engine: Option<Vec<String>>,
}

impl Fallback {
    /// DCGM failed (`why`): serve from NVML now. False when NVML cannot serve either (the
    /// caller then withdraws the page as without a fallback). `stop` is asked while NVML
    /// is waited for.
    pub(super) fn engage(
        &mut self,
        runner: &Runner,
        why: &str,
        stop: &mut dyn FnMut() -> bool,
    ) -> bool {
        self.observe(runner);
        if !self.covers.as_ref().is_some_and(Covers::serves) {
            return false;
        }
        if self.serving.is_none() {
            tracing::warn!(
                "DCGM is unavailable ({why}): serving the core GPU series from NVML until it returns (--backend auto)"
            );
            self.serving = Some((why.to_string(), Instant::now()));
            crate::model::events::failover_engaged(&runner.engine.name(), why);
        }
        if self.next_due.is_some_and(|t| Instant::now() < t) {
            // Backing off after NVML failed: the page stays withdrawn meanwhile.
            return false;
        }
        self.collect(runner, stop)
    }

    /// A new NVML page; where NVML fails, the page is withdrawn as DCGM's would be.
    fn serve(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) {
        if !self.collect(runner, stop) {
            if let Some((why, _)) = &self.serving {
                runner.failed(why, false);
            }
        }
    }

    /// Whether NVML is serving in DCGM's place.
    pub(super) fn engaged(&self) -> bool {
        self.serving.is_some()
    }

    /// While DCGM is away and a DCGM call is being waited for: a new NVML page when one is
    /// due.
    pub(super) fn keep_serving(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) {
        if self.serving.is_some() && self.next_due.is_some_and(|t| Instant::now() >= t) {
            self.serve(runner, stop);
        }
    }

    /// DCGM served a page again: the failover ends, and the next one starts afresh (the
    /// counters then in force, no GPM, NVLink or XID state of this one).
    pub(super) fn disengage(&mut self) {
        if let Some((_, since)) = self.serving.take() {
            tracing::info!(
                "DCGM is back: serving from DCGM again (NVML served for {:.1}s)",
                since.elapsed().as_secs_f64()
            );
            crate::model::events::failover_released(since.elapsed().as_secs_f64());
        }
        self.worker = None;
        self.next_due = None;
        self.backoff = Duration::ZERO;
        self.failing = None;
    }

    /// The counters changed (a reload): the collector in use is rebuilt with them and
    /// serves at once; without one, the next is built with them anyway.
    pub(super) fn reload(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) {
        let Some(w) = self.worker.as_ref() else {
            return;
        };
        let within = runner.interval().max(MIN_DEADLINE);
        let only = self.covers.as_ref().and_then(Covers::only);
        match runner.build_nvml_within(w, runner.counters(), within, only, stop) {
            Ok(()) => {
                tracing::info!("reloaded the counters of NVML's failover page");
                if self.serving.is_some() {
                    self.serve(runner, stop);
                }
            }
            Err(Failure::Stopping) => {}
            Err(Failure::Session(e)) => self.failed(runner, e, true),
            // The collector in place stays in use.
            Err(Failure::Watches(e) | Failure::Config(e)) => {
                tracing::error!("reload (NVML failover): {e}; keeping the previous counters")
            }
        }
    }

    /// Looks at the GPUs the engine last reported: says once when what NVML may stand in
    /// for changes, and lets a collector built for other GPUs go.
    pub(super) fn observe(&mut self, runner: &Runner) {
        let covers = Covers::of(runner);
        if self.covers.as_ref() == Some(&covers) {
            return;
        }
        let engine = runner.engine_gpus.get();
        if let (Engine::Remote(t), Some(gpus)) = (&runner.engine, &engine) {
            if self.engine.as_ref() != Some(gpus) {
                say_covers(t, gpus, &covers, runner.failover_gpus.len());
            }
        }
        self.engine = engine;
        self.covers = Some(covers);
        self.worker = None;
    }

    fn collect(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) -> bool {
        let interval = runner.interval();
        let t0 = Instant::now();
        match self.try_collect(runner, stop) {
            Ok(mut c) => {
                self.next_due = Some(Instant::now() + interval);
                self.backoff = Duration::ZERO;
                if self.failing.take().is_some() {
                    tracing::info!("NVML answers again");
                }
                if let Some((why, _)) = &self.serving {
                    c.unmatched
                        .push(format!("DCGM is unavailable ({why}): the page is NVML's"));
                }
                runner.succeeded(c, t0.elapsed(), "nvml");
                // The page is served, but not from DCGM.
                runner.shared.metrics.connected.set(0);
                true
            }
            Err(Failure::Stopping) => false,
            Err(Failure::Session(e)) => {
                self.failed(runner, e, true);
                false
            }
            Err(Failure::Watches(e) | Failure::Config(e)) => {
                self.failed(runner, e, false);
                false
            }
        }
    }

    /// NVML failed (`stuck`: its call did not return, or its thread is gone): the worker is
    /// let go, and the next try waits, longer after each failure.
    fn failed(&mut self, runner: &Runner, why: String, stuck: bool) {
        if self.failing.as_deref() != Some(why.as_str()) {
            tracing::warn!("NVML failed too: {why}");
            self.failing = Some(why);
        }
        if let Some(w) = self.worker.take() {
            // An idle one just ends; a stuck one is counted until its call returns.
            if stuck {
                self.abandoned.push(w.abandon());
            }
        }
        let interval = runner.interval();
        self.backoff = (self.backoff * 2).clamp(interval, MAX_BACKOFF.max(interval));
        self.next_due = Some(Instant::now() + self.backoff);
    }

    fn try_collect(
        &mut self,
        runner: &Runner,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Collected, Failure> {
        let interval = runner.interval().max(MIN_DEADLINE);
        let only = self.covers.as_ref().and_then(Covers::only);
        let w = match self.worker.take() {
            Some(w) => self.worker.insert(w),
            None => {
                self.abandoned.retain(|a| !a.has_ended());
                if self.abandoned.len() >= MAX_STUCK {
                    return Err(Failure::Session(format!(
                        "{MAX_STUCK} NVML calls are stuck: no new NVML worker until one returns"
                    )));
                }
                let w = Worker::spawn("nvml")
                    .map_err(|e| Failure::Session(format!("cannot start a thread: {e}")))?;
                // Kept before its build, so that a stuck build is let go as stuck.
                let w = self.worker.insert(w);
                runner.build_nvml_within(w, runner.counters(), interval, only.clone(), stop)?;
                w
            }
        };
        for _ in 0..2 {
            match runner.collect(w, stop)? {
                TickResult::Collected(c) => return Ok(*c),
                TickResult::MigChanged | TickResult::LostGpuReturned => {
                    runner
                        .attribution
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .mig_changed();
                    runner.build_nvml_within(w, runner.counters(), interval, only.clone(), stop)?;
                }
            }
        }
        Err(Failure::Watches("the node's GPUs changed again".into()))
    }
}

/// The line saying what NVML stands in for, for a remote engine's `gpus`.
fn say_covers(target: &dcgm_sys::ConnectTarget, gpus: &[String], covers: &Covers, local: usize) {
    let n = gpus.len();
    let s = if n == 1 { "" } else { "s" };
    match covers {
        Covers::Gpus(g) if g.is_empty() => tracing::warn!(
            "NVML failover is off for the host engine at {target}: none of its {n} GPU{s} ({}) \
             is among this machine's {local} NVML GPUs, so they are another machine's; while \
             it is down its series are withdrawn",
            gpus.join(", ")
        ),
        Covers::Gpus(g) if g.len() < n => tracing::info!(
            "NVML stands in for {} of the host engine's {n} GPUs while it is down: the others \
             are not among this machine's NVML GPUs",
            g.len()
        ),
        _ => tracing::info!(
            "NVML stands in for the host engine's {n} GPU{s} while it is down (this machine's, \
             by UUID)"
        ),
    }
}
