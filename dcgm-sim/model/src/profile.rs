//! A simulated node as a TOML profile (format: etc/sim/README.md).
//!
//! The profile is plain data; [`crate::node`] turns it into entities. Everything is
//! validated here so that a bad profile fails at start-up with a message naming the table,
//! not later with a wrong answer.

use crate::faults;
use crate::generator::Generator;
use serde::Deserialize;
use std::path::Path;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub node: NodeSpec,
    /// Defaults for every GPU.
    pub gpus: GpuDefaults,
    /// Per-GPU overrides (`[[gpu]]` tables).
    #[serde(default)]
    pub gpu: Vec<GpuSpec>,
    /// MIG layouts (`[[mig]]` tables), one per MIG-enabled GPU.
    #[serde(default)]
    pub mig: Vec<MigSpec>,
    #[serde(default)]
    pub switches: Option<SwitchSpec>,
    #[serde(default)]
    pub cpus: Option<CpuSpec>,
    /// Generator overrides (`[[fields]]` tables).
    #[serde(default)]
    pub fields: Vec<FieldOverride>,
    /// Generators of NVML counters that are no DCGM field (`[[nvml_fields]]` tables): the
    /// NVLink KiB counters DCGM's throughput rates are computed from.
    #[serde(default)]
    pub nvml_fields: Vec<NvmlFieldOverride>,
    /// Faults applied `at_s` seconds after the engine starts (`[[faults]]` tables).
    #[serde(default)]
    pub faults: Vec<ScheduledFault>,
    /// Processes running on the GPUs (`[[processes]]` tables), as the simulated NVML
    /// reports them; DCGM does not see them.
    #[serde(default)]
    pub processes: Vec<ProcessSpec>,
    /// How the simulated NVML answers where NVML libraries differ (`[nvml]`).
    #[serde(default)]
    pub nvml: NvmlSpec,
}

/// `[nvml]`: quirks of real NVML libraries the simulated one can reproduce.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlSpec {
    #[serde(default)]
    pub mig_lookup: MigLookup,
    /// A hung driver: `nvmlDeviceGetHandleByUUID("MIG-…")` and
    /// `nvmlDeviceGetMigDeviceHandleByIndex` never return.
    #[serde(default)]
    pub hang_mig_lookup: bool,
    /// How many recent seconds of per-process utilisation samples the driver keeps
    /// (nvmlDeviceGetProcessUtilization); older ones are dropped. Default
    /// [`DEFAULT_SAMPLE_HISTORY_S`].
    #[serde(default)]
    pub process_sample_history_s: Option<u32>,
    /// `nvmlDeviceGetFieldValues` answers as drivers with the NVML bugs DCGM 4.6 works
    /// around give them (`DcgmCacheManager.cpp`).
    #[serde(default)]
    pub field_value_bugs: Vec<FieldValueBug>,
}

/// An NVML bug in `nvmlDeviceGetFieldValues`'s answers that DCGM works around.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FieldValueBug {
    /// `NVML_FI_DEV_MEMORY_TEMP` says `NVML_VALUE_TYPE_DOUBLE` while its value is the °C
    /// as `uiVal` (r545 drivers, nvbugs/4300930).
    MemoryTempAsDouble,
    /// The ECC fields' value type is left at 0 (`NVML_VALUE_TYPE_DOUBLE`) while the count
    /// is `ullVal` (NVML bug 2032468).
    EccTypeUnset,
    /// With ECC disabled, the ECC and retired-page fields (`NVML_FI_DEV_ECC_CURRENT` to
    /// `NVML_FI_DEV_RETIRED_PENDING`) are left as the caller zeroed them: success, no
    /// timestamp, no latency, a double 0 (NVML bug 2009232).
    EccUninitialised,
}

/// Seconds of per-process utilisation samples the simulated driver keeps by default: enough
/// for a client that asks every 30 s to miss one ask without losing a sample.
pub const DEFAULT_SAMPLE_HISTORY_S: u32 = 120;

impl NvmlSpec {
    pub fn sample_history_s(&self) -> u32 {
        self.process_sample_history_s
            .unwrap_or(DEFAULT_SAMPLE_HISTORY_S)
    }
}

/// How `nvmlDeviceGetHandleByUUID("MIG-…")` and `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`
/// answer.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MigLookup {
    /// As NVIDIA's driver: the MIG device's handle, and its parent GPU's.
    #[default]
    Driver,
    /// As DCGM's NVML injection library (`libnvml_injection.so.1`, DCGM 4.6): success with a
    /// NULL handle for a MIG UUID (and for any UUID it does not know), and success with a
    /// NULL handle from `DeviceHandleFromMigDeviceHandle` for any input. Walking a GPU's
    /// MIG devices by index works in both.
    Injection,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    #[serde(default = "d_driver")]
    pub driver_version: String,
    #[serde(default = "d_nvml")]
    pub nvml_version: String,
    #[serde(default = "d_cuda")]
    pub cuda_driver_version: i64,
    /// Every generated value, UUID and serial number is a function of this and time.
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// How dcgmGetDeviceAttributes answers for a lost GPU: `"error"` (GPU_IS_LOST, the
    /// default) or `"blank"` (OK with blank strings and numbers, as a DCGM that reads the
    /// attributes from its cache may answer).
    #[serde(default)]
    pub lost_gpu_attributes: LostAttributes,
    /// Know the base-unit fields of DCGM 4.6.1 and 4.7 (ids 1600-1648: clocks in Hz, energy
    /// in J, ratios, bytes), as a library of those releases does; DCGM 4.6.0 has none.
    #[serde(default)]
    pub base_unit_fields: bool,
    /// The DCGM release this simulated DCGM answers as (`"4.4.2"`; default 4.6.0, the
    /// bindings' own): what `dcgmVersionInfo` and `dcgmHostengineVersionInfo` report, the
    /// fields it knows (`dcgm_sys::releases`: a host engine refuses a field group holding a
    /// field of a later release, a library will not read one), the NvLink status versions
    /// the library accepts (v5 from 4.6.0), and, as a 4.6 library meeting an older host
    /// engine, values refused with FUNCTION_NOT_FOUND. The library of a remote exporter
    /// reads it from its own `DCGM_SIM_PROFILE`, `dcgm-sim-hostengine` from its profile.
    #[serde(default = "d_dcgm_version")]
    pub dcgm_version: String,
    /// How far the engine's clock runs ahead of the machine's (ms; negative: behind), as a
    /// remote host engine on a machine whose clock differs: every timestamp it gives
    /// (samples, `dcgmGetValuesSince_v2`'s next-since) is on its own clock.
    #[serde(default)]
    pub clock_offset_ms: i64,
}

impl NodeSpec {
    /// [`NodeSpec::dcgm_version`] parsed (a loaded profile has a valid one).
    pub fn release(&self) -> dcgm_sys::releases::Release {
        dcgm_sys::releases::Release::parse(&self.dcgm_version)
            .unwrap_or(dcgm_sys::releases::BINDINGS)
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LostAttributes {
    #[default]
    Error,
    Blank,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            driver_version: d_driver(),
            nvml_version: d_nvml(),
            cuda_driver_version: d_cuda(),
            seed: d_seed(),
            lost_gpu_attributes: LostAttributes::Error,
            base_unit_fields: false,
            dcgm_version: d_dcgm_version(),
            clock_offset_ms: 0,
        }
    }
}

fn d_dcgm_version() -> String {
    dcgm_sys::releases::BINDINGS.to_string()
}

fn d_driver() -> String {
    "550.54.15".into()
}
fn d_nvml() -> String {
    "12.550.54.15".into()
}
fn d_cuda() -> i64 {
    12040
}
fn d_seed() -> u64 {
    42
}
fn d_brand() -> String {
    "NVIDIA".into()
}
fn d_true() -> bool {
    true
}
fn d_bus() -> u32 {
    0x18
}
fn d_p2p() -> String {
    "auto".into()
}
fn d_dcp_error() -> i32 {
    // DCGM_ST_MODULE_NOT_LOADED: what a node without the profiling module answers.
    -33
}
fn d_max_mig() -> u32 {
    8
}
fn d_pcie_gen() -> u32 {
    5
}
fn d_pcie_width() -> u32 {
    16
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuDefaults {
    pub count: u32,
    pub model: String,
    #[serde(default = "d_brand")]
    pub brand: String,
    /// Framebuffer size; default by model (see [`ModelInfo`]).
    #[serde(default)]
    pub memory_mib: Option<i64>,
    #[serde(default)]
    pub power_limit_w: Option<f64>,
    /// Maximum SM clock and memory clock in MHz; default by model.
    #[serde(default)]
    pub sm_clock_mhz: Option<u32>,
    #[serde(default)]
    pub mem_clock_mhz: Option<u32>,
    #[serde(default)]
    pub vbios: Option<String>,
    #[serde(default)]
    pub inforom: Option<String>,
    /// PCI device id (e.g. 0x2330 for H100 SXM); default by model.
    #[serde(default)]
    pub pci_device_id: Option<u32>,
    #[serde(default = "d_pcie_gen")]
    pub pcie_gen: u32,
    #[serde(default = "d_pcie_width")]
    pub pcie_width: u32,
    /// NVLink links per GPU (0: none).
    #[serde(default)]
    pub nvlinks: u32,
    /// (gpu, link) pairs whose state is Down.
    #[serde(default)]
    pub down_links: Vec<(u32, u32)>,
    /// (gpu, link) pairs whose state is Disabled.
    #[serde(default)]
    pub disabled_links: Vec<(u32, u32)>,
    /// Whether DCP (profiling) metric groups are supported.
    #[serde(default = "d_true")]
    pub dcp: bool,
    /// What ProfGetSupportedMetricGroups answers when `dcp = false`: -33
    /// (MODULE_NOT_LOADED) or -36 (PROFILING_NOT_SUPPORTED).
    #[serde(default = "d_dcp_error")]
    pub dcp_error: i32,
    /// Whether DCGM's profiling module is loaded. Without it (the open-source build, some
    /// packages, GPUs without DCP) ProfGetSupportedMetricGroups and every watch that holds a
    /// DCGM_FI_PROF_* field answer -33 (MODULE_NOT_LOADED), as real DCGM 4.6 does.
    #[serde(default = "d_true")]
    pub profiling_module: bool,
    /// Whether DCGM samples the GPUs' profiling fields through NVML's GPM
    /// (`nvmlGpmQueryDeviceSupport`, Hopper and newer on a real node), in DCGM's core: then
    /// neither the metric groups nor the watches of those fields need the profiling module
    /// (`DcgmModuleCore::ProcessProfGetMetricGroups`, `GetProfModuleServicedEntities`).
    /// Default false: the profiling module serves them, as on the real-DCGM kit. Per GPU:
    /// `[[gpu]] gpm`.
    #[serde(default)]
    pub gpm: bool,
    /// DCP metric groups; default: every profiling field of a Hopper GPU.
    #[serde(default)]
    pub metric_groups: Option<Vec<MetricGroupSpec>>,
    /// GPU ids DCGM reports as unsupported.
    #[serde(default)]
    pub unsupported: Vec<u32>,
    /// PCI bus number of GPU 0; the others follow at 0x10 steps.
    #[serde(default = "d_bus")]
    pub pci_bus_base: u32,
    /// P2P status between GPUs: "auto" (OK between GPUs that both have an Up NVLink),
    /// "nvlink" (always OK), "pcie" (NotSupported) or "error" (the query fails with
    /// BadParam, as real DCGM does when NVML's P2P query fails for any GPU pair).
    #[serde(default = "d_p2p")]
    pub p2p: String,
    /// (gpu, peer, dcgmNvLinkGpuP2PStatus_t) overrides, both directions.
    #[serde(default)]
    pub p2p_overrides: Vec<(u32, u32, u32)>,
    /// GPU instance entity ids are gpuId * this + index (DCGM's maxGpcs).
    #[serde(default = "d_max_mig")]
    pub max_mig_devices: u32,
}

/// Per-GPU overrides of [`GpuDefaults`] and generated identities.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub id: u32,
    pub model: Option<String>,
    pub brand: Option<String>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: Option<String>,
    pub vbios: Option<String>,
    pub memory_mib: Option<i64>,
    pub power_limit_w: Option<f64>,
    pub supported: Option<bool>,
    /// Link states by index (3 Up, 2 Down, 1 Disabled, 0 NotSupported); the length is the
    /// link count of this GPU.
    pub links: Option<Vec<u32>>,
    /// The GPU starts fallen off the bus.
    #[serde(default)]
    pub lost: bool,
    /// Overrides `[gpus] gpm` for this GPU.
    pub gpm: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub gpu: u32,
    /// GPU instances: profile names ("1g.10gb") or tables with the details.
    pub instances: Vec<GiEntry>,
    /// Compute-instance count per instance given by name (default 1 each).
    #[serde(default)]
    pub compute_instances: Vec<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum GiEntry {
    Name(String),
    Spec(GiSpec),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GiSpec {
    /// MIG profile name, e.g. "3g.40gb".
    pub profile: String,
    /// NVML GPU-instance id (default: what the driver typically assigns).
    pub nvml_id: Option<u32>,
    /// NVML GPU-instance profile id (default from the name: 1g 19, 2g 14, 3g 9, 4g 5, 7g 0).
    pub profile_id: Option<u32>,
    /// Slice count (default from the name).
    pub slices: Option<u32>,
    /// Number of compute instances, split evenly (default 1).
    pub compute_instances: Option<u32>,
    /// Explicit compute instances (overrides `compute_instances`).
    #[serde(default)]
    pub cis: Vec<CiSpec>,
    pub uuid: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiSpec {
    pub slices: Option<u32>,
    pub nvml_id: Option<u32>,
    pub profile_id: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    pub count: u32,
    pub ports: u32,
    /// (switch, port) pairs whose state is Down.
    #[serde(default)]
    pub down_ports: Vec<(u32, u32)>,
    /// (switch, port) pairs whose state is Disabled.
    #[serde(default)]
    pub disabled_ports: Vec<(u32, u32)>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    pub count: u32,
    pub cores_per_cpu: u32,
    #[serde(default = "d_cpu_vendor")]
    pub vendor: String,
    #[serde(default = "d_cpu_model")]
    pub model: String,
    /// Serial numbers `dcgmGetCpuHierarchy_v2` reports, by CPU index (missing: none).
    #[serde(default)]
    pub serials: Vec<String>,
}

fn d_cpu_vendor() -> String {
    "NVIDIA".into()
}
fn d_cpu_model() -> String {
    "Grace A02P".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricGroupSpec {
    pub major: u16,
    #[serde(default)]
    pub minor: u16,
    pub fields: Vec<u16>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldOverride {
    pub id: u16,
    /// Only entities of these GPUs (the GPU, its instances and links).
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
    /// Only entities of this group: gpu, gpu_i, gpu_ci, switch, link, cpu, cpu_core.
    #[serde(default)]
    pub entity_group: Option<String>,
    pub gen: Generator,
}

/// `[[nvml_fields]]`: an NVML field id (`NVML_FI_*`) with its generator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlFieldOverride {
    pub id: u32,
    /// Only these GPUs.
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
    pub gen: Generator,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    pub at_s: f64,
    /// A control-file line, e.g. "xid 2 79".
    pub action: String,
}

/// A process holding a context on a GPU or on one MIG device.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    pub gpu: u32,
    /// NVML GPU-instance id; required on a GPU in MIG mode, forbidden otherwise.
    #[serde(default)]
    pub gpu_instance: Option<u32>,
    /// NVML compute-instance id inside that GPU instance (default 0).
    #[serde(default)]
    pub compute_instance: Option<u32>,
    #[serde(default)]
    pub used_memory_mib: u64,
    /// Per-process SM utilisation in percent (nvmlDeviceGetProcessUtilization), constant.
    #[serde(default)]
    pub sm_util: Option<u32>,
    /// SM utilisation that changes over time: a value generator (constant, ramp, sine,
    /// random_walk) evaluated once per simulated second, rounded and clamped to 0..=100.
    /// Instead of `sm_util`.
    #[serde(default)]
    pub sm_util_gen: Option<Generator>,
    #[serde(default)]
    pub mem_util: u32,
    #[serde(default = "d_process_name")]
    pub name: String,
    /// "compute", "graphics" or "compute+graphics".
    #[serde(default = "d_process_kind")]
    pub kind: String,
}

fn d_process_name() -> String {
    "python3".into()
}
fn d_process_kind() -> String {
    "compute".into()
}

impl ProcessSpec {
    /// SM utilisation in percent `t_s` seconds after the driver started; `key` tells
    /// processes apart (a sine's phase, a random walk's steps).
    pub fn sm_util_at(&self, t_s: f64, key: u64) -> u32 {
        match &self.sm_util_gen {
            Some(gen) => match gen.eval(b'd', t_s, key).0 {
                crate::Value::Double(x) if x.is_finite() => x.round().clamp(0.0, 100.0) as u32,
                _ => 0,
            },
            None => self.sm_util.unwrap_or(0),
        }
    }

    /// What is wrong with the process itself (kind, percentages, generator), placement
    /// aside.
    pub fn check(&self) -> Result<(), String> {
        if self.pid == 0 {
            return Err("pid must be positive".into());
        }
        if !matches!(
            self.kind.as_str(),
            "compute" | "graphics" | "compute+graphics"
        ) {
            return Err(format!(
                "kind must be compute, graphics or compute+graphics, not '{}'",
                self.kind
            ));
        }
        if self.sm_util.unwrap_or(0) > 100 || self.mem_util > 100 {
            return Err("sm_util and mem_util are percentages (0..=100)".into());
        }
        if let Some(gen) = &self.sm_util_gen {
            if self.sm_util.is_some() {
                return Err("give sm_util (constant) or sm_util_gen, not both".into());
            }
            match gen {
                Generator::Constant { .. }
                | Generator::Ramp { .. }
                | Generator::Sine { .. }
                | Generator::RandomWalk { .. } => {}
                _ => {
                    return Err(
                        "sm_util_gen must be a constant, ramp, sine or random_walk generator"
                            .into(),
                    )
                }
            }
            gen.validate().map_err(|e| format!("sm_util_gen: {e}"))?;
        }
        Ok(())
    }

    /// Whether the process can run where it says on `node` as it is now: the GPU exists,
    /// and a GPU instance and compute instance are named exactly when it is in MIG mode.
    pub fn check_placement(&self, node: &crate::node::Node) -> Result<(), String> {
        let gpu = node
            .gpu(self.gpu)
            .ok_or_else(|| format!("GPU {} does not exist", self.gpu))?;
        match (&gpu.mig, self.gpu_instance) {
            (None, None) => {
                if self.compute_instance.is_some() {
                    return Err(format!(
                        "compute_instance without gpu_instance (GPU {} is not in MIG mode)",
                        self.gpu
                    ));
                }
            }
            (None, Some(_)) => {
                return Err(format!(
                    "gpu_instance on GPU {}, which has no [[mig]] layout",
                    self.gpu
                ))
            }
            (Some(_), None) => {
                return Err(format!(
                    "GPU {} is in MIG mode; say which gpu_instance (NVML GI id) it runs on",
                    self.gpu
                ))
            }
            (Some(gis), Some(gi_id)) => {
                let gi = gis.iter().find(|g| g.nvml_id == gi_id).ok_or_else(|| {
                    let ids: Vec<u32> = gis.iter().map(|g| g.nvml_id).collect();
                    format!(
                        "GPU {} has no GPU instance {gi_id} (its NVML GI ids: {ids:?})",
                        self.gpu
                    )
                })?;
                let ci = self.compute_instance.unwrap_or(0);
                if !gi.cis.iter().any(|c| c.nvml_id == ci) {
                    return Err(format!(
                        "GPU instance {gi_id} of GPU {} has no compute instance {ci}",
                        self.gpu
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn is_compute(&self) -> bool {
        self.kind.contains("compute")
    }
    pub fn is_graphics(&self) -> bool {
        self.kind.contains("graphics")
    }
}

/// Facts about a GPU model that defaults derive from.
#[derive(Clone, Copy, Debug)]
pub struct ModelInfo {
    pub memory_mib: i64,
    pub power_limit_w: f64,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub compute_capability: i64,
    pub pci_device_id: u32,
    pub vbios: &'static str,
    pub bar1_mib: i64,
    pub mig_slices: i64,
}

/// Defaults by model name; unknown models get H100 SXM numbers.
pub fn model_info(model: &str) -> ModelInfo {
    let m = model.to_ascii_uppercase();
    let h100 = ModelInfo {
        memory_mib: 81559,
        power_limit_w: 700.0,
        sm_clock_mhz: 1980,
        mem_clock_mhz: 2619,
        compute_capability: 90,
        pci_device_id: 0x2330,
        vbios: "96.00.74.00.0E",
        bar1_mib: 131_072,
        mig_slices: 7,
    };
    if m.contains("A100") {
        let pcie = m.contains("PCIE");
        ModelInfo {
            memory_mib: if m.contains("80GB") { 81920 } else { 40960 },
            power_limit_w: if pcie { 250.0 } else { 400.0 },
            sm_clock_mhz: 1410,
            mem_clock_mhz: if pcie { 1215 } else { 1593 },
            compute_capability: 80,
            pci_device_id: if pcie { 0x20f1 } else { 0x20b2 },
            vbios: "92.00.36.00.02",
            bar1_mib: 131_072,
            mig_slices: 7,
        }
    } else if m.contains("H200") {
        ModelInfo {
            memory_mib: 143_771,
            mem_clock_mhz: 3201,
            pci_device_id: 0x2335,
            ..h100
        }
    } else if m.contains("GH200") {
        ModelInfo {
            memory_mib: 97_871,
            power_limit_w: 900.0,
            pci_device_id: 0x2342,
            ..h100
        }
    } else if m.contains("H100") && m.contains("PCIE") {
        ModelInfo {
            power_limit_w: 350.0,
            sm_clock_mhz: 1755,
            mem_clock_mhz: 1593,
            pci_device_id: 0x2331,
            ..h100
        }
    } else if m.contains("T4") {
        ModelInfo {
            memory_mib: 15_360,
            power_limit_w: 70.0,
            sm_clock_mhz: 1590,
            mem_clock_mhz: 5001,
            compute_capability: 75,
            pci_device_id: 0x1eb8,
            vbios: "90.04.96.00.02",
            bar1_mib: 256,
            mig_slices: 0,
        }
    } else {
        h100
    }
}

/// The parts of a MIG profile name: "3g.40gb" → (3, 40, ""), "1g.10gb+me" → (1, 10, "+me").
pub fn parse_mig_name(profile: &str) -> Option<(u32, u32, &str)> {
    let (g, rest) = profile.split_once("g.")?;
    let slices: u32 = g.parse().ok().filter(|n| (1..=8).contains(n))?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let gb: u32 = rest[..digits].parse().ok().filter(|n| *n > 0)?;
    let suffix = rest[digits..].strip_prefix("gb")?;
    if !suffix.is_empty() && !suffix.starts_with(['+', '-']) {
        return None;
    }
    Some((slices, gb, suffix))
}

/// Slices of a MIG profile name ("3g.40gb" → 3).
pub fn slices_of(profile: &str) -> Option<u32> {
    parse_mig_name(profile).map(|p| p.0)
}

pub const ENTITY_GROUP_NAMES: [(&str, u32); 7] = [
    ("gpu", 1),
    ("switch", 3),
    ("gpu_i", 4),
    ("gpu_ci", 5),
    ("link", 6),
    ("cpu", 7),
    ("cpu_core", 8),
];

impl Profile {
    pub fn load(path: &Path) -> Result<Profile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| e.to_string())?;
        p.validate()?;
        Ok(p)
    }

    /// The built-in default: 8x H100 with NVLink and NvSwitches.
    pub fn builtin_default() -> Profile {
        match Self::parse(BUILTIN) {
            Ok(p) => p,
            // The file is compiled in and parsed by a unit test, so this cannot happen in a
            // released build; say what broke rather than unwinding with a bare unwrap.
            Err(e) => {
                panic!("the built-in profile etc/sim/h100-8gpu-nvswitch.toml is invalid: {e}")
            }
        }
    }

    fn validate(&self) -> Result<(), String> {
        if dcgm_sys::releases::Release::parse(&self.node.dcgm_version).is_none() {
            return Err(format!(
                "node.dcgm_version must be a DCGM release such as \"4.5.3\", not '{}'",
                self.node.dcgm_version
            ));
        }
        let g = &self.gpus;
        if g.count == 0 || g.count > 32 {
            return Err(format!("gpus.count must be 1..=32, not {}", g.count));
        }
        if g.nvlinks > 36 {
            return Err(format!(
                "gpus.nvlinks must be at most 36, not {}",
                g.nvlinks
            ));
        }
        if g.max_mig_devices == 0 || g.max_mig_devices > 8 {
            return Err("gpus.max_mig_devices must be 1..=8".into());
        }
        if !matches!(g.p2p.as_str(), "auto" | "nvlink" | "pcie" | "error") {
            return Err(format!(
                "gpus.p2p must be auto, nvlink, pcie or error, not '{}'",
                g.p2p
            ));
        }
        if g.dcp_error >= 0 {
            return Err(format!(
                "gpus.dcp_error must be a negative dcgmReturn_t, not {}",
                g.dcp_error
            ));
        }
        for (name, list) in [
            ("down_links", &g.down_links),
            ("disabled_links", &g.disabled_links),
        ] {
            for (gpu, link) in list {
                if *gpu >= g.count || *link >= 36 {
                    return Err(format!("gpus.{name}: no link {link} on GPU {gpu}"));
                }
            }
        }
        for u in &g.unsupported {
            if *u >= g.count {
                return Err(format!("gpus.unsupported: GPU {u} does not exist"));
            }
        }
        for (a, b, s) in &g.p2p_overrides {
            if *a >= g.count || *b >= g.count || *s > 6 {
                return Err(format!(
                    "gpus.p2p_overrides: [{a}, {b}, {s}] needs two existing GPUs and a status 0..=6"
                ));
            }
        }
        if let Some(groups) = &g.metric_groups {
            if groups.len() > 10 {
                return Err(
                    "gpus.metric_groups: at most 10 groups (dcgmProfGetMetricGroups_v3)".into(),
                );
            }
            for (i, mg) in groups.iter().enumerate() {
                if mg.fields.is_empty() || mg.fields.len() > 64 {
                    return Err(format!("gpus.metric_groups[{i}]: 1 to 64 fields"));
                }
                for f in &mg.fields {
                    known_field(*f).map_err(|e| format!("gpus.metric_groups[{i}]: {e}"))?;
                }
            }
        }
        let mut seen = Vec::new();
        for (i, s) in self.gpu.iter().enumerate() {
            if s.id >= g.count {
                return Err(format!(
                    "gpu[{i}]: GPU {} does not exist (gpus.count = {})",
                    s.id, g.count
                ));
            }
            if seen.contains(&s.id) {
                return Err(format!("gpu[{i}]: GPU {} is listed twice", s.id));
            }
            seen.push(s.id);
            if let Some(links) = &s.links {
                if links.len() > 36 || links.iter().any(|l| *l > 3) {
                    return Err(format!(
                        "gpu[{i}].links: at most 36 states, each 0..=3 (NotSupported, Disabled, Down, Up)"
                    ));
                }
            }
            if s.memory_mib.is_some_and(|m| m <= 0) {
                return Err(format!("gpu[{i}].memory_mib must be positive"));
            }
        }
        if g.memory_mib.is_some_and(|m| m <= 0) {
            return Err("gpus.memory_mib must be positive".into());
        }
        let mut mig_gpus = Vec::new();
        for (i, m) in self.mig.iter().enumerate() {
            if m.gpu >= g.count {
                return Err(format!("mig[{i}]: GPU {} does not exist", m.gpu));
            }
            if mig_gpus.contains(&m.gpu) {
                return Err(format!("mig[{i}]: GPU {} has two MIG layouts", m.gpu));
            }
            mig_gpus.push(m.gpu);
            let specs = m.gi_specs();
            check_layout(&specs, g.max_mig_devices)
                .map_err(|e| format!("mig[{i}] (GPU {}): {e}", m.gpu))?;
        }
        if let Some(s) = &self.switches {
            if s.count > 12 || s.ports > 256 {
                return Err("switches: at most 12 switches of 256 ports".into());
            }
            for (name, list) in [
                ("down_ports", &s.down_ports),
                ("disabled_ports", &s.disabled_ports),
            ] {
                for (sw, port) in list {
                    if *sw >= s.count || *port >= s.ports {
                        return Err(format!("switches.{name}: no port {port} on switch {sw}"));
                    }
                }
            }
        }
        if let Some(c) = &self.cpus {
            if c.count == 0
                || c.count > 8
                || c.cores_per_cpu == 0
                || c.count * c.cores_per_cpu > 1024
            {
                return Err("cpus: 1 to 8 CPUs, at least one core each, at most 1024 cores".into());
            }
        }
        for (i, f) in self.fields.iter().enumerate() {
            known_field(f.id).map_err(|e| format!("fields[{i}]: {e}"))?;
            if let Some(eg) = &f.entity_group {
                if !ENTITY_GROUP_NAMES.iter().any(|(n, _)| n == eg) {
                    return Err(format!(
                        "fields[{i}].entity_group: '{eg}' is not one of gpu, gpu_i, gpu_ci, switch, link, cpu, cpu_core"
                    ));
                }
            }
            f.gen
                .validate()
                .map_err(|e| format!("fields[{i}] (field {}): {e}", f.id))?;
            if crate::nvlink::sources(f.id).is_some() {
                return Err(format!(
                    "fields[{i}]: field {} is no reading but the rate DCGM computes from NVML's \
                     NVLink KiB counters: give those as [[nvml_fields]] id = 138 (TX) / 139 (RX)",
                    f.id
                ));
            }
        }
        for (i, f) in self.nvml_fields.iter().enumerate() {
            if ![crate::nvlink::DATA_TX, crate::nvlink::DATA_RX].contains(&f.id) {
                return Err(format!(
                    "nvml_fields[{i}]: NVML field {} is not simulated (138 and 139 are: \
                     NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX)",
                    f.id
                ));
            }
            if matches!(f.gen, Generator::String { .. }) {
                return Err(format!("nvml_fields[{i}]: a counter cannot be text"));
            }
            f.gen
                .validate()
                .map_err(|e| format!("nvml_fields[{i}] (NVML field {}): {e}", f.id))?;
        }
        for (i, f) in self.faults.iter().enumerate() {
            if !(f.at_s >= 0.0 && f.at_s.is_finite()) {
                return Err(format!(
                    "faults[{i}].at_s must be a non-negative number of seconds"
                ));
            }
            faults::parse_line(&f.action)
                .map_err(|e| format!("faults[{i}]: '{}': {e}", f.action))?;
        }
        if let Some(h) = self.nvml.process_sample_history_s {
            if !(1..=3600).contains(&h) {
                return Err(format!(
                    "nvml.process_sample_history_s must be 1..=3600 seconds, not {h}"
                ));
            }
        }
        self.validate_processes()
    }

    /// Processes must sit on a GPU, GPU instance and compute instance the node has; the
    /// MIG ids are only known once the layouts are built, so this builds the node.
    fn validate_processes(&self) -> Result<(), String> {
        if self.processes.is_empty() {
            return Ok(());
        }
        let node = crate::node::Node::build(self);
        let mut seen = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            let at = format!("processes[{i}] (pid {})", p.pid);
            p.check()
                .and_then(|()| p.check_placement(&node))
                .map_err(|e| format!("{at}: {e}"))?;
            if seen.contains(&(p.pid, p.gpu)) {
                return Err(format!("{at}: listed twice on GPU {}", p.gpu));
            }
            seen.push((p.pid, p.gpu));
        }
        Ok(())
    }

    /// The overrides of GPU `id`, if any.
    pub fn gpu_spec(&self, id: u32) -> Option<&GpuSpec> {
        self.gpu.iter().find(|s| s.id == id)
    }
}

impl MigSpec {
    /// Every instance as a full spec (names expanded, `compute_instances` applied).
    pub fn gi_specs(&self) -> Vec<GiSpec> {
        self.instances
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                GiEntry::Name(n) => GiSpec {
                    profile: n.clone(),
                    compute_instances: self.compute_instances.get(i).copied(),
                    ..GiSpec::default()
                },
                GiEntry::Spec(s) => s.clone(),
            })
            .collect()
    }
}

fn known_field(id: u16) -> Result<(), String> {
    dcgm_sys::fields::by_id(id)
        .or_else(|| dcgm_sys::fields::base_unit_by_id(id))
        .map(|_| ())
        .ok_or_else(|| format!("field {id} does not exist in DCGM 4.6"))
}

/// Checks that a MIG layout fits a GPU: names, slices, instance and compute-instance counts.
pub fn check_layout(gis: &[GiSpec], max_devices: u32) -> Result<(), String> {
    if gis.len() > max_devices as usize {
        return Err(format!("more than {max_devices} GPU instances"));
    }
    let mut slices = 0;
    let mut cis = 0;
    for gi in gis {
        let (s, _, _) = parse_mig_name(&gi.profile)
            .ok_or_else(|| format!("'{}' is not a MIG profile name like 1g.10gb", gi.profile))?;
        let s = gi.slices.unwrap_or(s);
        if s == 0 || s > 8 {
            return Err(format!("{}: slices must be 1..=8", gi.profile));
        }
        slices += s;
        let n = if gi.cis.is_empty() {
            gi.compute_instances.unwrap_or(1)
        } else {
            gi.cis.len() as u32
        };
        if n == 0 || n > s {
            return Err(format!(
                "{}: 1 to {s} compute instances (one slice each at least), not {n}",
                gi.profile
            ));
        }
        let ci_slices: u32 = gi.cis.iter().map(|c| c.slices.unwrap_or(1)).sum();
        if ci_slices > s {
            return Err(format!(
                "{}: compute instances use {ci_slices} slices of {s}",
                gi.profile
            ));
        }
        cis += n;
    }
    if slices > 8 {
        return Err(format!(
            "instances use {slices} slices; a GPU has at most 8"
        ));
    }
    if cis > max_devices {
        return Err(format!(
            "{cis} compute instances; at most {max_devices} per GPU (their entity ids are gpuId*{max_devices}+n)"
        ));
    }
    Ok(())
}

pub const BUILTIN: &str = include_str!("../../../etc/sim/h100-8gpu-nvswitch.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_names() {
        assert_eq!(parse_mig_name("3g.40gb"), Some((3, 40, "")));
        assert_eq!(parse_mig_name("1g.10gb+me"), Some((1, 10, "+me")));
        assert_eq!(parse_mig_name("7g.80gb"), Some((7, 80, "")));
        for bad in [
            "big", "3g", "3g.gb", "0g.10gb", "9g.10gb", "3g.40", "3g.40gbx", "g.10gb",
        ] {
            assert_eq!(parse_mig_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_builtin_profile_parses() {
        let p = Profile::builtin_default();
        assert_eq!(p.gpus.count, 8);
    }

    #[test]
    fn the_usage_bench_profile_has_16_pods_of_4_processes_per_gpu() {
        let p = Profile::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/sim/bench-usage.toml"),
        )
        .unwrap();
        assert_eq!(p.processes.len(), 8 * 16 * 4);
        for gpu in 0..8 {
            assert_eq!(p.processes.iter().filter(|x| x.gpu == gpu).count(), 64);
        }
        assert!(p.processes.iter().all(|x| x.sm_util_gen.is_some()));
    }

    #[test]
    fn validation_names_the_table() {
        let base = "[gpus]\ncount = 2\nmodel = \"x\"\n";
        let err = |extra: &str| Profile::parse(&format!("{base}{extra}")).unwrap_err();
        assert!(err("[[mig]]\ngpu = 5\ninstances = [\"1g.10gb\"]\n").contains("mig[0]"));
        assert!(
            err("[[mig]]\ngpu = 1\ninstances = [\"4g.40gb\", \"4g.40gb\", \"1g.10gb\"]\n")
                .contains("slices")
        );
        assert!(
            err("[[mig]]\ngpu = 1\ninstances = [\"2g.20gb\"]\ncompute_instances = [3]\n")
                .contains("compute instances")
        );
        assert!(
            err("[[fields]]\nid = 9999\ngen = { kind = \"constant\", value = 1.0 }\n")
                .contains("fields[0]")
        );
        assert!(err("[[fields]]\nid = 150\ngen = { kind = \"sine\", mid = 1.0, amplitude = 1.0, period_s = 0.0 }\n")
            .contains("period"));
        assert!(err("[[faults]]\nat_s = 1.0\naction = \"explode 1\"\n").contains("faults[0]"));
        assert!(err("[[gpu]]\nid = 2\n").contains("gpu[0]"));
        assert!(err("[[gpu]]\nid = 1\nlinks = [3, 4]\n").contains("links"));
        assert!(
            err("[switches]\ncount = 1\nports = 4\ndown_ports = [[0, 4]]\n").contains("down_ports")
        );
        assert!(Profile::parse(&format!("{base}bogus = 1\n")).is_err());
    }

    #[test]
    fn detailed_mig_tables_parse() {
        let p = Profile::parse(
            "[gpus]\ncount = 1\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
             [[mig]]\ngpu = 0\ninstances = [\"1g.10gb\", { profile = \"3g.40gb\", nvml_id = 2, cis = [{ slices = 2 }, { slices = 1 }] }]\n",
        )
        .unwrap();
        let specs = p.mig[0].gi_specs();
        assert_eq!(specs[1].nvml_id, Some(2));
        assert_eq!(specs[1].cis.len(), 2);
    }

    #[test]
    fn processes_must_sit_on_existing_gpus_and_instances() {
        let base = "[gpus]\ncount = 2\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
                    [[mig]]\ngpu = 1\ninstances = [\"3g.40gb\", \"1g.10gb\"]\n";
        let parse = |extra: &str| Profile::parse(&format!("{base}{extra}"));
        let ok = parse(
            "[[processes]]\npid = 10\ngpu = 0\nused_memory_mib = 100\nsm_util = 30\n\
             [[processes]]\npid = 11\ngpu = 1\ngpu_instance = 1\ncompute_instance = 0\n",
        )
        .unwrap();
        assert_eq!(ok.processes.len(), 2);
        assert!(ok.processes[0].is_compute() && !ok.processes[0].is_graphics());
        let err = |extra: &str| parse(extra).unwrap_err();
        assert!(err("[[processes]]\npid = 1\ngpu = 5\n").contains("processes[0] (pid 1): GPU 5"));
        assert!(err("[[processes]]\npid = 1\ngpu = 1\n").contains("MIG mode"));
        assert!(err("[[processes]]\npid = 1\ngpu = 0\ngpu_instance = 1\n").contains("no [[mig]]"));
        assert!(err("[[processes]]\npid = 1\ngpu = 1\ngpu_instance = 9\n")
            .contains("no GPU instance 9"));
        assert!(
            err("[[processes]]\npid = 1\ngpu = 1\ngpu_instance = 1\ncompute_instance = 3\n")
                .contains("no compute instance 3")
        );
        assert!(err("[[processes]]\npid = 1\ngpu = 0\nsm_util = 101\n").contains("percentages"));
        assert!(err("[[processes]]\npid = 1\ngpu = 0\nkind = \"gfx\"\n").contains("kind"));
        assert!(
            err("[[processes]]\npid = 1\ngpu = 0\n[[processes]]\npid = 1\ngpu = 0\n")
                .contains("twice")
        );

        // Utilisation over time: a generator instead of the constant.
        let gen = parse(
            "[[processes]]\npid = 3\ngpu = 0\n\
             sm_util_gen = { kind = \"ramp\", start = 10, per_s = 5, max = 150 }\n",
        )
        .unwrap();
        let p = &gen.processes[0];
        assert_eq!(p.sm_util_at(0.0, 1), 10);
        assert_eq!(p.sm_util_at(3.0, 1), 25);
        // Clamped to a percentage.
        assert_eq!(p.sm_util_at(100.0, 1), 100);
        assert_eq!(ok.processes[0].sm_util_at(50.0, 1), 30);
        assert_eq!(ok.processes[1].sm_util_at(50.0, 1), 0);
        assert!(err("[[processes]]\npid = 1\ngpu = 0\nsm_util = 5\n\
             sm_util_gen = { kind = \"constant\", value = 3 }\n")
        .contains("not both"));
        assert!(err(
            "[[processes]]\npid = 1\ngpu = 0\nsm_util_gen = { kind = \"string\", value = \"x\" }\n"
        )
        .contains("sm_util_gen must be"));
        assert!(err("[[processes]]\npid = 1\ngpu = 0\n\
             sm_util_gen = { kind = \"sine\", mid = 5, amplitude = 1, period_s = 0 }\n")
        .contains("processes[0] (pid 1): sm_util_gen: period_s"));
        assert!(err("[nvml]\nprocess_sample_history_s = 0\n").contains("1..=3600"));
        assert_eq!(
            parse("[nvml]\nprocess_sample_history_s = 5\n")
                .unwrap()
                .nvml
                .sample_history_s(),
            5
        );
        assert_eq!(ok.nvml.sample_history_s(), DEFAULT_SAMPLE_HISTORY_S);
    }
}
