//! `--backend auto`'s failover: while the DCGM session is lost or cannot be opened (a
//! remote engine killed, stopped, restarting), the core GPU series are collected from NVML
//! on a worker of their own and published in place of DCGM's page, so the series only DCGM
//! answers are withdrawn at once and never kept stale. The loop keeps reconnecting to DCGM;
//! while a reconnect waits (up to the setup deadline for a stopped engine) NVML is still
//! read once per interval, through the wait's poll. The first DCGM page ends the failover.
//! Each direction is logged once.

use super::{Dcgm, Failure, Runner, TickResult};
use crate::lifecycle::worker::Worker;
use std::time::{Duration, Instant};

/// NVML collections made while waiting for DCGM are bounded by this at most, so that a
/// stuck NVML call cannot hold the loop longer than one interval.
const MIN_DEADLINE: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Fallback {
    /// The NVML source's worker, built on first use and kept while NVML answers.
    worker: Option<Worker<Dcgm>>,
    /// Why DCGM is not used, while NVML serves; `None` while DCGM serves.
    serving: Option<(String, Instant)>,
    /// When the next NVML page is due while DCGM is away.
    next_due: Option<Instant>,
}

impl Fallback {
    /// DCGM failed (`why`): serve from NVML now. False when NVML cannot serve either (the
    /// caller then withdraws the page as without a fallback).
    pub fn engage(&mut self, runner: &Runner, why: &str) -> bool {
        if self.serving.is_none() {
            tracing::warn!(
                "DCGM is unavailable ({why}): serving the core GPU series from NVML until it returns (--backend auto)"
            );
            self.serving = Some((why.to_string(), Instant::now()));
        }
        self.collect(runner)
    }

    /// Whether NVML is serving in DCGM's place.
    pub fn engaged(&self) -> bool {
        self.serving.is_some()
    }

    /// While DCGM is away and a DCGM call is being waited for: a new NVML page when one is
    /// due.
    pub fn keep_serving(&mut self, runner: &Runner) {
        if self.serving.is_some() && self.next_due.is_some_and(|t| Instant::now() >= t) {
            self.collect(runner);
        }
    }

    /// DCGM served a page again: the failover ends.
    pub fn disengage(&mut self) {
        if let Some((_, since)) = self.serving.take() {
            tracing::info!(
                "DCGM is back: serving from DCGM again (NVML served for {:.1}s)",
                since.elapsed().as_secs_f64()
            );
        }
        self.next_due = None;
    }

    fn collect(&mut self, runner: &Runner) -> bool {
        let interval = runner.interval();
        self.next_due = Some(Instant::now() + interval);
        let t0 = Instant::now();
        match self.try_collect(runner) {
            Ok(mut c) => {
                if let Some((why, _)) = &self.serving {
                    c.unmatched
                        .push(format!("DCGM is unavailable ({why}): the page is NVML's"));
                }
                runner.succeeded(c, t0.elapsed(), "nvml");
                // The page is served, but not from DCGM.
                runner.shared.metrics.connected.set(0);
                true
            }
            Err(e) => {
                tracing::warn!("NVML failed too: {e}");
                // A stuck or failed NVML worker is let go; the next try starts a new one.
                self.worker = None;
                false
            }
        }
    }

    fn try_collect(&mut self, runner: &Runner) -> Result<super::Collected, String> {
        let interval = runner.interval().max(MIN_DEADLINE);
        let mut no_stop = || false;
        if self.worker.is_none() {
            let w = Worker::spawn("nvml").map_err(|e| format!("cannot start a thread: {e}"))?;
            runner
                .build_nvml_within(&w, runner.counters(), interval, &mut no_stop)
                .map_err(text)?;
            self.worker = Some(w);
        }
        let w = self.worker.as_ref().ok_or("no NVML worker")?;
        match runner.collect(w, &mut no_stop).map_err(text)? {
            TickResult::Collected(c) => Ok(*c),
            TickResult::MigChanged | TickResult::LostGpuReturned => {
                runner
                    .build_nvml_within(w, runner.counters(), interval, &mut no_stop)
                    .map_err(text)?;
                match runner.collect(w, &mut no_stop).map_err(text)? {
                    TickResult::Collected(c) => Ok(*c),
                    TickResult::MigChanged | TickResult::LostGpuReturned => {
                        Err("the node's GPUs changed again".into())
                    }
                }
            }
        }
    }
}

fn text(f: Failure) -> String {
    match f {
        Failure::Session(e) | Failure::Watches(e) | Failure::Config(e) => e,
        Failure::Stopping => "stopping".into(),
    }
}
