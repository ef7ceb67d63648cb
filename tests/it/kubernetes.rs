//! Pod attribution end to end: the real exporter against the simulator and a fake kubelet
//! speaking the PodResources gRPC protocol on a unix socket.

use crate::support;
use crate::support::kubelet::{pod, FakeKubelet};
use crate::support::{controlled, exporter, series, with_sim_nvml, Sample};
use std::time::{Duration, Instant};

/// The UUID of every GPU on the page, by gpu index.
fn uuids(samples: &[Sample], uuid_label: &str) -> Vec<String> {
    let mut v: Vec<(u32, String)> = samples
        .iter()
        .filter_map(|s| {
            Some((
                s.label("gpu")?.parse().ok()?,
                s.label(uuid_label)?.to_string(),
            ))
        })
        .collect();
    v.sort();
    v.dedup();
    v.into_iter().map(|(_, u)| u).collect()
}

fn with_pod<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    series(samples, name)
        .into_iter()
        .filter(|s| s.label("pod").is_some())
        .collect()
}

#[test]
fn pods_appear_within_one_collection_interval_of_the_kubelet_reporting_them() {
    let kubelet = FakeKubelet::start();
    let interval = Duration::from_millis(1000);
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-k", "-c", "1000", "--pod-resources-kubelet-socket"])
        .arg(kubelet.socket().to_str().unwrap())
        .start();
    let page = e.scrape();
    let gpus = uuids(&page, "UUID");
    assert!(gpus.len() >= 2, "{}", support::dump(&page));
    assert!(page.iter().all(|s| s.label("pod").is_none()));

    kubelet.set_pods(vec![
        pod(
            "ml",
            "trainer-0",
            "main",
            &[("nvidia.com/gpu", &[&gpus[0]])],
        ),
        pod(
            "ml",
            "trainer-1",
            "main",
            &[("nvidia.com/gpu", &[&gpus[1]])],
        ),
        pod("web", "nginx", "nginx", &[("cpu", &["1"])]),
    ]);
    let reported = Instant::now();
    let page = e.scrape_until(10, |s| with_pod(s, "DCGM_FI_DEV_GPU_TEMP").len() == 2);
    let took = reported.elapsed();
    // One interval, plus the time a collection and this poll take on a busy machine.
    assert!(
        took < interval + Duration::from_millis(1500),
        "pods took {took:?} to appear"
    );
    for s in with_pod(&page, "DCGM_FI_DEV_GPU_TEMP") {
        let want = if s.label("UUID") == Some(gpus[0].as_str()) {
            "trainer-0"
        } else {
            "trainer-1"
        };
        assert_eq!(s.label("pod"), Some(want));
        assert_eq!(s.label("namespace"), Some("ml"));
        assert_eq!(s.label("container"), Some("main"));
        // Attribution labels come after the identity labels.
        assert_eq!(s.label_order.first().map(String::as_str), Some("gpu"));
        assert_eq!(
            &s.label_order[s.label_order.len() - 3..],
            ["pod", "namespace", "container"]
        );
    }
    // Unmatched GPUs carry no pod labels at all.
    let others = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .filter(|s| s.label("pod").is_none())
        .count();
    assert_eq!(others, gpus.len() - 2);

    // A pod that goes away takes its labels with it.
    kubelet.set_pods(Vec::new());
    e.scrape_until(10, |s| with_pod(s, "DCGM_FI_DEV_GPU_TEMP").is_empty());
}

#[test]
fn a_kubelet_reply_over_4_mib_is_accepted() {
    let kubelet = FakeKubelet::start();
    let e = exporter().profile("one-gpu.toml").kubelet(&kubelet).start();
    let gpu = uuids(&e.scrape(), "UUID").remove(0);
    // A big node: thousands of pods, most of them without GPUs.
    let mut pods: Vec<_> = (0..40_000)
        .map(|i| {
            pod(
                &format!("namespace-{i:05}-with-a-long-name"),
                &format!("batch-worker-{i:05}-abcdefghijklmnopqrstuvwxyz"),
                "worker-container",
                &[("example.com/nic", &["nic-0", "nic-1"])],
            )
        })
        .collect();
    pods.push(pod(
        "ml",
        "big-node-pod",
        "main",
        &[("nvidia.com/gpu", &[&gpu])],
    ));
    let size = prost::Message::encoded_len(
        &dcgm_exporter::attribution::kubelet::proto::ListPodResourcesResponse {
            pod_resources: pods.clone(),
        },
    );
    assert!(size > 4 * 1024 * 1024, "reply is only {size} bytes");
    kubelet.set_pods(pods);
    let page = e.scrape_until(20, |s| !with_pod(s, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    assert_eq!(
        with_pod(&page, "DCGM_FI_DEV_GPU_TEMP")[0].label("pod"),
        Some("big-node-pod")
    );
    assert!(!e.stderr().contains("ResourceExhausted"), "{}", e.stderr());
}

#[test]
fn device_names_and_time_sliced_replicas_with_virtual_gpus() {
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&[
            "-k",
            "--kubernetes-gpu-id-type=device-name",
            "--kubernetes-virtual-gpus",
            "--nvidia-resource-names=nvidia.com/gpu.shared",
            "--pod-resources-kubelet-socket",
        ])
        .arg(kubelet.socket().to_str().unwrap())
        .start();
    kubelet.set_pods(vec![
        // NVIDIA's plugin with time-slicing, renamed resource: nvidia1 shared by two pods.
        pod(
            "a",
            "p1",
            "c",
            &[("nvidia.com/gpu.shared", &["nvidia1::0"])],
        ),
        pod(
            "a",
            "p2",
            "c",
            &[("nvidia.com/gpu.shared", &["nvidia1::1"])],
        ),
        // GKE's sharing form.
        pod("b", "p3", "c", &[("nvidia.com/gpu", &["nvidia2/vgpu3"])]),
    ]);
    let page = e.scrape_until(10, |s| with_pod(s, "DCGM_FI_DEV_GPU_TEMP").len() == 3);
    let temp = series(&page, "DCGM_FI_DEV_GPU_TEMP");
    let on = |gpu: &str| -> Vec<(Option<&str>, Option<&str>)> {
        let mut v: Vec<_> = temp
            .iter()
            .filter(|s| s.label("gpu") == Some(gpu))
            .map(|s| (s.label("pod"), s.label("vgpu")))
            .collect();
        v.sort();
        v
    };
    // The shared GPU's series is duplicated per pod and its device series dropped.
    assert_eq!(on("1"), [(Some("p1"), Some("0")), (Some("p2"), Some("1"))]);
    assert_eq!(on("2"), [(Some("p3"), Some("3"))]);
    assert_eq!(on("0"), [(None, None)]);
}

#[test]
fn old_label_names_with_o() {
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-k", "-o", "--pod-resources-kubelet-socket"])
        .arg(kubelet.socket().to_str().unwrap())
        .start();
    let gpu = uuids(&e.scrape(), "uuid").remove(0);
    kubelet.set_pods(vec![pod(
        "default",
        "pod1",
        "pod1-ctr",
        &[("nvidia.com/gpu", &[&gpu])],
    )]);
    let page = e.scrape_until(10, |s| {
        series(s, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .any(|s| s.label("pod_name").is_some())
    });
    let s = series(&page, "DCGM_FI_DEV_GPU_TEMP")[0];
    assert_eq!(s.label("pod_name"), Some("pod1"));
    assert_eq!(s.label("pod_namespace"), Some("default"));
    assert_eq!(s.label("container_name"), Some("pod1-ctr"));
    assert!(s.label("pod").is_none() && s.label("namespace").is_none());
}

/// Seed 001 (pod-gpu-metrics-exporter's sample output): its metric names and label names.
const SEED_001: &[&str] = &[
    "dcgm_gpu_temp",
    "dcgm_gpu_utilization",
    "dcgm_low_util_violation",
    "dcgm_mem_copy_utilization",
    "dcgm_memory_clock",
];
const SEED_001_LABELS: &[&str] = &["container_name", "gpu", "pod_name", "pod_namespace", "uuid"];

#[test]
fn seed_001_page_with_the_1x_csv_and_o() {
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-k", "-o", "-f"])
        .arg(
            support::repo("etc/1.x-compatibility-metrics.csv")
                .to_str()
                .unwrap(),
        )
        .arg("--pod-resources-kubelet-socket")
        .arg(kubelet.socket().to_str().unwrap())
        .start();
    let gpus = uuids(&e.scrape(), "uuid");
    kubelet.set_pods(vec![pod(
        "default",
        "pod1",
        "pod1-ctr",
        &[("nvidia.com/gpu", &[&gpus[0], &gpus[1]])],
    )]);
    let page = e.scrape_until(10, |s| {
        series(s, "dcgm_gpu_temp")
            .iter()
            .filter(|s| s.label("pod_name").is_some())
            .count()
            == 2
    });
    for name in SEED_001 {
        let with_pods: Vec<_> = series(&page, name)
            .into_iter()
            .filter(|s| s.label("pod_name") == Some("pod1"))
            .collect();
        assert_eq!(with_pods.len(), 2, "{name}: {}", support::dump(&page));
        for s in with_pods {
            for l in SEED_001_LABELS {
                assert!(
                    s.labels.contains_key(*l),
                    "{name} lacks {l}: {:?}",
                    s.labels
                );
            }
        }
    }
}

#[test]
fn nvidia_daemonset_environment_without_a_kubelet() {
    // NVIDIA's chart: DCGM_EXPORTER_KUBERNETES=true, NODE_NAME, DCGM_EXPORTER_LISTEN=:<port>;
    // here the kubelet socket does not exist.
    let (dir, ctl, b) = controlled("one-gpu.toml");
    let e = b
        .listen_env()
        .env("DCGM_EXPORTER_KUBERNETES", "true")
        .env("NODE_NAME", "gpu-node-7")
        .env(
            "DCGM_POD_RESOURCES_KUBELET_SOCKET",
            dir.path().join("kubelet.sock").to_str().unwrap(),
        )
        .start();
    let page = e.scrape();
    let temp = series(&page, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temp.len(), 1);
    assert_eq!(temp[0].label("hostname"), Some("gpu-node-7"));
    assert!(temp[0].label("pod").is_none());
    let up = page
        .iter()
        .find(|s| {
            s.name == "dcgm_exporter_attribution_source_up" && s.label("source") == Some("kubelet")
        })
        .expect("kubelet source metric");
    assert_eq!(up.value, 0.0);
    let (code, body) = e.get("/health");
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("OK"), "{body}");
    assert!(body.contains("kubelet"), "{body}");
    // Warned once, not on every collection: two new temperatures served are two more
    // collections since.
    for marker in [71, 72] {
        support::control(&ctl, &format!("set 0 150 {marker}"));
        e.scrape_until(15, |p| {
            series(p, "DCGM_FI_DEV_GPU_TEMP")
                .iter()
                .any(|s| s.value == f64::from(marker))
        });
    }
    let stderr = e.stderr();
    assert_eq!(stderr.matches("does not exist").count(), 1, "{stderr}");

    // The kubelet comes up later (node boot): pods are attributed, /health is clean again.
    let kubelet = FakeKubelet::start_at(&dir.path().join("kubelet.sock"));
    let gpu = temp[0].label("UUID").unwrap().to_string();
    kubelet.set_pods(vec![pod("ml", "late", "c", &[("nvidia.com/gpu", &[&gpu])])]);
    e.scrape_until(15, |s| !with_pod(s, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    let (code, body) = e.get("/health");
    assert_eq!((code, body.trim()), (200, "OK"));
}

#[test]
fn mig_device_named_by_mig_uuid_is_attributed_through_nvml() {
    crate::support::alone!(mig_device_named_by_mig_uuid_is_attributed_through_nvml);
    // The MIG device's UUID and GPU-instance id, as a device plugin would see them.
    let (mig_uuid, gi) = {
        let nvml = support::sim_nvml(&support::repo("etc/sim/a100-mixed-mig.toml"));
        let gpu1 = nvml.device_by_index(1).unwrap();
        let mig = gpu1.mig_device_by_index(0).unwrap();
        (
            mig.uuid().unwrap(),
            dcgm_sys::nvml_ext::gpu_instance_id(&mig).expect("GPU-instance id"),
        )
    };
    assert!(mig_uuid.starts_with("MIG-"), "{mig_uuid}");

    let kubelet = FakeKubelet::start();
    let e = with_sim_nvml(exporter())
        .profile("a100-mixed-mig.toml")
        .kubelet(&kubelet)
        .start();
    // GKE names MIG devices nvidia<gpu>/gi<GPU_I_ID>: no NVML involved.
    let gke_gi = e
        .scrape()
        .iter()
        .find(|s| s.label("gpu") == Some("3"))
        .and_then(|s| s.label("GPU_I_ID").map(str::to_string))
        .expect("a GPU instance on GPU 3");
    kubelet.set_pods(vec![
        pod(
            "inference",
            "llm-0",
            "server",
            &[("nvidia.com/mig-3g.40gb", &[&mig_uuid])],
        ),
        pod(
            "gke",
            "gke-pod",
            "c",
            &[("nvidia.com/gpu", &[&format!("nvidia3/gi{gke_gi}")])],
        ),
    ]);
    let page = e.scrape_until(10, |s| {
        s.iter().any(|s| s.label("pod") == Some("llm-0"))
            && s.iter().any(|s| s.label("pod") == Some("gke-pod"))
    });
    let gke: Vec<&Sample> = page
        .iter()
        .filter(|s| s.label("pod") == Some("gke-pod"))
        .collect();
    for s in &gke {
        assert_eq!(s.label("gpu"), Some("3"), "{s:?}");
        assert_eq!(s.label("GPU_I_ID"), Some(gke_gi.as_str()), "{s:?}");
    }
    let gi = gi.to_string();
    let attributed: Vec<&Sample> = page
        .iter()
        .filter(|s| s.label("pod") == Some("llm-0"))
        .collect();
    for s in &attributed {
        assert_eq!(s.label("gpu"), Some("1"), "{s:?}");
        assert_eq!(s.label("GPU_I_ID"), Some(gi.as_str()), "{s:?}");
        assert_eq!(s.label("namespace"), Some("inference"));
        assert_eq!(s.label("container"), Some("server"));
    }
    // Every series of that instance, and no other instance's.
    let of_instance = page
        .iter()
        .filter(|s| s.label("gpu") == Some("1") && s.label("GPU_I_ID") == Some(gi.as_str()))
        .count();
    assert_eq!(attributed.len(), of_instance);
    e.assert_not_logged("cannot map MIG device");
}

#[test]
fn shared_gpu_is_duplicated_per_pod_with_per_process_fields() {
    shared_gpu_per_process(
        "4.8.4",
        "DCGM_FI_DEV_GPU_TEMP",
        &["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"],
    );
}

/// 4.9.0 names the same measurements `DCGM_FI_DEV_GPU_UTIL_RATIO` (0-1) and
/// `DCGM_FI_DEV_FB_USED_BYTES`: still per process, the device's own series kept.
#[test]
fn shared_gpu_per_process_fields_under_4_9_0_names() {
    shared_gpu_per_process(
        "4.9.0",
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
        &["DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES"],
    );
}

/// `temp`: an ordinary field, as the version names it.
fn shared_gpu_per_process(version: &str, temp: &str, per_process: &[&str]) {
    let kubelet = FakeKubelet::start();
    let e = with_sim_nvml(exporter())
        .profile("a100-mixed-mig.toml")
        .args(&[
            "-k",
            "--kubernetes-virtual-gpus",
            "--emulate-version",
            version,
            "--pod-resources-kubelet-socket",
        ])
        .arg(kubelet.socket().to_str().unwrap())
        .start();
    // GPU 4 is a whole GPU that the profile runs two processes on.
    let uuid = series(&e.scrape(), temp)
        .into_iter()
        .find(|s| s.label("gpu") == Some("4"))
        .and_then(|s| s.label("UUID"))
        .expect("GPU 4")
        .to_string();
    kubelet.set_pods(vec![
        pod(
            "a",
            "worker-a",
            "c",
            &[("nvidia.com/gpu", &[&format!("{uuid}::0")])],
        ),
        pod(
            "a",
            "worker-b",
            "c",
            &[("nvidia.com/gpu", &[&format!("{uuid}::1")])],
        ),
    ]);
    let page = e.scrape_until(10, |s| with_pod(s, temp).len() == 2);
    let on_gpu4 = |name: &str| -> Vec<(Option<String>, Option<String>)> {
        let mut v: Vec<_> = series(&page, name)
            .into_iter()
            .filter(|s| s.label("gpu") == Some("4"))
            .map(|s| {
                (
                    s.label("pod").map(str::to_string),
                    s.label("vgpu").map(str::to_string),
                )
            })
            .collect();
        v.sort();
        v
    };
    let pods = [
        (Some("worker-a".to_string()), Some("0".to_string())),
        (Some("worker-b".to_string()), Some("1".to_string())),
    ];
    // Ordinary fields: one series per pod, the device series gone.
    assert_eq!(on_gpu4(temp), pods);
    // Per-process fields: the device series stays, plus one per pod.
    for &f in per_process {
        let got = on_gpu4(f);
        assert_eq!(got.len(), 3, "{f}: {got:?}");
        assert_eq!(got[0], (None, None), "{f}");
        assert_eq!(got[1..], pods, "{f}");
        // The pods' shares never exceed the device's own value (here: no pod UID is
        // known, so each pod's share is 0, never a copy of the whole GPU's value).
        let of_gpu4 = || {
            series(&page, f)
                .into_iter()
                .filter(|s| s.label("gpu") == Some("4"))
        };
        let device = of_gpu4().find(|s| s.label("pod").is_none()).unwrap().value;
        let shares: f64 = of_gpu4()
            .filter(|s| s.label("pod").is_some())
            .map(|s| s.value)
            .sum();
        assert!(
            shares <= device,
            "{f}: pods {shares} over the device's {device}"
        );
    }
    assert!(!e.stderr().contains("per-process data"), "{}", e.stderr());
}

#[test]
fn hpc_jobs_without_kubernetes_and_k_only_options_warn() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("0"), "job-17\njob-18\n").unwrap();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["--kubernetes-virtual-gpus", "--hpc-job-mapping-dir"])
        .arg(dir.path().to_str().unwrap())
        .start();
    let page = e.scrape_until(10, |s| {
        series(s, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .any(|s| s.label("hpc_job").is_some())
    });
    let mut jobs: Vec<_> = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .map(|s| s.label("hpc_job").unwrap_or("-").to_string())
        .collect();
    jobs.sort();
    assert_eq!(jobs, ["job-17", "job-18"]);
    // The job file changes: the next collection follows it.
    std::fs::write(dir.path().join("0"), "job-19\n").unwrap();
    e.scrape_until(10, |s| {
        let t = series(s, "DCGM_FI_DEV_GPU_TEMP");
        t.len() == 1 && t[0].label("hpc_job") == Some("job-19")
    });
    let stderr = e.stderr();
    assert_eq!(
        stderr
            .matches("--kubernetes-virtual-gpus has no effect without -k")
            .count(),
        1,
        "{stderr}"
    );
}
