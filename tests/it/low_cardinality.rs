//! `--low-cardinality`: the `DCGM_EXP_*_INFO` series carry each entity's static labels, the
//! data series keep only ids, hostname and attribution labels, and joining the two gives
//! back exactly the labels a page without the flag has (in Rust over both pages, and with
//! the PromQL of docs/metrics.md in a real Prometheus).

use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};

const STATIC: &[&str] = &[
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_PROFILE",
    "UUID",
    "cpu_serial",
    "device",
    "gpu_uuid",
    "modelName",
    "model_name",
    "pci_bus_id",
    "uuid",
];

const INFO: &[(&str, &[&str])] = &[
    ("DCGM_EXP_GPU_INFO", &["gpu", "hostname"]),
    (
        "DCGM_EXP_MIG_INFO",
        &["gpu", "GPU_I_ID", "GPU_CI_ID", "hostname"],
    ),
    ("DCGM_EXP_NVSWITCH_INFO", &["nvswitch", "hostname"]),
    ("DCGM_EXP_CPU_INFO", &["cpu", "hostname"]),
];

type Labels = BTreeMap<String, String>;

fn is_info(name: &str) -> bool {
    INFO.iter().any(|(n, _)| *n == name)
}

/// The info family and join key of a data series (none for links, cores and node series).
fn info_key(s: &Sample) -> Option<(&'static str, Vec<Option<String>>)> {
    if s.label("nvlink").is_some() || s.label("cpucore").is_some() {
        return None;
    }
    let (family, on) = if s.label("GPU_I_ID").is_some() {
        INFO[1]
    } else if s.label("gpu").is_some() {
        INFO[0]
    } else if s.label("nvswitch").is_some() {
        INFO[2]
    } else if s.label("cpu").is_some() {
        INFO[3]
    } else {
        return None;
    };
    Some((
        family,
        on.iter().map(|k| s.label(k).map(String::from)).collect(),
    ))
}

fn data(page: &[Sample]) -> impl Iterator<Item = &Sample> {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_") && !is_info(&s.name))
}

/// The info series of the slim page by family and join key; one per entity.
fn info_index(slim: &[Sample]) -> BTreeMap<(&'static str, Vec<Option<String>>), &Sample> {
    let mut info = BTreeMap::new();
    for s in slim.iter().filter(|s| is_info(&s.name)) {
        let (family, on) = *INFO.iter().find(|(n, _)| *n == s.name).unwrap();
        let key = on.iter().map(|k| s.label(k).map(String::from)).collect();
        assert!(
            info.insert((family, key), s).is_none(),
            "two info series for one entity: {s:?}"
        );
    }
    info
}

fn strip(labels: &Labels) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| !STATIC.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Every series of the full page is on the slim page without its static labels, and the
/// slim one joined with its entity's info series has each static label of the full one.
fn check_join(full: &[Sample], slim: &[Sample]) {
    let info = info_index(slim);
    let slim_set: BTreeMap<(String, Labels), &Sample> = data(slim)
        .map(|s| ((s.name.clone(), s.labels.clone()), s))
        .collect();
    let full_set: BTreeSet<(String, Labels)> = data(full)
        .map(|s| (s.name.clone(), strip(&s.labels)))
        .collect();
    let slim_keys: BTreeSet<(String, Labels)> = slim_set.keys().cloned().collect();
    assert_eq!(
        full_set
            .symmetric_difference(&slim_keys)
            .collect::<Vec<_>>(),
        Vec::<&(String, Labels)>::new()
    );
    for f in data(full) {
        let s = slim_set[&(f.name.clone(), strip(&f.labels))];
        let Some(key) = info_key(s) else {
            // Links and cores carry nothing to join (their GPU's info has it).
            continue;
        };
        let i = info
            .get(&key)
            .unwrap_or_else(|| panic!("no info series for {s:?}"));
        for (k, v) in f
            .labels
            .iter()
            .filter(|(k, _)| STATIC.contains(&k.as_str()))
        {
            if s.label("nvlink").is_none() {
                assert_eq!(i.label(k), Some(v.as_str()), "{k} of {f:?} from {i:?}");
            }
        }
    }
}

fn pages(
    profile: &str,
    args: &[&str],
    ready: impl Fn(&[Sample]) -> bool + Copy,
) -> (Vec<Sample>, Vec<Sample>) {
    let full = exporter().profile(profile).args(args).start();
    let full_page = full.scrape_until(10, ready);
    let slim = exporter()
        .profile(profile)
        .args(args)
        .arg("--low-cardinality")
        .start();
    let slim_page = slim.scrape_until(10, |p| ready(p) && p.iter().any(|s| is_info(&s.name)));
    (full_page, slim_page)
}

fn count(page: &[Sample], name: &str) -> usize {
    series(page, name).len()
}

fn check_slim(full: &[Sample], slim: &[Sample]) {
    for s in data(slim) {
        for k in STATIC {
            assert!(s.label(k).is_none(), "{k} left on {s:?}");
        }
    }
    check_join(full, slim);
}

#[test]
fn gpus_and_mig_instances_join_back_to_the_full_labels() {
    let ready = |p: &[Sample]| !series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty();
    let (full, slim) = pages("a100-mixed-mig.toml", &["-c", "200"], ready);
    let temps = series(&full, "DCGM_FI_DEV_GPU_TEMP");
    let whole = temps
        .iter()
        .filter(|s| s.label("GPU_I_ID").is_none())
        .count();
    let mig = temps.len() - whole;
    let gpus: BTreeSet<_> = temps.iter().map(|s| s.label("gpu")).collect();
    assert!(whole > 0 && mig > 0, "{}", dump(&full));
    // One per physical GPU, MIG-enabled ones included (their own series join on it).
    assert_eq!(
        count(&slim, "DCGM_EXP_GPU_INFO"),
        gpus.len(),
        "{}",
        dump(&slim)
    );
    assert_eq!(count(&slim, "DCGM_EXP_MIG_INFO"), mig, "{}", dump(&slim));
    for i in series(&slim, "DCGM_EXP_MIG_INFO") {
        assert!(
            !i.label("GPU_I_PROFILE").unwrap_or_default().is_empty(),
            "{i:?}"
        );
        assert!(
            i.label("UUID").unwrap_or_default().starts_with("GPU-"),
            "{i:?}"
        );
        assert_eq!(i.value, 1.0);
    }
    check_slim(&full, &slim);
    // Without the flag the page has no info series at all (drop-in output).
    assert!(!full.iter().any(|s| is_info(&s.name)));
}

#[test]
fn switches_and_cpus_have_their_info_series_too() {
    let ready = |p: &[Sample]| {
        !series(p, "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT").is_empty()
            && !series(p, "DCGM_FI_DEV_CPU_TEMP_CELSIUS").is_empty()
    };
    let csv = repo("bench/bench-counters.csv");
    let args = ["-c", "200", "-f", csv.to_str().unwrap()];
    let (full, slim) = pages("large-bench.toml", &args, ready);
    assert_eq!(count(&slim, "DCGM_EXP_GPU_INFO"), 8, "{}", dump(&slim));
    assert_eq!(count(&slim, "DCGM_EXP_NVSWITCH_INFO"), 4, "{}", dump(&slim));
    assert_eq!(count(&slim, "DCGM_EXP_CPU_INFO"), 2, "{}", dump(&slim));
    for i in series(&slim, "DCGM_EXP_GPU_INFO") {
        assert_eq!(
            i.label("DCGM_FI_DRIVER_VERSION"),
            Some("560.35.03"),
            "{i:?}"
        );
        assert_eq!(i.label("modelName"), Some("NVIDIA H100 80GB HBM3"), "{i:?}");
    }
    check_slim(&full, &slim);
}

/// The two PromQL lines of docs/metrics.md's low-cardinality section (GPU, MIG).
fn documented_joins() -> (String, String) {
    let doc = std::fs::read_to_string(repo("docs/metrics.md")).unwrap();
    let line = |info: &str| {
        doc.lines()
            .find(|l| l.contains("group_left(") && l.ends_with(info))
            .unwrap_or_else(|| panic!("docs/metrics.md has no join on {info}"))
            .to_string()
    };
    (line("DCGM_EXP_GPU_INFO"), line("DCGM_EXP_MIG_INFO"))
}

/// Polls until `expr` returns `n` series (60 s at most: Prometheus scrapes every second).
fn wait_for_count(p: &prom::Prometheus, expr: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let late = std::time::Instant::now() > deadline;
        // Errors too until Prometheus listens.
        match p.query(expr) {
            Ok(r) if r.len() >= n || late => return r,
            Err(e) if late => panic!("{expr}: {e}"),
            _ => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// The join of docs/metrics.md, run by Prometheus, gives each GPU's and MIG instance's
/// series the UUID, model and profile the full page has.
#[test]
fn the_documented_promql_join_gives_back_the_labels_in_prometheus() {
    let ready = |p: &[Sample]| !series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty();
    let full = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-c", "200"])
        .start();
    let full_page = full.scrape_until(10, ready);
    let slim = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-c", "200", "--low-cardinality"])
        .start();
    slim.scrape_until(10, |p| !series(p, "DCGM_EXP_MIG_INFO").is_empty());
    let p = prom::Prometheus::start(&[format!("127.0.0.1:{}", slim.port)]);
    let want = |mig: bool| -> BTreeSet<(String, String, String, String)> {
        series(&full_page, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .filter(|s| s.label("GPU_I_ID").is_some() == mig)
            .map(|s| {
                let l = |k| s.label(k).unwrap_or_default().to_string();
                (l("gpu"), l("UUID"), l("modelName"), l("GPU_I_PROFILE"))
            })
            .collect()
    };
    let got = |expr: &str, n: usize| -> BTreeSet<(String, String, String, String)> {
        let r = wait_for_count(&p, expr, n);
        r.iter()
            .map(|s| {
                let l = |k: &str| s["metric"][k].as_str().unwrap_or_default().to_string();
                (l("gpu"), l("UUID"), l("modelName"), l("GPU_I_PROFILE"))
            })
            .collect()
    };
    let (gpu_join, mig_join) = documented_joins();
    let gpus = want(false);
    assert_eq!(got(&gpu_join, gpus.len()), gpus);
    let migs = want(true);
    assert_eq!(got(&mig_join, migs.len()), migs);
}

/// Pods still reach the series (attribution reads the UUID and device before they are
/// dropped), the info series never get pod labels (one per entity, or the join would go
/// many-to-many), and a MIG instance's pod lands on that instance only.
#[test]
fn pod_labels_stay_on_data_series_and_info_series_stay_single() {
    use crate::support::kubelet::{trainer_and_mig_server, FakeKubelet};
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-c", "200", "--low-cardinality", "-k"])
        .args(&[
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .start();
    let page = e.scrape_until(10, |p| !series(p, "DCGM_EXP_MIG_INFO").is_empty());
    let info = |p: &[Sample], family: &str, gpu: &str| -> Vec<Sample> {
        series(p, family)
            .into_iter()
            .filter(|s| s.label("gpu") == Some(gpu))
            .cloned()
            .collect()
    };
    let whole = info(&page, "DCGM_EXP_GPU_INFO", "5")[0]
        .label("UUID")
        .unwrap()
        .to_string();
    let gi = info(&page, "DCGM_EXP_MIG_INFO", "3")[0]
        .label("GPU_I_ID")
        .unwrap()
        .to_string();
    kubelet.set_pods(trainer_and_mig_server(&whole, &gi));
    let pods_of = |p: &[Sample], gpu: &str, gi: Option<&str>| -> BTreeSet<String> {
        series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .filter(|s| s.label("gpu") == Some(gpu) && s.label("GPU_I_ID") == gi)
            .filter_map(|s| s.label("pod").map(String::from))
            .collect()
    };
    let page = e.scrape_until(15, |p| {
        !pods_of(p, "5", None).is_empty() && !pods_of(p, "3", Some(&gi)).is_empty()
    });
    assert_eq!(
        pods_of(&page, "3", Some(&gi)),
        BTreeSet::from(["llm-0".to_string()])
    );
    for s in data(&page) {
        for k in STATIC {
            assert!(s.label(k).is_none(), "{k} left on {s:?}");
        }
    }
    for family in ["DCGM_EXP_GPU_INFO", "DCGM_EXP_MIG_INFO"] {
        for s in series(&page, family) {
            assert!(s.label("pod").is_none(), "{s:?}");
        }
    }
    assert_eq!(
        info(&page, "DCGM_EXP_GPU_INFO", "5").len(),
        1,
        "{}",
        dump(&page)
    );
}
