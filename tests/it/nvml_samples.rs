//! `RealNvml` against the simulated NVML (loaded in this process): each ask for a GPU's
//! processes carries the utilisation samples newer than the previous ask's, so consecutive
//! asks get disjoint samples with none skipped, and changes made through the simulator's
//! control file (`DCGM_SIM_CONTROL`) show in the next samples. And the exporter's NVML
//! backend reads the driver's device sample buffers (`nvmlDeviceGetSamples`) for
//! sub-interval aggregation: a spike between two collections reaches the max series.

use crate::support::{self, temp_file};
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
    crate::support::alone!(asks_get_every_sample_once_and_follow_the_control_file);
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
    // Read by the simulator at its first init; this test is alone in its process.
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

/// Sub-interval aggregation (issue 47) on the NVML backend: the driver's own sample
/// buffers (`nvmlDeviceGetSamples`: the simulated NVML keeps a power and clock sample every
/// 100 ms) are read in full at each collection, so a 300 ms power spike between two
/// collections shows in `DCGM_FI_DEV_POWER_USAGE_interval_max` of its GPU (and its MIG
/// instances), never in the gauge (`nvmlDeviceGetPowerUsage` at the collection) nor on
/// another GPU. NVML keeps no temperature samples: that row is named at start and left out.
#[test]
fn a_spike_between_two_collections_shows_in_the_nvml_max_series_only() {
    use crate::support::spikes::{check_spike, pages_through_spike};
    let (_dir, ctl) = temp_file("control", "");
    let fields = "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK";
    let e = support::with_sim_nvml(support::exporter())
        .profile("a100-mixed-mig.toml")
        .args(&["--backend", "nvml", "-c", "2000", "--aggregate", fields])
        .args(&["--aggregate-period", "100ms"])
        .control(&ctl)
        .start();
    let pages = pages_through_spike(&e, &ctl, "spike 0 155 950 300 700", "0", 950.0, 30);
    check_spike(&pages[1..], "0", 950.0, 20.0, 10.0);
    let last = pages.last().unwrap();
    let clocks = support::series(last, "DCGM_FI_DEV_SM_CLOCK_interval_max");
    assert_eq!(
        clocks.len(),
        support::series(last, "DCGM_FI_DEV_SM_CLOCK").len()
    );
    assert!(support::series(last, "DCGM_FI_DEV_GPU_TEMP_interval_max").is_empty());
    let log = e.stderr();
    assert!(
        log.contains("not aggregating DCGM_FI_DEV_GPU_TEMP: NVML keeps no samples of field 150"),
        "{log}"
    );
}

/// Sub-interval aggregation across a failover (issue 47): when DCGM goes away and NVML
/// stands in (`--backend auto`), NVML's first window begins when its collector is built:
/// the samples its driver buffered while DCGM served (the simulated NVML fills back 1200
/// of them, two minutes, when first asked) never count. A window holds the samples since
/// NVML's previous collection, which the failover takes between the engine's reconnect
/// tries (every 2 s here, some 3.5 s apart while those back off): tens, never hundreds.
#[test]
fn a_failover_to_nvml_starts_its_windows_afresh() {
    let (_dir, ctl) = temp_file("control", "");
    let e = support::with_sim_nvml(support::exporter())
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["--backend", "auto", "-c", "2000"])
        .args(&[
            "--aggregate",
            "DCGM_FI_DEV_POWER_USAGE",
            "--aggregate-period",
            "100ms",
        ])
        .control(&ctl)
        .start();
    let source = |p: &[support::Sample]| {
        support::series(p, "dcgm_exporter_backend")
            .into_iter()
            .find(|s| s.value == 1.0)
            .and_then(|s| s.label("backend").map(str::to_string))
    };
    let samples = "DCGM_FI_DEV_POWER_USAGE_interval_samples";
    let windows = |p: &[support::Sample]| -> Vec<f64> {
        support::series(p, samples)
            .iter()
            .map(|s| s.value)
            .collect()
    };
    e.scrape_until(30, |p| {
        source(p).as_deref() == Some("dcgm") && !windows(p).is_empty()
    });
    support::control(&ctl, "library_gone");
    // Every NVML page from the first.
    let (page, _) = support::watch_until(
        &e,
        30,
        |p| {
            if source(p).as_deref() == Some("nvml") {
                assert!(windows(p).iter().all(|n| *n <= 60.0), "{:?}", windows(p));
            }
        },
        |p| source(p).as_deref() == Some("nvml") && windows(p).len() == 8,
    );
    let again = e.scrape_until(10, |p| {
        windows(p) != windows(&page) && source(p).as_deref() == Some("nvml")
    });
    assert!(
        windows(&again).iter().all(|n| *n >= 10.0 && *n <= 60.0),
        "{:?}",
        windows(&again)
    );
}
