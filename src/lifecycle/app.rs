//! The collection loop. It owns no DCGM session itself: the session and its watches live
//! in a [`Worker`] thread, and every DCGM step is a job the loop waits for with a deadline.
//!
//! One tick: (re)connect if there is no worker, (re)build the watches if there are none,
//! collect, publish. A step that fails withdraws the DCGM series at once (self metrics stay)
//! and is counted; what happens next depends on how it failed:
//! * no answer before the deadline, a lost connection, a shut-down library, a panic:
//!   the worker and its session are abandoned and the next tick connects afresh;
//! * any other DCGM or configuration error: the watches are dropped and the next tick
//!   rebuilds them from a fresh discovery on the same session.
//!
//! Scrapes never call DCGM; they read the last published page, which also stops being
//! served once its oldest sample is too old (`collect::freshness`).

use crate::attribution::Attribution;
use crate::collect::freshness::max_served_age;
use crate::collect::{now_us, Collector, Settings, StartError};
use crate::config::counters::Counters;
use crate::lifecycle::supervisor::Supervisor;
use crate::lifecycle::worker::{Abandoned, Current, JobError, Worker};
use crate::output::exposition::Exposition;
use crate::output::render::Page;
use crate::output::selfmetrics::SelfMetrics;
use crate::output::sink::Sink;
use arc_swap::ArcSwap;
use dcgm_sys::{ConnectTarget, Library, Session, Status};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Why the exporter could not start collecting.
#[derive(Debug)]
pub enum StartupError {
    /// The flags do not fit the node (a selector naming a GPU it lacks).
    Config(String),
    /// DCGM could not be started, reached or watched.
    Dcgm(String),
}

/// How the exporter reaches DCGM.
#[derive(Clone, Debug)]
pub enum Engine {
    Embedded,
    Remote(ConnectTarget),
}

/// The rendered DCGM page and until when it may be served.
struct Published {
    page: Arc<Exposition>,
    /// Unix µs after which the page holds a sample too old to serve.
    expires_us: i64,
}

/// State shared between the collection thread and the HTTP server.
pub struct Shared {
    /// Swapped whole by the collection thread; a scrape takes a reference without a lock.
    page: ArcSwap<Published>,
    /// What is served while there is no fresh page.
    empty: Arc<Exposition>,
    /// Whether pages are also rendered as OpenMetrics (`--web-enable-openmetrics`).
    openmetrics: bool,
    connected: AtomicBool,
    /// Why the last collection failed; `None` after a success.
    last_error: Mutex<Option<String>>,
    last_success: Mutex<Option<Instant>>,
    /// Attribution sources that are failing: shown on /health, which stays healthy.
    notes: Mutex<Vec<String>>,
    /// The side threads; those down or stuck are shown on /health too.
    pub threads: Supervisor,
    pub metrics: SelfMetrics,
    interval: Duration,
    /// --health-require-gpus: unhealthy while `gpus` is 0.
    pub require_gpus: AtomicBool,
    /// GPU entities (GPUs or MIG instances) the current watches collect.
    gpus: AtomicUsize,
}

impl Shared {
    pub fn new(interval: Duration) -> Shared {
        Shared::with_openmetrics(interval, false)
    }

    pub fn with_openmetrics(interval: Duration, openmetrics: bool) -> Shared {
        let empty = Arc::new(Exposition::empty(openmetrics));
        let threads = Supervisor::global().clone();
        let metrics = SelfMetrics::new();
        metrics.register(Box::new(threads.restarts()));
        Shared {
            page: ArcSwap::from_pointee(Published {
                page: empty.clone(),
                expires_us: 0,
            }),
            empty,
            openmetrics,
            connected: AtomicBool::new(false),
            last_error: Mutex::new(None),
            last_success: Mutex::new(None),
            notes: Mutex::new(Vec::new()),
            threads,
            metrics,
            interval,
            require_gpus: AtomicBool::new(false),
            gpus: AtomicUsize::new(0),
        }
    }

    /// The DCGM series to serve: the last page while its samples are fresh enough, else
    /// nothing.
    pub fn page(&self) -> Arc<Exposition> {
        let p = self.page.load();
        if now_us() > p.expires_us {
            return self.empty.clone();
        }
        p.page.clone()
    }

    /// Renders every served format of the page, once per collection.
    fn publish(&self, families: &[prometheus::proto::MetricFamily], oldest_sample_us: i64) {
        let expires_us =
            oldest_sample_us.saturating_add(max_served_age(self.interval).as_micros() as i64);
        let page = Arc::new(Exposition::render(families, self.openmetrics));
        self.page.store(Arc::new(Published { page, expires_us }));
    }

    /// Stops serving DCGM series (self metrics stay).
    fn withdraw(&self) {
        self.page.store(Arc::new(Published {
            page: self.empty.clone(),
            expires_us: 0,
        }));
    }

    fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::SeqCst);
        self.metrics.connected.set(i64::from(up));
    }

    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Degraded parts that do not make the exporter unhealthy (a kubelet that is down, a
    /// side thread restarting).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        notes.extend(self.threads.notes());
        notes
    }

    fn set_notes(&self, notes: Vec<String>) {
        *self.notes.lock().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// `Ok(())` while DCGM is connected and the page holds fresh values; else why not.
    pub fn health(&self) -> Result<(), String> {
        let why = self
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !self.connected.load(Ordering::SeqCst) {
            return Err(format!(
                "DCGM host engine not connected: {}",
                why.unwrap_or_else(|| "unknown".into())
            ));
        }
        if let Some(why) = why {
            return Err(format!("the last collection failed: {why}"));
        }
        if self.require_gpus.load(Ordering::SeqCst) && self.gpus.load(Ordering::SeqCst) == 0 {
            return Err("no GPU is being collected (--health-require-gpus)".into());
        }
        let expired = now_us() > self.page.load().expires_us;
        match *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Err("no successful collection yet".into()),
            Some(t) if expired => Err(format!(
                "no fresh values: the last successful collection was {:.1}s ago",
                t.elapsed().as_secs_f64()
            )),
            Some(_) => Ok(()),
        }
    }
}

/// Messages to the collection thread.
pub enum Control {
    /// Remove the watches and return.
    Stop,
    /// SIGHUP: re-read the counters CSV and rebuild the watches, keeping the HTTP server
    /// and the DCGM connection (dcgm-exporter's hot reload).
    Reload,
}

/// What the worker thread owns: the session and the watches built on it.
#[derive(Default)]
pub struct Dcgm {
    pub(crate) session: Option<Session>,
    collector: Option<Collector>,
    /// `--enable-gpu-bind-unbind-watch`'s watch on this session, set up when it opens.
    pub(crate) bind_unbind: Option<crate::lifecycle::watchers::bind_unbind::Watch>,
}

/// Longest wait for connecting, discovering and watching (a large node needs seconds).
const SETUP_DEADLINE: Duration = Duration::from_secs(30);
/// The shortest deadline of a collection, for very small intervals.
const MIN_COLLECT_DEADLINE: Duration = Duration::from_secs(1);
/// Abandoned workers still stuck in a DCGM call beyond which no new remote session is
/// opened (each holds a thread and a connection until its call returns).
const MAX_STUCK: usize = 4;
/// How long the watches may take to be removed at shutdown.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// How one tick failed.
enum Failure {
    /// The session is unusable: abandon the worker and reconnect.
    Session(String),
    /// Rebuild the watches on the same session next tick.
    Watches(String),
    /// The configuration does not fit the node (a selector naming a missing GPU): like
    /// `Watches`, but at start-up it is the flag's error, not DCGM's.
    Config(String),
    /// Told to stop while waiting.
    Stopping,
}

/// A finished collection, rendered.
/// What one collection job hands back to the loop: the page as DCGM filled it (attribution
/// and rendering happen on the loop's thread, outside the DCGM deadline).
struct Collected {
    page: Page,
    /// The node the page describes, for the sinks (when any).
    topology: Option<crate::collect::topology::Topology>,
    gpus: usize,
    /// Selections that match no entity: degraded notes on /health.
    unmatched: Vec<String>,
}

enum TickResult {
    Collected(Box<Collected>),
    MigChanged,
}

/// Everything needed to (re)build a collector.
pub struct Runner {
    pub library: Arc<Library>,
    pub engine: Engine,
    /// Where the counters come from (`-f` file or `-m` ConfigMap), re-read on a reload.
    pub collectors: crate::config::configmap::CountersSource,
    pub counters: RwLock<Arc<Counters>>,
    pub settings: Settings,
    pub shared: Arc<Shared>,
    /// The worker in use, for the bind/unbind watch's jobs; kept up to date by the loop.
    pub current: Current<Dcgm>,
    /// `--enable-gpu-bind-unbind-watch`'s poll interval: its watch is set up on each new
    /// session before the node is discovered, so no event falls between the two.
    pub bind_unbind: Option<Duration>,
    /// Where each published page also goes (textfile, dumps); see `output::sink`.
    pub sinks: Vec<Box<dyn Sink>>,
    /// Pod / MIG / HPC attribution, merged into each page before it is rendered.
    pub attribution: Mutex<Attribution>,
}

impl Runner {
    /// Connects and sets up watches once, at startup, where failure is fatal.
    pub fn start(&self) -> Result<Worker<Dcgm>, StartupError> {
        let worker = Worker::spawn("dcgm")
            .map_err(|e| StartupError::Dcgm(format!("cannot start a thread: {e}")))?;
        match self.open(&worker, &mut || false) {
            Ok(()) => {
                self.shared.set_connected(true);
                self.current.set(Some(&worker));
                Ok(worker)
            }
            Err(Failure::Config(e)) => Err(StartupError::Config(e)),
            Err(Failure::Session(e) | Failure::Watches(e)) => Err(StartupError::Dcgm(e)),
            Err(Failure::Stopping) => Err(StartupError::Dcgm("interrupted".into())),
        }
    }

    /// Records a start without DCGM (a remote engine not reachable yet): /health answers
    /// 503 with `why` until the collection loop connects.
    pub fn unreachable_at_start(&self, why: &str) {
        self.failed(why, false);
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.settings.interval_ms)
    }

    fn counters(&self) -> Arc<Counters> {
        self.counters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Opens a session in the worker and builds the watches on it.
    fn open(&self, worker: &Worker<Dcgm>, stop: &mut dyn FnMut() -> bool) -> Result<(), Failure> {
        let library = self.library.clone();
        let engine = self.engine.clone();
        let setup = self.setup_deadline();
        let bind_unbind = self.bind_unbind;
        let opened = worker.call(Instant::now() + setup, &mut *stop, move |d: &mut Dcgm| {
            let session = match &engine {
                Engine::Embedded => Session::embedded(library),
                Engine::Remote(t) => Session::connect(library, t, 5000),
            }?;
            d.session = Some(session);
            if let Some(interval) = bind_unbind {
                // A failure is the watch thread's to report; its next poll tries again.
                let _ = crate::lifecycle::watchers::bind_unbind::poll_in(d, interval);
            }
            Ok::<(), dcgm_sys::Error>(())
        });
        match opened {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Failure::Session(e.to_string())),
            Err(e) => return Err(job_failure(e)),
        }
        self.build(worker, self.counters(), stop)
    }

    fn setup_deadline(&self) -> Duration {
        SETUP_DEADLINE.max(self.interval())
    }

    /// Discovers the node and (re)creates every watch with `counters`; the watches in
    /// place stay in use if that fails.
    fn build(
        &self,
        worker: &Worker<Dcgm>,
        counters: Arc<Counters>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), Failure> {
        let settings = self.settings.clone();
        let built = worker.call(
            Instant::now() + self.setup_deadline(),
            stop,
            move |d: &mut Dcgm| {
                let Some(session) = d.session.clone() else {
                    return Err(Failure::Session("no DCGM session".into()));
                };
                match Collector::start(session, counters, settings) {
                    Ok(new) => {
                        if let Some(old) = d.collector.replace(new) {
                            old.stop();
                        }
                        Ok(())
                    }
                    Err(StartError::Dcgm(e)) => Err(classify(&e)),
                    Err(StartError::Config(e)) => Err(Failure::Config(e)),
                }
            },
        );
        built.unwrap_or_else(|e| Err(job_failure(e)))
    }

    /// Reads every value and renders the page.
    fn collect(
        &self,
        worker: &Worker<Dcgm>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<TickResult, Failure> {
        let deadline = Instant::now() + self.interval().max(MIN_COLLECT_DEADLINE);
        let with_sinks = !self.sinks.is_empty();
        let done = worker.call(deadline, stop, move |d: &mut Dcgm| {
            let Some(c) = d.collector.as_mut() else {
                return Err(Failure::Watches("no watches".into()));
            };
            let failed = |d: &mut Dcgm, e: dcgm_sys::Error| {
                // The watches are rebuilt next tick from a fresh discovery. Removing them
                // first is only worth it while the session still answers.
                let failure = classify(&e);
                match d.collector.take() {
                    Some(c) if matches!(failure, Failure::Watches(_) | Failure::Config(_)) => {
                        c.stop()
                    }
                    _ => {}
                }
                Err(failure)
            };
            match c.mig_changed() {
                Ok(true) => return Ok(TickResult::MigChanged),
                Ok(false) => {}
                Err(e) => return failed(d, e),
            }
            let mut page = Page::default();
            if let Err(e) = c.collect(&mut page) {
                return failed(d, e);
            }
            Ok(TickResult::Collected(Box::new(Collected {
                page,
                topology: with_sinks.then(|| c.topology().clone()),
                gpus: c.gpu_count(),
                unmatched: c.unmatched().to_vec(),
            })))
        });
        done.unwrap_or_else(|e| Err(job_failure(e)))
    }

    /// Runs until told to stop (or the channel closes), then removes the watches.
    /// Without a worker (a remote engine unreachable at start) the first tick connects,
    /// retried with backoff like a connection lost later.
    pub fn run(&self, worker: Option<Worker<Dcgm>>, control: Receiver<Control>) {
        Loop {
            runner: self,
            built: worker.is_some(),
            worker,
            abandoned: Vec::new(),
            inbox: Inbox {
                control,
                stopping: false,
                reload: false,
            },
            backoff: self.first_backoff(),
        }
        .run();
    }

    fn first_backoff(&self) -> Duration {
        Duration::from_millis(500).min(self.interval())
    }

    /// Re-reads the CSV and rebuilds the watches; on any error the old set stays in use.
    fn reload(
        &self,
        worker: Option<&Worker<Dcgm>>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), Failure> {
        let new = match self.collectors.load_for(self.settings.emulate) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::error!("reload: {e}; keeping the previous counters");
                return Ok(());
            }
        };
        let Some(worker) = worker else {
            // Used when the next connection builds its watches.
            *self.counters.write().unwrap_or_else(|p| p.into_inner()) = new;
            return Ok(());
        };
        match self.build(worker, new.clone(), stop) {
            Ok(()) => {
                *self.counters.write().unwrap_or_else(|p| p.into_inner()) = new;
                tracing::info!("reloaded {}", self.collectors.describe());
                Ok(())
            }
            Err(Failure::Watches(e) | Failure::Config(e)) => {
                tracing::error!("reload: {e}; keeping the previous counters");
                Ok(())
            }
            Err(f) => Err(f),
        }
    }

    fn succeeded(&self, c: Collected, took: Duration) {
        let Collected {
            mut page,
            topology,
            gpus,
            unmatched,
        } = c;
        {
            let mut a = self.attribution.lock().unwrap_or_else(|p| p.into_inner());
            a.apply(&mut page);
            let mut notes = unmatched;
            notes.extend(a.notes());
            self.shared.set_notes(notes);
        }
        let m = &self.shared.metrics;
        for (reason, n) in &page.dropped {
            m.dropped.with_label_values(&[reason.as_str()]).inc_by(*n);
        }
        for ((source, reason), n) in &page.failures {
            m.collection_errors
                .with_label_values(&[source, reason])
                .inc_by(*n);
        }
        m.series.set(page.series_count() as i64);
        m.collection_duration.set(took.as_secs_f64());
        m.collections.with_label_values(&["success"]).inc();
        m.last_success.set(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        );
        let oldest_sample_us = page.oldest_sample_us.unwrap_or_else(now_us);
        let families = page.into_families();
        self.shared.publish(&families, oldest_sample_us);
        self.shared.gpus.store(gpus, Ordering::SeqCst);
        if let Some(topology) = &topology {
            let published = self.shared.page();
            for s in &self.sinks {
                s.published(topology, &families, published.text());
            }
        }
        *self
            .shared
            .last_success
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.shared.set_connected(true);
        self.shared.set_error(None);
    }

    /// Never serve values a collection could not refresh.
    fn failed(&self, why: &str, connected: bool) {
        self.shared.withdraw();
        for s in &self.sinks {
            s.outage();
        }
        self.shared.set_connected(connected);
        self.shared.set_error(Some(why.to_string()));
        self.shared
            .metrics
            .collections
            .with_label_values(&["error"])
            .inc();
    }
}

/// Which failures leave the session unusable.
fn classify(e: &dcgm_sys::Error) -> Failure {
    match e.status() {
        // A remote engine that stopped answering is as gone as a closed one; a library
        // that was shut down answers nothing but UNINITIALIZED.
        Some(Status::ConnectionNotValid | Status::Timeout | Status::Uninitialized) => {
            Failure::Session(e.to_string())
        }
        _ if e.is_connection_lost() => Failure::Session(e.to_string()),
        _ => Failure::Watches(e.to_string()),
    }
}

fn job_failure(e: JobError) -> Failure {
    match e {
        JobError::Interrupted => Failure::Stopping,
        e => Failure::Session(e.to_string()),
    }
}

/// Control messages as they arrive during a job or between ticks.
struct Inbox {
    control: Receiver<Control>,
    stopping: bool,
    /// A SIGHUP arrived and is not handled yet.
    reload: bool,
}

impl Inbox {
    fn take(&mut self, m: Result<Control, ()>) {
        match m {
            Ok(Control::Reload) => self.reload = true,
            Ok(Control::Stop) | Err(()) => self.stopping = true,
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
        while !self.stopping && !self.reload {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
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
}

impl Loop<'_> {
    fn run(&mut self) {
        let interval = self.runner.interval();
        loop {
            let started = Instant::now();
            let wait = match self.tick() {
                Ok(()) => interval,
                Err(Failure::Stopping) => break,
                Err(Failure::Watches(why) | Failure::Config(why)) => {
                    tracing::warn!("collection failed: {why}; rebuilding the watches");
                    self.built = false;
                    self.runner.failed(&why, true);
                    interval
                }
                Err(Failure::Session(why)) if self.worker.is_some() => {
                    tracing::error!("lost the DCGM session: {why}; reconnecting");
                    self.abandon();
                    self.runner.failed(&why, false);
                    Duration::ZERO
                }
                Err(Failure::Session(why)) => {
                    tracing::warn!("reconnect failed: {why}; retrying in {:?}", self.backoff);
                    self.runner.failed(&why, false);
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
                if !std::mem::take(&mut self.inbox.reload) {
                    break;
                }
                self.reload();
            }
        }
        self.stop_watches();
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
            ..
        } = self;
        let Some(worker) = worker.as_ref() else {
            return Err(Failure::Session("no DCGM session".into()));
        };
        let mut stop = || inbox.poll();
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
            TickResult::MigChanged => {
                tracing::info!("MIG configuration changed; rebuilding watches");
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
                    TickResult::MigChanged => {
                        return Err(Failure::Watches(
                            "the MIG configuration changed again while rebuilding".into(),
                        ))
                    }
                }
            }
        };
        runner.succeeded(*collected, t0.elapsed());
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
            return Err(Failure::Session(format!(
                "waiting for {} abandoned DCGM session(s) stuck in a call to return",
                self.abandoned.len()
            )));
        }
        let worker = Worker::spawn("dcgm")
            .map_err(|e| Failure::Session(format!("cannot start a thread: {e}")))?;
        let Loop { runner, inbox, .. } = self;
        match runner.open(&worker, &mut || inbox.poll()) {
            Ok(()) => {
                match &self.runner.engine {
                    Engine::Remote(t) => tracing::info!("connected to the DCGM host engine at {t}"),
                    Engine::Embedded => tracing::info!("started the embedded DCGM host engine"),
                }
                self.runner.shared.metrics.reconnects.inc();
                self.runner.shared.set_connected(true);
                self.backoff = self.runner.first_backoff();
                self.runner.current.set(Some(&worker));
                self.worker = Some(worker);
                self.built = true;
                Ok(())
            }
            // The session is up; the watches are rebuilt next tick.
            Err(Failure::Watches(e) | Failure::Config(e)) => {
                self.runner.current.set(Some(&worker));
                self.worker = Some(worker);
                self.built = false;
                Err(Failure::Watches(e))
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

    fn reload(&mut self) {
        let Loop {
            runner,
            worker,
            inbox,
            ..
        } = self;
        match runner.reload(worker.as_ref(), &mut || inbox.poll()) {
            Ok(()) => {}
            Err(Failure::Stopping) => {}
            Err(Failure::Watches(why) | Failure::Config(why)) => {
                self.built = false;
                self.runner.failed(&why, true);
            }
            Err(Failure::Session(why)) => {
                tracing::error!("lost the DCGM session during reload: {why}; reconnecting");
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
                Instant::now() + STOP_DEADLINE,
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
