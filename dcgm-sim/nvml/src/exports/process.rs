//! Running processes (compute, graphics, MPS; the v1 struct for the unversioned symbols,
//! `nvmlProcessInfo_t` for `_v2`/`_v3`) and per-process utilisation.

use super::with_device;
use crate::ffi::{self, Device, Return};
use crate::sim::{alive, Dev};
use std::ffi::c_uint;

/// NVML's two-call protocol: `*count` smaller than the list (0 to ask) → the list's length
/// in `*count` and INSUFFICIENT_SIZE (SUCCESS if the list is empty); else the entries.
///
/// # Safety
/// `count` is NULL or a valid uint; `out` is NULL or valid for `*count` writes of `T`.
unsafe fn fill<T>(count: *mut c_uint, out: *mut T, list: &[T]) -> Result<(), Return>
where
    T: Copy,
{
    if count.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, valid by the caller's contract.
    let room = unsafe { *count } as usize;
    // SAFETY: as above.
    unsafe { *count = list.len() as c_uint };
    if room < list.len() {
        return Err(ffi::ERROR_INSUFFICIENT_SIZE);
    }
    if list.is_empty() {
        return Ok(());
    }
    if out.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: `out` holds `room` >= list.len() elements (caller's contract); the source is
    // a separate Rust allocation.
    unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), out, list.len()) };
    Ok(())
}

fn listing(
    device: Device,
    graphics: bool,
    write: impl FnOnce(&[ffi::ProcessInfo]) -> Result<(), Return>,
) -> Return {
    with_device(device, |sim, dev| {
        alive(&dev)?;
        write(&sim.processes(&dev, graphics))
    })
}

fn v1(list: &[ffi::ProcessInfo]) -> Vec<ffi::ProcessInfoV1> {
    list.iter()
        .map(|p| ffi::ProcessInfoV1 {
            pid: p.pid,
            used_gpu_memory: p.used_gpu_memory,
        })
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_t.
    listing(device, false, |l| unsafe { fill(count, infos, l) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_v2_t (same layout).
    listing(device, false, |l| unsafe { fill(count, infos, l) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfoV1,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_v1_t.
    listing(device, false, |l| unsafe { fill(count, infos, &v1(l)) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_t.
    listing(device, true, |l| unsafe { fill(count, infos, l) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_v2_t (same layout).
    listing(device, true, |l| unsafe { fill(count, infos, l) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfoV1,
) -> Return {
    // SAFETY: nvml.h: `infos` holds `*infoCount` nvmlProcessInfo_v1_t.
    listing(device, true, |l| unsafe { fill(count, infos, &v1(l)) })
}

/// No simulated process runs under MPS: an empty list.
///
/// # Safety
/// As the `*RunningProcesses` exports: `count` is NULL or a valid uint, `infos` NULL or
/// valid for `*count` entries.
unsafe fn mps<T: Copy>(device: Device, count: *mut c_uint, infos: *mut T) -> Return {
    // SAFETY: the caller's contract, passed on.
    listing(device, false, |_| unsafe { fill::<T>(count, infos, &[]) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h's contract for this export is the one `mps` requires.
    unsafe { mps(device, count, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v2(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfo,
) -> Return {
    // SAFETY: nvml.h's contract for this export is the one `mps` requires.
    unsafe { mps(device, count, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses(
    device: Device,
    count: *mut c_uint,
    infos: *mut ffi::ProcessInfoV1,
) -> Return {
    // SAFETY: nvml.h's contract for this export is the one `mps` requires.
    unsafe { mps(device, count, infos) }
}

/// Samples newer than `lastSeenTimeStamp` (µs); none → NOT_FOUND, as nvml.h says. A NULL
/// buffer asks for the count (INSUFFICIENT_SIZE). Not supported on MIG (nvml.h's note).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: Device,
    utilization: *mut ffi::ProcessUtilizationSample,
    count: *mut c_uint,
    last_seen_time_stamp: u64,
) -> Return {
    with_device(device, |sim, dev| {
        let g = match dev {
            Dev::Gpu(g) if g.mig.is_none() => g,
            _ => return Err(ffi::ERROR_NOT_SUPPORTED),
        };
        alive(&dev)?;
        if count.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let samples = sim.utilization_samples(g, last_seen_time_stamp);
        if samples.is_empty() {
            return Err(ffi::ERROR_NOT_FOUND);
        }
        if utilization.is_null() {
            // SAFETY: non-NULL output uint.
            unsafe { *count = samples.len() as c_uint };
            return Err(ffi::ERROR_INSUFFICIENT_SIZE);
        }
        // SAFETY: nvml.h: `utilization` holds `*processSamplesCount` samples.
        unsafe { fill(count, utilization, &samples) }
    })
}
