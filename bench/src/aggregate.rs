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
//! `cargo run --release -p bench -- aggregate [--build debug] [--profile etc/sim/h100-8gpu-nvswitch.toml]
//! [--collectors etc/default-counters.csv] [--interval-ms 1000] [--period 100ms]
//! [--collections 60] [--rounds 2] [--real DIR --gpus 8]`

use crate::{arg, cpu_us_per_collection, exporter, free_port, get, real_kit, Killed};
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

/// The fields issue 47's target names.
const FIELDS: &str = "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK";

/// One run: CPU µs per collection and the page's DCGM series.
fn measure(
    dir: &Path,
    profile: &Path,
    csv: &Path,
    nvml: bool,
    on: bool,
) -> Result<(f64, usize), String> {
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
        cmd.args(["--aggregate", FIELDS, "--aggregate-period"])
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
    let cpu_us = cpu_us_per_collection(&url, child.0.id(), interval_ms, n)?;
    let page = get(&url)?;
    let series = page.lines().filter(|l| l.starts_with("DCGM_")).count();
    if on && !page.contains("DCGM_FI_DEV_POWER_USAGE_interval_max{") {
        return Err("no aggregate on the page".into());
    }
    Ok((cpu_us, series))
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/h100-8gpu-nvswitch.toml"));
    let csv = root.join(arg("--collectors", "etc/default-counters.csv"));
    let rounds: usize = crate::number("--rounds", "2")?;
    println!(
        "aggregate: {} with {}, every {} ms, {FIELDS} at {}",
        profile.display(),
        csv.display(),
        arg("--interval-ms", "1000"),
        arg("--period", "100ms")
    );
    println!(
        "{:<6} {:>4} {:>9} {:>9} {:>16}",
        "source", "agg", "series", "round", "CPU/collection"
    );
    let real = std::env::args().any(|a| a == "--real");
    let sources: &[(&str, bool)] = if real {
        &[("dcgm", false)]
    } else {
        &[("dcgm", false), ("nvml", true)]
    };
    for &(name, nvml) in sources {
        let mut sums = [0.0f64; 2];
        for round in 0..rounds {
            for (i, on) in [false, true].into_iter().enumerate() {
                let (cpu_us, series) = measure(dir, &profile, &csv, nvml, on)?;
                sums[i] += cpu_us;
                let agg = if on { "on" } else { "off" };
                println!("{name:<6} {agg:>4} {series:>9} {round:>9} {cpu_us:>13.0} µs");
            }
        }
        let (off, on) = (sums[0] / rounds as f64, sums[1] / rounds as f64);
        println!(
            "{name}: {off:.0} µs off, {on:.0} µs on: CPU per collection with / without {:.3} (target <= 1.10)",
            on / off
        );
    }
    Ok(())
}
