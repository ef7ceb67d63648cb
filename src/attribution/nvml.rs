//! What pod attribution asks NVML (as dcgm-exporter does through go-nvml): where a MIG
//! device UUID lives, and the processes running on a GPU with their SM utilisation and
//! memory. `libnvidia-ml.so.1` is loaded at run time through `nvml-wrapper`, only with `-k`.
//!
//! NVMLs differ in how they answer the direct MIG calls: DCGM's injection library answers
//! `nvmlDeviceGetHandleByUUID("MIG-…")` and every `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`
//! with success and a NULL handle, and drivers have changed these calls between versions. So
//! every handle is checked, and `mig_devices` walks each GPU's MIG devices by index, which
//! every NVML with MIG answers. The calls run on their own thread (`attribution::mig`).
//!
//! Per-process utilisation: the driver keeps a buffer of recent samples per GPU
//! (`nvmlDeviceGetProcessUtilization`), each stamped with CPU time in µs, one per process
//! and sampling period for processes that used the GPU in it. `RealNvml` remembers the newest
//! timestamp it saw per GPU and asks only for newer samples, so consecutive asks get
//! disjoint samples and none is lost as long as the driver still keeps it.

use super::device_ids::MigLocation;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// One process on a GPU or on one of its MIG GPU instances.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// The GPU instance it runs on, for a MIG-enabled GPU.
    pub gpu_instance: Option<u32>,
    /// SM utilisation in percent: the newest of `samples`; `None` when NVML gave none for
    /// it since the previous ask (an idle process gets none, as nvml.h says).
    pub sm_util: Option<u32>,
    /// Every utilisation sample NVML gave for this process since the previous ask for the
    /// same GPU, oldest first (empty under MIG, where NVML has none).
    pub samples: Vec<UtilSample>,
    pub memory_bytes: Option<u64>,
}

/// One of NVML's per-process utilisation samples (`nvmlProcessUtilizationSample_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtilSample {
    /// NVML's CPU timestamp of the sample, in microseconds.
    pub timestamp_us: u64,
    /// SM utilisation in percent.
    pub sm_util: u32,
}

/// A MIG device found under its GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigDevice {
    pub uuid: String,
    pub location: MigLocation,
}

/// What walking every GPU's MIG devices found, and what failed on the way (a GPU that
/// fails does not hide the others' devices).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigWalk {
    pub devices: Vec<MigDevice>,
    pub problems: Vec<String>,
}

/// More MIG slots than any GPU has (7 on an A100/H100): a bound on a walk when an NVML
/// answers a nonsensical maximum.
pub(crate) const MAX_MIG_SLOTS: u32 = 64;

/// The NVML queries attribution needs; a test double stands in for the library in tests.
pub trait NvmlView: Send {
    /// The parent GPU and GPU-instance id of a MIG device (`MIG-<uuid>`), asked directly:
    /// the device by UUID, its GPU-instance id, its parent.
    fn mig_location(&self, mig_uuid: &str) -> Result<MigLocation, String>;
    /// Every MIG device of every GPU, walked by index.
    fn mig_devices(&self) -> MigWalk;
    /// Processes on the GPU with this UUID (for a MIG-enabled GPU: on all its instances).
    fn processes(&self, gpu_uuid: &str) -> Result<Vec<Process>, String>;
}

/// How often a sample ask is repeated when a sampling period ends between NVML's count
/// query and the fill (INSUFFICIENT_SIZE on the second call).
const SAMPLE_ASK_TRIES: usize = 3;

/// The real library.
pub struct RealNvml {
    nvml: Nvml,
    /// Per GPU UUID: the timestamp (µs) of the newest utilisation sample seen.
    last_seen: Mutex<HashMap<String, u64>>,
}

impl RealNvml {
    /// Loads and initialises `libnvidia-ml.so.1` (the name the driver installs).
    pub fn load() -> Result<RealNvml, String> {
        Self::load_from(std::ffi::OsStr::new("libnvidia-ml.so.1"))
    }

    /// Loads and initialises the NVML library at `path` (a name the loader searches, or a
    /// path).
    pub fn load_from(path: &std::ffi::OsStr) -> Result<RealNvml, String> {
        Nvml::builder()
            .lib_path(path)
            .init()
            .map(|nvml| RealNvml {
                nvml,
                last_seen: Mutex::new(HashMap::new()),
            })
            .map_err(|e| format!("cannot load NVML ({}): {e}", path.to_string_lossy()))
    }

    /// (pid, sample) of a GPU's utilisation samples newer than the newest one the previous
    /// ask saw (the first ask: every sample the driver keeps), oldest first.
    fn new_samples(&self, uuid: &str, gpu: &Device) -> Result<Vec<(u32, UtilSample)>, NvmlError> {
        // The map is only read and written whole here: a poisoned lock holds a usable map.
        let since = self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uuid)
            .copied()
            .unwrap_or(0);
        let mut tries = 0;
        let raw = loop {
            tries += 1;
            match gpu.process_utilization_stats(since) {
                Ok(r) => break r,
                // No sample newer than `since`, or a GPU without per-process accounting.
                Err(NvmlError::NotFound | NvmlError::NotSupported) => return Ok(Vec::new()),
                Err(NvmlError::InsufficientSize(_)) if tries < SAMPLE_ASK_TRIES => continue,
                Err(e) => return Err(e),
            }
        };
        let mut samples: Vec<(u32, UtilSample)> = raw
            .iter()
            // An NVML that ignores lastSeenTimeStamp must not hand out a sample twice.
            .filter(|s| s.timestamp > since)
            .map(|s| {
                (
                    s.pid,
                    UtilSample {
                        timestamp_us: s.timestamp,
                        sm_util: s.sm_util,
                    },
                )
            })
            .collect();
        samples.sort_by_key(|(pid, s)| (s.timestamp_us, *pid));
        let Some(newest) = samples.last().map(|(_, s)| s.timestamp_us) else {
            return Ok(Vec::new());
        };
        self.last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uuid.to_string(), newest);
        Ok(samples)
    }

    fn device(&self, uuid: &str) -> Result<Device<'_>, String> {
        let d = self
            .nvml
            .device_by_uuid(uuid)
            .map_err(|e| format!("NVML has no device {uuid}: {e}"))?;
        if dcgm_sys::nvml_ext::is_null(&d) {
            return Err(format!(
                "nvmlDeviceGetHandleByUUID({uuid}) answered success with a NULL handle"
            ));
        }
        Ok(d)
    }

    /// The MIG devices of one GPU: every slot up to nvmlDeviceGetMaxMigDeviceCount (a slot
    /// may be empty, NOT_FOUND, or past what an NVML describes: skipped either way).
    fn walk_gpu(&self, index: u32, out: &mut MigWalk) -> Result<(), String> {
        let gpu = self
            .nvml
            .device_by_index(index)
            .map_err(|e| format!("GPU {index}: {e}"))?;
        if dcgm_sys::nvml_ext::is_null(&gpu) {
            return Err(format!("GPU {index}: NULL handle"));
        }
        let max = match gpu.mig_device_count() {
            Ok(n) => n.min(MAX_MIG_SLOTS),
            // A GPU without MIG.
            Err(NvmlError::NotSupported) => return Ok(()),
            Err(e) => return Err(format!("GPU {index}: nvmlDeviceGetMaxMigDeviceCount: {e}")),
        };
        if max == 0 {
            return Ok(());
        }
        let parent_uuid = gpu.uuid().map_err(|e| format!("GPU {index}: UUID: {e}"))?;
        for slot in 0..max {
            let Ok(mig) = gpu.mig_device_by_index(slot) else {
                continue;
            };
            if dcgm_sys::nvml_ext::is_null(&mig) {
                continue;
            }
            let uuid = match mig.uuid() {
                Ok(u) if u.starts_with(super::device_ids::MIG_UUID_PREFIX) => u,
                Ok(u) => {
                    out.problems.push(format!(
                        "GPU {index} MIG slot {slot}: UUID {u:?} is not a MIG UUID"
                    ));
                    continue;
                }
                Err(e) => {
                    out.problems
                        .push(format!("GPU {index} MIG slot {slot}: UUID: {e}"));
                    continue;
                }
            };
            match dcgm_sys::nvml_ext::gpu_instance_id(&mig) {
                Some(gpu_instance) => out.devices.push(MigDevice {
                    uuid,
                    location: MigLocation {
                        parent_uuid: parent_uuid.clone(),
                        gpu_instance,
                    },
                }),
                None => out
                    .problems
                    .push(format!("{uuid}: NVML gives no GPU-instance id")),
            }
        }
        Ok(())
    }
}

fn running(device: &Device, gpu_instance: Option<u32>) -> Result<Vec<Process>, NvmlError> {
    Ok(device
        .running_compute_processes()?
        .into_iter()
        .map(|p| Process {
            pid: p.pid,
            gpu_instance: gpu_instance.or(p.gpu_instance_id),
            sm_util: None,
            samples: Vec::new(),
            memory_bytes: match p.used_gpu_memory {
                nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
            },
        })
        .collect())
}

impl NvmlView for RealNvml {
    fn mig_location(&self, mig_uuid: &str) -> Result<MigLocation, String> {
        let mig = self.device(mig_uuid)?;
        let gpu_instance = dcgm_sys::nvml_ext::gpu_instance_id(&mig)
            .ok_or_else(|| format!("{mig_uuid}: NVML gives no GPU-instance id"))?;
        let parent = mig
            .mig_parent_device()
            .map_err(|e| format!("{mig_uuid}: no parent GPU: {e}"))?;
        if dcgm_sys::nvml_ext::is_null(&parent) {
            return Err(format!(
                "{mig_uuid}: nvmlDeviceGetDeviceHandleFromMigDeviceHandle answered success with a NULL handle"
            ));
        }
        let parent_uuid = parent
            .uuid()
            .map_err(|e| format!("{mig_uuid}: parent UUID: {e}"))?;
        if parent_uuid.is_empty() || parent_uuid.starts_with(super::device_ids::MIG_UUID_PREFIX) {
            return Err(format!(
                "{mig_uuid}: NVML names {parent_uuid:?} as its parent GPU"
            ));
        }
        Ok(MigLocation {
            parent_uuid,
            gpu_instance,
        })
    }

    fn mig_devices(&self) -> MigWalk {
        let mut out = MigWalk::default();
        let count = match self.nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                out.problems.push(format!("nvmlDeviceGetCount: {e}"));
                return out;
            }
        };
        for index in 0..count {
            if let Err(e) = self.walk_gpu(index, &mut out) {
                out.problems.push(e);
            }
        }
        out
    }

    fn processes(&self, gpu_uuid: &str) -> Result<Vec<Process>, String> {
        let gpu = self.device(gpu_uuid)?;
        let err = |e: NvmlError| format!("{gpu_uuid}: {e}");
        if gpu.mig_mode().is_ok_and(|m| m.current == 1) {
            // Memory per GPU instance; NVML has no per-process utilisation under MIG.
            let mut out = Vec::new();
            for i in 0..gpu.mig_device_count().map_err(err)?.min(MAX_MIG_SLOTS) {
                let Ok(mig) = gpu.mig_device_by_index(i) else {
                    continue;
                };
                if dcgm_sys::nvml_ext::is_null(&mig) {
                    continue;
                }
                let gi = dcgm_sys::nvml_ext::gpu_instance_id(&mig);
                out.extend(running(&mig, gi).map_err(err)?);
            }
            return Ok(out);
        }
        let mut procs = running(&gpu, None).map_err(err)?;
        let mut by_pid: HashMap<u32, Vec<UtilSample>> = HashMap::new();
        for (pid, s) in self.new_samples(gpu_uuid, &gpu).map_err(err)? {
            by_pid.entry(pid).or_default().push(s);
        }
        for p in &mut procs {
            p.samples = by_pid.remove(&p.pid).unwrap_or_default();
            p.sm_util = p.samples.last().map(|s| s.sm_util);
        }
        Ok(procs)
    }
}
