//! NVIDIA's deployments of dcgm-exporter, each run exactly as it runs the image, with ours
//! swapped in: the GPU operator's ClusterPolicy and GPUCluster/DRA DaemonSets (from
//! tests/fixtures/nvidia/gpu-operator/, with the operator's own transform of them), the
//! `docker run` quick start, the systemd unit, NVIDIA's entrypoint paths, and the charts'
//! YAML configuration file.
//!
//! The image is read from `Dockerfile.ubuntu` itself: its ENTRYPOINT, CMD, USER and the files
//! it copies. Each run gets a private mount namespace in which the image's files and the pod's
//! ConfigMap mounts lie where the image and the pod put them (overlays on /etc, /usr/bin,
//! /usr/local), the kubelet's pod-resources directory is a root-owned 0750 directory at
//! /var/lib/kubelet/pod-resources holding a fake kubelet's socket, and the process runs as the
//! uid the image or the pod gives it (`setpriv`). Two things are substituted, both outside
//! what a deployment decides: the listen port (a free one, so tests run side by side) and the
//! simulator in place of the GPU node.

use super::*;
use crate::support::kubelet::{pod, FakeKubelet};
use crate::support::HostEngine;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::OnceLock;
use std::time::Duration;

/// What `Dockerfile.ubuntu`'s final stage gives a container.
#[derive(Debug)]
struct Image {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    /// uid:gid; `root` is 0:0.
    user: (u32, u32),
    /// (image path, file in this repository or the built binary).
    files: Vec<(String, PathBuf)>,
    env: Vec<(String, String)>,
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => cur.push_str(&format!("{head} ")),
            None => {
                cur.push_str(t);
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out
}

fn parse_user(u: &str) -> (u32, u32) {
    let id = |s: &str| match s {
        "root" => 0,
        n => n
            .parse()
            .unwrap_or_else(|_| panic!("USER {u}: give ids or root")),
    };
    match u.split_once(':') {
        Some((a, b)) => (id(a), id(b)),
        None => (id(u), id(u)),
    }
}

fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let text = std::fs::read_to_string(repo("Dockerfile.ubuntu")).unwrap();
        let all = instructions(&text);
        let last_from = all.iter().rposition(|i| i.starts_with("FROM ")).unwrap();
        let mut img = Image {
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            user: (0, 0),
            files: Vec::new(),
            env: Vec::new(),
        };
        for i in &all[last_from + 1..] {
            let (op, rest) = i.split_once(' ').unwrap_or((i, ""));
            match op {
                "ENTRYPOINT" => img.entrypoint = serde_json::from_str(rest).unwrap(),
                "CMD" => img.cmd = serde_json::from_str(rest).unwrap(),
                "USER" => img.user = parse_user(rest.trim()),
                "ENV" => {
                    for kv in rest.split_whitespace() {
                        let (k, v) = kv.split_once('=').unwrap();
                        img.env.push((k.into(), v.trim_matches('"').into()));
                    }
                }
                "COPY" => img.files.extend(copied(rest)),
                _ => {}
            }
        }
        img
    })
}

/// The files one COPY puts in the image: the built binary for the build stage's, repository
/// files for the rest.
fn copied(rest: &str) -> Vec<(String, PathBuf)> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let from_build = words.iter().any(|w| w.starts_with("--from="));
    let paths: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !w.starts_with("--"))
        .collect();
    let (dest, srcs) = paths.split_last().unwrap();
    if from_build {
        assert!(
            srcs == ["/out/dcgm-exporter"],
            "unknown build-stage copy: {rest}"
        );
        return vec![(
            dest.to_string(),
            PathBuf::from(env!("CARGO_BIN_EXE_dcgm-exporter")),
        )];
    }
    srcs.iter()
        .map(|src| {
            let to = match dest.ends_with('/') {
                true => format!(
                    "{dest}{}",
                    Path::new(src).file_name().unwrap().to_str().unwrap()
                ),
                false => dest.to_string(),
            };
            (to, repo(src))
        })
        .collect()
}

/// How a deployment starts the container.
#[derive(Default)]
struct Run {
    /// `command:` (replaces the ENTRYPOINT; then the CMD is dropped too, as Kubernetes does).
    command: Option<Vec<String>>,
    /// `args:` (replaces the CMD).
    args: Option<Vec<String>>,
    env: Vec<(String, String)>,
    /// (path in the container, content): ConfigMap files the pod mounts.
    mounts: Vec<(String, String)>,
    /// `runAsUser` (or `docker run --user`, systemd's `User=`); else the image's USER.
    run_as: Option<u32>,
    /// The kubelet's pod-resources directory mounted (the operator and the charts do).
    kubelet: bool,
    /// Names /etc/hosts resolves to 127.0.0.1 (the operator's Services).
    hosts: Vec<String>,
    profile: &'static str,
}

/// A deployment's container, running, with what it needs kept alive.
struct Pod {
    e: Exporter,
    kubelet: Option<FakeKubelet>,
    _root: tempfile::TempDir,
}

/// The first simulated GPU's UUID on `profile` (the kubelet names devices by UUID).
fn first_uuid(profile: &str) -> String {
    let e = crate::support::exporter()
        .profile(profile)
        .args(&["-c", "1000"])
        .start();
    let page = e.scrape_until(30, |p| !series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    let mut gpus: Vec<_> = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .map(|s| {
            (
                s.label("gpu").unwrap().to_string(),
                s.label("UUID").unwrap().to_string(),
            )
        })
        .collect();
    gpus.sort();
    gpus[0].1.clone()
}

/// Writes `content` at `root` + `path`, readable by anyone (as an image's files are).
fn place(root: &Path, path: &str, content: &[u8]) {
    let dest = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(&dest, content).unwrap();
}

/// The host directories overlaid with the image's and the pod's files.
const OVERLAID: [&str; 4] = ["/etc", "/usr/bin", "/usr/local", "/var/lib"];

impl Run {
    fn start(self) -> Pod {
        sim_built();
        let img = image();
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let tree = root.path().join("tree");
        for (to, from) in &img.files {
            let dest = tree.join(to.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            if from.ends_with("dcgm-exporter") {
                std::os::unix::fs::symlink(from, &dest).unwrap();
            } else {
                std::fs::copy(from, &dest).unwrap();
            }
        }
        for (to, content) in &self.mounts {
            place(&tree, to, content.as_bytes());
        }
        if !self.hosts.is_empty() {
            let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
            for h in &self.hosts {
                hosts.push_str(&format!("\n127.0.0.1 {h}\n"));
            }
            place(&tree, "/etc/hosts", hosts.as_bytes());
        }
        let kubelet = self.kubelet.then(|| {
            std::fs::create_dir_all(tree.join("var/lib/kubelet/pod-resources")).unwrap();
            let k = FakeKubelet::start();
            // As the kubelet makes it: root's, 0750.
            let dir = k.socket().parent().unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750)).unwrap();
            k
        });
        let port = free_port();
        let mut script = String::from("set -e\n");
        for d in OVERLAID {
            let top = tree.join(d.trim_start_matches('/'));
            if top.exists() {
                script.push_str(&format!(
                    "mount -t overlay overlay -o lowerdir={}:{d} {d}\n",
                    top.display()
                ));
            }
        }
        if let Some(k) = &kubelet {
            script.push_str(&format!(
                "mount --bind {} /var/lib/kubelet/pod-resources\n",
                k.socket().parent().unwrap().display()
            ));
        }
        let (uid, gid) = match self.run_as {
            Some(u) => (u, u),
            None => img.user,
        };
        script.push_str(&match uid {
            0 => "exec \"$@\"\n".to_string(),
            _ => format!("exec setpriv --reuid={uid} --regid={gid} --clear-groups -- \"$@\"\n"),
        });
        let mut cmd = Command::new("unshare");
        hermetic(&mut cmd);
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(&script)
            .arg("sh");
        // Kubernetes: `command` replaces the ENTRYPOINT and drops the CMD; `args` replaces
        // the CMD.
        match &self.command {
            Some(c) => cmd.args(c).args(self.args.iter().flatten()),
            None => cmd
                .args(&img.entrypoint)
                .args(self.args.as_ref().unwrap_or(&img.cmd)),
        };
        for (k, v) in img.env.iter().chain(&self.env) {
            cmd.env(k, v);
        }
        // The one substitution: the port (9400 in every deployment), so runs go side by side.
        cmd.env("DCGM_EXPORTER_LISTEN", format!(":{port}"));
        // The image finds libdcgm.so.4 through ldconfig; here the simulator's directory.
        cmd.env("LD_LIBRARY_PATH", bin_dir()).env(
            "DCGM_SIM_PROFILE",
            repo(&format!("etc/sim/{}", self.profile)),
        );
        let e = Exporter::spawn(cmd, port);
        e.wait_until(30, |e| e.try_get("/metrics").is_ok());
        Pod {
            e,
            kubelet,
            _root: root,
        }
    }
}

impl Pod {
    /// Names the kubelet's socket gives GPU 0 to `ml/trainer-0`.
    fn assign_first_gpu(&self, uuid: &str) {
        let k = self.kubelet.as_ref().expect("kubelet mounted");
        k.set_pods(vec![pod(
            "ml",
            "trainer-0",
            "main",
            &[("nvidia.com/gpu", &[uuid])],
        )]);
    }

    fn dcgm_names(&self) -> BTreeSet<String> {
        names(
            &self
                .e
                .scrape_until(30, |p| p.iter().any(|s| s.name.starts_with("DCGM_FI_"))),
        )
    }
}

fn names(page: &[Sample]) -> BTreeSet<String> {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_"))
        .map(|s| s.name.clone())
        .collect()
}

/// The metric rows (not `label` rows) of a counters CSV.
fn csv_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.split(',').map(str::trim);
            let (name, kind) = (cols.next()?, cols.next()?);
            (kind != "label").then(|| name.to_string())
        })
        .collect()
}

fn shipped(file: &str) -> BTreeSet<String> {
    csv_names(&std::fs::read_to_string(repo(&format!("etc/{file}"))).unwrap())
}

/// The GPU operator's ClusterPolicy DaemonSet (assets/state-dcgm-exporter/0800_daemonset.yaml)
/// as its TransformDCGMExporter leaves it with `metrics_config` naming a ConfigMap, or not:
/// the container's env (the downward API's NODE_NAME filled in) and mounts.
fn operator_cluster_policy(metrics_config: Option<&str>) -> Run {
    let path = repo("tests/fixtures/nvidia/gpu-operator/assets-0800_daemonset.yaml");
    let objects = load_manifest(&path, None).expect(SKIP_PY);
    let c = container(&objects);
    assert!(c.get("args").is_none() && c.get("command").is_none());
    assert_eq!(
        c["securityContext"],
        json!({"privileged": true}),
        "no runAsUser"
    );
    let mut run = Run {
        env: pod_env(c),
        kubelet: true,
        profile: "h100-8gpu-nvswitch.toml",
        ..Run::default()
    };
    if let Some(csv) = metrics_config {
        // TransformDCGMExporter: the ConfigMap's key dcgm-metrics.csv by subPath, named by
        // DCGM_EXPORTER_COLLECTORS.
        let at = "/etc/dcgm-exporter/dcgm-metrics.csv";
        run.mounts.push((at.into(), csv.into()));
        set_env(&mut run.env, "DCGM_EXPORTER_COLLECTORS", at);
    }
    run
}

fn pod_env(c: &Value) -> Vec<(String, String)> {
    env_of(c)
        .into_iter()
        .map(|(k, v)| match v.strip_prefix("fieldRef:") {
            Some("spec.nodeName") => (k, "gpu-node-7".to_string()),
            Some(other) => panic!("unexpected fieldRef {other}"),
            None => (k, v),
        })
        .collect()
}

/// The operator's `setContainerEnv`: replaces a variable in place, or appends it.
fn set_env(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(kv) => kv.1 = value.into(),
        None => env.push((name.into(), value.into())),
    }
}

/// The series of `page` labelled with a pod.
fn with_pod(page: &[Sample]) -> Vec<&Sample> {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_") && s.label("pod").is_some())
        .collect()
}

fn probe_ok(p: &Pod, objects_probe: &str) {
    let (code, body) = p.e.get(objects_probe);
    assert_eq!(code, 200, "{objects_probe}: {body}\n{}", p.e.stderr());
}

fn uuid() -> &'static str {
    static UUID: OnceLock<String> = OnceLock::new();
    UUID.get_or_init(|| first_uuid("h100-8gpu-nvswitch.toml"))
}

#[test]
fn the_gpu_operators_daemonset_gets_its_metric_list_pod_labels_and_profiling() {
    let run = operator_cluster_policy(None);
    let p = run.start();
    p.assign_first_gpu(uuid());
    // DCGM_EXPORTER_COLLECTORS names the dcp list: that list, not the image's default.
    let served = p.dcgm_names();
    let (dcp, default) = (
        shipped("dcp-metrics-included.csv"),
        shipped("default-counters.csv"),
    );
    let outside: Vec<_> = served.difference(&dcp).collect();
    assert!(
        outside.is_empty(),
        "not in the operator's list: {outside:?}"
    );
    // (The two lists differ by the image default's DCGM_EXP_* rows.)
    let default_only: Vec<_> = default.difference(&dcp).collect();
    assert!(!default_only.is_empty());
    assert!(
        default_only.iter().all(|n| !served.contains(*n)),
        "the image default's rows {default_only:?} are not served: {served:?}"
    );
    assert!(served.iter().any(|n| n.starts_with("DCGM_FI_PROF_")));
    // Typed as the operator's image (4.8.3) types it.
    let text = p.e.get("/metrics").1;
    assert!(
        text.contains("\n# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL gauge\n"),
        "{text}"
    );
    // The kubelet's socket in its root 0750 directory: GPU 0's series carry the pod.
    let page = p.e.scrape_until(45, |pg| !with_pod(pg).is_empty());
    let s = with_pod(&page)[0];
    assert_eq!(
        (s.label("namespace"), s.label("pod"), s.label("hostname")),
        (Some("ml"), Some("trainer-0"), Some("gpu-node-7"))
    );
    // Root with every capability: no warning that profiling cannot be served.
    assert!(!p.e.stderr().contains("CAP_SYS_ADMIN"), "{}", p.e.stderr());
    probe_ok(&p, "/health");
}

#[test]
fn the_gpu_operators_custom_metrics_configmap_is_served_exactly() {
    let csv = "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\nDCGM_FI_DEV_POWER_USAGE, gauge, power\n";
    let p = operator_cluster_policy(Some(csv)).start();
    assert_eq!(
        p.dcgm_names(),
        BTreeSet::from([
            "DCGM_FI_DEV_GPU_TEMP".into(),
            "DCGM_FI_DEV_POWER_USAGE".into()
        ])
    );
}

/// The quick start: `docker run -d --gpus all --cap-add SYS_ADMIN --rm -p 9400:9400 IMAGE`:
/// no environment, no arguments, no user: the image alone decides.
#[test]
fn the_quick_start_serves_the_default_counters_as_root() {
    let p = Run {
        profile: "h100-8gpu-nvswitch.toml",
        ..Run::default()
    }
    .start();
    let served = p.dcgm_names();
    let default = shipped("default-counters.csv");
    let outside: Vec<_> = served.difference(&default).collect();
    assert!(outside.is_empty(), "{outside:?}");
    assert!(served.iter().any(|n| n.starts_with("DCGM_FI_PROF_")));
    assert!(!p.e.stderr().contains("CAP_SYS_ADMIN"), "{}", p.e.stderr());
    probe_ok(&p, "/health");
}

/// NVIDIA's systemd unit: `User=root`,
/// `ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv`.
#[test]
fn nvidias_systemd_unit_and_entrypoint_paths_start_the_same_exporter() {
    let systemd = Run {
        command: Some(vec!["/usr/bin/dcgm-exporter".into()]),
        args: Some(vec![
            "-f".into(),
            "/etc/dcgm-exporter/default-counters.csv".into(),
        ]),
        run_as: Some(0),
        profile: "one-gpu.toml",
        ..Run::default()
    }
    .start();
    let want = systemd.dcgm_names();
    assert!(want.contains("DCGM_FI_DEV_GPU_TEMP"));
    // A manifest whose `command:` names NVIDIA's entrypoint script, at either of its paths.
    for script in [
        "/usr/bin/dcgm-exporter-entrypoint.sh",
        "/usr/local/dcgm/dcgm-exporter-entrypoint.sh",
    ] {
        let p = Run {
            command: Some(vec![script.into()]),
            profile: "one-gpu.toml",
            ..Run::default()
        }
        .start();
        assert_eq!(p.dcgm_names(), want, "{script}");
    }
}

/// NVIDIA's chart 4.8.3 `config.enabled` (ours has the same keys): the YAML configuration
/// file's `metrics.fields` is the list, with no `args` rendered.
#[test]
fn the_charts_config_file_metric_list_is_served() {
    let values = json!({
        "config": {"enabled": true, "data": "version: 1\nmetrics:\n  fields:\n    \
            - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n"}
    });
    let Some(objects) = render(&values, None) else {
        skip(SKIP_PY);
        return;
    };
    let c = container(&objects);
    assert!(c.get("args").is_none(), "{c:#}");
    let root = tempfile::tempdir().unwrap();
    let mounts = materialise_mounts(&objects, root.path())
        .into_iter()
        .map(|(to, host)| (to, std::fs::read_to_string(host).unwrap()))
        .collect();
    let sc = &c["securityContext"];
    let p = Run {
        env: pod_env(c),
        mounts,
        run_as: sc["runAsUser"].as_u64().map(|u| u as u32),
        kubelet: true,
        profile: "one-gpu.toml",
        ..Run::default()
    }
    .start();
    assert_eq!(
        p.dcgm_names(),
        BTreeSet::from(["DCGM_FI_DEV_GPU_TEMP".into()])
    );
}

/// The unprivileged user the image keeps (`--user 1000`, `runAsUser: 1000`) keeps every
/// device field, and loses what docs/kubernetes.md says: pod labels (the kubelet's 0750
/// directory) and profiling; the log says both, naming the path and the uid.
#[test]
fn the_unprivileged_user_loses_pod_labels_and_profiling_and_says_why() {
    let mut run = operator_cluster_policy(None);
    run.run_as = Some(1000);
    run.profile = "one-gpu.toml";
    let p = run.start();
    p.e.wait_for_log(30, "permission denied for uid 1000");
    let log = p.e.stderr();
    assert!(
        log.contains(
            "kubelet socket /var/lib/kubelet/pod-resources/kubelet.sock: permission denied"
        ),
        "{log}"
    );
    assert!(!log.contains("does not exist"), "{log}");
    assert!(
        log.contains("running as uid 1000 without CAP_SYS_ADMIN"),
        "{log}"
    );
    assert!(p.dcgm_names().contains("DCGM_FI_DEV_GPU_TEMP"));
}

/// Under the GPU operator with standalone DCGM (`DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555`)
/// whose engine is not up: NVIDIA's liveness probe (`/health`, every 5 s, 3 failures) must
/// never restart an exporter that serves; `/ready` says it is not ready.
#[test]
fn the_liveness_probe_passes_while_the_engine_is_away_and_ready_fails() {
    let closed = free_port();
    let mut run = operator_cluster_policy(None);
    run.hosts.push("nvidia-dcgm".into());
    set_env(
        &mut run.env,
        "DCGM_REMOTE_HOSTENGINE_INFO",
        &format!("nvidia-dcgm:{closed}"),
    );
    // No NVML on the node's library path stands in for: no fallback serves.
    set_env(&mut run.env, "DCGM_EXPORTER_BACKEND", "dcgm");
    let p = run.start();
    for _ in 0..3 {
        let (code, body) = p.e.get("/health");
        assert_eq!(code, 200, "{body}");
        assert!(
            body.starts_with("OK - not ready: DCGM host engine not connected"),
            "{body}"
        );
        let (code, body) = p.e.get("/ready");
        assert_eq!(code, 503, "{body}");
        assert_eq!(p.e.get("/metrics").0, 200);
        std::thread::sleep(Duration::from_secs(1));
    }
    // The engine comes up at the Service's name: served, ready, alive.
    let mut engine = HostEngine::start(closed, Some("one-gpu.toml"));
    p.e.wait_until(60, |e| e.get("/ready").0 == 200);
    assert!(p.dcgm_names().contains("DCGM_FI_DEV_GPU_TEMP"));
    probe_ok(&p, "/health");
    engine.kill();
}

/// The GPU operator's GPUCluster/DRA DaemonSet (manifests/state-dcgm-exporter/0700) as the
/// operator renders it by default: the dcp list, a standalone engine at
/// `nvidia-dcgm-dra:5555`, DRA on, the token mounted.
fn operator_dra(engine_port: u16) -> Run {
    let path = repo("tests/fixtures/nvidia/gpu-operator/dra-0700_daemonset.rendered.yaml");
    let objects = load_manifest(&path, None).expect(SKIP_PY);
    let c = container(&objects);
    assert!(
        c.get("args").is_none() && c.get("command").is_none(),
        "{c:#}"
    );
    assert_eq!(
        c["securityContext"],
        json!({"privileged": true}),
        "no runAsUser"
    );
    let mut env = pod_env(c);
    // The Service's port, moved like the listen port so runs go side by side.
    set_env(
        &mut env,
        "DCGM_REMOTE_HOSTENGINE_INFO",
        &format!("nvidia-dcgm-dra:{engine_port}"),
    );
    assert!(env.contains(&("KUBERNETES_ENABLE_DRA".into(), "true".into())));
    Run {
        env,
        kubelet: true,
        hosts: vec!["nvidia-dcgm-dra".into()],
        profile: "h100-8gpu-nvswitch.toml",
        ..Run::default()
    }
}

#[test]
fn the_gpu_operators_dra_daemonset_serves_its_engines_gpus_and_list() {
    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let p = operator_dra(port).start();
    let served = p.dcgm_names();
    let dcp = shipped("dcp-metrics-included.csv");
    let outside: Vec<_> = served.difference(&dcp).collect();
    assert!(
        outside.is_empty(),
        "not in the operator's list: {outside:?}"
    );
    let page = p.e.scrape();
    let temps = series(&page, "DCGM_FI_DEV_GPU_TEMP");
    // The standalone engine's one GPU, under the node's name.
    assert_eq!(temps.len(), 1, "{}", dump(&page));
    assert_eq!(temps[0].label("hostname"), Some("gpu-node-7"));
    probe_ok(&p, "/health");
}
