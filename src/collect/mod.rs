//! One DCGM session's watches and the collection that turns their latest values into a page.

pub mod aggregate;
pub mod exp;
pub mod failures;
pub mod fields;
pub mod freshness;
pub mod heal;
pub mod health;
pub mod health_codes;
pub mod info;
pub mod nvml;
mod profiling;
pub mod targets;
pub mod topology;
pub mod versions;
pub mod xid;

use crate::config::counters::{Counter, CounterField, Counters, PromType};
use crate::model::{DropReason, Page};
use dcgm_sys::{Entity, FieldGroup, Group, Reading, Session, Value};
use exp::ExpCollectors;
use failures::{Failures, Outcome};
use profiling::unsupported_profiling;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use targets::{Kind, WatchSet};
use topology::Topology;

/// Entities per DCGM group (DCGM_GROUP_MAX_ENTITIES_V2).
const MAX_GROUP_ENTITIES: usize = 1024;
/// Fields per field group (the library rejects 128 or more).
const MAX_FIELD_GROUP_FIELDS: usize = 127;
/// How long DCGM keeps samples by default (dcgm-exporter's value; --watch-max-keep-age).
pub const MAX_KEEP_AGE_S: f64 = 600.0;

/// Settings that shape what is watched and how it is labelled.
#[derive(Clone, Debug)]
pub struct Settings {
    pub gpus: crate::config::selector::Selector,
    pub switches: crate::config::selector::Selector,
    pub cpus: crate::config::selector::Selector,
    pub compute_instances: bool,
    pub use_old_namespace: bool,
    pub replace_blanks_in_model_name: bool,
    pub hostname: Option<String>,
    pub interval_ms: u64,
    pub xid_window_ms: u64,
    pub clock_events_window_ms: u64,
    /// dcgmWatchFields' maxKeepAge (s; 0: no age limit) and maxKeepSamples (0: no limit)
    /// from --watch-max-keep-age/--watch-max-keep-samples (their defaults unless
    /// `keep_explicit`).
    pub keep_age_s: f64,
    pub keep_samples: i32,
    /// The user set the retention (flag or environment): every watch keeps what they asked
    /// for instead of what the exporter reads (see [`Settings::latest_retention`]).
    pub keep_explicit: bool,
    /// --fake-gpus: a GPU whose attributes cannot be read is kept as `fake<N>`.
    pub fake_gpus: bool,
    /// Watch frequencies for fields matching a glob (the config file's watch groups); a
    /// field no group matches is watched at `interval_ms`.
    pub watch_groups: Vec<WatchGroup>,
    /// The upstream release emulated (`--emulate-version`).
    pub emulate: crate::config::emulate::UpstreamVersion,
    /// `--low-cardinality`: info series, static labels left out of the others.
    pub low_cardinality: bool,
    /// Profiling that heals (`--profiling-rearm-after`, `--profiling-restart-period`) and
    /// the modules the embedded engine is started without (`--dcgm-denylist-modules`).
    pub profiling: heal::Options,
    /// Sub-interval aggregation (`--aggregate`): fields sampled faster, with their
    /// min/max/mean/count per collection.
    pub aggregate: aggregate::Options,
}

/// Samples DCGM keeps of a field whose latest value is all the exporter reads. Upstream
/// keeps 600 s of every field, which embedded mode pays for in memory that grows for ten
/// minutes after start; a count, not an age, so that a field DCGM updates late or rarely
/// still has its latest value.
pub const LATEST_KEEP_SAMPLES: i32 = 4;

impl Settings {
    /// (maxKeepAge s, maxKeepSamples) for a watch of which only the latest value is read.
    pub fn latest_retention(&self) -> (f64, i32) {
        if self.keep_explicit {
            (self.keep_age_s, self.keep_samples)
        } else {
            (0.0, LATEST_KEEP_SAMPLES)
        }
    }

    /// (maxKeepAge s, maxKeepSamples) for a field read back over `window_ms` (the XID and
    /// clock-event counts): the whole window, plus one collection interval for the read that
    /// starts a little after the window's newest sample was taken.
    pub fn window_retention(&self, window_ms: u64) -> (f64, i32) {
        if self.keep_explicit {
            (self.keep_age_s.max(window_ms as f64 / 1000.0), 0)
        } else {
            ((window_ms + self.interval_ms) as f64 / 1000.0, 0)
        }
    }
}

pub use crate::config::file::WatchGroup;

impl Settings {
    fn watch_group(&self, field: u16) -> Option<&WatchGroup> {
        self.watch_groups.iter().find(|g| {
            g.fields
                .iter()
                .any(|p| crate::config::file::field_matches(p, field))
        })
    }

    /// The watch frequency of a field: the first watch group matching its name, else -c.
    pub fn watch_interval_ms(&self, field: u16) -> u64 {
        let own = self
            .watch_group(field)
            .map_or(self.interval_ms, |g| g.interval_ms);
        self.aggregate.interval_ms(field, own)
    }

    /// The retention of a field whose latest value is read: its watch group's own, each
    /// property over the default retention, else [`Settings::latest_retention`].
    pub fn field_retention(&self, field: u16) -> (f64, i32) {
        let own = match self.watch_group(field) {
            Some(g) if g.keep_age_s.is_some() || g.keep_samples.is_some() => (
                g.keep_age_s.unwrap_or(self.keep_age_s),
                g.keep_samples.unwrap_or(self.keep_samples),
            ),
            _ => self.latest_retention(),
        };
        self.aggregate.retention(field, own, self.interval_ms)
    }
}

struct ActiveSet {
    set: WatchSet,
    /// CSV `label` rows (indices into `Counters::all`), sorted by name.
    label_rows: Vec<usize>,
    /// The other rows, sorted by field id then CSV line (dcgm-exporter's order).
    value_rows: Vec<usize>,
    entities: Vec<Entity>,
    /// (entity, profiling field) pairs the GPU does not support: never exported.
    unsupported: HashSet<(Entity, u16)>,
    // Kept alive for the watches; destroyed (after unwatching) on drop.
    watches: Vec<Watch>,
}

pub struct Collector {
    session: Session,
    counters: Arc<Counters>,
    sets: Vec<ActiveSet>,
    exp: ExpCollectors,
    /// The MIG hierarchy the watches were built for.
    mig_layout: Vec<dcgm_sys::MigEntity>,
    topology: Topology,
    interval: std::time::Duration,
    /// Fields a watch group samples at another interval than `interval`, with theirs: each
    /// sample's freshness is judged by its own.
    field_intervals: HashMap<u16, std::time::Duration>,
    failures: Failures,
    /// Explicit selections that match no entity here (see `targets::unmatched`).
    unmatched: Vec<String>,
    /// `--low-cardinality`.
    low_cardinality: Option<info::LowCardinality>,
    /// The info series of the last collection (see [`Collector::take_info`]).
    info: Option<Page>,
    /// The last collection found no recent sample of any polled field watched.
    stalled: bool,
    /// Busy GPUs whose profiling reads 0 or fails (DCGM#303), re-armed (`heal`).
    healer: heal::Healer,
    /// Sub-interval aggregation's reads (`aggregate`).
    aggregate: aggregate::Dcgm,
}

/// One `dcgmWatchFields` call as it was made, kept so that it can be made again: DCGM keys a
/// watch by (entity, field, connection), not by group, so removing another group's watch of
/// the same pairs on this connection removes this one too (see [`Collector::reassert`]).
pub struct Watch {
    pub group: Group,
    pub fields: FieldGroup,
    freq_us: i64,
    keep_age_s: f64,
    keep_samples: i32,
}

impl Watch {
    /// A watch just made with (update interval µs, max keep age s, max keep samples).
    fn made(group: Group, fields: FieldGroup, rate: (i64, f64, i32)) -> Watch {
        let (freq_us, keep_age_s, keep_samples) = rate;
        Watch {
            group,
            fields,
            freq_us,
            keep_age_s,
            keep_samples,
        }
    }

    /// Sets (again) the watch's interval and retention; idempotent in DCGM.
    pub fn assert(&self, session: &Session) -> dcgm_sys::Result<()> {
        session.watch(
            &self.group,
            &self.fields,
            self.freq_us,
            self.keep_age_s,
            self.keep_samples,
        )
    }

    /// Removes this connection's watch of every (entity, field) pair of the watch.
    pub fn remove(&self, session: &Session) -> dcgm_sys::Result<()> {
        session.unwatch(&self.group, &self.fields)
    }
}

/// What [`watch_all`] set up: the live watches and the fields DCGM refused.
pub struct Watched {
    pub watches: Vec<Watch>,
    /// Fields DCGM would not watch on these entities, each with its error.
    pub refused: Vec<(u16, dcgm_sys::Error)>,
    /// Entities DCGM would not take into a group (e.g. a GPU detached since discovery).
    pub refused_entities: Vec<(Entity, dcgm_sys::Error)>,
}

/// A group of `entities`. When DCGM refuses one (BADPARAM for a GPU detached from its
/// driver since the node was discovered), each is tried alone and the refused ones are left
/// out with their error, so that one entity never costs the others their watches.
pub fn group_of_accepted(
    session: &Session,
    name: &str,
    entities: &[Entity],
    refused: &mut Vec<(Entity, dcgm_sys::Error)>,
) -> dcgm_sys::Result<Group> {
    let err = match session.create_group(name, entities) {
        Ok(g) => return Ok(g),
        Err(e) if failures::is_fatal(&e) || entities.len() < 2 => return Err(e),
        Err(e) => e,
    };
    let mut accepted = Vec::new();
    for &e in entities {
        match session.create_group(&format!("{name}-probe"), &[e]) {
            Ok(_) => accepted.push(e),
            Err(x) if failures::is_fatal(&x) => return Err(x),
            Err(x) => {
                tracing::warn!("{e:?} refused in a group, left out of its watches: {x}");
                refused.push((e, x));
            }
        }
    }
    if accepted.is_empty() || accepted.len() == entities.len() {
        return Err(err);
    }
    session.create_group(name, &accepted)
}

/// Creates groups and field groups for a set of entities and watches them. When DCGM
/// refuses a whole watch (it rejects all of it for one bad field, e.g. a profiling field
/// while its module is not loaded), each field is tried alone and only the refused ones are
/// left out. A lost connection is returned as the error.
pub fn watch_all(
    session: &Session,
    name: &str,
    entities: &[Entity],
    fields: &[u16],
    interval_ms: u64,
    keep_age_s: f64,
    keep_samples: i32,
) -> dcgm_sys::Result<Watched> {
    // Field-group names must be unique in the engine, also while a rebuilt collector
    // briefly coexists with the one it replaces.
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let freq_us = (interval_ms * 1000) as i64;
    let rate = (freq_us, keep_age_s, keep_samples);
    let mut out = Watched {
        watches: Vec::new(),
        refused: Vec::new(),
        refused_entities: Vec::new(),
    };
    for (gi, ents) in entities.chunks(MAX_GROUP_ENTITIES).enumerate() {
        for (fi, flds) in fields.chunks(MAX_FIELD_GROUP_FIELDS).enumerate() {
            let mut refused = Vec::new();
            let group = group_of_accepted(
                session,
                &format!("{name}-{nonce}-{gi}-{fi}"),
                ents,
                &mut refused,
            )?;
            if fi == 0 {
                out.refused_entities.extend(refused);
            }
            let fg_name = format!("{name}-fields-{nonce}-{gi}-{fi}");
            let fg = session.create_field_group(&fg_name, flds)?;
            tracing::debug!(
                "{name}: watching {} entities x fields {flds:?} every {interval_ms} ms (keep {keep_age_s} s, {keep_samples} samples)",
                ents.len()
            );
            let err = match session.watch(&group, &fg, freq_us, keep_age_s, keep_samples) {
                Ok(()) => {
                    out.watches.push(Watch::made(group, fg, rate));
                    continue;
                }
                Err(e) if failures::is_fatal(&e) => return Err(e),
                Err(e) => e,
            };
            drop(fg);
            if flds.len() == 1 {
                out.refused.push((flds[0], err));
                continue;
            }
            let good = probe_fields(session, &group, &fg_name, flds, rate, &mut out.refused)?;
            if good.is_empty() {
                continue;
            }
            let fg = session.create_field_group(&fg_name, &good)?;
            match session.watch(&group, &fg, freq_us, keep_age_s, keep_samples) {
                Ok(()) => out.watches.push(Watch::made(group, fg, rate)),
                Err(e) if failures::is_fatal(&e) => return Err(e),
                // Each field alone was accepted but not together: none of them is watched.
                Err(e) => out
                    .refused
                    .extend(good.iter().map(|f| (*f, failures::copy(&e)))),
            }
        }
    }
    Ok(out)
}

/// The fields of `flds` DCGM watches on `group` when asked one by one; the others go to
/// `refused` with their error. Each probe is unwatched at once (the caller watches the good
/// ones together); pairs it shares with watches in place are made again after the build
/// (`Collector::reassert`).
fn probe_fields(
    session: &Session,
    group: &Group,
    fg_name: &str,
    flds: &[u16],
    (freq_us, keep_age_s, keep_samples): (i64, f64, i32),
    refused: &mut Vec<(u16, dcgm_sys::Error)>,
) -> dcgm_sys::Result<Vec<u16>> {
    let mut good = Vec::new();
    for &f in flds {
        let probe = session.create_field_group(&format!("{fg_name}-probe-{f}"), &[f])?;
        match session.watch(group, &probe, freq_us, keep_age_s, keep_samples) {
            Ok(()) => {
                // DCGM removes every pair of an unwatch and reports a failing one after
                // (DcgmHostEngineHandler::UnwatchFieldGroup); the real DCGM 4.6 kit answers
                // NotWatched for profiling fields of GPUs it samples through GPM. The field
                // was accepted all the same.
                match session.unwatch(group, &probe) {
                    Err(e) if failures::is_fatal(&e) => return Err(e),
                    Err(e) => tracing::debug!("unwatch of the probe of field {f}: {e}"),
                    Ok(()) => {}
                }
                good.push(f);
            }
            Err(e) if failures::is_fatal(&e) => return Err(e),
            Err(e) => refused.push((f, e)),
        }
    }
    Ok(good)
}

/// One line for what is watched per entity type, and one debug line for the types with
/// nothing to collect: the build runs at every start, reconnect, reload and MIG change.
fn log_watched(sets: &[ActiveSet]) {
    let watched: Vec<String> = sets
        .iter()
        .map(|s| {
            format!(
                "{} {} entities x {} fields",
                s.entities.len(),
                s.set.kind.name(),
                s.set.fields.len()
            )
        })
        .collect();
    if watched.is_empty() {
        tracing::info!("watching no DCGM field");
    } else {
        tracing::info!("watching {}", watched.join(", "));
    }
    let idle: Vec<&str> = [
        Kind::Gpu,
        Kind::Switch,
        Kind::Link,
        Kind::Cpu,
        Kind::CpuCore,
    ]
    .into_iter()
    .filter(|k| !sets.iter().any(|s| s.set.kind == *k))
    .map(Kind::name)
    .collect();
    if !idle.is_empty() {
        tracing::debug!(
            "not collecting {} metrics: no such entities selected or no fields apply",
            idle.join(", ")
        );
    }
}

impl Collector {
    /// Discovers the node, applies the selectors and sets up every watch.
    /// Selector errors (a requested id that does not exist) come back as `Err(String)`.
    pub fn start(
        session: Session,
        counters: Arc<Counters>,
        settings: Settings,
    ) -> Result<Collector, StartError> {
        let counters = versions::supported(&session, bind_units(&session, counters)?);
        let topology = Topology::discover(&session, settings.fake_gpus)?;
        for w in &topology.warnings {
            tracing::debug!("{w}");
        }
        let opts = targets::Options {
            gpus: &settings.gpus,
            switches: &settings.switches,
            cpus: &settings.cpus,
            compute_instances: settings.compute_instances,
            use_old_namespace: settings.use_old_namespace,
            replace_blanks_in_model_name: settings.replace_blanks_in_model_name,
            hostname: settings.hostname.as_deref(),
            emulate: settings.emulate,
        };
        let plan = targets::plan(&topology, &counters, &opts).map_err(StartError::Config)?;
        // The DCGM_EXP_* metrics need the GPU targets also when no DCGM field is exported
        // for GPUs (a CSV of derived metrics only, or every field refused).
        let gpu_targets = match plan.iter().find(|s| s.kind == Kind::Gpu) {
            Some(s) => s.targets.clone(),
            None => targets::gpu_targets(&topology, &opts).map_err(StartError::Config)?,
        };
        let mut sets = Vec::new();
        let mut failures = Failures::default();
        for set in plan {
            if let Some(active) = activate(&session, set, &counters, &settings, &mut failures)? {
                sets.push(active);
            }
        }
        let unmatched = targets::unmatched(&topology, &opts).map_err(StartError::Config)?;
        for n in &unmatched {
            tracing::warn!("{n}");
        }
        log_watched(&sets);
        let exp = ExpCollectors::start(
            &session,
            &counters,
            &settings,
            &topology,
            &gpu_targets,
            &mut failures,
        )?;
        // Take the first samples now rather than one interval later.
        session.update_all_fields(true)?;
        profiling::log_module_status(&session);
        let mig_layout = topology.mig_rows.clone();
        let field_intervals = own_intervals(&sets, &settings);
        let aggregate =
            aggregate::Dcgm::new(&settings.aggregate, &sets, &counters, settings.interval_ms);
        let low_cardinality = settings
            .low_cardinality
            .then(|| info::LowCardinality::new(&counters));
        let healer = heal::Healer::new(
            settings.profiling.clone(),
            matches!(session.kind(), dcgm_sys::SessionKind::Embedded),
            gpu_labels(&gpu_targets),
        );
        Ok(Collector {
            unmatched,
            session,
            counters,
            sets,
            exp,
            mig_layout,
            topology,
            interval: std::time::Duration::from_millis(settings.interval_ms),
            field_intervals,
            failures,
            low_cardinality,
            info: None,
            stalled: false,
            healer,
            aggregate,
        })
    }

    /// With `--low-cardinality`, what strips the static labels from a page once attribution
    /// has read them.
    pub fn low_cardinality(&self) -> Option<&info::LowCardinality> {
        self.low_cardinality.as_ref()
    }

    /// With `--low-cardinality`, the info series of the entities last collected: a page of
    /// their own, added after attribution so that pod labels never copy them (the PromQL
    /// join needs one info series per entity).
    pub fn take_info(&mut self) -> Option<Page> {
        self.info.take()
    }

    fn info_page(&self, csv_labels: &HashMap<Entity, Vec<(String, String)>>) -> Option<Page> {
        self.low_cardinality.as_ref()?;
        let mut page = Page::default();
        for active in &self.sets {
            info::add_info(&mut page, active.set.kind, &active.set.targets, csv_labels);
        }
        Some(page)
    }

    /// Whether the last collection found DCGM sampling none of the polled fields watched
    /// (see `freshness::Freshness::stalled`).
    pub fn stalled(&self) -> bool {
        self.stalled
    }

    /// Explicit `-d`/`-s`/`-p` selections that match no entity on this node.
    pub fn unmatched(&self) -> &[String] {
        &self.unmatched
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The node as discovered when the watches were built.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// GPU entities (whole GPUs and MIG instances) being collected.
    pub fn gpu_count(&self) -> usize {
        self.sets
            .iter()
            .filter(|s| s.set.kind == Kind::Gpu)
            .map(|s| s.entities.len())
            .sum()
    }

    /// True when the MIG layout differs from the one the watches were built for.
    pub fn mig_changed(&self) -> dcgm_sys::Result<bool> {
        Ok(topology::mig_rows(&self.session)? != self.mig_layout)
    }

    /// True when a GPU that was lost when the watches were built answers again. It was left
    /// out of them, and nothing else brings it back: DCGM resumes a lost GPU's own watches
    /// once it is redetected, but a build while it was lost (at start, after a reconnect, a
    /// reload or a failed collection) made none. A status DCGM will not tell counts as
    /// still lost; a lost session shows in the collection that follows.
    pub fn lost_gpu_returned(&self) -> bool {
        self.topology
            .lost_gpus
            .iter()
            .any(|&id| matches!(self.session.gpu_is_lost(id), Ok(false)))
    }

    /// Reads every watched value and fills `page`. A piece DCGM refuses (one watch set's
    /// values, one derived metric) is left out and counted on the page; the collection fails
    /// only when the session is lost or when every piece failed.
    pub fn collect(&mut self, page: &mut Page) -> dcgm_sys::Result<()> {
        self.failures.flush_start(page);
        let mut outcome = Outcome::default();
        let mut fresh = freshness::Freshness::new(now_us(), self.interval)
            .with_field_intervals(self.field_intervals.clone());
        let mut csv_labels: HashMap<Entity, Vec<(String, String)>> = HashMap::new();
        let mut rearm = Vec::new();
        for active in &self.sets {
            let source = format!("{} fields", active.set.kind.name());
            let r = self
                .session
                .latest_values(&active.entities, &active.set.fields, false);
            let Some(readings) = outcome.piece(&source, r, &mut self.failures, page)? else {
                continue;
            };
            fresh.observe(&readings);
            rearm.extend(judge_profiling(&mut self.healer, active, &readings));
            Self::fill(
                &self.counters,
                active,
                &readings,
                &mut fresh,
                &mut csv_labels,
                page,
            );
        }
        self.exp.collect(
            &self.session,
            &csv_labels,
            page,
            &mut self.failures,
            &mut outcome,
        )?;
        self.aggregate.collect(
            &self.session,
            &self.sets,
            &self.counters,
            &csv_labels,
            &mut self.failures,
            page,
        )?;
        page.oldest_sample_us = Some(fresh.oldest_us());
        self.stalled = fresh.stalled();
        self.info = self.info_page(&csv_labels);
        for gpu in rearm {
            self.rearm_profiling(gpu)?;
        }
        outcome.finish()
    }

    /// Unwatches and watches again GPU `gpu`'s profiling fields, in each watch holding them,
    /// with that watch's interval and retention: a group of that GPU alone, so no other
    /// pair is touched (DCGM keys a watch by entity, field and connection). A refusal is
    /// logged (the next stuck collections try again); a lost session is the collection's.
    fn rearm_profiling(&self, gpu: Entity) -> dcgm_sys::Result<()> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let watches = self.sets.iter().filter(|a| a.set.kind == Kind::Gpu);
        for w in watches.flat_map(|a| &a.watches) {
            let prof: Vec<u16> = w
                .fields
                .fields()
                .iter()
                .copied()
                .filter(|f| profiling::is_profiling(*f))
                .collect();
            if prof.is_empty() || !w.group.entities().contains(&gpu) {
                continue;
            }
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("dcgm-exporter-rearm-{}-{n}", std::process::id());
            let done = self.session.create_group(&name, &[gpu]).and_then(|g| {
                let fg = self.session.create_field_group(&name, &prof)?;
                if let Err(e) = self.session.unwatch(&g, &fg) {
                    // DCGM removes every pair before it reports one that failed.
                    tracing::debug!("re-arm of {gpu:?}: unwatch: {e}");
                }
                self.session
                    .watch(&g, &fg, w.freq_us, w.keep_age_s, w.keep_samples)
            });
            match done {
                Err(e) if failures::is_fatal(&e) => return Err(e),
                Err(e) => tracing::warn!("re-arming the profiling watches of {gpu:?}: {e}"),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// A restart of the embedded host engine the healing decided on (once): the caller ends
    /// the session, and the next connection starts the engine anew.
    pub fn take_engine_restart(&mut self) -> Option<String> {
        self.healer.take_restart()
    }

    /// Turns one watch set's readings into series.
    fn fill(
        counters: &Counters,
        active: &ActiveSet,
        readings: &[dcgm_sys::FieldReading],
        fresh: &mut freshness::Freshness,
        csv_labels: &mut HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) {
        let mut by_key: HashMap<(Entity, u16), &dcgm_sys::FieldReading, ReadingHash> =
            HashMap::with_capacity_and_hasher(readings.len(), ReadingHash::default());
        by_key.extend(readings.iter().map(|r| ((r.entity, r.field_id), r)));
        // Label fields first: they go on every series of the entity.
        for t in &active.set.targets {
            let mut labels = Vec::new();
            for c in active.label_rows.iter().map(|&i| &counters.all[i]) {
                if let Some(Reading::Value(v)) =
                    by_key.get(&(t.entity, field_id(c))).map(|r| &r.reading)
                {
                    if let Some(s) = label_text(&converted_label(c, v)) {
                        labels.push((c.name.clone(), s));
                    }
                }
            }
            csv_labels.insert(t.entity, labels);
        }

        // Each target's labels once per collection, not once per series.
        let target_labels: Vec<Vec<(&str, &str)>> = active
            .set
            .targets
            .iter()
            .map(|t| t.labels_with(csv_labels))
            .collect();
        for c in active.value_rows.iter().map(|&i| &counters.all[i]) {
            let fid = field_id(c);
            for (t, own) in active.set.targets.iter().zip(&target_labels) {
                if active.unsupported.contains(&(t.entity, fid)) {
                    // Known before watching: no value is asked for, but the page still
                    // says per field why it has none.
                    page.count_field_drop(&c.name, "not_supported");
                    continue;
                }
                let Some(sample) = by_key.get(&(t.entity, fid)).copied() else {
                    page.drop_field_value(&c.name, DropReason::Status, "status");
                    continue;
                };
                let reading = &sample.reading;
                if matches!(reading, Reading::Value(_)) && !fresh.admit(t.entity, fid, sample.ts_us)
                {
                    page.drop_field_value(&c.name, DropReason::Stale, "stale");
                    continue;
                }
                let value = match numeric(reading) {
                    Ok(v) => v,
                    Err((reason, detail)) => {
                        page.drop_field_value(&c.name, reason, detail);
                        continue;
                    }
                };
                let value = crate::config::rename::value_of(c, fid, value);
                if fid == fields::XID_ERRORS {
                    let code = (value as i64).to_string();
                    let mut labels = own.clone();
                    labels.push(("err_code", &code));
                    labels.push(("err_msg", xid::describe(value as i64)));
                    page.add(&c.name, &c.help, c.prom_type, &labels, value);
                } else {
                    page.add(&c.name, &c.help, c.prom_type, own, value);
                }
            }
            // A base-unit row holds its own field's unit, whichever field it is read from.
            page.set_field(&c.name, c.unit.map_or(fid, |b| b.id));
        }
    }

    /// Removes every watch (on shutdown, or of a collector replaced by a rebuild: the new
    /// one then calls [`Collector::reassert`]); errors are logged, not fatal.
    pub fn stop(self) {
        for active in &self.sets {
            for w in &active.watches {
                if let Err(e) = w.remove(&self.session) {
                    tracing::debug!("unwatch: {e}");
                }
            }
        }
        self.exp.stop(&self.session);
    }

    /// Makes every watch of this collector again, in the order it was first made (so that
    /// where two watches share a field the same one sets its interval last), and takes a
    /// sample at once. Called after the collector this one replaced removed its watches:
    /// on the same connection that removed every pair the two share, and DCGM then answers
    /// their last sample forever. Health watches need nothing: DCGM keeps them per
    /// (connection, health watcher), untouched by field unwatches and by destroying a group.
    pub fn reassert(&self) -> dcgm_sys::Result<()> {
        for w in self.sets.iter().flat_map(|a| &a.watches) {
            w.assert(&self.session)?;
        }
        self.exp.reassert(&self.session)?;
        self.session.update_all_fields(true)
    }

    /// Takes over what must stay monotonic from the collector this one replaces (the XID
    /// and clock-event totals and how far they have read).
    pub fn inherit(&mut self, old: &mut Collector) {
        self.exp.inherit(&mut old.exp);
    }
}

/// Binds the base-unit rows (dcgm-exporter 4.9.0 names) to a field of this library: the
/// base-unit field when its metadata (id, value type and unit, asked through
/// `DcgmFieldGetById`) is what the row expects, else the legacy field, converted.
fn bind_units(session: &Session, counters: Arc<Counters>) -> Result<Arc<Counters>, StartError> {
    if counters.all.iter().all(|c| c.unit.is_none()) {
        return Ok(counters);
    }
    let lib = session.library().clone();
    let mut failed = None;
    let mut lookup = |id: u16| match lib.field_meta(id) {
        Ok(m) => m.map(|m| (m.field_type, m.unit)),
        Err(e) => {
            failed.get_or_insert(e);
            None
        }
    };
    // The engine checks a field group's ids against its own table: a remote engine older
    // than this library refuses a base-unit field it does not know.
    let mut probe_failed = None;
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut engine_has = |id: u16| {
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("dcgm-exporter-probe-{}-{n}", std::process::id());
        match session.create_field_group(&name, &[id]) {
            Ok(_) => true,
            Err(e) if failures::is_fatal(&e) => {
                probe_failed.get_or_insert(e);
                false
            }
            Err(_) => false,
        }
    };
    let (bound, notes) =
        crate::config::rename::choose_sources(&counters, &mut lookup, &mut engine_has);
    if let Some(e) = failed.or(probe_failed) {
        return Err(e.into());
    }
    for n in notes {
        if n.starts_with("skipping") {
            tracing::warn!("{n}");
        } else {
            tracing::info!("{n}");
        }
    }
    Ok(Arc::new(bound))
}

/// The watched fields a watch group samples at another interval than `-c`, with theirs.
fn own_intervals(sets: &[ActiveSet], settings: &Settings) -> HashMap<u16, std::time::Duration> {
    sets.iter()
        .flat_map(|a| &a.set.fields)
        .map(|&f| (f, settings.watch_interval_ms(f)))
        .filter(|&(_, ms)| ms != settings.interval_ms)
        .map(|(f, ms)| (f, std::time::Duration::from_millis(ms)))
        .collect()
}

/// A label row's value: a base-unit row read from its legacy field is converted here too.
fn converted_label(c: &Counter, v: &Value) -> Value {
    match (c.unit, v) {
        (Some(_), Value::Int64(i)) => {
            Value::Double(crate::config::rename::value_of(c, field_id(c), *i as f64))
        }
        (Some(_), Value::Double(d)) => {
            Value::Double(crate::config::rename::value_of(c, field_id(c), *d))
        }
        _ => v.clone(),
    }
}

/// Microseconds since the Unix epoch, DCGM's timestamp clock.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Watches one planned set: the profiling fields DCGM cannot serve are left out first (it
/// refuses a whole watch holding one), then one watch per frequency; fields DCGM refuses
/// are dropped and counted. `None` when nothing of the set is left.
fn activate(
    session: &Session,
    mut set: WatchSet,
    counters: &Counters,
    settings: &Settings,
    failures: &mut Failures,
) -> Result<Option<ActiveSet>, StartError> {
    let name = format!(
        "dcgm-exporter-{}",
        set.kind.name().replace(' ', "-").to_lowercase()
    );
    let unsupported = if set.kind == Kind::Gpu {
        let prof = unsupported_profiling(session, &set);
        prof.report(&set, counters);
        let refused = prof.unwatched.iter().map(|u| u.0).collect();
        drop_fields(&mut set, counters, &refused);
        prof.pairs
    } else {
        HashSet::new()
    };
    let entities: Vec<Entity> = set.targets.iter().map(|t| t.entity).collect();
    let source = format!("{} fields", set.kind.name());
    let watched = match watch_by_interval(session, &name, &entities, &set, settings, &unsupported)?
    {
        Ok(w) => w,
        Err(e) => {
            failures.refused_at_start(&source, &e);
            return Ok(None);
        }
    };
    for (entity, e) in &watched.refused_entities {
        failures.refused_at_start(&format!("{source} of {entity:?}"), e);
    }
    let gone: HashSet<Entity> = watched.refused_entities.iter().map(|r| r.0).collect();
    set.targets.retain(|t| !gone.contains(&t.entity));
    let entities: Vec<Entity> = set.targets.iter().map(|t| t.entity).collect();
    let mut refused = HashSet::new();
    for (field, e) in &watched.refused {
        for name in row_names(&set, counters, *field) {
            failures.refused_at_start(&name, e);
        }
        refused.insert(*field);
    }
    drop_fields(&mut set, counters, &refused);
    if set.fields.is_empty() {
        return Ok(None);
    }
    let (mut label_rows, mut value_rows): (Vec<usize>, Vec<usize>) = set
        .counters
        .iter()
        .partition(|&&i| counters.all[i].prom_type == PromType::Label);
    label_rows.sort_by(|&a, &b| counters.all[a].name.cmp(&counters.all[b].name));
    value_rows.sort_by_key(|&i| (field_id(&counters.all[i]), counters.all[i].line));
    Ok(Some(ActiveSet {
        set,
        label_rows,
        value_rows,
        entities,
        unsupported,
        watches: watched.watches,
    }))
}

/// One watch per frequency and retention: fields of a config-file watch group are sampled
/// at its interval and kept as it says. A profiling field some GPUs do not support is
/// watched on the others only (`unsupported`): DCGM refuses a whole watch of it where its
/// profiling module is denied or absent, and a watch of GPUs it samples through GPM alone
/// never loads the module. The inner error is the set's own (it is left out); the outer one is fatal.
fn watch_by_interval(
    session: &Session,
    name: &str,
    entities: &[Entity],
    set: &WatchSet,
    settings: &Settings,
    unsupported: &HashSet<(Entity, u16)>,
) -> Result<dcgm_sys::Result<Watched>, StartError> {
    type Key = (u64, u64, i32, Vec<Entity>);
    let mut by_interval: BTreeMap<Key, Vec<u16>> = BTreeMap::new();
    for &f in &set.fields {
        let (age_s, samples) = settings.field_retention(f);
        let on: Vec<Entity> = entities
            .iter()
            .copied()
            .filter(|e| !unsupported.contains(&(*e, f)))
            .collect();
        if on.is_empty() {
            continue;
        }
        by_interval
            .entry((settings.watch_interval_ms(f), age_s.to_bits(), samples, on))
            .or_default()
            .push(f);
    }
    let mut watched = Watched {
        watches: Vec::new(),
        refused: Vec::new(),
        refused_entities: Vec::new(),
    };
    for ((interval_ms, age_bits, keep_samples, entities), fields) in &by_interval {
        match watch_all(
            session,
            name,
            entities,
            fields,
            *interval_ms,
            f64::from_bits(*age_bits),
            *keep_samples,
        ) {
            Ok(w) => {
                watched.watches.extend(w.watches);
                watched.refused.extend(w.refused);
                watched.refused_entities.extend(w.refused_entities);
            }
            Err(e) if failures::is_fatal(&e) => return Err(e.into()),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(watched))
}

/// The `gpu` and `UUID` labels of each whole GPU, for the healing's self-metrics.
fn gpu_labels(targets: &[targets::Target]) -> BTreeMap<u32, (String, String)> {
    let label = |t: &targets::Target, names: &[&str]| {
        t.labels
            .iter()
            .find(|(k, _)| names.contains(k))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    targets
        .iter()
        .filter(|t| t.entity.group == dcgm_sys::EntityGroup::Gpu)
        .map(|t| {
            let gpu = label(t, &["gpu"]);
            (t.entity.id, (gpu, label(t, &["UUID", "uuid"])))
        })
        .collect()
}

/// Judges the whole GPUs of a GPU watch set from its readings; the GPUs to re-arm.
fn judge_profiling(
    healer: &mut heal::Healer,
    active: &ActiveSet,
    readings: &[dcgm_sys::FieldReading],
) -> Vec<Entity> {
    if active.set.kind != Kind::Gpu {
        return Vec::new();
    }
    let mut out = Vec::new();
    for t in &active.set.targets {
        if t.entity.group != dcgm_sys::EntityGroup::Gpu {
            continue;
        }
        let prof = heal::watched_profiling(&active.set.fields, t.entity, &active.unsupported);
        if let Some(heal::Action::Rearm) = healer.judge(t.entity.id, t.entity, &prof, readings) {
            out.push(t.entity);
        }
    }
    out
}

/// Leaves `refused` fields, and the CSV rows reading them, out of a watch set.
fn drop_fields(set: &mut WatchSet, counters: &Counters, refused: &HashSet<u16>) {
    if refused.is_empty() {
        return;
    }
    set.fields.retain(|f| !refused.contains(f));
    set.counters
        .retain(|&i| !refused.contains(&field_id(&counters.all[i])));
}

/// The CSV names of a watch set's rows reading `field` (what users know it as).
fn row_names(set: &WatchSet, counters: &Counters, field: u16) -> Vec<String> {
    let mut names: Vec<String> = set
        .counters
        .iter()
        .map(|&i| &counters.all[i])
        .filter(|c| field_id(c) == field)
        .map(|c| c.name.clone())
        .collect();
    names.dedup();
    if names.is_empty() {
        names.push(field_name(field).to_string());
    }
    names
}

/// A reading's number, or why it has none (the drop reason and its per-field detail).
fn numeric(reading: &Reading) -> Result<f64, (DropReason, &'static str)> {
    match reading {
        Reading::Value(Value::Int64(v)) | Reading::Value(Value::Timestamp(v)) => Ok(*v as f64),
        Reading::Value(Value::Double(v)) => Ok(*v),
        Reading::Value(_) => Err((DropReason::NonNumeric, "non_numeric")),
        Reading::Sentinel(s) => Err((DropReason::Sentinel, s.as_str())),
        Reading::Error(_) => Err((DropReason::Status, "status")),
    }
}

fn field_name(id: u16) -> &'static str {
    dcgm_sys::fields::by_id(id).map_or("an unknown field", |m| m.name)
}

fn field_id(c: &Counter) -> u16 {
    match &c.field {
        CounterField::Dcgm(m) => m.id,
        CounterField::Exp(_) => 0,
    }
}

/// A label field's value as text (any type but blobs).
fn label_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Int64(i) | Value::Timestamp(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Blob(_) => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Dcgm(#[from] dcgm_sys::Error),
    #[error("{0}")]
    Config(String),
}

#[cfg(test)]
mod retention_tests {
    use super::*;

    fn settings(explicit: bool, age_s: f64, samples: i32) -> Settings {
        let all = crate::config::selector::parse("-d", "f").unwrap();
        Settings {
            gpus: all.clone(),
            switches: all.clone(),
            cpus: all,
            compute_instances: false,
            use_old_namespace: false,
            replace_blanks_in_model_name: false,
            hostname: None,
            interval_ms: 30_000,
            xid_window_ms: 300_000,
            clock_events_window_ms: 300_000,
            keep_age_s: age_s,
            keep_samples: samples,
            keep_explicit: explicit,
            fake_gpus: false,
            watch_groups: Vec::new(),
            emulate: Default::default(),
            low_cardinality: false,
            profiling: Default::default(),
            aggregate: Default::default(),
        }
    }

    /// A config-file watch group with its own retention (version 2's collection
    /// `sources.dcgm.watch`, version 1's `retention`) overrides each property it states.
    #[test]
    fn a_watch_groups_retention_applies_to_its_fields_only() {
        let mut s = settings(false, 600.0, 0);
        s.watch_groups = vec![
            WatchGroup {
                name: "power".into(),
                interval_ms: 100,
                fields: vec!["DCGM_FI_DEV_POWER_*".into()],
                keep_age_s: Some(0.0),
                keep_samples: Some(2),
            },
            WatchGroup {
                name: "temp".into(),
                interval_ms: 200,
                fields: vec!["DCGM_FI_DEV_GPU_TEMP".into()],
                keep_age_s: None,
                keep_samples: Some(9),
            },
        ];
        assert_eq!(s.field_retention(155), (0.0, 2));
        assert_eq!(s.watch_interval_ms(155), 100);
        assert_eq!(s.field_retention(150), (600.0, 9));
        assert_eq!(s.field_retention(100), s.latest_retention());
        assert_eq!(s.watch_interval_ms(100), 30_000);
    }

    #[test]
    fn by_default_latest_fields_keep_a_few_samples_and_windows_their_window() {
        // The defaults of the flags (600 s, no sample limit), not given by the user.
        let s = settings(false, 600.0, 0);
        assert_eq!(s.latest_retention(), (0.0, LATEST_KEEP_SAMPLES));
        // 5 min window + one 30 s interval, by age: the window's samples, however many.
        assert_eq!(s.window_retention(300_000), (330.0, 0));
        assert_eq!(s.window_retention(0), (30.0, 0));
    }

    #[test]
    fn a_retention_the_user_sets_wins() {
        let s = settings(true, 600.0, 0);
        assert_eq!(s.latest_retention(), (600.0, 0));
        // Never shorter than a window that is read back.
        assert_eq!(s.window_retention(300_000), (600.0, 0));
        assert_eq!(s.window_retention(900_000), (900.0, 0));
        let s = settings(true, 0.0, 5);
        assert_eq!(s.latest_retention(), (0.0, 5));
        assert_eq!(s.window_retention(300_000), (300.0, 0));
    }
}

/// The readings of one collection by (entity, field): small integer keys from DCGM, hashed
/// with a multiply instead of SipHash (one insert and one lookup per series).
type ReadingHash = std::hash::BuildHasherDefault<IntHasher>;

#[derive(Default)]
struct IntHasher(u64);

impl std::hash::Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}
