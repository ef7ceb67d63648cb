//! Per-consumer GPU accounting (`--usage-accounting`): who really uses a device. Each
//! collection, the energy a GPU or MIG instance used since the previous one
//! (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`) is split between the consumers holding it (pods,
//! containers, HPC jobs) by their share of its utilisation, and what nobody used stays on the
//! device as idle energy, so consumers plus idle add up to the device's total. A consumer that
//! holds a device for longer than a window without using it is flagged allocated-but-idle.
//!
//! The sources say who holds what ([`Consumer`]s per [`EntityKey`] in the `Snapshot`) and
//! which process belongs to whom ([`Owner`]); the [`Accountant`] keeps the counters between
//! collections and adds the `DCGM_EXP_*` usage families to the page after the merge.

use std::time::Duration;

/// A device consumers hold: a whole GPU (its UUID, `None`) or one of its MIG GPU instances
/// (the parent GPU's UUID and the GPU-instance id of its series' `GPU_I_ID`).
pub type EntityKey = (String, Option<u32>);

/// Who a process belongs to, from its cgroup (`<proc-root>/<pid>/cgroup`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// A Kubernetes pod, by UID.
    Pod(String),
    /// A Docker/podman container, by its full id.
    Container(String),
    /// An HPC (Slurm) job, by id.
    Job(String),
}

/// One consumer holding a device this collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// The labels its series carry (`pod`, `namespace`, `container`, `vgpu`; `container`
    /// outside Kubernetes; `hpc_job`), in order.
    pub labels: Vec<(String, String)>,
    /// Whose processes are its own; `None` when unknown (then only an exclusive holding is
    /// attributed: it gets the whole device).
    pub owner: Option<Owner>,
    /// Holds a shared replica (time-slicing, MPS) rather than the whole device.
    pub replica: bool,
}

/// `--usage-idle-window` and `--usage-max-consumers-per-gpu`.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub idle_window: Duration,
    pub max_consumers_per_gpu: usize,
    /// `DCGM_FI_DEV_GPU_UTIL_RATIO` is a 0-1 ratio (`--emulate-version=4.9.0`), not field
    /// 203 in percent under its 4.9.0 name.
    pub util_ratio: bool,
}
