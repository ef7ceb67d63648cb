//! NVML calls the `nvml-wrapper` crate does not wrap. The exporter forbids unsafe code, so
//! the one raw call it needs for pod attribution lives here, behind a safe function.

use nvml_wrapper::Device;

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
