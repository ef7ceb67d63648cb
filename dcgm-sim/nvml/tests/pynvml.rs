//! NVIDIA's own Python bindings (`nvidia-ml-py`, module `pynvml`), unchanged, against the
//! simulated NVML found through `LD_LIBRARY_PATH` as `libnvidia-ml.so.1`: GPUs, MIG devices
//! and processes agree with what the simulated DCGM reports for the same profile.
//! Skipped, with the reason printed, when python3 or pynvml is missing (fails under CI).

#![forbid(unsafe_code)]

mod support;

use serde_json::Value;
use std::process::Command;
use support::*;

/// pynvml's view of a profile, or `None` (test skipped) without python3/pynvml.
fn pynvml_view(profile: &str) -> Option<Value> {
    let out = match Command::new("python3")
        .arg(repo("dcgm-sim/nvml/tests/pynvml_dump.py"))
        .env("LD_LIBRARY_PATH", built())
        .env("DCGM_SIM_PROFILE", repo(&format!("etc/sim/{profile}")))
        .env_remove("DCGM_SIM_CONTROL")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip::skip(&format!("python3 cannot be run ({e})"));
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        skip::skip(stderr.trim());
        return None;
    }
    assert!(out.status.success(), "pynvml_dump.py failed: {stderr}");
    Some(serde_json::from_slice(&out.stdout).expect("JSON from pynvml_dump.py"))
}

#[test]
fn pynvml_sees_the_gpus_mig_devices_and_processes_dcgm_describes() {
    let Some(v) = pynvml_view("a100-mixed-mig.toml") else {
        return;
    };
    let dcgm = {
        let _l = lock();
        use_profile("a100-mixed-mig.toml");
        dcgm_view()
    };
    assert_eq!(v["driver"], "550.54.15");
    assert_eq!(v["nvml"], "12.550.54.15");
    assert_eq!(v["cuda"], 12040);
    assert_eq!(v["unsimulated"], "Not Supported");
    // A value call NVIDIA's bindings make, answered from the simulated DCGM's readings.
    let temp = v["temperature"].as_u64().expect("a temperature");
    assert!((20..=100).contains(&temp), "{temp}");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), dcgm.len());
    for (p, d) in gpus.iter().zip(&dcgm) {
        let at = format!("GPU {}", d.id);
        assert_eq!(p["index"], d.id, "{at}");
        assert_eq!(p["minor"], d.id, "{at}");
        assert_eq!(p["by_uuid_index"], d.id, "{at}");
        assert_eq!(p["by_pci_index"], d.id, "{at}");
        assert_eq!(p["uuid"], d.uuid.as_str(), "{at}");
        assert_eq!(p["name"], d.name.as_str(), "{at}");
        assert_eq!(p["pci_bus_id"], d.pci_bus_id.as_str(), "{at}");
        assert_eq!(p["mig_mode"] == 1, d.mig_mode, "{at}");
        let mem: Vec<u64> = serde_json::from_value(p["memory"].clone()).unwrap();
        assert_eq!(
            mem[0],
            mem[1] + mem[2] + mem[3],
            "{at}: total = reserved + free + used"
        );

        // MIG devices: one per compute instance DCGM lists, with its GPU-instance and
        // compute-instance ids, the parent's UUID, and the instance UUID DCGM reports.
        let migs = p["mig"].as_array().unwrap();
        let ids: Vec<(u32, u32)> = migs
            .iter()
            .map(|m| {
                (
                    m["gi"].as_u64().unwrap() as u32,
                    m["ci"].as_u64().unwrap() as u32,
                )
            })
            .collect();
        let mut want = d.compute_instances.clone();
        let mut got = ids.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{at}");
        for (gi, uuid) in &d.instances {
            let first = migs
                .iter()
                .find(|m| m["gi"] == *gi && m["ci"] == 0)
                .unwrap_or_else(|| panic!("{at}: no MIG device for GPU instance {gi}"));
            assert_eq!(first["uuid"], uuid.as_str(), "{at} GI {gi}");
        }
        for m in migs {
            assert_eq!(m["is_mig"], 1);
            assert_eq!(m["parent_uuid"], d.uuid.as_str());
            assert!(m["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{} MIG ", d.name)));
        }
    }

    // Processes: on MIG GPUs with their instance ids (parent) and on their MIG device only.
    let pids = |v: &Value| -> Vec<(u64, u64, u64)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["pid"].as_u64().unwrap(),
                    p["gi"].as_u64().unwrap(),
                    p["used"].as_u64().unwrap() >> 20,
                )
            })
            .collect()
    };
    assert_eq!(
        pids(&gpus[0]["compute"]),
        [(4101, 7, 3072), (4102, 9, 5120)]
    );
    let mig_with = |gpu: usize, pid: u64| -> Vec<(u64, u64)> {
        gpus[gpu]["mig"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| pids(&m["compute"]).iter().any(|p| p.0 == pid))
            .map(|m| (m["gi"].as_u64().unwrap(), m["ci"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(mig_with(0, 4101), [(7, 0)]);
    assert_eq!(mig_with(1, 4111), [(1, 0)]);
    assert_eq!(mig_with(2, 4121), [(0, 1)]);
    let none = u64::from(u32::MAX);
    assert_eq!(
        pids(&gpus[4]["compute"]),
        [(4141, none, 8192), (4142, none, 4096)]
    );
    assert_eq!(gpus[4]["utilization"]["4141"], 35);
    assert_eq!(gpus[4]["utilization"]["4142"], 20);
    assert_eq!(gpus[0]["utilization"], "Not Supported");
    assert_eq!(gpus[6]["utilization"], "Not Found");
    // A compute+graphics process is in both lists.
    assert_eq!(pids(&gpus[5]["compute"]), [(4151, none, 1024)]);
    assert_eq!(pids(&gpus[5]["graphics"]), [(4151, none, 1024)]);
    assert!(gpus[4]["graphics"].as_array().unwrap().is_empty());
}

/// (pid, timestamp µs, SM %) as pynvml_samples.py prints a sample.
type Sample = (u64, u64, u64);

/// pynvml reads samples that change from second to second (a profile generator) and with
/// the control file (a process's utilisation, processes starting and stopping), each read
/// asking for what is newer than the last sample it saw.
#[test]
fn pynvml_reads_per_process_samples_that_change_over_time() {
    let dir = std::env::temp_dir().join(format!("nvml-sim-pynvml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.toml");
    let control = dir.join("control");
    std::fs::write(
        &profile,
        "[gpus]\ncount = 1\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
         [[processes]]\npid = 4141\ngpu = 0\nused_memory_mib = 1024\nsm_util = 35\n\
         [[processes]]\npid = 4142\ngpu = 0\n\
         sm_util_gen = { kind = \"ramp\", start = 10, per_s = 10, max = 100 }\n",
    )
    .unwrap();
    std::fs::write(&control, "").unwrap();
    let out = match Command::new("python3")
        .arg(repo("dcgm-sim/nvml/tests/pynvml_samples.py"))
        .env("LD_LIBRARY_PATH", built())
        .env("DCGM_SIM_PROFILE", &profile)
        .env("DCGM_SIM_CONTROL", &control)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip::skip(&format!("python3 cannot be run ({e})"));
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        skip::skip(stderr.trim());
        return;
    }
    assert!(out.status.success(), "pynvml_samples.py failed: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from pynvml_samples.py");
    std::fs::remove_dir_all(&dir).unwrap();

    // Each read: (pid, timestamp µs, SM %) newer than what the read before it saw.
    let reads: Vec<(u64, Vec<Sample>)> = v["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["since"].as_u64().unwrap(),
                serde_json::from_value(r["samples"].clone()).unwrap(),
            )
        })
        .collect();
    assert_eq!(v["not_found"], serde_json::json!([]));
    for (since, samples) in &reads {
        assert!(!samples.is_empty());
        assert!(samples.iter().all(|s| s.1 > *since && s.1 % 1_000_000 == 0));
    }
    let all: Vec<Sample> = reads.iter().flat_map(|r| r.1.clone()).collect();
    assert!(all.windows(2).all(|w| w[0].1 <= w[1].1), "oldest first");
    let start = all[0].1;
    // The ramp: +10 points a second from 10, every second sampled exactly once.
    let ramp: Vec<(u64, u64)> = all
        .iter()
        .filter(|s| s.0 == 4142)
        .map(|s| ((s.1 - start) / 1_000_000, s.2))
        .collect();
    for (i, (second, util)) in ramp.iter().enumerate() {
        assert_eq!(*second, i as u64, "{ramp:?}");
        assert_eq!(*util, (10 + 10 * second).min(100), "{ramp:?}");
    }
    assert!(ramp.len() >= 3);

    // Per second: the other processes' (pid, SM %) next to the ramp.
    let seconds = |samples: &[Sample]| -> Vec<Vec<(u64, u64)>> {
        let mut out: Vec<(u64, Vec<(u64, u64)>)> = Vec::new();
        for s in samples.iter().filter(|s| s.0 != 4142) {
            match out.last_mut() {
                Some((t, l)) if *t == s.1 => l.push((s.0, s.2)),
                _ => out.push((s.1, vec![(s.0, s.2)])),
            }
        }
        out.into_iter().map(|(_, l)| l).collect()
    };
    let (before, changed, stopped) = (
        vec![(4141, 35)],
        vec![(4141, 80), (9001, 5)],
        vec![(4141, 80)],
    );
    assert!(seconds(&reads[0].1).iter().all(|s| *s == before));
    // Seconds that passed before the simulator read the new lines keep the old state.
    let second = seconds(&reads[1].1);
    let at = second.iter().position(|s| *s == changed).unwrap();
    assert!(second[..at].iter().all(|s| *s == before), "{second:?}");
    assert!(second[at..].iter().all(|s| *s == changed), "{second:?}");
    assert_eq!(v["running"], serde_json::json!([4141, 4142, 9001]));
    let third = seconds(&reads[2].1);
    let at = third.iter().position(|s| *s == stopped).unwrap();
    assert!(third[..at].iter().all(|s| *s == changed), "{third:?}");
    assert!(third[at..].iter().all(|s| *s == stopped), "{third:?}");
}
