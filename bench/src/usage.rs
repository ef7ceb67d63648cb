//! `usage`: what per-pod series and `--usage-accounting` cost on a busy shared node (issue 23
//! item 5), in one run: 8 GPUs each time-shared by 16 pods (device-plugin replicas
//! `<UUID>::0..15`) of 4 processes each (`etc/sim/bench-usage.toml`: 128 pods, 512 processes
//! whose utilisation moves every second), against the same node without per-pod series.
//!
//! The exporter runs with the simulated DCGM and NVML, a fake kubelet (PodResources gRPC on a
//! unix socket) listing the 128 pods, a fake API server giving their UIDs (`NODE_NAME`,
//! `KUBECONFIG`) and a fake `/proc` root (`--proc-root`) whose `<pid>/cgroup` files put each
//! process in its pod's cgroup. Three configurations, one after the other:
//!
//! * `plain`: no `-k` (the same node without per-pod series);
//! * `virtual-gpus`: `-k --kubernetes-virtual-gpus` (per-pod copies of every series);
//! * `usage`: `-k --kubernetes-virtual-gpus --usage-accounting` (plus energy, utilisation
//!   shares and allocated-but-idle per pod).
//!
//! For each: CPU per collection (the exporter's CPU time over `--collections` collections at
//! `--interval-ms`, no scrapes in between), series on the page (all, per-pod, `DCGM_EXP_*`
//! usage families), page bytes, RSS (VmRSS at the end and VmHWM); then the ratios against
//! `plain`.
//!
//! `cargo run --release -p bench -- usage [--build release|debug] [--interval-ms 1000]
//! [--collections 30] [--profile etc/sim/bench-usage.toml]
//! [--collectors etc/default-counters.csv] [--skip-usage]`
//!
//! `--skip-usage` leaves out the third configuration (for a build without
//! `--usage-accounting`).

use crate::scale::{cpu_s, status_kib};
use crate::{arg, get, Killed};
use dcgm_sim_model::node::Node;
use dcgm_sim_model::profile::Profile;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../../tests/support/kubelet.rs"]
#[allow(dead_code)]
mod kubelet;

#[path = "../../tests/support/fake_apiserver.rs"]
#[allow(dead_code)]
mod fake_apiserver;

const PODS_PER_GPU: u32 = 16;
const PROCESSES_PER_POD: u32 = 4;
const NODE: &str = "node-a";

/// The pid of process `n` of pod `pod` on GPU `gpu`, as etc/sim/bench-usage.toml numbers
/// them.
fn pid(gpu: u32, pod: u32, n: u32) -> u32 {
    200_000 + gpu * 1000 + pod * 10 + n
}

/// A pod UID (hex and dashes, as the cgroup parser wants).
fn uid(gpu: u32, pod: u32) -> String {
    format!("{gpu:08x}-0000-4000-8000-{pod:012x}")
}

fn pod_name(gpu: u32, pod: u32) -> String {
    format!("job-g{gpu}-p{pod}")
}

fn namespace(pod: u32) -> String {
    format!("team-{}", pod % 4)
}

/// The node's pods on the kubelet and the API server, and their processes under a fake
/// /proc root; kept alive for the whole run.
struct Cluster {
    kubelet: kubelet::FakeKubelet,
    api: fake_apiserver::FakeApiServer,
    proc_root: tempfile::TempDir,
}

fn cluster(profile: &Profile) -> Result<Cluster, String> {
    let node = Node::build(profile);
    let proc_root = tempfile::tempdir().map_err(|e| e.to_string())?;
    let kubelet = kubelet::FakeKubelet::start();
    let api = fake_apiserver::FakeApiServer::start();
    let mut pods = Vec::new();
    for g in &node.gpus {
        for p in 0..PODS_PER_GPU {
            let (name, ns, uid) = (pod_name(g.id, p), namespace(p), uid(g.id, p));
            let replica = format!("{}::{p}", g.uuid);
            pods.push(kubelet::pod(
                &ns,
                &name,
                "main",
                &[("nvidia.com/gpu", &[replica.as_str()])],
            ));
            api.apply(fake_apiserver::pod(&ns, &name, &uid, NODE, &[]));
            for n in 0..PROCESSES_PER_POD {
                let dir = proc_root.path().join(pid(g.id, p, n).to_string());
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                // A systemd-driver cgroup v2 path, as the kubelet names it.
                let cgroup = format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{:064x}.scope\n",
                    uid.replace('-', "_"),
                    u64::from(pid(g.id, p, n))
                );
                std::fs::write(dir.join("cgroup"), cgroup).map_err(|e| e.to_string())?;
            }
        }
    }
    kubelet.set_pods(pods);
    Ok(Cluster {
        kubelet,
        api,
        proc_root,
    })
}

struct Figures {
    name: &'static str,
    cpu_us: f64,
    series: usize,
    pod_series: usize,
    usage_series: usize,
    bytes: usize,
    rss_kib: u64,
    hwm_kib: u64,
}

/// Series of a text page, leaving out the exporter's own metrics.
fn series(page: &str) -> impl Iterator<Item = &str> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("dcgm_exporter_") && !l.is_empty())
}

/// One configuration: start, wait until the page has what it should (every pod on it, the
/// usage families), then measure.
fn measure(
    root: &Path,
    dir: &Path,
    c: &Cluster,
    name: &'static str,
    k: bool,
    usage: bool,
) -> Result<Figures, String> {
    let profile = root.join(arg("--profile", "etc/sim/bench-usage.toml"));
    let csv = root.join(arg("--collectors", "etc/default-counters.csv"));
    let interval_ms: u64 = crate::number("--interval-ms", "1000")?;
    let n: u64 = crate::number("--collections", "30")?;
    let port = crate::free_port()?;
    let log: PathBuf =
        std::env::temp_dir().join(format!("bench-usage-{}-{name}.log", std::process::id()));
    let err = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let mut cmd = crate::exporter(dir, &profile, &csv, port, interval_ms);
    cmd.arg("--dcgm-library")
        .arg(dir.join("libdcgm.so.4"))
        // The simulated NVML, as `libnvidia-ml.so.1`.
        .env("LD_LIBRARY_PATH", dir)
        .stderr(err);
    if k {
        cmd.args(["-k", "--kubernetes-virtual-gpus"])
            .arg("--pod-resources-kubelet-socket")
            .arg(c.kubelet.socket())
            .arg("--proc-root")
            .arg(c.proc_root.path())
            .env("NODE_NAME", NODE)
            .env("KUBECONFIG", c.api.kubeconfig());
    }
    if usage {
        cmd.arg("--usage-accounting");
    }
    let child = Killed(cmd.spawn().map_err(|e| format!("dcgm-exporter: {e}"))?);
    let pid = child.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let pods = (8 * PODS_PER_GPU) as usize;
    let ready = |page: &str| {
        page.contains("DCGM_FI_")
            && (!k || distinct_pods(page, "DCGM_FI_DEV_GPU_TEMP") == pods)
            && (!usage || distinct_pods(page, "DCGM_EXP_ENERGY_JOULES_TOTAL") == pods)
    };
    let t0 = Instant::now();
    loop {
        if get(&url).is_ok_and(|p| ready(&p)) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            let page = get(&url).unwrap_or_default();
            return Err(format!(
                "{name}: the page never had every pod within 180 s ({} pods with GPU_TEMP, {} with energy); log:\n{why}",
                distinct_pods(&page, "DCGM_FI_DEV_GPU_TEMP"),
                distinct_pods(&page, "DCGM_EXP_ENERGY_JOULES_TOTAL"),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let collections = || -> Result<f64, String> {
        Ok(crate::self_metric(
            &get(&url)?,
            "dcgm_exporter_collections_total{result=\"success\"}",
        ))
    };
    // A few collections past readiness: caches filled, every pod's state made.
    let warm = collections()? + 3.0;
    while collections()? < warm {
        if t0.elapsed() > Duration::from_secs(300) {
            return Err(format!("{name}: collections do not advance"));
        }
        std::thread::sleep(Duration::from_millis(interval_ms / 4 + 1));
    }
    let (c0, cpu0) = (collections()?, cpu_s(pid)?);
    std::thread::sleep(Duration::from_millis(n * interval_ms));
    let cpu1 = cpu_s(pid)?;
    let c1 = collections()?;
    if c1 <= c0 {
        return Err(format!("{name}: no collection during the measurement"));
    }
    let page = get(&url)?;
    let figures = Figures {
        name,
        cpu_us: (cpu1 - cpu0) * 1e6 / (c1 - c0),
        series: series(&page).count(),
        pod_series: series(&page).filter(|l| l.contains("pod=\"")).count(),
        usage_series: series(&page).filter(|l| is_usage(l)).count(),
        bytes: page.len(),
        rss_kib: status_kib(pid, "VmRSS:")?,
        hwm_kib: status_kib(pid, "VmHWM:")?,
    };
    drop(child);
    let _ = std::fs::remove_file(&log);
    Ok(figures)
}

/// A series of one of `--usage-accounting`'s families.
fn is_usage(line: &str) -> bool {
    [
        "DCGM_EXP_ENERGY_JOULES_TOTAL{",
        "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL{",
        "DCGM_EXP_UTIL_SHARE{",
        "DCGM_EXP_ALLOCATED_IDLE{",
    ]
    .iter()
    .any(|f| line.starts_with(f))
}

/// How many different pods carry a series of `family`.
fn distinct_pods(page: &str, family: &str) -> usize {
    let mut pods: Vec<&str> = series(page)
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with('{'))
        .filter_map(|l| l.split("pod=\"").nth(1)?.split('"').next())
        .collect();
    pods.sort_unstable();
    pods.dedup();
    pods.len()
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile_path = root.join(arg("--profile", "etc/sim/bench-usage.toml"));
    let profile = Profile::load(&profile_path)?;
    let c = cluster(&profile)?;
    println!(
        "profile {} ({} GPUs, {} pods, {} processes), every {} ms, CPU over {} collections",
        profile_path.display(),
        profile.gpus.count,
        profile.gpus.count * PODS_PER_GPU,
        profile.processes.len(),
        arg("--interval-ms", "1000"),
        arg("--collections", "30"),
    );
    let skip_usage = std::env::args().any(|a| a == "--skip-usage");
    let mut rows = vec![
        measure(root, dir, &c, "plain", false, false)?,
        measure(root, dir, &c, "virtual-gpus", true, false)?,
    ];
    if !skip_usage {
        rows.push(measure(root, dir, &c, "usage", true, true)?);
    }
    println!(
        "| configuration | CPU µs/collection | series | per-pod series | usage series | page bytes | VmRSS MiB | VmHWM MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.name,
            r.cpu_us,
            r.series,
            r.pod_series,
            r.usage_series,
            r.bytes,
            r.rss_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0
        );
    }
    let base = &rows[0];
    for r in &rows[1..] {
        println!(
            "{} / plain: CPU per collection {:.2}, series {:.2}, VmRSS {:.2}, VmHWM {:.2}",
            r.name,
            r.cpu_us / base.cpu_us,
            r.series as f64 / base.series as f64,
            r.rss_kib as f64 / base.rss_kib as f64,
            r.hwm_kib as f64 / base.hwm_kib as f64
        );
    }
    Ok(())
}
