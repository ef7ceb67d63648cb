//! `scale`: how the exporter's cost grows with the node, for one or more builds side by side
//! (for example main's code before a change and after it), in one run.
//!
//! For each profile and build: entities watched, series, page bytes plain and gzip, CPU per
//! collection (the exporter process's CPU time, /proc/PID/task/*/schedstat, over a fixed
//! number of collections at a short interval, no scrapes in between), RSS, and the time from
//! start to the first page with DCGM series (median of `--first-page-runs` starts, the builds
//! taking turns, with the exporter's CPU time by then). Per build, CPU per collection against series is
//! fitted to a line: its slope is the cost per series, its intercept the fixed part. Then
//! idle CPU on the first profile at the default interval (ms of CPU per second), peak RSS
//! while 64 keep-alive connections fetch the page against the steady RSS before (the peak
//! is read from VmHWM after resetting it through /proc/PID/clear_refs), and, with
//! `--memory-minutes`, RSS at 1 minute against the end on the memory profiles.
//!
//! `cargo run --release -p bench -- scale [--builds before=DIR,after=DIR]
//! [--profiles etc/sim/one-gpu.toml,etc/sim/large-bench.toml,etc/sim/bench-32gpu.toml]
//! [--collectors bench/bench-counters.csv] [--interval-ms 100] [--collections 100]
//! [--idle-seconds 60] [--memory-minutes 10] [--first-page-runs 5]
//! [--memory-profiles etc/sim/large-bench.toml,etc/sim/bench-32gpu.toml]`
//!
//! A DIR holds `dcgm-exporter` and `libdcgm.so.4` (a `target/release`); without `--builds`
//! the workspace's release build is made and measured alone. The `builds` mode
//! (`builds.rs`) builds a previous revision and this tree and runs this measurement on both.

use crate::{arg, free_port, get, throughput, Killed};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) struct Build {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
}

/// CPU time of every thread of a process, in seconds (nanosecond counters).
pub(crate) fn cpu_s(pid: u32) -> Result<f64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut ns = 0u64;
    for t in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let Ok(t) = t else { continue };
        ns += schedstat_ns(&t.path());
    }
    Ok(ns as f64 / 1e9)
}

/// CPU time of one thread (`/proc/PID/task/TID`) in nanoseconds; 0 for a thread that just
/// ended, whose file is gone: its time is lost either way.
pub(crate) fn schedstat_ns(task: &Path) -> u64 {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn status_kib(pid: u32, key: &str) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("pid {pid}: no {key}"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(crate) fn list(name: &str, default: &str) -> Vec<String> {
    arg(name, default)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(crate) struct Running {
    child: Killed,
    pub(crate) port: u16,
    log: PathBuf,
    /// Start to the first page with DCGM series.
    first_page: Duration,
    /// The exporter's CPU time (all its threads, the loading of its binaries included) by
    /// then: what the first page costs whatever else the machine runs.
    first_page_cpu_s: f64,
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.0.id()
    }
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.port)
    }
    pub(crate) fn collections(&self) -> Result<f64, String> {
        let page = get(&self.url())?;
        Ok(crate::self_metric(
            &page,
            "dcgm_exporter_collections_total{result=\"success\"}",
        ))
    }
    /// Entities watched, from the start-up line `watching 8 GPU entities x 19 fields, ...`.
    fn entities(&self) -> u64 {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let Some(line) = log.lines().find(|l| l.contains("msg=\"watching ")) else {
            return 0;
        };
        let what = line.split("watching ").nth(1).unwrap_or("");
        what.split(", ")
            .filter_map(|part| part.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

pub(crate) fn start(
    b: &Build,
    profile: &Path,
    csv: &Path,
    interval_ms: u64,
    tag: &str,
) -> Result<Running, String> {
    let port = free_port()?;
    let log = std::env::temp_dir().join(format!(
        "bench-scale-{}-{}-{tag}.log",
        std::process::id(),
        b.name
    ));
    let err = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let child = crate::exporter(&b.dir, profile, csv, port, interval_ms)
        .arg("--dcgm-library")
        .arg(b.dir.join("libdcgm.so.4"))
        .stderr(err)
        .spawn()
        .map_err(|e| format!("start {}: {e}", b.dir.display()))?;
    let mut child = Killed(child);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let (first_page, first_page_cpu_s) = loop {
        if get(&url).is_ok_and(|p| p.contains("DCGM_FI_")) {
            break (t0.elapsed(), cpu_s(child.0.id())?);
        }
        // A build refusing its arguments (an old one against today's counters file) ends
        // at once: say so rather than poll for two minutes.
        if let Ok(Some(status)) = child.0.try_wait() {
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!(
                "{}: exited ({status}) before its first page: {why}",
                b.name
            ));
        }
        if t0.elapsed() > Duration::from_secs(120) {
            return Err(format!("{}: no page within 120 s", b.name));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Ok(Running {
        child,
        port,
        log,
        first_page,
        first_page_cpu_s,
    })
}

struct Row {
    build: usize,
    profile: String,
    entities: u64,
    series: usize,
    bytes: usize,
    gzip_bytes: usize,
    cpu_us: f64,
    rss_kib: u64,
    first_page: Duration,
    /// Fastest and slowest of the first-page runs.
    first_page_spread: (Duration, Duration),
    /// Median CPU time to the first page, seconds.
    first_page_cpu_s: f64,
}

fn measure(b: &Build, i: usize, profile: &Path, csv: &Path) -> Result<Row, String> {
    let interval_ms: u64 = crate::number("--interval-ms", "100")?;
    let n: u64 = crate::number("--collections", "100")?;
    let r = start(b, profile, csv, interval_ms, "scale")?;
    let cpu_us = crate::cpu_us_per_collection(&r.url(), r.pid(), interval_ms, n)?;
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], r.port).into();
    let (_, plain) = throughput::fetch(addr, "/metrics", false)?;
    let (_, gz) = throughput::fetch(addr, "/metrics", true)?;
    let text = String::from_utf8_lossy(&plain);
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("dcgm_exporter_"))
        .count();
    Ok(Row {
        build: i,
        profile: profile
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        entities: r.entities(),
        series,
        bytes: plain.len(),
        gzip_bytes: gz.len(),
        cpu_us,
        rss_kib: status_kib(r.pid(), "VmRSS:")?,
        first_page: r.first_page,
        first_page_spread: (r.first_page, r.first_page),
        first_page_cpu_s: r.first_page_cpu_s,
    })
}

/// Start to first page again, `--first-page-runs` times per build (5 by default), the builds
/// taking turns so that load from elsewhere on the machine falls on all of them alike; each
/// row of `profile` gets the median of its runs (its first start included) and the spread.
fn first_pages(
    builds: &[Build],
    profile: &Path,
    csv: &Path,
    rows: &mut [Row],
) -> Result<(), String> {
    let runs: usize = crate::number("--first-page-runs", "5")?;
    let name = profile
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut times: Vec<Vec<(Duration, f64)>> = builds
        .iter()
        .enumerate()
        .map(|(i, _)| {
            rows.iter()
                .filter(|r| r.build == i && r.profile == name)
                .map(|r| (r.first_page, r.first_page_cpu_s))
                .collect()
        })
        .collect();
    for _ in 1..runs {
        for (i, b) in builds.iter().enumerate() {
            let r = start(b, profile, csv, 100, "first")?;
            times[i].push((r.first_page, r.first_page_cpu_s));
        }
    }
    for r in rows.iter_mut().filter(|r| r.profile == name) {
        let t = &mut times[r.build];
        t.sort_by_key(|x| x.0);
        r.first_page = t[t.len() / 2].0;
        r.first_page_spread = (t[0].0, t[t.len() - 1].0);
        let mut cpu: Vec<f64> = t.iter().map(|x| x.1).collect();
        cpu.sort_by(f64::total_cmp);
        r.first_page_cpu_s = cpu[cpu.len() / 2];
    }
    Ok(())
}

/// Least-squares line through (series, µs): (µs per series, fixed µs).
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { f64::NAN };
    (slope, my - slope * mx)
}

/// Idle CPU (ms per s) at the default interval, all builds at once on `profile`.
fn idle(builds: &[Build], profile: &Path, csv: &Path, secs: u64) -> Result<Vec<f64>, String> {
    let running = builds
        .iter()
        .map(|b| start(b, profile, csv, 30_000, "idle"))
        .collect::<Result<Vec<_>, _>>()?;
    // Start-up (discovery, watches, the first collection) is not idle work.
    std::thread::sleep(Duration::from_secs(2));
    let cpu0 = running
        .iter()
        .map(|r| cpu_s(r.pid()))
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(Duration::from_secs(secs));
    running
        .iter()
        .zip(cpu0)
        .map(|(r, c0)| Ok((cpu_s(r.pid())? - c0) * 1e3 / secs as f64))
        .collect()
}

/// (steady RSS, peak RSS while 64 connections fetch, RSS after) in KiB.
fn burst(b: &Build, profile: &Path, csv: &Path) -> Result<(u64, u64, u64), String> {
    let r = start(b, profile, csv, 1000, "burst")?;
    std::thread::sleep(Duration::from_secs(5));
    let pid = r.pid();
    let steady = status_kib(pid, "VmRSS:")?;
    // "5" resets the peak resident set (VmHWM) to the current RSS.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").map_err(|e| e.to_string())?;
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], r.port).into();
    for gzip in [false, true] {
        throughput::rate(addr, "/metrics", gzip, Duration::from_secs(4));
    }
    let peak = status_kib(pid, "VmHWM:")?;
    std::thread::sleep(Duration::from_secs(3));
    let after = status_kib(pid, "VmRSS:")?;
    Ok((steady, peak, after))
}

/// The builds named by `--builds NAME=DIR,...`, or `default_build` alone as "this"; each DIR
/// must hold the exporter and the simulated library.
pub(crate) fn builds(root: &Path, default_build: Option<&Path>) -> Result<Vec<Build>, String> {
    let builds: Vec<Build> = match std::env::args().any(|a| a == "--builds") {
        true => list("--builds", "")
            .iter()
            .map(|b| {
                let (name, dir) = b.split_once('=').ok_or("--builds: NAME=DIR,...")?;
                Ok(Build {
                    name: name.to_string(),
                    dir: root.join(dir),
                })
            })
            .collect::<Result<_, String>>()?,
        false => vec![Build {
            name: "this".into(),
            dir: default_build.ok_or("no build")?.to_path_buf(),
        }],
    };
    for b in &builds {
        for f in ["dcgm-exporter", "libdcgm.so.4"] {
            if !b.dir.join(f).exists() {
                return Err(format!("{}: no {f} in {}", b.name, b.dir.display()));
            }
        }
    }
    Ok(builds)
}

/// Measures `builds` side by side (two of them: with their ratios, the second over the
/// first).
pub fn run(root: &Path, builds: &[Build]) -> Result<(), String> {
    let profiles = list(
        "--profiles",
        "etc/sim/one-gpu.toml,etc/sim/large-bench.toml,etc/sim/bench-32gpu.toml",
    );
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let minutes: f64 = crate::number("--memory-minutes", "10")?;
    let mem_profiles = list(
        "--memory-profiles",
        "etc/sim/large-bench.toml,etc/sim/bench-32gpu.toml",
    );

    // The memory runs go on in the background while the rest is measured.
    let mut memory = Vec::new();
    if minutes > 0.0 {
        for p in &mem_profiles {
            for b in builds {
                let r = start(b, &root.join(p), &csv, 1000, "memory")?;
                memory.push((b.name.clone(), p.clone(), r, Instant::now(), None));
            }
        }
    }

    let mut rows = Vec::new();
    for p in &profiles {
        for (i, b) in builds.iter().enumerate() {
            rows.push(measure(b, i, &root.join(p), &csv)?);
        }
        first_pages(builds, &root.join(p), &csv, &mut rows)?;
    }
    println!(
        "scale: {} at -c {} ms, CPU over {} collections",
        csv.display(),
        arg("--interval-ms", "100"),
        arg("--collections", "100")
    );
    println!(
        "{:<22} {:<7} {:>8} {:>7} {:>9} {:>8} {:>10} {:>9} {:>8} {:>9}",
        "profile",
        "build",
        "entities",
        "series",
        "bytes",
        "gzip",
        "µs/coll",
        "µs/series",
        "RSS MiB",
        "1st page"
    );
    for r in &rows {
        println!(
            "{:<22} {:<7} {:>8} {:>7} {:>9} {:>8} {:>10.0} {:>9.2} {:>8.1} {:>6.0} ms",
            r.profile,
            builds[r.build].name,
            r.entities,
            r.series,
            r.bytes,
            r.gzip_bytes,
            r.cpu_us,
            r.cpu_us / r.series as f64,
            mib(r.rss_kib),
            r.first_page.as_secs_f64() * 1e3
        );
    }
    for r in &rows {
        let (lo, hi) = r.first_page_spread;
        println!(
            "{:<8} {}: first page {:.1} ms median, {:.1} to {:.1} ms; CPU by then {:.1} ms median",
            builds[r.build].name,
            r.profile,
            r.first_page.as_secs_f64() * 1e3,
            lo.as_secs_f64() * 1e3,
            hi.as_secs_f64() * 1e3,
            r.first_page_cpu_s * 1e3
        );
    }
    let mut fits = Vec::new();
    for (i, b) in builds.iter().enumerate() {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.build == i)
            .map(|r| (r.series as f64, r.cpu_us))
            .collect();
        let (slope, fixed) = fit(&points);
        println!(
            "{:<8} CPU per collection = {fixed:.0} µs fixed + {slope:.2} µs per series",
            b.name
        );
        fits.push((slope, fixed));
    }

    let idle_secs: u64 = crate::number("--idle-seconds", "60")?;
    let first = root.join(&profiles[0]);
    let idle_csv = root.join("etc/default-counters.csv");
    let idle = idle(builds, &first, &idle_csv, idle_secs)?;
    for (b, ms) in builds.iter().zip(&idle) {
        println!(
            "{:<8} idle CPU, {} with the default counters at the default -c 30000: {ms:.3} ms per s",
            b.name, profiles[0]
        );
    }

    let mut bursts = Vec::new();
    for p in &mem_profiles {
        for b in builds {
            let (steady, peak, after) = burst(b, &root.join(p), &csv)?;
            println!(
                "{:<8} {p}: 64 keep-alive connections: RSS {:.1} MiB steady, peak {:.1} MiB (+{:.1}), {:.1} MiB after (+{:.1})",
                b.name,
                mib(steady),
                mib(peak),
                mib(peak) - mib(steady),
                mib(after),
                mib(after) - mib(steady)
            );
            bursts.push((b.name.clone(), p.clone(), mib(peak) - mib(steady)));
        }
    }

    if minutes > 0.0 {
        let end = Duration::from_secs_f64(minutes * 60.0);
        loop {
            let mut waiting = false;
            for (_, _, r, t0, one) in memory.iter_mut() {
                if one.is_none() && t0.elapsed() >= Duration::from_secs(60) {
                    *one = Some(status_kib(r.pid(), "VmRSS:")?);
                }
                waiting |= t0.elapsed() < end || one.is_none();
            }
            if !waiting {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        for (b, p, r, _, one) in &memory {
            get(&r.url()).map_err(|e| format!("{b} {p}: {e}"))?;
            let last = status_kib(r.pid(), "VmRSS:")?;
            let one = one.unwrap_or(last);
            println!(
                "{b:<8} {p}: RSS {:.1} MiB at 1 min, {:.1} MiB at {minutes} min: ratio {:.3}",
                mib(one),
                mib(last),
                last as f64 / one as f64
            );
        }
    }

    if builds.len() == 2 {
        let (a, b) = (&builds[0].name, &builds[1].name);
        println!("ratios {b} / {a}:");
        println!(
            "  µs per series            {:.3} ({:.2} / {:.2})",
            fits[1].0 / fits[0].0,
            fits[1].0,
            fits[0].0
        );
        println!(
            "  fixed µs per collection  {:.3} ({:.0} / {:.0})",
            fits[1].1 / fits[0].1,
            fits[1].1,
            fits[0].1
        );
        println!(
            "  idle CPU ms per s        {:.3} ({:.3} / {:.3})",
            idle[1] / idle[0],
            idle[1],
            idle[0]
        );
        for p in &profiles {
            let of = |i: usize| {
                rows.iter()
                    .find(|r| r.build == i && r.profile == p.rsplit('/').next().unwrap_or(p))
            };
            if let (Some(x), Some(y)) = (of(0), of(1)) {
                println!(
                    "  {p}: CPU per collection {:.3}, per series {:.3} ({:.2} / {:.2} µs), first page {:.3}, gzip bytes {:.3}, bytes {:.3}",
                    y.cpu_us / x.cpu_us,
                    (y.cpu_us / y.series as f64) / (x.cpu_us / x.series as f64),
                    y.cpu_us / y.series as f64,
                    x.cpu_us / x.series as f64,
                    y.first_page.as_secs_f64() / x.first_page.as_secs_f64(),
                    y.gzip_bytes as f64 / x.gzip_bytes as f64,
                    y.bytes as f64 / x.bytes as f64
                );
            }
        }
    }
    let _ = bursts;
    Ok(())
}
