//! The HTTP server: listeners bound before DCGM starts (`listen`), exporter-toolkit's web
//! configuration (`webconfig`, `state`: TLS through rustls in `tls`, basic auth in `auth`,
//! reloaded by a watcher thread), the endpoints as warp filters (`routes`, `negotiate`,
//! `pprof`). The filter becomes a service (`warp::service`) that hyper 1 serves through
//! its HTTP/1 or HTTP/2 connection (HTTP/2 where TLS negotiated it) over plain TCP, rustls
//! streams or systemd's sockets, so that TLS, client certificates, certificate reload,
//! handshake errors (`handshake`) and timeouts (`timeout`) stay under our control.

pub(crate) mod auth;
pub(crate) mod events;
pub(crate) mod handshake;
pub(crate) mod listen;
pub(crate) mod negotiate;
pub(crate) mod pprof;
pub(crate) mod reply;
pub(crate) mod routes;
pub(crate) mod state;
pub(crate) mod stream;
pub(crate) mod timeout;
pub(crate) mod tls;
pub mod webconfig;

use crate::config::duration;
use crate::output::published::Shared;
use crate::output::Error;
use handshake::{Failure, HandshakeErrors};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use reply::{PageBody, Response};
use routes::Routes;
use state::Web;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stream::StreamExec;
use timeout::{InFlight, Requests, Timed};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::Service as _;

/// What the HTTP server reads of the flags (start-up fills it in); checked by
/// [`Server::bind`], whose errors name the flag.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// `-a`: where to listen.
    pub address: String,
    pub systemd_socket: bool,
    pub web_config_file: String,
    pub telemetry_path: String,
    pub max_concurrent_scrapes: i64,
    /// Go durations, as given.
    pub read_timeout: String,
    pub write_timeout: String,
    /// What a zero `--web-write-timeout` means (the emulated release's default).
    pub default_write_timeout: Duration,
    pub pprof: bool,
    pub openmetrics: bool,
}

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

fn timeout(flag: &'static str, v: &str, default: Duration) -> Result<Duration, Error> {
    let d = duration::parse(v).map_err(|source| Error::Timeout { flag, source })?;
    // As upstream: zero means the default.
    Ok(if d.is_zero() { default } else { d })
}

impl Options {
    pub(crate) fn from_settings(c: &HttpSettings) -> Result<Options, Error> {
        let path = &c.telemetry_path;
        if !path.starts_with('/') || path == "/health" || path.starts_with("/debug/pprof/") {
            return Err(Error::TelemetryPath(path.clone()));
        }
        let max = usize::try_from(c.max_concurrent_scrapes)
            .ok()
            .filter(|&n| n > 0)
            .ok_or(Error::MaxConcurrentScrapes(c.max_concurrent_scrapes))?;
        if c.pprof && c.web_config_file.is_empty() {
            return Err(Error::PprofNeedsWebConfig);
        }
        Ok(Options {
            telemetry_path: path.clone(),
            max_concurrent_scrapes: max,
            read_timeout: timeout("web-read-timeout", &c.read_timeout, Duration::from_secs(10))?,
            write_timeout: timeout(
                "web-write-timeout",
                &c.write_timeout,
                c.default_write_timeout,
            )?,
            pprof: c.pprof,
            openmetrics: c.openmetrics,
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
    pub fn bind(c: &HttpSettings) -> Result<Server, Error> {
        let options = Options::from_settings(c)?;
        let web_config = (!c.web_config_file.is_empty()).then(|| PathBuf::from(&c.web_config_file));
        let web = Web::load(web_config.as_deref(), options.pprof)?;
        let listeners = if c.systemd_socket {
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
    ) -> Result<(), Error> {
        self.web.watch_reporting(&shared)?;
        let handshakes = Arc::new(HandshakeErrors::new());
        shared.metrics.register(handshakes.collector());
        let ctx = Arc::new(Ctx {
            routes: Routes::new(shared, self.options.clone(), self.web.clone()),
            web: self.web,
            opts: self.options,
            handshakes,
        });
        let mut loops = Vec::new();
        for l in self.listeners {
            l.set_nonblocking(true).map_err(Error::ListeningSocket)?;
            let l = tokio::net::TcpListener::from_std(l).map_err(Error::ListeningSocket)?;
            loops.push(tokio::spawn(accept_loop(l, ctx.clone(), shutdown.clone())));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        for l in loops {
            if let Ok(mut open) = l.await {
                let _ = tokio::time::timeout_at(deadline, async {
                    while open.join_next().await.is_some() {}
                })
                .await;
            }
        }
        Ok(())
    }
}

/// What every connection is served with.
struct Ctx {
    routes: Routes,
    web: Web,
    opts: Options,
    handshakes: Arc<HandshakeErrors>,
}

/// Accepts until `stop`; returns the connections still open.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    ctx: Arc<Ctx>,
    mut stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut open = JoinSet::new();
    loop {
        if *stop.borrow() {
            return open;
        }
        // Reap finished connections so the set holds only open ones.
        while open.try_join_next().is_some() {}
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return open,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                open.spawn(connection(ctx.clone(), stream, peer, stop.clone()));
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

async fn connection(
    ctx: Arc<Ctx>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let state = ctx.web.current();
    let requests = Arc::new(Requests::default());
    let write_timeout = ctx.opts.write_timeout;
    let Some(acceptor) = state.tls.clone() else {
        let io = Timed::new(stream, requests.clone(), write_timeout);
        return serve(&ctx, io, false, requests, stop).await;
    };
    // As Go: the handshake has the shorter of the read and write timeouts.
    let limit = ctx.opts.read_timeout.min(ctx.opts.write_timeout);
    let deadline = tokio::time::Instant::now() + limit;
    // A TLS connection starts with a handshake record (0x16); an ASCII letter is a plain
    // HTTP request sent to the TLS port, which gets Go's answer (and is no handshake error,
    // as in Go).
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0].is_ascii_uppercase() => {
            let mut stream = stream;
            let _ = stream.write_all(HTTP_ON_TLS).await;
            let _ = stream.shutdown().await;
            return;
        }
        Ok(Ok(1)) => {}
        // Closed before a byte (a TCP probe): no handshake was attempted.
        Ok(Ok(_)) => return,
        Ok(Err(e)) => return ctx.handshakes.record(peer, &Failure::Io(e)),
        Err(_) => return ctx.handshakes.record(peer, &Failure::Timeout(limit)),
    }
    let tls = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return ctx.handshakes.record(peer, &Failure::Io(e)),
        Err(_) => return ctx.handshakes.record(peer, &Failure::Timeout(limit)),
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = Timed::new(tls, requests.clone(), write_timeout);
    serve(&ctx, io, h2, requests, stop).await
}

async fn serve<I>(ctx: &Ctx, io: I, h2: bool, requests: Arc<Requests>, stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = Svc {
        routes: ctx.routes.clone(),
        requests: requests.clone(),
        write_timeout: ctx.opts.write_timeout,
    };
    let io = TokioIo::new(io);
    // The protocol is known before the first byte (HTTP/2 only where TLS negotiated it, no
    // h2c, as Go): hyper's own connection, without hyper-util's `auto` wrapper, which would
    // look at every read and poll for the version it was told.
    if h2 {
        let mut builder = http2::Builder::new(StreamExec);
        // A peer that stops answering pings loses the connection, whatever it keeps open.
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(ctx.opts.read_timeout)
            .keep_alive_timeout(ctx.opts.write_timeout);
        let idle = requests.idle(ctx.opts.read_timeout);
        drive(ctx, builder.serve_connection(io, svc), idle, stop).await
    } else {
        // hyper's header read timeout bounds a request head and an idle keep-alive
        // connection alike (`timeout`).
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(ctx.opts.read_timeout)
            .serve_connection(io, svc);
        drive(ctx, conn, std::future::pending(), stop).await
    }
}

/// A hyper connection that can be told to finish what it is doing and close.
trait Graceful: Future<Output = Result<(), hyper::Error>> {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I> Graceful for http1::Connection<TokioIo<I>, Svc>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::Connection::graceful_shutdown(self)
    }
}

impl<I> Graceful for http2::Connection<TokioIo<I>, Svc, StreamExec>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self)
    }
}

/// Runs a connection until it ends. Once `idle` resolves or the server stops (or its stop
/// signal is gone), it is told to close and gets the write timeout at most to do so (an
/// HTTP/2 GOAWAY whose ping is never answered, a stream waiting for window).
async fn drive<C: Graceful>(
    ctx: &Ctx,
    conn: C,
    idle: impl Future<Output = ()>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::pin!(conn);
    let result = tokio::select! {
        biased;
        r = conn.as_mut() => r.map_err(|e| e.to_string()),
        () = stopped(&mut stop) => closing(conn, ctx.opts.write_timeout).await,
        () = idle => closing(conn, ctx.opts.write_timeout).await,
    };
    if let Err(e) = result {
        tracing::debug!("connection: {e}");
    }
}

/// Resolves when the server stops, or its stop signal is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// Tells a connection to close and waits `grace` at most for it.
async fn closing<C: Graceful>(mut conn: Pin<&mut C>, grace: Duration) -> Result<(), String> {
    conn.as_mut().graceful_shutdown();
    match tokio::time::timeout(grace, conn).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("the connection did not close within the write timeout".into()),
    }
}

/// The endpoints as one connection's hyper service: each request is in progress until its
/// response body is dropped, and its write deadline starts when its head is ready.
struct Svc {
    routes: Routes,
    requests: Arc<Requests>,
    write_timeout: Duration,
}

/// The body type of warp's replies (warp does not name it).
trait BodyOf {
    type Body;
}

impl<B> BodyOf for hyper::Response<B> {
    type Body = B;
}

type WarpBody = <Response as BodyOf>::Body;

/// A response body: a scrape's page as it is, or whatever the filter answered.
type Out = http_body_util::Either<PageBody, WarpBody>;

type Answered = hyper::Response<Tracked<Out>>;

impl hyper::service::Service<hyper::Request<Incoming>> for Svc {
    type Response = Answered;
    type Error = Infallible;
    type Future = futures_util::future::Either<
        Ready,
        Pin<Box<dyn Future<Output = Result<Answered, Infallible>> + Send>>,
    >;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let request = self.requests.start();
        let write_timeout = self.write_timeout;
        if let Some(resp) = self.routes.scrape(&req) {
            let resp = resp.map(http_body_util::Either::Left);
            return futures_util::future::Either::Left(Ready(Some((resp, request, write_timeout))));
        }
        // A target without a path (authority form, `GET host:80`) is refused here: warp's
        // path filters panic on it (`PathAndQuery::from_static("")`), which a client could
        // repeat at will.
        let routed = req
            .uri()
            .path_and_query()
            .is_some()
            .then(|| warp::service(self.routes.filter.clone()).call(req));
        futures_util::future::Either::Right(Box::pin(async move {
            let resp = match routed {
                Some(routed) => routed.await?,
                None => reply::text(
                    hyper::StatusCode::BAD_REQUEST,
                    "400 Bad Request: the request target has no path\n",
                ),
            };
            Ok(answer(
                resp.map(http_body_util::Either::Right),
                request,
                write_timeout,
            ))
        }))
    }
}

/// A response that was ready when the service was called. Its deadline starts when hyper
/// polls for it: under HTTP/2 that is in the stream's own task, where the stream's deadline
/// lives ([`stream`]).
struct Ready(Option<(hyper::Response<Out>, InFlight, Duration)>);

impl Future for Ready {
    type Output = Result<Answered, Infallible>;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        match self.0.take() {
            Some((resp, request, write_timeout)) => {
                Poll::Ready(Ok(answer(resp, request, write_timeout)))
            }
            // Polled again after its answer: hyper never does.
            None => Poll::Pending,
        }
    }
}

/// The response head is ready: its write deadline starts, and its body carries the
/// request until hyper drops it.
fn answer(resp: hyper::Response<Out>, mut request: InFlight, write_timeout: Duration) -> Answered {
    // An HTTP/2 stream has a deadline of its own (a late one loses only its stream); an
    // HTTP/1 response's is the connection's.
    let at = tokio::time::Instant::now() + write_timeout;
    let h2 = stream::set_deadline(at);
    if !h2 {
        request.writing_until(at);
    }
    resp.map(|inner| Tracked {
        inner,
        request,
        tell_end: !h2,
        done: false,
    })
}

/// A response body that ends its request when hyper drops it; its write deadline then
/// lasts until the bytes are flushed if the body was done (see [`timeout`]).
pub(crate) struct Tracked<B> {
    inner: B,
    request: InFlight,
    /// Whether hyper may be told the end with the last frame (HTTP/1; see
    /// [`Tracked::is_end_stream`]).
    tell_end: bool,
    /// Whether the body has given its last frame (or said it has none left).
    done: bool,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // hyper drops a body whose last frame says so without asking for more: the end is
        // known either way.
        let done = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            _ => false,
        };
        // Until hyper drops the body, the frame may still wait in hyper (for HTTP/2 flow
        // control window): the deadline is left to the guard's drop.
        if done {
            self.done = true;
            self.request.written();
        }
        polled
    }

    /// Never under HTTP/2: told the end ahead, hyper's HTTP/2 side would hand h2 the last
    /// frame beyond the client's flow-control window and end the stream's task, and with it
    /// the stream's deadline ([`stream`]). Asked once more, the body answers `None` when it
    /// is done. HTTP/1 is told with the last frame, which spares hyper a round of its
    /// write loop per response: the frame has marked the body done by then. A body that
    /// gave no frame yet is polled to its end all the same, so that it is marked too.
    fn is_end_stream(&self) -> bool {
        self.tell_end && self.done
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
