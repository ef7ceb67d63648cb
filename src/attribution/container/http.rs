//! An HTTP/1.1 GET over a unix socket, for the container runtime's API (Docker Engine API,
//! podman's compatible API), through hyper's client: the same HTTP stack as our server and
//! the Kubernetes client, not a parser of our own. One request per connection.
//!
//! The peer is not trusted to be sane: the connection is bounded by a connect timeout and
//! the call's deadline, the head by hyper's buffer limit, and the body by a size limit that
//! is checked against the announced length first and then as bytes arrive; a violation is
//! an error for this refresh, never a panic or an unbounded wait.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Body;
use hyper_util::rt::TokioIo;
use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Larger answers are refused rather than buffered (thousands of containers fit well below).
const MAX_RESPONSE: usize = 64 << 20;
/// Status line and headers (hyper's read buffer); Docker sends a few hundred bytes.
const MAX_HEAD: usize = 64 << 10;
/// A runtime socket that accepts at all does so at once; a hung daemon is not waited for
/// the whole deadline just to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

thread_local! {
    /// One small runtime per calling thread (the container source's refresher), made once:
    /// the calls are blocking by design, and a current-thread runtime costs no thread.
    static RUNTIME: OnceCell<Result<tokio::runtime::Runtime, Arc<std::io::Error>>> = const { OnceCell::new() };
}

/// A GET that got no usable answer: the request, and why.
#[derive(Debug, thiserror::Error)]
#[error("GET {path} on {}: {why}", .socket.display())]
pub struct Error {
    pub path: String,
    pub socket: PathBuf,
    pub why: Why,
}

/// Why a GET got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum Why {
    #[error("no answer before the deadline")]
    Deadline,
    /// This thread's runtime did not start (the error is kept for later calls too).
    #[error("cannot start an I/O runtime: {0}")]
    Runtime(#[source] Arc<std::io::Error>),
    #[error("no connection within {0:?}")]
    ConnectTimeout(Duration),
    #[error("{0}")]
    Connect(#[source] std::io::Error),
    #[error("{0}")]
    Handshake(#[source] hyper::Error),
    #[error("bad request: {0}")]
    Request(#[source] hyper::http::Error),
    /// hyper refused the answer's head (its words, with their causes).
    #[error("{}", describe(.0))]
    Answer(#[source] hyper::Error),
    /// An announced length over [`MAX_RESPONSE`].
    #[error("Content-Length {0} is over the {MAX_RESPONSE}-byte limit")]
    Announced(u64),
    #[error("answer larger than {MAX_RESPONSE} bytes")]
    TooLarge,
    /// The body broke off or is malformed (hyper's words, with their causes).
    #[error("{}", describe(&**.0))]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

/// `GET path` on the socket: (HTTP status, body), or why there is no answer.
pub fn get(socket: &Path, path: &str, deadline: Instant) -> Result<(u16, Vec<u8>), Error> {
    let fail = |why: Why| Error {
        path: path.to_string(),
        socket: socket.to_path_buf(),
        why,
    };
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| fail(Why::Deadline))?;
    RUNTIME.with(|rt| {
        let rt = rt.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(Arc::new)
        });
        let rt = rt.as_ref().map_err(|e| fail(Why::Runtime(e.clone())))?;
        rt.block_on(async {
            match tokio::time::timeout(left, fetch(socket, path)).await {
                Ok(answer) => answer,
                Err(_) => Err(Why::Deadline),
            }
        })
        .map_err(fail)
    })
}

async fn fetch(socket: &Path, path: &str) -> Result<(u16, Vec<u8>), Why> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(|_| Why::ConnectTimeout(CONNECT_TIMEOUT))?
        .map_err(Why::Connect)?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(Why::Handshake)?;
    // The connection is driven beside the request and dropped (closed) with it.
    let connection = tokio::spawn(connection);
    let answer = exchange(&mut sender, path).await;
    connection.abort();
    answer
}

async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    path: &str,
) -> Result<(u16, Vec<u8>), Why> {
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::USER_AGENT, "dcgm-exporter")
        .header(hyper::header::ACCEPT, "application/json")
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(Why::Request)?;
    let response = sender.send_request(request).await.map_err(Why::Answer)?;
    let status = response.status().as_u16();
    let body = response.into_body();
    // An announced size over the limit is refused before any of it is read.
    if body.size_hint().lower() > MAX_RESPONSE as u64 {
        return Err(Why::Announced(body.size_hint().lower()));
    }
    let body = Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                Why::TooLarge
            } else {
                Why::Body(e)
            }
        })?;
    Ok((status, body.to_bytes().to_vec()))
}

/// An error with its causes ("error reading a body from connection: invalid chunk size"):
/// hyper's `Display` omits them.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    /// `get` against a peer answering `reply` (and closing after it, for `close`).
    fn ask(reply: Vec<u8>, close: bool, deadline: Duration) -> Result<(u16, Vec<u8>), Error> {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s");
        let _peer = if close {
            peer_closing(&socket, reply)
        } else {
            peer(&socket, reply)
        };
        get(&socket, "/containers/json", Instant::now() + deadline)
    }

    #[test]
    fn bodies_in_every_framing() {
        let long = Duration::from_secs(60);
        let cl =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]";
        assert_eq!(
            ask(cl.to_vec(), false, long).unwrap(),
            (200, b"[]".to_vec())
        );
        let ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[{}\r\n1;x=y\r\n]\r\n0\r\n\r\n";
        assert_eq!(
            ask(ch.to_vec(), false, long).unwrap(),
            (200, b"[{}]".to_vec())
        );
        let eof = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}";
        let (status, body) = ask(eof.to_vec(), true, long).unwrap();
        assert_eq!((status, &body[..]), (404, &eof[eof.len() - 31..]));
    }

    /// Sizes that overflow, malformed framing, a head or body over the limits: each is an
    /// error naming the problem, well before the deadline, never a panic. hyper's refusals
    /// are told apart only by its words, which these pin (hyper's error has no public kind).
    #[test]
    fn hostile_answers_are_errors_at_once() {
        type Is = fn(&Why) -> bool;
        fn hyper_says(w: &Why, words: &str) -> bool {
            matches!(w, Why::Answer(_) | Why::Body(_))
                && w.to_string().to_lowercase().contains(words)
        }
        let max = u64::MAX.to_string();
        let cases: Vec<(&str, Vec<u8>, Is)> = vec![
            (
                "huge Content-Length",
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n[]".to_vec(),
                |w| hyper_says(w, "content-length"),
            ),
            (
                "Content-Length u64::MAX",
                format!("HTTP/1.1 200 OK\r\nContent-Length: {max}\r\n\r\n[]").into_bytes(),
                // (hyper's words for a length it cannot hold)
                |w| hyper_says(w, "message head is too large"),
            ),
            (
                "Content-Length over the limit",
                b"HTTP/1.1 200 OK\r\nContent-Length: 67108865\r\n\r\n[]".to_vec(),
                |w| matches!(w, Why::Announced(67_108_865)),
            ),
            (
                "signed Content-Length",
                b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n[]".to_vec(),
                |w| hyper_says(w, "content-length"),
            ),
            (
                "chunk size overflow",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                    .to_vec(),
                |w| hyper_says(w, "invalid chunk size: overflow"),
            ),
            (
                "negative chunk size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n".to_vec(),
                |w| hyper_says(w, "chunk size"),
            ),
            (
                "chunk longer than its size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]xx0\r\n\r\n".to_vec(),
                |w| hyper_says(w, "invalid chunk body"),
            ),
            (
                "endless head",
                [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'y'; 2 * MAX_HEAD]].concat(),
                |w| hyper_says(w, "message head is too large"),
            ),
            ("not HTTP", b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec(), |w| {
                hyper_says(w, "invalid http version")
            }),
        ];
        for (name, reply, is) in cases {
            let asked = Instant::now();
            let e = ask(reply, false, Duration::from_secs(60)).unwrap_err();
            assert!(asked.elapsed() < Duration::from_secs(10), "{name}: waited");
            assert!(is(&e.why), "{name}: {e:?} ({e})");
            assert_eq!(e.path, "/containers/json", "{name}");
        }
    }

    /// A body that keeps coming is cut at the limit, not buffered whole.
    #[test]
    fn an_endless_body_is_refused_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s");
        let listener = UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            let chunk = [b"10000\r\n".as_slice(), &[b'x'; 0x10000], b"\r\n"].concat();
            // 128 MiB at most, twice the limit: the client must stop reading first.
            for _ in 0..2048 {
                if s.write_all(&chunk).is_err() {
                    return;
                }
            }
        });
        let e = get(&socket, "/x", Instant::now() + Duration::from_secs(60)).unwrap_err();
        assert!(matches!(e.why, Why::TooLarge), "{e:?}");
    }

    /// [`peer`] that closes its side after the answer (bodies delimited by the close).
    fn peer_closing(socket: &Path, reply: Vec<u8>) -> std::thread::JoinHandle<()> {
        let listener = UnixListener::bind(socket).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b);
                let _ = s.write_all(&reply);
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        })
    }

    /// A peer on a unix socket that reads the request, writes `reply`, then keeps the
    /// connection open until the client closes it (so only the answer itself, or the
    /// deadline, can end the client's wait).
    fn peer(socket: &Path, reply: Vec<u8>) -> std::thread::JoinHandle<()> {
        peer_with(socket, move |_| reply.clone())
    }

    /// [`peer`] answering each request (its head, as text) with `respond`'s bytes.
    pub(crate) fn peer_with(
        socket: &Path,
        respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
    ) -> std::thread::JoinHandle<()> {
        let listener = UnixListener::bind(socket).unwrap();
        let respond = std::sync::Arc::new(respond);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let respond = respond.clone();
                std::thread::spawn(move || {
                    let mut req = Vec::new();
                    let mut b = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&b[..n]),
                        }
                    }
                    let reply = respond(&String::from_utf8_lossy(&req));
                    let _ = s.write_all(&reply);
                    // Until the client gives up and closes.
                    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
                });
            }
        })
    }

    #[test]
    fn a_peer_that_never_answers_is_an_error_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hang");
        // Half an answer, then nothing; a chunk whose announced bytes never come.
        for (name, reply) in [
            (
                "half",
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[".to_vec(),
            ),
            (
                "chunk",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3ffffff\r\nx".to_vec(),
            ),
        ] {
            let socket = socket.with_extension(name);
            let _peer = peer(&socket, reply);
            let asked = Instant::now();
            let e = get(&socket, "/x", asked + Duration::from_millis(300)).unwrap_err();
            assert!(matches!(e.why, Why::Deadline), "{name}: {e:?}");
            assert!(asked.elapsed() < Duration::from_secs(3), "{name}");
        }
    }

    #[test]
    fn a_missing_socket_is_an_error_naming_it() {
        let e = get(
            Path::new("/nonexistent/docker.sock"),
            "/containers/json",
            Instant::now() + Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(e.socket, Path::new("/nonexistent/docker.sock"));
        assert!(
            matches!(&e.why, Why::Connect(io) if io.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
    }
}
