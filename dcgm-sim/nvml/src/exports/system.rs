//! Library lifecycle and system queries: init/shutdown (reference counted, as NVML since
//! 4.x), error strings, driver/NVML/CUDA versions, process names.

use super::{api, init, put, put_str, shutdown};
use crate::ffi::{self, Return};
use std::ffi::{c_char, c_int, c_uint};

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> Return {
    init()
}

/// The pre-v2 entry point; the simulator has no GPUs it could fail to attach to, so both
/// behave alike.
#[no_mangle]
pub extern "C" fn nvmlInit() -> Return {
    init()
}

/// Flags (NO_GPUS, NO_ATTACH) change nothing for simulated GPUs.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Return {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> Return {
    shutdown()
}

/// Works before init, like NVML's; unknown codes read "Unknown Error".
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: Return) -> *const c_char {
    ffi::ERROR_STRINGS
        .iter()
        .find(|(code, _)| *code == result)
        .map_or(c"Unknown Error", |(_, s)| *s)
        .as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> Return {
    // SAFETY: nvml.h: `version` holds `length` bytes.
    api(|sim| unsafe { put_str(version, length, sim.driver_version()) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> Return {
    // SAFETY: nvml.h: `version` holds `length` bytes.
    api(|sim| unsafe { put_str(version, length, sim.nvml_version()) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> Return {
    // SAFETY: nvml.h: `version` is an output int.
    api(|sim| unsafe { put(version, sim.cuda_driver_version() as c_int) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> Return {
    // SAFETY: as nvmlSystemGetCudaDriverVersion.
    unsafe { nvmlSystemGetCudaDriverVersion(version) }
}

/// Names of the profile's processes; other pids are NOT_FOUND.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> Return {
    api(|sim| {
        let n = sim.process_name(pid).ok_or(ffi::ERROR_NOT_FOUND)?;
        // SAFETY: nvml.h: `name` holds `length` bytes.
        unsafe { put_str(name, length, n) }
    })
}
