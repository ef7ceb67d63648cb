//! DCGM_FI_DEV_XID_ERRORS from NVML events, as DCGM's cache manager makes it
//! (`DcgmCacheManager.cpp`, DCGM 4.6): every GPU is registered for
//! `nvmlEventTypeXidCriticalError` (`ManageDeviceEvents`), and each event becomes the
//! latest sample of the entity it is attributed to (`EventThreadMain`): the GPU when MIG is
//! off or the event names no instance (`RecordXidForGpu`), else the compute instance
//! (`RecordXidForComputeInstance`) or GPU instance (`RecordXidForGpuInstance`) it names;
//! an instance DCGM does not know drops the event. The field's value is the XID, with no
//! sample before the first one.
//!
//! DCGM waits on a thread of its own; here each collection reads the events raised since
//! the previous one with a zero timeout, so a collection never waits for an event. The
//! NVML backend exports no compute instances, so their XIDs show on no series, as on the
//! DCGM backend without `--compute-instances`.

use crate::collect::topology::Topology;
use dcgm_sys::nvml_ext::{Xid, XidEvents};
use dcgm_sys::{Entity, EntityGroup};
use nvml_wrapper::Nvml;
use std::collections::HashMap;
use std::sync::Arc;

/// At most this many events are read per collection, so that a storm of events cannot
/// hold a collection up; the rest are read by the next ones.
const MAX_PER_COLLECTION: usize = 4096;

pub(super) struct Xids {
    events: XidEvents,
    /// The latest XID of each GPU and GPU instance.
    last: HashMap<Entity, i64>,
}

impl Xids {
    /// Registers every GPU of the node; `Err` says why none raises XID events. A GPU that
    /// refuses is named and shows no XID, as DCGM logs it and goes on.
    pub(super) fn start(nvml: Arc<Nvml>, topology: &Topology) -> Result<Xids, String> {
        let events = XidEvents::new(nvml).map_err(|e| format!("nvmlEventSetCreate: {e}"))?;
        let mut registered = 0;
        let mut refused = None;
        for g in &topology.gpus {
            match events.register(g.id) {
                Ok(()) => registered += 1,
                Err(e) => {
                    tracing::warn!("GPU {}: no XID events from NVML ({e})", g.id);
                    refused.get_or_insert(e);
                }
            }
        }
        if registered == 0 {
            return Err(refused.map_or_else(
                || "no GPU".to_string(),
                |e| format!("nvmlDeviceRegisterEvents: {e}"),
            ));
        }
        Ok(Xids {
            events,
            last: HashMap::new(),
        })
    }

    /// Takes in the XIDs raised since the last call, without waiting.
    pub(super) fn read(&mut self, topology: &Topology) {
        for _ in 0..MAX_PER_COLLECTION {
            match self.events.next() {
                Ok(Some(x)) => {
                    let (xid, at) = (x.xid as i64, (x.gpu_instance, x.compute_instance));
                    let what = crate::collect::xid::describe(xid);
                    crate::model::events::nvml_xid(x.gpu, at, xid, what);
                    if let Some(e) = entity_of(&x, topology) {
                        self.last.insert(e, x.xid as i64);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("nvmlEventSetWait_v2: {e}");
                    return;
                }
            }
        }
    }

    /// The latest XID of an exported entity, if it has had one.
    pub(super) fn last(&self, e: Entity) -> Option<i64> {
        self.last.get(&e).copied()
    }

    /// The latest XIDs, the events still queued read in first, for the collector that
    /// replaces this one: DCGM's cache keeps an entity's latest XID through a rebuild of
    /// the watches (a reload, a MIG change), while a new event set starts empty and would
    /// withdraw every XID series until the GPU raised another.
    pub(super) fn hand_over(mut self, topology: &Topology) -> HashMap<Entity, i64> {
        self.read(topology);
        self.last
    }

    /// Takes over the XIDs a replaced collector saw ([`Xids::hand_over`]) for the
    /// entities `topology` still has; a GPU instance destroyed since loses its XID, as in
    /// DCGM. What this set has read already is newer and stays.
    pub(super) fn carry(&mut self, before: HashMap<Entity, i64>, topology: &Topology) {
        carry_into(&mut self.last, before, topology);
    }
}

fn carry_into(last: &mut HashMap<Entity, i64>, before: HashMap<Entity, i64>, topology: &Topology) {
    for (e, xid) in before {
        if still_there(e, topology) {
            last.entry(e).or_insert(xid);
        }
    }
}

/// Whether `topology` has entity `e` (a GPU, lost or not, or a GPU instance).
fn still_there(e: Entity, topology: &Topology) -> bool {
    match e.group {
        EntityGroup::Gpu => {
            topology.gpus.iter().any(|g| g.id == e.id) || topology.lost_gpus.contains(&e.id)
        }
        _ => topology.instances.iter().any(|i| i.entity == e),
    }
}

/// The entity DCGM stores an XID event on; `None` where it drops it or stores it on a
/// compute instance.
fn entity_of(x: &Xid, topology: &Topology) -> Option<Entity> {
    let mig = topology.instances.iter().any(|i| i.gpu == x.gpu);
    match (x.gpu_instance, x.compute_instance) {
        _ if !mig => Some(Entity::gpu(x.gpu)),
        (None, None) => Some(Entity::gpu(x.gpu)),
        (_, Some(_)) => None,
        (Some(gi), None) => topology
            .instances
            .iter()
            .find(|i| i.gpu == x.gpu && i.nvml_instance_id == gi && i.compute_instance.is_none())
            .map(|i| i.entity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::topology::{Gpu, Instance};

    fn xid(gpu: u32, gi: Option<u32>, ci: Option<u32>) -> Xid {
        Xid {
            gpu,
            xid: 13,
            gpu_instance: gi,
            compute_instance: ci,
        }
    }

    #[test]
    fn an_xid_lands_on_the_entity_dcgm_stores_it_on() {
        let gi = Entity::new(EntityGroup::GpuInstance, 16 + 7);
        let topology = Topology {
            instances: vec![Instance {
                entity: gi,
                gpu: 1,
                gpu_instance: gi.id,
                nvml_instance_id: 7,
                compute_instance: None,
                profile: String::new(),
            }],
            ..Topology::default()
        };
        // MIG off: the GPU, whatever the event says.
        assert_eq!(
            entity_of(&xid(0, Some(7), None), &topology),
            Some(Entity::gpu(0))
        );
        // MIG on: the GPU when no instance is named, else the instance.
        assert_eq!(
            entity_of(&xid(1, None, None), &topology),
            Some(Entity::gpu(1))
        );
        assert_eq!(entity_of(&xid(1, Some(7), None), &topology), Some(gi));
        // An instance DCGM does not know, and compute instances: no exported series.
        assert_eq!(entity_of(&xid(1, Some(3), None), &topology), None);
        assert_eq!(entity_of(&xid(1, Some(7), Some(0)), &topology), None);
    }

    #[test]
    fn a_rebuilt_collector_keeps_the_xids_of_what_is_still_there() {
        let (kept, gone) = (
            Entity::new(EntityGroup::GpuInstance, 16 + 7),
            Entity::new(EntityGroup::GpuInstance, 16 + 3),
        );
        let topology = Topology {
            gpus: vec![Gpu {
                id: 1,
                uuid: "GPU-1".into(),
                pci_bus_id: String::new(),
                model: String::new(),
            }],
            lost_gpus: vec![2],
            instances: vec![Instance {
                entity: kept,
                gpu: 1,
                gpu_instance: kept.id,
                nvml_instance_id: 7,
                compute_instance: None,
                profile: String::new(),
            }],
            ..Topology::default()
        };
        let before: HashMap<Entity, i64> = [
            (Entity::gpu(1), 48),
            (Entity::gpu(2), 79),
            (Entity::gpu(5), 13),
            (kept, 43),
            (gone, 31),
        ]
        .into();
        // GPU 1's XID read since the rebuild is newer than the one handed over.
        let mut last: HashMap<Entity, i64> = [(Entity::gpu(1), 63)].into();
        carry_into(&mut last, before, &topology);
        let expected: HashMap<Entity, i64> =
            [(Entity::gpu(1), 63), (Entity::gpu(2), 79), (kept, 43)].into();
        assert_eq!(last, expected);
    }
}
