//! The node as NVML sees it: GPUs by NVML index (DCGM's GPU ids are the same indices), their
//! identity, and the GPU instances of MIG-enabled GPUs, walked by MIG device index.

use crate::collect::topology::{Gpu, Instance, Topology};
use dcgm_sys::{Entity, EntityGroup};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// More MIG slots than any GPU has (7 on an A100/H100): a bound on a walk when an NVML
/// answers a nonsensical maximum.
const MAX_MIG_SLOTS: u32 = 64;

/// NVML refused a call the node's discovery cannot do without.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("nvmlDeviceGetCount: {0}")]
    Count(#[source] Box<NvmlError>),
    /// A GPU's identity (without `--fake-gpus`).
    #[error("NVML GPU {index}: {source}")]
    Gpu { index: u32, source: Box<NvmlError> },
    #[error("GPU {gpu}: nvmlDeviceGetMaxMigDeviceCount: {source}")]
    MigSlots { gpu: u32, source: Box<NvmlError> },
}

pub(super) fn topology(nvml: &Nvml, fake_gpus: bool) -> Result<Topology, DiscoverError> {
    let count = nvml
        .device_count()
        .map_err(|e| DiscoverError::Count(Box::new(e)))?;
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
            Err(e) => {
                return Err(DiscoverError::Gpu {
                    index,
                    source: Box::new(e),
                })
            }
        }
    }
    t.instances = instances(nvml, &t.gpus)?;
    Ok(t)
}

/// Whether GPU `index`, lost at discovery, answers again (anything but a full identity
/// counts as still lost).
pub(super) fn answers_again(nvml: &Nvml, index: u32) -> bool {
    gpu(nvml, index).is_ok()
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

/// The GPU instances of every MIG-enabled GPU, numbered as DCGM 4.6 numbers them, so that
/// `-d i:<ids>` selects the same instances on both backends
/// (`DcgmCacheManager::InitializeGpuInstances`): per GPU, `gpu * max MIG devices + index`,
/// the index in DCGM's walk (by GPU-instance profile, then by NVML instance id within one).
/// Ordered by entity id, as DCGM lists them.
pub(super) fn instances(nvml: &Nvml, gpus: &[Gpu]) -> Result<Vec<Instance>, DiscoverError> {
    let mut out: Vec<Instance> = Vec::new();
    for g in gpus {
        let Ok(d) = nvml.device_by_index(g.id) else {
            continue;
        };
        if !d.mig_mode().is_ok_and(|m| m.current == 1) {
            continue;
        }
        let slots = d.mig_device_count().map_err(|e| DiscoverError::MigSlots {
            gpu: g.id,
            source: Box::new(e),
        })?;
        let mut found: Vec<(u32, String)> = Vec::new();
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
            // A further compute instance of a GPU instance already listed is skipped.
            if !found.iter().any(|(i, _)| *i == gi) {
                found.push((gi, profile_of(&mig.name().unwrap_or_default())));
            }
        }
        let memory_mib = d.memory_info().map_or(0, |m| m.total >> 20);
        found.sort_by_key(|(gi, p)| (profile_rank(p, memory_mib), *gi));
        for (index, (gi, profile)) in (0u32..).zip(found) {
            let id = g.id * slots + index;
            out.push(Instance {
                entity: Entity::new(EntityGroup::GpuInstance, id),
                gpu: g.id,
                gpu_instance: id,
                nvml_instance_id: gi,
                compute_instance: None,
                profile,
            });
        }
    }
    out.sort_by_key(|i| (i.gpu, i.entity.id));
    Ok(out)
}

/// Keeps the GPUs of `uuids` (and their instances) alone; GPUs lost at discovery, whose
/// UUID is unknown, go too.
pub(super) fn keep_only(t: &mut Topology, uuids: &[String]) {
    t.gpus.retain(|g| uuids.contains(&g.uuid));
    let kept: Vec<u32> = t.gpus.iter().map(|g| g.id).collect();
    t.instances.retain(|i| kept.contains(&i.gpu));
    t.lost_gpus.clear();
}

/// The rank of a GPU-instance profile in DCGM's walk: NVML's profile index
/// (`NVML_GPU_INSTANCE_PROFILE_*`) of its name. 1, 2, 3, 4, 7, 8 and 6 slices are 0-6; `+me`
/// one and two slices 7 and 8; one slice with twice the memory (1g.20gb on an 80 GB GPU) 9;
/// `+gfx` 10-12; `-me` 13 and 14; `+me.all` 15 and 16; a name not understood after them all.
fn profile_rank(profile: &str, gpu_memory_mib: u64) -> u32 {
    const UNKNOWN: u32 = 64;
    let Some((slices, rest)) = profile.split_once("g.") else {
        return UNKNOWN;
    };
    let Some((gb, suffix)) = rest.split_once("gb") else {
        return UNKNOWN;
    };
    let (Ok(slices), Ok(gb)) = (slices.parse::<u32>(), gb.parse::<u64>()) else {
        return UNKNOWN;
    };
    // A slice's share of the GPU's memory is an eighth; "twice" allows for the reserve.
    let double = gpu_memory_mib > 0 && gb * 1024 * 8 * 10 > gpu_memory_mib * 16;
    match (suffix, slices) {
        ("", 1) if double => 9,
        ("", 1) => 0,
        ("", 2) => 1,
        ("", 3) => 2,
        ("", 4) => 3,
        ("", 7) => 4,
        ("", 8) => 5,
        ("", 6) => 6,
        ("+me", 1) => 7,
        ("+me", 2) => 8,
        ("+gfx", 1) => 10,
        ("+gfx", 2) => 11,
        ("+gfx", 4) => 12,
        ("-me", 1) => 13,
        ("-me", 2) => 14,
        ("+me.all", 1) => 15,
        ("+me.all", 2) => 16,
        _ => UNKNOWN,
    }
}

/// The MIG slot (index under its GPU) of the first MIG device of a GPU instance.
pub(super) fn slot_of(nvml: &Nvml, gpu: u32, gi: u32) -> Result<u32, NvmlError> {
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
    use nvml_wrapper::error::NvmlError;

    /// The start-up lines keep the words they had as text, NVML's own last.
    #[test]
    fn nvml_failures_name_the_call_and_the_library() {
        let why = NvmlError::NotSupported.to_string();
        let slots = super::DiscoverError::MigSlots {
            gpu: 3,
            source: Box::new(NvmlError::NotSupported),
        };
        assert_eq!(
            slots.to_string(),
            format!("GPU 3: nvmlDeviceGetMaxMigDeviceCount: {why}")
        );
        let load = super::super::LoadError {
            library: super::super::DEFAULT_LIBRARY.into(),
            source: Box::new(NvmlError::NotSupported),
        };
        assert_eq!(
            load.to_string(),
            format!("cannot load NVML (libnvidia-ml.so.1): {why}")
        );
    }

    #[test]
    fn profiles_rank_in_nvmls_profile_order() {
        let rank = |p: &str| super::profile_rank(p, 81920);
        let order = [
            "1g.10gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
            "1g.10gb+me",
            "1g.20gb",
            "1g.10gb+gfx",
            "1g.10gb-me",
            "1g.10gb+me.all",
        ];
        let ranks: Vec<u32> = order.iter().map(|p| rank(p)).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 7, 9, 10, 13, 15]);
        // An A100 40GB: 1g.5gb is the plain one-slice profile, 1g.10gb the double one.
        assert_eq!(super::profile_rank("1g.5gb", 40960), 0);
        assert_eq!(super::profile_rank("1g.10gb", 40960), 9);
        assert_eq!(rank("MIG"), 64);
    }

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
