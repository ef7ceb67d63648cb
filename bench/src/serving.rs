//! `serving`: the serving path of one or more builds against a static server, in one run.
//!
//! Every build's exporter runs at once on the same node (`--profile`, one collection a
//! second). For each build and encoding (gzip off, on) a static server (`throughput.rs`)
//! answers with the bytes and headers that build sent once its page has settled
//! ([`SETTLED`]; the report shows the mean body each server sent). Then, `--rounds` times, every
//! (build, encoding) pair is measured at 64 keep-alive connections for `--phase-seconds`,
//! ours and its static server one right after the other (which goes first alternates by
//! round, the builds' order rotates): the ratio of one round compares two servers under the
//! same load, and the rounds show how much that load (other builds on a shared machine)
//! moves it. Each static server runs twice: as threads of this process, beside the
//! clients, and as a process of its own (`static-serve`), across the same process boundary
//! as the exporter; the report compares ours with each. Next to requests per second, each server's CPU time per request (the
//! exporter's process, the static server's threads or process): on a loaded machine
//! it moves far less than the rates do. Per request also: syscalls and context switches
//! (`perf stat`, where perf runs; more events with `BENCH_PERF_EVENTS=ev1,ev2`) and the CPU
//! time split into user and system (`/proc/.../stat`), which tell where a gap lies.
//!
//! Before the rounds, every server gets one phase of the same load unmeasured: by hand
//! here, the first phase after the idle start-up ran 18-30 % below the phases after it.
//! Each ratio is reported three ways: the median of the rounds' ratios, the ratio of the
//! rates summed over the rounds ("pooled", which weighs a slow round as the clients saw it),
//! and a 95 % interval for the pooled ratio from resampling the rounds: a ratio whose
//! interval holds 1.0 is one this run cannot tell from 1.0.
//!
//! `cargo run --release -p bench -- serving --builds before=DIR,after=DIR [--rounds 3]
//! [--phase-seconds 3] [--gzip off|on|both] [--profile etc/sim/large-bench.toml]
//! [--collectors bench/bench-counters.csv] [--pin CPUS]`
//!
//! Without `--builds`, the workspace's release build is made and measured alone. `--pin`
//! keeps the servers on CPUS and the clients on the others (`pin.rs`).

use crate::pin::Pinning;
use crate::scale::{self, Build};
use crate::{arg, perfcount, throughput};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// One (build, encoding) pair: its exporter, its static server, what each round measured.
struct Pair {
    build: usize,
    gzip: bool,
    ours: SocketAddr,
    pid: u32,
    fixed: SocketAddr,
    /// The same static server in a process of its own.
    apart: SocketAddr,
    apart_pid: u32,
    /// (ours, static, static in its own process) per round.
    rounds: Vec<(Measured, Measured, Measured)>,
}

/// One phase: what the clients saw and the server's CPU time, syscalls and context
/// switches per request.
struct Measured {
    load: throughput::Load,
    cpu_us: f64,
    /// `None` where perf could not count.
    per_request: Option<perfcount::Counts>,
    /// User and system CPU µs per request (clock ticks).
    user_us: f64,
    sys_us: f64,
}

/// `rate` with the CPU time `cpu` says the server spent meanwhile, and what perf counted
/// of `target`, per request.
fn measure(
    addr: SocketAddr,
    gzip: bool,
    phase: Duration,
    cpu: impl Fn() -> f64,
    target: &perfcount::Target,
) -> Measured {
    let counting = perfcount::start(target);
    let (c0, (u0, s0)) = (cpu(), perfcount::user_sys_s(target));
    let load = throughput::rate(addr, "/metrics", gzip, phase);
    let spent = cpu() - c0;
    let (u1, s1) = perfcount::user_sys_s(target);
    let counted = counting.stop();
    let requests = (load.per_second * phase.as_secs_f64()).max(1.0);
    Measured {
        cpu_us: spent * 1e6 / requests,
        user_us: (u1 - u0) * 1e6 / requests,
        sys_us: (s1 - s0) * 1e6 / requests,
        per_request: counted.map(|c| perfcount::Counts {
            syscalls: c.syscalls / requests,
            switches: c.switches / requests,
            extra: c
                .extra
                .into_iter()
                .map(|(e, v)| (e, v / requests))
                .collect(),
        }),
        load,
    }
}

/// Collections an exporter has made before its page is copied for the static server. The
/// first pages compress far better than later ones (the simulated values have not varied
/// yet): on `large-bench.toml` the first gzip'd page is 11.3 kB, from the second on
/// 19.3-19.7 kB. Copied at once, the static server sent 40 % less per gzip'd request than
/// the exporter it was compared with.
const SETTLED: f64 = 5.0;

/// Waits until every exporter has made [`SETTLED`] collections (60 s at most).
fn settle(running: &[scale::Running]) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for r in running {
        while r.collections()? < SETTLED {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "the exporter on port {} made fewer than {SETTLED} collections in 60 s",
                    r.port
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// `stat` of every round, and the 2.5th and 97.5th percentiles of `stat` over 2000
/// resamplings of the `n` rounds (indices drawn with replacement: a round's measurements
/// stay together). A fixed seed: the same rounds give the same interval.
fn resampled(n: usize, stat: impl Fn(&mut dyn Iterator<Item = usize>) -> f64) -> (f64, f64, f64) {
    let whole = stat(&mut (0..n));
    if n < 2 {
        return (whole, f64::NAN, f64::NAN);
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        // xorshift64*: enough to draw indices.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    };
    let mut draws: Vec<f64> = (0..2000)
        .map(|_| {
            let picks: Vec<usize> = (0..n).map(|_| next()).collect();
            stat(&mut picks.into_iter())
        })
        .collect();
    draws.sort_by(f64::total_cmp);
    (whole, draws[50], draws[1949])
}

/// Σ ours / Σ static over the rounds, with [`resampled`]'s interval.
fn pooled(rounds: &[(f64, f64)]) -> (f64, f64, f64) {
    resampled(rounds.len(), |picks| {
        let (o, s) = picks.fold((0.0, 0.0), |(a, b), i| (a + rounds[i].0, b + rounds[i].1));
        o / s.max(1e-9)
    })
}

/// One server's phase: (CPU µs per request, requests per second).
type Spent = (f64, f64);

/// One side's CPU time per request over the rounds `picks`: Σ time / Σ requests (a phase's
/// requests are its rate times the phase length, the same for every phase).
fn per_request(
    rounds: &[(Spent, Spent)],
    picks: impl Iterator<Item = usize>,
    side: fn(&(Spent, Spent)) -> Spent,
) -> f64 {
    let (t, n) = picks
        .map(|i| side(&rounds[i]))
        .fold((0.0, 0.0), |(t, n), (c, r)| (t + c * r, n + r));
    t / n.max(1e-9)
}

/// CPU time per request, pooled ([`per_request`]), of ours over the static server's;
/// `rounds` holds (ours, static) per round.
fn pooled_cpu(rounds: &[(Spent, Spent)]) -> (f64, f64, f64) {
    resampled(rounds.len(), |picks| {
        let picks: Vec<usize> = picks.collect();
        let ours = per_request(rounds, picks.iter().copied(), |x| x.0);
        let theirs = per_request(rounds, picks.iter().copied(), |x| x.1);
        ours / theirs.max(1e-9)
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(root: &Path, default_build: Option<&Path>) -> Result<(), String> {
    let builds: Vec<Build> = scale::builds(root, default_build)?;
    let rounds: usize = crate::number("--rounds", "3")?;
    let phase = Duration::from_secs_f64(crate::number("--phase-seconds", "3")?);
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let encodings: &[bool] = match arg("--gzip", "both").as_str() {
        "both" => &[false, true],
        "off" => &[false],
        "on" => &[true],
        other => return Err(format!("--gzip {other:?}: off, on or both")),
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let pin = match arg("--pin", "").as_str() {
        "" => None,
        cpus => Some(Pinning::new(cpus)?),
    };
    let running = builds
        .iter()
        .map(|b| scale::start(b, &profile, &csv, 1000, "serving"))
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(pin) = &pin {
        running
            .iter()
            .try_for_each(|r| pin.server_process(r.pid()))?;
    }
    settle(&running)?;
    let mut pairs = Vec::new();
    let mut apart_servers = Vec::new();
    for (i, r) in running.iter().enumerate() {
        let ours: SocketAddr = ([127, 0, 0, 1], r.port).into();
        for &gzip in encodings {
            let (headers, body) = throughput::fetch(ours, "/metrics", gzip)?;
            let (apart, server) = throughput::static_process(headers.clone(), body.clone())?;
            let apart_pid = server.0.id();
            apart_servers.push(server);
            let fixed = throughput::static_server(headers, body)?;
            if let Some(pin) = &pin {
                pin.server_process(apart_pid)?;
            }
            pairs.push(Pair {
                build: i,
                gzip,
                ours,
                pid: r.pid(),
                fixed,
                apart,
                apart_pid,
                rounds: Vec::new(),
            });
        }
    }
    if let Some(pin) = &pin {
        pin.server_threads(&perfcount::threads_named(throughput::STATIC_THREADS))?;
        pin.clients()?;
    }
    println!(
        "serving: {} at 64 keep-alive connections, {:.1} s per phase, {rounds} rounds, {} cores{}",
        profile.display(),
        phase.as_secs_f64(),
        cores,
        match &pin {
            Some(p) => format!(", servers on CPUs {}, clients on {}", p.server, p.clients),
            None => ", unpinned".into(),
        }
    );
    // One phase each, unmeasured (see the module's doc).
    for p in &pairs {
        for addr in [p.ours, p.fixed, p.apart] {
            throughput::rate(addr, "/metrics", p.gzip, phase);
        }
    }
    for round in 0..rounds {
        let n = pairs.len();
        for k in 0..n {
            // Rotate by one build's pairs of encodings per round.
            let p = &mut pairs[(k + encodings.len() * round) % n];
            let pid = p.pid;
            let ours_cpu = move || scale::cpu_s(pid).unwrap_or(f64::NAN);
            let ours_t = perfcount::Target::Process(pid);
            let fixed_t =
                perfcount::Target::Threads(perfcount::threads_named(throughput::STATIC_THREADS));
            let apart_pid = p.apart_pid;
            let apart_cpu = move || scale::cpu_s(apart_pid).unwrap_or(f64::NAN);
            let apart_t = perfcount::Target::Process(apart_pid);
            let o = || measure(p.ours, p.gzip, phase, ours_cpu, &ours_t);
            let f = || measure(p.fixed, p.gzip, phase, throughput::static_cpu_s, &fixed_t);
            let a = || measure(p.apart, p.gzip, phase, apart_cpu, &apart_t);
            let m = if round % 2 == 0 {
                let (o, f) = (o(), f());
                (o, f, a())
            } else {
                let (a, f) = (a(), f());
                (o(), f, a)
            };
            p.rounds.push(m);
        }
    }
    report(&builds, &pairs);
    Ok(())
}

/// Which static server a report compares against.
#[derive(Clone, Copy)]
enum Yardstick {
    /// Threads of this process, beside the clients.
    Threads,
    /// A process of its own, as the exporter is.
    Process,
}

type Versus<'a> = (&'a Measured, &'a Measured);

fn versus(r: &(Measured, Measured, Measured), y: Yardstick) -> Versus<'_> {
    match y {
        Yardstick::Threads => (&r.0, &r.1),
        Yardstick::Process => (&r.0, &r.2),
    }
}

fn report(builds: &[Build], pairs: &[Pair]) {
    for (y, what) in [
        (
            Yardstick::Threads,
            "the static server's threads in the bench's (the clients') process",
        ),
        (
            Yardstick::Process,
            "the static server in a process of its own, as the exporter is",
        ),
    ] {
        println!("against {what}:");
        report_versus(builds, pairs, y);
    }
}

fn report_versus(builds: &[Build], pairs: &[Pair], y: Yardstick) {
    println!(
        "{:<8} {:<4} {:>17}  {:>22}  {:>6}  {:<30}  {:>17}  {:>6}",
        "build",
        "gzip",
        "body B o / s",
        "req/s ours / static",
        "ratio",
        "ratio per round",
        "CPU µs/req o / s",
        "ratio"
    );
    for p in pairs {
        let per_round = |f: &dyn Fn(&Versus) -> f64| -> Vec<f64> {
            p.rounds.iter().map(|r| f(&versus(r, y))).collect()
        };
        let ratios = per_round(&|(o, f)| o.load.per_second / f.load.per_second.max(1e-9));
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        let cpu_ratio = median(per_round(&|(o, f)| o.cpu_us / f.cpu_us.max(1e-9)));
        println!(
            "{:<8} {:<4} {:>8.0} / {:>6.0}  {:>10.0} / {:>9.0}  {:>6.3}  {:<30}  {:>7.1} / {:>7.1}  {:>6.3}",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            median(per_round(&|(o, _)| o.load.body_bytes)),
            median(per_round(&|(_, f)| f.load.body_bytes)),
            median(per_round(&|(o, _)| o.load.per_second)),
            median(per_round(&|(_, f)| f.load.per_second)),
            median(ratios.clone()),
            each.join(" "),
            median(per_round(&|(o, _)| o.cpu_us)),
            median(per_round(&|(_, f)| f.cpu_us)),
            cpu_ratio,
        );
    }
    println!("(medians over the rounds; CPU: the server's own time per request, the exporter's");
    println!(" process with its collections, the static server's; lower is better)");
    println!("pooled over the rounds (summed rates; CPU: summed time over summed requests), 95 % interval from resampling the rounds:");
    for p in pairs {
        let cpu: Vec<(Spent, Spent)> = p
            .rounds
            .iter()
            .map(|r| versus(r, y))
            .map(|(o, f)| ((o.cpu_us, o.load.per_second), (f.cpu_us, f.load.per_second)))
            .collect();
        let rates: Vec<(f64, f64)> = cpu.iter().map(|(o, f)| (o.1, f.1)).collect();
        let (r, r_lo, r_hi) = pooled(&rates);
        let (c, c_lo, c_hi) = pooled_cpu(&cpu);
        let (co, cf) = (
            per_request(&cpu, 0..cpu.len(), |x| x.0),
            per_request(&cpu, 0..cpu.len(), |x| x.1),
        );
        println!(
            "  {:<10} gzip {:<3} req/s ours / static {r:.3} [{r_lo:.3}, {r_hi:.3}]{}   CPU µs/req {co:.1} / {cf:.1} = {c:.3} [{c_lo:.3}, {c_hi:.3}]",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            if r_lo > 1.0 {
                " (above 1.0)"
            } else if r_hi < 1.0 {
                " (below 1.0)"
            } else {
                " (holds 1.0)"
            },
        );
    }
    counts(builds, pairs, y);
    println!("p99 latency ours / static, median of the rounds:");
    for p in pairs {
        let p99: Vec<f64> = p
            .rounds
            .iter()
            .map(|r| versus(r, y))
            .map(|(o, f)| o.load.p99 / f.load.p99.max(1e-9))
            .collect();
        println!(
            "  {:<10} gzip {:<3} {:.3}",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            median(p99)
        );
    }
}

/// Syscalls, context switches (and `BENCH_PERF_EVENTS`), user and system CPU time per
/// request of each server, medians of the rounds.
fn counts(builds: &[Build], pairs: &[Pair], y: Yardstick) {
    println!("per request, median of the rounds (the exporter's process, the static server's;");
    println!(" syscalls and switches: perf stat; user and system time: /proc, 10 ms ticks):");
    println!(
        "{:<8} {:<4}  {:>19}  {:>19}  {:>19}  {:>19}",
        "build", "gzip", "syscalls o / s", "ctx switches o / s", "user µs o / s", "sys µs o / s"
    );
    for p in pairs {
        // Rounds perf could not count are left out.
        let of = |f: &dyn Fn(&Versus) -> Option<f64>| -> String {
            let v: Vec<f64> = p.rounds.iter().filter_map(|r| f(&versus(r, y))).collect();
            match v.is_empty() {
                true => "n/a".into(),
                false => format!("{:.2}", median(v)),
            }
        };
        let count = |m: &Measured, f: fn(&perfcount::Counts) -> f64| m.per_request.as_ref().map(f);
        println!(
            "{:<8} {:<4}  {:>8} / {:>8}  {:>8} / {:>8}  {:>8} / {:>8}  {:>8} / {:>8}",
            builds[p.build].name,
            if p.gzip { "on" } else { "off" },
            of(&|(o, _)| count(o, |c| c.syscalls)),
            of(&|(_, f)| count(f, |c| c.syscalls)),
            of(&|(o, _)| count(o, |c| c.switches)),
            of(&|(_, f)| count(f, |c| c.switches)),
            of(&|(o, _)| Some(o.user_us)),
            of(&|(_, f)| Some(f.user_us)),
            of(&|(o, _)| Some(o.sys_us)),
            of(&|(_, f)| Some(f.sys_us)),
        );
        for (i, event) in perfcount::extra_events().iter().enumerate() {
            let extra = |m: &Measured| {
                let c = m.per_request.as_ref()?;
                c.extra.get(i).map(|(_, v)| *v)
            };
            println!(
                "  {event:<40} {:>8} / {:>8}",
                of(&|(o, _)| extra(o)),
                of(&|(_, f)| extra(f))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pooled_ratio_weighs_rounds_by_their_rates_and_its_interval_holds_it() {
        // A slow round (both servers at half speed) counts half as much as a fast one.
        let rounds = [(100.0, 100.0), (50.0, 40.0), (100.0, 100.0), (100.0, 100.0)];
        let (r, lo, hi) = pooled(&rounds);
        assert!((r - 350.0 / 340.0).abs() < 1e-12);
        assert!(lo <= r && r <= hi, "{lo} {r} {hi}");
        assert!(lo >= 1.0 && hi <= 50.0 / 40.0, "{lo} {hi}");
        // The same rounds, the same interval.
        assert_eq!(pooled(&rounds), (r, lo, hi));
        // Every round equal: no spread.
        let (r, lo, hi) = pooled(&[(2.0, 1.0); 5]);
        assert_eq!((r, lo, hi), (2.0, 2.0, 2.0));
        // One round has no interval.
        assert!(pooled(&[(1.0, 1.0)]).1.is_nan());
        // CPU per request: 2 µs at 100 req/s and 4 µs at 50 against 2 µs throughout is
        // (200 + 200) / 150 µs against 2 µs.
        let cpu = [((2.0, 100.0), (2.0, 100.0)), ((4.0, 50.0), (2.0, 50.0))];
        let (c, lo, hi) = pooled_cpu(&cpu);
        assert!((c - (400.0 / 150.0) / 2.0).abs() < 1e-12, "{c}");
        assert!(
            lo <= c && c <= hi && lo >= 1.0 && hi <= 2.0,
            "{lo} {c} {hi}"
        );
    }
}
