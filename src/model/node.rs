//! The node a page describes, as collection discovered it: GPUs with their identity, MIG
//! instances, NvSwitches, NVLink links and CPUs. `collect::topology` discovers it; the sinks
//! describe it beside the page (debug dumps).

use dcgm_sys::{Entity, LinkId, LinkState, MigEntity};

/// Identity of one GPU, used for its labels.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Gpu {
    pub id: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub model: String,
}

/// A MIG GPU instance (or compute instance, when `compute_instance` is set).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Instance {
    pub entity: Entity,
    pub gpu: u32,
    /// The GPU-instance entity this belongs to (itself for a GPU instance).
    pub gpu_instance: u32,
    /// NVML GPU-instance id (`GPU_I_ID`).
    pub nvml_instance_id: u32,
    /// NVML compute-instance id, for compute instances.
    pub compute_instance: Option<u32>,
    /// MIG profile name (`GPU_I_PROFILE`), e.g. "1g.10gb".
    pub profile: String,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Link {
    pub id: LinkId,
    pub state: LinkState,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cpu {
    pub id: u32,
    pub cores: Vec<u32>,
    /// DCGM's serial number of the CPU; empty where it reports none.
    pub serial: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Topology {
    pub gpus: Vec<Gpu>,
    /// GPUs DCGM lists but reports lost (fallen off the bus): not watched.
    pub lost_gpus: Vec<u32>,
    /// GPU instances then their compute instances, in DCGM's order.
    pub instances: Vec<Instance>,
    /// The MIG hierarchy as DCGM returned it (to notice reconfigurations).
    pub mig_rows: Vec<MigEntity>,
    pub switches: Vec<u32>,
    pub links: Vec<Link>,
    pub cpus: Vec<Cpu>,
    /// Non-fatal discovery problems, logged once by the caller.
    pub warnings: Vec<String>,
}
