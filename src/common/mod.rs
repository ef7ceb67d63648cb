//! What every stage may use, beneath the data flow: `files` (inotify wake-ups for files
//! the exporter re-reads), `supervisor` (side threads restarted
//! after a panic and shown on /health), `kubeapi` (the Kubernetes API client the `-m`
//! ConfigMap, the pod watch and the DRA watch share), `process` (our uid and capabilities) and the self-metrics' name prefix.
//! Nothing here imports a stage.

pub mod files;
pub mod kubeapi;
pub mod process;
pub mod supervisor;

/// The exporter's own metrics' prefix. Lower-case, and no DCGM field name or 1.x legacy name
/// starts with it, so a self-metric cannot collide with an exported field.
pub const PREFIX: &str = "dcgm_exporter_";
