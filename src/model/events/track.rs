//! What the history last knew of each host engine's node, so that a state seen at every
//! collection (a GPU lost, a health action, a health watch's result, the MIG layout)
//! becomes an event only when it changes. Kept per engine (`None`: the one engine), since
//! with several engines each numbers its GPUs from 0.

use crate::model::node::Topology;
use dcgm_sys::{Entity, EntityGroup, LinkId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Where a GPU is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Presence {
    Present,
    /// DCGM's status Lost (fallen off the bus).
    Lost,
    /// Gone from DCGM's list, or listed but refused (Detached): its driver was unbound.
    Gone,
}

/// (entity, health system bit) -> (result, code, message).
pub(super) type HealthState = HashMap<(Entity, u32), (u32, u32, String)>;

/// One engine's node as last seen.
#[derive(Default)]
pub(super) struct Node {
    pub gpus: BTreeMap<u32, Presence>,
    pub uuids: HashMap<u32, String>,
    /// MIG instance entity -> (GPU, NVML GPU-instance id, NVML compute-instance id).
    instances: HashMap<Entity, (u32, u32, Option<u32>)>,
    /// Per GPU, its instances as `profile(gi N)` in GPU-instance order; `None` before the
    /// first topology.
    pub mig: Option<BTreeMap<u32, String>>,
    pub actions: HashMap<u32, (String, String)>,
    pub health: Option<HealthState>,
    /// Per entity, the newest XID timestamp recorded: a sample read again (a remote
    /// engine's cache over a reconnect) is not a new event.
    pub xid_ts: HashMap<Entity, i64>,
    /// The engine NVML stands in for, while it does.
    pub failover: Option<String>,
}

#[derive(Default)]
pub(super) struct Tracker {
    nodes: HashMap<Option<Arc<str>>, Node>,
}

impl Tracker {
    pub(super) fn node(&mut self, engine: &Option<Arc<str>>) -> &mut Node {
        self.nodes.entry(engine.clone()).or_default()
    }
}

impl Node {
    /// The entity's name in events.
    pub(super) fn name(&self, e: Entity) -> String {
        match e.group {
            EntityGroup::None => "node".into(),
            EntityGroup::Gpu => format!("gpu:{}", e.id),
            EntityGroup::GpuInstance | EntityGroup::ComputeInstance => {
                match self.instances.get(&e) {
                    Some((g, gi, None)) => format!("gpu:{g}/gi:{gi}"),
                    Some((g, gi, Some(ci))) => format!("gpu:{g}/gi:{gi}/ci:{ci}"),
                    // An instance not in the last topology: DCGM's own entity id.
                    None if e.group == EntityGroup::GpuInstance => format!("gpu_i:{}", e.id),
                    None => format!("gpu_ci:{}", e.id),
                }
            }
            EntityGroup::Switch => format!("switch:{}", e.id),
            EntityGroup::Link => {
                let l = LinkId::unpack(e.id);
                let parent = match l.parent {
                    EntityGroup::Switch => "switch",
                    _ => "gpu",
                };
                format!("{parent}:{}/link:{}", l.parent_id, l.index)
            }
            EntityGroup::Cpu => format!("cpu:{}", e.id),
            EntityGroup::CpuCore => format!("core:{}", e.id),
            other => format!("entity:{}:{}", other.raw(), e.id),
        }
    }

    /// The GPU an entity lies in, where it has one.
    pub(super) fn gpu_of(&self, e: Entity) -> Option<u32> {
        match e.group {
            EntityGroup::Gpu => Some(e.id),
            _ => self.instances.get(&e).map(|(g, _, _)| *g),
        }
    }

    /// Takes a new topology's names and MIG layout; answers the GPUs whose MIG layout
    /// changed, with (before, after).
    pub(super) fn take_topology(&mut self, t: &Topology) -> Vec<(u32, String, String)> {
        self.instances = t
            .instances
            .iter()
            .map(|i| {
                let gi = t
                    .instances
                    .iter()
                    .find(|o| o.entity.id == i.gpu_instance && o.compute_instance.is_none())
                    .map_or(i.nvml_instance_id, |o| o.nvml_instance_id);
                (i.entity, (i.gpu, gi, i.compute_instance))
            })
            .collect();
        for g in &t.gpus {
            self.uuids.insert(g.id, g.uuid.clone());
        }
        let mut layout: BTreeMap<u32, String> = BTreeMap::new();
        for g in t
            .gpus
            .iter()
            .map(|g| g.id)
            .chain(t.lost_gpus.iter().copied())
        {
            let mut gis: Vec<_> = t
                .instances
                .iter()
                .filter(|i| i.gpu == g && i.compute_instance.is_none())
                .map(|i| (i.nvml_instance_id, i.profile.clone()))
                .collect();
            gis.sort();
            let text = gis
                .iter()
                .map(|(id, p)| format!("{p}(gi {id})"))
                .collect::<Vec<_>>()
                .join(",");
            layout.insert(g, if text.is_empty() { "none".into() } else { text });
        }
        let before = self.mig.replace(layout.clone());
        let Some(before) = before else {
            return Vec::new();
        };
        layout
            .into_iter()
            .filter_map(|(g, after)| {
                let was = before.get(&g)?;
                (*was != after).then(|| (g, was.clone(), after))
            })
            .collect()
    }
}
