//! Clients that try to hold a connection past its deadlines: each must lose it within the
//! write timeout plus a margin, and the exporter's file descriptors and memory come back.
//! How long each held a connection is printed (`held ...`), for before/after comparisons.
//!
//! The HTTP/1 clients read nothing through a tiny receive buffer, so the exporter's writes
//! block once the kernel's buffers are full (about 1.6 MB on loopback): the page (32 GPUs,
//! 200 fields, a long node name) is made larger than those, and the tests check that the
//! connection did outlive what fits.

use crate::support::*;
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WRITE_TIMEOUT: Duration = Duration::from_secs(3);
/// Scheduling on a loaded machine, and the time to fill the kernel's buffers.
const MARGIN: Duration = Duration::from_secs(4);
/// Longer than any bound the exporter has (idle close: the 10 s read timeout).
const FOREVER: Duration = Duration::from_secs(25);

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// An exporter with a page of about 2.8 MB.
fn big_exporter(dir: &Path, extra: &[&str]) -> ExporterBuilder {
    let body: String = dcgm_sys::fields::FIELDS
        .iter()
        .filter(|f| {
            f.entity_level == 1
                && (f.field_type == b'i' || f.field_type == b'd')
                && !f.name.starts_with("DCGM_FI_PROF_")
        })
        .map(|f| format!("{}, gauge, {}\n", f.name, f.name))
        .take(200)
        .collect();
    let csv = dir.join("many.csv");
    std::fs::write(&csv, body).unwrap();
    let write_timeout = format!("{}s", WRITE_TIMEOUT.as_secs());
    // A node name as long as Kubernetes allows (253): every series carries it.
    let node = format!("gpu-node-{}", "7".repeat(244));
    exporter()
        .profile("bench-32gpu.toml")
        .env("NODE_NAME", &node)
        .args(&["-f", csv.to_str().unwrap(), "-c", "2000"])
        .args(&["--web-write-timeout", &write_timeout])
        .args(extra)
}

/// A loopback client whose receive buffer is as small as the kernel allows.
fn tiny_client(port: u16) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(1024).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    s.connect(&addr.into()).unwrap();
    s.into()
}

/// What the exporter had before a hostile client came.
struct Baseline {
    fds: usize,
    rss_kib: u64,
}

fn baseline(e: &Exporter) -> Baseline {
    // One well-behaved scrape first: the page and its buffers exist already.
    let page = e.try_get("/metrics").unwrap();
    eprintln!("page: {} bytes", page.len());
    std::thread::sleep(Duration::from_millis(300));
    let pid = e.child.id();
    Baseline {
        fds: fds(pid),
        rss_kib: rss_kib(pid),
    }
}

/// The exporter's end of the loopback connection from client port `peer` to `port`, if a
/// process still holds it (an inode): (bytes queued to send, inode).
fn server_end(port: u16, peer: u16) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let hex_port = |a: &str| {
        a.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (local, remote) = (hex_port(f.get(1)?)?, hex_port(f.get(2)?)?);
        let queued = u64::from_str_radix(f.get(4)?.split(':').next()?, 16).ok()?;
        let inode: u64 = f.get(9)?.parse().ok()?;
        (local == port && remote == peer && inode != 0).then_some((queued, inode))
    })
}

/// The client ports of the exporter's connections.
fn peers(port: u16) -> Vec<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let remote = u16::from_str_radix(f.get(2)?.rsplit(':').next()?, 16).ok()?;
            (local == port && f.get(9)? != &"0").then_some(remote)
        })
        .collect()
}

/// Waits until the exporter has let the connection from client port `peer` go, and returns
/// how long that took from `since`; its file descriptors are back at the baseline then.
fn released(e: &Exporter, base: &Baseline, peer: u16, since: Instant, what: &str) -> Duration {
    // Accepted first (a connection still in the listen queue has no inode yet).
    while server_end(e.port, peer).is_none() {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "{what}: never accepted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut queued = 0;
    loop {
        let held = since.elapsed();
        match server_end(e.port, peer) {
            Some((q, _)) => queued = queued.max(q),
            None => {
                eprintln!("{what}: held {held:?} (at most {queued} bytes queued in the kernel)");
                let pid = e.child.id();
                assert!(
                    fds(pid) <= base.fds,
                    "{what}: {} fds, {} before",
                    fds(pid),
                    base.fds
                );
                return held;
            }
        }
        assert!(
            held < FOREVER,
            "{what}: the exporter still holds the connection after {held:?} (write timeout {WRITE_TIMEOUT:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The connection was held at first (the response did not fit in the buffers), let go within
/// the write timeout plus the margin, and memory came back to near where it was.
fn check(e: &Exporter, base: &Baseline, held: Duration, what: &str, scrape: impl Fn() -> bool) {
    check_within(e, base, held, WRITE_TIMEOUT, what, scrape)
}

/// [`check`] with another bound than the write timeout.
fn check_within(
    e: &Exporter,
    base: &Baseline,
    held: Duration,
    bound: Duration,
    what: &str,
    scrape: impl Fn() -> bool,
) {
    assert!(
        held >= WRITE_TIMEOUT / 2,
        "{what}: released after {held:?}: the response fitted in the kernel's buffers, so this test tests nothing"
    );
    assert!(
        held <= bound + MARGIN,
        "{what}: held {held:?}, bound {bound:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let rss = rss_kib(e.child.id());
    eprintln!("{what}: VmRSS {} KiB before, {rss} KiB after", base.rss_kib);
    assert!(
        rss <= base.rss_kib + 24 * 1024,
        "{what}: VmRSS {rss} KiB, was {} KiB",
        base.rss_kib
    );
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
    assert!(scrape(), "{what}: the exporter no longer serves");
}

/// How much of a response the kernel holds for a client that reads nothing, once that stops
/// growing.
fn kernel_queue(port: u16, peer: u16) -> u64 {
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let q = server_end(port, peer).map_or(0, |(q, _)| q);
        if q != last {
            (last, since) = (q, Instant::now());
        } else if q > 0 && since.elapsed() > Duration::from_millis(300) {
            return q;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a response until `unread` bytes of it are left; returns what it read.
fn read_all_but(c: &mut TcpStream, unread: u64) -> u64 {
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    let total = loop {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed during the head");
        head.extend(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&head[..end]).to_lowercase();
            let len: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("a content-length");
            break end as u64 + 4 + len;
        }
    };
    let mut read = head.len() as u64;
    let stop = total.saturating_sub(unread);
    while read < stop {
        let want = (stop - read).min(buf.len() as u64) as usize;
        let n = c.read(&mut buf[..want]).unwrap();
        assert!(n > 0, "closed after {read} of {total} bytes");
        read += n as u64;
    }
    read
}

#[test]
fn a_connection_close_client_that_stops_reading_before_the_tail_loses_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let e = big_exporter(dir.path(), &[]).start();
    let base = baseline(&e);
    let mut c = tiny_client(e.port);
    let since = Instant::now();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let peer = c.local_addr().unwrap().port();
    // The client reads all but what the kernel holds plus 200 kB: that tail is in hyper's
    // buffer, below its 400 kB limit, so hyper has taken the body's end (the response is
    // done for hyper) while its last bytes cannot be written.
    let queued = kernel_queue(e.port, peer);
    let read = read_all_but(&mut c, queued + 200_000);
    eprintln!(
        "Connection: close: read {read} bytes in {:?}, then nothing ({queued} queued in the kernel)",
        since.elapsed()
    );
    let held = released(&e, &base, peer, since, "Connection: close");
    check(&e, &base, held, "Connection: close", || {
        e.try_get("/health").is_ok()
    });
    drop(c);
}

#[test]
fn a_pipelining_client_that_never_reads_loses_the_connection_at_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let e = big_exporter(dir.path(), &[]).start();
    let base = baseline(&e);
    let mut c = tiny_client(e.port);
    let requests = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50);
    c.write_all(&requests).unwrap();
    let peer = c.local_addr().unwrap().port();
    let held = released(&e, &base, peer, Instant::now(), "pipelined");
    check(&e, &base, held, "pipelined", || {
        e.try_get("/health").is_ok()
    });
    drop(c);
}

/// An HTTP/2 frame: length, type, flags, stream id, payload.
fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([ty, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// HEADERS of `GET https://127.0.0.1/metrics` (HPACK: indexed :method GET, :scheme https;
/// literal :path and :authority, never indexed, so any stream may send them).
fn get_metrics() -> Vec<u8> {
    let mut hpack = vec![0x82, 0x87, 0x04, 8];
    hpack.extend(b"/metrics");
    hpack.extend([0x01, 9]);
    hpack.extend(b"127.0.0.1");
    hpack
}

/// An HTTP/2 client over TLS that grants `window` bytes per stream and never more; returns
/// how long the exporter held its connection after `bound`-checking it.
fn http2_client_granting(window: u32, extra: &[&str], bound: Duration, what: &str) {
    http2_client(Some(window), extra, bound, what)
}

/// A TLS exporter (HTTP/2 offered) with the big page, ready, in `d`; and a scrape over
/// HTTP/2 by curl that says whether it got a page.
fn tls_exporter(d: &Path, extra: &[&str]) -> (Exporter, impl Fn() -> bool) {
    certs::openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.crt",
        ],
    );
    std::fs::write(
        d.join("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let web = d.join("web.yml");
    let mut args = vec!["--web-config-file", web.to_str().unwrap()];
    args.extend(extra);
    let e = big_exporter(d, &args).spawn();
    let url = format!("https://127.0.0.1:{}/metrics", e.port);
    let scrape = move || {
        output_within(
            Command::new(prom::tool("curl")).args(["-skf", "--http2", "-o", "/dev/null", &url]),
            QUICK,
        )
        .status
        .success()
    };
    // The page with its DCGM series, not the first one of self-metrics only.
    e.wait_until(60, |e| {
        let o = output_within(
            Command::new(prom::tool("curl"))
                .args(["-sk", "--http2"])
                .arg(format!("https://127.0.0.1:{}/metrics", e.port)),
            QUICK,
        );
        String::from_utf8_lossy(&o.stdout).contains("DCGM_FI_DEV")
    });
    (e, scrape)
}

/// An HTTP/2 client over TLS: with `window`, it asks for the page granting that many bytes
/// per stream and never more; without, it only opens the connection and then says nothing
/// (it never answers a ping, nor a GOAWAY's).
fn http2_client(window: Option<u32>, extra: &[&str], bound: Duration, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (e, scrape) = tls_exporter(dir.path(), extra);
    std::thread::sleep(Duration::from_millis(500));
    let pid = e.child.id();
    let base = Baseline {
        fds: fds(pid),
        rss_kib: rss_kib(pid),
    };
    let before = peers(e.port);
    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-alpn", "h2", "-connect"])
        .arg(format!("127.0.0.1:{}", e.port))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_server = client.stdin.take().unwrap();
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS: INITIAL_WINDOW_SIZE (0x4) = window, and no WINDOW_UPDATE ever.
    let mut settings = vec![0, 4];
    settings.extend(window.unwrap_or(65535).to_be_bytes());
    h2.extend(frame(0x4, 0, 0, &settings));
    // HEADERS, END_STREAM | END_HEADERS.
    if window.is_some() {
        h2.extend(frame(0x1, 0x5, 1, &get_metrics()));
    }
    to_server.write_all(&h2).unwrap();
    to_server.flush().unwrap();
    let since = Instant::now();
    let peer = loop {
        if let Some(p) = peers(e.port).into_iter().find(|p| !before.contains(p)) {
            break p;
        }
        assert!(since.elapsed() < Duration::from_secs(5), "no connection");
        std::thread::sleep(Duration::from_millis(20));
    };
    let held = released(&e, &base, peer, since, what);
    check_within(&e, &base, held, bound, what, scrape);
    let _ = client.kill();
    let _ = client.wait();
}

/// A stream without window is reset at the write timeout (see
/// [`an_http2_stream_without_window_is_reset_and_the_connection_lives_on`]); the connection,
/// with nothing in progress then, goes as an idle one: the read timeout, then the write
/// timeout to close (the client answers neither the GOAWAY's ping nor any other).
#[test]
fn an_http2_client_that_grants_no_window_loses_its_stream_then_the_idle_connection() {
    let read = Duration::from_secs(3);
    let read_timeout = format!("{}s", read.as_secs());
    http2_client_granting(
        0,
        &["--web-read-timeout", &read_timeout],
        WRITE_TIMEOUT + read + WRITE_TIMEOUT,
        "HTTP/2 zero window",
    );
}

/// A window of 1000 bytes: h2 sends that much of the page and must keep the rest; the
/// stream is reset at the write timeout and the connection goes as an idle one, as with no
/// window at all.
#[test]
fn an_http2_client_that_grants_a_tiny_window_loses_the_connection_as_an_idle_one() {
    let read = Duration::from_secs(3);
    let read_timeout = format!("{}s", read.as_secs());
    http2_client_granting(
        1000,
        &["--web-read-timeout", &read_timeout],
        WRITE_TIMEOUT + read + WRITE_TIMEOUT,
        "HTTP/2 window of 1000 bytes",
    );
}

/// Idle for the read timeout, the connection is told to close (GOAWAY, then a ping h2 waits
/// to see answered): a client that never answers has the write timeout for that.
#[test]
fn an_idle_http2_client_that_never_answers_loses_the_connection() {
    let read = Duration::from_secs(3);
    let read_timeout = format!("{}s", read.as_secs());
    http2_client(
        None,
        &["--web-read-timeout", &read_timeout],
        read + WRITE_TIMEOUT,
        "idle HTTP/2",
    );
}

/// One frame the server sent: type, flags, stream, payload (DATA's payload only counted).
struct Frame {
    ty: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
    len: usize,
    at: Instant,
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;

/// Reads frames from the server (after TLS: s_client's output) until the end.
fn frames(mut from: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<Frame> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let mut head = [0u8; 9];
        if from.read_exact(&mut head).is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).is_err() {
            return;
        }
        let ty = head[3];
        if ty == DATA {
            payload = Vec::new();
        }
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let f = Frame {
            ty,
            flags: head[4],
            stream,
            payload,
            len,
            at: Instant::now(),
        };
        if tx.send(f).is_err() {
            return;
        }
    });
    rx
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

/// Issue 30: over HTTP/2, a stream whose client grants it no flow-control window loses only
/// that stream (RST_STREAM at the write timeout); the connection, a stream with window
/// beside it, a stream opened after the reset and pings go on. Before, the write deadline
/// of the one stream closed the whole connection.
#[test]
fn an_http2_stream_without_window_is_reset_and_the_connection_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let (e, scrape) = tls_exporter(dir.path(), &[]);
    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-alpn", "h2", "-connect"])
        .arg(format!("127.0.0.1:{}", e.port))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_server = client.stdin.take().unwrap();
    let from_server = frames(client.stdout.take().unwrap());
    let mut send = |bytes: &[u8]| {
        to_server.write_all(bytes).unwrap();
        to_server.flush().unwrap();
    };
    // No window for any stream unless granted; the connection's window is wide open.
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
    h2.extend(window_update(0, (1 << 31) - 1 - 65535));
    h2.extend(frame(HEADERS, 0x5, 1, &get_metrics()));
    h2.extend(frame(HEADERS, 0x5, 3, &get_metrics()));
    h2.extend(window_update(3, (1 << 31) - 1));
    send(&h2);
    let since = Instant::now();
    let (mut reset, mut done) = (None, std::collections::BTreeMap::new());
    let mut bytes = std::collections::BTreeMap::<u32, usize>::new();
    let mut pong = false;
    while !(reset.is_some() && done.contains_key(&5) && pong) {
        let left = (WRITE_TIMEOUT + MARGIN * 3).saturating_sub(since.elapsed());
        let f = match from_server.recv_timeout(left) {
            Ok(f) => f,
            Err(_) => panic!(
                "the connection ended or went silent after {:?}: stream 1 reset {reset:?}, streams done {done:?}",
                since.elapsed()
            ),
        };
        match (f.ty, f.stream) {
            (SETTINGS, 0) if f.flags & ACK == 0 => send(&frame(SETTINGS, ACK, 0, &[])),
            (PING, 0) if f.flags & ACK == 0 => send(&frame(PING, ACK, 0, &f.payload)),
            (PING, 0) => pong = f.payload == b"client!!",
            (GOAWAY, _) => panic!("GOAWAY after {:?}: {:?}", since.elapsed(), f.payload),
            (RST_STREAM, 1) => {
                assert_eq!(f.payload, 8u32.to_be_bytes(), "CANCEL");
                reset = Some(f.at - since);
                // A stream opened after the reset is served whole, and pings answered.
                send(&frame(HEADERS, 0x5, 5, &get_metrics()));
                send(&window_update(5, (1 << 31) - 1));
                send(&frame(PING, 0, 0, b"client!!"));
            }
            (RST_STREAM, s) => panic!("stream {s} reset: {:?}", f.payload),
            (DATA, s) => {
                *bytes.entry(s).or_default() += f.len;
                if f.flags & END_STREAM != 0 {
                    done.insert(s, f.at - since);
                }
            }
            _ => {}
        }
    }
    let reset = reset.unwrap();
    eprintln!("stream 1 reset after {reset:?}; streams done {done:?}, bytes {bytes:?}");
    assert!(
        reset >= WRITE_TIMEOUT / 2 && reset <= WRITE_TIMEOUT + MARGIN,
        "stream 1 reset after {reset:?}"
    );
    assert!(done[&3] < reset, "stream 3 waited for stream 1: {done:?}");
    assert_eq!(bytes.get(&1), None, "stream 1 had no window");
    assert!(bytes[&3] > 1_000_000 && bytes[&5] > 1_000_000, "{bytes:?}");
    assert!(scrape(), "the exporter no longer serves");
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
    let _ = client.kill();
    let _ = client.wait();
}
