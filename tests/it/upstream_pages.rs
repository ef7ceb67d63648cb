//! The page of each emulated release on the simulator, against fixtures taken from upstream's
//! own test expectations (tests/fixtures/upstream/page-<version>.txt names the upstream test
//! file and function each part comes from): label names and order per entity group, and the
//! HELP/TYPE of every row of the release's built-in default counter set.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A node with every entity group upstream's Test_render covers: GPUs with NVLinks, a switch
/// with ports, a CPU with cores.
const PROFILE: &str = "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\nnvlinks = 2\n\
                       [switches]\ncount = 1\nports = 2\n\
                       [cpus]\ncount = 1\ncores_per_cpu = 2\nvendor = \"NVIDIA\"\nmodel = \"Grace A02P\"\n";

struct Fixture {
    /// Entity group -> its labels in order.
    labels: BTreeMap<String, Vec<String>>,
    /// Name -> (type, help).
    families: BTreeMap<String, (String, String)>,
}

fn fixture(version: &str) -> Fixture {
    let path = repo(&format!("tests/fixtures/upstream/page-{version}.txt"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut f = Fixture {
        labels: BTreeMap::new(),
        families: BTreeMap::new(),
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut words = line.splitn(4, ' ');
        match words.next() {
            Some("labels") => {
                let rest: Vec<String> = line.split(' ').skip(1).map(String::from).collect();
                f.labels.insert(rest[0].clone(), rest[1..].to_vec());
            }
            Some("family") => {
                let (name, ty) = (words.next().unwrap(), words.next().unwrap());
                let help = words.next().unwrap_or_default();
                f.families
                    .insert(name.to_string(), (ty.to_string(), help.to_string()));
            }
            other => panic!("{}: bad line {other:?}: {line}", path.display()),
        }
    }
    f
}

/// Runs the exporter without -f (so the built-in set of the emulated release applies) until
/// it serves GPU temperatures; returns the page.
fn page_without_f(dir: &tempfile::TempDir, extra: &[&str]) -> String {
    page_with(dir, extra, &["DCGM_FI_DEV_GPU_TEMP"])
}

/// As [`page_without_f`], until the page has a series of each of `ready` (the profiling
/// fields have none in the first collection).
fn page_with(dir: &tempfile::TempDir, extra: &[&str], ready: &[&str]) -> String {
    sim_built();
    let profile = write_in(dir.path(), "node.toml", PROFILE);
    let port = free_port();
    let mut cmd = exporter_command();
    cmd.args(["-a", &format!("127.0.0.1:{port}"), "-c", "300"])
        .args(extra)
        .arg("--dcgm-library")
        .arg(sim_library())
        // Upstream's tests name the host `testhost`.
        .env("NODE_NAME", "testhost")
        .env("DCGM_SIM_PROFILE", &profile)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    assert!(
        !std::path::Path::new("/etc/dcgm-exporter/default-counters.csv").exists(),
        "a default-counters.csv at the default path would replace the built-in set"
    );
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        if let Ok((200, body)) = http_get(&format!("http://127.0.0.1:{port}/metrics")) {
            if ready.iter().all(|n| body.contains(&format!("\n{n}{{"))) {
                break body;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("exited early: {st}");
        }
        assert!(Instant::now() < deadline, "no {ready:?} series within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    page
}

/// `# HELP` and `# TYPE` of every family on the page.
fn help_and_type(page: &str) -> BTreeMap<String, (String, String)> {
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.into()).or_default().1 = help.into();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            out.entry(name.into()).or_default().0 = ty.into();
        }
    }
    out
}

/// The rows that changed between 4.8.2 and 4.8.4 (help or type), on the simulated page so
/// that the comparison covers them.
const CHANGED_IN_4_8: [&str; 6] = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_FB_USED",
];

fn check_default_page(version: &str, extra: &[&str]) -> String {
    check_page_of(version, extra, &CHANGED_IN_4_8)
}

/// Checks the page of the release's built-in set against its fixture; `present`: rows the
/// comparison must cover. Returns the page.
fn check_page_of(version: &str, extra: &[&str], present: &[&str]) -> String {
    let want = fixture(version);
    let dir = tempfile::tempdir().unwrap();
    let page = page_with(&dir, extra, present);
    let got = help_and_type(&page);
    // Every DCGM family on the page is a row of the release's set, with its HELP and TYPE.
    let dcgm: Vec<&String> = got.keys().filter(|n| n.starts_with("DCGM_FI_")).collect();
    for name in &dcgm {
        assert_eq!(
            Some(&got[*name]),
            want.families.get(*name),
            "{version}: {name}\n{page}"
        );
    }
    for name in present {
        assert!(got.contains_key(*name), "{version}: {name} missing\n{page}");
    }
    let samples = parse(&page);
    let gpu_labels = &want.labels["GPU"];
    // The release's one `label` row: the driver version, under that release's name.
    let (label, _) = want
        .families
        .iter()
        .find(|(_, (ty, _))| ty == "label")
        .expect("a label row");
    let temp = samples
        .iter()
        .find(|s| s.name.starts_with("DCGM_FI_DEV_GPU_TEMP"))
        .map(|s| s.name.clone())
        .expect("a GPU temperature");
    for s in series(&samples, &temp) {
        assert_eq!(
            &s.label_order[..gpu_labels.len()],
            &gpu_labels[..],
            "{version}"
        );
        assert_eq!(s.label(gpu_labels.last().unwrap()), Some("testhost"));
        // The `label` row of the set: a label on every GPU series, after the identity.
        assert_eq!(
            s.label_order.get(gpu_labels.len()),
            Some(label),
            "{version}"
        );
    }
    page
}

/// The default: 4.8.4's set and labels (upstream d5e5f51's Test_render / TestMetrics).
#[test]
fn the_default_page_is_4_8_4s() {
    check_default_page("4.8.4", &[]);
    check_default_page("4.8.4", &["--emulate-version", "4.8.4"]);
}

/// One setting away: 4.8.2's set and `Hostname` (Test_render / TestMetrics at 4.5.3-4.8.2).
#[test]
fn emulating_4_8_2_gives_4_8_2s_page() {
    check_default_page("4.8.2", &["--emulate-version", "4.8.2"]);
}

/// 4.10.0: 4.9.0's names and units with the PCIe byte rates named `..._BYTES_PER_SECOND`,
/// and none of them under its old name.
#[test]
fn emulating_4_10_0_gives_4_10_0s_page() {
    for extra in [
        ["--emulate-version", "4.10.0"],
        ["--emulate-version", "4.8.0-4.10.0"],
    ] {
        let page = check_page_of(
            "4.10.0",
            &extra,
            &[
                "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                "DCGM_FI_DEV_SM_CLOCK_HERTZ",
                "DCGM_FI_DEV_FB_USED_BYTES",
                "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
                "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
            ],
        );
        for old in [
            "DCGM_FI_PROF_PCIE_TX_BYTES{",
            "DCGM_FI_PROF_PCIE_RX_BYTES{",
            "DCGM_FI_DEV_GPU_TEMP{",
        ] {
            assert!(!page.contains(old), "{old}\n{page}");
        }
        assert!(page.contains("emulated=\"4.10.0\""), "{page}");
    }
}

/// A counters file in either name of the four fields 4.10.0 renamed works under every
/// release, and the page shows the emulated release's name, with one warning per row
/// written in the other generation's name.
#[test]
fn either_name_of_the_pcie_rates_works_under_every_release() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, tx: &str, rx: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!("DCGM_FI_DEV_GPU_TEMP, gauge, t\n{tx}, gauge, tx\n{rx}, gauge, rx\n"),
        )
        .unwrap();
        p
    };
    let old = write(
        "old.csv",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    );
    let new = write(
        "new.csv",
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
    );
    for version in ["4.8.2", "4.8.4", "4.9.0", "4.10.0"] {
        let suffix = if version == "4.10.0" {
            "_PER_SECOND"
        } else {
            ""
        };
        let (tx, rx) = (
            format!("DCGM_FI_PROF_PCIE_TX_BYTES{suffix}"),
            format!("DCGM_FI_PROF_PCIE_RX_BYTES{suffix}"),
        );
        for (csv, renamed) in [(&old, !suffix.is_empty()), (&new, suffix.is_empty())] {
            let e = exporter()
                .args(&["-f", csv.to_str().unwrap(), "--emulate-version", version])
                .start();
            let page = e.scrape_until(20, |p| {
                !series(p, &tx).is_empty() && !series(p, &rx).is_empty()
            });
            let file = csv.file_name().unwrap().to_string_lossy();
            assert_eq!(series(&page, &tx).len(), 8, "{version} {file}");
            // The same field under either name: one family per direction, bytes/s.
            let names: std::collections::BTreeSet<&str> = page
                .iter()
                .filter(|s| s.name.starts_with("DCGM_FI_PROF_PCIE_"))
                .map(|s| s.name.as_str())
                .collect();
            assert_eq!(names, [rx.as_str(), tx.as_str()].into(), "{version} {file}");
            let log = e.stderr();
            let warned = log.lines().filter(|l| l.contains("4.10.0")).count();
            assert_eq!(
                warned,
                if renamed { 2 } else { 0 },
                "{version} {file}: {log}"
            );
        }
    }
}

/// Switch, link, CPU and core series carry the labels of upstream's Test_render cases, in
/// both releases (links kept `hostname` in 4.8.2).
#[test]
fn every_entity_group_is_labelled_as_upstreams_render_test_expects() {
    let dir = tempfile::tempdir().unwrap();
    let field = |level: u32| {
        dcgm_sys::fields::FIELDS
            .iter()
            .find(|f| f.entity_level == level && (f.field_type == b'd' || f.field_type == b'i'))
            .unwrap()
            .name
    };
    let csv = write_in(
        dir.path(),
        "entities.csv",
        format!(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
             DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT, gauge, switch\n\
             DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, gpu link\n\
             DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX, gauge, switch link\n\
             {}, gauge, cpu\n{}, gauge, core\n",
            field(7),
            field(8)
        ),
    );
    for version in ["4.8.4", "4.8.2"] {
        let want = fixture(version);
        let page = page_without_f(
            &dir,
            &["-f", csv.to_str().unwrap(), "--emulate-version", version],
        );
        let samples = parse(&page);
        let check = |name: &str, group: &str, pick: &dyn Fn(&Sample) -> bool| {
            let labels = &want.labels[group];
            let got: Vec<&Sample> = series(&samples, name)
                .into_iter()
                .filter(|s| pick(s))
                .collect();
            assert!(!got.is_empty(), "{version}: no {name} ({group})\n{page}");
            for s in got {
                assert_eq!(s.label_order, *labels, "{version}: {name} ({group})");
                assert_eq!(s.label(labels.last().unwrap()), Some("testhost"));
            }
        };
        check("DCGM_FI_DEV_GPU_TEMP", "GPU", &|_| true);
        check(
            "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT",
            "Switch",
            &|_| true,
        );
        check("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK", "GpuLink", &|s| {
            s.label("gpu").is_some()
        });
        check(
            "DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX",
            "SwitchLink",
            &|s| s.label("nvswitch").is_some(),
        );
        check(field(7), "CPU", &|_| true);
        check(field(8), "CPUCore", &|_| true);
    }
}

/// 4.8.3's `cpu_serial` label (release notes only: its position is ours, after the
/// hostname): on a CPU's series where DCGM reports a serial number, not on a CPU without
/// one, and not with --emulate-version=4.8.2.
#[test]
fn cpu_series_carry_the_serial_dcgm_reports_from_4_8_3() {
    let (dir, profile) = temp_file(
        "serials.toml",
        "[gpus]\ncount = 1\nmodel = \"NVIDIA GH200 480GB\"\n\
         [cpus]\ncount = 2\ncores_per_cpu = 2\nserials = [\"0x00000001c0ffee00\"]\n",
    );
    let cpu_field = dcgm_sys::fields::FIELDS
        .iter()
        .find(|f| f.entity_level == 7 && (f.field_type == b'd' || f.field_type == b'i'))
        .unwrap()
        .name;
    let csv = write_in(
        dir.path(),
        "cpu.csv",
        format!("DCGM_FI_DEV_GPU_TEMP, gauge, t\n{cpu_field}, gauge, cpu\n"),
    );
    for (version, serial) in [("4.8.4", Some("0x00000001c0ffee00")), ("4.8.2", None)] {
        let e = exporter()
            .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
            .env("NODE_NAME", "testhost")
            .args(&["-f", csv.to_str().unwrap(), "--emulate-version", version])
            .start();
        let page = e.scrape_until(20, |p| series(p, cpu_field).len() == 2);
        let cpus = series(&page, cpu_field);
        let of = |id: &str| *cpus.iter().find(|s| s.label("cpu") == Some(id)).unwrap();
        assert_eq!(of("0").label("cpu_serial"), serial, "{version}");
        assert_eq!(of("1").label("cpu_serial"), None, "{version}");
        if serial.is_some() {
            assert_eq!(
                of("0").label_order,
                ["cpu", "hostname", "cpu_serial"],
                "{version}"
            );
        }
    }
}

/// The setting refuses releases it does not emulate, from the flag and the environment,
/// with one line naming the flag and the accepted values.
#[test]
fn an_unknown_release_to_emulate_stops_the_start() {
    for (args, env) in [
        (vec!["--emulate-version", "4.8.3"], None),
        (vec![], Some("latest")),
    ] {
        let mut b = exporter().args(&args);
        if let Some(v) = env {
            b = b.env("DCGM_EXPORTER_EMULATE_VERSION", v);
        }
        let (code, err) = b.run_to_exit();
        assert_eq!(code, 1, "{args:?} {env:?}");
        assert!(
            err.contains("--emulate-version") && err.contains("use 4.8.2, 4.8.4, 4.9.0 or 4.10.0"),
            "{err}"
        );
        assert_eq!(
            err.lines().filter(|l| l.contains("fatal")).count(),
            1,
            "{err}"
        );
    }
}

/// The XID counters with the XID field also a `label` row (dcgm-exporter 4.10.0's fix,
/// held in every emulated release here): the window count and the total count each XID,
/// the gauge shows the last one and the label carries it on the GPU's series. A label row
/// and a metric row of one name are a label and a metric, never "listed again": in 4.9.0
/// and later the label row written in 4.8.x's name takes the gauge's 4.9.0 name.
#[test]
fn xid_counters_keep_counting_when_the_xid_field_is_also_a_label_row() {
    // (release, the label row's name, the gauge row's name, both as exported)
    for (version, label, gauge, exported) in [
        (
            "4.8.4",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_XID_ERRORS",
        ),
        (
            "4.10.0",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_XID_ERROR",
            "DCGM_FI_DEV_XID_ERROR",
        ),
    ] {
        let csv = format!(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n{label}, label, last xid\n\
             {gauge}, gauge, last xid value\n\
             DCGM_EXP_XID_ERRORS_COUNT, gauge, xids in window\n\
             DCGM_EXP_XID_ERRORS_TOTAL, counter, xids since start\n"
        );
        xid_label_row(version, &csv, exported);
    }
}

fn xid_label_row(version: &str, csv_text: &str, name: &str) {
    let (dir, ctl) = temp_file("control", "");
    let csv = write_in(dir.path(), "xid.csv", csv_text);
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&ctl)
        .args(&["-f", csv.to_str().unwrap(), "-c", "250"])
        .args(&["--emulate-version", version])
        .start();
    // Before any XID: one zero total and one zero window count per GPU.
    let page = e.scrape_until(15, |p| series(p, "DCGM_EXP_XID_ERRORS_TOTAL").len() == 8);
    assert_eq!(
        series(&page, "DCGM_EXP_XID_ERRORS_COUNT").len(),
        8,
        "{version}: {}",
        dump(&page)
    );
    let counted = |p: &[Sample], metric: &str, xid: &str| -> Vec<(String, f64)> {
        series(p, metric)
            .into_iter()
            .filter(|s| s.label("xid") == Some(xid))
            .map(|s| (s.label("gpu").unwrap_or_default().to_string(), s.value))
            .collect()
    };
    for (n, xid) in [(1, "79"), (2, "13")] {
        control(&ctl, &format!("xid 2 {xid}"));
        let page = e.scrape_until(15, |p| {
            !counted(p, "DCGM_EXP_XID_ERRORS_TOTAL", xid).is_empty()
                && !counted(p, "DCGM_EXP_XID_ERRORS_COUNT", xid).is_empty()
                && series(p, "DCGM_EXP_XID_ERRORS_TOTAL")
                    .iter()
                    .any(|s| s.label(name) == Some(xid))
        });
        let one = vec![("2".to_string(), 1.0)];
        assert_eq!(
            counted(&page, "DCGM_EXP_XID_ERRORS_TOTAL", xid),
            one,
            "{version}, XID {n}: {}",
            dump(&page)
        );
        assert_eq!(counted(&page, "DCGM_EXP_XID_ERRORS_COUNT", xid), one);
        let last = series(&page, name);
        assert_eq!(last.len(), 1, "{version}: {}", dump(&page));
        assert_eq!(last[0].label("gpu"), Some("2"));
        assert_eq!(last[0].value, xid.parse::<f64>().unwrap());
        assert_eq!(last[0].label("err_code"), Some(xid));
        // The label is on GPU 2's series only, the XID counters' included.
        let labelled = |s: &&Sample| s.label(name).is_some_and(|v| !v.is_empty());
        let on: Vec<&str> = page
            .iter()
            .filter(labelled)
            .map(|s| s.name.as_str())
            .collect();
        assert!(
            on.iter().any(|n| n.starts_with("DCGM_FI_DEV_GPU_TEMP")),
            "{version}: {on:?}"
        );
        for s in page.iter().filter(labelled) {
            assert_eq!(s.label("gpu"), Some("2"), "{version}: {s:?}");
        }
    }
    assert!(!e.stderr().contains("listed again"), "{}", e.stderr());
}
