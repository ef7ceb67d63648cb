//! `RealNvml` against the simulated NVML (loaded in this process): each ask for a GPU's
//! processes carries the utilisation samples newer than the previous ask's, so consecutive
//! asks get disjoint samples with none skipped, and changes made through the simulator's
//! control file (`DCGM_SIM_CONTROL`) show in the next samples.

mod support;

use dcgm_exporter::attribution::nvml::{NvmlView, Process, RealNvml};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const US: u64 = 1_000_000;

/// Asks until `done` holds for an ask's answer (bounded: 10 s), keeping every answer.
fn ask_until(
    nvml: &RealNvml,
    uuid: &str,
    asks: &mut Vec<Vec<Process>>,
    done: impl Fn(&[Process]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = nvml.processes(uuid).expect("processes");
        let stop = done(&got);
        asks.push(got);
        if stop {
            return;
        }
        assert!(Instant::now() < deadline, "never happened: {asks:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn with_samples(ask: &[Process], pid: u32) -> bool {
    ask.iter().any(|p| p.pid == pid && !p.samples.is_empty())
}

#[test]
fn asks_get_every_sample_once_and_follow_the_control_file() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, control) = (dir.path().join("p.toml"), dir.path().join("control"));
    std::fs::write(
        &profile,
        "[gpus]\ncount = 1\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
         [[processes]]\npid = 4141\ngpu = 0\nused_memory_mib = 1024\nsm_util = 35\n\
         [[processes]]\npid = 4142\ngpu = 0\nused_memory_mib = 2048\n\
         sm_util_gen = { kind = \"ramp\", start = 10, per_s = 10, max = 100 }\n",
    )
    .unwrap();
    std::fs::write(&control, "").unwrap();
    // Read by the simulator at its first init; this test is alone in its binary.
    std::env::set_var("DCGM_SIM_PROFILE", &profile);
    std::env::set_var("DCGM_SIM_CONTROL", &control);
    let lib = support::nvml_library();
    let nvml = RealNvml::load_from(lib.as_os_str()).expect("the simulated NVML");
    let uuid = nvml_wrapper::Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .unwrap()
        .device_by_index(0)
        .unwrap()
        .uuid()
        .unwrap();

    let mut asks = Vec::new();
    // Until a second ask has seen a second of its own.
    ask_until(&nvml, &uuid, &mut asks, |a| with_samples(a, 4141));
    let first = asks.len();
    ask_until(&nvml, &uuid, &mut asks, |a| with_samples(a, 4141));
    assert!(asks.len() > first);
    std::fs::write(
        &control,
        "process_util 4141 80\nprocess_stop 4142\nprocess_start 9001 0 sm_util=5 used_memory_mib=64\n",
    )
    .unwrap();
    ask_until(&nvml, &uuid, &mut asks, |a| with_samples(a, 9001));

    // Every (pid, second) once over all asks, each ask's samples newer than the ones
    // before, oldest first, and sm_util the newest of them.
    let mut seen: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
    let mut newest_before = 0;
    for ask in &asks {
        let mut newest = newest_before;
        for p in ask {
            assert_eq!(p.sm_util, p.samples.last().map(|s| s.sm_util), "{p:?}");
            assert_eq!(p.gpu_instance, None);
            assert!(p
                .samples
                .windows(2)
                .all(|w| w[0].timestamp_us < w[1].timestamp_us));
            for s in &p.samples {
                assert!(s.timestamp_us > newest_before, "{asks:?}");
                newest = newest.max(s.timestamp_us);
                seen.entry(p.pid)
                    .or_default()
                    .push((s.timestamp_us, s.sm_util));
            }
        }
        newest_before = newest;
    }
    // No second skipped: 4141 has one sample for each second from the first to the last.
    let steady = &seen[&4141];
    let (t0, t_end) = (steady[0].0, steady.last().unwrap().0);
    assert_eq!(steady.len() as u64, (t_end - t0) / US + 1, "{steady:?}");
    // The ramp moved from second to second while it ran; 4141 went from 35 to 80.
    let ramp: Vec<u32> = seen[&4142].iter().map(|s| s.1).collect();
    assert!(ramp.len() >= 2 && ramp.windows(2).all(|w| w[1] == (w[0] + 10).min(100)));
    let levels: Vec<u32> = steady.iter().map(|s| s.1).collect();
    let at = levels.iter().position(|u| *u == 80).expect("the new level");
    assert!(levels[..at].iter().all(|u| *u == 35) && levels[at..].iter().all(|u| *u == 80));
    // The last ask: the stopped process gone, the started one there with its memory.
    let last = asks.last().unwrap();
    let pids: Vec<(u32, Option<u64>)> = last.iter().map(|p| (p.pid, p.memory_bytes)).collect();
    assert_eq!(pids, [(4141, Some(1024 << 20)), (9001, Some(64 << 20))]);
    assert_eq!(last[1].sm_util, Some(5));
}
