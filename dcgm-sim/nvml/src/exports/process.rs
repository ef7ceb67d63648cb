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

/// Every simulated process is listed as running; none runs under MPS.
fn none<T>(_: &[ffi::ProcessInfo]) -> Vec<T> {
    Vec::new()
}

/// The `_v2`/`_v3` structs are `nvmlProcessInfo_t` itself.
fn same(list: &[ffi::ProcessInfo]) -> Vec<ffi::ProcessInfo> {
    list.to_vec()
}

/// The `*RunningProcesses*` exports: symbol, entry struct, whether it lists graphics
/// processes, and how the device's list becomes entries.
macro_rules! running_processes {
    ($($name:ident($info:ty, graphics: $graphics:literal, $entries:ident);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: Device,
            count: *mut c_uint,
            infos: *mut $info,
        ) -> Return {
            // SAFETY: nvml.h: `infos` holds `*infoCount` entries of the struct version the
            // symbol names (`_v2` and `_v3` share one layout).
            listing(device, $graphics, |l| unsafe { fill(count, infos, &$entries(l)) })
        }
    )*};
}

running_processes! {
    nvmlDeviceGetComputeRunningProcesses_v3(ffi::ProcessInfo, graphics: false, same);
    nvmlDeviceGetComputeRunningProcesses_v2(ffi::ProcessInfo, graphics: false, same);
    nvmlDeviceGetComputeRunningProcesses(ffi::ProcessInfoV1, graphics: false, v1);
    nvmlDeviceGetGraphicsRunningProcesses_v3(ffi::ProcessInfo, graphics: true, same);
    nvmlDeviceGetGraphicsRunningProcesses_v2(ffi::ProcessInfo, graphics: true, same);
    nvmlDeviceGetGraphicsRunningProcesses(ffi::ProcessInfoV1, graphics: true, v1);
    nvmlDeviceGetMPSComputeRunningProcesses_v3(ffi::ProcessInfo, graphics: false, none);
    nvmlDeviceGetMPSComputeRunningProcesses_v2(ffi::ProcessInfo, graphics: false, none);
    nvmlDeviceGetMPSComputeRunningProcesses(ffi::ProcessInfoV1, graphics: false, none);
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
