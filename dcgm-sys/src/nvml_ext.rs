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
