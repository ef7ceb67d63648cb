//! The crossing matrix: every emulated release x every feature that rewrites or adds series,
//! each pair run on the simulator (an 8-GPU A100 node, GPUs 0-3 in MIG mode, processes on
//! the simulated NVML), checked for the page's invariants:
//!
//! * the release's label names: the hostname label as the release spells it on every series
//!   (links keep `hostname`), self-metrics included;
//! * the release's units: 4.9.0's and 4.10.0's ratios within 0-1 and no 4.8.x names; 4.8.x's
//!   percent;
//! * per-pod shares never above the device: per GPU (or GPU instance), the pods' copies of the
//!   utilisation add up to no more than the device's own value, and the usage shares to no
//!   more than 100 %;
//! * `promtool check metrics` clean (but the naming lints inherent to dcgm-exporter's names);
//! * sub-interval aggregation (`--aggregate`, on in every pair): each aggregated row has its
//!   windows, each window min <= mean <= max over at least one sample, in the row's unit,
//!   under the very labels of a series of the row (a feature's labels on both or neither).
//!
//! The test prints the number of pairs it ran. The pairs that touch DCGM and need no
//! simulated NVML or MIG (low cardinality, HPC jobs, usage accounting over HPC jobs, a
//! reload) run again on NVIDIA's real DCGM 4.6 kit (`real_kit_pairs_keep_the_pages_invariants`).

use crate::support::kubelet::{pod, FakeKubelet};
use crate::support::real_dcgm::busy_and_idle_with_jobs;
use crate::support::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

const VERSIONS: [&str; 4] = ["4.8.2", "4.8.4", "4.9.0", "4.10.0"];

/// Aggregated every 100 ms in every pair: a utilisation (shared among pods, a ratio from
/// 4.9.0) and a power.
const AGGREGATE: [&str; 4] = [
    "--aggregate",
    "DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_POWER_USAGE",
    "--aggregate-period",
    "100ms",
];

/// 4.9.0 and later export base units (4.10.0 is 4.9.0 with four profiling metrics renamed).
fn base_units(version: &str) -> bool {
    matches!(version, "4.9.0" | "4.10.0")
}

/// The features crossed with each release.
const FEATURES: [&str; 7] = [
    "virtual-gpus",
    "usage-accounting",
    "low-cardinality",
    "hpc-jobs",
    "mig-compute-instances",
    "container-labels",
    "reload",
];

/// What a feature needs beside the exporter: a kubelet, job files, a container runtime.
struct Setup {
    dir: tempfile::TempDir,
    kubelet: Option<FakeKubelet>,
    _runtime: Option<std::thread::JoinHandle<()>>,
}

/// A Docker-compatible API with one running container holding every GPU (`--gpus all`).
fn fake_runtime(socket: &Path) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let req = crate::support::request_head(&mut s);
            let id = "c0ffee".repeat(10) + "abcd";
            let body = if req.starts_with(b"GET /containers/json") {
                format!(r#"[{{"Id":"{id}","Names":["/trainer"]}}]"#)
            } else {
                format!(
                    r#"{{"Id":"{id}","Name":"/trainer","HostConfig":{{"Runtime":"runc","DeviceRequests":[{{"Driver":"","Count":-1,"Capabilities":[["gpu"]]}}]}}}}"#
                )
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })
}

fn setup(feature: &str) -> (Setup, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let mut s = Setup {
        dir,
        kubelet: None,
        _runtime: None,
    };
    let args: Vec<String> = match feature {
        "virtual-gpus" => {
            let k = FakeKubelet::start();
            let socket = k.socket().to_str().unwrap().to_string();
            s.kubelet = Some(k);
            [
                "-k",
                "--kubernetes-virtual-gpus",
                "--pod-resources-kubelet-socket",
            ]
            .iter()
            .map(|a| a.to_string())
            .chain([socket])
            .collect()
        }
        "usage-accounting" | "hpc-jobs" => {
            std::fs::write(jobs.join("4"), "job-a\n").unwrap();
            std::fs::write(jobs.join("0.7"), "job-b\n").unwrap();
            let mut a = vec![
                "--hpc-job-mapping-dir".to_string(),
                jobs.to_str().unwrap().to_string(),
            ];
            if feature == "usage-accounting" {
                a.push("--usage-accounting".into());
            }
            a
        }
        "low-cardinality" => vec!["--low-cardinality".into()],
        "mig-compute-instances" => vec!["--compute-instances".into()],
        "container-labels" => {
            let socket = s.dir.path().join("docker.sock");
            s._runtime = Some(fake_runtime(&socket));
            vec![
                "--container-labels".into(),
                "--container-runtime-socket".into(),
                socket.to_str().unwrap().to_string(),
            ]
        }
        "reload" => Vec::new(),
        other => panic!("unknown feature {other}"),
    };
    (s, args)
}

/// Drives the feature once the exporter runs and waits until the page shows it.
fn exercise(feature: &str, e: &Exporter, s: &Setup) -> Vec<Sample> {
    let any = |p: &[Sample], label: &str| p.iter().any(|x| x.label(label).is_some());
    match feature {
        "virtual-gpus" => {
            let whole = |x: &Sample| x.label("gpu") == Some("4") && x.label("GPU_I_ID").is_none();
            let uuid = label_where(&e.scrape(), "UUID", "GPU 4", whole);
            let r = "nvidia.com/gpu";
            s.kubelet.as_ref().unwrap().set_pods(vec![
                pod("a", "p0", "c", &[(r, &[&format!("{uuid}::0")])]),
                pod("a", "p1", "c", &[(r, &[&format!("{uuid}::1")])]),
            ]);
            e.scrape_until(15, |p| {
                p.iter().filter(|x| x.label("pod") == Some("p1")).count() > 1
            })
        }
        "usage-accounting" => e.scrape_until(15, |p| {
            !series(p, "DCGM_EXP_UTIL_SHARE").is_empty()
                && !series(p, "DCGM_EXP_ENERGY_JOULES_TOTAL").is_empty()
        }),
        "hpc-jobs" => e.scrape_until(15, |p| any(p, "hpc_job")),
        "low-cardinality" => e.scrape_until(15, |p| !series(p, "DCGM_EXP_MIG_INFO").is_empty()),
        "mig-compute-instances" => e.scrape_until(15, |p| any(p, "GPU_CI_ID")),
        "container-labels" => e.scrape_until(15, |p| any(p, "container")),
        "reload" => {
            let before = e.scrape_until(15, has_windows).len();
            signal(e.child.id(), "HUP");
            std::thread::sleep(Duration::from_millis(1500));
            e.scrape_until(15, |p| p.len() == before)
        }
        other => panic!("unknown feature {other}"),
    }
}

/// A device: (gpu, GPU_I_ID, GPU_CI_ID).
type Device = (String, String, String);

fn device(x: &Sample) -> Device {
    let l = |k: &str| x.label(k).unwrap_or_default().to_string();
    (l("gpu"), l("GPU_I_ID"), l("GPU_CI_ID"))
}

/// The page's invariants for one release; each problem as a line.
fn problems(version: &str, page: &[Sample]) -> Vec<String> {
    let mut out = Vec::new();
    let (ours, theirs) = if version == "4.8.2" {
        ("Hostname", "hostname")
    } else {
        ("hostname", "Hostname")
    };
    for x in page.iter().filter(|x| x.label("nvlink").is_none()) {
        if x.label(theirs).is_some() {
            out.push(format!("{}: {theirs} instead of {ours}: {x:?}", x.name));
        }
    }
    let (util, scale) = if base_units(version) {
        for gone in ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"] {
            if !series(page, gone).is_empty() {
                out.push(format!("{gone} under {version}"));
            }
        }
        for x in page.iter().filter(|x| x.name.ends_with("_RATIO")) {
            if !(0.0..=1.0).contains(&x.value) {
                out.push(format!("{} is no ratio: {x:?}", x.name));
            }
        }
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", 1.0)
    } else {
        ("DCGM_FI_DEV_GPU_UTIL", 100.0)
    };
    if series(page, util).is_empty() {
        out.push(format!("no {util}"));
    }
    for x in series(page, util) {
        if !(0.0..=scale).contains(&x.value) {
            out.push(format!("{util} out of 0-{scale}: {x:?}"));
        }
    }
    out.extend(shares_within(page, util, "pod", None));
    out.extend(shares_within(page, "DCGM_EXP_UTIL_SHARE", "", Some(100.0)));
    let power = if base_units(version) {
        "DCGM_FI_DEV_BOARD_POWER_WATTS"
    } else {
        "DCGM_FI_DEV_POWER_USAGE"
    };
    out.extend(windows(page, &[(util, scale), (power, f64::MAX)]));
    // A window is the GPU's: where the pods get shares of the utilisation (the device's own
    // series beside them), no pod has a copy of its windows.
    let window = format!("{util}_interval_max");
    for w in series(page, &window)
        .into_iter()
        .filter(|w| w.label("pod").is_some())
    {
        let shared = series(page, util)
            .iter()
            .any(|x| device(x) == device(w) && x.label("pod").is_none());
        if shared {
            out.push(format!(
                "{window}: a pod's copy beside its share: {:?}",
                w.labels
            ));
        }
    }
    out
}

fn has_windows(page: &[Sample]) -> bool {
    page.iter().any(|x| x.name.ends_with("_interval_samples"))
}

/// The windows of the aggregated `rows` (each with the most its values can be): there, each
/// 0 <= min <= mean <= max <= the most over one sample or more, and under the labels of a
/// series of the row itself.
fn windows(page: &[Sample], rows: &[(&str, f64)]) -> Vec<String> {
    let mut out = Vec::new();
    for &(row, most) in rows {
        let stat = |x: &Sample, s: &str| {
            series(page, &format!("{row}_interval_{s}"))
                .into_iter()
                .find(|w| w.labels == x.labels)
                .map(|w| w.value)
        };
        let counts = series(page, &format!("{row}_interval_samples"));
        if counts.is_empty() {
            out.push(format!("{row}: no windows"));
        }
        for n in counts {
            if !series(page, row).iter().any(|x| x.labels == n.labels) {
                out.push(format!(
                    "{row}: a window under labels of no series of it: {n:?}"
                ));
            }
            let (min, mean, max) = (stat(n, "min"), stat(n, "mean"), stat(n, "max"));
            let ordered = match (min, mean, max) {
                (Some(a), Some(m), Some(b)) => {
                    0.0 <= a && a <= m + 1e-9 && m <= b + 1e-9 && b <= most
                }
                _ => false,
            };
            if n.value < 1.0 || !ordered {
                out.push(format!(
                    "{row}: window of {} samples min {min:?} mean {mean:?} max {max:?} (at most {most}): {:?}",
                    n.value, n.labels
                ));
            }
        }
    }
    out
}

/// Per device, the sum of the `by`-labelled copies of `family` (every series, `by` empty)
/// is at most the device's own series, which must be there (or `ceiling`).
fn shares_within(page: &[Sample], family: &str, by: &str, ceiling: Option<f64>) -> Vec<String> {
    let mut sums: BTreeMap<Device, f64> = BTreeMap::new();
    let mut own: BTreeMap<Device, f64> = BTreeMap::new();
    for x in series(page, family) {
        if by.is_empty() || x.label(by).is_some() {
            *sums.entry(device(x)).or_default() += x.value;
        } else {
            own.insert(device(x), x.value);
        }
    }
    sums.into_iter()
        .filter_map(|(d, sum)| {
            // A per-process field keeps the device's own series beside the pods' shares.
            let Some(limit) = ceiling.or_else(|| own.get(&d).copied()) else {
                return Some(format!(
                    "{family} on {d:?}: pods' copies without the device's own"
                ));
            };
            (sum > limit + 1e-9).then(|| format!("{family} on {d:?}: shares {sum} over {limit}"))
        })
        .collect()
}

/// Job `job-a` holds GPU 4 alone: its share is the GPU's utilisation, in percent whatever
/// unit the release exports the utilisation in.
fn exclusive_share(version: &str, page: &[Sample]) -> Vec<String> {
    let (util, to_percent) = if base_units(version) {
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0)
    } else {
        ("DCGM_FI_DEV_GPU_UTIL", 1.0)
    };
    let on4 = |name: &str, job: Option<&str>| {
        series(page, name)
            .into_iter()
            .find(|x| {
                x.label("gpu") == Some("4")
                    && x.label("GPU_I_ID").is_none()
                    && (job.is_none() || x.label("hpc_job") == job)
            })
            .map(|x| x.value)
    };
    match (on4(util, None), on4("DCGM_EXP_UTIL_SHARE", Some("job-a"))) {
        (Some(u), Some(share)) if (u * to_percent - share).abs() < 1e-6 => Vec::new(),
        (u, share) => vec![format!(
            "job-a's share {share:?} is not GPU 4's {util} {u:?} in percent"
        )],
    }
}

#[test]
fn every_release_crossed_with_every_feature_keeps_the_pages_invariants() {
    // Without promtool the pairs still run; the lint is what is skipped.
    let promtool = promtool();
    let mut pairs = 0;
    let mut failed = Vec::new();
    for version in VERSIONS {
        for feature in FEATURES {
            let (s, args) = setup(feature);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let e = with_sim_nvml(exporter())
                .profile("a100-mixed-mig.toml")
                .args(&["-c", "500", "--emulate-version", version])
                .args(&AGGREGATE)
                .args(&args)
                .start();
            // The windows come with the second collection (the first has no samples yet).
            e.scrape_until(15, has_windows);
            let page = exercise(feature, &e, &s);
            let mut p = problems(version, &page);
            if feature == "usage-accounting" {
                p.extend(exclusive_share(version, &page));
            }
            if promtool {
                p.extend(prom::promtool_problems(&e.get("/metrics").1));
            }
            pairs += 1;
            for line in p {
                failed.push(format!("{version} x {feature}: {line}"));
            }
        }
    }
    report("crossing matrix", pairs, FEATURES.len(), &failed);
}

/// The pairs that touch DCGM, on the real kit's host engine (two injected GPUs, no MIG).
#[test]
fn real_kit_pairs_keep_the_pages_invariants() {
    let Some((kit, _dir, jobs, port, _engine)) = busy_and_idle_with_jobs("crossing", &["job-a"])
    else {
        return;
    };
    let features = ["low-cardinality", "hpc-jobs", "usage-accounting", "reload"];
    let mut pairs = 0;
    let mut failed = Vec::new();
    for version in VERSIONS {
        for feature in features {
            let args: &[&str] = match feature {
                "low-cardinality" => &["--low-cardinality"],
                "hpc-jobs" => &["--hpc-job-mapping-dir"],
                "usage-accounting" => &["--usage-accounting", "--hpc-job-mapping-dir"],
                _ => &[],
            };
            let mut b = kit
                .remote(port)
                .args(&["-c", "1000", "--emulate-version", version])
                .args(&AGGREGATE)
                .args(args);
            if feature.contains('-') && feature != "low-cardinality" {
                b = b.arg(jobs.to_str().unwrap());
            }
            let e = b.start();
            e.scrape_until(20, has_windows);
            let page = match feature {
                "low-cardinality" => {
                    e.scrape_until(20, |p| !series(p, "DCGM_EXP_GPU_INFO").is_empty())
                }
                "hpc-jobs" => {
                    e.scrape_until(20, |p| p.iter().any(|x| x.label("hpc_job").is_some()))
                }
                "usage-accounting" => {
                    e.scrape_until(20, |p| !series(p, "DCGM_EXP_UTIL_SHARE").is_empty())
                }
                _ => exercise(
                    "reload",
                    &e,
                    &Setup {
                        dir: tempfile::tempdir().unwrap(),
                        kubelet: None,
                        _runtime: None,
                    },
                ),
            };
            pairs += 1;
            for line in problems(version, &page) {
                failed.push(format!("real kit: {version} x {feature}: {line}"));
            }
        }
    }
    report(
        "crossing matrix on the real kit",
        pairs,
        features.len(),
        &failed,
    );
}

/// Says how many pairs ran; fails the test with every problem found.
fn report(what: &str, pairs: usize, features: usize, failed: &[String]) {
    let releases = VERSIONS.len();
    println!("{what}: {pairs} pairs ({releases} releases x {features} features)");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
