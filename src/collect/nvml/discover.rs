//! The node as NVML sees it: GPUs by NVML index (DCGM's GPU ids are the same indices), their
//! identity, and the GPU instances of MIG-enabled GPUs, walked by MIG device index.

use crate::collect::topology::{Gpu, Instance, Topology};
use dcgm_sys::{Entity, EntityGroup};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// More MIG slots than any GPU has (7 on an A100/H100): a bound on a walk when an NVML
/// answers a nonsensical maximum.
const MAX_MIG_SLOTS: u32 = 64;

/// GPU-instance entity ids per GPU: the entity of NVML GPU instance `gi` of GPU `gpu` is
/// `gpu * INSTANCES_PER_GPU + gi` (NVML numbers GPU instances from 1 to 14 at most).
pub const INSTANCES_PER_GPU: u32 = 16;

pub fn topology(nvml: &Nvml, fake_gpus: bool) -> Result<Topology, String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
    let mut t = Topology::default();
    for index in 0..count {
        match gpu(nvml, index) {
            Ok(g) => t.gpus.push(g),
            Err(NvmlError::GpuLost) => {
                tracing::warn!("GPU {index} is lost (fallen off the bus): not exported");
                t.lost_gpus.push(index);
            }
            Err(e) if fake_gpus => {
                t.warnings.push(format!(
                    "GPU {index}: cannot read its attributes ({e}); using fake{index}"
                ));
                t.gpus.push(Gpu {
                    id: index,
                    uuid: format!("fake{index}"),
                    pci_bus_id: String::new(),
                    model: String::new(),
                });
            }
            Err(e) => return Err(format!("NVML GPU {index}: {e}")),
        }
    }
    t.instances = instances(nvml, &t.gpus)?;
    Ok(t)
}

/// A GPU's identity; GPU_IS_LOST for one that has fallen off the bus (NVML still answers
/// its identity then, not its state).
fn gpu(nvml: &Nvml, index: u32) -> Result<Gpu, NvmlError> {
    let d = nvml.device_by_index(index)?;
    if let Err(NvmlError::GpuLost) = d.utilization_rates() {
        return Err(NvmlError::GpuLost);
    }
    Ok(Gpu {
        id: index,
        uuid: d.uuid()?,
        pci_bus_id: d.pci_info()?.bus_id,
        model: d.name()?,
    })
}

/// The GPU instances of every MIG-enabled GPU, ordered by GPU then NVML GPU-instance id.
pub fn instances(nvml: &Nvml, gpus: &[Gpu]) -> Result<Vec<Instance>, String> {
    let mut out: Vec<Instance> = Vec::new();
    for g in gpus {
        let Ok(d) = nvml.device_by_index(g.id) else {
            continue;
        };
        if !d.mig_mode().is_ok_and(|m| m.current == 1) {
            continue;
        }
        let slots = d
            .mig_device_count()
            .map_err(|e| format!("GPU {}: nvmlDeviceGetMaxMigDeviceCount: {e}", g.id))?;
        for slot in 0..slots.min(MAX_MIG_SLOTS) {
            let Ok(mig) = d.mig_device_by_index(slot) else {
                continue;
            };
            if dcgm_sys::nvml_ext::is_null(&mig) {
                continue;
            }
            let Some(gi) = dcgm_sys::nvml_ext::gpu_instance_id(&mig) else {
                continue;
            };
            if out
                .iter()
                .any(|i| i.gpu == g.id && i.nvml_instance_id == gi)
            {
                // A further compute instance of a GPU instance already listed.
                continue;
            }
            let name = mig.name().unwrap_or_default();
            let id = g.id * INSTANCES_PER_GPU + gi;
            out.push(Instance {
                entity: Entity::new(EntityGroup::GpuInstance, id),
                gpu: g.id,
                gpu_instance: id,
                nvml_instance_id: gi,
                compute_instance: None,
                profile: profile_of(&name),
            });
        }
    }
    out.sort_by_key(|i| (i.gpu, i.nvml_instance_id));
    Ok(out)
}

/// The MIG slot (index under its GPU) of the first MIG device of a GPU instance.
pub fn slot_of(nvml: &Nvml, gpu: u32, gi: u32) -> Result<u32, NvmlError> {
    let d = nvml.device_by_index(gpu)?;
    for slot in 0..d.mig_device_count()?.min(MAX_MIG_SLOTS) {
        let Ok(mig) = d.mig_device_by_index(slot) else {
            continue;
        };
        if !dcgm_sys::nvml_ext::is_null(&mig)
            && dcgm_sys::nvml_ext::gpu_instance_id(&mig) == Some(gi)
        {
            return Ok(slot);
        }
    }
    Err(NvmlError::NotFound)
}

/// The GPU-instance profile of a MIG device's name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" ->
/// "1g.10gb"), as DCGM's DCGM_FI_DEV_NAME of a GPU instance. A compute instance smaller
/// than its GPU instance is named with its own slices first ("MIG 3c.7g.80gb"): the GPU
/// instance's profile is the rest.
fn profile_of(name: &str) -> String {
    let p = name.rsplit_once("MIG ").map_or(name, |(_, p)| p).trim();
    match p.split_once("c.") {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => p,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_profile_is_the_end_of_the_mig_device_name() {
        assert_eq!(
            super::profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb"),
            "1g.10gb"
        );
        assert_eq!(
            super::profile_of("NVIDIA A100-SXM4-40GB MIG 3g.20gb"),
            "3g.20gb"
        );
        assert_eq!(super::profile_of("2g.20gb"), "2g.20gb");
        assert_eq!(
            super::profile_of("NVIDIA A100-SXM4-80GB MIG 3c.7g.80gb"),
            "7g.80gb"
        );
        assert_eq!(
            super::profile_of("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb"),
            "3g.20gb"
        );
    }
}
