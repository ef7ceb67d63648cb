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
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

    fn ctx(opts: &Options) -> Ctx {
        let web = Web::load(None, false).unwrap();
        let shared = Arc::new(Shared::new(Duration::from_secs(1)));
        Ctx {
            routes: Routes::new(shared, opts.clone(), web.clone()),
            web,
            opts: opts.clone(),
            handshakes: Arc::new(HandshakeErrors::new()),
        }
    }

    /// Reads one response (head and a Content-Length body); its status line.
    async fn response<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> String {
        whole_response(r).await.0
    }

    /// Reads one response: its status line, its header lines (lower case) and its body.
    async fn whole_response<R: tokio::io::AsyncBufRead + Unpin>(
        r: &mut R,
    ) -> (String, Vec<String>, String) {
        let (mut status, mut len, mut head) = (String::new(), 0usize, Vec::new());
        r.read_line(&mut status).await.unwrap();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).await.unwrap();
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            head.push(line);
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await.unwrap();
        (status, head, String::from_utf8(body).unwrap())
    }

    /// A scrape's body as `answer` wraps it, and whether hyper may be told its end.
    fn tracked(tell_end: bool, page: &'static [u8]) -> Tracked<Out> {
        let requests = Arc::new(Requests::default());
        let body = PageBody::new(bytes::Bytes::from_static(page), bytes::Bytes::new());
        Tracked {
            inner: http_body_util::Either::Left(body),
            request: requests.start(),
            tell_end,
            done: false,
        }
    }

    fn frame(body: &mut Tracked<Out>) -> Option<usize> {
        use hyper::body::Body as _;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => Some(f.into_data().map_or(0, |d| d.len())),
            Poll::Ready(None) => None,
            other => panic!("a scrape's body is never pending or failing: {other:?}"),
        }
    }

    #[test]
    fn http1_is_told_the_end_with_the_last_frame_http2_never() {
        use hyper::body::Body as _;
        let mut h1 = tracked(true, b"page");
        assert!(!h1.is_end_stream(), "no frame given yet");
        assert_eq!(frame(&mut h1), Some(4));
        assert!(h1.is_end_stream(), "HTTP/1: the last frame was given");

        let mut h2 = tracked(false, b"page");
        assert_eq!(frame(&mut h2), Some(4));
        assert!(
            !h2.is_end_stream(),
            "HTTP/2 waits for the window: asked once more"
        );
        assert_eq!(frame(&mut h2), None);
        assert!(!h2.is_end_stream());

        // An empty body gives no frame: hyper polls it to its end, which marks it done.
        let mut empty = tracked(true, b"");
        assert!(!empty.is_end_stream());
        assert_eq!(frame(&mut empty), None);
    }

    /// `/metrics` served with a minute for each timeout: none is due in a test.
    fn minute_timeouts() -> Options {
        Options {
            telemetry_path: "/metrics".into(),
            max_concurrent_scrapes: 4,
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            pprof: false,
            openmetrics: false,
        }
    }

    /// A plain HTTP/1 connection served with `opts` over an in-memory pipe: the client's end
    /// and the connection's task.
    fn served(
        opts: &Options,
        requests: &Arc<Requests>,
        stop: watch::Receiver<bool>,
    ) -> (tokio::io::DuplexStream, tokio::task::JoinHandle<()>) {
        let ctx = ctx(opts);
        let (server, client) = tokio::io::duplex(1 << 20);
        let io = Timed::new(server, requests.clone(), opts.write_timeout);
        let requests = requests.clone();
        let conn = tokio::spawn(async move { serve(&ctx, io, false, requests, stop).await });
        (client, conn)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answered_requests_leave_no_request_in_progress_nor_a_deadline() {
        let requests = Arc::new(Requests::default());
        let (_stop_tx, stop) = watch::channel(false);
        let (client, conn) = served(&minute_timeouts(), &requests, stop);
        let (r, mut w) = tokio::io::split(client);
        let mut r = BufReader::new(r);
        for i in 0..200 {
            let path = if i % 2 == 0 { "/metrics" } else { "/health" };
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            w.write_all(req.as_bytes()).await.unwrap();
            let status = response(&mut r).await;
            assert!(status.starts_with("HTTP/1.1 "), "{status:?}");
        }
        // A deadline left behind would cut the next response the client reads slowly. The
        // client can read the last response before the server's flush of it completes (the
        // moment a deadline is cleared), so the check waits a little for that flush; a
        // deadline that leaked stays and fails it.
        let flushed = tokio::time::timeout(Duration::from_secs(2), async {
            while requests.write_deadline().is_some() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        assert!(flushed.await.is_ok(), "{:?}", requests.write_deadline());
        let idle = tokio::time::timeout(Duration::from_millis(10), requests.idle(Duration::ZERO));
        assert!(idle.await.is_ok(), "a request is still in progress");
        drop((r, w));
        conn.await.unwrap();
    }

    /// One keep-alive connection is answered, at each request, from what is in force then:
    /// every newly published page, a page's expiry, self-metrics turned live, and a reload
    /// of the web configuration that adds basic auth and a header. Whatever a scrape reuses
    /// (the built reply; any cache a later change adds) never outlives any of them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_connection_is_answered_from_what_is_in_force_at_each_request() {
        let dir = tempfile::tempdir().unwrap();
        let web_yml = dir.path().join("web.yml");
        std::fs::write(&web_yml, "").unwrap();
        let web = Web::load(Some(&web_yml), false).unwrap();
        web.watch().unwrap();
        let interval = Duration::from_secs(1);
        let shared = Arc::new(Shared::new(interval));
        let opts = minute_timeouts();
        let ctx = Ctx {
            routes: Routes::new(shared.clone(), opts.clone(), web.clone()),
            web: web.clone(),
            opts: opts.clone(),
            handshakes: Arc::new(HandshakeErrors::new()),
        };
        let (server, client) = tokio::io::duplex(1 << 20);
        let requests = Arc::new(Requests::default());
        let (_stop_tx, stop) = watch::channel(false);
        let io = Timed::new(server, requests.clone(), opts.write_timeout);
        let conn = tokio::spawn(async move { serve(&ctx, io, false, requests, stop).await });
        let (r, mut w) = tokio::io::split(client);
        let mut r = BufReader::new(r);
        let mut scrape = async move || {
            w.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            whole_response(&mut r).await
        };
        let power = |watts: f64| {
            let mut page = crate::model::Page::default();
            let ty = crate::model::naming::PromType::Gauge;
            page.add("DCGM_FI_DEV_POWER_USAGE", "h", ty, &[("gpu", "0")], watts);
            page
        };
        for watts in [1.0, 2.0, 3.0] {
            shared.publish(&power(watts), crate::model::clock::now_us());
            for _ in 0..3 {
                let (status, _, body) = scrape().await;
                assert!(status.starts_with("HTTP/1.1 200"), "{status}");
                assert!(
                    body.contains(&format!("DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\"}} {watts}\n")),
                    "{watts} W published: {body}"
                );
            }
        }
        // A page whose oldest sample turns too old to serve in 300 ms.
        let age = crate::model::clock::max_served_age(interval);
        let oldest =
            crate::model::clock::now_us() - i64::try_from(age.as_micros()).unwrap() + 300_000;
        shared.publish(&power(4.0), oldest);
        assert!(scrape().await.2.contains("DCGM_FI_DEV_POWER_USAGE"));
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (status, _, body) = scrape().await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(!body.contains("DCGM_FI_DEV_POWER_USAGE"), "expired: {body}");
        // Basic auth and a header, put in force while the connection is open.
        shared.publish(&power(5.0), crate::model::clock::now_us());
        assert!(scrape().await.2.contains("} 5\n"));
        // Self-metrics that change per scrape are never kept.
        shared.metrics.enable_exporter_metrics();
        for _ in 0..2 {
            let body = scrape().await.2;
            assert!(
                body.contains("promhttp_metric_handler_requests_in_flight 1"),
                "{body}"
            );
        }
        std::fs::write(
            &web_yml,
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  \
             alice: $2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa\n",
        )
        .unwrap();
        for _ in 0..200 {
            if web.current().auth.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(web.current().auth.is_some(), "the watcher did not reload");
        let (status, head, _) = scrape().await;
        assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        assert!(
            head.iter().any(|h| h == "x-frame-options: deny"),
            "{head:?}"
        );
        drop(scrape);
        conn.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_or_a_lost_stop_signal_closes_a_kept_connection() {
        for drop_sender in [false, true] {
            let requests = Arc::new(Requests::default());
            let (stop_tx, stop) = watch::channel(false);
            let (mut client, conn) = served(&minute_timeouts(), &requests, stop);
            client
                .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut r = BufReader::new(client);
            assert!(response(&mut r).await.starts_with("HTTP/1.1 200"));
            if drop_sender {
                drop(stop_tx);
            } else {
                stop_tx.send(true).unwrap();
            }
            let mut rest = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut rest));
            assert!(
                closed.await.is_ok(),
                "still open (sender dropped: {drop_sender})"
            );
            assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
            tokio::time::timeout(Duration::from_secs(10), conn)
                .await
                .unwrap()
                .unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_never_ends_and_an_idle_connection_close_at_the_read_timeout() {
        let opts = Options {
            read_timeout: Duration::from_secs(5),
            ..minute_timeouts()
        };
        for (sent, answers) in [
            (&b"GET /health HTTP/1.1\r\nHost: x\r\nAccept: */"[..], 0),
            (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 1),
        ] {
            let requests = Arc::new(Requests::default());
            let (_stop_tx, stop) = watch::channel(false);
            let (mut client, conn) = served(&opts, &requests, stop);
            let t0 = tokio::time::Instant::now();
            client.write_all(sent).await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            let got = String::from_utf8_lossy(&got);
            assert_eq!(got.matches("HTTP/1.1 200").count(), answers, "{got}");
            assert_eq!(got.matches("HTTP/1.1 ").count(), answers, "{got}");
            let closed = t0.elapsed();
            assert!(
                closed >= opts.read_timeout && closed < opts.read_timeout * 2,
                "closed after {closed:?}"
            );
            conn.await.unwrap();
        }
    }
}
