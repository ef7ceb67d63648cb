//! The planned watch sets made live: each set's fields watched at their intervals, the
//! fields and entities DCGM refuses left out and counted ([`activate`]).

use super::failures::{self, Failures};
use super::profiling::unsupported_profiling;
use super::targets::{self, Kind, WatchSet};
use super::watch::{watch_all, Watch, Watched};
use super::{field_id, Settings, StartError};
use crate::config::counters::Counters;
use crate::model::naming::PromType;
use dcgm_sys::{Entity, Session};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A planned watch set as DCGM watches it, with the rows it fills in page order.
pub(super) struct ActiveSet {
    pub(super) set: WatchSet,
    /// CSV `label` rows (indices into `Counters::all`), sorted by name.
    pub(super) label_rows: Vec<usize>,
    /// The other rows, sorted by field id then CSV line (dcgm-exporter's order).
    pub(super) value_rows: Vec<usize>,
    pub(super) entities: Vec<Entity>,
    /// (entity, profiling field) pairs the GPU does not support: never exported.
    pub(super) unsupported: HashSet<(Entity, u16)>,
    // Kept alive for the watches; destroyed (after unwatching) on drop.
    pub(super) watches: Vec<Watch>,
}

/// Watches one planned set: the profiling fields DCGM cannot serve are left out first (it
/// refuses a whole watch holding one), then one watch per frequency; fields DCGM refuses
/// are dropped and counted. `None` when nothing of the set is left.
pub(super) fn activate(
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
        targets::drop_fields(&mut set, counters, &refused);
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
        for name in targets::row_names(&set, counters, *field) {
            failures.refused_at_start(&name, e);
        }
        refused.insert(*field);
    }
    targets::drop_fields(&mut set, counters, &refused);
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

/// The watched fields a watch group samples at another interval than `-c`, with theirs.
pub(super) fn own_intervals(
    sets: &[ActiveSet],
    settings: &Settings,
) -> HashMap<u16, std::time::Duration, super::ReadingHash> {
    sets.iter()
        .flat_map(|a| &a.set.fields)
        .map(|&f| (f, settings.watch_interval_ms(f)))
        .filter(|&(_, ms)| ms != settings.interval_ms)
        .map(|(f, ms)| (f, std::time::Duration::from_millis(ms)))
        .collect()
}

/// One line for what is watched per entity type, and one debug line for the types with
/// nothing to collect: the build runs at every start, reconnect, reload and MIG change.
pub(super) fn log_watched(sets: &[ActiveSet]) {
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
