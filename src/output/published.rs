//! What the HTTP side reads: the last published page (every served format, rendered once
//! per collection) and until when it may be served, the exporter's health and its degraded
//! notes, the self-metrics. The collection loop writes it; scrapes never wait on it.

use crate::model::clock::{max_served_age, now_us};
use crate::model::Page;
use crate::output::exposition::Exposition;
use crate::output::selfmetrics::SelfMetrics;
use crate::runtime::supervisor::Supervisor;
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The rendered DCGM page and until when it may be served.
struct Published {
    page: Arc<Exposition>,
    /// Unix µs after which the page holds a sample too old to serve.
    expires_us: i64,
}

type NoteSource = Box<dyn Fn() -> Option<String> + Send + Sync>;

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
    /// Other parts' degraded lines, asked at each /health (the web configuration's refused
    /// reload, which the HTTP side keeps).
    note_sources: Mutex<Vec<NoteSource>>,
    pub metrics: SelfMetrics,
    interval: Duration,
    /// --health-require-gpus: unhealthy while `gpus` is 0.
    pub require_gpus: AtomicBool,
    /// GPU entities (GPUs or MIG instances) the current watches collect.
    gpus: AtomicUsize,
    /// Since when collections have found DCGM sampling none of the watched fields.
    stalled_since: Mutex<Option<Instant>>,
    /// `dcgm_exporter_dcgm_sampling_stalled`: 1 while that has lasted over two intervals.
    stalled_gauge: prometheus::IntGauge,
    /// The source that served the published page: "dcgm" or "nvml".
    backend: Mutex<&'static str>,
}

impl Shared {
    pub fn new(interval: Duration) -> Shared {
        Shared::with_openmetrics(interval, false)
    }

    pub(crate) fn with_openmetrics(interval: Duration, openmetrics: bool) -> Shared {
        let empty = Arc::new(Exposition::empty(openmetrics));
        let threads = Supervisor::global().clone();
        let metrics = SelfMetrics::new();
        metrics.register(Box::new(threads.restarts()));
        let stalled_gauge = prometheus::IntGauge::new(
            format!("{}dcgm_sampling_stalled", crate::model::naming::PREFIX),
            "1 while DCGM is connected and watched but has sampled none of the watched fields \
             for more than two collection intervals (the page then holds no DCGM value).",
        )
        .expect("a valid metric name");
        metrics.register(Box::new(stalled_gauge.clone()));
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
            note_sources: Mutex::new(Vec::new()),
            metrics,
            interval,
            require_gpus: AtomicBool::new(false),
            gpus: AtomicUsize::new(0),
            stalled_since: Mutex::new(None),
            stalled_gauge,
            backend: Mutex::new("dcgm"),
        }
    }

    /// The source that serves the pages from now on: "dcgm" or "nvml" (build_info, the
    /// backend gauge and /health say it).
    pub(crate) fn set_backend(&self, backend: &'static str) {
        *self.backend.lock().unwrap_or_else(|p| p.into_inner()) = backend;
        self.metrics.set_backend(backend);
    }

    /// The source named by the last [`Shared::set_backend`].
    pub fn backend(&self) -> &'static str {
        *self.backend.lock().unwrap_or_else(|p| p.into_inner())
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

    /// [`Shared::page`] lent to `f` with the time it was looked at (Unix µs), without a
    /// reference count changed: a scrape reads it on every core at once.
    pub(crate) fn with_page<R>(&self, f: impl FnOnce(&Arc<Exposition>, i64) -> R) -> R {
        let p = self.page.load();
        let now = now_us();
        if now > p.expires_us {
            return f(&self.empty, now);
        }
        f(&p.page, now)
    }

    /// Renders every served format of the page, once per collection.
    pub fn publish(&self, page: &Page, oldest_sample_us: i64) {
        // Saturating: the largest `-c` accepted (i64::MAX µs) must not wrap into the past.
        let age_us = i64::try_from(max_served_age(self.interval).as_micros()).unwrap_or(i64::MAX);
        let expires_us = oldest_sample_us.saturating_add(age_us);
        let previous = self.page.load();
        let page = Arc::new(Exposition::render_after(
            page,
            self.openmetrics,
            Some(&previous.page),
        ));
        self.page.store(Arc::new(Published { page, expires_us }));
    }

    /// Stops serving DCGM series (self metrics stay).
    pub(crate) fn withdraw(&self) {
        self.page.store(Arc::new(Published {
            page: self.empty.clone(),
            expires_us: 0,
        }));
    }

    pub(crate) fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::SeqCst);
        self.metrics.connected.set(i64::from(up));
    }

    pub(crate) fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Degraded parts that do not make the exporter unhealthy (a kubelet that is down, a
    /// side thread restarting).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        notes.extend(self.threads.notes());
        let sources = self.note_sources.lock().unwrap_or_else(|p| p.into_inner());
        notes.extend(sources.iter().filter_map(|s| s()));
        notes
    }

    /// Adds a degraded line that `source` keeps: shown while it answers `Some`.
    pub(crate) fn add_note_source(
        &self,
        source: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) {
        self.note_sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(source));
    }

    pub(crate) fn set_notes(&self, notes: Vec<String>) {
        *self.notes.lock().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// How many GPU entities (GPUs or MIG instances) the current watches collect.
    pub(crate) fn set_gpus(&self, n: usize) {
        self.gpus.store(n, Ordering::SeqCst);
    }

    /// What a collection found: `stalled` when DCGM sampled none of the watched fields.
    pub(crate) fn observe_sampling(&self, stalled: bool) {
        let mut since = self.stalled_since.lock().unwrap_or_else(|p| p.into_inner());
        if !stalled {
            *since = None;
        } else if since.is_none() {
            *since = Some(Instant::now());
        }
        drop(since);
        self.stalled_gauge
            .set(i64::from(self.stalled_for().is_some()));
    }

    /// How long DCGM has sampled none of the watched fields, once that is over two
    /// intervals: a connected engine answering every call, yet an empty page.
    fn stalled_for(&self) -> Option<Duration> {
        let since = (*self.stalled_since.lock().unwrap_or_else(|p| p.into_inner()))?;
        let d = since.elapsed();
        (d > self.interval * 2).then_some(d)
    }

    /// A collection succeeded just now.
    pub(crate) fn set_last_success(&self, at: Instant) {
        *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// What fails even the liveness probe: only what the user asked for
    /// (`--health-require-gpus`, upstream's opt-in: no GPU collected).
    pub fn liveness(&self) -> Result<(), Unhealthy> {
        if self.require_gpus.load(Ordering::SeqCst) && self.gpus.load(Ordering::SeqCst) == 0 {
            return Err(Unhealthy::NoGpus);
        }
        Ok(())
    }

    /// `Ok(())` while DCGM is connected and the page holds fresh values; else why not.
    pub fn health(&self) -> Result<(), Unhealthy> {
        let why = self
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !self.connected.load(Ordering::SeqCst) {
            return Err(Unhealthy::NotConnected(why));
        }
        if let Some(why) = why {
            return Err(Unhealthy::CollectionFailed(why));
        }
        self.liveness()?;
        if let Some(d) = self.stalled_for() {
            return Err(Unhealthy::Stalled(d));
        }
        let expired = now_us() > self.page.load().expires_us;
        match *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Err(Unhealthy::NoCollectionYet),
            Some(t) if expired => Err(Unhealthy::Stale(t.elapsed())),
            Some(_) => Ok(()),
        }
    }
}

/// Why `/ready` fails (and `/health` says `OK - not ready`), or with
/// `--health-require-gpus` why `/health` fails.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unhealthy {
    /// The session is down; the collection loop's last error, if it said one.
    #[error("DCGM host engine not connected: {}", .0.as_deref().unwrap_or("unknown"))]
    NotConnected(Option<String>),
    /// The loop's words for the last collection's failure.
    #[error("the last collection failed: {0}")]
    CollectionFailed(String),
    #[error("no GPU is being collected (--health-require-gpus)")]
    NoGpus,
    /// DCGM sampled none of the watched fields for this long.
    #[error(
        "DCGM has sampled none of the watched fields for {:.1}s (over two intervals): the \
         page holds no DCGM value", .0.as_secs_f64()
    )]
    Stalled(Duration),
    #[error("no successful collection yet")]
    NoCollectionYet,
    /// The page expired; the last success was this long ago.
    #[error(
        "no fresh values: the last successful collection was {:.1}s ago", .0.as_secs_f64()
    )]
    Stale(Duration),
}

#[cfg(test)]
mod tests {
    use super::{Shared, Unhealthy};
    use crate::runtime::supervisor::Supervisor;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "{what} did not happen in 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Connected, collecting, a fresh page: yet DCGM sampled none of the watched fields.
    /// Two intervals of that are an outage on /health and in the self-metric; one fresh
    /// sample ends it.
    #[test]
    fn a_stalled_engine_is_unhealthy_after_two_intervals_only() {
        let shared = Shared::new(Duration::from_millis(100));
        let collected = |stalled: bool| {
            shared.observe_sampling(stalled);
            shared.publish(
                &crate::model::Page::default(),
                crate::model::clock::now_us(),
            );
            shared.set_connected(true);
            shared.set_last_success(Instant::now());
        };
        let gauge = |s: &Shared| {
            String::from_utf8(s.metrics.encode())
                .unwrap()
                .contains("\ndcgm_exporter_dcgm_sampling_stalled 1\n")
        };
        collected(false);
        assert_eq!(shared.health(), Ok(()));
        collected(true);
        assert_eq!(shared.health(), Ok(()), "not yet two intervals");
        assert!(!gauge(&shared));
        std::thread::sleep(Duration::from_millis(250));
        collected(true);
        let e = shared.health().unwrap_err();
        assert!(
            matches!(e, Unhealthy::Stalled(d) if d >= Duration::from_millis(200)),
            "{e:?}"
        );
        assert!(gauge(&shared));
        collected(false);
        assert_eq!(shared.health(), Ok(()));
        assert!(!gauge(&shared));
    }

    /// The exporter's wiring: a thread of the process's supervisor that panics is a line
    /// of `Shared::notes` (what /health prints after `degraded: `) and a count in the
    /// self-metrics every scrape appends.
    #[test]
    fn the_exporters_health_and_self_metrics_show_a_restarted_thread() {
        let shared = Shared::new(Duration::from_secs(1));
        let (go_on, told) = mpsc::channel::<()>();
        let (lives_tx, lives) = mpsc::channel::<()>();
        let mut first = true;
        Supervisor::global()
            .spawn("t-wired", None, move |beat| {
                lives_tx.send(()).unwrap();
                if std::mem::take(&mut first) {
                    panic!("injected");
                }
                let _ = told.recv();
                beat.alive();
                Ok(())
            })
            .unwrap();
        lives.recv().unwrap();
        lives.recv().unwrap();
        let metrics = String::from_utf8(shared.metrics.encode()).unwrap();
        assert!(
            metrics.contains("dcgm_exporter_thread_restarts_total{thread=\"t-wired\"} 1"),
            "{metrics}"
        );
        assert!(
            // Pins the /health line an operator reads after `degraded: `.
            shared
                .notes()
                .iter()
                .any(|n| n == "thread t-wired restarted after it panicked: injected"),
            "{:?}",
            shared.notes()
        );
        go_on.send(()).unwrap();
        until("the line gone", || {
            !shared.notes().iter().any(|n| n.contains("t-wired"))
        });
    }
}
