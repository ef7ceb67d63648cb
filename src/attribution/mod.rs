//! The attribution stage, between collection and rendering: what the sources know about
//! who uses each GPU (the kubelet's pod allocations, NVML's MIG devices and processes, HPC
//! job files, and any `DeviceLabelSource`) merged into the page's GPU series by one piece of
//! code, `merge` (`merge.rs`, the rules). Sources are refreshed on the collection thread
//! (`Attribution::apply` in `sources.rs`, once per collection) and never during a scrape.
//! This file holds the stage's types.

pub mod container;
pub(crate) mod device_ids;
pub mod dra;
mod error;
pub mod hpc;
pub mod kubelet;
mod merge;
pub(crate) mod metrics;
pub(crate) mod mig;
pub mod nvml;
mod outside;
pub mod pids;
pub mod podmeta;
mod sources;
pub(crate) mod usage;

pub use error::Error;
pub use merge::{claim_map, merge, pod_map};
pub use sources::Attribution;

use nvml::Process;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// How kubelet device ids are matched to whole-GPU series (`--kubernetes-gpu-id-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdType {
    /// The GPU UUID.
    Uid,
    /// `nvidia<N>`.
    DeviceName,
}

impl IdType {
    pub fn parse(s: &str) -> Result<IdType, UnknownIdType> {
        match s {
            "uid" => Ok(IdType::Uid),
            "device-name" => Ok(IdType::DeviceName),
            other => Err(UnknownIdType(other.to_string())),
        }
    }
}

/// `--kubernetes-gpu-id-type` that is neither `uid` nor `device-name` (the value given).
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("--kubernetes-gpu-id-type {0}: expected uid or device-name")]
pub struct UnknownIdType(pub String);

#[derive(Clone, Debug)]
pub struct Options {
    /// `-k`: map GPUs to pods through the kubelet.
    pub kubernetes: bool,
    pub kubelet_socket: PathBuf,
    pub id_type: IdType,
    /// `--nvidia-resource-names`.
    pub resource_names: Vec<String>,
    /// `--kubernetes-virtual-gpus`.
    pub virtual_gpus: bool,
    /// `-o`: `pod_name`, `pod_namespace`, `container_name`.
    pub old_names: bool,
    /// Add `pod_uid` (needs a `PodMetadata` source for the UID).
    pub pod_uid: bool,
    /// Add the pod's labels from its `PodMetadata`.
    pub pod_labels: bool,
    /// `--kubernetes-enable-dra`: copies of a GPU's series per DRA claim on it.
    pub dra: bool,
    /// `--hpc-job-mapping-dir`.
    pub hpc_dir: Option<PathBuf>,
    /// Longest a kubelet call may take (it runs on its own thread).
    pub kubelet_deadline: Duration,
    /// Longest a collection waits for the kubelet's answer before using the previous one.
    pub kubelet_wait: Duration,
    /// Longest a collection waits for NVML (it runs on its own thread; a later answer
    /// serves the next collection).
    pub nvml_wait: Duration,
    /// Where `/proc/<pid>/cgroup` lives (`--proc-root`; tests point it elsewhere).
    pub proc_root: PathBuf,
    /// `--usage-accounting`: per-consumer energy, utilisation shares, allocated-but-idle.
    pub usage: Option<usage::Settings>,
}

/// A pod's UID and labels, from the Kubernetes API (the kubelet's `List` has neither).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    pub uid: String,
    /// Already sanitised to Prometheus label names and filtered by the allowlist.
    pub labels: Vec<(String, String)>,
}

/// Pod metadata by (namespace, pod name); plugged in by a Kubernetes API pod watch.
pub trait PodMetadata: Send + Sync {
    fn lookup(&self, namespace: &str, pod: &str) -> Option<PodMeta>;
}

/// Labels a source attaches to one device: a GPU UUID (its series and its MIG instances'
/// series) or a MIG device UUID (`MIG-…`, resolved through NVML to its instance's series).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DeviceLabels {
    pub device_uuid: String,
    pub labels: Vec<(String, String)>,
}

/// The extension point for more attribution sources (e.g. a container runtime outside
/// Kubernetes). `device_labels` is called once per collection on the collection thread: a
/// source that talks to something slow refreshes on its own thread and returns its cache.
pub(crate) trait DeviceLabelSource: Send {
    fn name(&self) -> &'static str;
    /// The GPUs on this collection's page (UUID -> GPU index), just before
    /// `device_labels`: for sources that name GPUs by index or as "all".
    fn observe_gpus(&mut self, _gpus: &HashMap<String, u32>) {}
    fn device_labels(&mut self) -> Result<Vec<DeviceLabels>, String>;
    /// `--usage-accounting`: who holds each device (a GPU or `MIG-…` UUID, as in
    /// `device_labels`), one consumer per holder, after `device_labels` of the same
    /// collection; nothing while `device_labels` fails. Sources that cannot tell holders
    /// apart answer nothing.
    fn consumers(&mut self) -> Vec<(String, usage::Consumer)> {
        Vec::new()
    }
}

/// One pod's claim on a series key.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRef {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The sharing replica (`::N`, `/vgpuN`).
    pub vgpu: Option<String>,
    pub meta: Option<PodMeta>,
}

/// One container's DRA claim on a GPU (or on a MIG device of it).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRef {
    pub pod: PodRef,
    pub claim_name: String,
    pub claim_namespace: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// (profile, MIG UUID) when the claimed device is a MIG device.
    pub mig: Option<(String, String)>,
}

/// Claims by GPU UUID, and by (GPU UUID, GPU-instance id) for claimed MIG devices.
#[derive(Default)]
pub struct ClaimMap {
    pub gpus: HashMap<String, Vec<ClaimRef>>,
    pub instances: HashMap<(String, u32), Vec<ClaimRef>>,
    /// `pool/device` of the GPU driver's claims no ResourceSlice describes, sorted, once each.
    pub unresolved: Vec<String>,
}

/// Everything the merge needs, built once per collection from the sources.
#[derive(Default)]
pub struct Snapshot {
    /// Series key (UUID, `nvidiaN`, `"<gpu>-<gi>"`, raw device id...) -> pods, in kubelet order.
    pub pods: HashMap<String, Vec<PodRef>>,
    /// Processes per GPU UUID, where NVML answered (virtual-GPU mode only).
    pub processes: HashMap<String, Vec<Process>>,
    /// Pod UID of each process seen.
    pub pid_pods: HashMap<u32, String>,
    /// HPC jobs by `"<gpu>"` / `"<gpu>.<gi>"`.
    pub hpc_jobs: HashMap<String, Vec<String>>,
    /// The HPC files that failed to read, whose last jobs `hpc_jobs` keeps for a grace:
    /// their labels stay, but usage accounting does not take them for present.
    pub hpc_unknown: std::collections::BTreeSet<String>,
    /// `--usage-accounting`: the consumers those files named, per device (kept while
    /// missing, their shares unknown).
    pub unknown_consumers: HashMap<usage::EntityKey, Vec<usage::ledger::ConsumerId>>,
    /// Extra labels by GPU UUID (whole GPU) or (GPU UUID, GPU-instance id).
    pub gpu_labels: HashMap<String, Vec<(String, String)>>,
    pub instance_labels: HashMap<(String, u32), Vec<(String, String)>>,
    /// DRA claims (`--kubernetes-enable-dra`).
    pub claims: ClaimMap,
    /// `--usage-accounting`: who holds each GPU and MIG instance, every consumer once.
    pub consumers: HashMap<usage::EntityKey, Vec<usage::Consumer>>,
    /// `--usage-accounting`: whose each process seen is (pods, containers, jobs).
    pub pid_owners: HashMap<u32, usage::Owner>,
}

#[cfg(test)]
mod tests;
