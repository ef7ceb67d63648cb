//! `nvmlDeviceGetSamples`: a GPU's recent power, utilisation and clock samples from the
//! driver's buffers (`crate::samples`), as nvml.h describes the call: `samples` NULL asks
//! for the count of samples newer than `lastSeenTimeStamp`; otherwise up to `*sampleCount`
//! of them, oldest first, are written and `*sampleCount` says how many; none newer:
//! NVML_ERROR_NOT_FOUND. Values are `NVML_VALUE_TYPE_UNSIGNED_INT` (mW, %, MHz). A MIG
//! device has no buffers of its own (NOT_SUPPORTED); a lost GPU answers GPU_IS_LOST.

use super::{api_mut, put};
use crate::ffi::{self, Device, Return};
use std::ffi::{c_uint, c_ulonglong};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: Device,
    kind: c_uint,
    last_seen: c_ulonglong,
    value_type: *mut c_uint,
    count: *mut c_uint,
    samples: *mut ffi::Sample,
) -> Return {
    api_mut(|sim| {
        if count.is_null() || value_type.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let found = sim.device_samples(device as usize, kind, last_seen)?;
        if found.is_empty() {
            return Err(ffi::ERROR_NOT_FOUND);
        }
        // SAFETY: nvml.h: `sampleValType` is an output nvmlValueType_t (checked non-NULL).
        unsafe { put(value_type, ffi::VALUE_TYPE_UNSIGNED_INT)? };
        if samples.is_null() {
            // SAFETY: nvml.h: `sampleCount` is an in/out uint (checked non-NULL).
            return unsafe { put(count, found.len() as c_uint) };
        }
        // SAFETY: as above; the caller's room for samples.
        let room = unsafe { *count } as usize;
        let n = room.min(found.len());
        // SAFETY: nvml.h: `samples` holds `*sampleCount` entries; `n` is at most that, and
        // the source is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(found.as_ptr(), samples, n) };
        // SAFETY: as above.
        unsafe { put(count, n as c_uint) }
    })
}
