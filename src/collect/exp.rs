//! dcgm-exporter's synthesised `DCGM_EXP_*` metrics: windowed and cumulative XID and
//! clock-event counts, GPU health and NVLink P2P status.

use crate::collect::failures::{self, Failures, Outcome};
use crate::collect::fields;
use crate::collect::health;
use crate::collect::targets::{self, Target};
use crate::collect::topology::Topology;
use crate::collect::{watch_all, Settings, Watch};
use crate::config::counters::{Counter, CounterField, Counters, ExpField};
use crate::config::selector::IdSet;
use crate::model::Page;
use dcgm_sys::{health_system, Entity, EntityGroup, Group, Reading, Session, Value};
use std::collections::{BTreeMap, HashMap};

/// Clock-event reason bits and their `clock_event` label (dcgm_fields.h
/// `DCGM_CLOCKS_EVENT_REASON_*`).
pub const CLOCK_EVENTS: &[(i64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
];

/// The `health_watch` rows, in dcgm-exporter's order.
const HEALTH_WATCHES: &[(&str, u32)] = &[
    ("PCIE", health_system::PCIE),
    ("NVLINK", health_system::NVLINK),
    ("PMU", health_system::PMU),
    ("MCU", health_system::MCU),
    ("MEM", health_system::MEM),
    ("SM", health_system::SM),
    ("INFOROM", health_system::INFOROM),
    ("THERMAL", health_system::THERMAL),
    ("POWER", health_system::POWER),
    ("DRIVER", health_system::DRIVER),
    ("ALL", health_system::ALL),
];

/// Counts of one field's sample values over a sliding window, plus since-start totals.
struct Windowed {
    field: u16,
    window_ms: u64,
    label: &'static str,
    count_row: Option<Counter>,
    total_row: Option<Counter>,
    targets: Vec<Target>,
    /// Per target, the entities whose samples its series count (XIDs: `xid::sources`;
    /// clock events: its own).
    sources: HashMap<Entity, Vec<Entity>>,
    watches: Vec<Watch>,
    /// Per entity whose samples are read.
    totals: HashMap<Entity, BTreeMap<String, u64>>,
    /// Samples at or before this timestamp are already in `totals`.
    last_ts: i64,
    /// Clock events: each GPU's last reason bitmask, so that the total counts a reason once
    /// when it becomes active (upstream 4.8.3's clock_events_total collector).
    previous: HashMap<Entity, i64>,
}

impl Windowed {
    /// What a failure of this piece costs (the `source` of the error counter).
    fn source(&self) -> &str {
        self.count_row
            .as_ref()
            .or(self.total_row.as_ref())
            .map_or("windowed counts", |r| r.name.as_str())
    }

    /// The values a sample stands for: the XID itself, or each clock-event bit set.
    fn keys(&self, v: i64) -> Vec<String> {
        if self.field == fields::XID_ERRORS {
            if v == 0 {
                Vec::new()
            } else {
                vec![v.to_string()]
            }
        } else {
            CLOCK_EVENTS
                .iter()
                .filter(|(bit, _)| v & bit != 0)
                .map(|(_, n)| n.to_string())
                .collect()
        }
    }

    /// What a new sample adds to the since-start totals: an XID counts once per sample; a
    /// clock-event reason once per inactive-to-active edge, the first sample of a GPU only
    /// setting its baseline (a reason active at start is no transition seen), as upstream.
    fn total_keys(&mut self, entity: Entity, v: i64) -> Vec<String> {
        if self.field == fields::XID_ERRORS {
            return self.keys(v);
        }
        match self.previous.insert(entity, v) {
            Some(before) => self.keys(v & !before),
            None => Vec::new(),
        }
    }

    fn collect(
        &mut self,
        session: &Session,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) -> dcgm_sys::Result<()> {
        let since = now_us() - (self.window_ms as i64) * 1000;
        let in_window = self.count_samples(session, since)?;
        self.render(csv_labels, &in_window, page);
        Ok(())
    }

    /// Reads the samples since the window (or the last read) began: the counts inside the
    /// window per GPU and reason, and the since-start totals advanced.
    fn count_samples(
        &mut self,
        session: &Session,
        since: i64,
    ) -> dcgm_sys::Result<HashMap<Entity, BTreeMap<String, u64>>> {
        let mut in_window: HashMap<Entity, BTreeMap<String, u64>> = HashMap::new();
        let mut newest = self.last_ts;
        let mut samples = Vec::new();
        for w in &self.watches {
            samples.extend(
                session
                    .values_since(&w.group, &w.fields, since.min(self.last_ts + 1).max(0))?
                    .0,
            );
        }
        // Edges need each GPU's samples in time order.
        samples.sort_by_key(|s| s.ts_us);
        for s in samples {
            let v = match s.reading {
                Reading::Value(Value::Int64(v)) => v,
                _ => continue,
            };
            if s.ts_us >= since {
                for key in self.keys(v) {
                    *in_window
                        .entry(s.entity)
                        .or_default()
                        .entry(key)
                        .or_default() += 1;
                }
            }
            if s.ts_us > self.last_ts {
                if self.field == fields::XID_ERRORS && v != 0 {
                    crate::model::events::dcgm_xid(s.entity, v, s.ts_us, super::xid::describe(v));
                }
                for key in self.total_keys(s.entity, v) {
                    *self
                        .totals
                        .entry(s.entity)
                        .or_default()
                        .entry(key)
                        .or_default() += 1;
                }
            }
            newest = newest.max(s.ts_us);
        }
        self.last_ts = newest;
        Ok(in_window)
    }

    /// A target's counts: those of every entity it counts the samples of.
    fn counts_of(
        &self,
        t: &Target,
        per_entity: &HashMap<Entity, BTreeMap<String, u64>>,
    ) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let own = [t.entity];
        let sources = self.sources.get(&t.entity).map_or(&own[..], Vec::as_slice);
        for counts in sources.iter().filter_map(|e| per_entity.get(e)) {
            for (k, n) in counts {
                *out.entry(k.clone()).or_default() += n;
            }
        }
        out
    }

    fn render(
        &self,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        in_window: &HashMap<Entity, BTreeMap<String, u64>>,
        page: &mut Page,
    ) {
        let window = self.window_ms.to_string();
        for t in &self.targets {
            if let Some(row) = &self.count_row {
                match self.counts_of(t, in_window) {
                    counts if !counts.is_empty() => {
                        for (k, n) in &counts {
                            let l = exp_labels(
                                t,
                                csv_labels,
                                &[(self.label, k), ("window_size_in_ms", &window)],
                            );
                            page.add(&row.name, &row.help, row.prom_type, &l, *n as f64);
                        }
                    }
                    _ => {
                        let l = exp_labels(t, csv_labels, &[("window_size_in_ms", &window)]);
                        page.add(&row.name, &row.help, row.prom_type, &l, 0.0);
                    }
                }
            }
            if let Some(row) = &self.total_row {
                match self.counts_of(t, &self.totals) {
                    counts if !counts.is_empty() => {
                        for (k, n) in &counts {
                            let l = exp_labels(t, csv_labels, &[(self.label, k)]);
                            page.add(&row.name, &row.help, row.prom_type, &l, *n as f64);
                        }
                    }
                    _ => {
                        let l = exp_labels(t, csv_labels, &[]);
                        page.add(&row.name, &row.help, row.prom_type, &l, 0.0);
                    }
                }
            }
        }
    }
}

/// DCGM's health watches on the whole GPUs, for the health status and the health action.
fn health_watch(
    session: &Session,
    counters: &Counters,
    whole_gpus: &[Target],
    action_row: &Option<Counter>,
    failures: &mut Failures,
) -> dcgm_sys::Result<Option<Health>> {
    let status_row = find_row(counters, ExpField::GpuHealthStatus);
    if (status_row.is_none() && action_row.is_none()) || whole_gpus.is_empty() {
        return Ok(None);
    }
    let ents: Vec<Entity> = whole_gpus.iter().map(|t| t.entity).collect();
    let mut refused = Vec::new();
    let group = crate::collect::group_of_accepted(
        session,
        &format!("dcgm-exporter-health-{}", std::process::id()),
        &ents,
        &mut refused,
    )
    .and_then(|g| session.health_set(&g, health_system::ALL).map(|_| g));
    match group {
        Ok(group) => Ok(Some(Health {
            row: status_row,
            group,
            // A GPU the group refused has no health watch: no status rather than "pass".
            targets: accepted(whole_gpus, &refused),
            codes: crate::collect::health_codes::names(),
        })),
        Err(e) if failures::is_fatal(&e) => Err(e),
        Err(e) => {
            for r in status_row.iter().chain(action_row) {
                failures.refused_at_start(&r.name, &e);
            }
            Ok(None)
        }
    }
}

/// A `DCGM_EXP_*` series' labels: the identity labels, then the CSV label fields and the
/// metric's own labels sorted together by name, as dcgm-exporter renders them (one label
/// map, which Go's template ranges over in key order): `window_size_in_ms` before `xid`,
/// `health_error_code` before `health_watch`, `link_status` before `peer_gpu`.
fn exp_labels<'a>(
    t: &'a Target,
    csv_labels: &'a HashMap<Entity, Vec<(String, String)>>,
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

/// The health watches of every whole GPU: read for `DCGM_EXP_GPU_HEALTH_STATUS` (`row`)
/// and for the health action.
struct Health {
    row: Option<Counter>,
    group: Group,
    targets: Vec<Target>,
    codes: &'static HashMap<u32, String>,
}

impl Health {
    /// The name failures of the health check are counted under.
    fn source(&self) -> &str {
        self.row
            .as_ref()
            .map_or(ExpField::GpuHealthAction.name(), |r| r.name.as_str())
    }

    fn add(
        &self,
        resp: &dcgm_sys::HealthResponse,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) {
        let Some(row) = &self.row else { return };
        for t in &self.targets {
            for (watch, bit) in HEALTH_WATCHES {
                // A node-level incident (entity NONE) is every GPU's too.
                let worst = resp
                    .incidents
                    .iter()
                    .filter(|i| i.entity == t.entity || i.entity.group == EntityGroup::None)
                    .filter(|i| (i.system & bit) != 0)
                    .max_by_key(|i| i.health);
                let (value, code) = match worst {
                    Some(i) => (
                        i.health,
                        self.codes
                            .get(&i.code)
                            .cloned()
                            .unwrap_or_else(|| format!("DCGM_FR_UNKNOWN({})", i.code)),
                    ),
                    None => (0, "DCGM_FR_OK".to_string()),
                };
                let l = exp_labels(
                    t,
                    csv_labels,
                    &[("health_watch", watch), ("health_error_code", &code)],
                );
                page.add(&row.name, &row.help, row.prom_type, &l, f64::from(value));
            }
        }
    }
}

struct P2P {
    row: Counter,
    targets: Vec<Target>,
}

impl P2P {
    fn add(
        &self,
        m: &dcgm_sys::P2PMatrix,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) {
        for t in &self.targets {
            let Some(gpu) = t.gpu else { continue };
            let Some((_, row)) = m.gpus.iter().find(|(id, _)| *id == gpu) else {
                continue;
            };
            for (j, status) in row.iter().enumerate() {
                let Some((peer, _)) = m.gpus.get(j) else {
                    continue;
                };
                if *peer == gpu {
                    continue;
                }
                let peer_s = peer.to_string();
                let l = exp_labels(
                    t,
                    csv_labels,
                    &[("peer_gpu", &peer_s), ("link_status", status.label())],
                );
                let r = &self.row;
                page.add(&r.name, &r.help, r.prom_type, &l, f64::from(status.code()));
            }
        }
    }
}

/// `DCGM_EXP_GPU_HEALTH_ACTION` (per whole GPU) and `DCGM_EXP_GPU_COUNT` (per node).
struct Actions {
    action_row: Option<Counter>,
    count_row: Option<Counter>,
    targets: Vec<Target>,
    /// The GPUs the node started with, in the selection, lost ones included.
    expected: Vec<u32>,
    /// Labels of the node-level series (the hostname label, when there is one).
    node_labels: Vec<(&'static str, String)>,
    window_ms: u64,
    /// XID and recovery-action watches of the whole GPUs; empty when refused.
    watches: Vec<Watch>,
    /// The GPU index of each GPU and compute instance, whose XIDs are its GPU's.
    instances: HashMap<Entity, u32>,
    /// XID watches of those instances; empty when refused or without MIG.
    instance_watches: Vec<Watch>,
}

impl Actions {
    fn source(&self) -> &str {
        self.action_row
            .as_ref()
            .or(self.count_row.as_ref())
            .map_or("health action", |r| r.name.as_str())
    }

    /// Each GPU's evidence but the health incidents, which the caller adds.
    fn evidence(
        &self,
        session: &Session,
    ) -> dcgm_sys::Result<(HashMap<u32, health::Evidence>, health::GpuCount)> {
        let listed = session.gpus(false)?;
        let mut lost_now = Vec::new();
        for g in &self.expected {
            // A library without dcgmGetGpuStatus: lost GPUs still leave the list.
            if listed.contains(g) && session.gpu_is_lost(*g).unwrap_or(false) {
                lost_now.push(*g);
            }
        }
        let count = health::count(&self.expected, &listed, &lost_now);
        crate::model::events::gpus(&self.expected, &listed, &lost_now);
        let mut ev: HashMap<u32, health::Evidence> = HashMap::new();
        for t in &self.targets {
            let Some(g) = t.gpu else { continue };
            ev.entry(g).or_default().lost = lost_now.contains(&g) || !listed.contains(&g);
        }
        let since = now_us() - (self.window_ms as i64) * 1000;
        for w in self.watches.iter().chain(&self.instance_watches) {
            let (samples, _) = session.values_since(&w.group, &w.fields, since.max(0))?;
            for s in samples {
                let Reading::Value(Value::Int64(v)) = s.reading else {
                    continue;
                };
                // An instance's XID is its GPU's.
                let gpu = match s.entity.group {
                    EntityGroup::Gpu => Some(s.entity.id),
                    _ => self.instances.get(&s.entity).copied(),
                };
                let Some(e) = gpu.and_then(|g| ev.get_mut(&g)) else {
                    continue;
                };
                if s.field_id == fields::XID_ERRORS && v != 0 {
                    e.xids.push(v);
                }
            }
        }
        let ents: Vec<Entity> = self.targets.iter().map(|t| t.entity).collect();
        let recovery = super::versions::knows(session, fields::GPU_RECOVERY_ACTION);
        if !self.watches.is_empty() && recovery {
            for r in session.latest_values(&ents, &[fields::GPU_RECOVERY_ACTION], false)? {
                if let (Reading::Value(Value::Int64(v)), Some(e)) =
                    (r.reading, ev.get_mut(&r.entity.id))
                {
                    e.recovery = Some(v);
                }
            }
        }
        Ok((ev, count))
    }

    fn add(
        &self,
        mut ev: HashMap<u32, health::Evidence>,
        count: &health::GpuCount,
        incidents: Option<&dcgm_sys::HealthResponse>,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) {
        if let Some(row) = &self.action_row {
            for i in incidents
                .map(|r| r.incidents.as_slice())
                .unwrap_or_default()
            {
                let incident = (i.system, i.health, i.code);
                match i.entity.group {
                    // Node-level: every GPU's, under its own reason.
                    EntityGroup::None => {
                        for e in ev.values_mut() {
                            e.node_incidents.push(incident);
                        }
                    }
                    EntityGroup::Gpu => {
                        if let Some(e) = ev.get_mut(&i.entity.id) {
                            e.incidents.push(incident);
                        }
                    }
                    _ => {
                        let gpu = self.instances.get(&i.entity).copied();
                        if let Some(e) = gpu.and_then(|g| ev.get_mut(&g)) {
                            e.incidents.push(incident);
                        }
                    }
                }
            }
            for t in &self.targets {
                let Some(e) = t.gpu.and_then(|g| ev.get(&g)) else {
                    continue;
                };
                let (action, reason) = health::decide(e);
                let gpu = t.gpu.unwrap_or_default();
                crate::model::events::health_action(gpu, action.label(), reason);
                let l = exp_labels(
                    t,
                    csv_labels,
                    &[("action", action.label()), ("reason", reason)],
                );
                page.add(&row.name, &row.help, row.prom_type, &l, action as u8 as f64);
            }
        }
        if let Some(row) = &self.count_row {
            for (state, n) in [
                ("expected", count.expected),
                ("present", count.present),
                ("lost", count.lost),
            ] {
                let mut l: Vec<(&str, &str)> = self
                    .node_labels
                    .iter()
                    .map(|(k, v)| (*k, v.as_str()))
                    .collect();
                l.push(("state", state));
                page.add(&row.name, &row.help, row.prom_type, &l, n as f64);
            }
        }
    }
}

#[derive(Default)]
pub struct ExpCollectors {
    windowed: Vec<Windowed>,
    health: Option<Health>,
    actions: Option<Actions>,
    p2p: Option<P2P>,
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn find_row(counters: &Counters, f: ExpField) -> Option<Counter> {
    counters
        .exp()
        .find(|c| matches!(&c.field, CounterField::Exp(e) if *e == f))
        .cloned()
}

/// The XID and clock-event windows the counters ask for, each watching its source field
/// (even when the CSV lacks it) with samples kept for the whole window.
fn windowed(
    session: &Session,
    counters: &Counters,
    settings: &Settings,
    topology: &Topology,
    gpu_targets: &[Target],
    failures: &mut Failures,
) -> dcgm_sys::Result<Vec<Windowed>> {
    let mut out = Vec::new();
    let targets: Vec<Entity> = gpu_targets.iter().map(|t| t.entity).collect();
    for (field, label, count, total, window_ms, name) in [
        (
            fields::XID_ERRORS,
            "xid",
            ExpField::XidErrorsCount,
            ExpField::XidErrorsTotal,
            settings.xid_window_ms,
            "xid",
        ),
        (
            fields::CLOCKS_EVENT_REASONS,
            "clock_event",
            ExpField::ClockEventsCount,
            ExpField::ClockEventsTotal,
            settings.clock_events_window_ms,
            "clock-events",
        ),
    ] {
        let (count_row, total_row) = (find_row(counters, count), find_row(counters, total));
        if (count_row.is_none() && total_row.is_none()) || targets.is_empty() {
            continue;
        }
        let (sources, entities) = read_entities(field, topology, &targets);
        // The hidden dependency: watch the source field even when the CSV lacks it,
        // keeping samples for at least the whole window.
        let (keep_age_s, keep_samples) = settings.window_retention(window_ms);
        let source = count_row
            .as_ref()
            .or(total_row.as_ref())
            .map(|r| r.name.clone());
        let source = source.unwrap_or_default();
        let watched = match watch_all(
            session,
            &format!("dcgm-exporter-{name}"),
            &entities,
            &[field],
            fastest_interval_ms(settings, &[field]),
            keep_age_s,
            keep_samples,
        ) {
            Ok(w) => w,
            Err(e) if failures::is_fatal(&e) => return Err(e),
            Err(e) => {
                failures.refused_at_start(&source, &e);
                continue;
            }
        };
        if let Some((_, e)) = watched.refused.first() {
            failures.refused_at_start(&source, e);
            continue;
        }
        out.push(Windowed {
            field,
            window_ms,
            label,
            count_row,
            total_row,
            // A GPU the group refused is not counted: no series rather than a false 0.
            targets: accepted(gpu_targets, &watched.refused_entities),
            sources,
            watches: watched.watches,
            totals: HashMap::new(),
            last_ts: now_us(),
            previous: HashMap::new(),
        });
    }
    Ok(out)
}

/// Per target, the entities whose samples of `field` its series count, and every entity to
/// watch: the targets first, then the others (XIDs: `xid::sources`; else each its own).
fn read_entities(
    field: u16,
    topology: &Topology,
    targets: &[Entity],
) -> (HashMap<Entity, Vec<Entity>>, Vec<Entity>) {
    let sources = if field == fields::XID_ERRORS {
        crate::collect::xid::sources(&topology.instances, targets)
    } else {
        HashMap::new()
    };
    let mut entities = targets.to_vec();
    for e in targets.iter().filter_map(|t| sources.get(t)).flatten() {
        if !entities.contains(e) {
            entities.push(*e);
        }
    }
    (sources, entities)
}

/// The targets whose entity DCGM took into the group.
fn accepted(targets: &[Target], refused: &[(Entity, dcgm_sys::Error)]) -> Vec<Target> {
    targets
        .iter()
        .filter(|t| !refused.iter().any(|(e, _)| *e == t.entity))
        .cloned()
        .collect()
}

/// The interval of a watch the `DCGM_EXP_*` metrics add to fields the counters may watch
/// too: DCGM samples a pair at the interval its watcher last set, and these watches come
/// last in a build, so they take a watch group's faster interval rather than slow it down.
fn fastest_interval_ms(settings: &Settings, fields: &[u16]) -> u64 {
    fields
        .iter()
        .map(|f| settings.watch_interval_ms(*f))
        .fold(settings.interval_ms, u64::min)
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

impl ExpCollectors {
    pub fn start(
        session: &Session,
        counters: &Counters,
        settings: &Settings,
        topology: &Topology,
        gpu_targets: &[Target],
        failures: &mut Failures,
    ) -> dcgm_sys::Result<ExpCollectors> {
        let mut exp = ExpCollectors {
            windowed: windowed(session, counters, settings, topology, gpu_targets, failures)?,
            ..Default::default()
        };
        // Health and P2P are per physical GPU, MIG or not.
        let whole_gpus = whole_gpus(gpu_targets);
        let action_row = find_row(counters, ExpField::GpuHealthAction);
        exp.health = health_watch(session, counters, &whole_gpus, &action_row, failures)?;
        exp.actions = Actions::start(
            session,
            counters,
            settings,
            topology,
            &whole_gpus,
            action_row,
            failures,
        )?;
        if let Some(row) = find_row(counters, ExpField::P2PStatus) {
            if topology.gpus.len() > 1 {
                exp.p2p = Some(P2P {
                    row,
                    targets: whole_gpus,
                });
            }
        }
        Ok(exp)
    }

    /// Each derived metric is one piece: a failure costs only its own series.
    pub fn collect(
        &mut self,
        session: &Session,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
        failures: &mut Failures,
        outcome: &mut Outcome,
    ) -> dcgm_sys::Result<()> {
        if !self.windowed.is_empty() {
            // dcgm-exporter samples before counting so the window ends now.
            let r = session.update_all_fields(true);
            outcome.piece("field update", r, failures, page)?;
        }
        for w in &mut self.windowed {
            let source = w.source().to_string();
            // The page gets this piece's series only when all of it was read.
            let mut part = Page::default();
            let r = w.collect(session, csv_labels, &mut part);
            if outcome.piece(&source, r, failures, page)?.is_some() {
                page.append(part);
            }
        }
        let mut checked = None;
        if let Some(h) = &self.health {
            let r = session.health_check(&h.group);
            let source = h.source().to_string();
            if let Some(resp) = outcome.piece(&source, r, failures, page)? {
                crate::model::events::health(&resp);
                h.add(&resp, csv_labels, page);
                checked = Some(resp);
            }
        }
        if let Some(a) = &self.actions {
            let r = a.evidence(session);
            let source = a.source().to_string();
            if let Some((ev, count)) = outcome.piece(&source, r, failures, page)? {
                a.add(ev, &count, checked.as_ref(), csv_labels, page);
            }
        }
        if let Some(p) = &self.p2p {
            let r = session.p2p_status();
            if let Some(m) = outcome.piece(&p.row.name, r, failures, page)? {
                p.add(&m, csv_labels, page);
            }
        }
        Ok(())
    }

    fn watches(&self) -> impl Iterator<Item = &Watch> {
        let action_watches = self
            .actions
            .iter()
            .flat_map(|a| a.watches.iter().chain(&a.instance_watches));
        self.windowed
            .iter()
            .flat_map(|w| &w.watches)
            .chain(action_watches)
    }

    pub fn stop(self, session: &Session) {
        for w in self.watches() {
            let _ = w.remove(session);
        }
    }

    /// Makes every watch again, in the order they were first made (see
    /// `Collector::reassert`).
    pub fn reassert(&self, session: &Session) -> dcgm_sys::Result<()> {
        self.watches().try_for_each(|w| w.assert(session))
    }

    /// Takes each window's since-start totals, its read position and its clock-event
    /// baselines from the collectors this one replaces, so that `_TOTAL` series stay
    /// monotonic across a rebuild and the samples DCGM took between the old collector's
    /// last read and this one's first are counted once, not lost (the cache keeps them: an
    /// unwatch does not clear it). An entity no longer read takes its totals with it.
    pub fn inherit(&mut self, old: &mut ExpCollectors) {
        for w in &mut self.windowed {
            let Some(o) = old.windowed.iter_mut().find(|o| o.field == w.field) else {
                continue;
            };
            let mut kept: Vec<Entity> = w.targets.iter().map(|t| t.entity).collect();
            kept.extend(w.sources.values().flatten());
            w.totals = std::mem::take(&mut o.totals);
            w.totals.retain(|e, _| kept.contains(e));
            w.previous = std::mem::take(&mut o.previous);
            w.previous.retain(|e, _| kept.contains(e));
            w.last_ts = o.last_ts;
        }
    }
}

impl Actions {
    fn start(
        session: &Session,
        counters: &Counters,
        settings: &Settings,
        topology: &Topology,
        whole_gpus: &[Target],
        action_row: Option<Counter>,
        failures: &mut Failures,
    ) -> dcgm_sys::Result<Option<Actions>> {
        let count_row = find_row(counters, ExpField::GpuCount);
        if action_row.is_none() && count_row.is_none() {
            return Ok(None);
        }
        let mut expected: Vec<u32> = whole_gpus.iter().filter_map(|t| t.gpu).collect();
        // A GPU already lost at start is expected too, when the selection takes it.
        expected.extend(
            topology
                .lost_gpus
                .iter()
                .filter(|g| match &settings.gpus.major {
                    Some(IdSet::Ids(ids)) => ids.contains(g),
                    _ => true,
                }),
        );
        expected.sort_unstable();
        expected.dedup();
        let mut a = Actions {
            action_row,
            count_row,
            targets: whole_gpus.to_vec(),
            expected,
            node_labels: settings
                .hostname
                .iter()
                .map(|h| (targets::hostname_label(settings.emulate), h.clone()))
                .collect(),
            window_ms: settings.xid_window_ms,
            watches: Vec::new(),
            instances: topology
                .mig_rows
                .iter()
                .filter_map(|m| Some((m.entity, gpu_of(&topology.mig_rows, m)?)))
                .filter(|(_, g)| whole_gpus.iter().any(|t| t.gpu == Some(*g)))
                .collect(),
            instance_watches: Vec::new(),
        };
        if a.action_row.is_none() || whole_gpus.is_empty() {
            return Ok(Some(a));
        }
        let ents: Vec<Entity> = whole_gpus.iter().map(|t| t.entity).collect();
        let (keep_age_s, keep_samples) = settings.window_retention(a.window_ms);
        let source = a.source().to_string();
        let watched = action_fields(session);
        match watch_all(
            session,
            "dcgm-exporter-health-action",
            &ents,
            &watched,
            fastest_interval_ms(settings, &watched),
            keep_age_s,
            keep_samples,
        ) {
            // A library without the recovery-action field refuses only that field: the
            // XIDs, health watches and lost GPUs still decide.
            Ok(w) => {
                for (f, e) in &w.refused {
                    tracing::info!("{source}: field {f} not watched: {e}");
                }
                a.watches = w.watches;
            }
            Err(e) if failures::is_fatal(&e) => return Err(e),
            Err(e) => failures.refused_at_start(&source, &e),
        }
        a.instance_watches = a.watch_instances(session, settings)?;
        Ok(Some(a))
    }

    /// The XIDs of every GPU and compute instance (whether or not `--compute-instances`
    /// exports them): a library that will not watch them leaves the GPUs' own to decide.
    fn watch_instances(
        &self,
        session: &Session,
        settings: &Settings,
    ) -> dcgm_sys::Result<Vec<Watch>> {
        let mut ents: Vec<Entity> = self.instances.keys().copied().collect();
        if ents.is_empty() {
            return Ok(Vec::new());
        }
        ents.sort_by_key(|e| (e.group != EntityGroup::GpuInstance, e.id));
        let (keep_age_s, keep_samples) = settings.window_retention(self.window_ms);
        match watch_all(
            session,
            "dcgm-exporter-health-action-mig",
            &ents,
            &[fields::XID_ERRORS],
            settings.interval_ms,
            keep_age_s,
            keep_samples,
        ) {
            Ok(w) => {
                for (f, e) in &w.refused {
                    tracing::info!(
                        "{}: field {f} not watched on MIG instances: {e}",
                        self.source()
                    );
                }
                Ok(w.watches)
            }
            Err(e) if failures::is_fatal(&e) => Err(e),
            Err(e) => {
                tracing::info!("{}: XIDs of MIG instances not watched: {e}", self.source());
                Ok(Vec::new())
            }
        }
    }
}

/// The fields the health action watches: the XIDs, and the driver's recovery action where
/// both sides of the session know it (DCGM 4.5.0 and later; `super::versions` says so once).
fn action_fields(session: &Session) -> Vec<u16> {
    let mut f = vec![fields::XID_ERRORS];
    if super::versions::knows(session, fields::GPU_RECOVERY_ACTION) {
        f.push(fields::GPU_RECOVERY_ACTION);
    }
    f
}

/// The GPU index a GPU or compute instance belongs to (a compute instance through its GPU
/// instance).
fn gpu_of(rows: &[dcgm_sys::MigEntity], m: &dcgm_sys::MigEntity) -> Option<u32> {
    match m.parent.group {
        EntityGroup::Gpu => Some(m.parent.id),
        EntityGroup::GpuInstance => rows
            .iter()
            .find(|p| p.entity == m.parent)
            .and_then(|p| (p.parent.group == EntityGroup::Gpu).then_some(p.parent.id)),
        _ => None,
    }
}
