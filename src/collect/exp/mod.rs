//! dcgm-exporter's synthesised `DCGM_EXP_*` metrics, one derived collector per file:
//! windowed and cumulative XID and clock-event counts (`windowed`), GPU health (`health`),
//! the health action and GPU count (`actions`) and NVLink P2P status (`p2p`).
//!
//! Each is a [`Derived`] made by the start function of its [`Registration`] in [`DERIVED`],
//! which also names the `DCGM_EXP_*` metrics it serves: adding a metric is a file with its
//! name, its collector and its registration, and one line there. Start-up hands the names
//! ([`names`]) to the counters reader, which accepts a row asking for one of them.

mod actions;
mod health;
mod p2p;
mod windowed;

use crate::collect::failures::{Failures, Outcome};
use crate::collect::targets::Target;
use crate::collect::topology::Topology;
use crate::collect::watch::Watch;
use crate::collect::Settings;
use crate::config::counters::{Counter, CounterField, Counters};
use crate::model::Page;
use dcgm_sys::{Entity, HealthResponse, Session};
use std::any::Any;
use std::collections::HashMap;

/// The CSV label fields of each entity, read by the collection before the derived metrics.
pub(crate) type CsvLabels = HashMap<Entity, Vec<(String, String)>>;

/// What a derived collector's start function is given.
pub(crate) struct Start<'a> {
    pub session: &'a Session,
    pub counters: &'a Counters,
    pub settings: &'a Settings,
    pub topology: &'a Topology,
    /// The GPU targets, MIG instances included.
    pub gpu_targets: &'a [Target],
    /// One target per physical GPU, without the MIG labels: health, actions and P2P are
    /// per physical GPU, MIG or not.
    pub whole_gpus: Vec<Target>,
    pub failures: &'a mut Failures,
}

impl Start<'_> {
    /// The counters row of a derived metric, when the CSV asks for it.
    pub(crate) fn row(&self, name: &str) -> Option<Counter> {
        self.counters
            .exp()
            .find(|c| matches!(c.field, CounterField::Exp(n) if n == name))
            .cloned()
    }

    /// The interval of a watch the `DCGM_EXP_*` metrics add to fields the counters may watch
    /// too: DCGM samples a pair at the interval its watcher last set, and these watches come
    /// last in a build, so they take a watch group's faster interval rather than slow it down.
    pub(crate) fn fastest_interval_ms(&self, fields: &[u16]) -> u64 {
        fields
            .iter()
            .map(|f| self.settings.watch_interval_ms(*f))
            .fold(self.settings.interval_ms, u64::min)
    }
}

/// One collection's view for the derived collectors, in [`DERIVED`] order.
pub(crate) struct Pass<'a> {
    pub session: &'a Session,
    pub csv_labels: &'a CsvLabels,
    /// This collection's health check, for the collectors after the one that made it (the
    /// health action decides from the incidents the health status reads).
    pub health: Option<HealthResponse>,
}

/// A derived collector. Each is one piece of the collection: a failure costs only its own
/// series (counted under [`Derived::source`]).
pub(crate) trait Derived: Any + Send {
    /// The name its failures are counted under.
    fn source(&self) -> &str;

    /// Whether it reads samples up to now (then DCGM samples every field first, once).
    fn reads_window(&self) -> bool {
        false
    }

    /// Reads, then adds its series to `page`: only once every read succeeded, so that a
    /// failure leaves the page as it was (the piece's series left out whole).
    fn collect(&mut self, pass: &mut Pass<'_>, page: &mut Page) -> dcgm_sys::Result<()>;

    /// Whether it adds series. One that only records events (the XID watch kept for the
    /// history) neither keeps a collection whose other pieces failed alive nor fails it.
    fn serves_series(&self) -> bool {
        true
    }

    /// Its field watches, in the order they were made.
    fn watches(&self) -> Vec<&Watch> {
        Vec::new()
    }

    /// Takes what must stay monotonic from the collectors a rebuild replaces.
    fn inherit(&mut self, _old: &mut [Box<dyn Derived>]) {}

    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Makes a derived collector, `None` when the counters do not ask for it (or DCGM refused
/// it, counted in `failures`); an error only when the session is lost.
pub(crate) type StartFn = fn(&mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>>;

/// A derived collector as its file registers it.
pub(crate) struct Registration {
    /// The `DCGM_EXP_*` metrics it serves, each a name a counters row may ask for.
    pub names: &'static [&'static str],
    pub start: StartFn,
}

/// Every derived collector, in start and collection order (the health status before the
/// health action, which reads its check).
pub(crate) const DERIVED: &[Registration] = &[
    windowed::XID_REGISTRATION,
    windowed::CLOCK_EVENTS_REGISTRATION,
    health::REGISTRATION,
    actions::REGISTRATION,
    p2p::REGISTRATION,
];

pub(crate) use actions::HEALTH_ACTION;

/// Every `DCGM_EXP_*` name a counters row may ask for: the names of [`DERIVED`].
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    DERIVED.iter().flat_map(|r| r.names.iter().copied())
}

/// The derived collectors of one collector.
#[derive(Default)]
pub(crate) struct ExpCollectors {
    parts: Vec<Box<dyn Derived>>,
}

impl ExpCollectors {
    pub(crate) fn start(
        session: &Session,
        counters: &Counters,
        settings: &Settings,
        topology: &Topology,
        gpu_targets: &[Target],
        failures: &mut Failures,
    ) -> dcgm_sys::Result<ExpCollectors> {
        let mut start = Start {
            session,
            counters,
            settings,
            topology,
            gpu_targets,
            whole_gpus: whole_gpus(gpu_targets),
            failures,
        };
        let mut parts = Vec::new();
        for r in DERIVED {
            parts.extend((r.start)(&mut start)?);
        }
        Ok(ExpCollectors { parts })
    }

    /// Each derived metric is one piece: a failure costs only its own series.
    pub(crate) fn collect(
        &mut self,
        session: &Session,
        csv_labels: &CsvLabels,
        page: &mut Page,
        failures: &mut Failures,
        outcome: &mut Outcome,
    ) -> dcgm_sys::Result<()> {
        if self.parts.iter().any(|p| p.reads_window()) {
            // dcgm-exporter samples before counting so the window ends now.
            let r = session.update_all_fields(true);
            outcome.piece("field update", r, failures, page)?;
        }
        let mut pass = Pass {
            session,
            csv_labels,
            health: None,
        };
        for p in &mut self.parts {
            let r = p.collect(&mut pass, page);
            if p.serves_series() {
                outcome.piece(p.source(), r, failures, page)?;
            } else {
                // Still counted and logged; a lost session is still the collection's.
                Outcome::default().piece(p.source(), r, failures, page)?;
            }
        }
        Ok(())
    }

    fn watches(&self) -> impl Iterator<Item = &Watch> {
        self.parts.iter().flat_map(|p| p.watches())
    }

    pub(crate) fn stop(self, session: &Session) {
        for w in self.watches() {
            let _ = w.remove(session);
        }
    }

    /// Makes every watch again, in the order they were first made (see
    /// `Collector::reassert`).
    pub(crate) fn reassert(&self, session: &Session) -> dcgm_sys::Result<()> {
        self.watches().try_for_each(|w| w.assert(session))
    }

    /// Takes what must stay monotonic across a rebuild from the collectors this one
    /// replaces (see [`Derived::inherit`]).
    pub(crate) fn inherit(&mut self, old: &mut ExpCollectors) {
        for p in &mut self.parts {
            p.inherit(&mut old.parts);
        }
    }
}

/// A `DCGM_EXP_*` series' labels: the identity labels, then the CSV label fields and the
/// metric's own labels sorted together by name, as dcgm-exporter renders them (one label
/// map, which Go's template ranges over in key order): `window_size_in_ms` before `xid`,
/// `health_error_code` before `health_watch`, `link_status` before `peer_gpu`.
fn exp_labels<'a>(
    t: &'a Target,
    csv_labels: &'a CsvLabels,
    own: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut l: Vec<(&str, &str)> = t.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut extra: Vec<(&str, &str)> = csv_labels
        .get(&t.entity)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(own.iter().copied())
        .collect();
    extra.sort_by(|a, b| a.0.cmp(b.0));
    l.extend(extra);
    l
}

/// The targets whose entity DCGM took into the group.
fn accepted(targets: &[Target], refused: &[(Entity, dcgm_sys::Error)]) -> Vec<Target> {
    targets
        .iter()
        .filter(|t| !refused.iter().any(|(e, _)| *e == t.entity))
        .cloned()
        .collect()
}

/// One target per physical GPU, without the MIG labels.
fn whole_gpus(gpu_targets: &[Target]) -> Vec<Target> {
    let mut seen = Vec::new();
    let mut v = Vec::new();
    for t in gpu_targets {
        let Some(g) = t.gpu else { continue };
        if seen.contains(&g) {
            continue;
        }
        seen.push(g);
        let labels = t
            .labels
            .iter()
            .filter(|(k, _)| !matches!(*k, "GPU_I_PROFILE" | "GPU_I_ID" | "GPU_CI_ID"))
            .cloned()
            .collect();
        v.push(Target {
            entity: Entity::gpu(g),
            labels,
            gpu: Some(g),
        });
    }
    v
}
