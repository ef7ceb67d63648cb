//! MIG: mode, MIG device handles under a parent and back, GPU/compute-instance ids.

use super::{api, put, with_device};
use crate::ffi::{self, Device, Return};
use crate::sim::Dev;
use dcgm_sim_model::node::Gpu;
use dcgm_sim_model::profile::MigLookup;
use std::ffi::c_uint;

/// A whole GPU of a model with MIG: a MIG device handle answers `on_mig_device`, a GPU
/// without MIG (T4) NOT_SUPPORTED.
fn mig_capable(dev: Dev<'_>, on_mig_device: Return) -> Result<&Gpu, Return> {
    let Dev::Gpu(g) = dev else {
        return Err(on_mig_device);
    };
    if g.mig_slices <= 0 {
        return Err(ffi::ERROR_NOT_SUPPORTED);
    }
    Ok(g)
}

/// Current and pending mode; models without MIG (T4) answer NOT_SUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Return {
    with_device(device, |_, dev| {
        let g = mig_capable(dev, ffi::ERROR_NOT_SUPPORTED)?;
        if current.is_null() || pending.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let mode = if g.mig.is_some() {
            ffi::DEVICE_MIG_ENABLE
        } else {
            ffi::DEVICE_MIG_DISABLE
        };
        // SAFETY: both non-NULL output uints (nvml.h).
        unsafe {
            put(current, mode)?;
            put(pending, mode)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: Device,
    is_mig: *mut c_uint,
) -> Return {
    with_device(device, |_, dev| {
        let v = c_uint::from(matches!(dev, Dev::Mig { .. }));
        // SAFETY: nvml.h: `isMigDevice` is an output uint.
        unsafe { put(is_mig, v) }
    })
}

/// Only MIG device handles have instance ids.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: Device, id: *mut c_uint) -> Return {
    with_device(device, |_, dev| match dev {
        // SAFETY: nvml.h: `id` is an output uint.
        Dev::Mig { gi, .. } => unsafe { put(id, gi.nvml_id) },
        Dev::Gpu(_) => Err(ffi::ERROR_NOT_SUPPORTED),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: Device, id: *mut c_uint) -> Return {
    with_device(device, |_, dev| match dev {
        // SAFETY: nvml.h: `id` is an output uint.
        Dev::Mig { ci, .. } => unsafe { put(id, ci.nvml_id) },
        Dev::Gpu(_) => Err(ffi::ERROR_NOT_SUPPORTED),
    })
}

/// Zero when MIG mode is off (nvml.h).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: Device,
    count: *mut c_uint,
) -> Return {
    with_device(device, |sim, dev| match dev {
        // SAFETY: nvml.h: `count` is an output uint.
        Dev::Gpu(g) => unsafe { put(count, sim.max_mig_devices(g)) },
        Dev::Mig { .. } => Err(ffi::ERROR_INVALID_ARGUMENT),
    })
}

/// Index beyond the maximum → INVALID_ARGUMENT; a free slot below it → NOT_FOUND.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: Device,
    index: c_uint,
    mig_device: *mut Device,
) -> Return {
    with_device(device, |sim, dev| {
        let g = mig_capable(dev, ffi::ERROR_INVALID_ARGUMENT)?;
        sim.hang_if_asked();
        if mig_device.is_null() || index >= sim.max_mig_devices(g).max(1) {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let mig = sim
            .mig_devices(g)
            .nth(index as usize)
            .ok_or(ffi::ERROR_NOT_FOUND)?;
        // SAFETY: non-NULL output handle (nvml.h).
        unsafe { put(mig_device, mig.handle() as Device) }
    })
}

/// With `mig_lookup = "injection"`, as DCGM's injection library: success and a NULL handle
/// for any input.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: Device,
    device: *mut Device,
) -> Return {
    api(|sim| {
        if sim.mig_lookup == MigLookup::Injection {
            // SAFETY: nvml.h: `device` is an output handle.
            return unsafe { put(device, std::ptr::null_mut()) };
        }
        match sim
            .device(mig_device as usize)
            .ok_or(ffi::ERROR_INVALID_ARGUMENT)?
        {
            // SAFETY: nvml.h: `device` is an output handle.
            Dev::Mig { gpu, .. } => unsafe { put(device, Dev::Gpu(gpu).handle() as Device) },
            Dev::Gpu(_) => Err(ffi::ERROR_INVALID_ARGUMENT),
        }
    })
}
