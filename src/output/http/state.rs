//! The web configuration in force, re-read when the web config file, the certificate, the
//! key or the client CA changes on disk (cert-manager rotates certificates in place), checked
//! at each new connection. A broken new version is logged once and the previous one stays.

use super::auth::BasicAuth;
use super::{tls, webconfig};
use hyper::header::{HeaderName, HeaderValue};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_rustls::TlsAcceptor;

/// What one connection is served with.
pub struct WebState {
    pub tls: Option<TlsAcceptor>,
    pub http2: bool,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<Arc<BasicAuth>>,
}

impl WebState {
    pub fn plain() -> WebState {
        WebState {
            tls: None,
            http2: false,
            headers: Vec::new(),
            auth: None,
        }
    }

    fn build(c: &webconfig::WebConfig) -> Result<WebState, String> {
        let tls = match &c.tls {
            Some(t) => Some(TlsAcceptor::from(tls::server_config(t, c.http2)?)),
            None => None,
        };
        let headers = c
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        Ok(WebState {
            tls,
            http2: c.http2,
            headers,
            auth: (!c.users.is_empty()).then(|| Arc::new(BasicAuth::new(c.users.clone()))),
        })
    }
}

/// (modified time, length, inode) of a file, or None when it cannot be read.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        })
        .collect()
}

pub struct Loaded {
    files: Vec<PathBuf>,
    stamps: Vec<Stamp>,
    state: Arc<WebState>,
}

pub enum Web {
    /// No web config file: plain HTTP, no auth.
    Plain(Arc<WebState>),
    Watched {
        path: PathBuf,
        loaded: Mutex<Loaded>,
    },
}

impl Web {
    /// Loads the file once; errors here stop the exporter.
    pub fn load(path: Option<&Path>) -> Result<Web, String> {
        let Some(path) = path else {
            return Ok(Web::Plain(Arc::new(WebState::plain())));
        };
        let (state, files) = Self::read(path)?;
        Ok(Web::Watched {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded {
                stamps: stamps(&files),
                files,
                state: Arc::new(state),
            }),
        })
    }

    fn read(path: &Path) -> Result<(WebState, Vec<PathBuf>), String> {
        let c = webconfig::load(path)?;
        let mut files = vec![path.to_path_buf()];
        files.extend(c.files());
        let state = WebState::build(&c)
            .map_err(|e| format!("--web-config-file {}: {e}", path.display()))?;
        Ok((state, files))
    }

    pub fn is_tls(&self) -> bool {
        self.current().tls.is_some()
    }

    /// The state for a new connection, reloaded first if a file changed.
    pub fn current(&self) -> Arc<WebState> {
        let (path, loaded) = match self {
            Web::Plain(s) => return s.clone(),
            Web::Watched { path, loaded } => (path, loaded),
        };
        let mut l = loaded.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamps(&l.files);
        if now == l.stamps {
            return l.state.clone();
        }
        l.stamps = now;
        match Self::read(path) {
            Ok((state, files)) => {
                l.stamps = stamps(&files);
                l.files = files;
                l.state = Arc::new(state);
                tracing::info!("reloaded the web configuration from {}", path.display());
            }
            Err(e) => tracing::error!("{e}; keeping the previous web configuration"),
        }
        l.state.clone()
    }
}
