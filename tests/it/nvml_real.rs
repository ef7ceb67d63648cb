//! The NVML backend against NVIDIA's own NVML injection library (issue 31, item 4): the
//! kit's `libnvml_injection.so.1` answers NVML from the same YAML the real DCGM 4.6 reads,
//! so the page `--backend nvml` serves must equal the real DCGM's (embedded) for every field
//! both serve, value for value, over every row of the NVML table; and `auto` serves from
//! NVML while the real embedded engine cannot start.

use crate::support;
use crate::support::nvml_yaml::Gpu;
use crate::support::real_dcgm::{kit, Scratch};
use crate::support::*;
use std::collections::BTreeMap;

/// Every field of the NVML backend's table (src/collect/nvml/table.rs).
const CSV: &str = "DCGM_FI_DRIVER_VERSION, label, driver\n\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock\n\
DCGM_FI_DEV_MEM_CLOCK, gauge, memory clock\n\
DCGM_FI_DEV_VIDEO_CLOCK, gauge, video clock\n\
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, clock-event reasons\n\
DCGM_FI_DEV_MAX_SM_CLOCK, gauge, max SM clock\n\
DCGM_FI_DEV_MAX_MEM_CLOCK, gauge, max memory clock\n\
DCGM_FI_DEV_MAX_VIDEO_CLOCK, gauge, max video clock\n\
DCGM_FI_DEV_MEMORY_TEMP, gauge, memory temperature\n\
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature\n\
DCGM_FI_DEV_POWER_USAGE, gauge, power\n\
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, energy\n\
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, PCIe replays\n\
DCGM_FI_DEV_XID_ERRORS, gauge, last XID\n\
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, NVLink flit CRC\n\
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, NVLink data CRC\n\
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, counter, NVLink replays\n\
DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, NVLink recoveries\n\
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge, NVLink throughput\n\
DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_TOTAL, gauge, NVLink TX\n\
DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_TOTAL, gauge, NVLink RX\n\
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilisation\n\
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, memory utilisation\n\
DCGM_FI_DEV_ENC_UTIL, gauge, encoder utilisation\n\
DCGM_FI_DEV_DEC_UTIL, gauge, decoder utilisation\n\
DCGM_FI_DEV_FB_TOTAL, gauge, FB total\n\
DCGM_FI_DEV_FB_FREE, gauge, FB free\n\
DCGM_FI_DEV_FB_USED, gauge, FB used\n\
DCGM_FI_DEV_FB_RESERVED, gauge, FB reserved\n\
DCGM_FI_DEV_FB_USED_PERCENT, gauge, FB used ratio\n\
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, SBE volatile\n\
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE volatile\n\
DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, SBE aggregate\n\
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, DBE aggregate\n\
DCGM_FI_DEV_RETIRED_DBE, counter, retired DBE\n\
DCGM_FI_DEV_RETIRED_PENDING, counter, retired pending\n\
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, remapped unc\n\
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, remapped cor\n\
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, remap failure\n\
DCGM_FI_DEV_ROW_REMAP_PENDING, gauge, remap pending\n";

/// Two GPUs with different values in every field the YAML describes.
fn gpus() -> Vec<Gpu> {
    let busy = Gpu {
        temp_c: 61,
        memory_temp_c: 48,
        power_mw: 312_250,
        energy_mj: 987_654_321,
        sm_clock_mhz: 1755,
        mem_clock_mhz: 2619,
        fb_used_mib: 40_000,
        gpu_util: 87,
        mem_util: 33,
        enc_util: 4,
        dec_util: 9,
        remapped_rows: (5, 2, 1, 1),
        pcie_replays: 7,
        ecc_volatile: (3, 1),
        ecc_aggregate: (12, 2),
        nvlink_errors: (4, 3, 2, 1),
        clocks_event_reasons: 0x4,
        nvlink_data_kib: (5_000_000, 9_000_000),
        ..Gpu::default()
    };
    vec![Gpu::default(), busy]
}

/// Per `DCGM_FI_*` family: TYPE and HELP lines and the sorted series lines.
fn families(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let name = line
            .strip_prefix("# TYPE ")
            .or_else(|| line.strip_prefix("# HELP "))
            .unwrap_or(line)
            .split(['{', ' '])
            .next()
            .unwrap_or_default();
        if name.starts_with("DCGM_FI_") {
            out.entry(name.into()).or_default().push(line.into());
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn page_after_two_collections(e: &Exporter) -> String {
    e.scrape_until(20, |p| {
        series(p, "dcgm_exporter_collections_total")
            .iter()
            .any(|s| s.label("result") == Some("success") && s.value >= 2.0)
    });
    e.get("/metrics").1
}

#[test]
fn the_nvml_page_equals_the_real_dcgms_on_the_same_injected_gpus() {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-conformance");
    let yaml = scratch.yaml(&gpus());
    let csv = scratch.0.join("counters.csv");
    std::fs::write(&csv, CSV).unwrap();
    let csv = csv.to_str().unwrap();
    let dcgm = kit.embedded(&yaml).args(&["-f", csv]).start();
    let injection = kit.lib_dir().join("libnvml_injection.so.1");
    let mut nvml = exporter().args(&[
        "-f",
        csv,
        "--backend",
        "nvml",
        "--nvml-library",
        injection.to_str().unwrap(),
    ]);
    for (k, v) in kit.env(&yaml) {
        nvml = nvml.env(&k, &v);
    }
    let nvml = nvml.start();
    let d = families(&page_after_two_collections(&dcgm));
    let n = families(&page_after_two_collections(&nvml));
    for (name, lines) in &n {
        assert_eq!(Some(lines), d.get(name), "{name}");
    }
    // What the YAML describes, both serve: the core of the table at least (the default
    // set's device fields and these).
    let defaults = DEFAULT_METRICS
        .iter()
        .filter(|n| n.starts_with("DCGM_FI_DEV_"));
    for name in defaults.chain(&[
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_TOTAL",
    ]) {
        assert!(n.contains_key(*name), "NVML lacks {name}: {:?}", n.keys());
    }
    // The injection NVML's NVLink KiB counters are the YAML's, static and non-zero: DCGM's
    // rate of them is 0 from its first sample on (no previous one, then no difference),
    // and so is the NVML backend's.
    for name in [
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_TOTAL",
    ] {
        let rows: Vec<&String> = n[name].iter().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 2, "{name}: {rows:?}");
        assert!(rows.iter().all(|l| l.ends_with(" 0")), "{name}: {rows:?}");
    }
    // Several collections on, both still compute it, still equal.
    let later = |e: &Exporter| {
        e.scrape_until(30, |p| {
            series(p, "dcgm_exporter_collections_total")
                .iter()
                .any(|s| s.label("result") == Some("success") && s.value >= 6.0)
        });
        families(&e.get("/metrics").1)
    };
    let (d6, n6) = (later(&dcgm), later(&nvml));
    for name in ["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_GPU_TEMP"] {
        assert_eq!(d6.get(name), n6.get(name), "{name}");
        assert!(n6.contains_key(name), "{name}");
    }
    // A field the real DCGM serves that NVML's page lacks must be one NVML left out at
    // start with its line, never silently.
    for name in d.keys().filter(|k| !n.contains_key(*k)) {
        assert!(
            nvml.stderr().contains(&format!("skipping {name}")),
            "{name} is on DCGM's page only, and not named:\n{}",
            nvml.stderr()
        );
    }
    // NVIDIA's injection NVML takes the XID registration but never raises an event (its
    // nvmlEventSetWait_v2 always times out): the row is kept, and neither page has an XID.
    let log = nvml.stderr();
    assert!(!log.contains("skipping DCGM_FI_DEV_XID_ERRORS"), "{log}");
    assert!(!log.contains("no XID events from NVML"), "{log}");
    assert!(!n.contains_key("DCGM_FI_DEV_XID_ERRORS") && !d.contains_key("DCGM_FI_DEV_XID_ERRORS"));
    // The second GPU's own values (injected, not defaults).
    let temp = &n["DCGM_FI_DEV_GPU_TEMP"];
    assert!(
        temp.iter()
            .any(|l| l.contains("gpu=\"1\"") && l.ends_with(" 61")),
        "{temp:?}"
    );
    let replays = &n["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"];
    assert!(replays.iter().any(|l| l.ends_with(" 2")), "{replays:?}");
    let power = &n["DCGM_FI_DEV_POWER_USAGE"];
    assert!(power.iter().any(|l| l.ends_with(" 312.25")), "{power:?}");
}

fn backend(p: &[Sample]) -> Option<&str> {
    series(p, "dcgm_exporter_backend")
        .into_iter()
        .find(|s| s.value == 1.0)
        .and_then(|s| s.label("backend"))
}

/// GPU temperatures by GPU: the injected 45 and 61 while anything serves.
fn temps(p: &[Sample]) -> Vec<(String, f64)> {
    let mut t: Vec<(String, f64)> = series(p, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .map(|s| (s.label("gpu").unwrap_or_default().to_string(), s.value))
        .collect();
    t.sort_by(|a, b| a.0.cmp(&b.0));
    t
}

fn injected() -> Vec<(String, f64)> {
    vec![("0".into(), 45.0), ("1".into(), 61.0)]
}

/// A remote nv-hostengine killed with -9 and restarted, then stopped with SIGSTOP and
/// resumed, under `--backend auto`: the core series continue from NVML (NVIDIA's injection
/// library over the same YAML) with the injected values on every scrape, the DCGM-only
/// series go, and DCGM serves again once the engine is back.
#[test]
fn auto_survives_a_real_engine_killed_and_stopped_without_going_blind() {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-failover");
    let yaml = scratch.yaml(&gpus());
    let port = free_port();
    let mut he = support::real_dcgm::RealHostEngine::start(kit, &yaml, &scratch.0, port);
    let injection = kit.lib_dir().join("libnvml_injection.so.1");
    let mut b = kit.remote(port).args(&[
        "-c",
        "500",
        "--backend",
        "auto",
        "--nvml-library",
        injection.to_str().unwrap(),
    ]);
    for (k, v) in kit.env(&yaml) {
        b = b.env(&k, &v);
    }
    let e = b.start();
    let dcgm_page =
        |p: &[Sample]| backend(p) == Some("dcgm") && !series(p, "DCGM_EXP_GPU_COUNT").is_empty();
    let never_blind =
        |p: &[Sample]| assert_eq!(temps(p), injected(), "blind or wrong:\n{}", dump(p));
    let (page, _) = watch_until(&e, 30, |_| {}, dcgm_page);
    assert_eq!(temps(&page), injected());
    for what in ["kill -9", "SIGSTOP"] {
        if what == "kill -9" {
            he.kill();
        } else {
            he.signal("STOP");
        }
        let (page, took) = watch_until(&e, 30, never_blind, |p| backend(p) == Some("nvml"));
        assert!(
            series(&page, "DCGM_EXP_GPU_COUNT").is_empty(),
            "{what}:\n{}",
            dump(&page)
        );
        assert!(
            series(&page, "DCGM_FI_DEV_XID_ERRORS").is_empty(),
            "{what}:\n{}",
            dump(&page)
        );
        // Several NVML pages later: still NVML, still the injected values.
        let n: f64 = collections(&page);
        watch_until(&e, 20, never_blind, |p| {
            backend(p) == Some("nvml") && collections(p) >= n + 3.0
        });
        if what == "kill -9" {
            he.restart(kit);
        } else {
            he.signal("CONT");
        }
        let (_, back) = watch_until(&e, 90, never_blind, dcgm_page);
        eprintln!("failover timing ({what}, real kit, -c 500): NVML after {took:?}, DCGM again after {back:?}");
    }
    let log = e.stderr();
    assert_eq!(
        log.matches("serving the core GPU series from NVML until it returns")
            .count(),
        2,
        "{log}"
    );
    assert_eq!(log.matches("DCGM is back").count(), 2, "{log}");
}

/// Issue 43 item 1 on the real DCGM 4.6: a remote nv-hostengine whose GPUs (the YAML's) are
/// not this machine's, whose NVML is the simulated 8x H100 driver. The engine reported its
/// GPUs at connect, none of them NVML's: failover off, said at that connect; killed, its
/// series are withdrawn and the H100s never served in their place (on main: eight H100
/// series, `backend="nvml"`).
#[test]
fn auto_never_serves_this_machines_gpus_for_a_real_engine_on_other_gpus() {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-other-machine");
    let yaml = scratch.yaml(&gpus());
    let port = free_port();
    let mut he = support::real_dcgm::RealHostEngine::start(kit, &yaml, &scratch.0, port);
    let sim = nvml_library();
    let e = kit
        .remote(port)
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-c", "500"])
        .nvml_fallback(&sim)
        .start();
    let uuids = |p: &[Sample]| -> Vec<String> {
        series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .map(|s| s.label("UUID").unwrap_or_default().to_string())
            .collect()
    };
    let (page, _) = watch_until(
        &e,
        30,
        |_| {},
        |p| backend(p) == Some("dcgm") && temps(p) == injected(),
    );
    let engines = uuids(&page);
    e.wait_for_log(10, "NVML failover is off for the host engine at");
    he.kill();
    let t0 = std::time::Instant::now();
    loop {
        let p = e.scrape();
        let others: Vec<String> = uuids(&p)
            .into_iter()
            .filter(|u| !engines.contains(u))
            .collect();
        assert!(
            others.is_empty() && backend(&p) != Some("nvml"),
            "this machine's GPUs served for the engine ({} series):\n{}",
            others.len(),
            dump(&p)
        );
        if t0.elapsed().as_secs() >= 5 && temps(&p).is_empty() {
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "never withdrawn:\n{}",
            dump(&p)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(e.get("/ready").0, 503);
}

/// The real libdcgm whose embedded engine cannot start (DCGM_ST_INIT_ERROR: its NVML, the
/// injection library, finds no YAML to initialise from) under `--backend auto`: the core
/// series come from the exporter's own NVML (the simulated driver's, another library than
/// the engine's), the start is retried, and DCGM serves once its NVML can initialise.
#[test]
fn auto_serves_from_nvml_while_the_real_embedded_engine_cannot_start() {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-embedded-start");
    let ready = scratch.yaml(&gpus());
    let yaml = scratch.0.join("later.yaml");
    let nvml = nvml_library();
    let e = kit
        .embedded(&yaml)
        .profile("units-fixed.toml")
        .args(&["-c", "500"])
        .nvml_fallback(&nvml)
        .start();
    let from_sim = vec![("0".to_string(), 45.0)];
    let page = e.scrape_until(30, |p| backend(p) == Some("nvml") && temps(p) == from_sim);
    assert!(
        series(&page, "DCGM_EXP_GPU_COUNT").is_empty(),
        "{}",
        dump(&page)
    );
    let (code, body) = e.get("/health");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("backend: nvml") && body.contains("dcgmStartEmbedded"),
        "{body}"
    );
    let never_blind = |p: &[Sample]| assert!(!temps(p).is_empty(), "blind:\n{}", dump(p));
    let n: f64 = collections(&page);
    watch_until(&e, 20, never_blind, |p| collections(p) >= n + 3.0);
    std::fs::rename(&ready, &yaml).unwrap();
    let (page, back) = watch_until(&e, 60, never_blind, |p| {
        backend(p) == Some("dcgm") && !series(p, "DCGM_EXP_GPU_COUNT").is_empty()
    });
    assert_eq!(temps(&page), injected(), "{}", dump(&page));
    assert_eq!(e.get("/health"), (200, "OK".to_string()));
    let log = e.stderr();
    assert!(
        log.contains("started the embedded DCGM host engine"),
        "{log}"
    );
    assert_eq!(log.matches("DCGM is back").count(), 1, "{log}");
    eprintln!("real kit: DCGM again {back:?} after its NVML could initialise (-c 500)");
}

/// NVLink throughput on a MIG GPU of the injected node: the real DCGM answers field 449
/// asked of a GPU instance from its "practical entity", the parent GPU (a GPU-level
/// field), so each instance has a series with its GPU's value, as the NVML backend reads
/// it (`On::of`; compared value for value on the simulated MIG node in
/// tests/it/nvml_backend.rs: the injection NVML answers nvmlDeviceGetMigDeviceHandleByIndex
/// with INVALID_ARGUMENT for this YAML, so the NVML backend sees no instance here).
#[test]
fn the_real_dcgm_serves_nvlink_throughput_on_gpu_instances_from_their_gpu() {
    use crate::support::nvml_yaml::MigInstance;
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-nvlink-mig");
    let mut gpus = gpus();
    gpus[0].mig = MigInstance::three_and_one();
    let yaml = scratch.yaml(&gpus);
    let csv = scratch.0.join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge, NVLink throughput\n",
    )
    .unwrap();
    let dcgm = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let d = families(&page_after_two_collections(&dcgm));
    let rows = |name: &str| -> Vec<String> {
        d[name]
            .iter()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').map_or(l.clone(), |(k, _)| k.to_string()))
            .collect()
    };
    // The same entities as a GPU-level field read from the parent (the temperature): GPU
    // 0's two instances and GPU 1, each with its GPU's (static counters: 0) value.
    let bw = rows("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL");
    assert_eq!(bw.len(), 3, "{bw:?}");
    assert_eq!(
        bw.iter().filter(|l| l.contains("GPU_I_ID=")).count(),
        2,
        "{bw:?}"
    );
    let temp: Vec<String> = rows("DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .map(|l| l.replace("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"))
        .collect();
    assert_eq!(bw, temp);
    assert!(d["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
        .iter()
        .filter(|l| !l.starts_with('#'))
        .all(|l| l.ends_with(" 0")));
}

/// Issue 43 item 3 on the real DCGM 4.6: the failover's NVML collector follows the
/// configuration. A remote nv-hostengine over the injected H100s, the exporter's NVML the
/// same injection library (so the engine's GPU UUIDs are NVML's and NVML stands in for it).
/// Killed, NVML serves; a row removed from the counters file while NVML serves goes from
/// NVML's page (on main the failover collector was built once: nothing changed); the engine
/// back, a second row removed while DCGM serves; killed again, NVML serves the current
/// counters, neither removed row back (main: the first failover's counters). Collections
/// go on counting, the injected values on every page, for several intervals after each.
#[test]
fn the_failover_collector_follows_reloads_and_a_second_failover_serves_the_current_counters_on_the_real_kit(
) {
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-failover-reload");
    let yaml = scratch.yaml(&gpus());
    let csv = scratch.0.join("counters.csv");
    let rows = [
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature",
        "DCGM_FI_DEV_POWER_USAGE, gauge, power",
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock",
        "DCGM_FI_DEV_MEM_CLOCK, gauge, memory clock",
    ];
    let write = |without: &[&str]| {
        let kept: Vec<&str> = rows
            .iter()
            .copied()
            .filter(|r| !without.iter().any(|f| r.starts_with(&format!("{f},"))))
            .collect();
        assert_eq!(kept.len() + without.len(), rows.len());
        // Written beside and renamed, so no collection reads half a file.
        let tmp = scratch.0.join("counters.csv.new");
        std::fs::write(&tmp, kept.join("\n") + "\n").unwrap();
        std::fs::rename(&tmp, &csv).unwrap();
    };
    write(&[]);
    let port = free_port();
    let mut he = support::real_dcgm::RealHostEngine::start(kit, &yaml, &scratch.0, port);
    let injection = kit.lib_dir().join("libnvml_injection.so.1");
    let mut b = kit.remote(port).args(&[
        "-f",
        csv.to_str().unwrap(),
        "-c",
        "500",
        "--backend",
        "auto",
        "--nvml-library",
        injection.to_str().unwrap(),
    ]);
    for (k, v) in kit.env(&yaml) {
        b = b.env(&k, &v);
    }
    let e = b.start();
    let has = |p: &[Sample], name: &str| !series(p, name).is_empty();
    let (power, mem_clock) = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_MEM_CLOCK");
    // Every page until the first failover: the injected temperatures.
    let never_blind =
        |p: &[Sample]| assert_eq!(temps(p), injected(), "blind or wrong:\n{}", dump(p));
    // `secs` of pages checked with `check` until `from` serves, then until it has counted
    // 3 more collections (several intervals on: values still advancing).
    let serves = |from: &str, secs: u64, check: &dyn Fn(&[Sample]), what: &str| {
        let (page, took) = watch_until(
            &e,
            secs,
            |p| check(p),
            |p| backend(p) == Some(from) && temps(p) == injected(),
        );
        let n = collections(&page);
        let (page, _) = watch_until(
            &e,
            20,
            |p| check(p),
            |p| backend(p) == Some(from) && collections(p) >= n + 3.0,
        );
        eprintln!("real kit, -c 500: {what}: {from} after {took:?}");
        page
    };
    let page = serves("dcgm", 30, &|_| {}, "start");
    assert!(
        has(&page, power) && has(&page, mem_clock),
        "{}",
        dump(&page)
    );
    e.wait_for_log(10, "NVML stands in for the host engine's 2 GPUs");

    he.kill();
    let page = serves("nvml", 30, &never_blind, "engine killed");
    assert!(
        has(&page, power) && has(&page, mem_clock),
        "{}",
        dump(&page)
    );

    // While NVML serves: a row removed goes from NVML's page, the others stay.
    write(&["DCGM_FI_DEV_POWER_USAGE"]);
    let (page, took) = watch_until(&e, 20, never_blind, |p| {
        backend(p) == Some("nvml") && !has(p, power)
    });
    eprintln!("real kit: a row removed while NVML serves gone after {took:?}");
    assert!(
        has(&page, mem_clock) && has(&page, "DCGM_FI_DEV_SM_CLOCK"),
        "{}",
        dump(&page)
    );
    let power_gone = |p: &[Sample]| {
        never_blind(p);
        assert!(!has(p, power), "the removed row is back:\n{}", dump(p));
    };
    serves("nvml", 5, &power_gone, "after the reload");

    // The engine back: DCGM serves the current counters; a second row removed there.
    he.restart(kit);
    let page = serves("dcgm", 90, &power_gone, "engine restarted");
    assert!(has(&page, mem_clock), "{}", dump(&page));
    write(&["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_MEM_CLOCK"]);
    e.scrape_until(20, |p| backend(p) == Some("dcgm") && !has(p, mem_clock));

    // Killed again: NVML serves the current counters, neither removed row back.
    let both_gone = |p: &[Sample]| {
        power_gone(p);
        assert!(
            !has(p, mem_clock),
            "a row removed while DCGM served is back:\n{}",
            dump(p)
        );
    };
    he.kill();
    let page = serves("nvml", 30, &both_gone, "engine killed again");
    assert!(has(&page, "DCGM_FI_DEV_SM_CLOCK"), "{}", dump(&page));
    let log = e.stderr();
    assert_eq!(
        log.matches("serving the core GPU series from NVML until it returns")
            .count(),
        2,
        "{log}"
    );
}

/// Issue 43 item 6 on the real DCGM 4.6: `-d i:<ids>` names DCGM's GPU-instance entity ids
/// on both backends. Both GPUs of the injected node are split, their MIG devices named by
/// UUID (`MigDeviceUUID`, a `MigDevice` section) so that the injection NVML's
/// `nvmlDeviceGetMigDeviceHandleByIndex` finds them: GPU 0 a 3g.40gb (GI 2) and a 1g.10gb
/// (GI 9), GPU 1 a 4g.40gb (GI 1) and a 2g.20gb (GI 5). DCGM numbers a GPU's instances
/// `gpu * 7 + index`, the index by profile then GI id: 0 is GPU 0's GI 9, 1 its GI 2, 7
/// GPU 1's GI 5, 8 its GI 1. `-d i:0,8` selects the same two instances on the embedded real
/// library and on the injection NVML (on main NVML numbered them `gpu * 16 + GI id`: 9, 2,
/// 21, 17, so `i:0,8` matched nothing there).
#[test]
fn dash_d_instance_ids_select_the_same_instances_on_the_real_dcgm_and_the_injection_nvml() {
    use crate::support::nvml_yaml::MigInstance;
    let Some(kit) = kit() else { return };
    let scratch = Scratch::new("nvml-mig-selection");
    let mut gpus = gpus();
    gpus[0].mig = MigInstance::three_and_one();
    gpus[1].mig = vec![
        MigInstance {
            slices: 4,
            nvml_id: 1,
            start: 0,
        },
        MigInstance {
            slices: 2,
            nvml_id: 5,
            start: 4,
        },
    ];
    for g in &mut gpus {
        g.mig_uuids = true;
    }
    let yaml = scratch.yaml(&gpus);
    let csv = scratch.0.join("counters.csv");
    std::fs::write(&csv, "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n").unwrap();
    let csv = csv.to_str().unwrap();
    let injection = kit.lib_dir().join("libnvml_injection.so.1");
    let selected = |e: &Exporter| -> Vec<String> {
        let p = e.scrape_until(30, |p| collections(p) >= 2.0);
        let mut v: Vec<String> = series(&p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .map(|s| {
                ["gpu", "GPU_I_ID", "GPU_I_PROFILE"]
                    .map(|l| s.label(l).unwrap_or("-"))
                    .join(",")
            })
            .collect();
        v.sort();
        v
    };
    let pages = |sel: &[&str]| {
        let dcgm = kit.embedded(&yaml).args(&["-f", csv]).args(sel).start();
        let mut b = exporter().args(&[
            "-f",
            csv,
            "--backend",
            "nvml",
            "--nvml-library",
            injection.to_str().unwrap(),
        ]);
        b = b.args(sel);
        for (k, v) in kit.env(&yaml) {
            b = b.env(&k, &v);
        }
        let nvml = b.start();
        (selected(&dcgm), selected(&nvml), nvml.stderr())
    };
    // Unselected, both see the same four instances.
    let (d, n, log) = pages(&[]);
    assert_eq!(
        d,
        ["0,2,3g.40gb", "0,9,1g.10gb", "1,1,4g.40gb", "1,5,2g.20gb"],
        "the real DCGM's instances"
    );
    assert_eq!(n, d, "the injection NVML's instances:\n{log}");
    for (ids, want) in [
        ("i:0,8", ["0,9,1g.10gb", "1,1,4g.40gb"]),
        ("i:1,7", ["0,2,3g.40gb", "1,5,2g.20gb"]),
    ] {
        let (d, n, log) = pages(&["-d", ids]);
        assert_eq!(d, want, "-d {ids} on the real DCGM");
        assert_eq!(n, d, "-d {ids} on the injection NVML:\n{log}");
    }
}
