//! `backend`: the NVML backend beside DCGM's on the same simulated node (issue 31): CPU per
//! collection (no scrapes), start to first page, and RSS, for `--backend dcgm` (dcgm-sim
//! embedded) and `--backend nvml` (nvml-sim; libdcgm never loaded, which is checked in
//! /proc/<pid>/maps). Both simulators run in the exporter's process, as the real libraries
//! would: their memory is counted.
//!
//! `cargo run --release -p bench -- backend [--build debug] [--profile etc/sim/h100-8gpu-nvswitch.toml]
//! [--collectors etc/default-counters.csv] [--interval-ms 100] [--collections 100]`

use crate::scale::status_kib;
use crate::{arg, cpu_us_per_collection, exporter, free_port, get, Killed};
use std::path::Path;

use std::time::{Duration, Instant};

struct Figures {
    first_page: Duration,
    cpu_us: f64,
    rss_kib: u64,
    hwm_kib: u64,
    series: usize,
    libdcgm_mapped: bool,
}

fn measure(dir: &Path, profile: &Path, csv: &Path, nvml: bool) -> Result<Figures, String> {
    let interval_ms: u64 = crate::number("--interval-ms", "100")?;
    let n: u64 = crate::number("--collections", "100")?;
    let port = free_port()?;
    let mut cmd = exporter(dir, profile, csv, port, interval_ms);
    if nvml {
        cmd.args(["--backend", "nvml", "--nvml-library"])
            .arg(dir.join("libnvidia-ml.so.1"));
    } else {
        cmd.args(["--backend", "dcgm", "--dcgm-library"])
            .arg(dir.join("libdcgm.so.4"));
    }
    let t0 = Instant::now();
    let child = Killed(cmd.spawn().map_err(|e| format!("dcgm-exporter: {e}"))?);
    let pid = child.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let first_page = loop {
        if get(&url).is_ok_and(|p| p.contains("DCGM_FI_DEV_GPU_TEMP{")) {
            break t0.elapsed();
        }
        if t0.elapsed() > Duration::from_secs(120) {
            return Err("no page within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let cpu_us = cpu_us_per_collection(&url, pid, interval_ms, n)?;
    let page = get(&url)?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    Ok(Figures {
        first_page,
        cpu_us,
        rss_kib: status_kib(pid, "VmRSS:")?,
        hwm_kib: status_kib(pid, "VmHWM:")?,
        series: page.lines().filter(|l| l.starts_with("DCGM_")).count(),
        libdcgm_mapped: maps.contains("libdcgm"),
    })
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/h100-8gpu-nvswitch.toml"));
    let csv = root.join(arg("--collectors", "etc/default-counters.csv"));
    println!("backend: {} with {}", profile.display(), csv.display());
    println!(
        "{:<6} {:>7} {:>14} {:>12} {:>10} {:>10} {:>8}",
        "source", "series", "CPU/collection", "first page", "RSS MiB", "peak MiB", "libdcgm"
    );
    let mut nvml_hwm = 0;
    for (name, nvml) in [("dcgm", false), ("nvml", true)] {
        let f = measure(dir, &profile, &csv, nvml)?;
        println!(
            "{name:<6} {:>7} {:>11.0} µs {:>9.1} ms {:>10.1} {:>10.1} {:>8}",
            f.series,
            f.cpu_us,
            f.first_page.as_secs_f64() * 1e3,
            f.rss_kib as f64 / 1024.0,
            f.hwm_kib as f64 / 1024.0,
            if f.libdcgm_mapped { "mapped" } else { "absent" }
        );
        if nvml {
            nvml_hwm = f.hwm_kib;
        }
    }
    println!(
        "NVML backend peak RSS / 10 MiB target   {:.3}",
        nvml_hwm as f64 / 1024.0 / 10.0
    );
    Ok(())
}
