//! One DCGM session's watches and the collection that turns their latest values into a page.

pub mod exp;
pub mod fields;
pub mod freshness;
pub mod health_codes;
pub mod targets;
pub mod topology;
pub mod xid;

use crate::config::counters::{Counter, CounterField, Counters, PromType};
use crate::output::render::{DropReason, Page};
use dcgm_sys::{Entity, FieldGroup, Group, Reading, Session, Value};
use exp::ExpCollectors;
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
    /// dcgmWatchFields' maxKeepAge (s; 0: no age limit) and maxKeepSamples (0: no limit).
    pub keep_age_s: f64,
    pub keep_samples: i32,
    /// --fake-gpus: a GPU whose attributes cannot be read is kept as `fake<N>`.
    pub fake_gpus: bool,
    /// Watch frequencies for fields matching a glob (the config file's watch groups); a
    /// field no group matches is watched at `interval_ms`.
    pub watch_groups: Vec<WatchGroup>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WatchGroup {
    pub name: String,
    pub interval_ms: u64,
    /// Globs (`*`, `?`) over DCGM field names.
    pub fields: Vec<String>,
}

impl Settings {
    /// The watch frequency of a field: the first watch group matching its name, else -c.
    pub fn watch_interval_ms(&self, field: u16) -> u64 {
        self.watch_groups
            .iter()
            .find(|g| {
                g.fields
                    .iter()
                    .any(|p| crate::config::file::field_matches(p, field))
            })
            .map_or(self.interval_ms, |g| g.interval_ms)
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
    watches: Vec<(Group, FieldGroup)>,
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
}

/// Creates groups and field groups for a set of entities and watches them.
pub fn watch_all(
    session: &Session,
    name: &str,
    entities: &[Entity],
    fields: &[u16],
    interval_ms: u64,
    keep_age_s: f64,
    keep_samples: i32,
) -> dcgm_sys::Result<Vec<(Group, FieldGroup)>> {
    // Field-group names must be unique in the engine, also while a rebuilt collector
    // briefly coexists with the one it replaces.
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut out = Vec::new();
    for (gi, ents) in entities.chunks(MAX_GROUP_ENTITIES).enumerate() {
        for (fi, flds) in fields.chunks(MAX_FIELD_GROUP_FIELDS).enumerate() {
            let group = session.create_group(&format!("{name}-{nonce}-{gi}-{fi}"), ents)?;
            let fg =
                session.create_field_group(&format!("{name}-fields-{nonce}-{gi}-{fi}"), flds)?;
            tracing::debug!(
                "{name}: watching {} entities x fields {flds:?} every {interval_ms} ms (keep {keep_age_s} s, {keep_samples} samples)",
                ents.len()
            );
            session.watch(
                &group,
                &fg,
                (interval_ms * 1000) as i64,
                keep_age_s,
                keep_samples,
            )?;
            out.push((group, fg));
        }
    }
    Ok(out)
}

impl Collector {
    /// Discovers the node, applies the selectors and sets up every watch.
    /// Selector errors (a requested id that does not exist) come back as `Err(String)`.
    pub fn start(
        session: Session,
        counters: Arc<Counters>,
        settings: Settings,
    ) -> Result<Collector, StartError> {
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
        };
        let plan = targets::plan(&topology, &counters, &opts).map_err(StartError::Config)?;
        let mut sets = Vec::new();
        for set in plan {
            let entities: Vec<Entity> = set.targets.iter().map(|t| t.entity).collect();
            let name = format!(
                "dcgm-exporter-{}",
                set.kind.name().replace(' ', "-").to_lowercase()
            );
            // One watch per frequency: fields of a config-file watch group are sampled at
            // its interval.
            let mut by_interval: BTreeMap<u64, Vec<u16>> = BTreeMap::new();
            for &f in &set.fields {
                by_interval
                    .entry(settings.watch_interval_ms(f))
                    .or_default()
                    .push(f);
            }
            let mut watches = Vec::new();
            for (interval_ms, fields) in &by_interval {
                watches.extend(watch_all(
                    &session,
                    &name,
                    &entities,
                    fields,
                    *interval_ms,
                    settings.keep_age_s,
                    settings.keep_samples,
                )?);
            }
            tracing::info!(
                "watching {} {} entities x {} fields",
                entities.len(),
                set.kind.name(),
                set.fields.len()
            );
            let unsupported = if set.kind == Kind::Gpu {
                unsupported_profiling(&session, &set)
            } else {
                HashSet::new()
            };
            let (mut label_rows, mut value_rows): (Vec<usize>, Vec<usize>) = set
                .counters
                .iter()
                .partition(|&&i| counters.all[i].prom_type == PromType::Label);
            label_rows.sort_by(|&a, &b| counters.all[a].name.cmp(&counters.all[b].name));
            value_rows.sort_by_key(|&i| (field_id(&counters.all[i]), counters.all[i].line));
            sets.push(ActiveSet {
                set,
                label_rows,
                value_rows,
                entities,
                unsupported,
                watches,
            });
        }
        for kind in [Kind::Switch, Kind::Link, Kind::Cpu, Kind::CpuCore] {
            if !sets.iter().any(|s| s.set.kind == kind) {
                tracing::info!(
                    "not collecting {} metrics: no such entities selected or no fields apply",
                    kind.name()
                );
            }
        }
        let gpu_targets = sets
            .iter()
            .find(|s| s.set.kind == Kind::Gpu)
            .map(|s| s.set.targets.clone())
            .unwrap_or_default();
        let exp = ExpCollectors::start(&session, &counters, &settings, &topology, &gpu_targets)?;
        // Take the first samples now rather than one interval later.
        session.update_all_fields(true)?;
        let mig_layout = topology.mig_rows.clone();
        Ok(Collector {
            session,
            counters,
            sets,
            exp,
            mig_layout,
            topology,
            interval: std::time::Duration::from_millis(settings.interval_ms),
        })
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

    /// Reads every watched value and fills `page`; samples too old to serve are dropped
    /// (see `freshness`).
    pub fn collect(&mut self, page: &mut Page) -> dcgm_sys::Result<()> {
        let mut fresh = freshness::Freshness::new(now_us(), self.interval);
        let mut csv_labels: HashMap<Entity, Vec<(String, String)>> = HashMap::new();
        for active in &self.sets {
            let readings =
                self.session
                    .latest_values(&active.entities, &active.set.fields, false)?;
            fresh.observe(&readings);
            let by_key: HashMap<(Entity, u16), &dcgm_sys::FieldReading> = readings
                .iter()
                .map(|r| ((r.entity, r.field_id), r))
                .collect();
            // Label fields first: they go on every series of the entity.
            for t in &active.set.targets {
                let mut labels = Vec::new();
                for c in active.label_rows.iter().map(|&i| &self.counters.all[i]) {
                    if let Some(Reading::Value(v)) =
                        by_key.get(&(t.entity, field_id(c))).map(|r| &r.reading)
                    {
                        if let Some(s) = label_text(v) {
                            labels.push((c.name.clone(), s));
                        }
                    }
                }
                csv_labels.insert(t.entity, labels);
            }

            for c in active.value_rows.iter().map(|&i| &self.counters.all[i]) {
                let fid = field_id(c);
                for t in &active.set.targets {
                    if active.unsupported.contains(&(t.entity, fid)) {
                        continue;
                    }
                    let Some(sample) = by_key.get(&(t.entity, fid)).copied() else {
                        page.drop_value(DropReason::Status);
                        continue;
                    };
                    let reading = &sample.reading;
                    if matches!(reading, Reading::Value(_))
                        && !fresh.admit(t.entity, fid, sample.ts_us)
                    {
                        page.drop_value(DropReason::Stale);
                        continue;
                    }
                    let value = match reading {
                        Reading::Value(Value::Int64(v)) | Reading::Value(Value::Timestamp(v)) => {
                            *v as f64
                        }
                        Reading::Value(Value::Double(v)) => *v,
                        Reading::Value(_) => {
                            page.drop_value(DropReason::NonNumeric);
                            continue;
                        }
                        Reading::Sentinel(_) => {
                            page.drop_value(DropReason::Sentinel);
                            continue;
                        }
                        Reading::Error(_) => {
                            page.drop_value(DropReason::Status);
                            continue;
                        }
                    };
                    let mut labels = t.labels_with(&csv_labels);
                    let code;
                    if fid == fields::XID_ERRORS {
                        code = (value as i64).to_string();
                        labels.push(("err_code", &code));
                        labels.push(("err_msg", xid::describe(value as i64)));
                    }
                    page.add(&c.name, &c.help, c.prom_type, &labels, value);
                }
            }
        }
        self.exp.collect(&self.session, &csv_labels, page)?;
        page.oldest_sample_us = Some(fresh.oldest_us());
        Ok(())
    }

    /// Removes every watch (on shutdown); errors are logged, not fatal.
    pub fn stop(self) {
        for active in &self.sets {
            for (g, fg) in &active.watches {
                if let Err(e) = self.session.unwatch(g, fg) {
                    tracing::debug!("unwatch: {e}");
                }
            }
        }
        self.exp.stop(&self.session);
    }
}

/// Microseconds since the Unix epoch, DCGM's timestamp clock.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Profiling (DCP) fields are only collected on GPUs whose supported metric groups list
/// them; the rest are skipped with one warning per field and GPU, as dcgm-exporter does.
fn unsupported_profiling(session: &Session, set: &WatchSet) -> HashSet<(Entity, u16)> {
    let prof: Vec<u16> = set
        .fields
        .iter()
        .copied()
        .filter(|f| is_profiling(*f))
        .collect();
    let mut out = HashSet::new();
    if prof.is_empty() {
        return out;
    }
    let mut supported: BTreeMap<u32, HashSet<u16>> = BTreeMap::new();
    for gpu in set.targets.iter().filter_map(|t| t.gpu) {
        supported
            .entry(gpu)
            .or_insert_with(|| match session.supported_metric_groups(gpu) {
                Ok(groups) => groups.into_iter().flat_map(|g| g.field_ids).collect(),
                Err(e) => {
                    tracing::warn!("GPU {gpu}: no profiling metrics ({e})");
                    HashSet::new()
                }
            });
    }
    for (gpu, ok) in &supported {
        for f in prof.iter().filter(|f| !ok.contains(f)) {
            let name = dcgm_sys::fields::by_id(*f).map_or("?", |m| m.name);
            tracing::warn!(
                "skipping {name} ({f}) on GPU {gpu}: not in its supported profiling metric groups"
            );
            for t in set.targets.iter().filter(|t| t.gpu == Some(*gpu)) {
                out.insert((t.entity, *f));
            }
        }
    }
    out
}

/// DCGM_FI_PROF_* fields (served by DCGM's profiling module).
fn is_profiling(id: u16) -> bool {
    dcgm_sys::fields::by_id(id).is_some_and(|m| m.name.starts_with("DCGM_FI_PROF_"))
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
