//! The collection loop: owns the DCGM session, collects at the interval, publishes an
//! immutable rendered page, and reconnects to a lost remote host engine with backoff.
//! Scrapes never call DCGM; they only read the last published page.

use crate::attribution::Attribution;
use crate::collect::{Collector, Settings, StartError};
use crate::config::counters::Counters;
use crate::output::render::Page;
use crate::output::selfmetrics::SelfMetrics;
use dcgm_sys::{ConnectTarget, Library, Session};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How the exporter reaches DCGM.
#[derive(Clone, Debug)]
pub enum Engine {
    Embedded,
    Remote(ConnectTarget),
}

/// State shared between the collection thread and the HTTP server.
pub struct Shared {
    /// The last rendered DCGM page; empty while DCGM is unreachable.
    page: RwLock<Arc<Vec<u8>>>,
    connected: AtomicBool,
    last_success: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
    /// Attribution sources that are failing: shown on /health, which stays healthy.
    notes: Mutex<Vec<String>>,
    pub metrics: SelfMetrics,
    interval: Duration,
}

impl Shared {
    pub fn new(interval: Duration) -> Shared {
        Shared {
            page: RwLock::new(Arc::new(Vec::new())),
            connected: AtomicBool::new(false),
            last_success: Mutex::new(None),
            last_error: Mutex::new(None),
            notes: Mutex::new(Vec::new()),
            metrics: SelfMetrics::new(),
            interval,
        }
    }

    pub fn page(&self) -> Arc<Vec<u8>> {
        self.page.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn publish(&self, bytes: Vec<u8>) {
        *self.page.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(bytes);
    }

    fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::SeqCst);
        self.metrics.connected.set(i64::from(up));
    }

    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Degraded parts that do not make the exporter unhealthy (a kubelet that is down).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_notes(&self, notes: Vec<String>) {
        *self.notes.lock().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// `Ok(())` while DCGM is connected and the last collection is recent; else why not.
    pub fn health(&self) -> Result<(), String> {
        if !self.connected.load(Ordering::SeqCst) {
            let why = self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Err(format!(
                "DCGM host engine not connected: {}",
                why.unwrap_or_else(|| "unknown".into())
            ));
        }
        let fresh_for = (self.interval * 3).max(self.interval + Duration::from_secs(10));
        match *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(t) if t.elapsed() <= fresh_for => Ok(()),
            Some(t) => Err(format!(
                "last successful collection was {:.1}s ago",
                t.elapsed().as_secs_f64()
            )),
            None => Err("no successful collection yet".into()),
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

/// Everything needed to (re)build a collector.
pub struct Runner {
    pub library: Arc<Library>,
    pub engine: Engine,
    /// Where the counters come from (`-f` file or `-m` ConfigMap), re-read on a reload.
    pub collectors: crate::config::configmap::CountersSource,
    pub counters: RwLock<Arc<Counters>>,
    pub settings: Settings,
    pub shared: Arc<Shared>,
    /// Pod / MIG / HPC attribution, merged into each page before it is rendered.
    pub attribution: Mutex<Attribution>,
}

impl Runner {
    /// Connects and sets up watches once. Used at startup, where failure is fatal.
    pub fn start(&self) -> Result<Collector, StartError> {
        let session = match &self.engine {
            Engine::Embedded => Session::embedded(self.library.clone())?,
            Engine::Remote(t) => Session::connect(self.library.clone(), t, 5000)?,
        };
        Collector::start(session, self.counters(), self.settings.clone())
    }

    fn counters(&self) -> Arc<Counters> {
        self.counters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads the CSV and rebuilds the watches; on any error the old set stays in use.
    fn reload(&self, collector: &mut Option<Collector>) {
        let new = match self.collectors.load() {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::error!("reload: {e}; keeping the previous counters");
                return;
            }
        };
        if let Some(c) = collector.as_mut() {
            match Collector::start(c.session().clone(), new.clone(), self.settings.clone()) {
                Ok(fresh) => std::mem::replace(c, fresh).stop(),
                Err(e) => {
                    tracing::error!("reload: {e}; keeping the previous counters");
                    return;
                }
            }
        }
        *self.counters.write().unwrap_or_else(|p| p.into_inner()) = new;
        tracing::info!("reloaded {}", self.collectors.describe());
    }

    /// Runs until told to stop (or the channel closes); returns the live collector so the
    /// caller can remove its watches.
    pub fn run(
        &self,
        mut collector: Option<Collector>,
        control: Receiver<Control>,
    ) -> Option<Collector> {
        let interval = Duration::from_millis(self.settings.interval_ms);
        let mut backoff = Duration::from_millis(500);
        loop {
            let started = Instant::now();
            let wait = match collector.as_mut() {
                Some(c) => match self.tick(c) {
                    Ok(()) => interval,
                    // A remote engine that stopped answering is as gone as a closed one.
                    Err(e)
                        if e.is_connection_lost()
                            || matches!(self.engine, Engine::Remote(_))
                                && e.status() == Some(dcgm_sys::Status::Timeout) =>
                    {
                        tracing::error!("lost the DCGM host engine: {e}; reconnecting");
                        self.outage(&e.to_string());
                        collector = None;
                        Duration::ZERO
                    }
                    Err(e) => {
                        tracing::warn!("collection failed: {e}");
                        self.shared
                            .metrics
                            .collections
                            .with_label_values(&["error"])
                            .inc();
                        interval
                    }
                },
                None => match self.start() {
                    Ok(c) => {
                        tracing::info!("reconnected to the DCGM host engine; watches recreated");
                        self.shared.metrics.reconnects.inc();
                        backoff = Duration::from_millis(500);
                        collector = Some(c);
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!("reconnect failed: {e}; retrying in {:?}", backoff);
                        self.outage(&e.to_string());
                        let b = backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                        b
                    }
                },
            };
            let sleep = wait.saturating_sub(started.elapsed());
            match control.recv_timeout(sleep) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(Control::Reload) => self.reload(&mut collector),
                Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return collector,
            }
        }
    }

    /// Never serve stale values: an outage empties the page until a collection succeeds.
    fn outage(&self, why: &str) {
        self.shared.publish(Vec::new());
        self.shared.set_connected(false);
        self.shared.set_error(Some(why.to_string()));
        self.shared
            .metrics
            .collections
            .with_label_values(&["error"])
            .inc();
    }

    fn tick(&self, c: &mut Collector) -> dcgm_sys::Result<()> {
        let t0 = Instant::now();
        if c.mig_changed()? {
            tracing::info!("MIG configuration changed; rebuilding watches");
            let session = c.session().clone();
            match Collector::start(session, self.counters(), self.settings.clone()) {
                Ok(new) => {
                    let old = std::mem::replace(c, new);
                    old.stop();
                }
                Err(StartError::Dcgm(e)) => return Err(e),
                Err(StartError::Config(e)) => tracing::error!("after MIG change: {e}"),
            }
        }
        self.attribution
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .begin();
        let mut page = Page::default();
        c.collect(&mut page)?;
        {
            let mut a = self.attribution.lock().unwrap_or_else(|p| p.into_inner());
            a.apply(&mut page);
            self.shared.set_notes(a.notes());
        }
        let m = &self.shared.metrics;
        for (reason, n) in &page.dropped {
            m.dropped.with_label_values(&[reason.as_str()]).inc_by(*n);
        }
        m.series.set(page.series_count() as i64);
        let bytes = page.encode();
        m.collection_duration.set(t0.elapsed().as_secs_f64());
        m.collections.with_label_values(&["success"]).inc();
        m.last_success.set(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        );
        self.shared.publish(bytes);
        *self
            .shared
            .last_success
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.shared.set_connected(true);
        self.shared.set_error(None);
        Ok(())
    }

    pub fn mark_started(&self) {
        self.shared.set_connected(true);
    }
}
