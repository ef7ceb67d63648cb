//! The HTTP server: listeners bound before DCGM starts (`listen`), exporter-toolkit's web
//! configuration (`webconfig`, `state`: TLS through rustls in `tls`, basic auth in `auth`),
//! per-connection timeouts (`timeout`), the endpoints (`routes`, `negotiate`, `pprof`).
//! Connections are served by hyper directly so that TLS, client certificates, certificate
//! reload and timeouts are under our control.

pub mod auth;
pub mod listen;
pub mod negotiate;
pub mod pprof;
pub mod routes;
pub mod state;
pub mod timeout;
pub mod tls;
pub mod webconfig;

use crate::config::{cli, duration};
use crate::lifecycle::app::Shared;
use hyper::server::conn::Http;
use hyper::service::service_fn;
use routes::Routes;
use state::{Web, WebState};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use timeout::TimeoutIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// How the endpoints behave, from the flags.
#[derive(Clone, Debug)]
pub struct Options {
    pub telemetry_path: String,
    pub max_concurrent_scrapes: usize,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub pprof: bool,
    pub openmetrics: bool,
}

fn timeout(flag: &str, v: &str) -> Result<Duration, String> {
    let d = duration::parse(v).map_err(|e| format!("--{flag} {e}"))?;
    // As upstream: zero means the default.
    Ok(if d.is_zero() {
        Duration::from_secs(10)
    } else {
        d
    })
}

impl Options {
    pub fn from_config(c: &cli::Config) -> Result<Options, String> {
        let path = &c.web_telemetry_path;
        if !path.starts_with('/') || path == "/health" || path.starts_with("/debug/pprof/") {
            return Err(format!(
                "--web-telemetry-path {path:?}: must start with '/' and not be /health or under /debug/pprof/"
            ));
        }
        let max = usize::try_from(c.max_concurrent_scrapes)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                format!(
                    "--max-concurrent-scrapes {}: must be at least 1",
                    c.max_concurrent_scrapes
                )
            })?;
        if c.enable_pprof && c.web_config_file.is_empty() {
            return Err("--enable-pprof requires --web-config-file (profiles are served only behind the web configuration's TLS or basic auth, as upstream requires)".into());
        }
        Ok(Options {
            telemetry_path: path.clone(),
            max_concurrent_scrapes: max,
            read_timeout: timeout("web-read-timeout", &c.web_read_timeout)?,
            write_timeout: timeout("web-write-timeout", &c.web_write_timeout)?,
            pprof: c.enable_pprof,
            openmetrics: c.web_enable_openmetrics,
        })
    }
}

/// Listening sockets and configuration, ready before DCGM starts.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    web: Web,
    pub options: Options,
}

impl Server {
    /// Validates the options, reads the web config and binds (or takes systemd's sockets).
    pub fn bind(c: &cli::Config) -> Result<Server, String> {
        let options = Options::from_config(c)?;
        let web_config = (!c.web_config_file.is_empty()).then(|| PathBuf::from(&c.web_config_file));
        let web = Web::load(web_config.as_deref())?;
        let listeners = if c.web_systemd_socket {
            listen::systemd()?
        } else {
            listen::bind(&c.address)?
        };
        Ok(Server {
            listeners,
            web,
            options,
        })
    }

    /// "127.0.0.1:9400, [::]:9400 (https)" for the log.
    pub fn describe(&self) -> String {
        let scheme = if self.web.is_tls() { "https" } else { "http" };
        let addrs: Vec<String> = self
            .listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .map(|a| a.to_string())
            .collect();
        format!("{} ({scheme})", addrs.join(", "))
    }

    /// Serves until `shutdown` turns true, then lets open connections finish (5 s at most).
    pub async fn serve(
        self,
        shared: Arc<Shared>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(), String> {
        let routes = Arc::new(Routes::new(shared, self.options.clone()));
        let web = Arc::new(self.web);
        let live = Arc::new(());
        let mut loops = Vec::new();
        for l in self.listeners {
            l.set_nonblocking(true)
                .map_err(|e| format!("cannot use the listening socket: {e}"))?;
            let l = tokio::net::TcpListener::from_std(l)
                .map_err(|e| format!("cannot use the listening socket: {e}"))?;
            let conn = Conn {
                routes: routes.clone(),
                opts: self.options.clone(),
                shutdown: shutdown.clone(),
                _live: live.clone(),
            };
            loops.push(tokio::spawn(accept_loop(l, web.clone(), conn)));
        }
        for l in loops {
            let _ = l.await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&live) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// What each connection task needs.
#[derive(Clone)]
struct Conn {
    routes: Arc<Routes>,
    opts: Options,
    shutdown: watch::Receiver<bool>,
    /// Counts open connections (its strong count) for the shutdown wait.
    _live: Arc<()>,
}

async fn accept_loop(listener: tokio::net::TcpListener, web: Arc<Web>, conn: Conn) {
    let mut stop = conn.shutdown.clone();
    loop {
        if *stop.borrow() {
            return;
        }
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let state = web.current();
                tokio::spawn(conn.clone().run(stream, state));
            }
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What Go's TLS server answers to a plain HTTP request.
const HTTP_ON_TLS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

impl Conn {
    async fn run(self, stream: tokio::net::TcpStream, state: Arc<WebState>) {
        let Some(acceptor) = state.tls.clone() else {
            let io = TimeoutIo::new(stream, self.opts.read_timeout, self.opts.write_timeout);
            return self.serve(io, false, state).await;
        };
        // A TLS connection starts with a handshake record (0x16); an ASCII letter is a
        // plain HTTP request sent to the TLS port.
        let mut first = [0u8; 1];
        match tokio::time::timeout(self.opts.read_timeout, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0].is_ascii_uppercase() => {
                let mut stream = stream;
                let _ = stream.write_all(HTTP_ON_TLS).await;
                let _ = stream.shutdown().await;
                return;
            }
            Ok(Ok(1)) => {}
            _ => return,
        }
        let io = TimeoutIo::new(stream, self.opts.read_timeout, self.opts.write_timeout);
        let tls = match tokio::time::timeout(self.opts.read_timeout, acceptor.accept(io)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                return;
            }
            Err(_) => return,
        };
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        self.serve(tls, h2, state).await
    }

    async fn serve<I>(self, io: I, h2: bool, state: Arc<WebState>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut http = Http::new();
        if h2 {
            http.http2_only(true);
        } else {
            http.http1_only(true)
                .http1_header_read_timeout(self.opts.read_timeout);
        }
        let routes = self.routes.clone();
        let svc = service_fn(move |req| {
            let routes = routes.clone();
            let state = state.clone();
            async move { Ok::<_, Infallible>(routes.handle(req, &state).await) }
        });
        let conn = http.serve_connection(io, svc);
        tokio::pin!(conn);
        let mut stop = self.shutdown.clone();
        if *stop.borrow() {
            conn.as_mut().graceful_shutdown();
        }
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("connection: {e}");
                }
            }
            _ = stop.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }
}
