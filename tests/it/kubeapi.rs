//! The Kubernetes API features against a fake API server speaking the real list/watch
//! protocol on loopback: the `-m` ConfigMap (read at start, reloaded on change, failures
//! fatal as upstream) and the pod watch that gives UIDs and labels.

use crate::support::fake_apiserver::{configmap, pod, FakeApiServer};
use crate::support::*;
use dcgm_exporter::attribution::podmeta::{self, Allowlist};
use dcgm_exporter::attribution::PodMetadata;
use dcgm_exporter::runtime::kubeapi::KubeApi;
use std::time::{Duration, Instant};

const CM: &str = "exporter-metrics-config-map";

fn names(samples: &[Sample]) -> std::collections::BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_"))
        .map(|s| s.name.clone())
        .collect()
}

#[test]
fn counters_come_from_the_configmap_and_a_change_reloads_them() {
    let api = FakeApiServer::start();
    api.apply(configmap(
        "gpu",
        CM,
        &[(
            "metrics",
            "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n",
        )],
    ));
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-m", &format!("gpu:{CM}")])
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .start();
    // -m wins over the -f the test harness passes, as upstream.
    let first = e.scrape_until(10, |s| !names(s).is_empty());
    assert_eq!(names(&first), ["DCGM_FI_DEV_GPU_TEMP".to_string()].into());
    api.wait_for_request(&["GET /api/v1/namespaces/gpu/configmaps/", CM], 5);
    api.wait_for_request(
        &["watch=true", &format!("fieldSelector=metadata.name={CM}")],
        10,
    );

    let edited = Instant::now();
    api.apply(configmap(
        "gpu",
        CM,
        &[(
            "metrics",
            "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n",
        )],
    ));
    let after = e.scrape_until(15, |s| names(s).contains("DCGM_FI_DEV_POWER_USAGE"));
    assert_eq!(names(&after).len(), 2, "{}", dump(&after));
    eprintln!("reloaded {:?} after the edit", edited.elapsed());
    e.assert_logged("changed: reloading the counters");

    // A broken edit keeps the counters in use and says why.
    api.apply(configmap(
        "gpu",
        CM,
        &[("metrics", "DCGM_FI_NOT_A_FIELD, gauge, x\n")],
    ));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !e.stderr().contains("keeping the previous counters") {
        assert!(Instant::now() < deadline, "{}", e.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(names(&e.scrape()).len(), 2);
}

#[test]
fn configmap_failures_stop_the_start_with_a_clear_error() {
    let api = FakeApiServer::start();
    api.apply(configmap("gpu", "no-key", &[("other", "x")]));
    api.apply(configmap(
        "gpu",
        "bad",
        &[("metrics", "DCGM_FI_NOPE, gauge, x\n")],
    ));
    let kc = api.kubeconfig().to_str().unwrap().to_string();
    let cases: [(&str, Option<&str>, &str); 5] = [
        ("gpu:missing", Some(&kc), "cannot read the ConfigMap"),
        // (logrus escapes the quotes inside msg="...")
        ("gpu:no-key", Some(&kc), "has no key \\\"metrics\\\""),
        ("gpu:bad", Some(&kc), "configmap gpu/bad key metrics:1"),
        ("just-a-name", Some(&kc), "expected <namespace>:<name>"),
        ("gpu:bad", None, "no Kubernetes API configuration"),
    ];
    for (value, kubeconfig, want) in cases {
        let mut b = exporter().profile("one-gpu.toml").args(&["-m", value]);
        if let Some(k) = kubeconfig {
            b = b.env("KUBECONFIG", k);
        }
        let (code, stderr) = b.run_to_exit();
        assert_eq!(code, 1, "-m {value}: {stderr}");
        assert!(
            stderr.contains(want),
            "-m {value}: want {want:?} in {stderr}"
        );
    }
}

const TEMP_ONLY: &str = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n";
const TEMP_AND_POWER: &str = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n";

/// How long each run under NVIDIA's RBAC is watched, from the exporter's start.
const RBAC_WINDOW: Duration = Duration::from_secs(12);
/// The poll period those runs set through `DCGM_EXPORTER_CONFIGMAP_POLL_INTERVAL`.
const RBAC_POLL_S: u64 = 5;

/// What the exporter did with `-m` under a Role granting only `verbs` on configmaps, over
/// [`RBAC_WINDOW`], with the ConfigMap edited (one name -> two) once it served.
struct RbacRun {
    /// The requests for configmaps the API server received.
    requests: Vec<String>,
    /// Log lines at warning level about the ConfigMap or a refusal.
    warnings: Vec<String>,
    /// The page's DCGM metric names at the window's end.
    names: std::collections::BTreeSet<String>,
    stderr: String,
}

fn configmap_requests(api: &FakeApiServer) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.contains("/configmaps"))
        .collect()
}

fn rbac_warnings(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("level=warning"))
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("configmap") || l.contains("403") || l.contains("forbidden")
        })
        .map(str::to_string)
        .collect()
}

fn configmap_under_a_role(verbs: &[&str]) -> RbacRun {
    let api = FakeApiServer::start();
    api.allow_only("configmaps", verbs);
    api.apply(configmap("gpu", CM, &[("metrics", TEMP_ONLY)]));
    let begun = Instant::now();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-m", &format!("gpu:{CM}")])
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .env(
            "DCGM_EXPORTER_CONFIGMAP_POLL_INTERVAL",
            &format!("{RBAC_POLL_S}s"),
        )
        .start();
    let first = e.scrape_until(10, |s| !names(s).is_empty());
    assert_eq!(names(&first), ["DCGM_FI_DEV_GPU_TEMP".to_string()].into());
    api.apply(configmap("gpu", CM, &[("metrics", TEMP_AND_POWER)]));
    std::thread::sleep(RBAC_WINDOW.saturating_sub(begun.elapsed()));
    let requests = configmap_requests(&api);
    let stderr = e.stderr();
    RbacRun {
        requests,
        warnings: rbac_warnings(&stderr),
        names: names(&e.scrape()),
        stderr,
    }
}

/// NVIDIA's Role grants `verbs` and no `watch`: the refused watch is one warning naming the
/// missing verb and the poll, then a `get` every period, never a request per second; an edit
/// reaches the page through the poll.
fn configmap_is_polled_under(role: &str, verbs: &[&str]) {
    let run = configmap_under_a_role(verbs);
    eprintln!(
        "{role} (configmaps: {verbs:?}): {} requests and {} warnings in {RBAC_WINDOW:?}\n{:#?}\n{:#?}",
        run.requests.len(),
        run.warnings.len(),
        run.requests,
        run.warnings
    );
    // The start-up GET, one refused watch, a poll every RBAC_POLL_S at most.
    let bound = 2 + RBAC_WINDOW.as_secs().div_ceil(RBAC_POLL_S) as usize;
    assert!(
        run.requests.len() <= bound,
        "{role}: {} requests for configmaps in {RBAC_WINDOW:?} (at most {bound}): {:#?}",
        run.requests.len(),
        run.requests
    );
    let watches = run.requests.iter().filter(|r| r.contains("watch=true"));
    assert!(watches.count() <= 1, "{role}: {:#?}", run.requests);
    assert_eq!(run.warnings.len(), 1, "{role}: {:#?}", run.warnings);
    let w = &run.warnings[0];
    assert!(w.contains("forbidden by RBAC"), "{role}: {w}");
    assert!(
        w.contains("\\\"watch\\\""),
        "{role}: names the missing verb: {w}"
    );
    assert!(
        w.contains(&format!("every {RBAC_POLL_S}s")),
        "{role}: says it polls: {w}"
    );
    assert!(
        run.names.contains("DCGM_FI_DEV_POWER_USAGE"),
        "{role}: the edit is applied through the poll: {:?}\n{}",
        run.names,
        run.stderr
    );
    assert!(
        run.stderr.contains("changed: reloading the counters"),
        "{role}: {}",
        run.stderr
    );
}

/// NVIDIA's chart 4.8.x Role: configmaps `get` only (S10a of the deployment survey).
#[test]
fn under_nvidias_chart_role_get_only_the_configmap_is_polled_without_a_storm() {
    configmap_is_polled_under("NVIDIA's chart Role", &["get"]);
}

/// The GPU operator's Role: configmaps `get` and `list`, no `watch`.
#[test]
fn under_the_gpu_operators_role_get_list_the_configmap_is_polled_without_a_storm() {
    configmap_is_polled_under("the GPU operator's Role", &["get", "list"]);
}

/// Once polling, a `get` refused too backs off (never a request per second) with one
/// warning, and when it is granted again the next poll applies what changed meanwhile.
#[test]
fn a_get_refused_after_start_backs_off_with_one_warning_per_change() {
    let api = FakeApiServer::start();
    api.allow_only("configmaps", &["get"]);
    api.apply(configmap("gpu", CM, &[("metrics", TEMP_ONLY)]));
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-m", &format!("gpu:{CM}")])
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .env("DCGM_EXPORTER_CONFIGMAP_POLL_INTERVAL", "1s")
        .start();
    e.wait_for_log(10, "forbidden by RBAC");
    api.allow_only("configmaps", &[]);
    let (before, refused) = (configmap_requests(&api).len(), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let during = configmap_requests(&api)[before..].to_vec();
    let warnings = rbac_warnings(&e.stderr());
    eprintln!(
        "get refused: {} requests in {:?}: {during:#?}\n{warnings:#?}",
        during.len(),
        refused.elapsed()
    );
    // Polls after 1 s, then 4 s, then 8 s later: backing off, not once a second.
    assert!(during.len() <= 3, "{during:#?}");
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[1].contains("\\\"get\\\"") && warnings[1].contains("forbidden"),
        "{}",
        warnings[1]
    );

    api.allow_only("configmaps", &["get"]);
    api.apply(configmap("gpu", CM, &[("metrics", TEMP_AND_POWER)]));
    e.scrape_until(20, |s| names(s).contains("DCGM_FI_DEV_POWER_USAGE"));
    assert_eq!(rbac_warnings(&e.stderr()).len(), 2, "{}", e.stderr());
}

/// A `get` refused at start stays fatal, with the reason, as upstream.
#[test]
fn a_get_refused_at_start_stops_it_with_a_clear_error() {
    let api = FakeApiServer::start();
    api.allow_only("configmaps", &["list", "watch"]);
    api.apply(configmap("gpu", CM, &[("metrics", TEMP_ONLY)]));
    let (code, stderr) = exporter()
        .profile("one-gpu.toml")
        .args(&["-m", &format!("gpu:{CM}")])
        .env("KUBECONFIG", api.kubeconfig().to_str().unwrap())
        .run_to_exit();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("cannot read the ConfigMap"), "{stderr}");
    assert!(stderr.contains("forbidden"), "{stderr}");
    assert_eq!(configmap_requests(&api).len(), 1, "{:#?}", api.requests());
}

#[test]
fn the_pod_watch_gives_uids_and_labels_of_this_nodes_pods() {
    let server = FakeApiServer::start();
    server.apply(pod(
        "ml",
        "trainer-0",
        "6f1c1a52-9a0e-4c55-8d1b-0a1f3e6b2c01",
        "node-a",
        &[("app.kubernetes.io/name", "bert"), ("team", "nlp")],
    ));
    server.apply(pod("ml", "elsewhere", "uid-b", "node-b", &[("team", "x")]));
    let api = KubeApi::from_kubeconfig(server.kubeconfig()).unwrap();
    let cache = podmeta::watch(
        &api,
        Some("node-a"),
        podmeta::Options {
            labels: true,
            allowlist: Allowlist::new(&["^app\\.".into()]),
        },
    );
    let wait = |pred: &dyn Fn() -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pred() {
            assert!(
                Instant::now() < deadline,
                "{what}: {:#?}",
                server.requests()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait(&|| cache.lookup("ml", "trainer-0").is_some(), "listed pod");
    let meta = cache.lookup("ml", "trainer-0").unwrap();
    assert_eq!(meta.uid, "6f1c1a52-9a0e-4c55-8d1b-0a1f3e6b2c01");
    assert_eq!(
        meta.labels,
        vec![("app_kubernetes_io_name".to_string(), "bert".to_string())]
    );
    // Only this node's pods are asked for, on the list and on the watch.
    assert!(cache.lookup("ml", "elsewhere").is_none());
    server.wait_for_request(
        &["GET /api/v1/pods?", "fieldSelector=spec.nodeName=node-a"],
        5,
    );
    server.wait_for_request(&["watch=true", "fieldSelector=spec.nodeName=node-a"], 5);

    // Events after the list: a new pod, a relabelled pod, a deleted pod.
    server.apply(pod(
        "infer",
        "server-1",
        "uid-s1",
        "node-a",
        &[("app.kubernetes.io/name", "triton")],
    ));
    wait(&|| cache.lookup("infer", "server-1").is_some(), "added pod");
    server.apply(pod(
        "ml",
        "trainer-0",
        "6f1c1a52-9a0e-4c55-8d1b-0a1f3e6b2c01",
        "node-a",
        &[("app.kubernetes.io/name", "bert-large")],
    ));
    wait(
        &|| cache.lookup("ml", "trainer-0").unwrap().labels[0].1 == "bert-large",
        "relabelled pod",
    );
    server.delete("Pod", "infer", "server-1");
    wait(
        &|| cache.lookup("infer", "server-1").is_none(),
        "deleted pod",
    );
}

/// `-k` end to end: the kubelet says which pod holds a GPU, the API server gives that pod's
/// UID and labels, and both arrive on its series; a relabel follows on the page.
#[test]
fn pod_uids_and_labels_from_the_api_server_reach_the_page() {
    use crate::support::kubelet::{pod as kubelet_pod, FakeKubelet};
    let server = FakeApiServer::start();
    let uid = "6f1c1a52-9a0e-4c55-8d1b-0a1f3e6b2c01";
    server.apply(pod(
        "ml",
        "trainer-0",
        uid,
        "node-a",
        &[("app.kubernetes.io/name", "bert"), ("team", "nlp")],
    ));
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&[
            "-k",
            "--kubernetes-enable-pod-labels",
            "--kubernetes-enable-pod-uid",
            "--kubernetes-pod-label-allowlist-regex=^app\\.",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let gpu = e
        .scrape()
        .iter()
        .find_map(|s| s.label("UUID").map(str::to_string))
        .expect("a GPU UUID");
    kubelet.set_pods(vec![kubelet_pod(
        "ml",
        "trainer-0",
        "main",
        &[("nvidia.com/gpu", &[&gpu])],
    )]);
    let temp = |s: &[Sample]| -> Option<Sample> {
        series(s, "DCGM_FI_DEV_GPU_TEMP")
            .into_iter()
            .find(|x| x.label("pod") == Some("trainer-0"))
            .cloned()
    };
    let page = e.scrape_until(15, |s| {
        temp(s).is_some_and(|t| t.label("app_kubernetes_io_name").is_some())
    });
    let t = temp(&page).unwrap();
    assert_eq!(t.label("pod_uid"), Some(uid));
    assert_eq!(t.label("namespace"), Some("ml"));
    assert_eq!(t.label("app_kubernetes_io_name"), Some("bert"));
    assert_eq!(t.label("team"), None, "not in the allowlist");
    server.wait_for_request(&["watch=true", "fieldSelector=spec.nodeName=node-a"], 5);

    server.apply(pod(
        "ml",
        "trainer-0",
        uid,
        "node-a",
        &[("app.kubernetes.io/name", "bert-large")],
    ));
    e.scrape_until(15, |s| {
        temp(s).is_some_and(|t| t.label("app_kubernetes_io_name") == Some("bert-large"))
    });
}

#[test]
fn without_an_api_configuration_pod_metadata_is_off_with_one_line() {
    use crate::support::kubelet::FakeKubelet;
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&[
            "-k",
            "--kubernetes-enable-pod-labels",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .start();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !e.stderr().contains("pod UIDs and labels are off") {
        assert!(Instant::now() < deadline, "{}", e.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(e.stderr().matches("pod UIDs and labels are off").count(), 1);
}

/// Kubernetes allows label keys that start with a digit (`3rd-party`, `1password.com/...`);
/// upstream writes them as they are and Prometheus then rejects the node's whole page. Here
/// they arrive as valid names, and every GPU stays on a page promtool accepts.
#[test]
fn pod_label_keys_prometheus_would_refuse_arrive_valid_and_every_gpu_stays() {
    use crate::support::kubelet::{pod as kubelet_pod, FakeKubelet};
    let server = FakeApiServer::start();
    server.apply(pod(
        "ml",
        "trainer-0",
        "6f1c1a52-9a0e-4c55-8d1b-0a1f3e6b2c02",
        "node-a",
        &[
            ("3rd-party", "x"),
            ("1password.com/managed", "true"),
            ("__meta_kubernetes", "m"),
            ("pod", "spoofed"),
        ],
    ));
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&[
            "-k",
            "--kubernetes-enable-pod-labels",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .env("NODE_NAME", "node-a")
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let temps = |s: &[Sample]| -> Vec<Sample> {
        series(s, "DCGM_FI_DEV_GPU_TEMP")
            .into_iter()
            .cloned()
            .collect()
    };
    let gpus: Vec<String> = temps(&e.scrape())
        .iter()
        .filter_map(|s| s.label("UUID").map(str::to_string))
        .collect();
    assert_eq!(gpus.len(), 8, "{gpus:?}");
    kubelet.set_pods(vec![kubelet_pod(
        "ml",
        "trainer-0",
        "main",
        &[("nvidia.com/gpu", &[&gpus[0]])],
    )]);
    e.scrape_until(15, |s| {
        temps(s).iter().any(|t| t.label("_3rd_party").is_some())
    });
    let text = e.try_get("/metrics").unwrap();
    let problems = prom::promtool_problems(&text);
    assert!(problems.is_empty(), "{problems:?}");
    let page = parse(&text);
    let t = temps(&page);
    assert_eq!(t.len(), 8, "every GPU: {}", dump(&t));
    let held = t
        .iter()
        .find(|s| s.label("pod") == Some("trainer-0"))
        .unwrap();
    assert_eq!(held.label("_3rd_party"), Some("x"));
    assert_eq!(held.label("_1password_com_managed"), Some("true"));
    assert_eq!(held.label("_meta_kubernetes"), Some("m"));
    assert!(
        !text.contains("spoofed"),
        "the pod label stays the exporter's"
    );
    assert!(
        e.stderr().contains(r#"label \"pod\" becomes \"pod\""#),
        "the left-out label is logged: {}",
        e.stderr()
    );
}
