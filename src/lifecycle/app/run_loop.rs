//! The collection loop: a tick per interval, what a failed tick leads to (rebuild the
//! watches, or abandon the worker and reconnect with backoff), control messages (stop,
//! reload) taken as they arrive, also while a job runs.

use super::fallback::Fallback;
use super::{Cause, Dcgm, Engine, Failure, Runner, TickResult};
use crate::lifecycle::control::{Control, Trigger};
use crate::runtime::worker::{Abandoned, Worker};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Abandoned workers still stuck in a DCGM call beyond which no new remote session is
/// opened (each holds a thread and a connection until its call returns).
const MAX_STUCK: usize = 4;
/// How long the watches may take to be removed at shutdown.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

impl Runner {
    /// Runs until told to stop (or the channel closes), then removes the watches.
    /// Without a worker (a remote engine unreachable at start) the first tick connects,
    /// retried with backoff like a connection lost later.
    pub(crate) fn run(&self, worker: Option<Worker<Dcgm>>, control: Receiver<Control>) {
        Loop {
            runner: self,
            built: worker.is_some(),
            worker,
            abandoned: Vec::new(),
            inbox: Inbox {
                control,
                stopping: false,
                stop_seen: None,
                reload: Vec::new(),
            },
            backoff: self.first_backoff(),
            fallback: self.has_fallback().then(Fallback::default),
        }
        .run();
    }

    fn first_backoff(&self) -> Duration {
        Duration::from_millis(500).min(self.interval())
    }
}

/// Control messages as they arrive during a job or between ticks.
struct Inbox {
    control: Receiver<Control>,
    stopping: bool,
    /// When the stop arrived: the watches' removal is timed from it, not from the end of
    /// the step this loop was in (every engine's loop then ends by the same time).
    stop_seen: Option<Instant>,
    /// What asked for a reload not handled yet, each once, in order of arrival.
    reload: Vec<Trigger>,
}

impl Inbox {
    fn take(&mut self, m: Result<Control, ()>) {
        match m {
            Ok(Control::Reload(t)) => {
                if !self.reload.contains(&t) {
                    self.reload.push(t);
                }
            }
            Ok(Control::Stop) | Err(()) => {
                self.stopping = true;
                self.stop_seen.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Takes what has arrived; true once told to stop.
    fn poll(&mut self) -> bool {
        loop {
            match self.control.try_recv() {
                Ok(m) => self.take(Ok(m)),
                Err(TryRecvError::Disconnected) => self.take(Err(())),
                Err(TryRecvError::Empty) => return self.stopping,
            }
        }
    }

    /// Waits until `until`, or less if a message arrives.
    fn wait_until(&mut self, until: Instant) {
        while !self.stopping && self.reload.is_empty() {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                // A step that took the whole wait (a hung NVML) must not hide a stop.
                self.poll();
                return;
            };
            match self.control.recv_timeout(left) {
                Ok(m) => self.take(Ok(m)),
                Err(RecvTimeoutError::Disconnected) => self.take(Err(())),
                Err(RecvTimeoutError::Timeout) => return,
            }
        }
    }
}

/// The loop's state between ticks.
struct Loop<'a> {
    runner: &'a Runner,
    /// The thread owning the DCGM session; `None` until (re)connected.
    worker: Option<Worker<Dcgm>>,
    /// Whether the worker holds watches (they are dropped when a collection fails).
    built: bool,
    /// Workers let go while stuck in a DCGM call.
    abandoned: Vec<Abandoned>,
    inbox: Inbox,
    backoff: Duration,
    /// `--backend auto` with NVML loaded: what serves while DCGM cannot.
    fallback: Option<Fallback>,
}

/// The poll of a wait for DCGM: control messages, and NVML's page when one is due while
/// DCGM is away.
fn waiting(inbox: &mut Inbox, fallback: &mut Option<Fallback>, runner: &Runner) -> bool {
    if let Some(f) = fallback.as_mut() {
        f.keep_serving(runner, &mut || inbox.poll());
    }
    inbox.poll()
}

impl Loop<'_> {
    fn run(&mut self) {
        let interval = self.runner.interval();
        loop {
            let started = Instant::now();
            let ticked = self.tick();
            if let Some(f) = self.fallback.as_mut() {
                // The engine's GPUs, as (re)connecting found them, decide what NVML serves.
                f.observe(self.runner);
            }
            let wait = match ticked {
                Ok(()) => {
                    if let Some(f) = self.fallback.as_mut() {
                        f.disengage();
                    }
                    interval
                }
                Err(Failure::Stopping) => break,
                Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                    tracing::warn!("collection failed: {f}; rebuilding the watches");
                    self.built = false;
                    self.runner.failed(&f.to_string(), true);
                    interval
                }
                Err(Failure::Session(why)) if self.worker.is_some() => {
                    let why = why.to_string();
                    tracing::error!("lost the DCGM session: {why}; reconnecting");
                    crate::model::events::engine_down(&self.runner.engine.name(), &why);
                    self.abandon();
                    self.without_dcgm(&why);
                    Duration::ZERO
                }
                Err(Failure::Session(why)) => {
                    let why = why.to_string();
                    tracing::warn!("reconnect failed: {why}; retrying in {:?}", self.backoff);
                    self.without_dcgm(&why);
                    let b = self.backoff;
                    self.backoff = (self.backoff * 2).min(interval);
                    b
                }
            };
            loop {
                self.inbox.wait_until(started + wait);
                if self.inbox.stopping {
                    return self.stop_watches();
                }
                let triggers = std::mem::take(&mut self.inbox.reload);
                if triggers.is_empty() {
                    break;
                }
                self.reload(&triggers);
            }
        }
        self.stop_watches();
    }

    /// DCGM cannot be used: NVML serves where it can, else the series are withdrawn.
    fn without_dcgm(&mut self, why: &str) {
        let Loop {
            runner,
            inbox,
            fallback,
            ..
        } = self;
        let mut stop = || inbox.poll();
        let served = match fallback.as_mut() {
            // Already served by the wait's poll within this interval, or withdrawn there.
            Some(f) if f.engaged() => {
                f.keep_serving(runner, &mut stop);
                true
            }
            Some(f) => f.engage(runner, why, &mut stop),
            None => false,
        };
        if !served {
            runner.failed(why, false);
        }
    }

    /// Connects if needed, builds the watches if needed, collects and publishes.
    fn tick(&mut self) -> Result<(), Failure> {
        if self.worker.is_none() {
            self.connect()?;
        }
        let Loop {
            runner,
            worker,
            built,
            inbox,
            fallback,
            ..
        } = self;
        let Some(worker) = worker.as_ref() else {
            return Err(Failure::Session(Cause::Other("no DCGM session".into())));
        };
        let mut stop = || waiting(inbox, fallback, runner);
        let t0 = Instant::now();
        if !*built {
            runner.build(worker, runner.counters(), &mut stop)?;
            *built = true;
        }
        // The kubelet is asked now, so its answer is there when the page is attributed.
        runner
            .attribution
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .begin();
        let collected = match runner.collect(worker, &mut stop)? {
            TickResult::Collected(c) => c,
            changed @ (TickResult::MigChanged | TickResult::LostGpuReturned) => {
                tracing::info!("{}; rebuilding watches", changed.change());
                runner
                    .attribution
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .mig_changed();
                *built = false;
                runner.build(worker, runner.counters(), &mut stop)?;
                *built = true;
                match runner.collect(worker, &mut stop)? {
                    TickResult::Collected(c) => c,
                    TickResult::MigChanged | TickResult::LostGpuReturned => {
                        return Err(Failure::Watches(Cause::Other(
                            "the node's GPUs changed again while rebuilding".into(),
                        )))
                    }
                }
            }
        };
        runner.succeeded(*collected, t0.elapsed(), runner.backend());
        Ok(())
    }

    /// Opens a new session in a new worker, unless too many abandoned ones are still stuck.
    fn connect(&mut self) -> Result<(), Failure> {
        self.abandoned.retain(|a| !a.has_ended());
        // Two embedded engines cannot coexist in one process: wait for the old one to end.
        let limit = match self.runner.engine {
            Engine::Embedded => 0,
            Engine::Remote(_) => MAX_STUCK - 1,
        };
        if self.abandoned.len() > limit {
            return Err(Failure::Session(Cause::Other(format!(
                "waiting for {} abandoned {} session(s) stuck in a call to return",
                self.abandoned.len(),
                self.runner.backend().to_uppercase()
            ))));
        }
        let worker =
            Worker::spawn(self.runner.backend()).map_err(|e| Failure::Session(Cause::Thread(e)))?;
        let Loop {
            runner,
            inbox,
            fallback,
            ..
        } = self;
        match runner.open(&worker, &mut || waiting(inbox, fallback, runner)) {
            Ok(()) => {
                match &self.runner.engine {
                    Engine::Remote(t) => tracing::info!("connected to the DCGM host engine at {t}"),
                    Engine::Embedded => tracing::info!("started the embedded DCGM host engine"),
                }
                self.runner.shared.metrics.reconnects.inc();
                if let Some(h) = &self.runner.hand_off {
                    h.combiner.connected(h.index);
                }
                self.runner.shared.set_connected(true);
                self.backoff = self.runner.first_backoff();
                self.runner.current.set(Some(&worker));
                self.worker = Some(worker);
                self.built = true;
                Ok(())
            }
            // The session is up; the watches are rebuilt next tick.
            Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                self.runner.current.set(Some(&worker));
                self.worker = Some(worker);
                self.built = false;
                Err(match f {
                    Failure::Config(e) => Failure::Watches(Cause::Config(e)),
                    f => f,
                })
            }
            Err(f) => {
                self.abandoned.push(worker.abandon());
                Err(f)
            }
        }
    }

    /// Lets the worker go with its session; it ends when its current call returns.
    fn abandon(&mut self) {
        // Before letting it go: nothing may queue jobs on it any more.
        self.runner.current.set(None);
        if let Some(w) = self.worker.take() {
            self.abandoned.push(w.abandon());
        }
        self.built = false;
    }

    fn reload(&mut self, triggers: &[Trigger]) {
        let Loop {
            runner,
            worker,
            inbox,
            fallback,
            ..
        } = self;
        let before = runner.counters();
        let reloaded = runner.reload(worker.as_ref(), triggers, &mut || inbox.poll());
        if let Some(f) = fallback.as_mut() {
            if !std::sync::Arc::ptr_eq(&before, &runner.counters()) {
                f.reload(runner, &mut || inbox.poll());
            }
        }
        match reloaded {
            // Also after a failed collection dropped the watches: built now, not next tick.
            Ok(true) => self.built = true,
            Ok(false) => {}
            Err(Failure::Stopping) => {}
            Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                self.built = false;
                self.runner.failed(&f.to_string(), true);
            }
            Err(Failure::Session(why)) => {
                let why = why.to_string();
                tracing::error!("lost the DCGM session during reload: {why}; reconnecting");
                crate::model::events::engine_down(&self.runner.engine.name(), &why);
                self.abandon();
                self.runner.failed(&why, false);
            }
        }
    }

    /// Removes the watches and ends the session, within a deadline.
    fn stop_watches(&mut self) {
        self.runner.current.set(None);
        if let Some(w) = self.worker.take() {
            let done = w.call(
                self.inbox.stop_seen.unwrap_or_else(Instant::now) + STOP_DEADLINE,
                || false,
                |d: &mut Dcgm| {
                    if let Some(c) = d.collector.take() {
                        c.stop();
                    }
                    d.bind_unbind = None;
                    d.session = None;
                },
            );
            if let Err(e) = done {
                tracing::warn!("removing the watches at shutdown: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox() -> (std::sync::mpsc::Sender<Control>, Inbox) {
        let (tx, control) = std::sync::mpsc::channel();
        let inbox = Inbox {
            control,
            stopping: false,
            stop_seen: None,
            reload: Vec::new(),
        };
        (tx, inbox)
    }

    /// A step that outlasted its wait (a hung NVML try) must not hide a stop or a reload.
    #[test]
    fn a_wait_already_over_still_takes_what_arrived() {
        let past = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let (tx, mut i) = inbox();
        tx.send(Control::Reload(Trigger::Sighup)).unwrap();
        tx.send(Control::Reload(Trigger::CountersFile)).unwrap();
        tx.send(Control::Reload(Trigger::Sighup)).unwrap();
        i.wait_until(past);
        assert_eq!(i.reload, [Trigger::Sighup, Trigger::CountersFile]);
        assert!(!i.stopping);
        let (tx, mut i) = inbox();
        tx.send(Control::Stop).unwrap();
        i.wait_until(past);
        assert!(i.stopping && i.stop_seen.is_some());
    }
}
