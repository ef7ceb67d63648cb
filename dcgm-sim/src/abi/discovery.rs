//! Discovery exports: devices, attributes, entity lists, MIG and CPU hierarchies, NVLink,
//! profiling metric groups.

use super::layouts::{CpuHierarchyV2, CPU_HIERARCHY_V2};
use super::{api, ask, check_version, cleared, fill_slots, non_null, put_str, version_of};
use crate::proto::{DeviceAttributes, Reply, Request};
use dcgm_sys::ffi::*;
use dcgm_sys::versions::*;
use std::ffi::c_int;

/// # Safety
/// `list` and `count` are NULL or valid: `list` for `DCGM_MAX_NUM_DEVICES` ids.
unsafe fn all_devices(
    handle: dcgmHandle_t,
    list: *mut u32,
    count: *mut c_int,
    only_supported: bool,
) -> dcgmReturn_t {
    api(|| {
        non_null(list)?;
        non_null(count)?;
        let ids = ask!(
            handle,
            Request::GetAllDevices { only_supported },
            Reply::Ids
        );
        let n = ids.len().min(DCGM_MAX_NUM_DEVICES as usize);
        // SAFETY: the API gives `list` room for DCGM_MAX_NUM_DEVICES ids and `n` is at most
        // that; `count` is non-NULL and writable.
        unsafe {
            std::ptr::copy_nonoverlapping(ids.as_ptr(), list, n);
            *count = n as c_int;
        }
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetAllDevices(dcgmHandle_t, unsigned int gpuIdList[32], int *count)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetAllDevices(
    handle: dcgmHandle_t,
    list: *mut u32,
    count: *mut c_int,
) -> dcgmReturn_t {
    // SAFETY: the caller's pointers, passed on under the same contract.
    unsafe { all_devices(handle, list, count, false) }
}

/// `dcgmReturn_t dcgmGetAllSupportedDevices(dcgmHandle_t, unsigned int gpuIdList[32], int *count)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetAllSupportedDevices(
    handle: dcgmHandle_t,
    list: *mut u32,
    count: *mut c_int,
) -> dcgmReturn_t {
    // SAFETY: the caller's pointers, passed on under the same contract.
    unsafe { all_devices(handle, list, count, true) }
}

fn fill_attributes(out: &mut dcgmDeviceAttributes_v3, a: &DeviceAttributes) {
    out.clockSets.version = DEVICE_SUPPORTED_CLOCK_SETS_V1;
    // `clockSet` holds DCGM_MAX_CLOCKS entries.
    let sets = &mut out.clockSets;
    sets.count = fill_slots(&mut sets.clockSet, &a.clock_sets, |slot, &(mem, sm)| {
        slot.version = 1;
        slot.memClock = mem;
        slot.smClock = sm;
    });
    out.thermalSettings.version = DEVICE_THERMALS_V1;
    out.thermalSettings.slowdownTemp = a.slowdown_temp;
    out.thermalSettings.shutdownTemp = a.shutdown_temp;
    let p = &mut out.powerLimits;
    p.version = DEVICE_POWER_LIMITS_V1;
    p.curPowerLimit = a.power_limit_cur;
    p.defaultPowerLimit = a.power_limit_default;
    p.enforcedPowerLimit = a.power_limit_enforced;
    p.minPowerLimit = a.power_limit_min;
    p.maxPowerLimit = a.power_limit_max;
    let id = &mut out.identifiers;
    id.version = DEVICE_IDENTIFIERS_V1;
    put_str(&mut id.brandName, &a.brand);
    put_str(&mut id.deviceName, &a.name);
    put_str(&mut id.pciBusId, &a.pci_bus_id);
    put_str(&mut id.serial, &a.serial);
    put_str(&mut id.uuid, &a.uuid);
    put_str(&mut id.vbios, &a.vbios);
    put_str(&mut id.inforomImageVersion, &a.inforom_image_version);
    id.pciDeviceId = a.pci_device_id;
    id.pciSubSystemId = a.pci_subsystem_id;
    put_str(&mut id.driverVersion, &a.driver_version);
    id.virtualizationMode = a.virtualization_mode;
    let m = &mut out.memoryUsage;
    m.version = DEVICE_MEMORY_USAGE_V1;
    m.bar1Total = a.bar1_total_mb;
    m.fbTotal = a.fb_total_mb;
    m.fbUsed = a.fb_used_mb;
    m.fbFree = a.fb_free_mb;
    let s = &mut out.settings;
    s.version = DEVICE_SETTINGS_V2;
    s.persistenceModeEnabled = a.persistence_mode;
    s.migModeEnabled = a.mig_mode;
    s.confidentialComputeMode = a.confidential_compute_mode;
}

/// `dcgmReturn_t dcgmGetDeviceAttributes(dcgmHandle_t, unsigned int gpuId, dcgmDeviceAttributes_t *)`:
/// exactly `dcgmDeviceAttributes_version3`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetDeviceAttributes(
    handle: dcgmHandle_t,
    gpu_id: u32,
    attr: *mut dcgmDeviceAttributes_v3,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(attr, DEVICE_ATTRIBUTES) }?;
        let a = ask!(
            handle,
            Request::GetDeviceAttributes { gpu_id },
            Reply::DeviceAttributes
        );
        // SAFETY: the version says the caller's struct is a full v3, and it is plain data.
        fill_attributes(unsafe { cleared(attr) }, &a);
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetGpuStatus(dcgmHandle_t, unsigned int gpuId, DcgmEntityStatus_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetGpuStatus(
    handle: dcgmHandle_t,
    gpu_id: u32,
    status: *mut DcgmEntityStatus_t,
) -> dcgmReturn_t {
    api(|| {
        non_null(status)?;
        // SAFETY: non-NULL and writable per the API; "unknown" until the engine answers.
        unsafe { *status = DcgmEntityStatusUnknown };
        let s = ask!(handle, Request::GetGpuStatus { gpu_id }, Reply::Status);
        // SAFETY: as above.
        unsafe { *status = s };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetEntityGroupEntities(dcgmHandle_t, dcgm_field_entity_group_t,
/// dcgm_field_eid_t *entities, int *numEntities, unsigned int flags)`: `*numEntities` is the
/// capacity in and the count out; too small → `DCGM_ST_INSUFFICIENT_SIZE`, nothing copied.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetEntityGroupEntities(
    handle: dcgmHandle_t,
    entity_group: dcgm_field_entity_group_t,
    entities: *mut dcgm_field_eid_t,
    num_entities: *mut c_int,
    flags: u32,
) -> dcgmReturn_t {
    api(|| {
        non_null(entities)?;
        non_null(num_entities)?;
        // SAFETY: non-NULL and readable per the API.
        let capacity = usize::try_from(unsafe { *num_entities }).unwrap_or(0);
        let only_supported = flags & DCGM_GEGE_FLAG_ONLY_SUPPORTED != 0;
        let ids = ask!(
            handle,
            Request::GetEntityGroupEntities {
                entity_group,
                only_supported,
            },
            Reply::Ids
        );
        // SAFETY: `num_entities` as above.
        unsafe { *num_entities = c_int::try_from(ids.len()).unwrap_or(c_int::MAX) };
        if ids.len() > capacity {
            return Err(DCGM_ST_INSUFFICIENT_SIZE);
        }
        // SAFETY: the caller said `entities` has room for `capacity` ids, and we copy fewer.
        unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), entities, ids.len()) };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetGpuInstanceHierarchy(dcgmHandle_t, dcgmMigHierarchy_v2 *)`:
/// `dcgmMigHierarchy_version2` only.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetGpuInstanceHierarchy(
    handle: dcgmHandle_t,
    hierarchy: *mut dcgmMigHierarchy_v2,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(hierarchy, MIG_HIERARCHY_V2) }?;
        let rows = ask!(
            handle,
            Request::GetGpuInstanceHierarchy,
            Reply::MigHierarchy
        );
        // SAFETY: the version says the caller's struct is a full v2 (73 KB; written in
        // place, never copied to the stack).
        let h = unsafe { cleared(hierarchy) };
        h.count = fill_slots(&mut h.entityList, &rows, |slot, row| {
            slot.entity = dcgmGroupEntityPair_t {
                entityGroupId: row.entity.0,
                entityId: row.entity.1,
            };
            slot.parent = dcgmGroupEntityPair_t {
                entityGroupId: row.parent.0,
                entityId: row.parent.1,
            };
            put_str(&mut slot.info.gpuUuid, &row.gpu_uuid);
            slot.info.nvmlGpuIndex = row.nvml_gpu_index;
            slot.info.nvmlInstanceId = row.nvml_instance_id;
            slot.info.nvmlComputeInstanceId = row.nvml_compute_instance_id;
            slot.info.nvmlMigProfileId = row.nvml_mig_profile_id;
            slot.info.nvmlProfileSlices = row.nvml_profile_slices;
        });
        Ok(())
    })
}

/// Copies link states into a fixed-size array, leaving the rest NotSupported (0).
fn put_states(dst: &mut [dcgmNvLinkLinkState_t], states: &[u32]) {
    for (d, &s) in dst.iter_mut().zip(states) {
        *d = s;
    }
}

/// `dcgmReturn_t dcgmGetNvLinkLinkStatus(dcgmHandle_t, dcgmNvLinkStatus_v5 *)`: accepts
/// the 4.6 layout (v5, 36 links per GPU; VER_MISMATCH from a library of an older release)
/// and the 4.0–4.5 one (v4, 18 links per GPU).
#[no_mangle]
pub unsafe extern "C" fn dcgmGetNvLinkLinkStatus(
    handle: dcgmHandle_t,
    status: *mut dcgmNvLinkStatus_v5,
) -> dcgmReturn_t {
    api(|| {
        non_null(status)?;
        // SAFETY: non-NULL.
        let version = unsafe { version_of(status) };
        // v5 is a 4.6.0 struct: a library of an older release does not know it.
        let v5 = super::lifecycle::library_release() >= dcgm_sys::releases::NVLINK_STATUS_V5;
        if !(version == NVLINK_STATUS_V5 && v5) && version != NVLINK_STATUS_V4 {
            return Err(DCGM_ST_VER_MISMATCH);
        }
        let ls = ask!(handle, Request::GetNvLinkLinkStatus, Reply::LinkStatus);
        let gpus = &ls.gpus[..ls.gpus.len().min(DCGM_MAX_NUM_DEVICES as usize)];
        let switches = &ls.switches[..ls.switches.len().min(DCGM_MAX_NUM_SWITCHES as usize)];
        macro_rules! fill {
            ($s:expr) => {{
                let s = $s;
                s.numGpus = gpus.len() as u32;
                for (slot, (id, states)) in s.gpus.iter_mut().zip(gpus) {
                    slot.entityId = *id;
                    put_states(&mut slot.linkState, states);
                }
                s.numNvSwitches = switches.len() as u32;
                for (slot, (id, states)) in s.nvSwitches.iter_mut().zip(switches) {
                    slot.entityId = *id;
                    put_states(&mut slot.linkState, states);
                }
            }};
        }
        if version == NVLINK_STATUS_V5 {
            // SAFETY: the version says the caller's struct is a full v5.
            fill!(unsafe { cleared(status) });
        } else {
            let v4 = status.cast::<dcgmNvLinkStatus_v4>();
            // SAFETY: the version says the caller's struct is a (smaller) v4; only that
            // much is touched.
            fill!(unsafe { cleared(v4) });
        }
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetNvLinkP2PStatus(dcgmHandle_t, dcgmNvLinkP2PStatus_v1 *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetNvLinkP2PStatus(
    handle: dcgmHandle_t,
    status: *mut dcgmNvLinkP2PStatus_v1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(status, NVLINK_P2P_STATUS_V1) }?;
        let rows = ask!(handle, Request::GetNvLinkP2PStatus, Reply::P2PStatus);
        // SAFETY: the version says the caller's struct is a full v1.
        let s = unsafe { cleared(status) };
        s.numGpus = fill_slots(&mut s.gpus, &rows, |slot, (id, peers)| {
            slot.entityId = *id;
            for (d, &p) in slot.linkStatus.iter_mut().zip(peers) {
                *d = p;
            }
        });
        Ok(())
    })
}

fn core_bitmask(cores: &[u32]) -> dcgmCpuHierarchyOwnedCores_v1 {
    let mut owned = dcgmCpuHierarchyOwnedCores_v1 {
        version: CPU_HIERARCHY_OWNED_CORES_V1,
        bitmask: [0; 16],
    };
    for &c in cores {
        if let Some(word) = owned.bitmask.get_mut(c as usize / 64) {
            *word |= 1u64 << (c % 64);
        }
    }
    owned
}

fn cpu_rows(handle: dcgmHandle_t) -> Result<Vec<(u32, Vec<u32>, String)>, dcgmReturn_t> {
    Ok(ask!(handle, Request::GetCpuHierarchy, Reply::CpuHierarchy))
}

/// `dcgmReturn_t dcgmGetCpuHierarchy(dcgmHandle_t, dcgmCpuHierarchy_v1 *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetCpuHierarchy(
    handle: dcgmHandle_t,
    h: *mut dcgmCpuHierarchy_v1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(h, CPU_HIERARCHY_V1) }?;
        let rows = cpu_rows(handle)?;
        // SAFETY: the version says the caller's struct is a full v1.
        let h = unsafe { cleared(h) };
        h.numCpus = fill_slots(&mut h.cpus, &rows, |slot, (id, cores, _)| {
            slot.cpuId = *id;
            slot.ownedCores = core_bitmask(cores);
        });
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGetCpuHierarchy_v2(dcgmHandle_t, dcgmCpuHierarchy_v2 *)`: v1 plus a
/// serial number per CPU (the profile's `[cpus] serials`, else empty).
#[no_mangle]
pub unsafe extern "C" fn dcgmGetCpuHierarchy_v2(
    handle: dcgmHandle_t,
    h: *mut CpuHierarchyV2,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(h, CPU_HIERARCHY_V2) }?;
        let rows = cpu_rows(handle)?;
        // SAFETY: the version says the caller's struct is a full v2.
        let h = unsafe { cleared(h) };
        h.num_cpus = fill_slots(&mut h.cpus, &rows, |slot, (id, cores, serial)| {
            slot.cpu_id = *id;
            slot.owned_cores = core_bitmask(cores);
            put_str(&mut slot.serial, serial);
        });
        Ok(())
    })
}

/// `dcgmReturn_t dcgmProfGetSupportedMetricGroups(dcgmHandle_t, dcgmProfGetMetricGroups_t *)`:
/// version 3; `gpuId` is an input.
#[no_mangle]
pub unsafe extern "C" fn dcgmProfGetSupportedMetricGroups(
    handle: dcgmHandle_t,
    groups: *mut dcgmProfGetMetricGroups_v3,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(groups, PROF_GET_METRIC_GROUPS_V3) }?;
        // SAFETY: the version says the caller's struct is a full v3.
        let gpu_id = unsafe { (*groups).gpuId };
        let list = ask!(
            handle,
            Request::ProfGetSupportedMetricGroups { gpu_id },
            Reply::MetricGroups
        );
        // SAFETY: as above.
        let g = unsafe { cleared(groups) };
        g.gpuId = gpu_id;
        g.numMetricGroups = fill_slots(&mut g.metricGroups, &list, |slot, mg| {
            slot.majorId = mg.major_id;
            slot.minorId = mg.minor_id;
            slot.numFieldIds = fill_slots(&mut slot.fieldIds, &mg.field_ids, |d, &id| *d = id);
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_become_bits() {
        let m = core_bitmask(&[0, 63, 64, 1023, 5000]);
        assert_eq!(m.bitmask[0], 1 | 1 << 63);
        assert_eq!(m.bitmask[1], 1);
        assert_eq!(m.bitmask[15], 1 << 63);
        assert_eq!(m.version, CPU_HIERARCHY_OWNED_CORES_V1);
    }
}
