//! Clients that try to hold a connection past its deadlines: each must lose it within the
//! write timeout plus a margin, and the exporter's file descriptors and memory come back.
//! How long each held a connection is printed (`held ...`), for before/after comparisons.
//!
//! The HTTP/1 clients read nothing through a tiny receive buffer, so the exporter's writes
//! block once the kernel's buffers are full (about 1.6 MB on loopback): the page (32 GPUs,
//! 200 fields, a long node name) is made larger than those, and the tests check that the
//! connection did outlive what fits.

mod support;
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

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

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
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
    assert!(
        held >= WRITE_TIMEOUT / 2,
        "{what}: released after {held:?}: the response fitted in the kernel's buffers, so this test tests nothing"
    );
    assert!(
        held <= WRITE_TIMEOUT + MARGIN,
        "{what}: held {held:?}, write timeout {WRITE_TIMEOUT:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let rss = rss_kib(e.child.id());
    eprintln!("{what}: VmRSS {} KiB before, {rss} KiB after", base.rss_kib);
    assert!(
        rss <= base.rss_kib + 64 * 1024,
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
    eprintln!("Connection: close: read {read} bytes, then nothing ({queued} queued in the kernel)");
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

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new(prom::tool("openssl"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

#[test]
fn an_http2_client_that_grants_no_window_loses_the_connection_at_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl(
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
    let e = big_exporter(d, &["--web-config-file", web.to_str().unwrap()]).spawn();
    let url = format!("https://127.0.0.1:{}/metrics", e.port);
    let scrape = || {
        Command::new(prom::tool("curl"))
            .args(["-skf", "--http2", "-o", "/dev/null", &url])
            .status()
            .is_ok_and(|s| s.success())
    };
    e.wait_until(60, |_| scrape());
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
    // SETTINGS: INITIAL_WINDOW_SIZE (0x4) = 0, and no WINDOW_UPDATE ever.
    h2.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    // HEADERS, END_STREAM | END_HEADERS: GET https 127.0.0.1 /metrics (HPACK: indexed
    // :method GET, :scheme https; literal :path and :authority).
    let mut hpack = vec![0x82, 0x87, 0x04, 8];
    hpack.extend(b"/metrics");
    hpack.extend([0x01, 9]);
    hpack.extend(b"127.0.0.1");
    h2.extend(frame(0x1, 0x5, 1, &hpack));
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
    let held = released(&e, &base, peer, since, "HTTP/2 zero window");
    check(&e, &base, held, "HTTP/2 zero window", scrape);
    let _ = client.kill();
    let _ = client.wait();
}
