//! The C face of the simulated NVML: the functions NVML clients (nvml-wrapper, NVIDIA's
//! Python bindings, go-nvml) call for identity, MIG and process queries, with the signatures,
//! struct versions and return codes of NVIDIA's `nvml.h`, plus a NOT_SUPPORTED stub for every
//! other function the header declares.
//!
//! Rules every export follows:
//! * the body runs under `catch_unwind`; a panic becomes `NVML_ERROR_UNKNOWN`;
//! * before `nvmlInit` → `NVML_ERROR_UNINITIALIZED`; a NULL output pointer or a handle we did
//!   not give out → `NVML_ERROR_INVALID_ARGUMENT`; a wrong struct version →
//!   `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`; a lost GPU → `NVML_ERROR_GPU_IS_LOST` for
//!   anything but its identity;
//! * output is written only on success (or the required count on INSUFFICIENT_SIZE).

// The exports are documented by NVIDIA's nvml.h; a `# Safety` section on each would only
// repeat "pointers must be valid as the header describes".
#![allow(clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod device;
pub mod events;
pub mod gpm;
pub mod mig;
pub mod process;
pub mod samples;
pub mod stubs;
pub mod system;
pub mod values;

use crate::ffi::{self, Return};
use crate::sim::{Dev, Sim};
use std::ffi::{c_char, c_uint, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};

static STATE: Mutex<Option<Sim>> = Mutex::new(None);

/// The state lock. Every update under it is a single assignment or a whole fault applied,
/// so a lock poisoned by a caught panic is taken over as it is.
fn state() -> MutexGuard<'static, Option<Sim>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs an export body, turning `Err(code)` and panics into an `nvmlReturn_t`.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Return>) -> Return {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ffi::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => ffi::ERROR_UNKNOWN,
    }
}

/// [`guard`] with the initialised driver (faults that arrived since the last call applied).
pub(crate) fn api(f: impl FnOnce(&Sim) -> Result<(), Return>) -> Return {
    guard(|| {
        let mut st = state();
        let sim = st.as_mut().ok_or(ffi::ERROR_UNINITIALIZED)?;
        sim.catch_up();
        f(sim)
    })
}

/// [`api`] for calls that change the driver's state (event sets).
pub(crate) fn api_mut(f: impl FnOnce(&mut Sim) -> Result<(), Return>) -> Return {
    guard(|| {
        let mut st = state();
        let sim = st.as_mut().ok_or(ffi::ERROR_UNINITIALIZED)?;
        sim.catch_up();
        f(sim)
    })
}

/// [`api`] for a device handle: unknown handles are INVALID_ARGUMENT.
pub(crate) fn with_device(
    device: ffi::Device,
    f: impl FnOnce(&Sim, Dev<'_>) -> Result<(), Return>,
) -> Return {
    api(|sim| {
        let dev = sim
            .device(device as usize)
            .ok_or(ffi::ERROR_INVALID_ARGUMENT)?;
        f(sim, dev)
    })
}

/// Writes one output value.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`, as nvml.h requires of output arguments.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> Result<(), Return> {
    if p.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for a write of T.
    unsafe { p.write(v) };
    Ok(())
}

/// The two exports of a kind of driver-side object (event sets, GPM samples): `$create`
/// writes the handle of a new one (made by `Sim::$new`), `$free` lets it go
/// (`Sim::$drop`, INVALID_ARGUMENT for a handle not of this kind or already freed).
macro_rules! object_exports {
    ($create:ident, $free:ident, $handle:ty, $new:ident, $drop:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $create(out: *mut $handle) -> Return {
            // SAFETY: nvml.h: `out` is an output handle.
            unsafe { super::create(out, |sim| sim.$new() as $handle) }
        }

        #[no_mangle]
        pub unsafe extern "C" fn $free(handle: $handle) -> Return {
            super::api_mut(|sim| sim.$drop(handle as usize))
        }
    };
}
pub(crate) use object_exports;

/// Creates a driver-side object (event set, GPM sample) and writes its handle to `out`;
/// a NULL `out` is refused before anything is created.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn create<T>(out: *mut T, make: impl FnOnce(&mut Sim) -> T) -> Return {
    if out.is_null() {
        return guard(|| Err(ffi::ERROR_INVALID_ARGUMENT));
    }
    api_mut(|sim| {
        let handle = make(sim);
        // SAFETY: non-NULL (checked above) and valid for a write per the contract.
        unsafe { put(out, handle) }
    })
}

/// Checks a caller's versioned struct: NULL → INVALID_ARGUMENT, a `version` (its first
/// member) other than `want` → ARGUMENT_VERSION_MISMATCH.
///
/// # Safety
/// `p` is NULL or points to a readable struct that starts with its `c_uint` version.
pub(crate) unsafe fn check_version<T>(p: *const T, want: c_uint) -> Result<(), Return> {
    if p.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL; the struct starts with its version per the contract.
    if unsafe { p.cast::<c_uint>().read() } != want {
        return Err(ffi::ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    Ok(())
}

/// Writes a NUL-terminated string into a caller's buffer of `len` bytes; too small →
/// INSUFFICIENT_SIZE, as NVML's string getters answer.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
pub(crate) unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Return> {
    if buf.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < s.len() + 1 {
        return Err(ffi::ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds at least `len` >= s.len() + 1 writable bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, s.len() + 1) };
    crate::sim::copy_c(out, s);
    Ok(())
}

/// Reads a caller's NUL-terminated input string.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn get_str(p: *const c_char) -> Result<String, Return> {
    if p.is_null() {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(str::to_string)
        .map_err(|_| ffi::ERROR_INVALID_ARGUMENT)
}

/// Initialises (first call) or counts one more user of the driver.
pub(crate) fn init() -> Return {
    guard(|| {
        let mut st = state();
        if st.is_none() {
            let sim = Sim::from_env().map_err(|e| {
                // Where a real driver would log to the kernel: say why, once per attempt.
                eprintln!("nvml-sim: {e}");
                ffi::ERROR_UNKNOWN
            })?;
            *st = Some(sim);
        }
        if let Some(sim) = st.as_mut() {
            sim.refcount += 1;
        }
        Ok(())
    })
}

pub(crate) fn shutdown() -> Return {
    guard(|| {
        let mut st = state();
        let sim = st.as_mut().ok_or(ffi::ERROR_UNINITIALIZED)?;
        sim.refcount = sim.refcount.saturating_sub(1);
        if sim.refcount == 0 {
            *st = None;
        }
        Ok(())
    })
}
