//! GPU Performance Monitoring (Hopper and newer): samples and the metrics between two of
//! them, answered from the profiling fields the simulated DCGM serves for the same GPU or
//! GPU instance (percent where DCGM has a ratio), so the NVML backend's
//! `DCGM_FI_PROF_*` equivalents equal the simulated DCGM's.

use super::{api, api_mut, check_version, object_exports, put, with_device};
use crate::ffi::{self, Device, GpmMetricsGet, GpmSample, GpmSupport, Return};
use crate::sim::Dev;
use std::ffi::c_uint;

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: Device,
    support: *mut GpmSupport,
) -> Return {
    with_device(device, |sim, dev| {
        // SAFETY: nvml.h: NULL or an nvmlGpmSupport_t whose version the caller set.
        unsafe { check_version(support, ffi::GPM_SUPPORT_VERSION) }?;
        let supported = matches!(dev, Dev::Gpu(g) if sim.gpm_supported(g));
        let out = GpmSupport {
            version: ffi::GPM_SUPPORT_VERSION,
            is_supported_device: c_uint::from(supported),
        };
        // SAFETY: as above, valid for a write of nvmlGpmSupport_t.
        unsafe { put(support, out) }
    })
}

object_exports!(
    nvmlGpmSampleAlloc,
    nvmlGpmSampleFree,
    GpmSample,
    gpm_alloc,
    gpm_free
);

/// The GPU a handle names, for a whole GPU only (MIG device handles: INVALID_ARGUMENT).
fn whole_gpu(device: Device) -> Result<u32, Return> {
    let mut gpu = None;
    let rc = with_device(device, |_, dev| match dev {
        Dev::Gpu(g) => {
            gpu = Some(g.id);
            Ok(())
        }
        Dev::Mig { .. } => Err(ffi::ERROR_INVALID_ARGUMENT),
    });
    gpu.ok_or(rc)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: Device, sample: GpmSample) -> Return {
    match whole_gpu(device) {
        Ok(gpu) => api_mut(|sim| sim.gpm_take(sample as usize, gpu, None)),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: Device,
    gpu_instance_id: c_uint,
    sample: GpmSample,
) -> Return {
    match whole_gpu(device) {
        Ok(gpu) => api_mut(|sim| sim.gpm_take(sample as usize, gpu, Some(gpu_instance_id))),
        Err(rc) => rc,
    }
}

/// Each requested metric gets its own return code, as NVML does; the call fails only for
/// a bad request (version, count, samples).
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut GpmMetricsGet) -> Return {
    api(|sim| {
        // SAFETY: nvml.h: NULL or a caller-owned nvmlGpmMetricsGet_t.
        unsafe { check_version(request, ffi::GPM_METRICS_GET_VERSION) }?;
        // SAFETY: non-NULL (checked); a caller-owned nvmlGpmMetricsGet_t.
        let r = unsafe { &mut *request };
        let n = r.num_metrics as usize;
        if n == 0 || n > ffi::GPM_METRIC_MAX {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let (s1, s2) = (r.sample1 as usize, r.sample2 as usize);
        for m in &mut r.metrics[..n] {
            match sim.gpm_metric(s1, s2, m.metric_id) {
                Ok(v) => {
                    m.value = v;
                    m.nvml_return = ffi::SUCCESS;
                }
                Err(ffi::ERROR_INVALID_ARGUMENT) => return Err(ffi::ERROR_INVALID_ARGUMENT),
                Err(e) => m.nvml_return = e,
            }
        }
        Ok(())
    })
}
