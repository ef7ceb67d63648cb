//! One collection's steps (`Runner`: connect, build the watches, collect, attribute and
//! publish, record a failure); `run_loop` drives them. Neither owns a DCGM session: the
//! session and its watches live in a [`Worker`] thread, and every DCGM step is a job the
//! loop waits for with a deadline. What the HTTP side reads is `output::published`.
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

pub(crate) mod engines;
pub(crate) use engines::HandOff;
mod fallback;
mod run_loop;

use crate::attribution::Attribution;
use crate::collect::engines::Collected;
use crate::collect::failover::EngineGpus;
use crate::collect::nvml::NvmlCollector;
use crate::collect::{Collector, NodeError, Settings, StartError};
use crate::config::counters::Counters;
use crate::lifecycle::control::Trigger;
use crate::model::clock::{now_secs_f64, now_us};
use crate::model::Page;
use crate::output::published::Shared;
use crate::output::sink::Sink;
use crate::runtime::worker::{Current, JobError, Worker};
use dcgm_sys::{ConnectTarget, Library, Session, Status};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Why the exporter could not start collecting (or, in the loop, connect and build the
/// watches: [`Failure`] is this, classified).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The flags do not fit the node (a selector naming a GPU it lacks).
    #[error(transparent)]
    Config(NodeError),
    /// DCGM did not start the embedded engine or connect to the remote one.
    #[error(transparent)]
    Connect(dcgm_sys::Error),
    /// DCGM refused to discover the node or watch its fields.
    #[error(transparent)]
    Dcgm(#[from] dcgm_sys::Error),
    /// The source could not be used for another reason: no answer in time, no thread, no
    /// session, NVML missing.
    #[error(transparent)]
    Unavailable(Cause),
    /// A signal asked the process to stop before the start was done.
    #[error("stopped")]
    Stopped,
}

impl StartupError {
    /// DCGM itself refuses this library and this remote engine together: no retry helps.
    pub(crate) fn is_version_skew(&self) -> bool {
        matches!(
            self,
            StartupError::Connect(dcgm_sys::Error::VersionSkew { .. })
                | StartupError::Dcgm(dcgm_sys::Error::VersionSkew { .. })
        )
    }
}

impl From<JobError> for StartupError {
    fn from(e: JobError) -> StartupError {
        match e {
            JobError::Interrupted => StartupError::Stopped,
            e => StartupError::Unavailable(Cause::Job(e)),
        }
    }
}

impl From<StartupError> for Failure {
    fn from(e: StartupError) -> Failure {
        match e {
            StartupError::Config(e) => Failure::Config(e),
            StartupError::Connect(e) => Failure::Session(Cause::Dcgm(e)),
            StartupError::Dcgm(e) => classify(e),
            StartupError::Unavailable(e) => Failure::Session(e),
            StartupError::Stopped => Failure::Stopping,
        }
    }
}

/// How the exporter reaches DCGM.
#[derive(Clone, Debug)]
pub(crate) enum Engine {
    Embedded,
    Remote(ConnectTarget),
}

impl Engine {
    /// The `mode` label of `dcgm_exporter_build_info`.
    pub(crate) fn mode(&self) -> &'static str {
        match self {
            Engine::Embedded => "embedded",
            Engine::Remote(_) => "remote",
        }
    }

    /// Its name in events: the address, or `embedded`.
    pub(crate) fn name(&self) -> String {
        match self {
            Engine::Embedded => "embedded".into(),
            Engine::Remote(t) => t.to_string(),
        }
    }
}

/// What the worker thread owns: the session and the watches built on it.
#[derive(Default)]
pub(crate) struct Dcgm {
    pub(crate) session: Option<Session>,
    collector: Option<Collector>,
    /// The NVML source's collector, in place of the session and its watches
    /// (`--backend nvml`, or `auto` where libdcgm does not load).
    nvml: Option<NvmlCollector>,
    /// `--enable-gpu-bind-unbind-watch`'s watch on this session, set up when it opens.
    pub(crate) bind_unbind: Option<crate::lifecycle::watchers::bind_unbind::Watch>,
}

impl crate::lifecycle::watchers::bind_unbind::WatchSlot for Dcgm {
    fn session(&self) -> Option<Session> {
        self.session.clone()
    }

    fn watch(&mut self) -> &mut Option<crate::lifecycle::watchers::bind_unbind::Watch> {
        &mut self.bind_unbind
    }
}

/// Longest wait for connecting, discovering and watching (a large node needs seconds).
const SETUP_DEADLINE: Duration = Duration::from_secs(30);
/// The shortest deadline of a collection, for very small intervals.
const MIN_COLLECT_DEADLINE: Duration = Duration::from_secs(1);
/// How one tick failed; its text is the cause's.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// The session is unusable: abandon the worker and reconnect.
    #[error(transparent)]
    Session(Cause),
    /// Rebuild the watches on the same session next tick.
    #[error(transparent)]
    Watches(Cause),
    /// The configuration does not fit the node (a selector naming a missing GPU,
    /// `collect::StartError::Config`): like `Watches`, but at start-up it is the flag's
    /// error, not DCGM's.
    #[error(transparent)]
    Config(NodeError),
    /// Told to stop while waiting.
    #[error("stopped")]
    Stopping,
}

/// What a step of the loop ran into, as it came; its text is what the log lines, `/health`
/// and the events show.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// DCGM's answer (connecting, discovering, watching, reading).
    #[error(transparent)]
    Dcgm(dcgm_sys::Error),
    /// No answer from the worker in time, or its thread panicked.
    #[error(transparent)]
    Job(JobError),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// The NVML source's collector failed.
    #[error(transparent)]
    Nvml(crate::collect::nvml::CollectError),
    /// The configuration does not fit the node, where it costs the watches only.
    #[error(transparent)]
    Config(NodeError),
    /// The loop's own reasons: no session, workers stuck, GPUs changing while rebuilt,
    /// profiling stuck.
    #[error("{0}")]
    Other(String),
}

enum TickResult {
    Collected(Box<Collected>),
    MigChanged,
    /// A GPU lost when the watches were built is back (`Collector::lost_gpu_returned`).
    LostGpuReturned,
}

impl TickResult {
    /// Why the node's collector is rebuilt, as the log says it.
    fn change(&self) -> &'static str {
        match self {
            TickResult::MigChanged => "MIG configuration changed",
            TickResult::LostGpuReturned => "a lost GPU answers again",
            TickResult::Collected(_) => "collected",
        }
    }
}

/// Everything needed to (re)build a collector.
pub(crate) struct Runner {
    /// libdcgm; `None` when the NVML source serves instead.
    pub library: Option<Arc<Library>>,
    /// NVML, for the NVML source.
    pub nvml: Option<Arc<nvml_wrapper::Nvml>>,
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
    /// Pod / MIG / HPC attribution, merged into each page before it is rendered (shared
    /// by the loops of several host engines, whose pages are merged once).
    pub attribution: Arc<Mutex<Attribution>>,
    /// With several host engines: where this engine's loop hands its pages, in place of
    /// attributing and publishing them itself (`engines`).
    pub hand_off: Option<engines::HandOff>,
    /// `--backend auto` with a remote engine: this machine's GPUs (UUIDs) as NVML listed
    /// them at start; NVML stands in only for the engine's GPUs among them.
    pub failover_gpus: Vec<String>,
    /// The GPUs the engine's watches were last built on (see `fallback`).
    pub engine_gpus: EngineGpus,
}

impl Runner {
    /// Connects and sets up watches once, at startup, where failure is fatal.
    /// `stop` is asked while waiting: a SIGTERM during a start that can take 30 s.
    pub(crate) fn start(&self, stop: &dyn Fn() -> bool) -> Result<Worker<Dcgm>, StartupError> {
        let worker = Worker::spawn(self.backend())
            .map_err(|e| StartupError::Unavailable(Cause::Thread(e)))?;
        self.try_open(&worker, &mut || stop())?;
        self.shared.set_connected(true);
        if let Some(h) = &self.hand_off {
            h.combiner.connected(h.index);
        }
        self.current.set(Some(&worker));
        Ok(worker)
    }

    /// Records a start without DCGM (a remote engine not reachable yet): /health answers
    /// 503 with `why` until the collection loop connects.
    pub(crate) fn unreachable_at_start(&self, why: &str) {
        crate::model::events::engine_down(&self.engine.name(), why);
        self.failed(why, false);
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.settings.interval_ms)
    }

    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Opens a session in the worker and builds the watches on it.
    fn open(&self, worker: &Worker<Dcgm>, stop: &mut dyn FnMut() -> bool) -> Result<(), Failure> {
        Ok(self.try_open(worker, stop)?)
    }

    /// [`Runner::open`], with the error as it came.
    fn try_open(
        &self,
        worker: &Worker<Dcgm>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), StartupError> {
        let Some(library) = self.library.clone() else {
            return self.try_build(worker, self.counters(), stop);
        };
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
            // Before the build: what the build finds (GPUs back) follows the engine's return.
            Ok(Ok(())) => crate::model::events::engine_up(&self.engine.name()),
            Ok(Err(e)) => return Err(StartupError::Connect(e)),
            Err(e) => return Err(e.into()),
        }
        self.try_build(worker, self.counters(), stop)
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
        Ok(self.try_build(worker, counters, stop)?)
    }

    /// [`Runner::build`], with the error as it came.
    fn try_build(
        &self,
        worker: &Worker<Dcgm>,
        counters: Arc<Counters>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), StartupError> {
        let settings = self.settings.clone();
        if self.library.is_none() {
            let within = self.setup_deadline();
            return self.build_nvml_within(worker, counters, within, None, stop);
        }
        let engine_gpus = self.engine_gpus.clone();
        let built = worker.call(
            Instant::now() + self.setup_deadline(),
            stop,
            move |d: &mut Dcgm| {
                let Some(session) = d.session.clone() else {
                    return Err(StartupError::Unavailable(Cause::Other(
                        "no DCGM session".into(),
                    )));
                };
                let started = Collector::start(session, counters, settings);
                match started {
                    Ok(new) => {
                        let replaced = replace(d, new).map_err(StartupError::Dcgm);
                        reassert_bind_watch(d);
                        if let (Ok(()), Some(c)) = (&replaced, &d.collector) {
                            engine_gpus
                                .set(c.topology().gpus.iter().map(|g| g.uuid.clone()).collect());
                        }
                        replaced
                    }
                    Err(e) => {
                        // A refused watch of the new build, and the probes that find the
                        // refused fields, removed this connection's watch of the pairs
                        // they share with the watches in place: make those again.
                        if let Some(Err(e)) = d.collector.as_ref().map(Collector::reassert) {
                            tracing::warn!("restoring the watches in place: {e}");
                        }
                        reassert_bind_watch(d);
                        match e {
                            StartError::Dcgm(e) => Err(StartupError::Dcgm(e)),
                            StartError::Config(e) => Err(StartupError::Config(e.into())),
                        }
                    }
                }
            },
        );
        built.unwrap_or_else(|e| Err(e.into()))
    }

    /// Starts the NVML source's collector in the worker, in place of the one in use,
    /// waiting `within` at most; `only`: on these GPUs (UUIDs) alone.
    fn build_nvml_within(
        &self,
        worker: &Worker<Dcgm>,
        counters: Arc<Counters>,
        within: Duration,
        only: Option<Vec<String>>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), StartupError> {
        let Some(nvml) = self.nvml.clone() else {
            return Err(StartupError::Unavailable(Cause::Other(
                "NVML is not loaded".into(),
            )));
        };
        let settings = self.settings.clone();
        let built = worker.call(Instant::now() + within, stop, move |d: &mut Dcgm| {
            let mut new = NvmlCollector::start_on(nvml, counters, &settings, only.as_deref())
                .map_err(StartupError::Config)?;
            if let Some(old) = d.nvml.take() {
                new.replacing(old);
            }
            d.nvml = Some(new);
            Ok(())
        });
        built.unwrap_or_else(|e| Err(e.into()))
    }

    /// Reads every value and renders the page.
    fn collect(
        &self,
        worker: &Worker<Dcgm>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<TickResult, Failure> {
        let deadline = Instant::now() + self.interval().max(MIN_COLLECT_DEADLINE);
        let with_sinks = !self.sinks.is_empty()
            || self
                .hand_off
                .as_ref()
                .is_some_and(|h| h.combiner.wants_topology);
        let done = worker.call(deadline, stop, move |d: &mut Dcgm| {
            if let Some(n) = d.nvml.as_mut() {
                return collect_nvml(n, with_sinks);
            }
            let Some(c) = d.collector.as_mut() else {
                return Err(Failure::Watches(Cause::Other("no watches".into())));
            };
            if let Some(why) = c.take_engine_restart() {
                // Profiling stuck (collect::heal): a new session starts the engine anew.
                return Err(Failure::Session(Cause::Other(why)));
            }
            let failed = |d: &mut Dcgm, e: dcgm_sys::Error| {
                // The watches are rebuilt next tick from a fresh discovery. Removing them
                // first is only worth it while the session still answers.
                let failure = classify(e);
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
            if c.lost_gpu_returned() {
                return Ok(TickResult::LostGpuReturned);
            }
            let mut page = Page::reuse();
            if let Err(e) = c.collect(&mut page) {
                return failed(d, e);
            }
            Ok(TickResult::Collected(Box::new(Collected {
                page,
                topology: with_sinks.then(|| c.topology().clone()),
                gpus: c.gpu_count(),
                unmatched: c.unmatched().to_vec(),
                low_cardinality: c.take_info().zip(c.low_cardinality().cloned()),
                stalled: c.stalled(),
            })))
        });
        done.unwrap_or_else(|e| Err(job_failure(e)))
    }

    /// Re-reads the CSV and rebuilds the watches, as `triggers` asked; on any error the old
    /// set stays in use. `Ok(true)` when the watches were built anew.
    fn reload(
        &self,
        worker: Option<&Worker<Dcgm>>,
        triggers: &[Trigger],
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<bool, Failure> {
        let trigger: Vec<&str> = triggers.iter().map(|t| t.as_str()).collect();
        let trigger = trigger.join(",");
        let event = |outcome: Result<&str, &str>| {
            crate::model::events::reload("counters", &trigger, outcome);
        };
        let new = match self.collectors.load_for(self.settings.emulate) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::error!("reload: {e}; keeping the previous counters");
                event(Err(&e.to_string()));
                return Ok(false);
            }
        };
        let Some(worker) = worker else {
            // Used when the next connection builds its watches.
            *self.counters.write().unwrap_or_else(|p| p.into_inner()) = new;
            tracing::info!(
                "reloaded {} (DCGM's watches are made with it once DCGM answers)",
                self.collectors.describe()
            );
            event(Ok(&self.collectors.describe()));
            return Ok(false);
        };
        match self.build(worker, new.clone(), stop) {
            Ok(()) => {
                *self.counters.write().unwrap_or_else(|p| p.into_inner()) = new;
                tracing::info!("reloaded {}", self.collectors.describe());
                event(Ok(&self.collectors.describe()));
                Ok(true)
            }
            Err(f @ (Failure::Watches(_) | Failure::Config(_))) => {
                tracing::error!("reload: {f}; keeping the previous counters");
                event(Err(&f.to_string()));
                Ok(false)
            }
            Err(f) => Err(f),
        }
    }

    /// Publishes a collection; `backend` names the source that served it ("dcgm" or "nvml").
    /// With several host engines, the page goes to the combiner instead.
    fn succeeded(&self, c: Collected, took: Duration, backend: &'static str) {
        if let Some(h) = &self.hand_off {
            self.shared.set_connected(true);
            self.shared.set_error(None);
            h.combiner.offer(h.index, c, took);
            return;
        }
        self.publish_collected(c, took, backend).recycle();
    }

    /// Attributes, renders and publishes a page; hands it back as served.
    fn publish_collected(&self, c: Collected, took: Duration, backend: &'static str) -> Page {
        let Collected {
            mut page,
            topology,
            gpus,
            unmatched,
            low_cardinality,
            stalled,
        } = c;
        self.shared.observe_sampling(stalled);
        {
            let mut a = self.attribution.lock().unwrap_or_else(|p| p.into_inner());
            a.apply(&mut page);
            let mut notes = unmatched;
            notes.extend(a.notes());
            self.shared.set_notes(notes);
        }
        if let Some((info, strip)) = low_cardinality {
            strip.strip(&mut page);
            page.append(info);
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
        m.observe_page(&page);
        m.collection_duration.set(took.as_secs_f64());
        m.collections.with_label_values(&["success"]).inc();
        m.last_success.set(now_secs_f64());
        let oldest_sample_us = page.oldest_sample_us.unwrap_or_else(now_us);
        self.shared.publish(&page, oldest_sample_us);
        self.shared.set_gpus(gpus);
        if let Some(topology) = &topology {
            let published = self.shared.page();
            for s in &self.sinks {
                s.published(topology, &page, published.text());
            }
        }
        self.shared.set_last_success(Instant::now());
        self.shared.set_connected(true);
        self.shared.set_error(None);
        self.shared.set_backend(backend);
        page
    }

    /// Whether `--backend auto` can serve from NVML while DCGM cannot be used.
    fn has_fallback(&self) -> bool {
        self.library.is_some() && self.nvml.is_some()
    }

    /// The backend serving when DCGM is the configured source: "nvml" without libdcgm (also
    /// the name of the worker thread, which messages about a call that hangs name).
    fn backend(&self) -> &'static str {
        if self.library.is_some() {
            "dcgm"
        } else {
            "nvml"
        }
    }

    /// Never serve values a collection could not refresh.
    fn failed(&self, why: &str, connected: bool) {
        self.shared.withdraw();
        self.shared.observe_sampling(false);
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
        if let Some(h) = &self.hand_off {
            h.combiner.down(h.index, why);
        }
    }
}

/// One collection from the NVML source. A failure leaves the collector in place: the
/// next tick asks again.
fn collect_nvml(n: &mut NvmlCollector, with_sinks: bool) -> Result<TickResult, Failure> {
    match n.mig_changed() {
        Ok(true) => return Ok(TickResult::MigChanged),
        Ok(false) => {}
        Err(e) => return Err(Failure::Watches(Cause::Nvml(e.into()))),
    }
    if n.lost_gpu_returned() {
        return Ok(TickResult::LostGpuReturned);
    }
    let mut page = Page::reuse();
    n.collect(&mut page)
        .map_err(|e| Failure::Watches(Cause::Nvml(e)))?;
    Ok(TickResult::Collected(Box::new(Collected {
        page,
        topology: with_sinks.then(|| n.topology().clone()),
        gpus: n.gpu_count(),
        unmatched: n.unmatched().to_vec(),
        low_cardinality: n.take_info().zip(n.low_cardinality().cloned()),
        stalled: false,
    })))
}

/// Puts a newly built collector in place of the one in use. The old one's watches are
/// removed after the new ones were made (they stay in use if the new build fails), and
/// DCGM keys a watch by (entity, field, connection): that removal also removed every pair
/// the two share, so the new collector makes its watches again (`Collector::reassert`).
fn replace(d: &mut Dcgm, mut new: Collector) -> Result<(), dcgm_sys::Error> {
    let Some(mut old) = d.collector.take() else {
        d.collector = Some(new);
        return Ok(());
    };
    new.inherit(&mut old);
    old.stop();
    match new.reassert() {
        Ok(()) => {
            d.collector = Some(new);
            Ok(())
        }
        Err(e) => {
            // Neither set is fully watched now: the next tick rebuilds from scratch.
            new.stop();
            Err(e)
        }
    }
}

/// The bind/unbind watch shares DCGM's per-(entity, field, connection) watch with any
/// collector that watched its field; a rebuild may have removed it. A failure is left to the
/// watch's next poll, which drops a watch that no longer reads and sets it up again.
fn reassert_bind_watch(d: &Dcgm) {
    if let Some(Err(e)) = d.bind_unbind.as_ref().map(|w| w.reassert()) {
        tracing::debug!("restoring the bind/unbind watch: {e}");
    }
}

/// Which failures leave the session unusable.
fn classify(e: dcgm_sys::Error) -> Failure {
    match e.status() {
        // A remote engine that stopped answering is as gone as a closed one; a library
        // that was shut down answers nothing but UNINITIALIZED.
        Some(Status::ConnectionNotValid | Status::Timeout | Status::Uninitialized) => {
            Failure::Session(Cause::Dcgm(e))
        }
        _ if e.is_connection_lost() => Failure::Session(Cause::Dcgm(e)),
        _ => Failure::Watches(Cause::Dcgm(e)),
    }
}

fn job_failure(e: JobError) -> Failure {
    match e {
        JobError::Interrupted => Failure::Stopping,
        e => Failure::Session(Cause::Job(e)),
    }
}
