//! Why the exporter did not start, or stopped on its own: one variant per stage that can
//! end the run. `main` turns it into the fatal log line (its `Display`) and the exit code
//! ([`Error::exit_code`]), in one place.

use super::settings;
use crate::lifecycle::app::StartupError;
use dcgm_sys::ConnectTarget;

/// What the exporter tells an operator before it exits with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag, an environment variable or the config file.
    #[error(transparent)]
    Settings(#[from] settings::Error),
    /// `--enable-dcgm-log` reached the environment too late (a bug of the caller).
    #[error(
        "internal error: DCGM's log settings must be set before any thread starts \
         ({threads} threads run already)"
    )]
    LogEnvTooLate { threads: usize },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The Kubernetes API configuration `-m` needs.
    #[error(transparent)]
    KubeApi(crate::runtime::kubeapi::Error),
    /// `-m` without any Kubernetes API configuration.
    #[error(
        "-m {configmap}: no Kubernetes API configuration (not in a pod, and KUBECONFIG is not set)"
    )]
    NoKubeApi { configmap: String },
    /// The counters (`-f`, the config file's, the `-m` ConfigMap's) do not load.
    #[error(transparent)]
    Counters(crate::config::file::Error),
    /// `-m`'s reference, or the ConfigMap's poll period.
    #[error(transparent)]
    ConfigMap(crate::config::configmap::Error),
    /// The counters' source: the `-m` ConfigMap's read or the counters file's watch.
    #[error(transparent)]
    CountersSource(crate::lifecycle::watchers::SourceError),
    /// The config file's watch groups do not fit the counters.
    #[error(transparent)]
    WatchGroups(crate::config::file::Error),
    /// `-r vsock://...` on a kernel without vsock.
    #[error("-r/--remote-hostengine-info {target}: {why}")]
    NoVsock { target: ConnectTarget, why: String },
    /// The HTTP listener (its address, systemd socket or web config), or the server's end.
    #[error(transparent)]
    Http(crate::output::Error),
    /// The HTTP server's task itself failed.
    #[error("the HTTP server failed: {0}")]
    HttpTask(tokio::task::JoinError),
    /// The textfile, dump or OTLP outputs.
    #[error(transparent)]
    Output(crate::output::Error),
    /// libdcgm did not load (`--backend dcgm`).
    #[error(transparent)]
    LoadDcgm(dcgm_sys::Error),
    /// NVML did not load (`--backend nvml`).
    #[error(transparent)]
    LoadNvml(crate::collect::nvml::LoadError),
    /// Neither libdcgm nor NVML loaded (`--backend auto`).
    #[error("{dcgm}; and NVML, which --backend auto uses without DCGM: {nvml}")]
    NoSource {
        dcgm: dcgm_sys::Error,
        nvml: crate::collect::nvml::LoadError,
    },
    #[error("several host engines (-r a,b) need libdcgm (--backend dcgm)")]
    EnginesNeedDcgm,
    /// The engines' combined self-metrics.
    #[error(transparent)]
    Engines(crate::lifecycle::app::engines::MetricsError),
    /// An attribution source (container labels).
    #[error(transparent)]
    Attribution(crate::attribution::Error),
    /// A background watch (GPU bind/unbind).
    #[error(transparent)]
    Watch(crate::lifecycle::watchers::bind_unbind::Error),
    /// A flag does not fit the node (a selector naming a GPU it lacks).
    #[error(transparent)]
    Node(crate::collect::NodeError),
    /// A remote host engine refused or did not answer (`source` says which).
    #[error("cannot use the DCGM host engine at {target}: {source}")]
    Remote {
        target: ConnectTarget,
        source: StartupError,
    },
    /// A remote host engine that did not answer, with `--exit-if-hostengine-unreachable`.
    #[error(
        "cannot use the DCGM host engine at {target}: {source} (is nv-hostengine running and \
         reachable? IPv6 addresses go in brackets: [::1]:5555)"
    )]
    Unreachable {
        target: ConnectTarget,
        source: StartupError,
    },
    /// The embedded host engine did not start.
    #[error("cannot start the embedded DCGM host engine: {source}")]
    Embedded { source: StartupError },
    /// One of several host engines did not start.
    #[error("host engine {label}: {source}")]
    Engine { label: String, source: Box<Error> },
    #[error("host engine {label}: its start panicked")]
    EnginePanicked { label: String },
    #[error("cannot start the collection thread: {0}")]
    CollectionThread(std::io::Error),
    #[error("the collection thread ended unexpectedly")]
    CollectionEnded,
    #[error("the collection thread panicked: {0}")]
    CollectionPanicked(String),
}

impl Error {
    /// The process's exit code: every fatal error exits 1 (docs/troubleshooting.md).
    pub fn exit_code(&self) -> u8 {
        1
    }
}
