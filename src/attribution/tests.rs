//! The merge against dcgm-exporter's own test tables (`kubernetes_test.go`, `hpc_test.go`).

use super::*;
use crate::model::naming::PromType;
use crate::model::Page;
use device_ids::MigLocation;
use kubelet::Allocation;
use std::collections::BTreeMap;

const U: &str = "b8ea3855-276c-c9cb-b366-c6fa655957c5";
const PARENT: &str = "00000000-0000-0000-0000-000000000000";

fn opts() -> Options {
    Options {
        kubernetes: true,
        kubelet_socket: "/nonexistent".into(),
        id_type: IdType::Uid,
        resource_names: Vec::new(),
        virtual_gpus: false,
        old_names: false,
        pod_uid: false,
        pod_labels: false,
        dra: true,
        hpc_dir: None,
        kubelet_deadline: Duration::from_secs(1),
        kubelet_wait: Duration::from_secs(1),
        nvml_wait: Duration::from_secs(1),
        proc_root: "/nonexistent".into(),
        usage: None,
    }
}

/// dcgm-exporter's mock kubelet: one pod per device id, `gpu-pod-<i>` / `default` / `default`.
fn mock_kubelet(resource: &str, ids: &[&str]) -> Vec<Allocation> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| Allocation {
            namespace: "default".into(),
            pod: format!("gpu-pod-{i}"),
            container: "default".into(),
            resource: resource.into(),
            device_id: id.to_string(),
        })
        .collect()
}

/// dcgm-exporter's NVML mock: every MIG UUID is GPU instance 3 of the GPU `PARENT`.
fn mock_mig(_: &str) -> Option<MigLocation> {
    Some(MigLocation {
        parent_uuid: PARENT.into(),
        gpu_instance: 3,
    })
}

fn mock_index(uuid: &str) -> Option<u32> {
    (uuid == PARENT).then_some(0)
}

/// One GPU series labelled as the collector labels it.
fn gpu_series(page: &mut Page, name: &str, uuid: &str, profile: &str, gi: &str, value: f64) {
    let mut l = vec![
        ("gpu", "0"),
        ("UUID", uuid),
        ("pci_bus_id", "00000000:3B:00.0"),
        ("device", "nvidia0"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
    ];
    if !profile.is_empty() {
        l.push(("GPU_I_PROFILE", profile));
        l.push(("GPU_I_ID", gi));
    }
    l.push(("Hostname", "node"));
    page.add(name, "help", PromType::Gauge, &l, value);
}

/// The page as (labels, value) per series, in order.
fn series(page: Page) -> Vec<(BTreeMap<String, String>, f64)> {
    let text = String::from_utf8(crate::output::render::encode(&page)).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (head, value) = l.rsplit_once(' ').unwrap();
            let inner = head
                .split_once('{')
                .map_or("", |(_, r)| r.trim_end_matches('}'));
            let labels = inner
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap();
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (labels, value.parse().unwrap())
        })
        .collect()
}

struct Row {
    id_type: IdType,
    resource: &'static str,
    uuid: &'static str,
    device: &'static str,
    profile: &'static str,
    gi: &'static str,
    pod_ids: Vec<String>,
    vgpus: Vec<&'static str>,
}

fn run_row(n: usize, row: &Row, virtual_gpus: bool) {
    let mut o = opts();
    o.id_type = row.id_type;
    o.virtual_gpus = virtual_gpus;
    if row.resource == "nvidia.com/a100" {
        o.resource_names = vec!["nvidia.com/a100".into()];
    }
    let ids: Vec<&str> = row.pod_ids.iter().map(String::as_str).collect();
    let snap = Snapshot {
        pods: pod_map(
            &mock_kubelet(row.resource, &ids),
            &o,
            &mock_mig,
            &mock_index,
            None,
        ),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    // The metric's device label is the row's (the table leaves some empty).
    let mut l = vec![("gpu", "0"), ("UUID", row.uuid), ("device", row.device)];
    if !row.profile.is_empty() {
        l.push(("GPU_I_PROFILE", row.profile));
        l.push(("GPU_I_ID", row.gi));
    }
    page.add("DCGM_FI_DEV_POWER_USAGE", "h", PromType::Gauge, &l, 1.0);
    merge(&mut page, &snap, &o);
    let out = series(page);
    let ctx = format!("row {n} (vGPU {virtual_gpus}): {out:?}");
    assert!(!out.is_empty(), "{ctx}");
    if row.pod_ids.is_empty() {
        for (labels, _) in &out {
            assert!(!labels.contains_key("pod"), "{ctx}");
        }
        return;
    }
    if virtual_gpus {
        assert_eq!(out.len(), row.pod_ids.len(), "one series per pod: {ctx}");
    } else {
        assert_eq!(out.len(), 1, "{ctx}");
    }
    for (i, (labels, _)) in out.iter().enumerate() {
        let pod = if virtual_gpus {
            format!("gpu-pod-{i}")
        } else {
            format!("gpu-pod-{}", row.pod_ids.len() - 1)
        };
        assert_eq!(labels.get("pod"), Some(&pod), "{ctx}");
        assert_eq!(
            labels.get("namespace").map(String::as_str),
            Some("default"),
            "{ctx}"
        );
        assert_eq!(
            labels.get("container").map(String::as_str),
            Some("default"),
            "{ctx}"
        );
        let want_vgpu = if virtual_gpus {
            row.vgpus.get(i).copied()
        } else {
            None
        };
        assert_eq!(labels.get("vgpu").map(String::as_str), want_vgpu, "{ctx}");
    }
}

// One argument per column of upstream's table, so rows read like the table.
#[allow(clippy::too_many_arguments)]
fn row(
    id_type: IdType,
    resource: &'static str,
    uuid: &'static str,
    device: &'static str,
    profile: &'static str,
    gi: &'static str,
    pod_ids: &[&str],
    vgpus: &[&'static str],
) -> Row {
    Row {
        id_type,
        resource,
        uuid,
        device,
        profile,
        gi,
        pod_ids: pod_ids.iter().map(|s| s.to_string()).collect(),
        vgpus: vgpus.to_vec(),
    }
}

// TestProcessPodMapper_WithD_Different_Format_Of_DeviceID, rows 1-30.
#[test]
fn device_id_table() {
    use IdType::{DeviceName as Name, Uid};
    let mig_u = format!("MIG-{U}");
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let mig_u: &'static str = leak(mig_u);
    let u2 = leak(format!("{U}::"));
    let gpu = "nvidia.com/gpu";
    let mig = "nvidia.com/mig-1g.10gb";
    // Rows 1-11; 12-20 are rows 1-9 with virtual GPUs.
    let plain = [
        row(Uid, gpu, U, "", "", "0", &[U], &[]),
        row(Uid, gpu, mig_u, "", "", "0", &[mig_u], &[]),
        row(Uid, gpu, U, "", "", "3", &[mig_u], &[]),
        row(Name, gpu, "", "", "mig", "3", &[mig_u], &[]),
        row(Name, gpu, "", "", "mig", "0", &["nvidia0/gi0"], &[]),
        row(Name, gpu, "", "0", "", "0", &["0/vgpu"], &[]),
        row(Uid, gpu, U, "", "", "0", &[u2], &[]),
        row(Uid, mig, mig_u, "0", "1g.10gb", "3", &[mig_u], &[]),
        row(Uid, "nvidia.com/a100", U, "", "", "0", &[U], &[]),
        row(
            Name,
            gpu,
            "",
            "",
            "1g.10gb",
            "0",
            &["nvidia0/gi0/vgpu0"],
            &[],
        ),
        row(
            Name,
            gpu,
            "",
            "",
            "1g.10gb",
            "1",
            &["nvidia0/gi1/vgpu0"],
            &[],
        ),
    ];
    for (i, r) in plain.iter().enumerate() {
        run_row(i + 1, r, false);
    }
    for (i, r) in plain.iter().take(9).enumerate() {
        // Replica ids with an empty suffix (`U::`) carry no vgpu label.
        let r = Row {
            vgpus: r
                .pod_ids
                .iter()
                .map(|id| leak(device_ids::shared_gpu(id).unwrap_or("").to_string()))
                .filter(|v| !v.is_empty())
                .collect(),
            ..row(
                r.id_type,
                r.resource,
                r.uuid,
                r.device,
                r.profile,
                r.gi,
                &[],
                &[],
            )
        };
        let r = Row {
            pod_ids: plain[i].pod_ids.clone(),
            ..r
        };
        run_row(i + 12, &r, true);
    }
    let u_2 = leak(format!("{U}::2"));
    let u_3 = leak(format!("{U}::3"));
    let mig_4 = leak(format!("{mig_u}::4"));
    let mig_5 = leak(format!("{mig_u}::5"));
    let shared = [
        (
            21,
            row(
                Name,
                gpu,
                "",
                "",
                "mig",
                "3",
                &["nvidia0/gi3/vgpu0"],
                &["0"],
            ),
        ),
        (
            22,
            row(
                Name,
                gpu,
                "",
                "nvidia0",
                "",
                "0",
                &["nvidia0/vgpu1"],
                &["1"],
            ),
        ),
        (23, row(Uid, gpu, U, "", "", "0", &[u_2], &["2"])),
        (
            24,
            row(Uid, mig, mig_u, "0", "1g.10gb", "3", &[mig_4], &["4"]),
        ),
        (
            25,
            row(
                Name,
                gpu,
                "",
                "",
                "mig",
                "3",
                &["nvidia0/gi3/vgpu0", "nvidia0/gi3/vgpu1"],
                &["0", "1"],
            ),
        ),
        (
            26,
            row(
                Name,
                gpu,
                "",
                "nvidia0",
                "",
                "0",
                &["nvidia0/vgpu1", "nvidia0/vgpu2"],
                &["1", "2"],
            ),
        ),
        (27, row(Uid, gpu, U, "", "", "0", &[u_2, u_3], &["2", "3"])),
        (
            28,
            row(
                Uid,
                mig,
                mig_u,
                "0",
                "1g.10gb",
                "3",
                &[mig_4, mig_5],
                &["4", "5"],
            ),
        ),
        (29, row(Uid, mig, mig_u, "0", "1g.10gb", "3", &[], &[])),
    ];
    for (n, r) in &shared {
        run_row(*n, r, true);
    }
    run_row(
        30,
        &row(Uid, mig, mig_u, "0", "1g.10gb", "3", &[], &[]),
        false,
    );
}

#[test]
fn unmatched_series_get_no_pod_labels_and_old_names_with_o() {
    let mut o = opts();
    o.old_names = true;
    let snap = Snapshot {
        pods: pod_map(
            &mock_kubelet("nvidia.com/gpu", &["GPU-a"]),
            &o,
            &mock_mig,
            &mock_index,
            None,
        ),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    gpu_series(&mut page, "X", "GPU-a", "", "", 1.0);
    page.add(
        "X",
        "help",
        PromType::Gauge,
        &[("gpu", "1"), ("UUID", "GPU-b"), ("device", "nvidia1")],
        2.0,
    );
    merge(&mut page, &snap, &o);
    let out = series(page);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].0["pod_name"], "gpu-pod-0");
    assert_eq!(out[0].0["pod_namespace"], "default");
    assert_eq!(out[0].0["container_name"], "default");
    assert!(!out[0].0.contains_key("pod"));
    assert!(!out[1].0.contains_key("pod_name") && !out[1].0.contains_key("pod"));
}

#[test]
fn other_resources_are_ignored() {
    let snap = Snapshot {
        pods: pod_map(
            &mock_kubelet("nvidia.com/gpu.shared", &["GPU-a"]),
            &opts(),
            &mock_mig,
            &mock_index,
            None,
        ),
        ..Snapshot::default()
    };
    assert!(snap.pods.is_empty());
}

struct Meta;
impl PodMetadata for Meta {
    fn lookup(&self, namespace: &str, pod: &str) -> Option<PodMeta> {
        Some(PodMeta {
            uid: format!("uid-of-{namespace}-{pod}"),
            labels: vec![("app".into(), format!("{pod}-app"))],
        })
    }
}

#[test]
fn pod_metadata_plugs_in_uid_and_labels() {
    let mut o = opts();
    o.pod_uid = true;
    o.pod_labels = true;
    let snap = Snapshot {
        pods: pod_map(
            &mock_kubelet("nvidia.com/gpu", &["GPU-a"]),
            &o,
            &mock_mig,
            &mock_index,
            Some(&Meta),
        ),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    gpu_series(&mut page, "X", "GPU-a", "", "", 1.0);
    merge(&mut page, &snap, &o);
    let out = series(page);
    assert_eq!(out[0].0["pod_uid"], "uid-of-default-gpu-pod-0");
    assert_eq!(out[0].0["app"], "gpu-pod-0-app");
}

// Virtual-GPU preservation: 3 GPUs, one in use.
#[test]
fn virtual_gpus_keep_unused_devices_and_add_per_pod_process_values() {
    let mut o = opts();
    o.virtual_gpus = true;
    let uid = "12345678-1234-1234-1234-123456789012";
    let allocs = mock_kubelet("nvidia.com/gpu", &["GPU-1::0"]);
    let snap = Snapshot {
        pods: pod_map(&allocs, &o, &mock_mig, &mock_index, Some(&FixedUid(uid))),
        processes: HashMap::from([(
            "GPU-1".to_string(),
            vec![
                Process {
                    pid: 10,
                    gpu_instance: None,
                    sm_util: Some(30),
                    samples: Vec::new(),
                    memory_bytes: Some(512 * 1024 * 1024),
                },
                Process {
                    pid: 11,
                    gpu_instance: None,
                    sm_util: Some(12),
                    samples: Vec::new(),
                    memory_bytes: Some(256 * 1024 * 1024),
                },
                // Another pod's process.
                Process {
                    pid: 99,
                    gpu_instance: None,
                    sm_util: Some(50),
                    samples: Vec::new(),
                    memory_bytes: Some(1024 * 1024 * 1024),
                },
            ],
        )]),
        pid_pods: HashMap::from([
            (10, uid.to_string()),
            (11, uid.to_string()),
            (99, "other".to_string()),
        ]),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    for field in [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
    ] {
        for g in 0..3 {
            let uuid = format!("GPU-{g}");
            let gs = g.to_string();
            let dev = format!("nvidia{g}");
            page.add(
                field,
                "h",
                PromType::Gauge,
                &[("gpu", &gs), ("UUID", &uuid), ("device", &dev)],
                77.0,
            );
        }
    }
    page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    page.set_field("DCGM_FI_DEV_FB_USED", 252);
    merge(&mut page, &snap, &o);
    let out = series(page);
    let of = |uuid: &str, pod: bool| {
        out.iter()
            .filter(|(l, _)| l["UUID"] == uuid && l.contains_key("pod") == pod)
            .count()
    };
    // POWER_USAGE: GPU-1's device series replaced by the pod's; GPU-0/2 untouched.
    // GPU_UTIL and FB_USED: GPU-1's device series kept plus one per pod.
    assert_eq!(of("GPU-0", false), 3);
    assert_eq!(of("GPU-2", false), 3);
    assert_eq!(of("GPU-1", false), 2);
    assert_eq!(of("GPU-1", true), 3);
    let pod_value = |field_value_is: fn(f64) -> bool| {
        out.iter()
            .filter(|(l, v)| l.contains_key("pod") && field_value_is(*v))
            .count()
    };
    // Power keeps the device value; util is 30+12; memory is 512+256 MiB.
    assert_eq!(pod_value(|v| v == 77.0), 1);
    assert_eq!(pod_value(|v| v == 42.0), 1);
    assert_eq!(pod_value(|v| v == 768.0), 1);
    for (l, _) in out.iter().filter(|(l, _)| l.contains_key("pod")) {
        assert_eq!(l["vgpu"], "0");
    }
    // Per-process series always carry the pod UID.
    assert_eq!(
        out.iter()
            .filter(|(l, _)| l.get("pod_uid").map(String::as_str) == Some(uid))
            .count(),
        2
    );
}

/// Each pod's UID is its name.
struct UidIsName;
impl PodMetadata for UidIsName {
    fn lookup(&self, _: &str, pod: &str) -> Option<PodMeta> {
        Some(PodMeta {
            uid: pod.into(),
            labels: Vec::new(),
        })
    }
}

/// Four pods sharing GPU-1, each running one process at 20 % SM with 1 GiB + 512 bytes.
fn four_pods_on_one_gpu(o: &Options) -> Snapshot {
    let ids: Vec<String> = (0..4).map(|i| format!("GPU-1::{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let allocs = mock_kubelet("nvidia.com/gpu", &ids);
    let processes = (0..4)
        .map(|i| Process {
            pid: 100 + i,
            gpu_instance: None,
            sm_util: Some(20),
            samples: Vec::new(),
            memory_bytes: Some((1 << 30) + 512),
        })
        .collect();
    Snapshot {
        pods: pod_map(&allocs, o, &mock_mig, &mock_index, Some(&UidIsName)),
        processes: HashMap::from([("GPU-1".to_string(), processes)]),
        pid_pods: (0..4).map(|i| (100 + i, format!("gpu-pod-{i}"))).collect(),
        ..Snapshot::default()
    }
}

/// The pods' values of one family, sorted.
fn pod_values(page: Page, family: &str) -> Vec<f64> {
    let text = String::from_utf8(crate::output::render::encode(&page)).unwrap();
    let mut v: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains("pod=\""))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

// dcgm-exporter 4.9.0's names with virtual GPUs: each pod's share is found by the field the
// family holds and given in the family's unit (a 0-1 ratio, bytes), never the whole GPU's.
#[test]
fn per_process_shares_follow_the_field_and_unit_not_the_name() {
    let mut o = opts();
    o.virtual_gpus = true;
    let snap = four_pods_on_one_gpu(&o);
    let one = |name: &str, field: Option<u16>, device: f64| {
        let mut page = Page::default();
        page.add(
            name,
            "h",
            PromType::Gauge,
            &[("gpu", "1"), ("UUID", "GPU-1"), ("device", "nvidia1")],
            device,
        );
        if let Some(f) = field {
            page.set_field(name, f);
        }
        merge(&mut page, &snap, &o);
        pod_values(page, name)
    };
    // 4.9.0: field 1613 (or 203 read and converted), a ratio: 0.2 each, under the GPU's 0.9.
    assert_eq!(one("DCGM_FI_DEV_GPU_UTIL_RATIO", Some(1613), 0.9), [0.2; 4]);
    // Four pods at 20 % on a GPU at 0.5: scaled down to add up to the GPU's value.
    let shares = one("DCGM_FI_DEV_GPU_UTIL_RATIO", Some(1613), 0.5);
    assert!(
        (shares.iter().sum::<f64>() - 0.5).abs() < 1e-9,
        "{shares:?}"
    );
    // 4.9.0: bytes, exactly.
    let bytes = ((1u64 << 30) + 512) as f64;
    assert_eq!(
        one("DCGM_FI_DEV_FB_USED_BYTES", Some(1627), 8e9),
        [bytes; 4]
    );
    // 4.8.x: the same name is field 203 in percent; FB_USED in whole MiB.
    assert_eq!(
        one("DCGM_FI_DEV_GPU_UTIL_RATIO", Some(203), 90.0),
        [20.0; 4]
    );
    assert_eq!(one("dcgm_fb_used", Some(252), 8000.0), [1024.0; 4]);
    // A family the collector did not tag is no per-process field, whatever its name: each
    // pod's copy carries the device's value, as for any other field.
    assert_eq!(one("DCGM_FI_DEV_GPU_UTIL", None, 90.0), [90.0; 4]);
    // Another base-unit field is not per process.
    assert_eq!(one("DCGM_FI_DEV_FB_FREE_BYTES", Some(1626), 5.0), [5.0; 4]);
}

struct FixedUid(&'static str);
impl PodMetadata for FixedUid {
    fn lookup(&self, _: &str, _: &str) -> Option<PodMeta> {
        Some(PodMeta {
            uid: self.0.into(),
            labels: Vec::new(),
        })
    }
}

// TestHPCProcess.
#[test]
fn hpc_jobs_duplicate_series() {
    let snap = Snapshot {
        hpc_jobs: HashMap::from([
            ("0".to_string(), vec!["job1-0".to_string()]),
            ("1".to_string(), vec!["job1-1".into(), "job2-1".into()]),
            ("3.0".to_string(), vec!["job3.0-0".to_string()]),
        ]),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    let add = |page: &mut Page, gpu: &str, extra: &[(&str, &str)], v: f64| {
        let mut l = vec![("gpu", gpu), ("UUID", "u"), ("device", "d")];
        l.extend_from_slice(extra);
        page.add("X", "h", PromType::Gauge, &l, v);
    };
    add(&mut page, "0", &[], 42.0);
    // A GPU_I_ID without a profile is a whole GPU.
    add(&mut page, "1", &[("GPU_I_ID", "1")], 451.0);
    add(&mut page, "2", &[], 1984.0);
    add(
        &mut page,
        "3",
        &[("GPU_I_PROFILE", "3g.70gb"), ("GPU_I_ID", "0")],
        123.0,
    );
    let mut o = opts();
    o.kubernetes = false;
    merge(&mut page, &snap, &o);
    let got: Vec<(String, Option<String>, f64)> = series(page)
        .into_iter()
        .map(|(l, v)| (l["gpu"].clone(), l.get("hpc_job").cloned(), v))
        .collect();
    assert_eq!(
        got,
        [
            ("0".into(), Some("job1-0".into()), 42.0),
            ("1".into(), Some("job1-1".into()), 451.0),
            ("1".into(), Some("job2-1".into()), 451.0),
            ("2".into(), None, 1984.0),
            ("3".into(), Some("job3.0-0".into()), 123.0),
        ]
    );
}

#[test]
fn device_label_sources_reach_gpus_and_their_mig_instances() {
    let snap = Snapshot {
        gpu_labels: HashMap::from([(
            "GPU-a".to_string(),
            vec![("container".to_string(), "trainer".to_string())],
        )]),
        instance_labels: HashMap::from([(
            ("GPU-b".to_string(), 3),
            vec![("container".to_string(), "infer".to_string())],
        )]),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    gpu_series(&mut page, "X", "GPU-a", "", "", 1.0);
    gpu_series(&mut page, "X", "GPU-b", "1g.10gb", "3", 2.0);
    gpu_series(&mut page, "X", "GPU-b", "1g.10gb", "5", 3.0);
    let mut o = opts();
    o.kubernetes = false;
    merge(&mut page, &snap, &o);
    let out = series(page);
    assert_eq!(out[0].0["container"], "trainer");
    assert_eq!(out[1].0["container"], "infer");
    assert!(!out[2].0.contains_key("container"));
}

#[test]
fn links_and_switches_are_never_attributed() {
    let snap = Snapshot {
        pods: HashMap::from([(
            "0".to_string(),
            vec![PodRef {
                namespace: "n".into(),
                pod: "p".into(),
                container: "c".into(),
                vgpu: None,
                meta: None,
            }],
        )]),
        hpc_jobs: HashMap::from([("0".to_string(), vec!["j".to_string()])]),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    page.add(
        "L",
        "h",
        PromType::Gauge,
        &[("nvlink", "0"), ("gpu", "0"), ("gpu_uuid", "0")],
        1.0,
    );
    page.add("S", "h", PromType::Gauge, &[("nvswitch", "nvswitch0")], 1.0);
    merge(&mut page, &snap, &opts());
    for (l, _) in series(page) {
        assert!(
            !l.contains_key("pod") && !l.contains_key("hpc_job"),
            "{l:?}"
        );
    }
}

/// The driver's ResourceSlices as a map from (pool, device).
struct Slices(Vec<(&'static str, &'static str, dra::SliceDevice)>);
impl dra::DraDevices for Slices {
    fn lookup(&self, pool: &str, device: &str) -> Option<dra::SliceDevice> {
        self.0
            .iter()
            .find(|(p, d, _)| *p == pool && *d == device)
            .map(|(_, _, x)| x.clone())
    }
    fn synced(&self) -> bool {
        true
    }
}

/// `TestPodDRAInfo`'s claim: `claim1`/`ns1`, driver gpu.nvidia.com, pool `poolA`, device
/// `gpu-x`, held by container `ctr1` of `default/pod1`.
fn claim(pod: &str, container: &str, driver: &str, device: &str) -> kubelet::ClaimDevice {
    kubelet::ClaimDevice {
        namespace: "default".into(),
        pod: pod.into(),
        container: container.into(),
        claim_name: "claim1".into(),
        claim_namespace: "ns1".into(),
        driver: driver.into(),
        pool: "poolA".into(),
        device: device.into(),
    }
}

const DRA_GPU: &str = "GPU-8a748984-0fe7-297f-916c-4b998ce202d1";

/// Pool `poolA` whose device `gpu-x` is the whole GPU `DRA_GPU`.
fn slice_with_gpu_x() -> Slices {
    Slices(vec![(
        "poolA",
        "gpu-x",
        dra::SliceDevice::Gpu {
            uuid: DRA_GPU.into(),
        },
    )])
}

#[test]
fn dra_claims_are_keyed_by_the_uuid_their_resource_slice_gives() {
    // Upstream's three TestPodDRAInfo cases.
    let gpu = slice_with_gpu_x();
    let claims = [claim("pod1", "ctr1", dra::GPU_DRIVER, "gpu-x")];
    let m = claim_map(&claims, &gpu, &|_| None, None);
    assert_eq!(m.gpus.keys().collect::<Vec<_>>(), [DRA_GPU]);
    let c = &m.gpus[DRA_GPU][0];
    assert_eq!(
        (
            c.pod.pod.as_str(),
            c.pod.namespace.as_str(),
            c.pod.container.as_str()
        ),
        ("pod1", "default", "ctr1")
    );
    assert_eq!(
        (c.claim_name.as_str(), c.claim_namespace.as_str()),
        ("claim1", "ns1")
    );
    assert_eq!(c.mig, None);

    let m = claim_map(&claims, &Slices(vec![]), &|_| None, None);
    assert!(m.gpus.is_empty());
    assert_eq!(m.unresolved, ["poolA/gpu-x"]);

    let mig = Slices(vec![(
        "poolA",
        "gpu-x",
        dra::SliceDevice::Mig {
            parent_uuid: "GPU-parent-uuid".into(),
            uuid: "MIG-12345".into(),
            profile: "1g.12gb".into(),
        },
    )]);
    let m = claim_map(&claims, &mig, &|_| None, None);
    assert_eq!(m.gpus.keys().collect::<Vec<_>>(), ["GPU-parent-uuid"]);
    assert_eq!(
        m.gpus["GPU-parent-uuid"][0].mig,
        Some(("1g.12gb".to_string(), "MIG-12345".to_string()))
    );
    assert!(m.instances.is_empty(), "NVML did not place the MIG device");
}

#[test]
fn dra_claims_of_other_drivers_and_repeats_of_a_container_are_dropped() {
    let gpu = slice_with_gpu_x();
    let claims = [
        claim("pod1", "ctr1", dra::GPU_DRIVER, "gpu-x"),
        claim("pod1", "ctr1", dra::GPU_DRIVER, "gpu-x"),
        claim("pod1", "ctr2", dra::GPU_DRIVER, "gpu-x"),
        claim("pod2", "ctr1", "compute-domain.nvidia.com", "gpu-x"),
    ];
    let m = claim_map(&claims, &gpu, &|_| None, None);
    let held: Vec<&str> = m.gpus[DRA_GPU]
        .iter()
        .map(|c| c.pod.container.as_str())
        .collect();
    assert_eq!(held, ["ctr1", "ctr2"]);
    assert!(m.unresolved.is_empty());
}

#[test]
fn a_dra_claim_copies_its_gpus_series_with_dra_labels() {
    let gpu = slice_with_gpu_x();
    let claims = [
        claim("pod1", "ctr1", dra::GPU_DRIVER, "gpu-x"),
        claim("pod2", "main", dra::GPU_DRIVER, "gpu-x"),
    ];
    let mut o = opts();
    o.pod_uid = true;
    o.pod_labels = true;
    let snap = Snapshot {
        claims: claim_map(&claims, &gpu, &|_| None, Some(&Meta)),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    gpu_series(&mut page, "X", DRA_GPU, "", "", 7.0);
    gpu_series(&mut page, "X", "GPU-unclaimed", "", "", 8.0);
    merge(&mut page, &snap, &o);
    let out = series(page);
    assert_eq!(out.len(), 3, "{out:?}");
    for (i, (pod, container)) in [("pod1", "ctr1"), ("pod2", "main")].into_iter().enumerate() {
        let (l, v) = &out[i];
        assert_eq!(*v, 7.0);
        assert_eq!(l["pod"], pod);
        assert_eq!(l["namespace"], "default");
        assert_eq!(l["container"], container);
        assert_eq!(l["dra_claim_name"], "claim1");
        assert_eq!(l["dra_claim_namespace"], "ns1");
        assert_eq!(l["dra_driver_name"], "gpu.nvidia.com");
        assert_eq!(l["dra_pool_name"], "poolA");
        assert_eq!(l["dra_device_name"], "gpu-x");
        assert!(!l.contains_key("dra_mig_profile"));
        // Upstream leaves these off DRA series (its issue #718); the flags ask for them.
        assert_eq!(l["pod_uid"], format!("uid-of-default-{pod}"));
        assert_eq!(l["app"], format!("{pod}-app"));
    }
    assert_eq!(out[2].1, 8.0);
    assert!(!out[2].0.contains_key("pod") && !out[2].0.contains_key("dra_claim_name"));

    // Off unless asked for; with -o the pod labels take the old names.
    for (dra, old) in [(false, false), (true, true)] {
        let mut o = opts();
        o.dra = dra;
        o.old_names = old;
        let mut page = Page::default();
        gpu_series(&mut page, "X", DRA_GPU, "", "", 7.0);
        merge(&mut page, &snap, &o);
        let out = series(page);
        if dra {
            assert_eq!(out.len(), 2);
            assert_eq!(out[0].0["pod_name"], "pod1");
            assert_eq!(out[0].0["container_name"], "ctr1");
            assert!(!out[0].0.contains_key("pod"));
        } else {
            assert_eq!(out.len(), 1);
            assert!(!out[0].0.contains_key("dra_claim_name"));
        }
    }
}

#[test]
fn a_dra_mig_claim_reaches_the_parent_gpu_and_its_gpu_instance() {
    let mig = Slices(vec![(
        "poolA",
        "gpu-0-mig-3",
        dra::SliceDevice::Mig {
            parent_uuid: PARENT.into(),
            uuid: "MIG-5c89b9e2-8f3a-5b8e-9d2a-1a2b3c4d5e6f".into(),
            profile: "1g.10gb".into(),
        },
    )]);
    let claims = [claim("pod1", "ctr1", dra::GPU_DRIVER, "gpu-0-mig-3")];
    let snap = Snapshot {
        // NVML places every MIG device at GPU instance 3 of PARENT (upstream's mock).
        claims: claim_map(&claims, &mig, &mock_mig, None),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    gpu_series(&mut page, "X", PARENT, "", "", 1.0);
    gpu_series(&mut page, "X", PARENT, "1g.10gb", "3", 2.0);
    gpu_series(&mut page, "X", PARENT, "1g.10gb", "5", 3.0);
    merge(&mut page, &snap, &opts());
    let out = series(page);
    assert_eq!(out.len(), 3);
    for (l, v) in &out[..2] {
        assert_eq!(l["pod"], "pod1", "value {v}");
        assert_eq!(l["dra_mig_profile"], "1g.10gb");
        assert_eq!(
            l["dra_mig_device_uuid"],
            "MIG-5c89b9e2-8f3a-5b8e-9d2a-1a2b3c4d5e6f"
        );
    }
    assert_eq!(out[1].0["GPU_I_ID"], "3");
    assert!(!out[2].0.contains_key("pod"), "another GPU instance");
}

#[test]
fn a_kubelet_reply_with_dynamic_resources_lists_each_claimed_device() {
    use kubelet::proto;
    let reply = proto::ListPodResourcesResponse {
        pod_resources: vec![proto::PodResources {
            name: "pod1".into(),
            namespace: "default".into(),
            containers: vec![proto::ContainerResources {
                name: "ctr1".into(),
                devices: vec![],
                dynamic_resources: vec![proto::DynamicResource {
                    claim_name: "claim1".into(),
                    claim_namespace: "ns1".into(),
                    claim_resources: vec![
                        proto::ClaimResource {
                            driver_name: "gpu.nvidia.com".into(),
                            pool_name: "poolA".into(),
                            device_name: "gpu-0".into(),
                        },
                        proto::ClaimResource {
                            driver_name: "gpu.nvidia.com".into(),
                            pool_name: "poolA".into(),
                            device_name: "gpu-1".into(),
                        },
                    ],
                }],
            }],
        }],
    };
    let l = kubelet::listing(reply);
    assert!(l.devices.is_empty());
    let devices: Vec<&str> = l.claims.iter().map(|c| c.device.as_str()).collect();
    assert_eq!(devices, ["gpu-0", "gpu-1"]);
    assert_eq!(
        l.claims[1],
        claim("pod1", "ctr1", "gpu.nvidia.com", "gpu-1")
    );
}

/// Each pod its own UID: `uid-<pod>`.
struct PodUids;
impl PodMetadata for PodUids {
    fn lookup(&self, _: &str, pod: &str) -> Option<PodMeta> {
        Some(PodMeta {
            uid: format!("uid-{pod}"),
            labels: Vec::new(),
        })
    }
}

// Issue 23 item 2: per-pod SM utilisation is each process's mean over every sample since
// the previous collection, and the pods' values never add up to more than the GPU's own.
#[test]
fn per_pod_utilisation_is_the_interval_mean_clamped_to_the_gpu() {
    use nvml::UtilSample;
    let mut o = opts();
    o.virtual_gpus = true;
    let allocs = mock_kubelet("nvidia.com/gpu", &["GPU-1::0", "GPU-1::1"]);
    let sample = |t: u64, v: u32| UtilSample {
        timestamp_us: t,
        sm_util: v,
    };
    let snap = Snapshot {
        pods: pod_map(&allocs, &o, &mock_mig, &mock_index, Some(&PodUids)),
        processes: HashMap::from([(
            "GPU-1".to_string(),
            vec![
                // Mean 60; the newest sample alone (100) is what the old code took.
                Process {
                    pid: 10,
                    gpu_instance: None,
                    sm_util: Some(100),
                    samples: vec![sample(1, 20), sample(2, 60), sample(3, 100)],
                    memory_bytes: None,
                },
                // No sample list: the newest value stands for the interval.
                Process {
                    pid: 11,
                    gpu_instance: None,
                    sm_util: Some(50),
                    samples: Vec::new(),
                    memory_bytes: None,
                },
            ],
        )]),
        pid_pods: HashMap::from([
            (10, "uid-gpu-pod-0".to_string()),
            (11, "uid-gpu-pod-1".to_string()),
        ]),
        ..Snapshot::default()
    };
    let mut page = Page::default();
    let l = [("gpu", "1"), ("UUID", "GPU-1"), ("device", "nvidia1")];
    page.add("DCGM_FI_DEV_GPU_UTIL", "h", PromType::Gauge, &l, 88.0);
    // The collector tags each family with its DCGM field; the merge finds per-process
    // fields by it.
    page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    merge(&mut page, &snap, &o);
    let pods: BTreeMap<String, f64> = series(page)
        .into_iter()
        .filter_map(|(l, v)| Some((l.get("pod")?.clone(), v)))
        .collect();
    // 60 + 50 = 110 > 88: scaled by 88/110.
    assert!((pods["gpu-pod-0"] - 48.0).abs() < 1e-9, "{pods:?}");
    assert!((pods["gpu-pod-1"] - 40.0).abs() < 1e-9, "{pods:?}");
}

/// Issue 47: a window of a per-process field (`--aggregate`) holds the GPU's statistics, not
/// a pod's. Where the pods sharing a GPU get their processes' shares of its utilisation, the
/// utilisation's windows stay the device's own series alone (a pod's copy would set the
/// GPU's peak beside the pod's share); where NVML names no process and the utilisation is
/// copied to each pod as it is, so are its windows, and a power's windows always are.
#[test]
fn windows_of_a_shared_utilisation_stay_the_devices() {
    use crate::model::Stat;
    let mut o = opts();
    o.virtual_gpus = true;
    let allocs = mock_kubelet("nvidia.com/gpu", &["GPU-1::0", "GPU-1::1"]);
    for with_processes in [true, false] {
        let processes = Vec::from([Process {
            pid: 10,
            gpu_instance: None,
            sm_util: Some(30),
            samples: Vec::new(),
            memory_bytes: None,
        }]);
        let snap = Snapshot {
            pods: pod_map(&allocs, &o, &mock_mig, &mock_index, Some(&PodUids)),
            processes: HashMap::from_iter(with_processes.then(|| ("GPU-1".to_string(), processes))),
            pid_pods: HashMap::from([(10, "uid-gpu-pod-0".to_string())]),
            ..Snapshot::default()
        };
        let mut page = Page::default();
        let l = [("gpu", "1"), ("UUID", "GPU-1"), ("device", "nvidia1")];
        page.add("DCGM_FI_DEV_GPU_UTIL", "h", PromType::Gauge, &l, 88.0);
        page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
        for (row, max) in [
            ("DCGM_FI_DEV_GPU_UTIL", 97.0),
            ("DCGM_FI_DEV_POWER_USAGE", 400.0),
        ] {
            let name = format!("{row}_interval_max");
            page.add(&name, "h", PromType::Gauge, &l, max);
            page.set_stat(&name, Stat::Max);
        }
        merge(&mut page, &snap, &o);
        let text = String::from_utf8(crate::output::render::encode(&page)).unwrap();
        let mut seen: Vec<(String, String, String)> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let name = l.split('{').next().unwrap().to_string();
                let pod = l
                    .split("pod=\"")
                    .nth(1)
                    .map_or("", |r| r.split('"').next().unwrap())
                    .to_string();
                (name, pod, l.rsplit(' ').next().unwrap().to_string())
            })
            .collect();
        seen.sort();
        let want: &[(&str, &str, &str)] = if with_processes {
            &[
                ("DCGM_FI_DEV_GPU_UTIL", "", "88"),
                ("DCGM_FI_DEV_GPU_UTIL", "gpu-pod-0", "30"),
                // A pod without processes: 0, not `-0`.
                ("DCGM_FI_DEV_GPU_UTIL", "gpu-pod-1", "0"),
                ("DCGM_FI_DEV_GPU_UTIL_interval_max", "", "97"),
                ("DCGM_FI_DEV_POWER_USAGE_interval_max", "gpu-pod-0", "400"),
                ("DCGM_FI_DEV_POWER_USAGE_interval_max", "gpu-pod-1", "400"),
            ]
        } else {
            &[
                ("DCGM_FI_DEV_GPU_UTIL", "gpu-pod-0", "88"),
                ("DCGM_FI_DEV_GPU_UTIL", "gpu-pod-1", "88"),
                ("DCGM_FI_DEV_GPU_UTIL_interval_max", "gpu-pod-0", "97"),
                ("DCGM_FI_DEV_GPU_UTIL_interval_max", "gpu-pod-1", "97"),
                ("DCGM_FI_DEV_POWER_USAGE_interval_max", "gpu-pod-0", "400"),
                ("DCGM_FI_DEV_POWER_USAGE_interval_max", "gpu-pod-1", "400"),
            ]
        };
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(seen, want, "with processes: {with_processes}\n{text}");
    }
}

/// Two host engines each have a gpu 0 with GPU instance 3 and a device `nvidia0`: a MIG
/// device the kubelet names by MIG UUID (on `PARENT`'s instance 3) labels the instance of
/// the engine whose GPU is `PARENT` only, and `nvidia0`, which cannot say which engine it
/// is on, labels neither. One engine (no engine label) keeps dcgm-exporter's keys.
#[test]
fn gpu_indexes_of_several_engines_are_kept_apart() {
    for id_type in [IdType::Uid, IdType::DeviceName] {
        let mut o = opts();
        o.id_type = id_type;
        let ids = ["MIG-42f0f413-f7b0-58cc-aced-c1d1fb54db26", "nvidia0"];
        let snap = Snapshot {
            pods: pod_map(
                &mock_kubelet("nvidia.com/gpu", &ids),
                &o,
                &mock_mig,
                &mock_index,
                None,
            ),
            ..Snapshot::default()
        };
        let mut page = Page::default();
        for (engine, uuid) in [("a", PARENT), ("b", U)] {
            for profile in ["1g.10gb", ""] {
                let mut l = vec![("gpu", "0"), ("UUID", uuid), ("device", "nvidia0")];
                if !profile.is_empty() {
                    l.extend([("GPU_I_PROFILE", profile), ("GPU_I_ID", "3")]);
                }
                l.push(("engine", engine));
                page.add("DCGM_FI_DEV_POWER_USAGE", "h", PromType::Gauge, &l, 1.0);
            }
        }
        merge(&mut page, &snap, &o);
        let pods: Vec<(String, bool, Option<String>)> = series(page)
            .into_iter()
            .map(|(l, _)| {
                (
                    l["engine"].clone(),
                    l.contains_key("GPU_I_ID"),
                    l.get("pod").cloned(),
                )
            })
            .collect();
        assert_eq!(
            pods,
            [
                ("a".into(), true, Some("gpu-pod-0".into())),
                ("a".into(), false, None),
                ("b".into(), true, None),
                ("b".into(), false, None),
            ],
            "{id_type:?}"
        );
    }
}
