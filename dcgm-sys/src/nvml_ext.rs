//! NVML calls the `nvml-wrapper` crate does not wrap. The exporter forbids unsafe code, so
//! the raw calls it needs live here, behind safe functions: the GPU-instance id of a MIG
//! device (pod attribution) and XID events with their MIG instance (the NVML backend).

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use std::sync::Arc;

/// The GPU-instance id of a MIG device handle (`nvmlDeviceGetGpuInstanceId`): the `GPU_I_ID`
/// that dcgm-exporter uses to key MIG devices. `None` when the library lacks the symbol or
/// the handle is not a MIG device.
pub fn gpu_instance_id(device: &Device) -> Option<u32> {
    let lib = device.nvml().lib();
    // Resolved when the library was loaded; absent from drivers older than MIG.
    let f = lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?;
    let mut id: std::os::raw::c_uint = 0;
    // SAFETY: `device.handle()` is a live handle of the initialised library `lib` (the
    // `Device` borrows the `Nvml` that owns both), `f` was resolved from that library with
    // the signature nvml.h declares, and `id` is a valid, writable c_uint for the call.
    let rc = unsafe { f(device.handle(), &mut id) };
    // NVML_SUCCESS is 0 in every nvml.h.
    (rc == 0).then_some(id)
}

/// Whether a handle an NVML call gave back is NULL. Some NVMLs answer success with a NULL
/// handle (DCGM's injection library for `nvmlDeviceGetHandleByUUID("MIG-…")` and for every
/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`); passing one on only fails later with a
/// misleading "invalid argument".
pub fn is_null(device: &Device) -> bool {
    // SAFETY: `handle()` only copies the opaque pointer out of the `Device`; it is compared
    // with NULL, never dereferenced or passed to the library here.
    unsafe { device.handle() }.is_null()
}

/// One XID the driver reported (`nvmlEventTypeXidCriticalError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xid {
    /// The GPU's NVML index.
    pub gpu: u32,
    pub xid: u64,
    /// The NVML GPU-instance id of the MIG instance the XID hit, if it hit one.
    pub gpu_instance: Option<u32>,
    /// The NVML compute-instance id, if the XID hit one.
    pub compute_instance: Option<u32>,
}

/// nvml.h: `gpuInstanceId` / `computeInstanceId` of an event not attributed to an instance.
const NO_INSTANCE: u32 = 0xFFFF_FFFF;
/// `nvmlEventTypeXidCriticalError`.
const XID_CRITICAL_ERROR: u64 = 0x8;

/// An NVML event set registered for XIDs, as DCGM's cache manager registers every GPU's
/// (`ManageDeviceEvents`). nvml-wrapper's `EventSet` borrows its `Nvml` and its events drop
/// the instance ids; this one owns a reference to the library and keeps them.
pub struct XidEvents {
    nvml: Arc<Nvml>,
    set: nvml_wrapper_sys::bindings::nvmlEventSet_t,
}

// SAFETY: an NVML event set is an opaque handle that NVML's functions take from any thread
// (the library is thread-safe, nvml.h "Thread safety"); `XidEvents` is never shared
// between threads (it is not Sync), only moved, and the handle is used only with the
// library `nvml` keeps loaded and initialised.
unsafe impl Send for XidEvents {}

fn sym<T>(s: &Result<T, libloading::Error>) -> Result<&T, NvmlError> {
    s.as_ref()
        .map_err(|_| NvmlError::FailedToLoadSymbol(String::new()))
}

impl XidEvents {
    /// A new, empty set (`nvmlEventSetCreate`).
    pub fn new(nvml: Arc<Nvml>) -> Result<XidEvents, NvmlError> {
        let create = sym(&nvml.lib().nvmlEventSetCreate)?;
        let mut set = std::ptr::null_mut();
        // SAFETY: `create` was resolved from the initialised library `nvml` with nvml.h's
        // signature; `set` is a valid, writable handle slot.
        nvml_try(unsafe { create(&mut set) })?;
        Ok(XidEvents { nvml, set })
    }

    /// Registers the GPU of NVML index `gpu` for XIDs: `NotSupported` where it raises none.
    /// As DCGM, the registration itself says so: `nvmlDeviceGetSupportedEventTypes` is not
    /// asked (NVIDIA's injection NVML refuses it while it takes the registration).
    pub fn register(&self, gpu: u32) -> Result<(), NvmlError> {
        let device = self.nvml.device_by_index(gpu)?;
        let register = sym(&self.nvml.lib().nvmlDeviceRegisterEvents)?;
        // SAFETY: `device.handle()` is a live handle of the library `register` was resolved
        // from, and `self.set` a set that library created and that is not freed yet.
        nvml_try(unsafe { register(device.handle(), XID_CRITICAL_ERROR, self.set) })
    }

    /// The next XID already raised, without waiting (`nvmlEventSetWait_v2` with timeout 0):
    /// `None` when none is pending. Other event types are passed over.
    pub fn next(&self) -> Result<Option<Xid>, NvmlError> {
        let wait = sym(&self.nvml.lib().nvmlEventSetWait_v2)?;
        loop {
            // SAFETY: nvmlEventData_t is plain data (a handle and integers): all zeroes
            // is a valid value, overwritten by the call on success.
            let mut data: nvml_wrapper_sys::bindings::nvmlEventData_t =
                unsafe { std::mem::zeroed() };
            // SAFETY: `self.set` is a live set of the library `wait` was resolved from,
            // `data` a valid, writable nvmlEventData_t.
            match nvml_try(unsafe { wait(self.set, &mut data, 0) }) {
                Ok(()) => {}
                Err(NvmlError::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            }
            if data.eventType & XID_CRITICAL_ERROR == 0 {
                continue;
            }
            // SAFETY: the driver filled `data.device` with the handle of a device of this
            // library, which stays valid while the library is initialised.
            let device = unsafe { Device::new(data.device, &self.nvml) };
            let instance = |id: u32| (id != NO_INSTANCE).then_some(id);
            return Ok(Some(Xid {
                gpu: device.index()?,
                xid: data.eventData,
                gpu_instance: instance(data.gpuInstanceId),
                compute_instance: instance(data.computeInstanceId),
            }));
        }
    }
}

impl Drop for XidEvents {
    fn drop(&mut self) {
        if let Ok(free) = sym(&self.nvml.lib().nvmlEventSetFree) {
            // SAFETY: `self.set` was created by this library and is freed only here, once.
            let _ = unsafe { free(self.set) };
        }
    }
}
