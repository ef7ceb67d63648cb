//! `otlp`: what the OTLP push (`--otlp-endpoint`) costs per collection, beside rendering
//! the page.
//!
//! 1. In process, on the very page the exporter serves for the profile (scraped, then
//!    rebuilt as a `model::Page`): the CPU time of `Exposition::render` (the text and gzip
//!    variants every collection renders) and of the push's share of a collection (the OTLP
//!    conversion and the protobuf encoding, all the collection thread does for it), each
//!    averaged over `--iterations`.
//! 2. The exporter process, idle (no scrapes), without and with `--otlp-endpoint` pushing
//!    every collection to a local OTLP/HTTP sink that answers 200: CPU seconds per
//!    collection (the sender thread's HTTP work included) and peak RSS.
//!
//! `cargo run --release -p bench -- otlp [--build release|debug]
//! [--profile etc/sim/large-bench.toml] [--collectors bench/bench-counters.csv]
//! [--seconds 20] [--iterations 200]`

use crate::{arg, cpu_seconds, exporter, free_port, get, rss_kib, self_metric, Killed};
use dcgm_exporter::config::otlp::Naming;
use dcgm_exporter::model::naming::PromType;
use dcgm_exporter::model::Page;
use dcgm_exporter::output::exposition::Exposition;
use dcgm_exporter::output::otlp::PageConverter;
use std::path::Path;

use std::time::{Duration, Instant};

/// The page's DCGM families (the exporter's own metrics left out) as a `Page`.
fn page_from_text(text: &str) -> Page {
    let mut page = Page::default();
    let mut help = String::new();
    let mut ty = PromType::Gauge;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("# HELP ") {
            help = h.split_once(' ').map_or("", |(_, h)| h).to_string();
        } else if let Some(t) = line.strip_prefix("# TYPE ") {
            ty = match t.split_once(' ').map(|(_, t)| t) {
                Some("counter") => PromType::Counter,
                _ => PromType::Gauge,
            };
        } else if !line.starts_with('#') && !line.starts_with("dcgm_exporter_") {
            if let Some((name, labels, value)) = sample(line) {
                let l: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                page.add(name, &help, ty, &l, value);
            }
        }
    }
    page
}

type Labels = Vec<(String, String)>;

/// `name{k="v",...} value` (escapes undone).
fn sample(line: &str) -> Option<(&str, Labels, f64)> {
    let (name, rest) = line.split_at(line.find(['{', ' '])?);
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut end = 0;
        loop {
            let mut k = String::new();
            for (i, c) in chars.by_ref() {
                match c {
                    '=' => break,
                    '}' => {
                        end = i;
                        break;
                    }
                    ',' => {}
                    c => k.push(c),
                }
            }
            if k.is_empty() {
                break;
            }
            chars.next(); // the opening quote
            let mut v = String::new();
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => v.push('\n'),
                        Some((_, o)) => v.push(o),
                        None => break,
                    },
                    '"' => break,
                    o => v.push(o),
                }
            }
            labels.push((k, v));
        }
        rest = &body[end + 1..];
    }
    Some((name, labels, rest.split_whitespace().next()?.parse().ok()?))
}

/// This thread's CPU seconds (user + system).
fn thread_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let rest = s.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// CPU seconds per call of `f`, over `n` calls (and the wall time, for short runs where
/// the 10 ms clock ticks of /proc are too coarse).
fn per_call(n: usize, mut f: impl FnMut()) -> (f64, f64) {
    let (c0, t0) = (thread_cpu(), Instant::now());
    for _ in 0..n {
        f();
    }
    (
        (thread_cpu() - c0) / n as f64,
        t0.elapsed().as_secs_f64() / n as f64,
    )
}

/// A local OTLP/HTTP sink: reads each request whole and answers 200 with an empty body.
fn sink(port: u16) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .expect("bind the sink");
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        |req: hyper::Request<hyper::body::Incoming>| async move {
                            use http_body_util::BodyExt;
                            let _ = req.into_body().collect().await;
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(hyper::body::Bytes::new()),
                            ))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
}

struct Process {
    cpu_per_collection: f64,
    peak_rss_kib: u64,
    pushes: f64,
    page: String,
}

fn process(dir: &Path, profile: &Path, csv: &Path, otlp: Option<u16>) -> Result<Process, String> {
    let port = free_port()?;
    let mut cmd = exporter(dir, profile, csv, port, 1000);
    cmd.arg("--dcgm-library").arg(dir.join("libdcgm.so.4"));
    if let Some(p) = otlp {
        cmd.args(["--otlp-endpoint", &format!("http://127.0.0.1:{p}")]);
    }
    let child = Killed(cmd.spawn().map_err(|e| format!("dcgm-exporter: {e}"))?);
    let pid = child.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let t0 = Instant::now();
    while !get(&url).is_ok_and(|p| p.contains("DCGM_FI_")) {
        if t0.elapsed() > Duration::from_secs(60) {
            return Err("no page within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let key = "dcgm_exporter_collections_total{result=\"success\"}";
    let seconds: u64 = crate::number("--seconds", "20")?;
    let (c0, cpu0) = (self_metric(&get(&url)?, key), cpu_seconds(pid)?);
    std::thread::sleep(Duration::from_secs(seconds));
    let (cpu1, page) = (cpu_seconds(pid)?, get(&url)?);
    let collections = self_metric(&page, key) - c0;
    Ok(Process {
        cpu_per_collection: (cpu1 - cpu0) / collections.max(1.0),
        peak_rss_kib: rss_kib(pid)?,
        pushes: self_metric(&page, "dcgm_exporter_otlp_pushes_total{result=\"sent\"}"),
        page,
    })
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let iterations: usize = crate::number("--iterations", "200")?;
    let plain = process(dir, &profile, &csv, None)?;
    let sink_port = free_port()?;
    sink(sink_port);
    let pushed = process(dir, &profile, &csv, Some(sink_port))?;
    let page = page_from_text(&plain.page);
    println!(
        "profile {}, counters {}: {} series",
        profile.display(),
        csv.display(),
        page.series_count()
    );
    let (render_cpu, render_wall) = per_call(iterations, || {
        std::hint::black_box(Exposition::render(&page, false));
    });
    let mut converter = PageConverter::new(Naming::Dcgm, &[], 1);
    let mut bytes = 0;
    let (push_cpu, push_wall) = per_call(iterations, || {
        let req = converter.request(&page, 2);
        bytes = prost::Message::encoded_len(&req);
        std::hint::black_box(prost::Message::encode_to_vec(&req));
    });
    println!("OTLP request         {bytes} bytes");
    println!(
        "render the page      {:.3} ms CPU ({:.3} ms wall) per collection",
        render_cpu * 1e3,
        render_wall * 1e3
    );
    println!(
        "OTLP convert+encode  {:.3} ms CPU ({:.3} ms wall) per collection",
        push_cpu * 1e3,
        push_wall * 1e3
    );
    println!(
        "  push / render, collection thread      {:.3}",
        push_wall / render_wall
    );
    println!(
        "process CPU per collection, idle      {:.5} s without, {:.5} s with the push ({} pushes sent)",
        plain.cpu_per_collection, pushed.cpu_per_collection, pushed.pushes
    );
    println!(
        "peak RSS                              {:.1} MiB without, {:.1} MiB with the push",
        plain.peak_rss_kib as f64 / 1024.0,
        pushed.peak_rss_kib as f64 / 1024.0
    );
    Ok(())
}
