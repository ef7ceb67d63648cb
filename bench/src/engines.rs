//! `engines`: the cost of each extra host engine (issue 32). For 1, 2 and 3 simulated
//! `nv-hostengine`s of the same profile (`dcgm-sim-hostengine`, each a process of its own,
//! not counted), one exporter with `-r a,b,c`: its CPU per published collection (no
//! scrapes during the measurement), its RSS and peak RSS, and the series served. One engine
//! is the one-engine exporter (no combiner, no `engine` label).
//!
//! `cargo run --release -p bench -- engines [--build debug] [--profile etc/sim/h100-8gpu-nvswitch.toml]
//! [--collectors etc/default-counters.csv] [--interval-ms 100] [--collections 100]`

use crate::scale::status_kib;
use crate::{arg, cpu_us_per_collection, free_port, get, Killed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Figures {
    cpu_us: f64,
    rss_kib: u64,
    hwm_kib: u64,
    series: usize,
}

/// Starts a simulated host engine on a free port; it has printed its listening line.
fn engine(dir: &Path, profile: &Path) -> Result<(Killed, u16), String> {
    let port = free_port()?;
    Ok((crate::faults::start_engine(dir, port, profile)?, port))
}

fn measure(dir: &Path, profile: &Path, csv: &Path, engines: usize) -> Result<Figures, String> {
    let interval_ms: u64 = crate::number("--interval-ms", "100")?;
    let n: u64 = crate::number("--collections", "100")?;
    let mut running = Vec::new();
    let mut addresses = Vec::new();
    for _ in 0..engines {
        let (child, port) = engine(dir, profile)?;
        running.push(child);
        addresses.push(format!("127.0.0.1:{port}"));
    }
    let port = free_port()?;
    let child = Command::new(dir.join("dcgm-exporter"))
        .args(["-f", csv.to_str().ok_or("path")?])
        .args(["-a", &format!("127.0.0.1:{port}")])
        .args(["-c", &interval_ms.to_string()])
        .args(["-r", &addresses.join(",")])
        .args(["--backend", "dcgm", "--dcgm-library"])
        .arg(dir.join("libdcgm.so.4"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("dcgm-exporter: {e}"))?;
    let child = Killed(child);
    let pid = child.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let t0 = Instant::now();
    let temps = |p: &str| {
        p.lines()
            .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
            .count()
    };
    let first = get(&url).map(|p| temps(&p)).unwrap_or(0);
    let mut per_engine = first;
    while per_engine == 0 || get(&url).map(|p| temps(&p)).unwrap_or(0) < per_engine * engines {
        if t0.elapsed() > Duration::from_secs(120) {
            return Err(format!("no page of {engines} engines within 120 s"));
        }
        if per_engine == 0 {
            per_engine = get(&url).map(|p| temps(&p)).unwrap_or(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cpu_us = cpu_us_per_collection(&url, pid, interval_ms, n)?;
    let page = get(&url)?;
    Ok(Figures {
        cpu_us,
        rss_kib: status_kib(pid, "VmRSS:")?,
        hwm_kib: status_kib(pid, "VmHWM:")?,
        series: page.lines().filter(|l| l.starts_with("DCGM_")).count(),
    })
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/h100-8gpu-nvswitch.toml"));
    let csv = root.join(arg("--collectors", "etc/default-counters.csv"));
    println!("engines: {} with {}", profile.display(), csv.display());
    println!(
        "{:<8} {:>7} {:>14} {:>10} {:>10}",
        "engines", "series", "CPU/collection", "RSS MiB", "peak MiB"
    );
    let mut base: Option<Figures> = None;
    for engines in 1..=3 {
        let f = measure(dir, &profile, &csv, engines)?;
        println!(
            "{engines:<8} {:>7} {:>11.0} µs {:>10.1} {:>10.1}",
            f.series,
            f.cpu_us,
            f.rss_kib as f64 / 1024.0,
            f.hwm_kib as f64 / 1024.0,
        );
        if let Some(b) = &base {
            let extra = (engines - 1) as f64;
            println!(
                "         per extra engine: {:+.0} µs CPU/collection, {:+.1} MiB RSS",
                (f.cpu_us - b.cpu_us) / extra,
                (f.rss_kib as f64 - b.rss_kib as f64) / 1024.0 / extra
            );
        } else {
            base = Some(f);
        }
    }
    Ok(())
}
