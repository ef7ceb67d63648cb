//! What the node has, as DCGM reports it: GPUs with their identity, MIG instances,
//! NvSwitches, NVLink links and CPUs. Discovered once per (re)connect and re-checked for
//! MIG changes on every collection.

use dcgm_sys::value::classify_str;
use dcgm_sys::{DeviceAttributes, Entity, EntityGroup, LinkId, LinkState, MigEntity, Session};

pub(crate) use crate::model::node::{Cpu, Gpu, Instance, Link, Topology};

impl Topology {
    /// `fake_gpus`: a GPU whose attributes cannot be read becomes `fake<N>` with empty
    /// PCI bus id and model (dcgm-exporter's --fake-gpus) instead of failing the start.
    pub(crate) fn discover(session: &Session, fake_gpus: bool) -> dcgm_sys::Result<Topology> {
        let mut t = Topology::default();
        for (index, id) in session.gpus(false)?.into_iter().enumerate() {
            // Listed, yet refused in any group: one such GPU would fail every GPU's watch.
            if let Ok(Some(why)) = session.gpu_is_unusable(id) {
                tracing::warn!("GPU {id} is {why}: not exported");
                continue;
            }
            let a = match usable_gpu(session, id) {
                Ok(Some(a)) => a,
                Ok(None) => {
                    tracing::warn!("GPU {id} is lost (fallen off the bus): not exported");
                    t.lost_gpus.push(id);
                    continue;
                }
                Err(e) if fake_gpus => {
                    t.warnings.push(format!(
                        "GPU {id}: cannot read its attributes ({e}); using fake{index}"
                    ));
                    t.gpus.push(Gpu {
                        id,
                        uuid: format!("fake{index}"),
                        pci_bus_id: String::new(),
                        model: String::new(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            let clean = |s: String| classify_str(&s).map(str::to_string).unwrap_or_default();
            t.gpus.push(Gpu {
                id,
                uuid: clean(a.uuid),
                pci_bus_id: clean(a.pci_bus_id),
                model: clean(a.name),
            });
        }
        t.mig_rows = mig_rows(session)?;
        t.instances = instances(session, &t.mig_rows)?;
        // Nothing of a lost GPU can be watched: neither its MIG instances nor its links.
        let usable: Vec<u32> = t.gpus.iter().map(|g| g.id).collect();
        t.instances.retain(|i| usable.contains(&i.gpu));
        // Switches, links and CPUs are optional hardware: a failure means "none here".
        match session.entities(EntityGroup::Switch, false) {
            Ok(s) => t.switches = s,
            Err(e) => t.warnings.push(format!("no NvSwitches: {e}")),
        }
        match session.link_status() {
            Ok(ls) => t.links = links(&ls, &usable),
            Err(e) => t.warnings.push(format!("no NVLink status: {e}")),
        }
        match session.cpu_hierarchy() {
            Ok(cpus) => {
                t.cpus = cpus
                    .into_iter()
                    .map(|c| Cpu {
                        id: c.id,
                        cores: c.cores,
                        serial: c.serial,
                    })
                    .collect()
            }
            Err(e) => t.warnings.push(format!("no CPUs: {e}")),
        }
        // The event history's names, MIG changes and GPUs lost, back, unbound or bound.
        crate::model::events::topology(&t);
        Ok(t)
    }

    pub(crate) fn gpu(&self, id: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.id == id)
    }

    /// GPU instances of a GPU (not compute instances).
    pub(crate) fn gpu_instances_of(&self, gpu: u32) -> impl Iterator<Item = &Instance> {
        self.instances
            .iter()
            .filter(move |i| i.gpu == gpu && i.compute_instance.is_none())
    }

    pub(crate) fn mig_enabled(&self, gpu: u32) -> bool {
        self.gpu_instances_of(gpu).next().is_some()
    }
}

/// The NVLink links DCGM reports (supported ones only), of usable GPUs and of switches.
fn links(ls: &dcgm_sys::LinkStatus, usable: &[u32]) -> Vec<Link> {
    let mut links = Vec::new();
    let parents = ls
        .gpus
        .iter()
        .map(|(id, st)| (EntityGroup::Gpu, id, st))
        .chain(
            ls.switches
                .iter()
                .map(|(id, st)| (EntityGroup::Switch, id, st)),
        );
    for (parent, id, states) in parents {
        if parent == EntityGroup::Gpu && !usable.contains(id) {
            continue;
        }
        links.extend(
            states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s != LinkState::NotSupported)
                .map(|(i, s)| Link {
                    id: LinkId {
                        parent,
                        index: i as u16,
                        parent_id: *id as u8,
                    },
                    state: *s,
                }),
        );
    }
    links
}

/// The attributes of a GPU that can be watched; `None` for a lost GPU, which DCGM reports
/// either as GPU_IS_LOST or as OK with blank attributes (its status then says Lost). A lost
/// GPU cannot join a group, so watching it would fail for every GPU.
fn usable_gpu(session: &Session, id: u32) -> dcgm_sys::Result<Option<DeviceAttributes>> {
    // Libraries without dcgmGetGpuStatus still answer GPU_IS_LOST below.
    if session.gpu_is_lost(id).unwrap_or(false) {
        return Ok(None);
    }
    match session.device_attributes(id) {
        Ok(a) => Ok(Some(a)),
        Err(e) if e.status() == Some(dcgm_sys::Status::GpuIsLost) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The raw MIG hierarchy; empty where the node has no MIG support.
pub(crate) fn mig_rows(session: &Session) -> dcgm_sys::Result<Vec<MigEntity>> {
    match session.mig_hierarchy() {
        Err(e) if e.status() == Some(dcgm_sys::Status::NotSupported) => Ok(Vec::new()),
        r => r,
    }
}

/// Reads the MIG hierarchy and the profile name of every GPU instance.
fn instances(session: &Session, rows: &[MigEntity]) -> dcgm_sys::Result<Vec<Instance>> {
    let gis: Vec<&MigEntity> = rows
        .iter()
        .filter(|r| r.entity.group == EntityGroup::GpuInstance)
        .collect();
    // Profile names are field 50 of each GI, read live as dcgm-exporter does.
    let mut names = std::collections::HashMap::new();
    if !gis.is_empty() {
        let ents: Vec<Entity> = gis.iter().map(|g| g.entity).collect();
        for r in session.latest_values(&ents, &[crate::collect::fields::DEV_NAME], true)? {
            if let Some(dcgm_sys::Value::String(s)) = r.reading.value() {
                names.insert(r.entity.id, s.clone());
            }
        }
    }
    let mut out = Vec::new();
    for r in rows {
        match r.entity.group {
            EntityGroup::GpuInstance => out.push(Instance {
                entity: r.entity,
                gpu: r.parent.id,
                gpu_instance: r.entity.id,
                nvml_instance_id: r.nvml_instance_id,
                compute_instance: None,
                profile: names.get(&r.entity.id).cloned().unwrap_or_default(),
            }),
            EntityGroup::ComputeInstance => {
                let Some(gi) = gis.iter().find(|g| g.entity.id == r.parent.id) else {
                    continue;
                };
                out.push(Instance {
                    entity: r.entity,
                    gpu: gi.parent.id,
                    gpu_instance: gi.entity.id,
                    nvml_instance_id: gi.nvml_instance_id,
                    compute_instance: r.nvml_compute_instance_id,
                    profile: names.get(&gi.entity.id).cloned().unwrap_or_default(),
                })
            }
            _ => {}
        }
    }
    Ok(out)
}
