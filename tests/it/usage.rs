//! Usage accounting end to end in Kubernetes (issue 23): the exporter on the simulated DCGM
//! and NVML, a fake kubelet, a fake API server for pod UIDs and a test /proc root
//! (`--proc-root`) whose `<pid>/cgroup` files name each pod. Two pods time-share GPU 0 at
//! 60 % and 20 %, a third holds GPU 1 and never uses it; the sum rule is checked between
//! scrapes, and a real Prometheus evaluates the idle recording rule on the exporter's output.
//! The same accounting is checked with the core series from NVML (`--backend nvml`).
//! Also: the rule files pass `promtool`, and bad flag values stop the start.

use crate::support;
use crate::support::fake_apiserver::{pod as api_pod, FakeApiServer};
use crate::support::kubelet::{pod, FakeKubelet};
use crate::support::{
    exporter, label_where, prom, repo, require_tool, series, temp_file, with_sim_nvml, write_in,
    Sample,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Two A100s: GPU 0 busy at GPU0_UTIL % (DCGM) with two processes at 60 % and 20 % (NVML),
/// GPU 1 at 0 % with none.
const PROFILE: &str = r#"
[node]
seed = 23

[gpus]
count = 2
model = "NVIDIA A100-SXM4-80GB"
nvlinks = 0
p2p = "pcie"

[[fields]]
id = 203
gpus = [0]
gen = { kind = "constant", value = GPU0_UTIL }

[[fields]]
id = 203
gpus = [1]
gen = { kind = "constant", value = 0.0 }

[[processes]]
pid = 5001
gpu = 0
used_memory_mib = 4096
sm_util = 60
name = "trainer"

[[processes]]
pid = 5002
gpu = 0
used_memory_mib = 2048
sm_util = 20
name = "notebook"
"#;

const UID_A: &str = "a1a1a1a1-0000-4000-8000-00000000000a";
const UID_B: &str = "b2b2b2b2-0000-4000-8000-00000000000b";
const UID_C: &str = "c3c3c3c3-0000-4000-8000-00000000000c";

/// A `/proc` with `<pid>/cgroup` as cgroup v2 under the systemd driver writes it.
fn proc_root(dir: &Path, pids: &[(u32, &str)]) {
    for (pid, uid) in pids {
        let d = dir.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        let slice = uid.replace('-', "_");
        std::fs::write(
            d.join("cgroup"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice}.slice/cri-containerd-0123abcd.scope\n"),
        )
        .unwrap();
    }
}

/// A usage series' value: of pod `pod`, or the device's own (`None`).
fn value(page: &[Sample], name: &str, gpu: &str, pod: Option<&str>) -> Option<f64> {
    series(page, name)
        .into_iter()
        .find(|s| s.label("gpu") == Some(gpu) && s.label("pod") == pod)
        .map(|s| s.value)
}

/// A DCGM field's value on GPU `gpu` (without --kubernetes-virtual-gpus its series carry
/// the last pod's labels).
fn field(page: &[Sample], name: &str, gpu: &str) -> Option<f64> {
    series(page, name)
        .into_iter()
        .find(|s| s.label("gpu") == Some(gpu))
        .map(|s| s.value)
}

struct Node {
    e: support::Exporter,
    _kubelet: FakeKubelet,
    _api: FakeApiServer,
    _dir: tempfile::TempDir,
}

/// The exporter with usage accounting on the two-GPU node, pods a and b on replicas of GPU
/// 0, pod c on GPU 1 (whole).
fn node(extra: &[&str]) -> Node {
    node_at(90.0, extra)
}

/// As [`node`], GPU 0's own utilisation `gpu0_util` %.
fn node_at(gpu0_util: f64, extra: &[&str]) -> Node {
    let (dir, profile) = temp_file(
        "usage.toml",
        PROFILE.replace("GPU0_UTIL", &format!("{gpu0_util:.1}")),
    );
    let procs = dir.path().join("proc");
    proc_root(&procs, &[(5001, UID_A), (5002, UID_B)]);
    let api = FakeApiServer::start();
    for (ns, name, uid) in [
        ("ml", "trainer-a", UID_A),
        ("ml", "notebook-b", UID_B),
        ("idle-ns", "holder-c", UID_C),
    ] {
        api.apply(api_pod(ns, name, uid, "node-a", &[]));
    }
    let kubelet = FakeKubelet::start();
    let start = with_sim_nvml(exporter())
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .args(&[
            "-k",
            "--usage-accounting",
            "--usage-idle-window",
            "2s",
            "--proc-root",
            procs.to_str().unwrap(),
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .args(extra)
        .start();
    // Any series of the GPU naming its UUID (with --low-cardinality: its info series).
    let uuid = |g: &str| {
        start
            .scrape()
            .into_iter()
            .filter(|s| s.label("GPU_I_ID").is_none())
            .find(|s| s.label("gpu") == Some(g) && (s.label("UUID").or(s.label("uuid"))).is_some())
            .and_then(|s| s.label("UUID").or(s.label("uuid")).map(str::to_string))
            .expect("GPU series")
    };
    let (gpu0, gpu1) = (uuid("0"), uuid("1"));
    let gpu = "nvidia.com/gpu";
    kubelet.set_pods(vec![
        pod(
            "ml",
            "trainer-a",
            "main",
            &[(gpu, &[&format!("{gpu0}::0")])],
        ),
        pod("ml", "notebook-b", "nb", &[(gpu, &[&format!("{gpu0}::1")])]),
        pod("idle-ns", "holder-c", "main", &[(gpu, &[&gpu1])]),
    ]);
    Node {
        e: start,
        _kubelet: kubelet,
        _api: api,
        _dir: dir,
    }
}

/// A page on which GPU 0's energy reading differs from `than`'s (a later collection).
fn next_collection(e: &support::Exporter, than: &[Sample]) -> Vec<Sample> {
    let before = field(than, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0");
    e.scrape_until(15, |s| {
        field(s, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0") != before
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn time_shared_pods_get_their_shares_and_energy_and_an_unused_gpu_turns_idle() {
    shares_energy_and_idle(&[]);
}

/// The same pods, processes and GPUs with the core series read from NVML (issue 31): the
/// same consumers, shares and energy as on DCGM.
#[test]
fn usage_accounting_is_the_same_on_the_nvml_backend() {
    shares_energy_and_idle(&["--backend", "nvml"]);
}

fn shares_energy_and_idle(extra: &[&str]) {
    let n = node(extra);
    let e = &n.e;
    let energy = "DCGM_EXP_ENERGY_JOULES_TOTAL";
    // Both pods booked on a collection that had a previous energy reading.
    let first = e.scrape_until(20, |s| {
        value(s, energy, "0", Some("trainer-a")).is_some_and(|v| v > 0.0)
            && value(s, energy, "0", Some("notebook-b")).is_some_and(|v| v > 0.0)
    });
    // The backend asked for served the page.
    let backend = if extra.contains(&"nvml") {
        "nvml"
    } else {
        "dcgm"
    };
    assert!(
        series(&first, "dcgm_exporter_backend")
            .iter()
            .any(|s| s.label("backend") == Some(backend) && s.value == 1.0),
        "not served by {backend}"
    );
    let share = |p: &[Sample], pod: &str| value(p, "DCGM_EXP_UTIL_SHARE", "0", Some(pod));
    assert_eq!(share(&first, "trainer-a"), Some(60.0), "{}", e.stderr());
    assert_eq!(share(&first, "notebook-b"), Some(20.0));
    // The whole GPU's holder: its share is the GPU's utilisation.
    assert_eq!(
        value(&first, "DCGM_EXP_UTIL_SHARE", "1", Some("holder-c")),
        Some(0.0)
    );
    // Labels: the device's identity and the pod's; the replica names its vgpu.
    let a = series(&first, "DCGM_EXP_UTIL_SHARE")
        .into_iter()
        .find(|s| s.label("pod") == Some("trainer-a"))
        .unwrap()
        .clone();
    for (k, v) in [
        ("pod", "trainer-a"),
        ("namespace", "ml"),
        ("container", "main"),
        ("vgpu", "0"),
    ] {
        assert_eq!(a.label(k), Some(v), "{k}: {a:?}");
    }
    // Without --kubernetes-virtual-gpus the device's own series carry the last pod's labels.
    let mut device = series(&first, "DCGM_FI_DEV_GPU_UTIL")
        .into_iter()
        .find(|s| s.label("gpu") == Some("0"))
        .expect("GPU 0's utilisation")
        .labels
        .clone();
    device.retain(|k, _| !matches!(k.as_str(), "pod" | "namespace" | "container"));
    assert!(device.len() > 3, "{device:?}");
    for (k, v) in &device {
        assert_eq!(a.label(k), Some(v.as_str()), "identity label {k}: {a:?}");
    }
    assert_eq!(a.labels.len(), device.len() + 4, "{a:?}");

    // The sum rule between two scrapes, over several collections.
    let mut before = first;
    for _ in 0..3 {
        let after = next_collection(e, &before);
        let inc = |name: &str, gpu: &str, pod: Option<&str>| {
            value(&after, name, gpu, pod).unwrap() - value(&before, name, gpu, pod).unwrap()
        };
        let field_inc = |name: &str, gpu: &str| {
            field(&after, name, gpu).unwrap() - field(&before, name, gpu).unwrap()
        };
        let gpu_j = field_inc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0") / 1000.0;
        let (ja, jb) = (
            inc(energy, "0", Some("trainer-a")),
            inc(energy, "0", Some("notebook-b")),
        );
        let idle = inc("DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL", "0", None);
        assert!(gpu_j > 0.0);
        assert!(
            close(ja + jb + idle, gpu_j),
            "{ja} + {jb} + {idle} != {gpu_j}"
        );
        // 60 % and 20 % of the GPU's energy; the remaining 20 % idle.
        assert!(close(ja, 0.6 * gpu_j), "{ja} of {gpu_j}");
        assert!(close(jb, 0.2 * gpu_j), "{jb} of {gpu_j}");
        assert!(close(idle, 0.2 * gpu_j), "{idle} of {gpu_j}");
        // GPU 1, held whole: all its energy is the holder's, none idle.
        let g1 = field_inc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "1") / 1000.0;
        assert!(close(inc(energy, "1", Some("holder-c")), g1));
        assert_eq!(inc("DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL", "1", None), 0.0);
        before = after;
    }

    // Pod c holds GPU 1 without using it: idle once the 2 s window has passed; a and b
    // never are (utilisation and memory).
    let page = e.scrape_until(15, |s| {
        value(s, "DCGM_EXP_ALLOCATED_IDLE", "1", Some("holder-c")) == Some(1.0)
    });
    assert_eq!(
        value(&page, "DCGM_EXP_ALLOCATED_IDLE", "0", Some("trainer-a")),
        Some(0.0)
    );
    assert_eq!(
        value(&page, "DCGM_EXP_ALLOCATED_IDLE", "0", Some("notebook-b")),
        Some(0.0)
    );
    let dropped = series(&page, "dcgm_exporter_usage_consumers_dropped_total");
    assert_eq!(dropped.len(), 2, "one per GPU with consumers: {dropped:?}");
    assert!(dropped.iter().all(|s| s.value == 0.0));
    // The page is valid exposition (types, help, no duplicates).
    let text = e.get("/metrics").1;
    let problems = prom::promtool_problems(&text);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_cap_leaves_later_pods_without_series_and_counts_them() {
    let n = node(&["--usage-max-consumers-per-gpu", "1"]);
    let page = n.e.scrape_until(20, |s| {
        series(s, "dcgm_exporter_usage_consumers_dropped_total")
            .iter()
            .any(|d| d.label("gpu") == Some("0") && d.value == 1.0)
    });
    let on_gpu0: Vec<&str> = series(&page, "DCGM_EXP_UTIL_SHARE")
        .into_iter()
        .filter(|s| s.label("gpu") == Some("0"))
        .filter_map(|s| s.label("pod"))
        .collect();
    assert_eq!(on_gpu0.len(), 1, "{on_gpu0:?}");
    let gpu1 = series(&page, "dcgm_exporter_usage_consumers_dropped_total")
        .into_iter()
        .find(|d| d.label("gpu") == Some("1"))
        .map(|d| d.value);
    assert_eq!(gpu1, Some(0.0));
}

#[test]
fn a_real_prometheus_records_idle_devices_per_namespace() {
    if !require_tool(
        "prometheus",
        "apt-get install prometheus; .ci/run does this",
    ) {
        return;
    }
    let n = node(&[]);
    let target =
        n.e.url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
    let rules = repo("etc/prometheus/dcgm-usage.rules.yml");
    let p = prom::Prometheus::with_rules(
        &format!(
            "  - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['{target}']\n"
        ),
        &[rules.as_path()],
    );
    p.wait_for(
        "namespace:gpu_allocated_idle:sum{namespace=\"idle-ns\"} == 1",
        60,
    );
    let r = p.wait_for("namespace:gpu_allocated_idle:sum{namespace=\"ml\"}", 30);
    assert_eq!(r[0]["value"][1], json!("0"), "{r:?}");
    // The shares as Prometheus stores them: 60 and 20 on GPU 0.
    let shares: BTreeMap<String, String> = p
        .wait_for("DCGM_EXP_UTIL_SHARE{gpu=\"0\"}", 30)
        .iter()
        .map(|s| {
            (
                s["metric"]["pod"].as_str().unwrap_or("").to_string(),
                s["value"][1].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(shares["trainer-a"], "60");
    assert_eq!(shares["notebook-b"], "20");
}

#[test]
fn usage_rules_pass_promtool() {
    if !support::promtool() {
        return;
    }
    let dir = repo("etc/prometheus");
    let out = prom::promtool_in(&dir, &["check", "rules", "dcgm-usage.rules.yml"]);
    assert!(out.contains("SUCCESS: 2 rules found"), "{out}");
    let out = prom::promtool_in(&dir, &["test", "rules", "dcgm-usage.rules.test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_chart_ships_the_same_usage_rules() {
    let ours = "etc/prometheus/dcgm-usage.rules.yml";
    let chart = "deployment/files/dcgm-usage.rules.yml";
    assert!(
        std::fs::read_to_string(repo(ours)).unwrap()
            == std::fs::read_to_string(repo(chart)).unwrap(),
        "{chart} differs from {ours}: cp {ours} deployment/files/"
    );
}

#[test]
fn bad_usage_flags_stop_the_start_naming_the_flag() {
    for (args, flag) in [
        (&["--usage-accounting"][..], "--usage-accounting"),
        (
            &["-k", "--usage-accounting", "--usage-idle-window", "0s"][..],
            "--usage-idle-window",
        ),
        (
            &["-k", "--usage-idle-window", "later"][..],
            "--usage-idle-window",
        ),
        (
            &["-k", "--usage-max-consumers-per-gpu", "0"][..],
            "--usage-max-consumers-per-gpu",
        ),
        (
            &["--usage-max-consumers-per-gpu", "many"][..],
            "--usage-max-consumers-per-gpu",
        ),
    ] {
        let started = Instant::now();
        let (code, stderr) = exporter().args(args).run_to_exit();
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}

/// With --kubernetes-virtual-gpus the per-pod DCGM_FI_DEV_GPU_UTIL copies are the same
/// shares, clamped to the GPU's own utilisation (issue 23 item 2: NVML says 60 + 20 on a GPU
/// DCGM saw 40 % busy: 30 and 10), and -o names the usage series' pod labels as 1.x did.
#[test]
fn virtual_gpus_per_pod_utilisation_is_clamped_and_old_label_names() {
    let n = node_at(40.0, &["--kubernetes-virtual-gpus", "-o"]);
    let page = n.e.scrape_until(20, |s| {
        series(s, "DCGM_EXP_UTIL_SHARE")
            .iter()
            .filter(|x| x.label("pod_name").is_some())
            .count()
            == 3
    });
    let util_of = |name: &str, pod: &str| {
        series(&page, name)
            .into_iter()
            .find(|s| s.label("gpu") == Some("0") && s.label("pod_name") == Some(pod))
            .map(|s| s.value)
    };
    for (pod, want) in [("trainer-a", 30.0), ("notebook-b", 10.0)] {
        assert_eq!(util_of("DCGM_FI_DEV_GPU_UTIL", pod), Some(want), "{pod}");
        assert_eq!(util_of("DCGM_EXP_UTIL_SHARE", pod), Some(want), "{pod}");
    }
    let s = series(&page, "DCGM_EXP_UTIL_SHARE")
        .into_iter()
        .find(|s| s.label("pod_name") == Some("holder-c"))
        .unwrap()
        .clone();
    assert_eq!(s.label("pod_namespace"), Some("idle-ns"));
    assert_eq!(s.label("container_name"), Some("main"));
    assert_eq!(s.label("pod"), None);
}

/// A MIG instance held by one pod (GKE's `nvidia<gpu>/gi<id>`): the pod gets the whole
/// increase of the instance's energy counter (as DCGM reports it: the parent GPU's), its
/// share is the instance's utilisation, nothing is idle; other instances have no usage
/// series.
#[test]
fn a_mig_instance_held_by_one_pod_gets_its_whole_energy() {
    let api = FakeApiServer::start();
    api.apply(api_pod("infer", "mig-pod", UID_C, "node-a", &[]));
    let kubelet = FakeKubelet::start();
    let e = with_sim_nvml(exporter())
        .profile("a100-mixed-mig.toml")
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .args(&[
            "-k",
            "--usage-accounting",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .start();
    let on_3 = |s: &Sample| s.label("gpu") == Some("3") && s.label("GPU_I_ID").is_some();
    let gi = label_where(&e.scrape(), "GPU_I_ID", "a GPU instance on GPU 3", on_3);
    kubelet.set_pods(vec![pod(
        "infer",
        "mig-pod",
        "srv",
        &[("nvidia.com/gpu", &[&format!("nvidia3/gi{gi}")])],
    )]);
    let energy = "DCGM_EXP_ENERGY_JOULES_TOTAL";
    let on_instance = |p: &[Sample], name: &str| -> Vec<Sample> {
        series(p, name)
            .into_iter()
            .filter(|s| s.label("gpu") == Some("3") && s.label("GPU_I_ID") == Some(gi.as_str()))
            .cloned()
            .collect()
    };
    let before = e.scrape_until(20, |s| {
        on_instance(s, energy)
            .first()
            .is_some_and(|x| x.value > 0.0)
    });
    let after = next_collection_of(&e, &before, "3");
    let inc = |name: &str| on_instance(&after, name)[0].value - on_instance(&before, name)[0].value;
    let instance_j = inc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") / 1000.0;
    assert!(instance_j > 0.0);
    assert!(
        close(inc(energy), instance_j),
        "{} of {instance_j}",
        inc(energy)
    );
    assert_eq!(inc("DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL"), 0.0);
    let share = on_instance(&after, "DCGM_EXP_UTIL_SHARE");
    assert_eq!(share.len(), 1);
    assert_eq!(share[0].label("pod"), Some("mig-pod"));
    assert_eq!(
        Some(share[0].value),
        on_instance(&after, "DCGM_FI_DEV_GPU_UTIL")
            .first()
            .map(|s| s.value)
    );
    // Consumer series only on the held device; every device has its idle energy (all of
    // it for a device nobody holds).
    for name in [energy, "DCGM_EXP_UTIL_SHARE", "DCGM_EXP_ALLOCATED_IDLE"] {
        let held: Vec<_> = series(&after, name)
            .into_iter()
            .map(|s| (s.label("gpu"), s.label("GPU_I_ID")))
            .collect();
        assert_eq!(held, [(Some("3"), Some(gi.as_str()))], "{name}");
    }
    let idle = series(&after, "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL").len();
    assert_eq!(
        idle,
        series(&after, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").len()
    );
}

/// A page on which GPU `gpu`'s energy reading differs from `than`'s.
fn next_collection_of(e: &support::Exporter, than: &[Sample], gpu: &str) -> Vec<Sample> {
    let before = field(than, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu);
    e.scrape_until(15, |s| {
        field(s, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu) != before
    })
}

/// Off by default: none of the usage series or the self-metric, even with pods on GPUs.
#[test]
fn off_by_default() {
    let kubelet = FakeKubelet::start();
    let e = exporter().profile("one-gpu.toml").kubelet(&kubelet).start();
    let uuid = field_label(&e.scrape(), "UUID");
    kubelet.set_pods(vec![pod("ml", "p", "c", &[("nvidia.com/gpu", &[&uuid])])]);
    e.scrape_until(10, |s| s.iter().any(|x| x.label("pod") == Some("p")));
    let text = e.get("/metrics").1;
    for name in [
        "DCGM_EXP_ENERGY_JOULES_TOTAL",
        "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL",
        "DCGM_EXP_UTIL_SHARE",
        "DCGM_EXP_ALLOCATED_IDLE",
        "dcgm_exporter_usage_consumers_dropped_total",
    ] {
        assert!(!text.contains(name), "{name} without --usage-accounting");
    }
}

fn field_label(page: &[Sample], label: &str) -> String {
    series(page, "DCGM_FI_DEV_GPU_TEMP")[0]
        .label(label)
        .expect("the label")
        .to_string()
}

/// --low-cardinality strips the usage series' static labels as every other series'.
#[test]
fn low_cardinality_strips_the_usage_series_too() {
    let n = node(&["--low-cardinality"]);
    let page = n.e.scrape_until(20, |s| {
        series(s, "DCGM_EXP_UTIL_SHARE").len() == 3
            && !series(s, "DCGM_EXP_ENERGY_JOULES_TOTAL").is_empty()
    });
    for name in [
        "DCGM_EXP_UTIL_SHARE",
        "DCGM_EXP_ENERGY_JOULES_TOTAL",
        "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL",
    ] {
        for s in series(&page, name) {
            assert!(s.label("gpu").is_some(), "{s:?}");
            for stripped in ["UUID", "pci_bus_id", "device", "modelName"] {
                assert_eq!(s.label(stripped), None, "{stripped} on {s:?}");
            }
        }
    }
    assert_eq!(
        value(&page, "DCGM_EXP_UTIL_SHARE", "0", Some("trainer-a")),
        Some(60.0)
    );
}

/// Usage accounting with two host engines that both have a gpu 0: the engine running this
/// node's GPUs (NVML sees the same node) books its pods' shares on its own GPU 0, labelled
/// with that engine; the other engine's gpu 0, which no pod holds, gets nothing of theirs.
#[test]
fn usage_accounting_per_host_engine() {
    let (dir, profile) = temp_file("usage.toml", PROFILE.replace("GPU0_UTIL", "90.0"));
    let procs = dir.path().join("proc");
    proc_root(&procs, &[(5001, UID_A), (5002, UID_B)]);
    let api = FakeApiServer::start();
    for (ns, name, uid) in [("ml", "trainer-a", UID_A), ("ml", "notebook-b", UID_B)] {
        api.apply(api_pod(ns, name, uid, "node-a", &[]));
    }
    let (port_a, port_b) = (support::free_port(), support::free_port());
    let _a = support::HostEngine::start(port_a, profile.to_str());
    let _b = support::HostEngine::start(port_b, Some("one-gpu.toml"));
    let config = write_in(
        dir.path(),
        "config.yaml",
        format!(
            "version: 2\nsources:\n  dcgm:\n    hostEngines:\n      - {{name: here, address: \"127.0.0.1:{port_a}\"}}\n      - {{name: other, address: \"127.0.0.1:{port_b}\"}}\n"
        ),
    );
    let kubelet = FakeKubelet::start();
    // Engine `here` and the in-process simulated NVML read the same profile.
    let e = with_sim_nvml(exporter())
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .args(&[
            "-k",
            "--usage-accounting",
            "--proc-root",
            procs.to_str().unwrap(),
        ])
        .args(&["--config-file", config.to_str().unwrap()])
        .args(&[
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .start();
    let page = e.scrape_until(20, |p| {
        ["here", "other"].iter().all(|n| {
            series(p, "DCGM_FI_DEV_GPU_TEMP")
                .iter()
                .any(|s| s.label("engine") == Some(n))
        })
    });
    let gpu0 = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .find(|s| s.label("engine") == Some("here") && s.label("gpu") == Some("0"))
        .and_then(|s| s.label("UUID").map(str::to_string))
        .expect("GPU 0 of engine here");
    let gpu = "nvidia.com/gpu";
    kubelet.set_pods(vec![
        pod(
            "ml",
            "trainer-a",
            "main",
            &[(gpu, &[&format!("{gpu0}::0")])],
        ),
        pod("ml", "notebook-b", "nb", &[(gpu, &[&format!("{gpu0}::1")])]),
    ]);
    let share = |p: &[Sample], engine: &str, pod: &str| -> Vec<f64> {
        series(p, "DCGM_EXP_UTIL_SHARE")
            .into_iter()
            .filter(|s| s.label("engine") == Some(engine) && s.label("pod") == Some(pod))
            .map(|s| s.value)
            .collect()
    };
    let page = e.scrape_until(20, |p| {
        share(p, "here", "trainer-a") == [60.0] && share(p, "here", "notebook-b") == [20.0]
    });
    for s in series(&page, "DCGM_EXP_UTIL_SHARE") {
        assert!(s.label("engine").is_some(), "{s:?}");
        if s.label("pod").is_some() {
            assert_eq!(s.label("engine"), Some("here"), "{s:?}");
            assert_eq!(s.label("gpu"), Some("0"), "{s:?}");
        }
    }
    // The other engine's gpu 0 is booked to nobody.
    assert!(series(&page, "DCGM_EXP_ENERGY_JOULES_TOTAL")
        .iter()
        .filter(|s| s.label("engine") == Some("other"))
        .all(|s| s.label("pod").is_none()));
}
