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
use std::path::Path;
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
    static RUNTIME: OnceCell<Result<tokio::runtime::Runtime, String>> = const { OnceCell::new() };
}

/// `GET path` on the socket: (HTTP status, body), or why there is no answer.
pub fn get(socket: &Path, path: &str, deadline: Instant) -> Result<(u16, Vec<u8>), String> {
    let fail = |what: String| format!("GET {path} on {}: {what}", socket.display());
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| fail("no answer before the deadline".into()))?;
    RUNTIME.with(|rt| {
        let rt = rt.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| format!("cannot start an I/O runtime: {e}"))
        });
        let rt = rt.as_ref().map_err(|e| fail(e.clone()))?;
        rt.block_on(async {
            match tokio::time::timeout(left, fetch(socket, path)).await {
                Ok(answer) => answer,
                Err(_) => Err("no answer before the deadline".into()),
            }
        })
        .map_err(fail)
    })
}

async fn fetch(socket: &Path, path: &str) -> Result<(u16, Vec<u8>), String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    // The connection is driven beside the request and dropped (closed) with it.
    let connection = tokio::spawn(connection);
    let answer = exchange(&mut sender, path).await;
    connection.abort();
    answer
}

async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    path: &str,
) -> Result<(u16, Vec<u8>), String> {
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::USER_AGENT, "dcgm-exporter")
        .header(hyper::header::ACCEPT, "application/json")
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(|e| format!("bad request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| describe(&e))?;
    let status = response.status().as_u16();
    let body = response.into_body();
    // An announced size over the limit is refused before any of it is read.
    if body.size_hint().lower() > MAX_RESPONSE as u64 {
        return Err(format!(
            "Content-Length {} is over the {MAX_RESPONSE}-byte limit",
            body.size_hint().lower()
        ));
    }
    let body = Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                format!("answer larger than {MAX_RESPONSE} bytes")
            } else {
                describe(&*e)
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
    fn ask(reply: Vec<u8>, close: bool, deadline: Duration) -> Result<(u16, Vec<u8>), String> {
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
    /// error naming the problem, well before the deadline, never a panic.
    #[test]
    fn hostile_answers_are_errors_at_once() {
        let max = u64::MAX.to_string();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "huge Content-Length",
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n[]".to_vec(),
                "content-length",
            ),
            (
                "Content-Length u64::MAX",
                format!("HTTP/1.1 200 OK\r\nContent-Length: {max}\r\n\r\n[]").into_bytes(),
                // (hyper's words for a length it cannot hold)
                "message head is too large",
            ),
            (
                "Content-Length over the limit",
                b"HTTP/1.1 200 OK\r\nContent-Length: 67108865\r\n\r\n[]".to_vec(),
                "Content-Length 67108865 is over the 67108864-byte limit",
            ),
            (
                "signed Content-Length",
                b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n[]".to_vec(),
                "content-length",
            ),
            (
                "chunk size overflow",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                    .to_vec(),
                "invalid chunk size: overflow",
            ),
            (
                "negative chunk size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n".to_vec(),
                "chunk size",
            ),
            (
                "chunk longer than its size",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]xx0\r\n\r\n".to_vec(),
                "invalid chunk body",
            ),
            (
                "endless head",
                [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'y'; 2 * MAX_HEAD]].concat(),
                "message head is too large",
            ),
            (
                "not HTTP",
                b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec(),
                "invalid HTTP version",
            ),
        ];
        for (name, reply, want) in cases {
            let asked = Instant::now();
            let e = ask(reply, false, Duration::from_secs(60)).unwrap_err();
            assert!(asked.elapsed() < Duration::from_secs(10), "{name}: waited");
            assert!(
                e.to_lowercase().contains(&want.to_lowercase()),
                "{name}: {e}"
            );
            assert!(e.contains("GET /containers/json on "), "{name}: {e}");
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
        assert!(e.contains("answer larger than 67108864 bytes"), "{e}");
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
            assert!(e.contains("no answer before the deadline"), "{name}: {e}");
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
        assert!(e.contains("/nonexistent/docker.sock"), "{e}");
    }
}
