//! `DCGM_EXP_GPU_HEALTH_ACTION` (per whole GPU: what to do about it, from its XIDs, its
//! driver's recovery action, its health incidents and whether it is lost) and
//! `DCGM_EXP_GPU_COUNT` (per node: the GPUs expected, present and lost).

use super::{exp_labels, CsvLabels, Derived, Pass, Registration, Start};
use crate::collect::failures;
use crate::collect::fields;
use crate::collect::health;
use crate::collect::targets::{self, Target};
use crate::collect::watch::{watch_all, Watch};
use crate::collect::Settings;
use crate::config::counters::Counter;
use crate::config::selector::IdSet;
use crate::model::clock::now_us;
use crate::model::Page;
use dcgm_sys::{Entity, EntityGroup, Reading, Session, Value};
use std::any::Any;
use std::collections::HashMap;

/// Ours: what each GPU needs now (`collect::health`).
pub(crate) const HEALTH_ACTION: &str = "DCGM_EXP_GPU_HEALTH_ACTION";
/// Ours: expected, present and lost GPUs of the node.
const GPU_COUNT: &str = "DCGM_EXP_GPU_COUNT";

pub(super) const REGISTRATION: Registration = Registration {
    names: &[HEALTH_ACTION, GPU_COUNT],
    start,
};

/// The health action and GPU count, when the counters ask for either.
fn start(start: &mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let (action_row, count_row) = (start.row(HEALTH_ACTION), start.row(GPU_COUNT));
    if action_row.is_none() && count_row.is_none() {
        return Ok(None);
    }
    let (settings, topology) = (start.settings, start.topology);
    let whole_gpus = &start.whole_gpus;
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
    if a.action_row.is_some() && !whole_gpus.is_empty() {
        a.watch_gpus(start)?;
        a.instance_watches = a.watch_instances(start.session, settings)?;
    }
    Ok(Some(Box::new(a)))
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

impl Derived for Actions {
    fn source(&self) -> &str {
        self.action_row
            .as_ref()
            .or(self.count_row.as_ref())
            .map_or("health action", |r| r.name.as_str())
    }

    fn collect(&mut self, pass: &mut Pass<'_>, page: &mut Page) -> dcgm_sys::Result<()> {
        let (ev, count) = self.evidence(pass.session)?;
        self.add(ev, &count, pass.health.as_ref(), pass.csv_labels, page);
        Ok(())
    }

    fn watches(&self) -> Vec<&Watch> {
        self.watches.iter().chain(&self.instance_watches).collect()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Actions {
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
        let recovery = crate::collect::versions::knows(session, fields::GPU_RECOVERY_ACTION);
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
        csv_labels: &CsvLabels,
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

impl Actions {
    /// The XID and recovery-action watches of the whole GPUs.
    fn watch_gpus(&mut self, start: &mut Start<'_>) -> dcgm_sys::Result<()> {
        let session = start.session;
        let ents: Vec<Entity> = start.whole_gpus.iter().map(|t| t.entity).collect();
        let (keep_age_s, keep_samples) = start.settings.window_retention(self.window_ms);
        let source = self.source().to_string();
        let watched = action_fields(session);
        match watch_all(
            session,
            "dcgm-exporter-health-action",
            &ents,
            &watched,
            start.fastest_interval_ms(&watched),
            keep_age_s,
            keep_samples,
        ) {
            // A library without the recovery-action field refuses only that field: the
            // XIDs, health watches and lost GPUs still decide.
            Ok(w) => {
                for (f, e) in &w.refused {
                    tracing::info!("{source}: field {f} not watched: {e}");
                }
                self.watches = w.watches;
            }
            Err(e) if failures::is_fatal(&e) => return Err(e),
            Err(e) => start.failures.refused_at_start(&source, &e),
        }
        Ok(())
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
    if crate::collect::versions::knows(session, fields::GPU_RECOVERY_ACTION) {
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
