//! Benchmark: runs the release exporter against the simulated large node and reports
//! ratios measured in this one run (never asserted in tests):
//!
//! * peak RSS against the 30 MiB target for an 8-GPU node and against dcgm-exporter's
//!   measured median working set on 8 GPUs (479 MiB, pytorch/ci-infra#1011);
//! * scrape latency with 16 concurrent scrapers against one scraper (collection is off the
//!   scrape path, so this should stay near 1);
//! * scrape latency against the collection duration;
//! * CPU time per collection, measured while nobody scrapes.
//!
//! * gzip on/off: body size, and requests per second at 64 connections against a static
//!   server serving the same bytes in the same run (`throughput.rs`).
//!
//! Usage: `cargo run --release -p bench [-- --seconds 20 --profile etc/sim/large-bench.toml]`
//!
//! `cargo run --release -p bench -- faults [--cycles 100 --stops 10 --soak-seconds 3600]`
//! runs the fault mode instead (`faults.rs`).
//!
//! `cargo run --release -p bench -- exit-codes [--real DIR] [--cycles 200 --parallel 4]
//! [--exporter PATH]` counts exit codes over start/stop cycles per mode (`exit_codes.rs`).
//!
//! `cargo run -p bench -- memory [--minutes 10 --every 20] [--real DIR --gpus 8]` samples
//! RSS over time, default retention against `--watch-max-keep-age 600s` (`memory.rs`).
//!
//! `cargo run --release -p bench -- scale [--builds before=DIR,after=DIR]` prints the scale
//! table (entities, series, bytes, CPU per collection and per series, RSS, first page) per
//! profile and build, idle CPU, RSS under 64 connections and over 10 minutes (`scale.rs`).
//!
//! `cargo run --release -p bench -- builds [--against REV]` builds REV (the newest `v*` tag,
//! else `HEAD`) in a temporary worktree and this tree, and runs the scale mode on both
//! (`builds.rs`).
//!
//! `cargo run --release -p bench -- lowcard [--build debug]` prints bytes per scrape, labels
//! per series and a real Prometheus's head series, chunks and memory without and with
//! `--low-cardinality` on the large profile (`lowcard.rs`).
//!
//! `cargo run --release -p bench -- backend [--build debug]` prints CPU per collection, first
//! page and RSS of `--backend nvml` beside `--backend dcgm` on the same simulated node
//! (`backend.rs`).
//!
//! `cargo run --release -p bench -- aggregate [--build debug] [--fields F1,F2 --period 100ms]`
//! prints CPU per collection with power, GPU temperature and SM clock (or `--fields`)
//! aggregated at 100 ms (`--aggregate`) against the same 8-GPU node without, on the DCGM and
//! the NVML backend (`aggregate.rs`).
//!
//! `cargo run --release -p bench -- engines [--build debug]` prints CPU per collection and
//! RSS of one exporter serving 1, 2 and 3 simulated host engines of one profile
//! (`engines.rs`).
//!
//! `cargo run --release -p bench -- usage [--build debug]` prints CPU per collection, series
//! and RSS of 8 GPUs x 16 pods x 4 processes with per-pod series and `--usage-accounting`
//! against the same node without (`usage.rs`).
//!
//! `cargo run --release -p bench -- serving [--builds before=DIR,after=DIR] [--pin CPUS]`
//! measures the serving path of each build against a static server with the same bytes,
//! interleaved over `--rounds`, pooled with a 95 % interval (`serving.rs`); `--pin` keeps
//! the servers on CPUS and the clients on the others (`pin.rs`).
//!
//! `--real DIR --gpus N` runs the same measurements against NVIDIA's real libdcgm.so.4 (an
//! unpacked DCGM 4.6 kit, see ../shared/dcgm-real) embedded, over N injected idle H100s
//! (the NVML YAML of tests/support/nvml_yaml.rs); `--build debug` measures the debug build
//! (no second full build on a shared machine). `--remote HOST:PORT` connects to a running
//! host engine instead (real `nv-hostengine` or `dcgm-sim-hostengine`), so RSS and CPU are
//! the exporter's alone.
//!
//! Each run also measures throughput at 64 connections, gzip off and on, against a static
//! server serving the same bytes (`throughput.rs`).

mod aggregate;
mod backend;
mod builds;
mod engines;
mod exit_codes;
mod faults;
mod lowcard;
mod memory;
mod otlp;
mod perfcount;
mod pin;
mod scale;
mod serving;
mod throughput;
mod usage;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/support/nvml_yaml.rs"]
#[allow(dead_code)]
mod nvml_yaml;

const DE_MEDIAN_RSS_8GPU_MIB: f64 = 479.0;
const TARGET_RSS_MIB: f64 = 30.0;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        // The usage is this file's own doc, so it cannot drift from what the modes take.
        for line in include_str!("main.rs").lines() {
            let Some(text) = line.strip_prefix("//!") else {
                break;
            };
            println!("{}", text.strip_prefix(' ').unwrap_or(text));
        }
        return;
    }
    let r = match std::env::args().nth(1).as_deref() {
        Some("faults") => run_faults(),
        Some("exit-codes") => run_exit_codes(),
        Some("memory") => with_built(false, memory::run),
        Some("scale") => run_scale(),
        Some("builds") => repo_root().and_then(|root| builds::run(&root)),
        Some("lowcard") => with_built(false, lowcard::run),
        // The simulated NVML too: pods are mapped through its processes.
        Some("usage") => with_built(true, usage::run),
        Some("serving") => run_serving(),
        Some("backend") => with_built(true, backend::run),
        Some("aggregate") => with_built(true, aggregate::run),
        Some("otlp") => with_built(false, otlp::run),
        Some("engines") => with_built(false, engines::run),
        Some("static-serve") => throughput::run_static_serve(),
        _ => run(),
    };
    if let Err(e) = r {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// The workspace's root (this crate's parent).
fn repo_root() -> Result<PathBuf, String> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no repo root")?
        .to_path_buf())
}

/// Builds the exporter and the simulated DCGM (`--build release|debug`), and the simulated
/// NVML (`libnvidia-ml.so.1`) too where `nvml`: (repository root, binary folder).
fn built(nvml: bool) -> Result<(PathBuf, PathBuf), String> {
    let root = repo_root()?;
    let build = build_binaries(&root)?;
    if nvml {
        cargo_build(&root, None, &["-p", "nvml-sim"], &build)?;
    }
    let bin = root.join("target").join(&build);
    Ok((root, bin))
}

/// Runs a mode on the binaries [`built`] made.
fn with_built(nvml: bool, mode: fn(&Path, &Path) -> Result<(), String>) -> Result<(), String> {
    let (root, bin) = built(nvml)?;
    mode(&root, &bin)
}

/// Runs the scale mode on the builds named by `--builds`, or on a release build of the
/// workspace made first.
fn run_scale() -> Result<(), String> {
    let root = repo_root()?;
    if std::env::args().any(|a| a == "--builds") {
        return scale::run(&root, &scale::builds(&root, None)?);
    }
    let (root, bin) = built(false)?;
    scale::run(&root, &scale::builds(&root, Some(&bin))?)
}

/// Runs the serving mode on the builds named by `--builds`, or on a release build of the
/// workspace made first.
fn run_serving() -> Result<(), String> {
    let root = repo_root()?;
    if std::env::args().any(|a| a == "--builds") {
        return serving::run(&root, None);
    }
    let (root, bin) = built(false)?;
    serving::run(&root, Some(&bin))
}

/// `cargo build -q` of `packages` in `build`'s profile, in the workspace at `dir`, into
/// `target` where given (its own `target/` otherwise).
fn cargo_build(
    dir: &Path,
    target: Option<&Path>,
    packages: &[&str],
    build: &str,
) -> Result<(), String> {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q"]).args(packages);
    if build == "release" {
        cargo.arg("--release");
    }
    if let Some(t) = target {
        cargo.arg("--target-dir").arg(t);
    }
    let status = cargo
        .current_dir(dir)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("{build} build of {} failed", packages.join(" ")));
    }
    Ok(())
}

/// Builds the exporter and the simulator of the workspace at `dir` in `build`'s profile.
///
/// The exporter is built alone, as users build it: built beside the simulators its
/// dependencies' features (and so their symbols' names) would differ from the ones
/// `etc/symbol-order.txt` names, and its text would not be laid out by use.
fn build_in(dir: &Path, target: Option<&Path>, build: &str) -> Result<(), String> {
    cargo_build(dir, target, &["-p", "dcgm-exporter"], build)?;
    cargo_build(dir, target, &["-p", "dcgm-sim"], build)
}

/// Builds the exporter and the simulator in the `--build` profile (release unless told
/// otherwise): the name of that profile's target folder.
fn build_binaries(root: &Path) -> Result<String, String> {
    let build = build_profile()?;
    build_in(root, None, &build)?;
    Ok(build)
}

/// `--build`: release (the default) or debug.
fn build_profile() -> Result<String, String> {
    let build = arg("--build", "release");
    if !matches!(build.as_str(), "release" | "debug") {
        return Err(format!("--build: debug or release, not {build}"));
    }
    Ok(build)
}

/// The real kit's `libdcgm.so.4` over `gpus` injected H100s: the library, and the
/// environment it needs to find its NVML injection (whose YAML is written to `yaml`).
fn real_kit(
    kit: &Path,
    gpus: usize,
    yaml: &Path,
) -> Result<(PathBuf, Vec<(String, String)>), String> {
    std::fs::write(
        yaml,
        nvml_yaml::render(&vec![nvml_yaml::Gpu::default(); gpus]),
    )
    .map_err(|e| format!("{}: {e}", yaml.display()))?;
    let env = vec![
        ("NVML_INJECTION_MODE".into(), "True".into()),
        ("NVML_YAML_FILE".into(), yaml.display().to_string()),
        (
            "LD_LIBRARY_PATH".into(),
            kit.join("lib").display().to_string(),
        ),
    ];
    Ok((kit.join("lib/libdcgm.so.4"), env))
}

fn run() -> Result<(), String> {
    let root = repo_root()?;
    let seconds: u64 = arg("--seconds", "20")
        .parse()
        .map_err(|_| "--seconds: not a number")?;
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    let build = build_binaries(&root)?;
    let bin: PathBuf = root.join("target").join(&build);
    // The DCGM library and the environment it needs: the simulator, or the real kit over
    // injected NVML answers.
    let real = std::env::args().any(|a| a == "--real");
    let mut env: Vec<(String, String)> = Vec::new();
    let remote = std::env::args()
        .any(|a| a == "--remote")
        .then(|| arg("--remote", ""));
    let library = if real {
        let kit = PathBuf::from(arg("--real", ""));
        let gpus: usize = arg("--gpus", "4")
            .parse()
            .map_err(|_| "--gpus: not a number")?;
        let yaml = std::env::temp_dir().join(format!("bench-nvml-{}.yaml", std::process::id()));
        let (library, kit_env) = real_kit(&kit, gpus, &yaml)?;
        env.extend(kit_env);
        library
    } else {
        env.push(("DCGM_SIM_PROFILE".into(), profile.display().to_string()));
        bin.join("libdcgm.so.4")
    };
    if !library.exists() {
        return Err(format!("{} does not exist", library.display()));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let interval_ms = 1000u64;
    let child = Command::new(bin.join("dcgm-exporter"))
        .args([
            "-f",
            csv.to_str().ok_or("path")?,
            "-a",
            &format!("127.0.0.1:{port}"),
            "-c",
            &interval_ms.to_string(),
        ])
        .args(["--dcgm-library", library.to_str().ok_or("path")?])
        .args(remote.iter().flat_map(|r| ["-r", r.as_str()]))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start exporter: {e}"))?;
    let child = Killed(child);
    let pid = child.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let t0 = Instant::now();
    let first = loop {
        if let Ok(body) = get(&url) {
            if body.contains("DCGM_FI_") {
                break t0.elapsed();
            }
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err("exporter did not serve metrics within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Idle phase: what collection alone costs, with one scrape before and one after.
    let key = "dcgm_exporter_collections_total{result=\"success\"}";
    let idle = Duration::from_secs((seconds / 4).max(2));
    let idle_c0 = self_metric(&get(&url)?, key);
    let idle_cpu0 = cpu_seconds(pid)?;
    std::thread::sleep(idle);
    let idle_cpu = cpu_seconds(pid)? - idle_cpu0;
    let idle_collections = self_metric(&get(&url)?, key) - idle_c0;

    // One scraper, then sixteen at once, for half the run each.
    let half = Duration::from_secs(seconds / 2);
    let single = scrape_for(&url, 1, half);
    let mut peak_rss = rss_kib(pid)?;
    let many = scrape_for(&url, 16, half);
    peak_rss = peak_rss.max(rss_kib(pid)?);

    let page = get(&url)?;
    let collect_s = self_metric(&page, "dcgm_exporter_collection_duration_seconds");
    let series = page
        .lines()
        .filter(|l| {
            !l.starts_with('#') && !l.starts_with("dcgm_exporter_") && !l.starts_with("process_")
        })
        .count();
    let p = |v: &[f64], q: f64| v[((v.len() as f64 - 1.0) * q) as usize];

    // Throughput at 64 connections, gzip off and on, ours against a static server.
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let phase = Duration::from_secs((seconds / 8).max(2));
    let mut rows = Vec::new();
    let rss_before_64 = peak_rss.max(rss_kib(pid)?);
    for gzip in [false, true] {
        let (headers, body) = throughput::fetch(addr, "/metrics", gzip)?;
        let fixed = throughput::static_server(headers, body.clone())?;
        let ours = throughput::rate(addr, "/metrics", gzip, phase);
        let stat = throughput::rate(fixed, "/metrics", gzip, phase);
        rows.push((gzip, body.len(), ours, stat));
    }
    // VmHWM is a high-water mark and the 64-connection phase comes last: what it reads now
    // is the peak with 64 connections open (if they raised it).
    peak_rss = peak_rss.max(rss_kib(pid)?);
    let rss_mib = peak_rss as f64 / 1024.0;

    if let Some(r) = &remote {
        println!("remote host engine   {r} ({build} exporter)");
    } else if real {
        println!(
            "library              {} ({build} exporter)",
            library.display()
        );
    } else {
        println!("profile              {} ({build} build)", profile.display());
    }
    println!(
        "series exported      {series}  (/metrics {} bytes)",
        page.len()
    );
    println!("first page after     {:.3} s", first.as_secs_f64());
    println!(
        "collections          {idle_collections:.0} in the {}s idle phase (last took {:.2} ms)",
        idle.as_secs(),
        collect_s * 1000.0
    );
    println!(
        "scrapes              {} single, {} with 16 concurrent (the scrapers share the cores)",
        single.len(),
        many.len()
    );
    println!(
        "scrape p50/p99       {:.2}/{:.2} ms single, {:.2}/{:.2} ms concurrent",
        p(&single, 0.5) * 1e3,
        p(&single, 0.99) * 1e3,
        p(&many, 0.5) * 1e3,
        p(&many, 0.99) * 1e3
    );
    println!(
        "peak RSS             {rss_mib:.1} MiB with {} connections ({:.1} MiB before them)",
        throughput::CONNECTIONS,
        rss_before_64 as f64 / 1024.0
    );
    println!(
        "cores                {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (gzip, size, ours, stat) in &rows {
        println!(
            "/metrics gzip {:<5}  {size} bytes, {:.0} req/s, p99 {:.2} ms at {} connections; static server, same bytes: {:.0} req/s, p99 {:.2} ms",
            if *gzip { "on" } else { "off" },
            ours.per_second,
            ours.p99 * 1e3,
            throughput::CONNECTIONS,
            stat.per_second,
            stat.p99 * 1e3,
        );
    }
    println!();
    println!("ratios (this run)");
    println!(
        "  RSS / 30 MiB target                      {:.3}",
        rss_mib / TARGET_RSS_MIB
    );
    println!(
        "  RSS / dcgm-exporter 8-GPU median 479 MiB {:.3}",
        rss_mib / DE_MEDIAN_RSS_8GPU_MIB
    );
    println!(
        "  scrape p50, 16 concurrent / single       {:.3}",
        p(&many, 0.5) / p(&single, 0.5)
    );
    println!(
        "  scrape p50 / collection duration         {:.3}",
        p(&single, 0.5) / collect_s.max(1e-9)
    );
    println!(
        "  CPU seconds per collection, no scrapes   {:.5}",
        idle_cpu / idle_collections.max(1.0)
    );
    println!(
        "  CPU share of one core, no scrapes        {:.4}",
        idle_cpu / idle.as_secs_f64()
    );
    for (gzip, size, ours, stat) in &rows {
        let g = if *gzip { "on " } else { "off" };
        // Issue 18's targets: the exporter's own work per scrape next to a server that only
        // sends the bytes.
        let (rate, p99) = (
            ours.per_second / stat.per_second.max(1e-9),
            ours.p99 / stat.p99.max(1e-9),
        );
        let min_rate = if *gzip { 1.0 } else { 0.9 };
        println!(
            "  req/s ours / static, gzip {g}           {rate:.3}  (target >= {min_rate:.1}: {})",
            met(rate >= min_rate)
        );
        println!(
            "  p99 ours / static, gzip {g}             {p99:.3}  (target <= 1.5: {})",
            met(p99 <= 1.5)
        );
        if *gzip {
            println!(
                "  gzip body / plain body                   {:.3}",
                *size as f64 / rows[0].1.max(1) as f64
            );
        }
    }
    println!(
        "  peak RSS with {} connections / before     {:.3}",
        throughput::CONNECTIONS,
        peak_rss as f64 / rss_before_64.max(1) as f64
    );
    Ok(())
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn number<T: std::str::FromStr>(name: &str, default: &str) -> Result<T, String> {
    arg(name, default)
        .parse()
        .map_err(|_| format!("{name}: not a number"))
}

/// The exit-code mode, with the binaries of this bench's build profile.
fn run_exit_codes() -> Result<(), String> {
    let (root, bin) = build_same_profile()?;
    let options = exit_codes::Options {
        cycles: number("--cycles", "200")?,
        parallel: number("--parallel", "4")?,
        real: std::env::args()
            .any(|a| a == "--real")
            .then(|| PathBuf::from(arg("--real", ""))),
        root,
        exporter: std::env::args()
            .any(|a| a == "--exporter")
            .then(|| PathBuf::from(arg("--exporter", ""))),
    };
    exit_codes::run(&bin, &options)
}

/// Builds the exporter and the simulator with the profile this bench was built with (so
/// that a quick check can run in a debug build): (repository root, binary directory).
fn build_same_profile() -> Result<(PathBuf, PathBuf), String> {
    let root = repo_root()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no binary directory")?.to_path_buf();
    let profile = match bin.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => return Err("no build profile directory".into()),
    };
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "dcgm-exporter", "-p", "dcgm-sim"])
        .args(["--profile", &profile])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("build failed".into());
    }
    Ok((root, bin))
}

/// The fault mode, with the binaries of the profile this bench was built with.
fn run_faults() -> Result<(), String> {
    let (root, bin) = build_same_profile()?;
    let options = faults::Options {
        cycles: number("--cycles", "100")?,
        stops: number("--stops", "10")?,
        soak: Duration::from_secs(number("--soak-seconds", "3600")?),
        interval_ms: number("--interval-ms", "1000")?,
        profile: root.join(arg("--profile", "etc/sim/h100-8gpu-nvswitch.toml")),
        root,
    };
    faults::run(&bin, &options)
}

/// The exporter of `dir` serving on `port`, on the simulated node `profile` with the
/// counters `csv` collected every `interval_ms`, its output dropped; the caller names the
/// library and the backend.
fn exporter(dir: &Path, profile: &Path, csv: &Path, port: u16, interval_ms: u64) -> Command {
    let mut cmd = Command::new(dir.join("dcgm-exporter"));
    cmd.arg("-f")
        .arg(csv)
        .args(["-a", &format!("127.0.0.1:{port}")])
        .args(["-c", &interval_ms.to_string()])
        .env("DCGM_SIM_PROFILE", profile)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn get(url: &str) -> Result<String, String> {
    let r = ureq::get(url)
        .timeout(Duration::from_secs(10))
        .call()
        .map_err(|e| e.to_string())?;
    let mut s = String::new();
    r.into_reader()
        .read_to_string(&mut s)
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Scrape latencies (seconds), sorted, from `n` scrapers running for `d`.
fn scrape_for(url: &str, n: usize, d: Duration) -> Vec<f64> {
    let end = Instant::now() + d;
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let url = url.to_string();
            std::thread::spawn(move || {
                let mut v = Vec::new();
                while Instant::now() < end {
                    let t = Instant::now();
                    if get(&url).is_ok() {
                        v.push(t.elapsed().as_secs_f64());
                    }
                }
                v
            })
        })
        .collect();
    let mut all: Vec<f64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    all.sort_by(|a, b| a.total_cmp(b));
    if all.is_empty() {
        all.push(f64::NAN);
    }
    all
}

/// Peak resident set (VmHWM), KiB.
fn rss_kib(pid: u32) -> Result<u64, String> {
    scale::status_kib(pid, "VmHWM:")
}

fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let rest = s.rsplit_once(") ").map(|(_, r)| r).ok_or("bad stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0);
    Ok(ticks / 100.0)
}

/// The exporter's CPU per successful collection over `n` intervals, after 5 collections to
/// warm up, read from its `/metrics` at `url` and `/proc/<pid>/stat`.
fn cpu_us_per_collection(url: &str, pid: u32, interval_ms: u64, n: u64) -> Result<f64, String> {
    let (cpu0, cpu1, collections) = over_collections(url, interval_ms, n, || scale::cpu_s(pid))?;
    Ok((cpu1 - cpu0) * 1e6 / collections)
}

/// `read` before and after `n` intervals of the exporter at `url`, and how many successful
/// collections lay between, after 5 collections to warm up.
pub(crate) fn over_collections<T>(
    url: &str,
    interval_ms: u64,
    n: u64,
    read: impl Fn() -> Result<T, String>,
) -> Result<(T, T, f64), String> {
    let collections =
        || get(url).map(|p| self_metric(&p, "dcgm_exporter_collections_total{result=\"success\"}"));
    let warm = collections()? + 5.0;
    let t = Instant::now();
    while collections()? < warm {
        if t.elapsed() > Duration::from_secs(60) {
            return Err("collections do not advance".into());
        }
        std::thread::sleep(Duration::from_millis(interval_ms));
    }
    let (c0, before) = (collections()?, read()?);
    std::thread::sleep(Duration::from_millis(n * interval_ms));
    let (c1, after) = (collections()?, read()?);
    if c1 <= c0 {
        return Err("no collection during the measurement".into());
    }
    Ok((before, after, c1 - c0))
}

fn self_metric(page: &str, key: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}
