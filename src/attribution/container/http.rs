//! A minimal HTTP/1.1 GET over a unix socket, for the container runtime's API (Docker
//! Engine API, podman's compatible API). One request per connection (`Connection: close`),
//! bodies with Content-Length, chunked, or up to EOF; every step bounded by one deadline.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

/// Larger answers are refused rather than buffered (thousands of containers fit well below).
const MAX_RESPONSE: usize = 64 << 20;

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
                // A complete Content-Length answer is done even if the server keeps the
                // connection open.
                if complete(&raw) {
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

fn head(raw: &[u8]) -> Option<Result<Head, String>> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = match status_line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
    {
        Some(s) => s,
        None => return Some(Err(format!("not an HTTP answer: '{status_line}'"))),
    };
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            match v.parse() {
                Ok(n) => content_length = Some(n),
                Err(_) => return Some(Err(format!("bad Content-Length '{v}'"))),
            }
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.to_ascii_lowercase().contains("chunked");
        }
    }
    Some(Ok(Head {
        status,
        body_start: end + 4,
        content_length,
        chunked,
    }))
}

fn complete(raw: &[u8]) -> bool {
    match head(raw) {
        Some(Ok(h)) if !h.chunked => h
            .content_length
            .is_some_and(|n| raw.len() >= h.body_start + n),
        Some(Ok(h)) => dechunk(&raw[h.body_start..]).is_ok(),
        _ => false,
    }
}

/// (status, body) of a whole answer.
fn parse(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let h = head(raw).ok_or("the answer ended inside its headers")??;
    let rest = &raw[h.body_start..];
    let body = if h.chunked {
        dechunk(rest)?
    } else if let Some(n) = h.content_length {
        rest.get(..n)
            .ok_or_else(|| format!("the body ended after {} of {n} bytes", rest.len()))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok((h.status, body))
}

/// The body of a chunked transfer; `Err` while the last chunk has not arrived.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("incomplete chunk size")?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size '{size_hex}'"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("incomplete chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bodies_in_every_framing() {
        let cl =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]";
        assert_eq!(parse(cl).unwrap(), (200, b"[]".to_vec()));
        assert!(complete(cl));
        assert!(!complete(&cl[..cl.len() - 1]));
        let ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[{}\r\n1;x=y\r\n]\r\n0\r\n\r\n";
        assert_eq!(parse(ch).unwrap(), (200, b"[{}]".to_vec()));
        assert!(complete(ch));
        assert!(!complete(&ch[..ch.len() - 7]));
        let eof = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}";
        assert_eq!(parse(eof).unwrap().0, 404);
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n[]").is_err());
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
