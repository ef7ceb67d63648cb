//! The GPU tier's script (tests/gpu/run.sh) in the mode CI can run: the real DCGM kit on an
//! NVML injection YAML, `dcgmi` standing in for nvidia-smi. It matches every exported value
//! of two GPUs with different values, embedded and remote, and it fails, naming the value,
//! when the reference is off by more than the tolerance (and not when it is off by less).

use crate::support;
use crate::support::nvml_yaml::{self, Gpu};
use crate::support::real_dcgm::{kit, Scratch};
use std::path::Path;
use std::process::{Command, Output};

/// nvidia-smi's columns as the script asks for them (gpu_tier.py's COLUMNS).
const COLUMNS: [&str; 9] = [
    "index",
    "uuid",
    "temperature.gpu",
    "power.draw",
    "memory.used",
    "memory.total",
    "memory.free",
    "clocks.sm",
    "clocks.mem",
];

fn gpus() -> Vec<Gpu> {
    vec![
        Gpu {
            temp_c: 41,
            power_mw: 61_500,
            sm_clock_mhz: 1410,
            mem_clock_mhz: 1593,
            fb_used_mib: 1234,
            ..Gpu::default()
        },
        Gpu {
            temp_c: 67,
            power_mw: 312_250,
            sm_clock_mhz: 1980,
            mem_clock_mhz: 2619,
            fb_used_mib: 40_000,
            ..Gpu::default()
        },
    ]
}

fn run_script(kit_root: &Path, yaml: &Path, out: &Path, reference: Option<&Path>) -> Output {
    let mut cmd = Command::new("bash");
    support::hermetic(&mut cmd)
        .arg(support::repo("tests/gpu/run.sh"))
        .args(["--mode", "kit", "--yaml"])
        .arg(yaml)
        .arg("--kit")
        .arg(kit_root)
        .args(["--exporter", env!("CARGO_BIN_EXE_dcgm-exporter"), "--out"])
        .arg(out);
    if let Some(r) = reference {
        cmd.arg("--reference").arg(r);
    }
    support::output_within(&mut cmd, support::BUILD)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The reference CSV with `change` applied to (GPU index, column) values.
fn doctored(reference: &str, change: impl Fn(usize, &str, f64) -> f64) -> String {
    let mut out = String::new();
    for line in reference.lines().filter(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        assert_eq!(cols.len(), COLUMNS.len(), "{line}");
        let gpu: usize = cols[0].parse().unwrap();
        let row: Vec<String> = cols
            .iter()
            .zip(COLUMNS)
            .enumerate()
            .map(|(i, (v, name))| match v.parse::<f64>() {
                Ok(x) if i >= 2 => format!("{}", change(gpu, name, x)),
                _ => v.to_string(),
            })
            .collect();
        out.push_str(&row.join(", "));
        out.push('\n');
    }
    out
}

#[test]
fn the_gpu_tier_matches_every_value_and_fails_on_a_value_out_of_tolerance() {
    let Some(kit) = kit() else { return };
    let (scratch, yaml) = Scratch::with_yaml("gpu-tier", &gpus());

    let out = scratch.0.join("ok");
    let o = run_script(&kit.root, &yaml, &out, None);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for mode in ["embedded", "remote", "nvml"] {
        assert!(
            t.contains(&format!("gpu-tier {mode}: 14 values match")),
            "{t}"
        );
    }
    assert!(!t.contains("FAIL"), "{t}");
    // The comparison was over the YAML's own values, not two equal wrong ones.
    let reference = std::fs::read_to_string(out.join("reference-embedded.csv")).unwrap();
    let page = std::fs::read_to_string(out.join("metrics-remote.prom")).unwrap();
    for (i, g) in gpus().iter().enumerate() {
        let uuid = nvml_yaml::uuid(i);
        let row = reference
            .lines()
            .find(|l| l.contains(&uuid))
            .unwrap_or_else(|| panic!("{uuid} not in {reference}"));
        let cols: Vec<f64> = row
            .split(',')
            .skip(2)
            .map(|c| c.trim().parse().unwrap())
            .collect();
        let want = [
            f64::from(g.temp_c),
            f64::from(g.power_mw) / 1000.0,
            g.fb_used_mib as f64,
            g.fb_total_mib as f64,
            (g.fb_total_mib - g.fb_used_mib - g.fb_reserved_mib) as f64,
            f64::from(g.sm_clock_mhz),
            f64::from(g.mem_clock_mhz),
        ];
        assert_eq!(cols, want, "{row}");
        let temp = support::parse(&page)
            .into_iter()
            .find(|s| s.name == "DCGM_FI_DEV_GPU_TEMP" && s.label("UUID") == Some(&uuid))
            .unwrap_or_else(|| panic!("no temperature for {uuid}: {page}"));
        assert_eq!(temp.value, f64::from(g.temp_c));
    }

    // Off by no more than each tolerance: still a match.
    let near = scratch.0.join("near.csv");
    std::fs::write(
        &near,
        doctored(&reference, |_, col, x| match col {
            "temperature.gpu" => x + 2.0,
            "power.draw" => x * 1.09,
            "clocks.sm" | "clocks.mem" => x * 0.96,
            _ => x,
        }),
    )
    .unwrap();
    let o = run_script(&kit.root, &yaml, &scratch.0.join("near"), Some(&near));
    assert!(o.status.success(), "{}", text(&o));

    // Off by more (a relative tolerance is of the reference: 61.5 W is within 10 % of 67 W
    // but not of 68.88 W): exactly those values fail, in both modes, named.
    let far = scratch.0.join("far.csv");
    std::fs::write(
        &far,
        doctored(&reference, |gpu, col, x| match (gpu, col) {
            (0, "temperature.gpu") => x + 3.0,
            (0, "power.draw") => x * 1.12,
            (1, "memory.used") => x + 2.0,
            (1, "clocks.sm") => x * 1.06,
            _ => x,
        }),
    )
    .unwrap();
    let o = run_script(&kit.root, &yaml, &scratch.0.join("far"), Some(&far));
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let mut fails: Vec<&str> = t.lines().filter(|l| l.starts_with("FAIL ")).collect();
    fails.sort();
    let (u0, u1) = (nvml_yaml::uuid(0), nvml_yaml::uuid(1));
    let mut want = Vec::new();
    for mode in ["embedded", "remote", "nvml"] {
        want.push(format!(
            "FAIL {mode}: DCGM_FI_DEV_GPU_TEMP {u0}: exported 41, temperature.gpu 44 (+-2)"
        ));
        want.push(format!(
            "FAIL {mode}: DCGM_FI_DEV_POWER_USAGE {u0}: exported 61.5, power.draw 68.88 (+-10 %)"
        ));
        want.push(format!(
            "FAIL {mode}: DCGM_FI_DEV_FB_USED {u1}: exported 40000, memory.used 40002 (+-1)"
        ));
        want.push(format!(
            "FAIL {mode}: DCGM_FI_DEV_SM_CLOCK {u1}: exported 1980, clocks.sm 2098.8 (+-5 %)"
        ));
    }
    want.sort();
    assert_eq!(fails, want, "{t}");
    for mode in ["embedded", "remote", "nvml"] {
        assert!(
            t.contains(&format!("gpu-tier {mode}: 4 mismatches of 14 values")),
            "{t}"
        );
    }
}

/// Bad input is one clear error and exit 2, not a comparison.
#[test]
fn the_gpu_tier_script_says_what_it_lacks() {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("gpu-tier-bad");
    let run = |args: &[&str]| {
        let mut cmd = Command::new("bash");
        support::hermetic(&mut cmd)
            .arg(support::repo("tests/gpu/run.sh"))
            .args(args);
        let o = support::output_within(&mut cmd, support::QUICK);
        (o.status.code(), text(&o))
    };
    let kit_root = kit.root.to_str().unwrap();
    let missing = scratch.0.join("none.yaml");
    let (code, t) = run(&[
        "--mode",
        "kit",
        "--kit",
        kit_root,
        "--yaml",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains("none.yaml does not exist"), "{t}");
    let (code, t) = run(&["--mode", "gpus"]);
    assert_eq!(
        (code, t.trim()),
        (Some(2), "gpu-tier: --mode is auto, gpu or kit, not 'gpus'")
    );
    let (code, t) = run(&["--kit", "/nonexistent", "--mode", "kit"]);
    assert_eq!(code, Some(2), "{t}");
    assert!(
        t.contains("/nonexistent/bin/nv-hostengine is missing"),
        "{t}"
    );
}

/// On a machine where nvidia-smi answers, the script takes the GPU mode, runs nvidia-smi
/// only with `--query-gpu`, and before anything starts it stops, saying how to provide it,
/// without DCGM's recorder, or when the recorder names an NVML setter it could call.
#[test]
fn the_gpu_mode_only_queries_and_checks_the_recorder_before_starting() {
    if !support::require_tool("python3", "apt-get install python3; .ci/run does") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("smi.log");
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\necho {}\n",
            log.display(),
            nvml_yaml::uuid(0)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        let mut cmd = Command::new("bash");
        support::hermetic(&mut cmd)
            .env("PATH", &path)
            .arg(support::repo("tests/gpu/run.sh"))
            .args(args);
        let o = support::output_within(&mut cmd, support::QUICK);
        (o.status.code(), text(&o))
    };

    let (code, t) = run(&[]);
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains("DCGM's recorder is not here"), "{t}");
    assert!(t.contains("--recorder DIR or DCGM_TESTING_PY=DIR"), "{t}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "--query-gpu=uuid --format=csv,noheader,nounits\n");

    // A recorder that could change the GPU is refused, naming what it would call; one that
    // only lists setters as functions it never calls (as DCGM's does) is not.
    let rec = dir.path().join("rec");
    std::fs::create_dir(&rec).unwrap();
    std::fs::write(rec.join("dcgm_nvml.py"), "").unwrap();
    std::fs::write(
        rec.join("nvml_api_recorder.py"),
        "class R:\n    _nvml_not_captured_funcs = [\"nvmlDeviceSetMigMode\"]\n\
         def record(h):\n    nvmlDeviceSetPersistenceMode(h, 1)\n",
    )
    .unwrap();
    let (code, t) = run(&["--recorder", rec.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains("refusing to run the recorder"), "{t}");
    assert!(
        t.contains("nvml_api_recorder.py:4: nvmlDeviceSetPersistenceMode"),
        "{t}"
    );
    assert!(!t.contains("nvmlDeviceSetMigMode"), "{t}");
    let good = rec.join("good.py");
    std::fs::write(
        &good,
        "key_prefixes = [\"nvmlDeviceSet\"]\nclass R:\n    _nvml_not_captured_funcs = [\"nvmlDeviceSetMigMode\", \"nvmlDeviceCreateGpuInstance\"]\n    funcs = [\"nvmlDeviceGetTemperature\"]\n",
    )
    .unwrap();
    let o = support::output_within(
        Command::new("python3")
            .arg(support::repo("tests/gpu/gpu_tier.py"))
            .arg("check-recorder")
            .arg(&good),
        support::QUICK,
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// A real GPU's NVML state, recorded on an NVIDIA H200 (driver 580, CUDA 13.0) by
/// `tests/gpu/run.sh --mode gpu` with DCGM's `nvml_api_recorder.py`, replayed through the
/// real DCGM kit: the exporter serves what the GPU showed (nvidia-smi read 37 C, 143771 MiB
/// total, 345 MHz SM clock on that GPU), and keeps serving it fresh after a SIGHUP rebuilds
/// the watches in the middle of its life (issue 28).
#[test]
fn a_recorded_h200_replays_through_the_real_dcgm_with_a_reload_in_the_middle() {
    let Some(kit) = kit() else { return };
    let yaml = support::repo("tests/gpu/recorded/h200-driver580.yaml");
    let counters = support::repo("tests/gpu/counters.csv");
    let e = kit
        .embedded(&yaml)
        .args(&["-c", "1000", "-f", counters.to_str().unwrap()])
        .start();
    let value = |p: &[support::Sample], name: &str| {
        support::series(p, name)
            .first()
            .map(|s| (s.label("UUID").unwrap_or("").to_string(), s.value))
    };
    let expect = |p: &[support::Sample]| {
        let uuid = "GPU-cce536fc-5671-8c56-30c3-5f6fa3d29c2e".to_string();
        value(p, "DCGM_FI_DEV_GPU_TEMP") == Some((uuid.clone(), 37.0))
            && value(p, "DCGM_FI_DEV_FB_TOTAL") == Some((uuid.clone(), 143771.0))
            && value(p, "DCGM_FI_DEV_SM_CLOCK") == Some((uuid, 345.0))
    };
    e.scrape_until(30, expect);
    support::signal(e.child.id(), "HUP");
    e.wait_for_log(15, "reloaded");
    // Served on every scrape for 5 intervals: sampled anew each interval (a sample is served
    // only while it is at most an interval and a second old).
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let page = e.scrape();
        assert!(expect(&page), "{}", support::dump(&page));
    }
}
