//! `aggregate`: what sub-interval aggregation costs (issue 47): process CPU per collection
//! (no scrapes) with power, GPU temperature and SM clock aggregated (`--aggregate`, sampled
//! every `--period`) against the same node without, on the simulated 8-GPU node, for the
//! DCGM backend (dcgm-sim embedded: its sampling, as a real embedded engine's, runs in the
//! exporter's process and is counted) and the NVML backend (nvml-sim's sample buffers).
//! Runs alternate off/on `--rounds` times, so that a machine's drift touches both alike.
//! `--real DIR --gpus N` runs the DCGM backend on NVIDIA's real `libdcgm.so.4` (an unpacked
//! DCGM 4.6 kit) embedded over N injected H100s instead: DCGM's own 100 ms sampling is then
//! the real library's.
//!
//! Beside the process's CPU, each is split by thread: `collection` (the worker that calls
//! DCGM or NVML and builds the page; dcgm-sim samples lazily, inside those calls),
//! `publishing` (the loop that renders and compresses the page each collection), and
//! `engine+other` (the rest: a real libdcgm's own sampling threads, the HTTP runtime), so
//! that what the engine's faster sampling costs is told apart from the exporter's share.
//!
//! `cargo run --release -p bench -- aggregate [--build debug] [--profile etc/sim/h100-8gpu-nvswitch.toml]
//! [--collectors etc/default-counters.csv] [--interval-ms 1000] [--period 100ms]
//! [--collections 60] [--rounds 2] [--real DIR --gpus 8] [--fields F1,F2]`
//!
//! `--fields` aggregates other fields than the target's three: one field against three
//! tells what each field's samples cost from what the faster period costs by itself.

use crate::{arg, exporter, free_port, get, real_kit, Killed};
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

/// The fields issue 47's target names (`--fields` for others).
const FIELDS: &str = "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK";

/// The thread groups CPU is split into (see the module's doc).
const GROUPS: [&str; 3] = ["collection", "publishing", "engine+other"];

fn group_of(thread: &str) -> usize {
    match thread {
        "dcgm" | "nvml" => 0,
        "collector" => 1,
        _ => 2,
    }
}

/// CPU ns so far of each thread group of process `pid`.
fn cpu_by_group(pid: u32) -> Result<[u64; 3], String> {
    let dir = format!("/proc/{pid}/task");
    let mut ns = [0u64; 3];
    for t in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let Ok(t) = t else { continue };
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        ns[group_of(name.trim())] += crate::scale::schedstat_ns(&t.path());
    }
    Ok(ns)
}

/// CPU µs per collection of each thread group over `n` collections, after five to warm up.
fn cpu_us_by_group(url: &str, pid: u32, interval_ms: u64, n: u64) -> Result<[f64; 3], String> {
    let (cpu0, cpu1, collections) =
        crate::over_collections(url, interval_ms, n, || cpu_by_group(pid))?;
    Ok(std::array::from_fn(|i| {
        cpu1[i].saturating_sub(cpu0[i]) as f64 / 1e3 / collections
    }))
}

/// One run: CPU µs per collection of each thread group, the page's DCGM series and how many
/// fields it aggregates (NVML keeps no samples of some).
fn measure(
    dir: &Path,
    profile: &Path,
    csv: &Path,
    nvml: bool,
    on: bool,
) -> Result<([f64; 3], usize, usize), String> {
    let interval_ms: u64 = crate::number("--interval-ms", "1000")?;
    let n: u64 = crate::number("--collections", "60")?;
    let port = free_port()?;
    let mut cmd = exporter(dir, profile, csv, port, interval_ms);
    if nvml {
        cmd.args(["--backend", "nvml", "--nvml-library"])
            .arg(dir.join("libnvidia-ml.so.1"));
    } else if let Some(kit) = std::env::args()
        .any(|a| a == "--real")
        .then(|| arg("--real", ""))
    {
        let gpus: usize = crate::number("--gpus", "8")?;
        let yaml = std::env::temp_dir().join(format!("bench-agg-{}.yaml", std::process::id()));
        let (library, env) = real_kit(&PathBuf::from(kit), gpus, &yaml)?;
        cmd.args(["--backend", "dcgm", "--dcgm-library"])
            .arg(library)
            .envs(env);
    } else {
        cmd.args(["--backend", "dcgm", "--dcgm-library"])
            .arg(dir.join("libdcgm.so.4"));
    }
    if on {
        cmd.args([
            "--aggregate",
            &arg("--fields", FIELDS),
            "--aggregate-period",
        ])
        .arg(arg("--period", "100ms"));
    }
    let child = Killed(cmd.spawn().map_err(|e| format!("dcgm-exporter: {e}"))?);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let t0 = Instant::now();
    while !get(&url).is_ok_and(|p| p.contains("DCGM_FI_DEV_GPU_TEMP{")) {
        if t0.elapsed() > Duration::from_secs(120) {
            return Err("no page within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cpu_us = cpu_us_by_group(&url, child.0.id(), interval_ms, n)?;
    let page = get(&url)?;
    let series = page.lines().filter(|l| l.starts_with("DCGM_")).count();
    if on && !page.contains("_interval_max{") {
        return Err("no aggregate on the page".into());
    }
    let fields = page
        .lines()
        .filter(|l| l.starts_with("# TYPE ") && l.ends_with("_interval_max gauge"))
        .count();
    Ok((cpu_us, series, fields))
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/h100-8gpu-nvswitch.toml"));
    let csv = root.join(arg("--collectors", "etc/default-counters.csv"));
    let rounds: usize = crate::number("--rounds", "2")?;
    println!(
        "aggregate: {} with {}, every {} ms, {} at {}",
        profile.display(),
        csv.display(),
        arg("--interval-ms", "1000"),
        arg("--fields", FIELDS),
        arg("--period", "100ms")
    );
    println!(
        "{:<6} {:>4} {:>7} {:>6} {:>12} {:>12} {:>14} {:>12}",
        "source", "agg", "series", "round", "collection", "publishing", "engine+other", "process"
    );
    let real = std::env::args().any(|a| a == "--real");
    let sources: &[(&str, bool)] = if real {
        &[("dcgm", false)]
    } else {
        &[("dcgm", false), ("nvml", true)]
    };
    for &(name, nvml) in sources {
        let mut sums = [[0.0f64; 3]; 2];
        let mut fields = 0;
        for round in 0..rounds {
            for (i, on) in [false, true].into_iter().enumerate() {
                let (cpu_us, series, aggregated) = measure(dir, &profile, &csv, nvml, on)?;
                fields = fields.max(aggregated);
                for (sum, us) in sums[i].iter_mut().zip(cpu_us) {
                    *sum += us;
                }
                let agg = if on { "on" } else { "off" };
                let total: f64 = cpu_us.iter().sum();
                println!(
                    "{name:<6} {agg:>4} {series:>7} {round:>6} {:>9.0} µs {:>9.0} µs {:>11.0} µs {:>9.0} µs",
                    cpu_us[0], cpu_us[1], cpu_us[2], total
                );
            }
        }
        let per = |i: usize, g: usize| sums[i][g] / rounds as f64;
        for (g, group) in GROUPS.iter().enumerate() {
            println!(
                "{name}: {group:<12} {:>7.0} µs off, {:>7.0} µs on: with / without {:.3}",
                per(0, g),
                per(1, g),
                per(1, g) / per(0, g).max(1.0)
            );
        }
        let (off, on): (f64, f64) = (sums[0].iter().sum(), sums[1].iter().sum());
        let fields = fields.max(1) as f64;
        println!(
            "{name}: process {:.0} µs off, {:.0} µs on: CPU per collection with / without {:.3} (target <= 1.10); per aggregated field ({fields}) {:.0} µs ({:+.1} %)",
            off / rounds as f64,
            on / rounds as f64,
            on / off,
            (on - off) / rounds as f64 / fields,
            (on / off - 1.0) * 100.0 / fields
        );
    }
    Ok(())
}
