//! Remote mode: the wire between the simulated `libdcgm.so.4` and `dcgm-sim-hostengine`.
//!
//! The protocol is newline-delimited JSON: the client writes one [`Request`] per line and
//! reads exactly one [`Reply`] line back, so one request is in flight per connection at a
//! time (the client holds the connection's lock for the whole exchange). The server runs
//! one thread per connection, all sharing one engine behind a mutex, and assigns each
//! connection an id that the engine uses to scope groups, field groups and watches.
//!
//! Errors are reported as raw `dcgmReturn_t` codes because the only consumer is the C ABI
//! layer, which passes them straight to its caller:
//! * unparsable address → `DCGM_ST_BADPARAM` (-1),
//! * nothing listening before the connect timeout, or the engine went away →
//!   `DCGM_ST_CONNECTION_NOT_VALID` (-21), after which the connection stays dead,
//! * no reply within the request timeout → `DCGM_ST_TIMEOUT` (-11).

use crate::engine::Engine;
use crate::proto::{Reply, Request};
use dcgm_sys::ffi::{
    DCGM_ST_BADPARAM, DCGM_ST_CONNECTION_NOT_VALID, DCGM_ST_GENERIC_ERROR, DCGM_ST_NOT_SUPPORTED,
    DCGM_ST_TIMEOUT,
};
use std::io::{self, BufRead, BufReader, Read};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// `DCGM_HE_PORT_NUMBER`.
pub const DEFAULT_PORT: u16 = 5555;
/// What `timeoutMs = 0` means in `dcgmConnectV2Params`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(5000);
/// The real client retries a refused connect at this interval until the timeout.
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// The real library's per-request timeout (`modules/DcgmModuleApi.h`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Environment override of [`DEFAULT_REQUEST_TIMEOUT`] in milliseconds, so that tests can
/// exercise `DCGM_ST_TIMEOUT` without waiting a minute.
pub const REQUEST_TIMEOUT_ENV: &str = "DCGM_SIM_REQUEST_TIMEOUT_MS";
/// Longest request line the server accepts; a longer one is a broken client.
const MAX_REQUEST_LINE: u64 = 16 << 20;
/// Longest reply line the client accepts (1024 entities × 128 fields of samples fit easily).
const MAX_REPLY_LINE: u64 = 1 << 30;

/// Where a host engine listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Address {
    /// A `dcgmConnect_v3` connection string: `tcp://host[:port]`, `unix:///path`, or a
    /// TCP address without a scheme. `vsock://` is recognised but not simulated.
    pub fn parse_uri(s: &str) -> Result<Address, i32> {
        match s.split_once("://") {
            None => Address::parse_tcp(s),
            Some(("tcp", rest)) => Address::parse_tcp(rest.trim_end_matches('/')),
            Some(("unix", path)) if !path.is_empty() => Ok(Address::Unix(PathBuf::from(path))),
            Some(("vsock", _)) => Err(DCGM_ST_NOT_SUPPORTED),
            Some(_) => Err(DCGM_ST_BADPARAM),
        }
    }

    /// A TCP address as `dcgmConnect_v2` takes it: `host` (port 5555), `host:port`,
    /// `[v6]`, `[v6]:port`, or a bare IPv6 address.
    pub fn parse_tcp(s: &str) -> Result<Address, i32> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or(DCGM_ST_BADPARAM)?;
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':').ok_or(DCGM_ST_BADPARAM)?)),
            }
        } else {
            match s.matches(':').count() {
                0 => (s, None),
                1 => s
                    .split_once(':')
                    .map(|(h, p)| (h, Some(p)))
                    .ok_or(DCGM_ST_BADPARAM)?,
                // More than one colon without brackets can only be a bare IPv6 address.
                _ => (
                    s.parse::<Ipv6Addr>()
                        .map(|_| s)
                        .map_err(|_| DCGM_ST_BADPARAM)?,
                    None,
                ),
            }
        };
        if host.is_empty() || host.chars().any(char::is_whitespace) {
            return Err(DCGM_ST_BADPARAM);
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(DCGM_ST_BADPARAM),
                Ok(p) => p,
            },
        };
        Ok(Address::Tcp {
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp { host, port } if host.contains(':') => write!(f, "tcp://[{host}]:{port}"),
            Address::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// A connected socket of either kind.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Writes everything with `MSG_NOSIGNAL`: the library lives inside other people's
    /// processes, where a SIGPIPE from a vanished host engine would kill the caller.
    fn send_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            // SAFETY: `buf` is a live slice and its length is passed with it; the fd is owned
            // by `self` and stays open for the duration of the call.
            let n = unsafe {
                libc::send(
                    self.fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n as usize..];
        }
        Ok(())
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

struct Conn {
    reader: BufReader<Stream>,
    writer: Stream,
}

/// How one request/reply exchange ended.
enum Exchange {
    Reply(Reply),
    /// A complete line that is not a reply this client understands (e.g. a non-finite
    /// double, which JSON cannot carry): the call fails, the connection stays usable.
    Unreadable,
    /// The connection is unusable from now on; the status to report.
    Broken(i32),
}

/// The client end of one host-engine connection.
pub struct Client {
    /// `None` once the connection has failed: like the real library there is no automatic
    /// reconnect, every later request answers `DCGM_ST_CONNECTION_NOT_VALID`.
    conn: Mutex<Option<Conn>>,
}

fn request_timeout() -> Duration {
    std::env::var(REQUEST_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT)
}

fn connect_once(addr: &Address, remaining: Duration) -> io::Result<Stream> {
    match addr {
        Address::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
        Address::Tcp { host, port } => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for sa in (host.as_str(), *port).to_socket_addrs()? {
                match TcpStream::connect_timeout(&sa, remaining.max(Duration::from_millis(1))) {
                    Ok(s) => {
                        // Requests are small and latency-bound.
                        s.set_nodelay(true)?;
                        return Ok(Stream::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

impl Client {
    /// Connects, retrying every 50 ms until `timeout` has passed.
    pub fn connect(addr: &Address, timeout: Duration) -> Result<Client, i32> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match connect_once(addr, remaining) {
                Ok(s) => break s,
                Err(_) if Instant::now() >= deadline => return Err(DCGM_ST_CONNECTION_NOT_VALID),
                Err(_) => thread::sleep(CONNECT_RETRY_INTERVAL.min(remaining)),
            }
        };
        let fail = |_| DCGM_ST_CONNECTION_NOT_VALID;
        stream.set_timeouts(Some(request_timeout())).map_err(fail)?;
        let writer = stream.try_clone().map_err(fail)?;
        Ok(Client {
            conn: Mutex::new(Some(Conn {
                reader: BufReader::new(stream),
                writer,
            })),
        })
    }

    /// Sends one request and waits for its reply. A transport failure kills the
    /// connection for good; an engine-side error comes back as `Ok(Reply::Error(code))`.
    pub fn request(&self, req: &Request) -> Result<Reply, i32> {
        let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = guard.as_mut().ok_or(DCGM_ST_CONNECTION_NOT_VALID)?;
        match Client::exchange(conn, req) {
            Exchange::Reply(r) => Ok(r),
            // A whole line arrived, so the stream is still in step; only this call fails.
            Exchange::Unreadable => Err(DCGM_ST_GENERIC_ERROR),
            Exchange::Broken(code) => {
                // The byte stream may hold half a message: never reuse it.
                *guard = None;
                Err(code)
            }
        }
    }

    fn exchange(conn: &mut Conn, req: &Request) -> Exchange {
        let mut line = match serde_json::to_vec(req) {
            Ok(l) => l,
            Err(_) => return Exchange::Unreadable,
        };
        line.push(b'\n');
        if let Err(e) = conn.writer.send_all(&line) {
            return Exchange::Broken(io_status(e));
        }
        let mut buf = Vec::new();
        match (&mut conn.reader)
            .take(MAX_REPLY_LINE)
            .read_until(b'\n', &mut buf)
        {
            Err(e) => Exchange::Broken(io_status(e)),
            // EOF (the engine went away) or a reply cut short.
            Ok(0) => Exchange::Broken(DCGM_ST_CONNECTION_NOT_VALID),
            Ok(_) if buf.last() != Some(&b'\n') => Exchange::Broken(DCGM_ST_CONNECTION_NOT_VALID),
            Ok(_) => serde_json::from_slice(&buf).map_or(Exchange::Unreadable, Exchange::Reply),
        }
    }

    /// True once a transport error has killed this connection.
    pub fn is_dead(&self) -> bool {
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}

fn io_status(e: io::Error) -> i32 {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DCGM_ST_TIMEOUT,
        _ => DCGM_ST_CONNECTION_NOT_VALID,
    }
}

/// A bound, listening server socket.
pub enum Listener {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
}

impl Listener {
    pub fn bind_tcp(addr: SocketAddr) -> io::Result<Listener> {
        TcpListener::bind(addr).map(Listener::Tcp)
    }

    /// Binds a unix socket, replacing a stale socket file left by an engine that died,
    /// but refusing to steal the path from one that still answers.
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another host engine is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        Ok(Listener::Unix {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The address clients should use, e.g. `tcp://127.0.0.1:5555` or `unix:///tmp/x`.
    pub fn address(&self) -> io::Result<Address> {
        Ok(match self {
            Listener::Tcp(l) => {
                let a = l.local_addr()?;
                Address::Tcp {
                    host: a.ip().to_string(),
                    port: a.port(),
                }
            }
            Listener::Unix { path, .. } => Address::Unix(path.clone()),
        })
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Unix { listener, .. } => listener.set_nonblocking(on),
        }
    }

    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix { listener, .. } => Ok(Stream::Unix(listener.accept()?.0)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            // Best effort: a leftover socket file is also handled by the next bind.
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Receives one line per connection event (opened, closed, accept failures).
pub type EventLog = Arc<dyn Fn(&str) + Send + Sync>;

/// Accepts connections until `stop` is set, serving each on its own thread. `stop` is
/// checked every 50 ms; connection threads end with their clients (or the process).
pub fn serve(
    listener: &Listener,
    engine: Arc<Mutex<Engine>>,
    stop: &AtomicBool,
    log: EventLog,
) -> io::Result<()> {
    // Non-blocking accept so that a stop request is noticed without a wake-up connection.
    listener.set_nonblocking(true)?;
    let next_id = AtomicU64::new(1);
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok(stream) => {
                let id = next_id.fetch_add(1, Ordering::SeqCst);
                let engine = Arc::clone(&engine);
                let conn_log = Arc::clone(&log);
                let spawned = thread::Builder::new()
                    .name(format!("dcgm-sim-conn-{id}"))
                    .spawn(move || serve_connection(id, stream, engine, conn_log));
                if let Err(e) = spawned {
                    log(&format!("connection {id}: cannot start a thread: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(CONNECT_RETRY_INTERVAL)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Typically EMFILE: keep serving the connections we have.
                log(&format!("accept failed: {e}"));
                thread::sleep(CONNECT_RETRY_INTERVAL);
            }
        }
    }
    Ok(())
}

fn serve_connection(id: u64, stream: Stream, engine: Arc<Mutex<Engine>>, log: EventLog) {
    log(&format!("connection {id} opened"));
    let reason = match connection_loop(id, stream, &engine) {
        Ok(()) => "closed by the client".to_string(),
        Err(e) => e,
    };
    engine
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .disconnect(id);
    log(&format!("connection {id} {reason}"));
}

fn connection_loop(id: u64, stream: Stream, engine: &Mutex<Engine>) -> Result<(), String> {
    // The listener is non-blocking; make sure the accepted socket is not.
    stream
        .set_nonblocking(false)
        .map_err(|e| format!("setup failed: {e}"))?;
    let writer = stream
        .try_clone()
        .map_err(|e| format!("setup failed: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_REQUEST_LINE)
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("dropped: read failed: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if buf.last() != Some(&b'\n') {
            return Err(format!(
                "dropped: request longer than {MAX_REQUEST_LINE} bytes or cut short"
            ));
        }
        let reply = match serde_json::from_slice::<Request>(&buf) {
            Ok(req) => engine
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .handle(id, &req),
            // Answer rather than hang up so that a newer client can probe for requests
            // this engine does not know.
            Err(_) => Reply::Error(DCGM_ST_BADPARAM),
        };
        let mut line = serde_json::to_vec(&reply)
            .map_err(|e| format!("dropped: cannot encode a reply: {e}"))?;
        line.push(b'\n');
        writer
            .send_all(&line)
            .map_err(|e| format!("dropped: write failed: {e}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Address {
        Address::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn tcp_addresses_parse_like_the_real_uri_parser() {
        assert_eq!(Address::parse_tcp("localhost"), Ok(tcp("localhost", 5555)));
        assert_eq!(
            Address::parse_tcp("10.0.0.1:6000"),
            Ok(tcp("10.0.0.1", 6000))
        );
        assert_eq!(Address::parse_tcp("[::1]:7000"), Ok(tcp("::1", 7000)));
        assert_eq!(Address::parse_tcp("[::1]"), Ok(tcp("::1", 5555)));
        assert_eq!(Address::parse_tcp("fe80::1"), Ok(tcp("fe80::1", 5555)));
        for bad in [
            "",
            ":5555",
            "host:0",
            "host:junk",
            "host:70000",
            "[::1",
            "[::1]x",
            "a b",
            "x:y:z",
        ] {
            assert_eq!(Address::parse_tcp(bad), Err(DCGM_ST_BADPARAM), "{bad:?}");
        }
    }

    #[test]
    fn uris_pick_the_transport() {
        assert_eq!(Address::parse_uri("tcp://h:1"), Ok(tcp("h", 1)));
        assert_eq!(Address::parse_uri("h"), Ok(tcp("h", 5555)));
        assert_eq!(
            Address::parse_uri("unix:///tmp/s"),
            Ok(Address::Unix("/tmp/s".into()))
        );
        assert_eq!(
            Address::parse_uri("vsock://3:5555"),
            Err(DCGM_ST_NOT_SUPPORTED)
        );
        assert_eq!(Address::parse_uri("unix://"), Err(DCGM_ST_BADPARAM));
        assert_eq!(Address::parse_uri("http://h"), Err(DCGM_ST_BADPARAM));
        assert_eq!(tcp("::1", 5).to_string(), "tcp://[::1]:5");
    }

    #[test]
    fn connecting_to_nothing_gives_up_after_the_timeout() {
        let path = std::env::temp_dir().join(format!("dcgm-sim-nothing-{}", std::process::id()));
        let start = Instant::now();
        let r = Client::connect(&Address::Unix(path), Duration::from_millis(120));
        assert_eq!(r.err(), Some(DCGM_ST_CONNECTION_NOT_VALID));
        assert!(start.elapsed() >= Duration::from_millis(120));
    }

    #[test]
    fn an_unreadable_reply_fails_only_that_call() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut lines = BufReader::new(s.try_clone().unwrap()).lines();
            let ok = serde_json::to_string(&Reply::Ok).unwrap();
            for answer in ["{\"Double\": null}".to_string(), ok] {
                lines.next().unwrap().unwrap();
                std::io::Write::write_all(&mut &s, format!("{answer}\n").as_bytes()).unwrap();
            }
        });
        let client = Client::connect(&tcp("127.0.0.1", port), Duration::from_secs(2)).unwrap();
        let req = Request::UpdateAllFields { wait: true };
        assert_eq!(client.request(&req), Err(DCGM_ST_GENERIC_ERROR));
        assert!(!client.is_dead());
        assert_eq!(client.request(&req), Ok(Reply::Ok));
        server.join().unwrap();
    }

    #[test]
    fn a_silent_server_times_out_and_kills_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts and reads, never answers.
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        });
        let client = Client::connect(&tcp("127.0.0.1", port), Duration::from_secs(2)).unwrap();
        // Shorten the request timeout of this one connection rather than the process-wide env.
        client
            .conn
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .writer
            .set_timeouts(Some(Duration::from_millis(150)))
            .unwrap();
        assert_eq!(
            client.request(&Request::UpdateAllFields { wait: true }),
            Err(DCGM_ST_TIMEOUT)
        );
        assert!(client.is_dead());
        assert_eq!(
            client.request(&Request::UpdateAllFields { wait: true }),
            Err(DCGM_ST_CONNECTION_NOT_VALID)
        );
        drop(client);
        server.join().unwrap();
    }
}
