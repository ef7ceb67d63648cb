//! A simulated node, as described by a TOML profile (see etc/sim/README.md).

use serde::Deserialize;
use std::path::Path;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub node: Node,
    pub gpus: Gpus,
    #[serde(default)]
    pub mig: Vec<MigLayout>,
    #[serde(default)]
    pub switches: Option<Switches>,
    #[serde(default)]
    pub cpus: Option<Cpus>,
    /// Generator overrides.
    #[serde(default)]
    pub fields: Vec<FieldOverride>,
    /// Faults applied at `at_s` seconds after the engine starts.
    #[serde(default)]
    pub faults: Vec<ScheduledFault>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    #[serde(default = "d_driver")]
    pub driver_version: String,
    #[serde(default = "d_nvml")]
    pub nvml_version: String,
    #[serde(default = "d_cuda")]
    pub cuda_driver_version: i64,
    #[serde(default = "d_seed")]
    pub seed: u64,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            driver_version: d_driver(),
            nvml_version: d_nvml(),
            cuda_driver_version: d_cuda(),
            seed: d_seed(),
        }
    }
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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpus {
    pub count: u32,
    pub model: String,
    #[serde(default = "d_brand")]
    pub brand: String,
    #[serde(default = "d_mem")]
    pub memory_mib: i64,
    #[serde(default = "d_power")]
    pub power_limit_w: f64,
    /// NVLink links per GPU (0: none).
    #[serde(default)]
    pub nvlinks: u32,
    /// (gpu, link) pairs whose state is Down.
    #[serde(default)]
    pub down_links: Vec<(u32, u32)>,
    /// Whether DCP (profiling) metric groups are supported.
    #[serde(default = "d_true")]
    pub dcp: bool,
    /// GPUs DCGM reports as unsupported.
    #[serde(default)]
    pub unsupported: Vec<u32>,
    /// PCI bus number of GPU 0; the others follow.
    #[serde(default = "d_bus")]
    pub pci_bus_base: u32,
    /// P2P status between GPUs: "nvlink" (all OK) or "pcie" (TopologyNotSupported).
    #[serde(default = "d_p2p")]
    pub p2p: String,
}

fn d_brand() -> String {
    "NVIDIA".into()
}
fn d_mem() -> i64 {
    81559
}
fn d_power() -> f64 {
    700.0
}
fn d_true() -> bool {
    true
}
fn d_bus() -> u32 {
    0x18
}
fn d_p2p() -> String {
    "nvlink".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigLayout {
    pub gpu: u32,
    /// GPU-instance profile names, e.g. "1g.10gb".
    pub instances: Vec<String>,
    /// Compute instances per GPU instance (default 1 each).
    #[serde(default)]
    pub compute_instances: Vec<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    pub count: u32,
    pub ports: u32,
    /// (switch, port) pairs whose state is Down.
    #[serde(default)]
    pub down_ports: Vec<(u32, u32)>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpus {
    pub count: u32,
    pub cores_per_cpu: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldOverride {
    pub id: u16,
    /// Limit to these GPUs (default: every entity).
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
    pub gen: Generator,
}

/// How a field's value moves over time.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Generator {
    Constant {
        value: f64,
    },
    Ramp {
        start: f64,
        per_s: f64,
        max: f64,
    },
    Sine {
        mid: f64,
        amplitude: f64,
        period_s: f64,
    },
    RandomWalk {
        start: f64,
        step: f64,
        min: f64,
        max: f64,
    },
    Counter {
        per_s: f64,
    },
    Text {
        value: String,
    },
    /// blank, not_found, not_supported or not_permissioned, in the payload with status OK.
    Sentinel {
        which: String,
    },
    /// A dcgmReturn_t status with a blank payload.
    Error {
        status: i32,
    },
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    pub at_s: f64,
    /// A control-file line, e.g. "xid 2 79".
    pub action: String,
}

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

    fn validate(&self) -> Result<(), String> {
        if self.gpus.count == 0 || self.gpus.count > 32 {
            return Err(format!(
                "gpus.count must be 1..=32, not {}",
                self.gpus.count
            ));
        }
        if self.gpus.nvlinks > 36 {
            return Err("gpus.nvlinks must be at most 36".into());
        }
        for m in &self.mig {
            if m.gpu >= self.gpus.count {
                return Err(format!("mig: GPU {} does not exist", m.gpu));
            }
            if m.instances.len() > 8 {
                return Err(format!("mig: GPU {} has more than 8 instances", m.gpu));
            }
            for p in &m.instances {
                slices_of(p)
                    .ok_or_else(|| format!("mig: '{p}' is not a profile name like 1g.10gb"))?;
            }
        }
        if let Some(s) = &self.switches {
            if s.count > 12 || s.ports > 256 {
                return Err("switches: at most 12 switches of 256 ports".into());
            }
        }
        if let Some(c) = &self.cpus {
            if c.count > 8 || c.count * c.cores_per_cpu > 1024 {
                return Err("cpus: at most 8 CPUs and 1024 cores".into());
            }
        }
        for f in &self.faults {
            crate::engine::faults::parse_line(&f.action)
                .map_err(|e| format!("faults: '{}': {e}", f.action))?;
        }
        Ok(())
    }

    pub fn builtin_default() -> Profile {
        Self::parse(include_str!("../../../etc/sim/h100-8gpu-nvswitch.toml"))
            .expect("the built-in profile is valid (tested)")
    }
}

/// Slices of a MIG profile name ("3g.40gb" → 3).
pub fn slices_of(profile: &str) -> Option<u32> {
    let (g, rest) = profile.split_once('g')?;
    if !rest.starts_with('.') {
        return None;
    }
    g.parse().ok().filter(|n| (1..=8).contains(n))
}
