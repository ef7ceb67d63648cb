//! `--backend auto`'s failover, as the loop runs it: while the DCGM session is lost or
//! cannot be opened (a remote engine killed, stopped, restarting), the core GPU series are
//! collected from NVML on a worker of their own and published in place of DCGM's page, so
//! the series only DCGM answers are withdrawn at once and never kept stale. The loop keeps
//! reconnecting to DCGM; while a reconnect waits (up to the setup deadline for a stopped
//! engine) NVML is still read once per interval, through the wait's poll. The first DCGM
//! page ends the failover. Each direction is logged once. What NVML may stand in for and
//! how its failures are retried is `collect::failover`'s.

use super::{Cause, Dcgm, Engine, Failure, Runner, TickResult};
use crate::collect::engines::Collected;
use crate::collect::failover::{stuck_limit, Coverage, Retry, MIN_DEADLINE};
use crate::runtime::worker::{Abandoned, Worker};
use std::time::Instant;

#[derive(Default)]
pub(super) struct Fallback {
    /// The NVML source's worker, built on first use and kept while NVML answers.
    worker: Option<Worker<Dcgm>>,
    /// NVML workers let go while stuck in a call.
    abandoned: Vec<Abandoned>,
    /// Why DCGM is not used, while NVML serves; `None` while DCGM serves.
    serving: Option<(String, Instant)>,
    /// When NVML is next asked.
    retry: Retry,
    /// What NVML may stand in for.
    coverage: Coverage,
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
        if !self.coverage.serves() {
            return false;
        }
        if self.serving.is_none() {
            tracing::warn!(
                "DCGM is unavailable ({why}): serving the core GPU series from NVML until it returns (--backend auto)"
            );
            self.serving = Some((why.to_string(), Instant::now()));
            crate::model::events::failover_engaged(&runner.engine.name(), why);
        }
        if self.retry.backing_off() {
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
        if self.serving.is_some() && self.retry.due() {
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
        self.retry = Retry::default();
    }

    /// The counters changed (a reload): the collector in use is rebuilt with them and
    /// serves at once; without one, the next is built with them anyway.
    pub(super) fn reload(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) {
        let Some(w) = self.worker.as_ref() else {
            return;
        };
        let within = runner.interval().max(MIN_DEADLINE);
        let only = self.coverage.only();
        let built = runner.build_nvml_within(w, runner.counters(), within, only, stop);
        match built.map_err(Failure::from) {
            Ok(()) => {
                tracing::info!("reloaded the counters of NVML's failover page");
                if self.serving.is_some() {
                    self.serve(runner, stop);
                }
            }
            Err(Failure::Stopping) => {}
            Err(Failure::Session(e)) => self.failed(runner, e.to_string(), true),
            // The collector in place stays in use.
            Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                tracing::error!("reload (NVML failover): {f}; keeping the previous counters")
            }
        }
    }

    /// Looks at the GPUs the engine last reported: says once when what NVML may stand in
    /// for changes, and lets a collector built for other GPUs go.
    pub(super) fn observe(&mut self, runner: &Runner) {
        let remote = match &runner.engine {
            Engine::Embedded => None,
            Engine::Remote(t) => Some(t),
        };
        if self
            .coverage
            .observe(remote, &runner.engine_gpus, &runner.failover_gpus)
        {
            self.worker = None;
        }
    }

    fn collect(&mut self, runner: &Runner, stop: &mut dyn FnMut() -> bool) -> bool {
        let interval = runner.interval();
        let t0 = Instant::now();
        match self.try_collect(runner, stop) {
            Ok(mut c) => {
                self.retry.succeeded(interval);
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
                self.failed(runner, e.to_string(), true);
                false
            }
            Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                self.failed(runner, f.to_string(), false);
                false
            }
        }
    }

    /// NVML failed (`stuck`: its call did not return, or its thread is gone): the worker is
    /// let go, and the next try waits, longer after each failure.
    fn failed(&mut self, runner: &Runner, why: String, stuck: bool) {
        if let Some(w) = self.worker.take() {
            // An idle one just ends; a stuck one is counted until its call returns.
            if stuck {
                self.abandoned.push(w.abandon());
            }
        }
        self.retry.failed(why, runner.interval());
    }

    fn try_collect(
        &mut self,
        runner: &Runner,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Collected, Failure> {
        let interval = runner.interval().max(MIN_DEADLINE);
        let only = self.coverage.only();
        let w = match self.worker.take() {
            Some(w) => self.worker.insert(w),
            None => {
                self.abandoned.retain(|a| !a.has_ended());
                stuck_limit(self.abandoned.len()).map_err(|e| Failure::Session(Cause::Other(e)))?;
                let w = Worker::spawn("nvml").map_err(|e| Failure::Session(Cause::Thread(e)))?;
                // Kept before its build, so that a stuck build is let go as stuck.
                let w = self.worker.insert(w);
                runner.build_nvml_within(w, runner.counters(), interval, only.clone(), stop)?;
                w
            }
        };
        for _ in 0..2 {
            match runner.collect(w, stop)? {
                TickResult::Collected(c) => return Ok(*c),
                changed @ (TickResult::MigChanged | TickResult::LostGpuReturned) => {
                    tracing::info!("{}; rebuilding the NVML collector", changed.change());
                    runner
                        .attribution
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .mig_changed();
                    runner.build_nvml_within(w, runner.counters(), interval, only.clone(), stop)?;
                }
            }
        }
        Err(Failure::Watches(Cause::Other(
            "the node's GPUs changed again".into(),
        )))
    }
}
