//! Usage accounting outside Kubernetes, end to end: the exporter against the simulated DCGM
//! and NVML, a test `/proc` root (`--proc-root`) whose `<pid>/cgroup` files put each GPU
//! process in a Docker container or a Slurm job, and either a fake Docker Engine API on a
//! unix socket (`--container-labels`) or HPC job files (`--hpc-job-mapping-dir`).
//!
//! The node: GPU 0 time-shared by two consumers whose processes run at 60 % and 20 % SM
//! (and a host process of nobody's at 5 %), the GPU itself at 90 %; GPU 1 held by one
//! consumer alone; GPU 2 held by a consumer that runs nothing on it (the GPU idle).

use crate::support::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const ENERGY: &str = "DCGM_EXP_ENERGY_JOULES_TOTAL";
const IDLE_ENERGY: &str = "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL";
const SHARE: &str = "DCGM_EXP_UTIL_SHARE";
const ALLOCATED_IDLE: &str = "DCGM_EXP_ALLOCATED_IDLE";
const GPU_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";

/// Three whole GPUs; per-process utilisation as described at the top. GPU 0's utilisation
/// (90 %) is above its consumers' 80 %, so their shares are not scaled down; GPU 2 is idle.
const PROFILE: &str = r#"
[node]
driver_version = "550.54.15"
nvml_version = "12.550.54.15"
cuda_driver_version = 12040
seed = 11

[gpus]
count = 3
model = "NVIDIA A100-SXM4-80GB"
memory_mib = 81920
power_limit_w = 400
nvlinks = 0
pci_bus_base = 0x07

[[fields]]
id = 203
gpus = [0]
gen = { kind = "constant", value = 90.0 }

[[fields]]
id = 203
gpus = [1]
gen = { kind = "constant", value = 45.0 }

[[fields]]
id = 203
gpus = [2]
gen = { kind = "constant", value = 0.0 }

[[fields]]
id = 156
gen = { kind = "counter", per_s = 150000.0 }

[[processes]]
pid = 5001
gpu = 0
used_memory_mib = 8192
sm_util = 60
name = "train-a"

[[processes]]
pid = 5002
gpu = 0
used_memory_mib = 4096
sm_util = 20
name = "train-b"

[[processes]]
pid = 5003
gpu = 0
used_memory_mib = 512
sm_util = 5
name = "host-tool"

[[processes]]
pid = 5011
gpu = 1
used_memory_mib = 2048
sm_util = 45
name = "solo"
"#;

/// A temp dir with the profile and a `/proc` tree: `<pid>/cgroup` for each process.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(cgroups: &[(u32, String)]) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("profile.toml"), PROFILE).expect("write profile");
        for (pid, text) in cgroups {
            let d = dir.path().join("proc").join(pid.to_string());
            std::fs::create_dir_all(&d).expect("proc dir");
            std::fs::write(d.join("cgroup"), text).expect("cgroup file");
        }
        Node { dir }
    }

    fn proc_root(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    fn exporter(&self) -> ExporterBuilder {
        with_sim_nvml(exporter())
            .env(
                "DCGM_SIM_PROFILE",
                self.dir.path().join("profile.toml").to_str().unwrap(),
            )
            .args(&[
                "--usage-accounting",
                "--usage-idle-window=2s",
                "--proc-root",
                self.proc_root().to_str().unwrap(),
            ])
    }
}

/// The running containers: (full id, name, GPUs by index).
type Running = Arc<Mutex<Vec<(String, String, Vec<String>)>>>;

/// A Docker-compatible API on a unix socket (one request per connection, as the exporter
/// asks): `GET /containers/json` and `GET /containers/{id}/json`, with the fields Docker
/// 24 sends that the exporter reads.
fn fake_docker(socket: &Path, containers: Running) {
    let listener = UnixListener::bind(socket).expect("bind the fake runtime's socket");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let req = crate::support::request_head(&mut stream);
            let req = String::from_utf8_lossy(&req);
            let path = req.split(' ').nth(1).unwrap_or("");
            let body = docker_answer(path, &containers.lock().unwrap());
            let (status, body) = match body {
                Some(b) => ("200 OK", b),
                None => ("404 Not Found", r#"{"message":"No such container"}"#.into()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nApi-Version: 1.43\r\n\
                 Server: Docker/24.0.7 (linux)\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

fn docker_answer(path: &str, containers: &[(String, String, Vec<String>)]) -> Option<String> {
    if path == "/containers/json" {
        let rows: Vec<String> = containers
            .iter()
            .map(|(id, name, _)| {
                format!(r#"{{"Id":"{id}","Names":["/{name}"],"State":"running","Status":"Up 5 minutes"}}"#)
            })
            .collect();
        return Some(format!("[{}]", rows.join(",")));
    }
    let id = path.strip_prefix("/containers/")?.strip_suffix("/json")?;
    let (id, name, gpus) = containers.iter().find(|c| c.0 == id)?;
    let ids: Vec<String> = gpus.iter().map(|g| format!("\"{g}\"")).collect();
    // `docker run --gpus '"device=…"'`.
    Some(format!(
        r#"{{"Id":"{id}","Name":"/{name}","Config":{{"Env":["NVIDIA_VISIBLE_DEVICES=all"]}},
            "HostConfig":{{"Runtime":"runc","Devices":[],"DeviceRequests":[{{"Driver":"","Count":0,
            "DeviceIDs":[{}],"Capabilities":[["gpu"]],"Options":{{}}}}]}}}}"#,
        ids.join(",")
    ))
}

/// One usage series' value by (gpu, consumer label value); `None` for the device's own.
fn by_consumer(s: &[Sample], family: &str, label: &str) -> BTreeMap<(String, String), f64> {
    series(s, family)
        .into_iter()
        .filter_map(|x| {
            Some((
                (x.label("gpu")?.to_string(), x.label(label)?.to_string()),
                x.value,
            ))
        })
        .collect()
}

fn of_gpu(s: &[Sample], family: &str, gpu: &str) -> Option<f64> {
    series(s, family)
        .into_iter()
        .find(|x| x.label("gpu") == Some(gpu))
        .map(|x| x.value)
}

/// What both tests check, with consumers named by `label`: `a` (60 %) and `b` (20 %) share
/// GPU 0, `solo` holds GPU 1 alone, `idle` holds GPU 2 and runs nothing.
fn check_accounting(e: &Exporter, label: &str, [a, b, solo, idle]: [&str; 4]) {
    let names = BTreeMap::from([("a", a), ("b", b), ("solo", solo), ("idle", idle)]);
    let key = |g: &str, c: &str| (g.to_string(), names[c].to_string());
    let shares_right = |s: &[Sample]| {
        let sh = by_consumer(s, SHARE, label);
        sh.get(&key("0", "a")) == Some(&60.0)
            && sh.get(&key("0", "b")) == Some(&20.0)
            && sh.get(&key("1", "solo")) == Some(&45.0)
            && sh.get(&key("2", "idle")) == Some(&0.0)
    };
    let first = e.scrape_until(40, shares_right);
    // Only the consumers have series: the host process on GPU 0 is nobody's.
    let shares = by_consumer(&first, SHARE, label);
    assert_eq!(shares.len(), 4, "{shares:?}");
    // Let energy accumulate over several collections, each page a consistent set.
    let gpu0_j = |s: &[Sample]| of_gpu(s, GPU_ENERGY, "0").unwrap_or(0.0) / 1000.0;
    let start = gpu0_j(&first);
    let last = e.scrape_until(40, |s| shares_right(s) && gpu0_j(s) > start + 600.0);

    let (j1, j2) = (
        by_consumer(&first, ENERGY, label),
        by_consumer(&last, ENERGY, label),
    );
    let delta = |k: (String, String)| j2[&k] - j1[&k];
    let idle =
        |g: &str| of_gpu(&last, IDLE_ENERGY, g).unwrap() - of_gpu(&first, IDLE_ENERGY, g).unwrap();
    let gpu = |g: &str| {
        (of_gpu(&last, GPU_ENERGY, g).unwrap() - of_gpu(&first, GPU_ENERGY, g).unwrap()) / 1000.0
    };

    // GPU 0: a and b in proportion 60:20; with the idle energy they make up the GPU's.
    let (a, b) = (delta(key("0", "a")), delta(key("0", "b")));
    assert!(a > 0.0 && b > 0.0, "a {a} J, b {b} J");
    assert!((a / b - 3.0).abs() < 1e-6, "a {a} J, b {b} J: not 3:1");
    let total = gpu("0");
    assert!(
        (a + b + idle("0") - total).abs() < 1e-3,
        "GPU 0: a {a} + b {b} + idle {} != {total} J",
        idle("0")
    );
    assert!(
        idle("0") >= 0.2 * total - 1e-3,
        "idle {} of {total} J",
        idle("0")
    );
    // GPU 1: held alone, its whole energy; nothing idle.
    let solo = delta(key("1", "solo"));
    assert!(
        solo > 0.0 && (solo - gpu("1")).abs() < 1e-3,
        "solo {solo} J of {} J",
        gpu("1")
    );
    assert!(idle("1").abs() < 1e-9, "GPU 1 idle {} J", idle("1"));
    // GPU 2: held alone but unused, still its holder's energy; allocated but idle once the
    // window (2 s) has passed.
    let held = delta(key("2", "idle"));
    assert!(
        (held - gpu("2")).abs() < 1e-3,
        "idle holder {held} J of {} J",
        gpu("2")
    );
    let s = e.scrape_until(20, |s| {
        by_consumer(s, ALLOCATED_IDLE, label).get(&key("2", "idle")) == Some(&1.0)
    });
    let flags = by_consumer(&s, ALLOCATED_IDLE, label);
    for busy in [key("0", "a"), key("0", "b"), key("1", "solo")] {
        assert_eq!(flags.get(&busy), Some(&0.0), "{busy:?}: {flags:?}");
    }
    // The usage series carry the device's identity labels.
    let a_series = series(&s, SHARE)
        .into_iter()
        .find(|x| x.label(label) == Some(names["a"]))
        .expect("a's share")
        .clone();
    let gpu0 = series(&s, GPU_UTIL)
        .into_iter()
        .find(|x| x.label("gpu") == Some("0"))
        .expect("GPU 0's utilisation")
        .clone();
    for l in ["UUID", "pci_bus_id", "device", "modelName", "Hostname"] {
        assert_eq!(a_series.label(l), gpu0.label(l), "{l}");
    }
}

fn cid(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

/// Docker: containers `a` and `b` time-share GPU 0, `solo` holds GPU 1, `idle` GPU 2; the
/// processes' cgroups are Docker's (systemd and cgroupfs drivers), the host tool's a login
/// session's.
#[test]
fn docker_containers_get_their_share_and_energy() {
    sim_built();
    let node = Node::new(&[
        (5001, format!("0::/system.slice/docker-{}.scope\n", cid(1))),
        (5002, format!("0::/docker/{}\n", cid(2))),
        (5003, "0::/user.slice/user-1000.slice/session-4.scope\n".into()),
        (
            5011,
            format!(
                "12:memory:/system.slice/docker-{0}.scope\n1:name=systemd:/system.slice/docker-{0}.scope\n0::/\n",
                cid(3)
            ),
        ),
    ]);
    let socket = node.dir.path().join("docker.sock");
    // GPUs by index, as `--gpus '"device=0"'` names them.
    let running: Running = Arc::new(Mutex::new(vec![
        (cid(1), "a".into(), vec!["0".into()]),
        (cid(2), "b".into(), vec!["0".into()]),
        (cid(3), "solo".into(), vec!["1".into()]),
        (cid(4), "idle".into(), vec!["2".into()]),
    ]));
    fake_docker(&socket, running.clone());
    let e = node
        .exporter()
        .args(&[
            "--container-labels",
            &format!("--container-runtime-socket=unix://{}", socket.display()),
        ])
        .start();
    check_accounting(&e, "container", ["a", "b", "solo", "idle"]);
    // The GPU's own series keep the container source's label (both sharers, joined).
    let s = e.scrape();
    let gpu0 = series(&s, GPU_UTIL)
        .into_iter()
        .find(|x| x.label("gpu") == Some("0"))
        .map(|x| x.label("container").map(str::to_string));
    assert_eq!(gpu0, Some(Some("a,b".to_string())), "{}", dump(&s));

    // b stops (its process lingers, still in b's cgroup): its series go, and a, now
    // alone on GPU 0, holds it exclusively: its share is the GPU's and its energy all of it.
    running.lock().unwrap().retain(|c| c.1 != "b");
    let key = |c: &str| ("0".to_string(), c.to_string());
    let alone = |s: &[Sample]| {
        let sh = by_consumer(s, SHARE, "container");
        sh.get(&key("a")) == Some(&90.0) && !sh.contains_key(&key("b"))
    };
    let first = e.scrape_until(30, alone);
    let gpu0_j = |s: &[Sample]| of_gpu(s, GPU_ENERGY, "0").unwrap() / 1000.0;
    let last = e.scrape_until(30, |s| alone(s) && gpu0_j(s) > gpu0_j(&first) + 300.0);
    let a = |s: &[Sample]| by_consumer(s, ENERGY, "container")[&key("a")];
    let idle = |s: &[Sample]| of_gpu(s, IDLE_ENERGY, "0").unwrap();
    assert!(!by_consumer(&last, ENERGY, "container").contains_key(&key("b")));
    let total = gpu0_j(&last) - gpu0_j(&first);
    assert!(
        (a(&last) - a(&first) - total).abs() < 1e-3,
        "a {} J of {total} J",
        a(&last) - a(&first)
    );
    assert!((idle(&last) - idle(&first)).abs() < 1e-9);
}

/// Slurm: jobs 101 and 102 share GPU 0, 200 holds GPU 1, 300 GPU 2 (the prolog's job
/// files); the processes' cgroups are Slurm's cgroup/v2 job cgroups.
#[test]
fn slurm_jobs_get_their_share_and_energy() {
    sim_built();
    let task =
        |job: u32| format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n");
    let node = Node::new(&[
        (5001, task(101)),
        (5002, task(102)),
        // slurmstepd itself is not a job's.
        (5003, "0::/system.slice/slurmstepd.scope/system\n".into()),
        (5011, task(200)),
    ]);
    let jobs = node.dir.path().join("hpc");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("0"), "101\n102\n").unwrap();
    std::fs::write(jobs.join("1"), "200\n").unwrap();
    std::fs::write(jobs.join("2"), "300\n").unwrap();
    let e = node
        .exporter()
        .args(&["--hpc-job-mapping-dir", jobs.to_str().unwrap()])
        .start();
    check_accounting(&e, "hpc_job", ["101", "102", "200", "300"]);
}

/// A container given one MIG device (`--gpus '"device=MIG-…"'`) holds that GPU instance
/// alone: its series carry the instance's labels, and it gets the instance's whole energy
/// increase (which DCGM reads as the parent GPU's); the GPU's other instances have no
/// consumer.
#[test]
fn a_container_on_a_mig_device_holds_its_gpu_instance() {
    sim_built();
    let profile = repo("etc/sim/a100-mixed-mig.toml");
    let n = dcgm_sim_model::node::Node::build(
        &dcgm_sim_model::profile::Profile::load(&profile).expect("profile"),
    );
    let mig = mig_uuid(&n, 0, 7);
    // Process 4101 of the profile runs on that instance.
    let node = Node::new(&[(4101, format!("0::/system.slice/docker-{}.scope\n", cid(7)))]);
    let socket = node.dir.path().join("docker.sock");
    fake_docker(
        &socket,
        Arc::new(Mutex::new(vec![(cid(7), "mig-job".into(), vec![mig])])),
    );
    let e = node
        .exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .args(&[
            "--container-labels",
            &format!("--container-runtime-socket=unix://{}", socket.display()),
        ])
        .start();
    let held = |s: &[Sample]| -> Vec<(String, String, f64)> {
        series(s, ENERGY)
            .into_iter()
            .filter_map(|x| {
                Some((
                    x.label("gpu")?.to_string(),
                    x.label("GPU_I_ID")?.to_string(),
                    x.value,
                ))
            })
            .collect()
    };
    let energy_of_gi7 = |s: &[Sample]| {
        series(s, GPU_ENERGY)
            .into_iter()
            .find(|x| x.label("gpu") == Some("0") && x.label("GPU_I_ID") == Some("7"))
            .map(|x| x.value / 1000.0)
    };
    let first = e.scrape_until(30, |s| held(s).len() == 1 && energy_of_gi7(s).is_some());
    let last = e.scrape_until(30, |s| {
        energy_of_gi7(s).unwrap_or(0.0) > energy_of_gi7(&first).unwrap() + 100.0
    });
    let (h1, h2) = (held(&first), held(&last));
    assert_eq!((h2[0].0.as_str(), h2[0].1.as_str()), ("0", "7"), "{h2:?}");
    let series_of = series(&last, SHARE);
    assert_eq!(series_of.len(), 1, "{}", dump(&last));
    assert_eq!(series_of[0].label("container"), Some("mig-job"));
    assert_eq!(series_of[0].label("GPU_I_PROFILE"), Some("1g.10gb"));
    let total = energy_of_gi7(&last).unwrap() - energy_of_gi7(&first).unwrap();
    assert!(
        (h2[0].2 - h1[0].2 - total).abs() < 1e-3,
        "mig-job {} J of {total} J",
        h2[0].2 - h1[0].2
    );
}

/// One HPC job file that fails to read (the batch system rewriting it, a bad byte: invalid
/// UTF-8 stands for any failure, as root reads every mode) keeps its last jobs for a
/// bounded grace: its GPU's series keep their `hpc_job` label and its job keeps its usage
/// series and counter; the other files' jobs are booked as before. After the grace
/// (`MAX_UNKNOWN` = 10 collections) its jobs are gone; readable again, they are back. A job
/// another file drops meanwhile is gone at once.
#[test]
fn an_unreadable_hpc_file_keeps_its_jobs_for_a_grace() {
    sim_built();
    let task =
        |job: u32| format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n");
    let node = Node::new(&[(5001, task(101)), (5002, task(102)), (5011, task(200))]);
    let jobs = node.dir.path().join("hpc");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("0"), "101\n102\n").unwrap();
    std::fs::write(jobs.join("1"), "200\n").unwrap();
    let e = node
        .exporter()
        .args(&["--hpc-job-mapping-dir", jobs.to_str().unwrap(), "-c", "400"])
        .start();
    let job_on = |s: &[Sample], gpu: &str| -> Option<String> {
        series(s, GPU_UTIL)
            .into_iter()
            .find(|x| x.label("gpu") == Some(gpu))
            .and_then(|x| x.label("hpc_job").map(str::to_string))
    };
    let energy = |s: &[Sample], job: &str| {
        by_consumer(s, ENERGY, "hpc_job")
            .get(&(
                if job == "200" { "1" } else { "0" }.to_string(),
                job.to_string(),
            ))
            .copied()
    };
    let before = e.scrape_until(40, |s| {
        energy(s, "200").is_some_and(|j| j > 0.0) && energy(s, "101").is_some_and(|j| j > 0.0)
    });
    assert_eq!(job_on(&before, "1").as_deref(), Some("200"));
    std::fs::write(jobs.join("1"), b"\xff\xfe200\n").unwrap();
    // Wait until a collection has read it, as /health says.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !e.get("/health").1.contains("hpc-job-mapping-dir") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            e.get("/health").1
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let during = e.scrape();
    assert_eq!(
        job_on(&during, "1").as_deref(),
        Some("200"),
        "{}",
        dump(&during)
    );
    let (j200, j101) = (energy(&during, "200"), energy(&during, "101"));
    assert!(
        j200.is_some_and(|j| j >= energy(&before, "200").unwrap()),
        "job 200's energy kept, not restarted: {j200:?}"
    );
    // The other file is read as usual: a job it drops is gone at once (not kept for the
    // failing file's grace), and the job it keeps is booked: its energy advances.
    std::fs::write(jobs.join("0"), "101\n").unwrap();
    let later = e.scrape_until(10, |s| {
        energy(s, "102").is_none() && energy(s, "101") > j101
    });
    assert_eq!(energy(&later, "102"), None, "{}", dump(&later));
    assert!(energy(&later, "101") > j101, "{}", dump(&later));
    assert!(energy(&later, "200").is_some(), "{}", dump(&later));
    // Past the grace: gone from labels and usage.
    let gone = e.scrape_until(20, |s| {
        job_on(s, "1").is_none() && energy(s, "200").is_none()
    });
    assert_eq!(job_on(&gone, "1"), None, "{}", dump(&gone));
    assert_eq!(energy(&gone, "200"), None);
    // Readable again: back.
    std::fs::write(jobs.join("1"), "200\n").unwrap();
    let back = e.scrape_until(20, |s| job_on(s, "1").as_deref() == Some("200"));
    assert_eq!(
        job_on(&back, "1").as_deref(),
        Some("200"),
        "{}",
        dump(&back)
    );
}

/// The HPC job directory itself failing to list (`EIO` or `ESTALE` on NFS, `EMFILE`, a
/// permission change; here a file put in its place, as root lists every mode) is every
/// job file failing that read: for less than the grace each GPU keeps its `hpc_job` label
/// and each job its usage counter (not restarted from 0); for longer, they go, as a
/// failing file's do; listed again, they are back.
#[test]
fn an_unlistable_hpc_directory_keeps_every_job_for_a_grace() {
    sim_built();
    let task =
        |job: u32| format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n");
    let node = Node::new(&[(5001, task(101)), (5002, task(102)), (5011, task(200))]);
    let jobs = node.dir.path().join("hpc");
    let aside = node.dir.path().join("hpc.aside");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("0"), "101\n102\n").unwrap();
    std::fs::write(jobs.join("1"), "200\n").unwrap();
    let e = node
        .exporter()
        .args(&["--hpc-job-mapping-dir", jobs.to_str().unwrap(), "-c", "400"])
        .start();
    // The jobs labelling a GPU's series (one copy per job), joined.
    let job_on = |s: &[Sample], gpu: &str| -> Option<String> {
        let mut jobs: Vec<&str> = series(s, GPU_UTIL)
            .into_iter()
            .filter(|x| x.label("gpu") == Some(gpu))
            .filter_map(|x| x.label("hpc_job"))
            .collect();
        jobs.sort_unstable();
        (!jobs.is_empty()).then(|| jobs.join(","))
    };
    let energy = |s: &[Sample]| {
        by_consumer(s, ENERGY, "hpc_job")
            .get(&("1".into(), "200".into()))
            .copied()
    };
    let unlistable = |on: bool| match on {
        true => {
            std::fs::rename(&jobs, &aside).unwrap();
            std::fs::write(&jobs, "not a directory").unwrap();
        }
        false => {
            std::fs::remove_file(&jobs).unwrap();
            std::fs::rename(&aside, &jobs).unwrap();
        }
    };
    let failing = |want: bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while e.get("/health").1.contains("hpc-job-mapping-dir") != want {
            assert!(
                std::time::Instant::now() < deadline,
                "{}",
                e.get("/health").1
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let before = e.scrape_until(40, |s| energy(s).is_some_and(|j| j > 0.0));
    assert_eq!(job_on(&before, "1").as_deref(), Some("200"));
    assert_eq!(
        job_on(&before, "0").as_deref(),
        Some("101,102"),
        "{}",
        dump(&before)
    );
    // Shorter than the grace (10 collections of 0.4 s): a read or two.
    unlistable(true);
    failing(true);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = e.scrape();
    unlistable(false);
    assert_eq!(
        job_on(&during, "1").as_deref(),
        Some("200"),
        "{}",
        dump(&during)
    );
    assert_eq!(
        job_on(&during, "0").as_deref(),
        Some("101,102"),
        "{}",
        dump(&during)
    );
    let kept = energy(&during);
    assert!(
        kept.is_some_and(|j| j >= energy(&before).unwrap()),
        "job 200's energy kept, not restarted: {kept:?}"
    );
    failing(false);
    let after = e.scrape_until(10, |s| energy(s) > kept);
    assert!(energy(&after) > kept, "{}", dump(&after));
    // Longer than the grace: gone from labels and usage.
    unlistable(true);
    let gone = e.scrape_until(20, |s| job_on(s, "1").is_none() && energy(s).is_none());
    assert_eq!(job_on(&gone, "0"), None, "{}", dump(&gone));
    // Listed again: back.
    unlistable(false);
    let back = e.scrape_until(20, |s| job_on(s, "1").as_deref() == Some("200"));
    assert_eq!(
        job_on(&back, "0").as_deref(),
        Some("101,102"),
        "{}",
        dump(&back)
    );
}
