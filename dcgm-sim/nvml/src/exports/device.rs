//! Enumeration and identity: counts, handles by index / UUID / PCI bus id, UUID, name,
//! index, minor number, PCI info, memory, compute capability.

use super::{api, check_version, get_str, put, put_str, with_device};
use crate::ffi::{self, Device, Return};
use crate::sim::{self, alive, Dev};
use dcgm_sim_model::profile::MigLookup;
use std::ffi::{c_char, c_int, c_uint};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Return {
    // SAFETY: nvml.h: `count` is an output uint.
    api(|sim| unsafe { put(count, sim.gpu_count()) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> Return {
    // SAFETY: same contract as the v2 symbol.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut Device,
) -> Return {
    api(|sim| {
        let dev = sim.gpu(index).ok_or(ffi::ERROR_INVALID_ARGUMENT)?;
        // SAFETY: nvml.h: `device` is an output handle.
        unsafe { put(device, dev.handle() as Device) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut Device) -> Return {
    // SAFETY: same contract as the v2 symbol.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// GPU UUIDs give GPU handles, `MIG-` UUIDs MIG device handles. With `mig_lookup =
/// "injection"`, as DCGM's injection library: success and a NULL handle for a MIG UUID or
/// an unknown one.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Device,
) -> Return {
    api(|sim| {
        // SAFETY: nvml.h: `uuid` is a NUL-terminated string.
        let uuid = unsafe { get_str(uuid) }?;
        if device.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        if uuid.starts_with("MIG-") {
            sim.hang_if_asked();
        }
        let found = sim.by_uuid(&uuid);
        if sim.mig_lookup == MigLookup::Injection && !matches!(found, Some(Dev::Gpu(_))) {
            // SAFETY: nvml.h: `device` is an output handle.
            return unsafe { put(device, std::ptr::null_mut()) };
        }
        let dev = found.ok_or(ffi::ERROR_NOT_FOUND)?;
        // SAFETY: nvml.h: `device` is an output handle.
        unsafe { put(device, dev.handle() as Device) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pci_bus_id: *const c_char,
    device: *mut Device,
) -> Return {
    api(|sim| {
        // SAFETY: nvml.h: `pciBusId` is a NUL-terminated string.
        let id = unsafe { get_str(pci_bus_id) }?;
        if device.is_null() || sim::parse_bus_id(&id).is_none() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let dev = sim.by_pci_bus_id(&id).ok_or(ffi::ERROR_NOT_FOUND)?;
        // SAFETY: nvml.h: `device` is an output handle.
        unsafe { put(device, dev.handle() as Device) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    pci_bus_id: *const c_char,
    device: *mut Device,
) -> Return {
    // SAFETY: same contract as the v2 symbol.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device) }
}

/// The device's strings, written as NVML's string getters write (`out` holds `length`
/// bytes; too small → INSUFFICIENT_SIZE).
macro_rules! device_strings {
    ($($name:ident => $text:path;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(device: Device, out: *mut c_char, length: c_uint) -> Return {
            // SAFETY: nvml.h: `out` holds `length` bytes.
            with_device(device, |_, dev| unsafe { put_str(out, length, &$text(&dev)) })
        }
    )*};
}

device_strings! {
    nvmlDeviceGetUUID => sim::uuid;
    nvmlDeviceGetName => sim::name;
}

/// The NVML index of a GPU (= the simulated DCGM's GPU id). MIG devices have none.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) -> Return {
    with_device(device, |_, dev| match dev {
        // SAFETY: nvml.h: `index` is an output uint.
        Dev::Gpu(g) => unsafe { put(index, g.id) },
        Dev::Mig { .. } => Err(ffi::ERROR_NOT_SUPPORTED),
    })
}

/// `/dev/nvidiaN`: on a simulated host the minor number is the index.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: Device, minor: *mut c_uint) -> Return {
    with_device(device, |_, dev| match dev {
        // SAFETY: nvml.h: `minorNumber` is an output uint.
        Dev::Gpu(g) => unsafe { put(minor, g.id) },
        Dev::Mig { .. } => Err(ffi::ERROR_NOT_SUPPORTED),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut ffi::PciInfo) -> Return {
    // SAFETY: nvml.h: `pci` points to an nvmlPciInfo_t.
    with_device(device, |_, dev| unsafe { put(pci, sim::pci_info(&dev)) })
}

/// v1 and v2 fill the same `nvmlPciInfo_t` (v3 only changed how the driver reads it).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(device: Device, pci: *mut ffi::PciInfo) -> Return {
    // SAFETY: same contract as the v3 symbol.
    unsafe { nvmlDeviceGetPciInfo_v3(device, pci) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(device: Device, pci: *mut ffi::PciInfo) -> Return {
    // SAFETY: same contract as the v3 symbol.
    unsafe { nvmlDeviceGetPciInfo_v3(device, pci) }
}

/// The device's memory, (total, reserved, used) bytes, as the struct `make` builds; `check`
/// runs first, before the lost-GPU check (the v2 struct's version).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn memory_info<T>(
    device: Device,
    out: *mut T,
    check: impl FnOnce() -> Result<(), Return>,
    make: impl FnOnce(u64, u64, u64) -> T,
) -> Return {
    with_device(device, |sim, dev| {
        check()?;
        alive(&dev)?;
        let (total, reserved, used) = sim.memory(&dev);
        // SAFETY: the caller's contract.
        unsafe { put(out, make(total, reserved, used)) }
    })
}

/// v1: `used` includes the reserved memory, so total = free + used.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: Device,
    memory: *mut ffi::Memory,
) -> Return {
    let v1 = |total, reserved, used| ffi::Memory {
        total,
        free: total - reserved - used,
        used: reserved + used,
    };
    // SAFETY: nvml.h: `memory` points to an nvmlMemory_t.
    unsafe { memory_info(device, memory, || Ok(()), v1) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: Device,
    memory: *mut ffi::MemoryV2,
) -> Return {
    // SAFETY: nvml.h: NULL or an nvmlMemory_v2_t whose version the caller set.
    let version = || unsafe { check_version(memory, ffi::MEMORY_V2) };
    let v2 = |total, reserved, used| ffi::MemoryV2 {
        version: ffi::MEMORY_V2,
        total,
        reserved,
        free: total - reserved - used,
        used,
    };
    // SAFETY: as above, valid for a write of nvmlMemory_v2_t.
    unsafe { memory_info(device, memory, version, v2) }
}

/// From the model (compute capability 90 → 9.0); a MIG device reports its parent's.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: Device,
    major: *mut c_int,
    minor: *mut c_int,
) -> Return {
    with_device(device, |_, dev| {
        if major.is_null() || minor.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let cc = dev.gpu().compute_capability;
        // SAFETY: both non-NULL output ints (nvml.h).
        unsafe {
            put(major, (cc / 10) as c_int)?;
            put(minor, (cc % 10) as c_int)
        }
    })
}
