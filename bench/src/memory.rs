//! `memory`: RSS over time in embedded mode, today's default retention against the old one.
//!
//! Starts two exporters side by side on the same DCGM library and node: one with the default
//! settings (each field keeps what the exporter reads of it) and one with
//! `--watch-max-keep-age 600s` (upstream's retention for every field, our default before).
//! Samples each one's resident set (VmRSS) every `--every` seconds for `--minutes`, then
//! prints the curve and, for each, RSS at 1 minute against RSS at the end: the growth a
//! retention costs is what the second column gains and the first does not.
//!
//! `cargo run -p bench -- memory [--build debug] [--minutes 10] [--every 20]
//! [--profile etc/sim/large-bench.toml] [--collectors bench/bench-counters.csv]
//! [--interval-ms 1000] [--real DIR --gpus 8]`

use crate::scale::status_kib;
use crate::{arg, free_port, get, Killed};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn run(root: &Path, bin: &Path) -> Result<(), String> {
    let minutes: f64 = crate::number("--minutes", "10")?;
    let every: u64 = crate::number("--every", "20")?;
    let interval_ms = arg("--interval-ms", "1000");
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let real = std::env::args().any(|a| a == "--real");
    let mut env: Vec<(String, String)> = Vec::new();
    let (library, what) = if real {
        let kit = PathBuf::from(arg("--real", ""));
        let gpus: usize = crate::number("--gpus", "8")?;
        let yaml = std::env::temp_dir().join(format!("bench-mem-{}.yaml", std::process::id()));
        let (library, kit_env) = crate::real_kit(&kit, gpus, &yaml)?;
        env.extend(kit_env);
        (
            library,
            format!("real DCGM embedded, {gpus} injected H100s"),
        )
    } else {
        env.push(("DCGM_SIM_PROFILE".into(), profile.display().to_string()));
        (
            bin.join("libdcgm.so.4"),
            format!("simulator embedded, {}", profile.display()),
        )
    };
    if !library.exists() {
        return Err(format!("{} does not exist", library.display()));
    }
    let variants: [(&str, &[&str]); 2] = [
        ("default", &[]),
        ("keep-age 600s", &["--watch-max-keep-age", "600s"]),
    ];
    let mut children = Vec::new();
    for (name, extra) in variants {
        let port = free_port()?;
        let child = Command::new(bin.join("dcgm-exporter"))
            .args(["-f", csv.to_str().ok_or("path")?])
            .args(["-a", &format!("127.0.0.1:{port}"), "-c", &interval_ms])
            .args(["--dcgm-library", library.to_str().ok_or("path")?])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start exporter ({name}): {e}"))?;
        children.push((
            name,
            Killed(child),
            format!("http://127.0.0.1:{port}/metrics"),
        ));
    }
    // Time zero: both serve metrics.
    let t0 = Instant::now();
    for (name, _, url) in &children {
        while !get(url).is_ok_and(|b| b.contains("DCGM_FI_")) {
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(format!("{name}: no metrics within 120 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let start = Instant::now();
    println!(
        "memory over time: {what}, {}, -c {interval_ms}",
        csv.display()
    );
    println!("{:>6}  {:>14}  {:>14}", "s", children[0].0, children[1].0);
    let end = Duration::from_secs_f64(minutes * 60.0);
    let mut curve: Vec<(u64, Vec<u64>)> = Vec::new();
    loop {
        let at = start.elapsed().as_secs();
        let rss = children
            .iter()
            .map(|(_, c, _)| status_kib(c.0.id(), "VmRSS:"))
            .collect::<Result<Vec<u64>, String>>()?;
        println!(
            "{at:>6}  {:>10.1} MiB  {:>10.1} MiB",
            rss[0] as f64 / 1024.0,
            rss[1] as f64 / 1024.0
        );
        curve.push((at, rss));
        if start.elapsed() >= end {
            break;
        }
        let next = Duration::from_secs(at + every).min(end);
        std::thread::sleep(next.saturating_sub(start.elapsed()));
    }
    // Still collecting at the end (not stuck or dead): one more page each.
    for (name, _, url) in &children {
        get(url).map_err(|e| format!("{name}: {e}"))?;
    }
    let at_1min = curve
        .iter()
        .find(|(s, _)| *s >= 60)
        .unwrap_or(&curve[0])
        .clone();
    let last = curve.last().ok_or("no sample")?.clone();
    for (i, (name, _, _)) in children.iter().enumerate() {
        let a = at_1min.1[i] as f64 / 1024.0;
        let b = last.1[i] as f64 / 1024.0;
        println!(
            "{name:>14}: RSS {a:.1} MiB at {} s, {b:.1} MiB at {} s: end / 1 min {:.3}",
            at_1min.0,
            last.0,
            b / a
        );
    }
    Ok(())
}
