//! NVML calls the `nvml-wrapper` crate does not wrap. The exporter forbids unsafe code, so
//! the raw calls it needs live here, behind safe functions: the GPU-instance id of a MIG
//! device (pod attribution), XID events with their MIG instance, GPM samples and the
//! all-links NVLink field values (the NVML backend).

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use std::collections::HashMap;
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

/// One field of an [`all_links_field_values`] call: its 64-bit value (`ullVal`, as DCGM
/// reads the NVLink counters) and NVML's timestamp (µs, 0 when it gave none), or the
/// field's own error.
pub type FieldAnswer = Result<(u64, i64), NvmlError>;

/// `nvmlDeviceGetFieldValues` of `ids` in one call with scope `UINT_MAX`, which NVML reads
/// as "all links" for per-link fields: how DCGM asks for the NVLink throughput counters.
/// nvml-wrapper's `field_values_for` always sends scope 0, which is link 0 alone there.
/// `Err` when the call itself fails.
pub fn all_links_field_values(device: &Device, ids: &[u32]) -> Result<Vec<FieldAnswer>, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlFieldValue_t;
    let get = sym(&device.nvml().lib().nvmlDeviceGetFieldValues)?;
    let mut values: Vec<nvmlFieldValue_t> = ids
        .iter()
        .map(|&id| {
            // SAFETY: nvmlFieldValue_t is plain data (integers and a union of numbers): all
            // zeroes is a valid value, and a zeroed union reads 0 in every member.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = id;
            v.scopeId = std::os::raw::c_uint::MAX;
            v
        })
        .collect();
    let count = i32::try_from(values.len()).map_err(|_| NvmlError::InvalidArg)?;
    // SAFETY: `get` was resolved from the initialised library that owns `device`'s live
    // handle, with nvml.h's signature; `values` holds `count` initialised entries the
    // call reads (fieldId, scopeId) and overwrites in place.
    nvml_try(unsafe { get(device.handle(), count, values.as_mut_ptr()) })?;
    Ok(values
        .iter()
        .map(|v| {
            nvml_try(v.nvmlReturn)?;
            // SAFETY: every member of the union is a plain number; the entry started zeroed,
            // so a narrower member NVML wrote leaves the rest 0, as in DCGM's zeroed array.
            Ok((unsafe { v.value.ullVal }, v.timestamp))
        })
        .collect())
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

type RawSample = nvml_wrapper_sys::bindings::nvmlGpmSample_t;

/// GPM (GPU Performance Monitoring, Hopper and newer) metrics between consecutive samples
/// of each GPU or GPU instance, as DCGM's GPM manager takes them: one sample per entity
/// per call of [`GpmSampler::next`], the metrics computed against the entity's previous
/// sample. nvml-wrapper's `GpmSample` borrows its `Nvml`, so it cannot be kept from one
/// collection to the next beside an owned library; this keeps the raw handles.
pub struct GpmSampler {
    nvml: Arc<Nvml>,
    /// The last sample of each (GPU index, NVML GPU-instance id).
    last: HashMap<(u32, Option<u32>), RawSample>,
}

// SAFETY: GPM sample handles are opaque pointers into the library's own memory, used only
// through NVML calls, which are thread-safe; `GpmSampler` is moved between threads, never
// shared (it is not Sync), and `nvml` keeps the library loaded for as long as the handles.
unsafe impl Send for GpmSampler {}

impl GpmSampler {
    pub fn new(nvml: Arc<Nvml>) -> GpmSampler {
        GpmSampler {
            nvml,
            last: HashMap::new(),
        }
    }

    /// Whether the GPU of NVML index `gpu` supports GPM (`nvmlGpmQueryDeviceSupport`).
    pub fn supported(&self, gpu: u32) -> Result<bool, NvmlError> {
        self.nvml.device_by_index(gpu)?.gpm_support()
    }

    /// Takes a new sample of GPU `gpu` (or of its GPU instance `gi`) and answers each of
    /// `metrics` (`NVML_GPM_METRIC_*` ids) between the previous sample and it: `None` when
    /// there was no previous sample. The new sample replaces the previous one.
    pub fn next(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        metrics: &[u32],
    ) -> Result<Option<Vec<Result<f64, NvmlError>>>, NvmlError> {
        let sample = self.take(gpu, gi)?;
        let Some(prev) = self.last.insert((gpu, gi), sample) else {
            return Ok(None);
        };
        let out = self.metrics(prev, sample, metrics);
        self.free(prev);
        out.map(Some)
    }

    fn take(&self, gpu: u32, gi: Option<u32>) -> Result<RawSample, NvmlError> {
        let lib = self.nvml.lib();
        let device = self.nvml.device_by_index(gpu)?;
        let alloc = sym(&lib.nvmlGpmSampleAlloc)?;
        let mut sample = std::ptr::null_mut();
        // SAFETY: `alloc` comes from the initialised library `self.nvml` with nvml.h's
        // signature; `sample` is a valid, writable handle slot.
        nvml_try(unsafe { alloc(&mut sample) })?;
        // SAFETY: `device.handle()` is a live handle of that library and `sample` a sample
        // it just allocated.
        let rc = unsafe {
            match gi {
                None => sym(&lib.nvmlGpmSampleGet).map(|f| f(device.handle(), sample)),
                Some(gi) => sym(&lib.nvmlGpmMigSampleGet).map(|f| f(device.handle(), gi, sample)),
            }
        };
        match rc.and_then(nvml_try) {
            Ok(()) => Ok(sample),
            Err(e) => {
                self.free(sample);
                Err(e)
            }
        }
    }

    fn metrics(
        &self,
        s1: RawSample,
        s2: RawSample,
        ids: &[u32],
    ) -> Result<Vec<Result<f64, NvmlError>>, NvmlError> {
        use nvml_wrapper_sys::bindings::{nvmlGpmMetricsGet_t, NVML_GPM_METRICS_GET_VERSION};
        let get = sym(&self.nvml.lib().nvmlGpmMetricsGet)?;
        // SAFETY: nvmlGpmMetricsGet_t is plain data (integers, doubles, pointers the call
        // fills): all zeroes is a valid value.
        let mut request: nvmlGpmMetricsGet_t = unsafe { std::mem::zeroed() };
        if ids.is_empty() || ids.len() > request.metrics.len() {
            return Err(NvmlError::InvalidArg);
        }
        request.version = NVML_GPM_METRICS_GET_VERSION;
        request.numMetrics = ids.len() as u32;
        request.sample1 = s1;
        request.sample2 = s2;
        for (m, &id) in request.metrics.iter_mut().zip(ids) {
            m.metricId = id;
        }
        // SAFETY: `get` comes from this library; `request` is a valid request whose two
        // samples this library allocated and filled, and which are not freed yet.
        nvml_try(unsafe { get(&mut request) })?;
        Ok(request.metrics[..ids.len()]
            .iter()
            .map(|m| nvml_try(m.nvmlReturn).map(|()| m.value))
            .collect())
    }

    fn free(&self, sample: RawSample) {
        if let Ok(free) = sym(&self.nvml.lib().nvmlGpmSampleFree) {
            // SAFETY: `sample` was allocated by this library and is freed once: it has
            // just left `last` (or never entered it).
            let _ = unsafe { free(sample) };
        }
    }
}

impl Drop for GpmSampler {
    fn drop(&mut self) {
        for (_, s) in std::mem::take(&mut self.last) {
            self.free(s);
        }
    }
}
