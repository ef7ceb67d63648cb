//! One DCGM session's watches and the collection that turns their latest values into a page.
//!
//! The build: what to watch (`targets`, `topology`), under which settings (`settings`), made
//! live (`active`, `watch`), plus the derived `DCGM_EXP_*` metrics (`exp`). The other sources
//! of a page: NVML (`nvml`) and several engines merged (`engines`).

mod active;
pub(crate) mod aggregate;
pub(crate) mod engines;
pub(crate) mod exp;
pub(crate) mod failover;
pub(crate) mod failures;
pub(crate) mod fields;
pub(crate) mod freshness;
pub(crate) mod heal;
pub(crate) mod health;
pub(crate) mod health_codes;
pub(crate) mod info;
pub(crate) mod nvml;
mod profiling;
mod settings;
pub(crate) mod targets;
pub(crate) mod topology;
pub(crate) mod versions;
pub mod watch;
pub(crate) mod xid;

pub use settings::{Settings, WatchGroup, LATEST_KEEP_SAMPLES, MAX_KEEP_AGE_S};

use crate::config::counters::{Counter, CounterField, Counters};
use crate::config::selector::NotOnNode;
use crate::model::clock::now_us;
use crate::model::{DropReason, Page};
use active::{activate, log_watched, own_intervals, ActiveSet};
use dcgm_sys::{Entity, Reading, Session, Value};
use exp::ExpCollectors;
use failures::{Failures, Outcome};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use targets::Kind;
use topology::Topology;

pub(crate) struct Collector {
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
    field_intervals: HashMap<u16, std::time::Duration, ReadingHash>,
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

impl Collector {
    /// Discovers the node, applies the selectors and sets up every watch.
    /// Selector errors (a requested id that does not exist) come back as [`StartError::Config`].
    pub(crate) fn start(
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
        let plan = targets::plan(&topology, &counters, &opts)?;
        // The DCGM_EXP_* metrics need the GPU targets also when no DCGM field is exported
        // for GPUs (a CSV of derived metrics only, or every field refused).
        let gpu_targets = match plan.iter().find(|s| s.kind == Kind::Gpu) {
            Some(s) => s.targets.clone(),
            None => targets::gpu_targets(&topology, &opts)?,
        };
        let mut sets = Vec::new();
        let mut failures = Failures::default();
        for set in plan {
            if let Some(active) = activate(&session, set, &counters, &settings, &mut failures)? {
                sets.push(active);
            }
        }
        let unmatched = targets::unmatched(&topology, &opts)?;
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
        let aggregate = aggregate::Dcgm::new(&session, &settings, &sets, &counters);
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
    pub(crate) fn low_cardinality(&self) -> Option<&info::LowCardinality> {
        self.low_cardinality.as_ref()
    }

    /// With `--low-cardinality`, the info series of the entities last collected: a page of
    /// their own, added after attribution so that pod labels never copy them (the PromQL
    /// join needs one info series per entity).
    pub(crate) fn take_info(&mut self) -> Option<Page> {
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
    pub(crate) fn stalled(&self) -> bool {
        self.stalled
    }

    /// Explicit `-d`/`-s`/`-p` selections that match no entity on this node.
    pub(crate) fn unmatched(&self) -> &[String] {
        &self.unmatched
    }

    /// The node as discovered when the watches were built.
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// GPU entities (whole GPUs and MIG instances) being collected.
    pub(crate) fn gpu_count(&self) -> usize {
        self.sets
            .iter()
            .filter(|s| s.set.kind == Kind::Gpu)
            .map(|s| s.entities.len())
            .sum()
    }

    /// True when the MIG layout differs from the one the watches were built for.
    pub(crate) fn mig_changed(&self) -> dcgm_sys::Result<bool> {
        Ok(topology::mig_rows(&self.session)? != self.mig_layout)
    }

    /// True when a GPU that was lost when the watches were built answers again. It was left
    /// out of them, and nothing else brings it back: DCGM resumes a lost GPU's own watches
    /// once it is redetected, but a build while it was lost (at start, after a reconnect, a
    /// reload or a failed collection) made none. A status DCGM will not tell counts as
    /// still lost; a lost session shows in the collection that follows.
    pub(crate) fn lost_gpu_returned(&self) -> bool {
        self.topology
            .lost_gpus
            .iter()
            .any(|&id| matches!(self.session.gpu_is_lost(id), Ok(false)))
    }

    /// Reads every watched value and fills `page`. A piece DCGM refuses (one watch set's
    /// values, one derived metric) is left out and counted on the page; the collection fails
    /// only when the session is lost or when every piece failed.
    pub(crate) fn collect(&mut self, page: &mut Page) -> dcgm_sys::Result<()> {
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
    pub(crate) fn take_engine_restart(&mut self) -> Option<String> {
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
    pub(crate) fn stop(self) {
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
    pub(crate) fn reassert(&self) -> dcgm_sys::Result<()> {
        for w in self.sets.iter().flat_map(|a| &a.watches) {
            w.assert(&self.session)?;
        }
        self.exp.reassert(&self.session)?;
        self.session.update_all_fields(true)
    }

    /// Takes over what must stay monotonic from the collector this one replaces (the XID
    /// and clock-event totals and how far they have read).
    pub(crate) fn inherit(&mut self, old: &mut Collector) {
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
pub(crate) enum StartError {
    #[error("{0}")]
    Dcgm(#[from] dcgm_sys::Error),
    /// A selector names an entity the node lacks.
    #[error(transparent)]
    Config(#[from] NotOnNode),
}

/// The flags do not fit the node as a source found it: a selector naming an entity it
/// lacks, or (the NVML source) the node not discovered. At start-up the flag's error, not
/// the source's; later it costs the watches only.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Boxed: start-up's errors hold this one, and stay small.
    #[error(transparent)]
    NotOnNode(Box<NotOnNode>),
    #[error(transparent)]
    Nvml(#[from] nvml::DiscoverError),
}

impl From<NotOnNode> for NodeError {
    fn from(e: NotOnNode) -> NodeError {
        NodeError::NotOnNode(Box::new(e))
    }
}

/// Maps keyed by DCGM's small integers (entities, field ids, (entity, field) pairs) or
/// NVML's (device, call) pairs, looked up once or more per reading: hashed with a multiply
/// instead of SipHash, which cost more than the rest of handling a reading.
pub(crate) type ReadingHash = std::hash::BuildHasherDefault<IntHasher>;

#[derive(Default)]
pub(crate) struct IntHasher(u64);

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
