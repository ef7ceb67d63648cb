//! The page of each emulated release on the simulator, against fixtures taken from upstream's
//! own test expectations (tests/fixtures/upstream/page-<version>.txt names the upstream test
//! file and function each part comes from): label names and order per entity group, and the
//! HELP/TYPE of every row of the release's built-in default counter set.

mod support;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::*;

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
    sim_built();
    let profile = dir.path().join("node.toml");
    std::fs::write(&profile, PROFILE).unwrap();
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
            if body.contains("DCGM_FI_DEV_GPU_TEMP{") {
                break body;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("exited early: {st}");
        }
        assert!(Instant::now() < deadline, "no GPU series within 30 s");
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

fn check_default_page(version: &str, extra: &[&str]) {
    let want = fixture(version);
    let dir = tempfile::tempdir().unwrap();
    let page = page_without_f(&dir, extra);
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
    // The rows that changed between releases are on the simulated page, so the comparison
    // covers them.
    for name in [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_FB_USED",
    ] {
        assert!(got.contains_key(name), "{version}: {name} missing\n{page}");
    }
    let samples = parse(&page);
    let gpu_labels = &want.labels["GPU"];
    for s in series(&samples, "DCGM_FI_DEV_GPU_TEMP") {
        assert_eq!(
            &s.label_order[..gpu_labels.len()],
            &gpu_labels[..],
            "{version}"
        );
        assert_eq!(s.label(gpu_labels.last().unwrap()), Some("testhost"));
        // The `label` row of the set: a label on every GPU series, after the identity.
        assert_eq!(want.families["DCGM_FI_DRIVER_VERSION"].0, "label");
        assert_eq!(
            s.label_order.get(gpu_labels.len()).map(String::as_str),
            Some("DCGM_FI_DRIVER_VERSION")
        );
    }
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
    let csv = dir.path().join("entities.csv");
    std::fs::write(
        &csv,
        format!(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
             DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT, gauge, switch\n\
             DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, gpu link\n\
             DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX, gauge, switch link\n\
             {}, gauge, cpu\n{}, gauge, core\n",
            field(7),
            field(8)
        ),
    )
    .unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("serials.toml");
    std::fs::write(
        &profile,
        "[gpus]\ncount = 1\nmodel = \"NVIDIA GH200 480GB\"\n\
         [cpus]\ncount = 2\ncores_per_cpu = 2\nserials = [\"0x00000001c0ffee00\"]\n",
    )
    .unwrap();
    let cpu_field = dcgm_sys::fields::FIELDS
        .iter()
        .find(|f| f.entity_level == 7 && (f.field_type == b'd' || f.field_type == b'i'))
        .unwrap()
        .name;
    let csv = dir.path().join("cpu.csv");
    std::fs::write(
        &csv,
        format!("DCGM_FI_DEV_GPU_TEMP, gauge, t\n{cpu_field}, gauge, cpu\n"),
    )
    .unwrap();
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
            err.contains("--emulate-version") && err.contains("use 4.8.2, 4.8.4 or 4.9.0"),
            "{err}"
        );
        assert_eq!(
            err.lines().filter(|l| l.contains("fatal")).count(),
            1,
            "{err}"
        );
    }
}
