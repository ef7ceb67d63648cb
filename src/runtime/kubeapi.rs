//! The Kubernetes API, for what the kubelet's PodResources API does not say: pod UIDs and
//! labels (a pod watch limited to this node) and the `-m` ConfigMap. Everything runs on one
//! small runtime of its own, so API latency never reaches a scrape or the collection loop.
//!
//! Configuration: in a pod, the in-cluster service account (KUBERNETES_SERVICE_HOST and the
//! mounted token), as dcgm-exporter; outside a cluster, the kubeconfig named by KUBECONFIG.
//! Without either the API features are off (see `connect`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the first answer of the API server may take at startup (`-m`).
pub(crate) const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// A client and the runtime its requests and watches run on; lives as long as the process.
pub struct KubeApi {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    /// Where the configuration came from, for log lines.
    pub source: String,
}

/// Why no client could be made from the configuration that exists.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the Kubernetes API runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("in-cluster Kubernetes configuration: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    /// The kubeconfig file does not read, parse or resolve.
    #[error("KUBECONFIG {}: {source}", .path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    /// The configuration read, but no client fits it.
    #[error("Kubernetes client from {from}: {source}")]
    Client { from: String, source: kube::Error },
}

/// Which configuration applies: Some((description, config)), or None when there is none.
async fn configuration() -> Result<Option<(String, kube::Config)>, Error> {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        let config = kube::Config::incluster().map_err(Error::InCluster)?;
        return Ok(Some(("the in-cluster service account".into(), config)));
    }
    let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    kubeconfig(Path::new(&path)).await.map(Some)
}

async fn kubeconfig(path: &Path) -> Result<(String, kube::Config), Error> {
    let broken = |source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let file = kube::config::Kubeconfig::read_from(path).map_err(broken)?;
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .map_err(broken)?;
    Ok((format!("KUBECONFIG {}", path.display()), config))
}

impl KubeApi {
    /// Ok(None) when neither an in-cluster configuration nor KUBECONFIG exists.
    pub fn connect() -> Result<Option<KubeApi>, Error> {
        KubeApi::with(None)
    }

    /// The client for one kubeconfig file, whatever the environment says.
    pub fn from_kubeconfig(path: &Path) -> Result<KubeApi, Error> {
        KubeApi::with(Some(path)).map(|api| api.expect("a kubeconfig was given"))
    }

    fn with(path: Option<&Path>) -> Result<Option<KubeApi>, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kube-api")
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let found = rt.block_on(async {
            let found = match path {
                Some(p) => Some(kubeconfig(p).await?),
                None => configuration().await?,
            };
            let Some((source, config)) = found else {
                return Ok(None);
            };
            let client = match kube::Client::try_from(config) {
                Ok(c) => c,
                Err(e) => {
                    return Err(Error::Client {
                        from: source,
                        source: e,
                    })
                }
            };
            Ok(Some((source, client)))
        })?;
        Ok(found.map(|(source, client)| KubeApi { rt, client, source }))
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Runs a request to completion from a plain thread, bounded by `deadline`: `None`
    /// when it had not ended by then.
    pub fn block_on<T>(&self, deadline: Duration, fut: impl Future<Output = T>) -> Option<T> {
        self.rt
            .block_on(async { tokio::time::timeout(deadline, fut).await })
            .ok()
    }

    /// Starts a task (a watch) that runs for the life of the process.
    pub fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.rt.spawn(fut);
    }
}

/// A failed API request, by what the caller can do about it: told by the HTTP status the
/// server answered, never by its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// 403: RBAC refuses this verb on this resource; asking again soon cannot help.
    Forbidden(String),
    /// 404: no such object.
    NotFound(String),
    /// 410: the resourceVersion a watch resumes from is too old; read the object again.
    Gone(String),
    /// Anything else (no answer, a server error, a broken stream): worth another try later.
    Other(String),
}

impl ApiError {
    /// From the Status the server answered (a failed request or a watch's ERROR event).
    pub(crate) fn of_status(status: &kube::core::Status) -> ApiError {
        let text = if status.message.is_empty() {
            format!("HTTP {} {}", status.code, status.reason)
        } else {
            status.message.clone()
        };
        match status.code {
            403 => ApiError::Forbidden(text),
            404 => ApiError::NotFound(text),
            410 => ApiError::Gone(text),
            _ => ApiError::Other(text),
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> ApiError {
        match &e {
            kube::Error::Api(status) => ApiError::of_status(status),
            _ => ApiError::Other(e.to_string()),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Forbidden(m) => write!(f, "forbidden: {m}"),
            ApiError::NotFound(m) => write!(f, "not found: {m}"),
            ApiError::Gone(m) => write!(f, "gone: {m}"),
            ApiError::Other(m) => f.write_str(m),
        }
    }
}

/// Logs a watch error once per streak of errors, so a long API outage is one line (and
/// one when it ends), not one per retry.
#[derive(Default)]
pub(crate) struct ErrorStreak {
    failing: bool,
}

impl ErrorStreak {
    pub(crate) fn error(&mut self, what: &str, e: &dyn std::fmt::Display) {
        if !self.failing {
            tracing::warn!("{what}: {e}; retrying with backoff");
            self.failing = true;
        }
    }

    pub(crate) fn ok(&mut self, what: &str) {
        if self.failing {
            tracing::info!("{what}: working again");
            self.failing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ApiError;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn api_errors_are_told_apart_by_status_code() {
        let e = ApiError::from(status(403, "Forbidden", "cannot watch resource"));
        assert_eq!(e, ApiError::Forbidden("cannot watch resource".into()));
        assert_eq!(e.to_string(), "forbidden: cannot watch resource");
        // The code decides, whatever the words.
        assert!(matches!(
            ApiError::from(status(403, "", "")),
            ApiError::Forbidden(m) if m == "HTTP 403 "
        ));
        assert!(matches!(
            ApiError::from(status(500, "Forbidden", "forbidden")),
            ApiError::Other(_)
        ));
        assert!(matches!(
            ApiError::from(status(404, "NotFound", "x")),
            ApiError::NotFound(_)
        ));
        assert!(matches!(
            ApiError::from(status(410, "Expired", "x")),
            ApiError::Gone(_)
        ));
    }
}
