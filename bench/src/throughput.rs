//! Requests per second at 64 keep-alive connections, against the exporter and against a
//! static server (hyper, every core) answering with the very bytes the exporter sent, in the
//! same run on the same machine: the ratios (requests per second, p99 latency) are what the
//! exporter's own work per scrape costs.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CONNECTIONS: usize = 64;

/// The name of the static servers' threads, by which their CPU time is told apart from the
/// clients' in this process.
pub const STATIC_THREADS: &str = "bench-static";

/// CPU time of this process's static-server threads, in seconds.
pub fn static_cpu_s() -> f64 {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != STATIC_THREADS {
            continue;
        }
        ns += crate::scale::schedstat_ns(&t.path());
    }
    ns as f64 / 1e9
}

/// Response headers as sent, and the body bytes.
pub type Response = (Vec<(String, String)>, Vec<u8>);

/// One response: (headers as sent, body bytes), read with a minimal HTTP/1.1 client.
pub fn fetch(addr: SocketAddr, path: &str, gzip: bool) -> Result<Response, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(request(path, gzip).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    read_response(&mut r)
}

fn request(path: &str, gzip: bool) -> String {
    let enc = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    format!("GET {path} HTTP/1.1\r\nHost: bench\r\n{enc}\r\n")
}

fn read_response(r: &mut impl BufRead) -> Result<Response, String> {
    let mut status = String::new();
    r.read_line(&mut status).map_err(|e| e.to_string())?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(format!("status: {status:?}"));
    }
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if k.eq_ignore_ascii_case("content-length") {
                len = v.parse().map_err(|_| "bad content-length")?;
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok((headers, body))
}

/// What `CONNECTIONS` keep-alive clients saw over one phase.
pub struct Load {
    pub per_second: f64,
    /// 99th percentile of one request's latency (request written to response read), seconds.
    pub p99: f64,
    /// Mean size of a response's body, bytes: a server sending more per request is slower
    /// for that alone.
    pub body_bytes: f64,
}

/// Requests per second and the latency of each request over `d` with `CONNECTIONS`
/// keep-alive clients.
pub fn rate(addr: SocketAddr, path: &str, gzip: bool, d: Duration) -> Load {
    let start = Instant::now();
    let end = start + d;
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let req = request(path, gzip);
            std::thread::spawn(move || {
                let (mut latencies, mut bytes) = (Vec::new(), 0usize);
                while Instant::now() < end {
                    let Ok(s) = TcpStream::connect(addr) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut w = match s.try_clone() {
                        Ok(w) => w,
                        Err(_) => continue,
                    };
                    let mut r = BufReader::with_capacity(256 * 1024, s);
                    while Instant::now() < end {
                        let t = Instant::now();
                        if w.write_all(req.as_bytes()).is_err() {
                            break;
                        }
                        let Ok((_, body)) = read_response(&mut r) else {
                            break;
                        };
                        latencies.push(t.elapsed().as_secs_f64());
                        bytes += body.len();
                    }
                }
                (latencies, bytes)
            })
        })
        .collect();
    let (mut all, mut bytes) = (Vec::new(), 0usize);
    for t in threads {
        let (latencies, b) = t.join().unwrap_or_default();
        all.extend(latencies);
        bytes += b;
    }
    let per_second = all.len() as f64 / start.elapsed().as_secs_f64();
    let body_bytes = bytes as f64 / (all.len() as f64).max(1.0);
    all.sort_by(f64::total_cmp);
    let p99 = all
        .get(((all.len() as f64 - 1.0) * 0.99) as usize)
        .copied()
        .unwrap_or(f64::NAN);
    Load {
        per_second,
        p99,
        body_bytes,
    }
}

/// A static server: every request gets `body` with `headers`. Runs until the process ends.
pub fn static_server(headers: Vec<(String, String)>, body: Vec<u8>) -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    serve_static(listener, headers, body)
}

/// A static server in a process of its own (this binary's `static-serve` mode), so that
/// it stands where the exporter stands: across a process boundary from the clients. Its
/// threads in this process would share the clients' address space, which makes every
/// switch between a client and the server cheaper than one into the exporter's process.
pub fn static_process(
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<(SocketAddr, crate::Killed), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (h, b) = (dir.path().join("headers"), dir.path().join("body"));
    let lines: Vec<String> = headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    std::fs::write(&h, lines.join("\n")).map_err(|e| e.to_string())?;
    std::fs::write(&b, body).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .arg("static-serve")
        .args([&h, &b])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("static-serve: {e}"))?;
    let out = child.stdout.take().ok_or("static-serve: no stdout")?;
    let child = crate::Killed(child);
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| format!("static-serve: {e}"))?;
    let addr = line
        .trim()
        .parse()
        .map_err(|_| format!("static-serve said {line:?}, not an address"))?;
    Ok((addr, child))
}

/// `bench static-serve HEADERS BODY`: a static server answering every request with the
/// file `BODY` and the `name: value` lines of `HEADERS`; prints its address and serves
/// until killed.
pub fn run_static_serve() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(h), Some(b)) = (args.get(2), args.get(3)) else {
        return Err("usage: bench static-serve HEADERS BODY".into());
    };
    let headers = std::fs::read_to_string(h)
        .map_err(|e| format!("{h}: {e}"))?
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let body = std::fs::read(b).map_err(|e| format!("{b}: {e}"))?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    println!("{}", listener.local_addr().map_err(|e| e.to_string())?);
    serve_static(listener, headers, body)?;
    loop {
        std::thread::park();
    }
}

fn serve_static(
    listener: std::net::TcpListener,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<SocketAddr, String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let body = hyper::body::Bytes::from(body);
    let headers: Arc<Vec<(String, String)>> = Arc::new(
        headers
            .into_iter()
            .filter(|(k, _)| {
                !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("date")
            })
            .collect(),
    );
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name(STATIC_THREADS)
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (body, headers) = (body.clone(), headers.clone());
                let service = hyper::service::service_fn(move |_req| {
                    let mut resp = hyper::Response::new(http_body_util::Full::new(body.clone()));
                    for (k, v) in headers.iter() {
                        if let (Ok(k), Ok(v)) = (
                            hyper::header::HeaderName::from_bytes(k.as_bytes()),
                            hyper::header::HeaderValue::from_str(v),
                        ) {
                            resp.headers_mut().insert(k, v);
                        }
                    }
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    Ok(addr)
}
