//! A minimal HTTP/1.1 GET over a unix socket, for the container runtime's API (Docker
//! Engine API, podman's compatible API). One request per connection (`Connection: close`),
//! bodies with Content-Length, chunked, or up to EOF; every step bounded by one deadline.
//!
//! The peer is not trusted to be sane: every size it announces (Content-Length, chunk
//! sizes, their sum) is parsed and added with checked arithmetic and held to the limits
//! below, and a violation is an error for this refresh, never a panic or an unbounded wait.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

/// Larger answers are refused rather than buffered (thousands of containers fit well below).
const MAX_RESPONSE: usize = 64 << 20;
/// Status line and headers; Docker sends a few hundred bytes.
const MAX_HEAD: usize = 64 << 10;
/// One chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 1024;

/// `GET path` on the socket: (HTTP status, body), or why there is no answer.
pub fn get(socket: &Path, path: &str, deadline: Instant) -> Result<(u16, Vec<u8>), String> {
    let fail = |what: String| format!("GET {path} on {}: {what}", socket.display());
    let mut stream = UnixStream::connect(socket).map_err(|e| fail(e.to_string()))?;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let timed_out = || fail("no answer before the deadline".into());
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: dcgm-exporter\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream
        .set_write_timeout(Some(remaining().ok_or_else(timed_out)?))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = remaining().ok_or_else(timed_out)?;
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| fail(e.to_string()))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_RESPONSE {
                    return Err(fail(format!("answer larger than {MAX_RESPONSE} bytes")));
                }
                // A complete answer is done even if the server keeps the connection open;
                // an answer that is already known to be bad is not waited for.
                if complete(&raw).map_err(fail)? {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out())
            }
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    parse(&raw).map_err(fail)
}

struct Head {
    status: u16,
    body_start: usize,
    content_length: Option<usize>,
    chunked: bool,
}

/// The parsed head; `Ok(None)` while it has not fully arrived.
fn head(raw: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        if raw.len() > MAX_HEAD {
            return Err(format!("headers longer than {MAX_HEAD} bytes"));
        }
        return Ok(None);
    };
    if end > MAX_HEAD {
        return Err(format!("headers longer than {MAX_HEAD} bytes"));
    }
    let text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: '{}'", clip(status_line)))?;
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            content_length = Some(content_length_of(v)?);
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.to_ascii_lowercase().contains("chunked");
        }
    }
    Ok(Some(Head {
        status,
        body_start: end + 4,
        content_length,
        chunked,
    }))
}

/// A Content-Length within the limit. Digits only: `usize::from_str` would also take `+5`.
fn content_length_of(v: &str) -> Result<usize, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad Content-Length '{}'", clip(v)));
    }
    match v.parse::<usize>() {
        Ok(n) if n <= MAX_RESPONSE => Ok(n),
        _ => Err(format!(
            "Content-Length {} is over the {MAX_RESPONSE}-byte limit",
            clip(v)
        )),
    }
}

/// Whether the whole answer has arrived; `Err` as soon as it is known to be bad.
fn complete(raw: &[u8]) -> Result<bool, String> {
    let Some(h) = head(raw)? else {
        return Ok(false);
    };
    if !h.chunked {
        return Ok(h
            .content_length
            .and_then(|n| h.body_start.checked_add(n))
            .is_some_and(|end| raw.len() >= end));
    }
    // Every chunk ends a line: a read that does not is inside one, and a large body is not
    // re-scanned per read.
    if !raw.ends_with(b"\r\n") {
        return Ok(false);
    }
    match dechunk(&raw[h.body_start..])? {
        Chunked::Done(_) => Ok(true),
        Chunked::Partial => Ok(false),
    }
}

/// (status, body) of a whole answer.
fn parse(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let h = head(raw)?.ok_or("the answer ended inside its headers")?;
    let rest = &raw[h.body_start..];
    let body = if h.chunked {
        match dechunk(rest)? {
            Chunked::Done(body) => body,
            Chunked::Partial => return Err("the answer ended inside its chunked body".into()),
        }
    } else if let Some(n) = h.content_length {
        rest.get(..n)
            .ok_or_else(|| format!("the body ended after {} of {n} bytes", rest.len()))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok((h.status, body))
}

enum Chunked {
    Done(Vec<u8>),
    /// More is to come.
    Partial,
}

/// The body of a chunked transfer, `Partial` while the last chunk has not arrived, `Err`
/// for a malformed or oversized one.
fn dechunk(mut rest: &[u8]) -> Result<Chunked, String> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            if rest.len() > MAX_CHUNK_LINE {
                return Err(format!(
                    "chunk-size line longer than {MAX_CHUNK_LINE} bytes"
                ));
            }
            return Ok(Chunked::Partial);
        };
        if eol > MAX_CHUNK_LINE {
            return Err(format!(
                "chunk-size line longer than {MAX_CHUNK_LINE} bytes"
            ));
        }
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = chunk_size(size_text.split(';').next().unwrap_or_default().trim())?;
        rest = &rest[eol + 2..];
        if size == 0 {
            // The last chunk, then trailers (ignored) up to an empty line.
            let ended = rest.starts_with(b"\r\n") || rest.windows(4).any(|w| w == b"\r\n\r\n");
            return Ok(if ended {
                Chunked::Done(out)
            } else {
                Chunked::Partial
            });
        }
        let total = out
            .len()
            .checked_add(size)
            .filter(|t| *t <= MAX_RESPONSE)
            .ok_or_else(|| format!("chunked body over the {MAX_RESPONSE}-byte limit"))?;
        // `size` is at most MAX_RESPONSE here, so `size + 2` cannot overflow.
        if rest.len() < size + 2 {
            return Ok(Chunked::Partial);
        }
        if &rest[size..size + 2] != b"\r\n" {
            return Err("a chunk does not end where its size says".into());
        }
        out.reserve(total - out.len());
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A chunk size within the limit (hex digits only, as RFC 9112 has it).
fn chunk_size(hex: &str) -> Result<usize, String> {
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad chunk size '{}'", clip(hex)));
    }
    match usize::from_str_radix(hex, 16) {
        Ok(n) if n <= MAX_RESPONSE => Ok(n),
        _ => Err(format!(
            "chunk size 0x{} is over the {MAX_RESPONSE}-byte limit",
            clip(hex)
        )),
    }
}

/// At most 64 characters of what the peer sent, for error messages.
fn clip(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    #[test]
    fn bodies_in_every_framing() {
        let cl =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]";
        assert_eq!(parse(cl).unwrap(), (200, b"[]".to_vec()));
        assert_eq!(complete(cl), Ok(true));
        assert_eq!(complete(&cl[..cl.len() - 1]), Ok(false));
        let ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[{}\r\n1;x=y\r\n]\r\n0\r\n\r\n";
        assert_eq!(parse(ch).unwrap(), (200, b"[{}]".to_vec()));
        assert_eq!(complete(ch), Ok(true));
        assert_eq!(complete(&ch[..ch.len() - 7]), Ok(false));
        assert_eq!(complete(&ch[..ch.len() - 2]), Ok(false));
        let eof = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}";
        assert_eq!(parse(eof).unwrap().0, 404);
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n[]").is_err());
    }

    /// Sizes that overflow `usize` or its sums, or exceed the limits: each is an error
    /// naming the problem, at once (no waiting for a body that cannot come), never a panic.
    #[test]
    fn hostile_sizes_are_errors_not_panics() {
        let max = usize::MAX.to_string();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n[]".to_vec(),
                "over the 67108864-byte limit",
            ),
            // Parses as a usize; `body_start + n` used to overflow.
            (
                format!("HTTP/1.1 200 OK\r\nContent-Length: {max}\r\n\r\n[]").into_bytes(),
                "over the 67108864-byte limit",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n[]".to_vec(),
                "bad Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                    .to_vec(),
                "chunk size 0xffffffffffffffffff is over",
            ),
            // Parses as a usize; `size + 2` used to overflow.
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"
                    .to_vec(),
                "is over the 67108864-byte limit",
            ),
            // Each chunk within the limit, their sum not.
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n4000000\r\n"
                    .to_vec(),
                "chunked body over the 67108864-byte limit",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n".to_vec(),
                "bad chunk size '-1'",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]xx0\r\n\r\n".to_vec(),
                "does not end where its size says",
            ),
        ];
        for (raw, want) in cases {
            let shown = String::from_utf8_lossy(&raw).to_string();
            let e = complete(&raw).expect_err(&shown);
            assert!(e.contains(want), "{shown}: {e}");
            let e = parse(&raw).expect_err(&shown);
            assert!(e.contains(want), "{shown}: {e}");
        }
        let endless = [b"HTTP/1.1 200 OK\r\n".as_slice(), &[b'x'; MAX_HEAD + 1]].concat();
        assert!(complete(&endless)
            .unwrap_err()
            .contains("headers longer than"));
        let endless_chunk = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice(),
            &[b'0'; MAX_CHUNK_LINE + 1],
            b"\r\n",
        ]
        .concat();
        assert!(complete(&endless_chunk)
            .unwrap_err()
            .contains("chunk-size line longer"));
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
    fn a_hostile_peer_gives_an_error_well_before_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, Vec<u8>, &str); 3] = [
            (
                "cl",
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(),
                "Content-Length 99999999999999999999999 is over",
            ),
            (
                "chunk",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                    .to_vec(),
                "chunk size 0xffffffffffffffffff is over",
            ),
            (
                "head",
                [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'y'; 2 * MAX_HEAD]].concat(),
                "headers longer than",
            ),
        ];
        for (name, reply, want) in cases {
            let socket = dir.path().join(name);
            let _peer = peer(&socket, reply);
            // A generous deadline: only the parse error can end this early.
            let e = get(
                &socket,
                "/containers/json",
                Instant::now() + Duration::from_secs(60),
            )
            .unwrap_err();
            assert!(e.contains(want), "{name}: {e}");
            assert!(e.contains("GET /containers/json on "), "{e}");
        }
    }

    #[test]
    fn a_peer_that_never_answers_is_an_error_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hang");
        // Half an answer, then nothing.
        let _peer = peer(
            &socket,
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[".to_vec(),
        );
        let e = get(&socket, "/x", Instant::now() + Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("no answer before the deadline"), "{e}");
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
