//! Pods on MIG devices named by MIG UUID, placed through NVMLs that do not answer the direct
//! MIG calls: the simulated NVML imitating DCGM's injection library, and that library itself
//! (DCGM 4.6's `libnvml_injection.so.1`) loaded by the exporter as `libnvidia-ml.so.1`.

use crate::support;
use crate::support::kubelet::{pod, FakeKubelet};
use crate::support::nvml_yaml::{self, Gpu, MigInstance};
use crate::support::real_dcgm::{kit, RealHostEngine, Scratch};
use crate::support::{
    dump, exporter, free_port, label_where, series, successes, with_sim_nvml, Exporter, Sample,
};
use std::path::{Path, PathBuf};

fn pods<'a>(page: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    page.iter()
        .filter(|s| s.label("pod") == Some(name))
        .collect()
}

fn value(page: &[Sample], name: &str) -> f64 {
    series(page, name)
        .first()
        .unwrap_or_else(|| panic!("no {name}: {}", dump(page)))
        .value
}

/// Every series of GPU `gpu`'s instance `gi`, and no other series, carries `pod`.
fn labelled_on_exactly(page: &[Sample], pod: &str, gpu: &str, gi: &str) {
    let got = pods(page, pod);
    assert!(!got.is_empty(), "{}", dump(page));
    for s in &got {
        assert_eq!(
            (s.label("gpu"), s.label("GPU_I_ID")),
            (Some(gpu), Some(gi)),
            "{s:?}"
        );
    }
    let of_instance = page
        .iter()
        .filter(|s| s.label("gpu") == Some(gpu) && s.label("GPU_I_ID") == Some(gi))
        .count();
    assert_eq!(got.len(), of_instance, "{}", dump(page));
}

/// A pod on an unknown MIG device: a `degraded:` line naming it, the unplaced counters, the
/// NVML source down; the placed pod keeps its labels.
fn unknown_device_is_reported(
    e: &Exporter,
    kubelet: &FakeKubelet,
    placed: dcgm_exporter::attribution::kubelet::proto::PodResources,
) {
    let unknown = "MIG-00000000-dead-beef-0000-000000000000";
    kubelet.set_pods(vec![
        placed,
        pod(
            "batch",
            "lost",
            "c",
            &[("nvidia.com/mig-1g.10gb", &[unknown])],
        ),
    ]);
    let page = e.scrape_until(30, |s| {
        series(s, "dcgm_exporter_attribution_unplaced_devices")
            .first()
            .is_some_and(|x| x.value == 1.0)
    });
    assert_eq!(
        value(&page, "dcgm_exporter_attribution_unplaced_devices_total"),
        1.0
    );
    let up: Vec<&Sample> = series(&page, "dcgm_exporter_attribution_source_up")
        .into_iter()
        .filter(|s| s.label("source") == Some("nvml"))
        .collect();
    assert_eq!(up.first().map(|s| s.value), Some(0.0), "{}", dump(&page));
    assert!(pods(&page, "lost").is_empty());
    assert!(!pods(&page, "llm-0").is_empty(), "{}", dump(&page));
    let (code, body) = e.get("/health");
    assert_eq!(code, 200, "{body}");
    let line = body
        .lines()
        .find(|l| l.starts_with("degraded: nvml:"))
        .unwrap_or_else(|| panic!("no degraded nvml line: {body}"));
    assert!(line.contains(unknown), "{line}");
    assert!(line.contains("cannot be placed"), "{line}");
}

/// The simulated NVML with `[nvml] mig_lookup = "injection"`: the direct calls answer
/// success with NULL handles, as DCGM's injection library does.
#[test]
fn a_pod_on_a_mig_device_is_placed_by_walking_when_direct_lookups_give_null_handles() {
    crate::support::alone!(
        a_pod_on_a_mig_device_is_placed_by_walking_when_direct_lookups_give_null_handles
    );
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("injection-like.toml");
    let base = std::fs::read_to_string(support::repo("etc/sim/a100-mixed-mig.toml")).unwrap();
    std::fs::write(
        &profile,
        format!("{base}\n[nvml]\nmig_lookup = \"injection\"\n"),
    )
    .unwrap();

    // The MIG device as a device plugin sees it, and the NVML quirk itself.
    let (mig_uuid, gi) = {
        let nvml = support::sim_nvml(&profile);
        let gpu1 = nvml.device_by_index(1).unwrap();
        let mig = gpu1.mig_device_by_index(0).unwrap();
        let uuid = mig.uuid().unwrap();
        let by_uuid = nvml.device_by_uuid(uuid.as_str()).expect("success");
        assert!(
            dcgm_sys::nvml_ext::is_null(&by_uuid),
            "a NULL handle by UUID"
        );
        let parent = mig.mig_parent_device().expect("success");
        assert!(dcgm_sys::nvml_ext::is_null(&parent), "a NULL parent handle");
        (
            uuid,
            dcgm_sys::nvml_ext::gpu_instance_id(&mig).expect("GPU-instance id"),
        )
    };

    let kubelet = FakeKubelet::start();
    let llm = || {
        pod(
            "inference",
            "llm-0",
            "server",
            &[("nvidia.com/mig-3g.40gb", &[&mig_uuid])],
        )
    };
    kubelet.set_pods(vec![llm()]);
    let e = with_sim_nvml(exporter())
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .kubelet(&kubelet)
        .start();
    let page = e.scrape_until(15, |s| !pods(s, "llm-0").is_empty());
    labelled_on_exactly(&page, "llm-0", "1", &gi.to_string());
    assert_eq!(
        value(&page, "dcgm_exporter_attribution_unplaced_devices"),
        0.0
    );
    assert_eq!(e.get("/health"), (200, "OK".to_string()));

    unknown_device_is_reported(&e, &kubelet, llm());
}

/// `libnvidia-ml.so.1` in a directory of its own, pointing at DCGM's injection library.
fn injection_as_libnvidia_ml(kit_lib: &Path, dir: &Path) -> PathBuf {
    let d = dir.join("nvml");
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink(
        kit_lib.join("libnvml_injection.so.1"),
        d.join("libnvidia-ml.so.1"),
    )
    .unwrap();
    d
}

/// The real DCGM host engine and the exporter both on DCGM's NVML injection library: GPU 0
/// split into a 3g.40gb (GI 2) and a 1g.10gb (GI 9) whose MIG devices the YAML names by
/// UUID. There `nvmlDeviceGetHandleByUUID("MIG-…")` answers success with a NULL handle and
/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle` NULL for any input.
#[test]
fn a_pod_on_a_mig_device_is_labelled_through_dcgms_injection_nvml() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("mig-nvml");
    let mut gpus = vec![Gpu::default(); 2];
    gpus[0].mig = MigInstance::three_and_one();
    gpus[0].mig_uuids = true;
    let yaml = dir.yaml(&gpus);
    let nvml_dir = injection_as_libnvidia_ml(&kit.lib_dir(), &dir.0);
    let he = RealHostEngine::start(kit, &yaml, &dir.0, free_port());

    let kubelet = FakeKubelet::start();
    // The 1g.10gb: GPU instance 9.
    let target = nvml_yaml::mig_uuid(0, 1);
    let llm = || {
        pod(
            "inference",
            "llm-0",
            "server",
            &[("nvidia.com/mig-1g.10gb", &[&target])],
        )
    };
    kubelet.set_pods(vec![llm()]);
    let mut b = kit.remote(he.port).kubelet(&kubelet);
    for (k, v) in kit.env(&yaml) {
        b = b.env(&k, &v);
    }
    let e = b
        .env(
            "LD_LIBRARY_PATH",
            &format!("{}:{}", nvml_dir.display(), kit.lib_dir().display()),
        )
        .start();
    let page = e.scrape_until(30, |s| !pods(s, "llm-0").is_empty());
    labelled_on_exactly(&page, "llm-0", "0", "9");
    assert!(
        page.iter()
            .any(|s| s.label("gpu") == Some("0") && s.label("GPU_I_ID") == Some("2")),
        "the other instance is exported, unlabelled: {}",
        dump(&page)
    );
    assert_eq!(e.get("/health"), (200, "OK".to_string()));

    unknown_device_is_reported(&e, &kubelet, llm());
}

/// A driver hung in a MIG lookup (`[nvml] hang_mig_lookup`): collections go on, whole-GPU
/// pods keep their labels, and `/health` says NVML is stuck.
#[test]
fn a_hung_nvml_mig_lookup_holds_no_collection() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("hung.toml");
    let base = std::fs::read_to_string(support::repo("etc/sim/a100-mixed-mig.toml")).unwrap();
    std::fs::write(
        &profile,
        format!("{base}\n[nvml]\nhang_mig_lookup = true\n"),
    )
    .unwrap();
    let kubelet = FakeKubelet::start();
    let mig = || {
        pod(
            "inference",
            "llm-0",
            "server",
            &[(
                "nvidia.com/mig-1g.10gb",
                &["MIG-6af230c7-0000-0000-0000-000000000001"],
            )],
        )
    };
    kubelet.set_pods(vec![mig()]);
    let mut e = with_sim_nvml(exporter())
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .kubelet(&kubelet)
        .start();
    let page = e.scrape();
    let gpu4 = label_where(&page, "UUID", "GPU 4", |s| s.label("gpu") == Some("4"));
    kubelet.set_pods(vec![
        mig(),
        pod("ml", "trainer", "main", &[("nvidia.com/gpu", &[&gpu4])]),
    ]);
    let first = successes(&page);
    let page = e.scrape_until(30, |s| {
        !pods(s, "trainer").is_empty() && successes(s) >= first + 3.0
    });
    assert!(pods(&page, "trainer")
        .iter()
        .all(|s| s.label("gpu") == Some("4")));
    assert!(pods(&page, "llm-0").is_empty());
    assert_eq!(
        value(&page, "dcgm_exporter_attribution_unplaced_devices"),
        1.0
    );
    let (code, body) = e.get("/health");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.lines()
            .any(|l| l.starts_with("degraded: nvml: NVML has not answered")),
        "{body}"
    );
    // The thread stuck in NVML holds no exit either.
    let st = e.signal_and_wait("TERM");
    assert_eq!(st.code(), Some(0), "{st}: {}", e.stderr());
}
