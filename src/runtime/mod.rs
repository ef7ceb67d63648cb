//! What the stages run on, beneath the data flow: `supervisor` (side threads restarted
//! after a panic and shown on /health), `worker` (a thread running jobs with deadlines,
//! abandoned when stuck: the DCGM session's and NVML's), `wakeup` (inotify wake-ups for files the exporter
//! re-reads), `process` (our uid and capabilities) and `kubeapi` (the Kubernetes API client
//! the `-m` ConfigMap, the pod watch and the DRA watch share). Nothing here imports a stage.

pub mod kubeapi;
pub(crate) mod process;
pub(crate) mod supervisor;
pub(crate) mod wakeup;
pub(crate) mod worker;
