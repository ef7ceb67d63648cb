//! `serving`: the serving path of one or more builds against a static server, in one run.
//!
//! Every build's exporter runs at once on the same node (`--profile`, one collection a
//! second). For each build and encoding (gzip off, on) a static server (`throughput.rs`)
//! answers with the bytes and headers that build sent. Then, `--rounds` times, every
//! (build, encoding) pair is measured at 64 keep-alive connections for `--phase-seconds`,
//! ours and its static server one right after the other (which goes first alternates by
//! round, the builds' order rotates): the ratio of one round compares two servers under the
//! same load, and the rounds show how much that load (other builds on a shared machine)
//! moves it.
//!
//! `cargo run --release -p bench -- serving --builds before=DIR,after=DIR [--rounds 3]
//! [--phase-seconds 3] [--profile etc/sim/large-bench.toml]
//! [--collectors bench/bench-counters.csv]`
//!
//! Without `--builds`, the workspace's release build is made and measured alone.

use crate::scale::{self, Build};
use crate::{arg, throughput};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// One (build, encoding) pair: its exporter, its static server, what each round measured.
struct Pair {
    build: usize,
    gzip: bool,
    bytes: usize,
    ours: SocketAddr,
    fixed: SocketAddr,
    /// (ours, static) per round.
    rounds: Vec<(throughput::Load, throughput::Load)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(root: &Path, default_build: Option<&Path>) -> Result<(), String> {
    let builds: Vec<Build> = scale::builds(root, default_build)?;
    let rounds: usize = arg("--rounds", "3")
        .parse()
        .map_err(|_| "--rounds: not a number")?;
    let phase = Duration::from_secs_f64(
        arg("--phase-seconds", "3")
            .parse()
            .map_err(|_| "--phase-seconds: not a number")?,
    );
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let running = builds
        .iter()
        .map(|b| scale::start(b, &profile, &csv, 1000, "serving"))
        .collect::<Result<Vec<_>, String>>()?;
    let mut pairs = Vec::new();
    for (i, r) in running.iter().enumerate() {
        let ours: SocketAddr = ([127, 0, 0, 1], r.port).into();
        for gzip in [false, true] {
            let (headers, body) = throughput::fetch(ours, "/metrics", gzip)?;
            let bytes = body.len();
            let fixed = throughput::static_server(headers, body)?;
            pairs.push(Pair {
                build: i,
                gzip,
                bytes,
                ours,
                fixed,
                rounds: Vec::new(),
            });
        }
    }
    println!(
        "serving: {} at 64 keep-alive connections, {:.1} s per phase, {rounds} rounds, {} cores",
        profile.display(),
        phase.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for round in 0..rounds {
        let n = pairs.len();
        for k in 0..n {
            // Rotate by two (one build's pair of encodings) per round.
            let p = &mut pairs[(k + 2 * round) % n];
            let (ours, fixed) = if round % 2 == 0 {
                let o = throughput::rate(p.ours, "/metrics", p.gzip, phase);
                (o, throughput::rate(p.fixed, "/metrics", p.gzip, phase))
            } else {
                let f = throughput::rate(p.fixed, "/metrics", p.gzip, phase);
                (throughput::rate(p.ours, "/metrics", p.gzip, phase), f)
            };
            p.rounds.push((ours, fixed));
        }
    }
    report(&builds, &pairs);
    Ok(())
}

fn report(builds: &[Build], pairs: &[Pair]) {
    println!(
        "{:<10} {:<5} {:>8}  {:>26}  {:>8}  per round (ours/static req/s)",
        "build", "gzip", "bytes", "req/s ours / static (median)", "ratio"
    );
    for p in pairs {
        let ratios: Vec<f64> = p
            .rounds
            .iter()
            .map(|(o, f)| o.per_second / f.per_second.max(1e-9))
            .collect();
        let ours = median(p.rounds.iter().map(|(o, _)| o.per_second).collect());
        let fixed = median(p.rounds.iter().map(|(_, f)| f.per_second).collect());
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "{:<10} {:<5} {:>8}  {:>12.0} / {:>11.0}  {:>8.3}  {}",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            p.bytes,
            ours,
            fixed,
            median(ratios.clone()),
            each.join(" ")
        );
    }
    println!("p99 latency ours / static, median of the rounds:");
    for p in pairs {
        let p99: Vec<f64> = p
            .rounds
            .iter()
            .map(|(o, f)| o.p99 / f.p99.max(1e-9))
            .collect();
        println!(
            "  {:<10} gzip {:<3} {:.3}",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            median(p99)
        );
    }
}
