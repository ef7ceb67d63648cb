//! Several host engines in one exporter (`-r a:5555,b:5555`, `sources.dcgm.hostEngines`):
//! the threads. Each engine keeps the one-engine loop (`Runner::run` on a thread of its
//! own: its session, worker, reconnect back-off, abandoned stuck workers, rebuilds,
//! freshness), but hands its collected page to the [`Combiner`] instead of publishing it.
//! The combiner waits for every live engine's page of this interval (one and a half
//! intervals at most: `collect::engines::Rounds` says when a round is complete), merges
//! them into one page with the engine label on every series (`collect::engines::merge`),
//! and attributes, renders and publishes that page once
//! (`Runner::publish_collected` of the main runner, which owns the attribution stage, the
//! served state and the sinks). An engine that fails contributes nothing: its series are
//! withdrawn from the served page at once, the others keep serving.

use super::{Dcgm, Runner};
use crate::collect::engines::{self, Collected, RemoteEngine, Round, Rounds};
use crate::lifecycle::control::Control;
use crate::model::Page;
use crate::runtime::worker::Worker;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use crate::model::ENGINE_LABEL;

/// Where an engine's loop hands its pages.
pub(crate) struct HandOff {
    pub combiner: Arc<Combiner>,
    pub index: usize,
}

struct State {
    rounds: Rounds,
    stopping: bool,
}

/// The engines' self-metrics were refused (their names and labels are fixed: a bug).
#[derive(Debug, thiserror::Error)]
#[error("engine self-metrics: {0}")]
pub struct MetricsError(#[source] prometheus::Error);

/// The pages of every engine, joined into one per interval.
pub(crate) struct Combiner {
    engines: Vec<RemoteEngine>,
    /// The sinks need the node's topology with each page.
    pub wants_topology: bool,
    interval: Duration,
    state: Mutex<State>,
    changed: Condvar,
    /// `dcgm_exporter_engine_up{engine}`.
    up: prometheus::IntGaugeVec,
    /// `dcgm_exporter_engine_reconnects_total{engine}`.
    reconnects: prometheus::IntCounterVec,
    /// `dcgm_exporter_reconnects_total`: every engine's reconnects, summed.
    all_reconnects: prometheus::IntCounter,
    /// `dcgm_exporter_engine_collections_total{engine,status}`.
    collections: prometheus::IntCounterVec,
}

impl Combiner {
    pub(crate) fn new(
        engines: Vec<RemoteEngine>,
        interval: Duration,
        metrics: &crate::output::selfmetrics::SelfMetrics,
        wants_topology: bool,
    ) -> Result<Combiner, MetricsError> {
        let prefix = crate::model::naming::PREFIX;
        let opts = |n: &str, h: &str| prometheus::Opts::new(format!("{prefix}{n}"), h);
        let up = prometheus::IntGaugeVec::new(
            opts(
                "engine_up",
                "1 while this host engine's last collection succeeded (its series are served).",
            ),
            &[ENGINE_LABEL],
        )
        .map_err(MetricsError)?;
        let reconnects = prometheus::IntCounterVec::new(
            opts(
                "engine_reconnects_total",
                "Sessions opened to this host engine after the first.",
            ),
            &[ENGINE_LABEL],
        )
        .map_err(MetricsError)?;
        let collections = prometheus::IntCounterVec::new(
            opts(
                "engine_collections_total",
                "Collections from this host engine by outcome.",
            ),
            &[ENGINE_LABEL, "status"],
        )
        .map_err(MetricsError)?;
        for e in &engines {
            up.with_label_values(&[&e.label]).set(0);
            reconnects.with_label_values(&[&e.label]);
            for status in ["success", "error"] {
                collections.with_label_values(&[&e.label, status]);
            }
        }
        metrics.register(Box::new(up.clone()));
        metrics.register(Box::new(reconnects.clone()));
        metrics.register(Box::new(collections.clone()));
        Ok(Combiner {
            state: Mutex::new(State {
                rounds: Rounds::new(engines.len()),
                stopping: false,
            }),
            engines,
            wants_topology,
            interval,
            changed: Condvar::new(),
            up,
            reconnects,
            all_reconnects: metrics.reconnects.clone(),
            collections,
        })
    }

    pub(crate) fn engines(&self) -> &[RemoteEngine] {
        &self.engines
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Engine `i` collected `c`; an older page not yet merged is replaced.
    pub(super) fn offer(&self, i: usize, c: Collected, took: Duration) {
        let label = &self.engines[i].label;
        self.up.with_label_values(&[label]).set(1);
        self.collections
            .with_label_values(&[label, "success"])
            .inc();
        let mut st = self.lock();
        if st.rounds.offer(i, c, took) {
            // The engine loops' own lines do not say which engine they are.
            let e = &self.engines[i];
            tracing::info!("host engine {} ({}) serves again", e.label, e.target);
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Engine `i` failed (`why`): its series leave the served page now.
    pub(super) fn down(&self, i: usize, why: &str) {
        let label = &self.engines[i].label;
        self.up.with_label_values(&[label]).set(0);
        self.collections.with_label_values(&[label, "error"]).inc();
        let mut st = self.lock();
        if st.rounds.down(i, why) {
            let e = &self.engines[i];
            tracing::warn!(
                "host engine {} ({}) is down: {why}; its series are withdrawn, the other engines' served",
                e.label,
                e.target
            );
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Engine `i` opened a session (counted from the second on).
    pub(super) fn connected(&self, i: usize) {
        if !self.lock().rounds.connected(i) {
            return;
        }
        self.reconnects
            .with_label_values(&[&self.engines[i].label])
            .inc();
        self.all_reconnects.inc();
    }

    fn stop(&self) {
        self.lock().stopping = true;
        self.changed.notify_all();
    }

    /// Waits for a page or a withdrawal, then for the other live engines' pages of this
    /// interval (one and a half intervals at most). `None` when stopping.
    fn next_round(&self) -> Option<MutexGuard<'_, State>> {
        let st = self.lock();
        let mut st = self
            .changed
            .wait_while(st, |s| !s.stopping && !s.rounds.anything())
            .unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + engines::round_wait(self.interval);
        while !st.stopping && st.rounds.any_fresh() && !st.rounds.all_up_fresh() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        (!st.stopping).then_some(st)
    }
}

/// An engine loop that panicked ends the combiner, and so the collection thread and the
/// process, as the one-engine loop's panic does: never a page that silently lacks an engine.
struct EndsAllOnPanic(Arc<Combiner>);

impl Drop for EndsAllOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("a host engine's collection loop panicked");
            self.0.stop();
        }
    }
}

/// Runs every engine's loop and the combiner until told to stop.
pub(crate) fn run(
    main: &Runner,
    engines: impl Iterator<Item = (Arc<Runner>, Option<Worker<Dcgm>>)>,
    control: Receiver<Control>,
) {
    let engines: Vec<_> = engines.collect();
    let Some(combiner) = engines
        .first()
        .and_then(|(r, _)| r.hand_off.as_ref())
        .map(|h| h.combiner.clone())
    else {
        return;
    };
    let mut inboxes: Vec<Sender<Control>> = Vec::new();
    let mut threads = Vec::new();
    for (i, (r, worker)) in engines.into_iter().enumerate() {
        let (tx, rx) = std::sync::mpsc::channel();
        inboxes.push(tx);
        let ends = EndsAllOnPanic(combiner.clone());
        let label: Arc<str> = combiner.engines[i].label.as_str().into();
        let spawned = std::thread::Builder::new()
            .name(format!("engine-{i}"))
            .spawn(move || {
                crate::logging::set_thread_engine(Some(label));
                let _ends = ends;
                r.run(worker, rx)
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => tracing::error!("cannot start the thread of host engine {i}: {e}"),
        }
    }
    let stops = inboxes.clone();
    let forward = combiner.clone();
    // Control messages reach every engine's loop; a stop also ends the combiner.
    let forwarder = std::thread::Builder::new()
        .name("engines-control".into())
        .spawn(move || {
            while let Ok(m) = control.recv() {
                let stop = matches!(m, Control::Stop);
                for tx in &inboxes {
                    let _ = tx.send(m);
                }
                if stop {
                    break;
                }
            }
            drop(inboxes);
            forward.stop();
        });
    if let Err(e) = &forwarder {
        tracing::error!("cannot start the engines' control thread: {e}");
        combiner.stop();
    }
    let mut last: Option<Page> = None;
    while let Some(st) = combiner.next_round() {
        last = publish_round(main, &combiner, st, last);
    }
    // Also when the combiner ended for a panicked loop rather than a stop. The forwarder
    // is not waited for: it ends with the control channel.
    for tx in &stops {
        let _ = tx.send(Control::Stop);
    }
    for t in threads {
        let _ = t.join();
    }
    drop(forwarder);
}

/// Publishes this round's pages merged; without any, removes the withdrawn engines'
/// series from the served page. Returns the page now served.
fn publish_round(
    main: &Runner,
    combiner: &Combiner,
    mut st: MutexGuard<'_, State>,
    last: Option<Page>,
) -> Option<Page> {
    let round: Round = st.rounds.take(&combiner.engines);
    drop(st);
    if round.is_empty() {
        return withdraw(main, last, &round.withdrawn, round.down);
    }
    if let Some(l) = last {
        l.recycle();
    }
    let (merged, took) = round.merge(&combiner.engines);
    Some(main.publish_collected(merged, took, "dcgm"))
}

/// Serves `last` without the series of the `gone` engines (nothing when none is left).
fn withdraw(main: &Runner, last: Option<Page>, gone: &[String], down: Vec<String>) -> Option<Page> {
    let mut page = last?;
    if !engines::withdraw(&mut page, gone) {
        main.failed(
            &format!("no host engine serves: {}", down.join("; ")),
            false,
        );
        page.recycle();
        return None;
    }
    let oldest = page
        .oldest_sample_us
        .unwrap_or_else(crate::model::clock::now_us);
    main.shared.publish(&page, oldest);
    main.shared.set_notes(down);
    Some(page)
}
