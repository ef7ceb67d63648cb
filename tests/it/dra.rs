//! DRA (`--kubernetes-enable-dra`) end to end: the kubelet reports a container's claims by
//! pool and device name, NVIDIA's GPU driver publishes what those devices are in
//! ResourceSlices on the API server, and the exporter copies the GPU's series per claim
//! with `dra_*` labels. The kubelet is the tonic fake, the API server the loopback fake
//! that speaks list/watch and discovery.

use crate::support;
use crate::support::fake_apiserver::{gpu_slice, pod as api_pod, resource_slice, FakeApiServer};
use crate::support::kubelet::{claim, dra_pod, FakeKubelet};
use crate::support::{exporter, label_where, series, with_sim_nvml, Sample};
use serde_json::json;
use std::time::{Duration, Instant};

/// GPU 4's UUID (a whole GPU) and, from the simulated NVML, the first MIG device of GPU 1 (its UUID and
/// GPU-instance id), for `a100-mixed-mig.toml`.
fn a100_devices() -> (String, String, String, u32) {
    let nvml = support::sim_nvml(&support::repo("etc/sim/a100-mixed-mig.toml"));
    let gpu4 = nvml.device_by_index(4).unwrap().uuid().unwrap();
    let gpu1 = nvml.device_by_index(1).unwrap();
    let mig = gpu1.mig_device_by_index(0).unwrap();
    let gi = dcgm_sys::nvml_ext::gpu_instance_id(&mig).expect("GPU-instance id");
    (gpu4, gpu1.uuid().unwrap(), mig.uuid().unwrap(), gi)
}

fn claimed<'a>(page: &'a [Sample], pod: &str) -> Vec<&'a Sample> {
    series(page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .filter(|s| s.label("pod") == Some(pod))
        .collect()
}

fn wait_for_log(e: &support::Exporter, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !e.stderr().contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in {}", e.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dra_claims_on_a_gpu_and_a_mig_device_get_dra_labels() {
    crate::support::alone!(dra_claims_on_a_gpu_and_a_mig_device_get_dra_labels);
    let (gpu4, gpu1, mig_uuid, gi) = a100_devices();
    let server = FakeApiServer::start();
    // v1 is preferred over v1beta1 when both are served.
    server.serve_group("resource.k8s.io", &["v1", "v1beta1"]);
    server.apply(api_pod("ml", "trainer-0", "uid-trainer-0", "node-a", &[]));
    server.apply(resource_slice(
        "resource.k8s.io/v1",
        "node-a-gpu.nvidia.com-7xk2p",
        "node-a",
        json!([
            {"name": "gpu-0", "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": gpu4},
                "productName": {"string": "NVIDIA A100-SXM4-80GB"}}},
            {"name": "gpu-1-mig-0", "attributes": {
                "type": {"string": "mig"}, "uuid": {"string": mig_uuid},
                "parentUUID": {"string": gpu1}, "profile": {"string": "1g.10gb"}}}
        ]),
    ));
    let kubelet = FakeKubelet::start();
    kubelet.set_pods(vec![
        dra_pod(
            "ml",
            "trainer-0",
            "main",
            vec![claim("trainer-gpu", "ml", &[("node-a", "gpu-0")])],
        ),
        dra_pod(
            "inference",
            "llm-0",
            "server",
            vec![claim("llm-mig", "inference", &[("node-a", "gpu-1-mig-0")])],
        ),
    ]);
    let e = with_sim_nvml(exporter())
        .profile("a100-mixed-mig.toml")
        .args(&[
            "-k",
            "--kubernetes-enable-dra",
            "--kubernetes-enable-pod-uid",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let page = e.scrape_until(15, |s| {
        !claimed(s, "trainer-0").is_empty() && !claimed(s, "llm-0").is_empty()
    });

    let trainer = claimed(&page, "trainer-0");
    assert_eq!(trainer.len(), 1, "{trainer:?}");
    let t = trainer[0];
    assert_eq!(t.label("UUID"), Some(gpu4.as_str()));
    for (k, v) in [
        ("namespace", "ml"),
        ("container", "main"),
        ("pod_uid", "uid-trainer-0"),
        ("dra_claim_name", "trainer-gpu"),
        ("dra_claim_namespace", "ml"),
        ("dra_driver_name", "gpu.nvidia.com"),
        ("dra_pool_name", "node-a"),
        ("dra_device_name", "gpu-0"),
    ] {
        assert_eq!(t.label(k), Some(v), "{k} on {t:?}");
    }
    assert_eq!(t.label("dra_mig_profile"), None);

    // The MIG device's claim lands on its GPU instance's series (a MIG GPU has no series
    // of its own; upstream keys the claim by the parent GPU only, so its MIG series never
    // get it: dcgm-exporter issue #714).
    let llm = claimed(&page, "llm-0");
    let gi = gi.to_string();
    assert_eq!(llm.len(), 1, "{llm:?}");
    let s = llm[0];
    assert_eq!(s.label("UUID"), Some(gpu1.as_str()));
    assert_eq!(s.label("GPU_I_ID"), Some(gi.as_str()));
    assert_eq!(s.label("dra_mig_profile"), Some("1g.10gb"));
    assert_eq!(s.label("dra_mig_device_uuid"), Some(mig_uuid.as_str()));
    assert_eq!(s.label("dra_claim_name"), Some("llm-mig"));
    assert_eq!(s.label("dra_claim_namespace"), Some("inference"));
    assert_eq!(s.label("container"), Some("server"));
    // Unclaimed GPUs are untouched.
    let gpu5 = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .filter(|s| s.label("gpu") == Some("5"))
        .collect::<Vec<_>>();
    assert_eq!(gpu5.len(), 1);
    assert_eq!(gpu5[0].label("pod"), None);
    assert_eq!(gpu5[0].label("dra_claim_name"), None);

    // Only the GPU driver's slices, from the newest version served, listed then watched.
    server.wait_for_request(
        &[
            "GET /apis/resource.k8s.io/v1/resourceslices?",
            "fieldSelector=spec.driver=gpu.nvidia.com",
        ],
        5,
    );
    server.wait_for_request(
        &[
            "/apis/resource.k8s.io/v1/resourceslices?",
            "watch=true",
            "fieldSelector=spec.driver=gpu.nvidia.com",
        ],
        5,
    );
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.contains("/apis/resource.k8s.io/v1beta1/")),
        "{:#?}",
        server.requests()
    );
    let problems = support::prom::promtool_problems(&e.get("/metrics").1);
    assert!(problems.is_empty(), "promtool check metrics: {problems:#?}");

    // The driver withdraws the slice: the claims can no longer be placed, the copies go,
    // and /health says why (GPU metrics are still served).
    server.delete("ResourceSlice", "", "node-a-gpu.nvidia.com-7xk2p");
    let page = e.scrape_until(15, |s| {
        claimed(s, "trainer-0").is_empty() && claimed(s, "llm-0").is_empty()
    });
    assert!(page.iter().all(|s| s.label("dra_claim_name").is_none()));
    wait_for_log(
        &e,
        "no gpu.nvidia.com ResourceSlice describes claimed device(s) node-a/gpu-0, node-a/gpu-1-mig-0",
    );
    let (code, health) = e.get("/health");
    assert_eq!(code, 200, "{health}");
    assert!(
        health.contains("degraded: dra: no gpu.nvidia.com ResourceSlice"),
        "{health}"
    );
}

/// A fake kubelet and the exporter on one simulated GPU with `-k --kubernetes-enable-dra`,
/// reading `server`; and that GPU's UUID.
fn one_gpu_with_dra(server: &FakeApiServer) -> (FakeKubelet, support::Exporter, String) {
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("one-gpu.toml")
        .kubelet(&kubelet)
        .arg("--kubernetes-enable-dra")
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let has_uuid = |s: &Sample| s.label("UUID").is_some();
    let uuid = label_where(&e.scrape(), "UUID", "a GPU UUID", has_uuid);
    (kubelet, e, uuid)
}

/// A fake API server serving the `resource.k8s.io` group at `versions`.
fn dra_server(versions: &[&str]) -> FakeApiServer {
    let server = FakeApiServer::start();
    server.serve_group("resource.k8s.io", versions);
    server
}

#[test]
fn a_v1beta1_only_server_is_read_in_its_own_shape() {
    let server = dra_server(&["v1beta1"]);
    let (kubelet, e, uuid) = one_gpu_with_dra(&server);
    // The slice appears after the exporter started: the watch brings it.
    server.wait_for_request(
        &[
            "/apis/resource.k8s.io/v1beta1/resourceslices?",
            "watch=true",
        ],
        10,
    );
    server.apply(resource_slice(
        "resource.k8s.io/v1beta1",
        "node-b-gpu.nvidia.com-abcde",
        "node-b",
        json!([{"name": "gpu-0", "basic": {"attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": uuid}}}}]),
    ));
    kubelet.set_pods(vec![dra_pod(
        "jobs",
        "bench-1",
        "cuda",
        vec![claim("bench-gpu", "jobs", &[("node-b", "gpu-0")])],
    )]);
    let page = e.scrape_until(15, |s| !claimed(s, "bench-1").is_empty());
    let s = claimed(&page, "bench-1")[0];
    assert_eq!(s.label("dra_device_name"), Some("gpu-0"));
    assert_eq!(s.label("dra_pool_name"), Some("node-b"));
    assert_eq!(s.label("pod_uid"), None, "not asked for");
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
}

#[test]
fn a_forbidden_resource_slice_watch_shows_on_health_until_rbac_allows_it() {
    let server = dra_server(&["v1"]);
    server.forbid("resourceslices", true);
    let (kubelet, e, uuid) = one_gpu_with_dra(&server);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, health) = e.get("/health");
        assert_eq!(code, 200, "{health}");
        if health.contains("degraded: dra: ResourceSlice watch:") && health.contains("forbidden") {
            break;
        }
        assert!(Instant::now() < deadline, "{health}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The ClusterRole is fixed: the watch's retry gets the slices, and the claim its labels.
    let slice = gpu_slice("node-c-gpu.nvidia.com-q", "node-c", "gpu-0", &uuid);
    server.apply(slice);
    let on_gpu_0 = claim("c", "jobs", &[("node-c", "gpu-0")]);
    kubelet.set_pods(vec![dra_pod("jobs", "bench-2", "cuda", vec![on_gpu_0])]);
    server.forbid("resourceslices", false);
    e.scrape_until(30, |s| !claimed(s, "bench-2").is_empty());
    let (_, health) = e.get("/health");
    assert_eq!(health.trim(), "OK");
    wait_for_log(&e, "dra: working again");
}

#[test]
fn without_dra_in_the_cluster_or_an_api_configuration_it_is_off_with_one_line() {
    let kubelet = FakeKubelet::start();
    let socket = kubelet.socket().to_str().unwrap().to_string();
    let args = [
        "-k",
        "--kubernetes-enable-dra",
        "--pod-resources-kubelet-socket",
        &socket,
    ];

    // The API server has no resource.k8s.io group.
    let server = FakeApiServer::start();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&args)
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let off = "serves no resource.k8s.io ResourceSlices";
    wait_for_log(&e, off);
    assert!(!e.scrape().is_empty());
    assert_eq!(e.stderr().matches(off).count(), 1, "{}", e.stderr());
    drop(e);

    // No API configuration at all.
    let e = exporter().profile("one-gpu.toml").args(&args).start();
    let off = "DRA labels are off";
    wait_for_log(&e, off);
    assert!(!e.scrape().is_empty());
    assert_eq!(e.stderr().matches(off).count(), 1, "{}", e.stderr());
    drop(e);

    // Without -k the flag does nothing, and says so.
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["--kubernetes-enable-dra"])
        .start();
    wait_for_log(&e, "--kubernetes-enable-dra has no effect without -k");
}

/// The claim's `dra_mig_profile` on the one GPU's series, once a claimed series is there.
fn claimed_profile(page: &[Sample], pod: &str) -> Option<Option<String>> {
    claimed(page, pod)
        .first()
        .map(|s| s.label("dra_mig_profile").map(str::to_string))
}

/// NVIDIA's driver publishing its complete set of slices again with the same pool
/// generation (reinstalled, or its MIG layout changed by hand): the claims' `dra_*` labels
/// follow the new set as soon as it is listed, while the old slice is still there and after
/// it is withdrawn, whichever of the two comes first (dcgm-exporter 4.10.0's fix).
#[test]
fn a_complete_slice_set_replaced_with_the_same_generation_refreshes_the_dra_labels() {
    let server = dra_server(&["v1"]);
    let (kubelet, e, uuid) = one_gpu_with_dra(&server);
    server.wait_for_request(
        &["/apis/resource.k8s.io/v1/resourceslices?", "watch=true"],
        10,
    );
    // One device, a MIG device of the node's GPU whose profile each set names.
    let slice = |name: &str, profile: &str| {
        resource_slice(
            "resource.k8s.io/v1",
            name,
            "node-d",
            json!([{"name": "gpu-0-mig-0", "attributes": {
                "type": {"string": "mig"}, "parentUUID": {"string": uuid},
                "profile": {"string": profile}}}]),
        )
    };
    server.apply(slice("node-d-gpu.nvidia.com-aaaaa", "1g.10gb"));
    kubelet.set_pods(vec![dra_pod(
        "jobs",
        "train-1",
        "cuda",
        vec![claim("c", "jobs", &[("node-d", "gpu-0-mig-0")])],
    )]);
    let profile = |p: &str| Some(Some(p.to_string()));
    e.scrape_until(15, |s| claimed_profile(s, "train-1") == profile("1g.10gb"));

    // The new set is published before the old one is withdrawn: the new one holds.
    server.apply(slice("node-d-gpu.nvidia.com-bbbbb", "2g.20gb"));
    e.scrape_until(15, |s| claimed_profile(s, "train-1") == profile("2g.20gb"));
    server.delete("ResourceSlice", "", "node-d-gpu.nvidia.com-aaaaa");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(claimed_profile(&e.scrape(), "train-1"), profile("2g.20gb"));
    }

    // Withdrawn first, then published again under a new name: the claim follows.
    server.delete("ResourceSlice", "", "node-d-gpu.nvidia.com-bbbbb");
    server.apply(slice("node-d-gpu.nvidia.com-ccccc", "3g.40gb"));
    e.scrape_until(15, |s| claimed_profile(s, "train-1") == profile("3g.40gb"));
    let (code, health) = e.get("/health");
    assert_eq!((code, health.trim()), (200, "OK"), "{}", e.stderr());
}
