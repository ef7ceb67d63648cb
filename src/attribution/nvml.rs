//! What pod attribution asks NVML (as dcgm-exporter does through go-nvml): where a MIG
//! device UUID lives, and the processes running on a GPU with their SM utilisation and
//! memory. `libnvidia-ml.so.1` is loaded at run time through `nvml-wrapper`, only with `-k`.

use super::device_ids::MigLocation;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

/// One process on a GPU or on one of its MIG GPU instances.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// The GPU instance it runs on, for a MIG-enabled GPU.
    pub gpu_instance: Option<u32>,
    /// SM utilisation in percent, when NVML has a recent sample for it.
    pub sm_util: Option<u32>,
    pub memory_bytes: Option<u64>,
}

/// The NVML queries attribution needs; a test double stands in for the library in tests.
pub trait NvmlView: Send {
    /// The parent GPU and GPU-instance id of a MIG device (`MIG-<uuid>`).
    fn mig_location(&self, mig_uuid: &str) -> Result<MigLocation, String>;
    /// Processes on the GPU with this UUID (for a MIG-enabled GPU: on all its instances).
    fn processes(&self, gpu_uuid: &str) -> Result<Vec<Process>, String>;
}

/// The real library.
pub struct RealNvml {
    nvml: Nvml,
}

impl RealNvml {
    /// Loads and initialises `libnvidia-ml.so.1` (the name the driver installs).
    pub fn load() -> Result<RealNvml, String> {
        Nvml::builder()
            .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
            .init()
            .map(|nvml| RealNvml { nvml })
            .map_err(|e| format!("cannot load NVML (libnvidia-ml.so.1): {e}"))
    }

    fn device(&self, uuid: &str) -> Result<Device<'_>, String> {
        self.nvml
            .device_by_uuid(uuid)
            .map_err(|e| format!("NVML has no device {uuid}: {e}"))
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
        let parent = mig
            .mig_parent_device()
            .map_err(|e| format!("{mig_uuid}: no parent GPU: {e}"))?;
        let parent_uuid = parent
            .uuid()
            .map_err(|e| format!("{mig_uuid}: parent UUID: {e}"))?;
        let gpu_instance = dcgm_sys::nvml_ext::gpu_instance_id(&mig)
            .ok_or_else(|| format!("{mig_uuid}: NVML gives no GPU-instance id"))?;
        Ok(MigLocation {
            parent_uuid,
            gpu_instance,
        })
    }

    fn processes(&self, gpu_uuid: &str) -> Result<Vec<Process>, String> {
        let gpu = self.device(gpu_uuid)?;
        let err = |e: NvmlError| format!("{gpu_uuid}: {e}");
        if gpu.mig_mode().is_ok_and(|m| m.current == 1) {
            // Memory per GPU instance; NVML has no per-process utilisation under MIG.
            let mut out = Vec::new();
            for i in 0..gpu.mig_device_count().map_err(err)? {
                let Ok(mig) = gpu.mig_device_by_index(i) else {
                    continue;
                };
                let gi = dcgm_sys::nvml_ext::gpu_instance_id(&mig);
                out.extend(running(&mig, gi).map_err(err)?);
            }
            return Ok(out);
        }
        let mut procs = running(&gpu, None).map_err(err)?;
        match gpu.process_utilization_stats(0u64) {
            Ok(samples) => {
                for p in &mut procs {
                    // The newest sample of each process.
                    p.sm_util = samples
                        .iter()
                        .filter(|s| s.pid == p.pid)
                        .max_by_key(|s| s.timestamp)
                        .map(|s| s.sm_util);
                }
            }
            // No samples yet, or a GPU without per-process accounting: memory only.
            Err(NvmlError::NotFound | NvmlError::NotSupported) => {}
            Err(e) => return Err(err(e)),
        }
        Ok(procs)
    }
}
