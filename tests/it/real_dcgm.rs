//! The exporter against the real DCGM 4.6 (NVIDIA's libdcgm.so.4 embedded, and the real
//! nv-hostengine in remote mode), with NVML answers injected from YAML that these tests
//! write (tests/support/nvml_yaml.rs). Skipped, with the reason printed, where the kit is
//! absent or cannot run (tests/support/real_dcgm.rs).

use crate::support;
use crate::support::nvml_yaml::{self, Gpu};
use crate::support::real_dcgm::{busy_and_idle_with_jobs, kit, RealHostEngine, Scratch};
use crate::support::*;

/// Four GPUs that differ in every value the default counters read.
fn four_gpus() -> Vec<Gpu> {
    (0..4u32)
        .map(|i| Gpu {
            temp_c: 40 + i,
            power_mw: 75_000 + 10_000 * i,
            sm_clock_mhz: 345 + 100 * i,
            fb_used_mib: 1000 * u64::from(i),
            gpu_util: 10 * i,
            ..Gpu::default()
        })
        .collect()
}

/// Two of `four_gpus`, GPU 0 split into a 3g.40gb (GPU instance 2) and a 1g.10gb (GPU
/// instance 9) through NVML injection.
fn two_gpus_the_first_split() -> Vec<Gpu> {
    let mut gpus = four_gpus();
    gpus.truncate(2);
    gpus[0].mig = nvml_yaml::MigInstance::three_and_one();
    gpus
}

/// The rows of an upstream counters CSV (name, is it a profiling field).
fn csv_rows(file: &str) -> Vec<String> {
    std::fs::read_to_string(repo(file))
        .expect("read CSV")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(',').next().unwrap_or("").trim().to_string())
        .collect()
}

const UPSTREAM_CSVS: [&str; 3] = [
    "etc/default-counters.csv",
    "etc/dcp-metrics-included.csv",
    "etc/1.x-compatibility-metrics.csv",
];

#[test]
fn embedded_mode_serves_each_upstream_counter_file_without_the_profiling_rows() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("csv");
    let yaml = dir.yaml(&four_gpus());
    for csv in UPSTREAM_CSVS {
        let e = kit
            .embedded(&yaml)
            .args(&["-f", &repo(csv).display().to_string()])
            .start();
        check_upstream_csv(&e, csv);
    }
}

#[test]
fn remote_mode_serves_each_upstream_counter_file_without_the_profiling_rows() {
    let Some((kit, _dir, _yaml, port, _engine)) = real_engine("csv-remote", &four_gpus()) else {
        return;
    };
    for csv in UPSTREAM_CSVS {
        let e = kit
            .remote(port)
            .args(&["-f", &repo(csv).display().to_string()])
            .start();
        check_upstream_csv(&e, csv);
    }
}

/// Every GPU with its own values and identity, the profiling rows skipped with a warning
/// each, everything else served.
fn check_upstream_csv(e: &Exporter, csv: &str) {
    let page = e.scrape_until(10, |p| {
        p.iter().any(|s| {
            s.name == "dcgm_exporter_collections_total"
                && s.label("result") == Some("success")
                && s.value >= 2.0
        })
    });
    let (temp, power, sm, used) = if csv.contains("1.x") {
        (
            "dcgm_gpu_temp",
            "dcgm_power_usage",
            "dcgm_sm_clock",
            "dcgm_fb_used",
        )
    } else {
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_FB_USED",
        )
    };
    for i in 0..4u32 {
        let g = i.to_string();
        assert_eq!(gpu_value(&page, temp, &g), f64::from(40 + i), "{csv}");
        assert_eq!(gpu_value(&page, power, &g), f64::from(75 + 10 * i), "{csv}");
        assert_eq!(gpu_value(&page, sm, &g), f64::from(345 + 100 * i), "{csv}");
        assert_eq!(gpu_value(&page, used, &g), f64::from(1000 * i), "{csv}");
        let s = series(&page, temp)
            .into_iter()
            .find(|s| s.label("gpu") == Some(&g))
            .unwrap();
        assert_eq!(s.label("UUID"), Some(nvml_yaml::uuid(i as usize).as_str()));
        assert_eq!(s.label("modelName"), Some(nvml_yaml::MODEL));
        assert_eq!(
            s.label("pci_bus_id"),
            Some(nvml_yaml::pci_bus_id(i as usize).as_str())
        );
    }
    // The kit has no profiling module: every profiling row is skipped with a warning,
    // the rest is served.
    let err = e.stderr();
    for row in csv_rows(csv) {
        let prof = dcgm_sys::fields::by_name(&row)
            .or_else(|| dcgm_sys::fields::by_name(&row.to_uppercase()))
            .is_some_and(|m| m.id >= 1001);
        if prof || row.to_uppercase().starts_with("DCGM_FI_PROF_") {
            assert!(
                err.contains(&format!("skipping {row}")),
                "{csv}: no warning for {row}: {err}"
            );
            assert!(series(&page, &row).is_empty(), "{csv}: {row} served");
        }
    }
    assert_eq!(
        self_metric(
            &page,
            "dcgm_exporter_collections_total",
            &[("result", "error")]
        ),
        0.0,
        "{csv}"
    );
    let (code, _) = e.get("/ready");
    assert_eq!(code, 200, "{csv}");
}

#[test]
fn a_failing_p2p_query_costs_only_its_own_series() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("p2p");
    // No P2PStatus in the YAML: NVML answers an error, DCGM's P2P query BadParam.
    let yaml = dir.yaml(&four_gpus());
    let csv = dir.0.join("p2p.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_EXP_P2P_STATUS, gauge, P2P status\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n",
    )
    .unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap(), "-c", "200"])
        .start();
    let page = e.scrape_until(10, |p| {
        self_metric(
            p,
            "dcgm_exporter_collection_errors_total",
            &[("source", "DCGM_EXP_P2P_STATUS"), ("reason", "BadParam")],
        ) >= 3.0
    });
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4);
    assert_eq!(series(&page, "DCGM_EXP_GPU_HEALTH_STATUS").len(), 4 * 11);
    assert!(series(&page, "DCGM_EXP_P2P_STATUS").is_empty());
    assert_eq!(
        self_metric(
            &page,
            "dcgm_exporter_collections_total",
            &[("result", "error")]
        ),
        0.0
    );
    assert_eq!(self_metric(&page, "dcgm_exporter_dcgm_connected", &[]), 1.0);
    // Logged once, not on every tick.
    assert_eq!(
        e.stderr().matches("DCGM_EXP_P2P_STATUS: ").count(),
        1,
        "{}",
        e.stderr()
    );
}

#[test]
fn p2p_status_comes_from_nvml_when_it_answers() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("p2p-ok");
    let gpus: Vec<Gpu> = (0..3)
        .map(|_| Gpu {
            p2p: Some(0),
            nvlinks: vec![true; 18],
            ..Gpu::default()
        })
        .collect();
    let yaml = dir.yaml(&gpus);
    let csv = dir.0.join("p2p.csv");
    std::fs::write(&csv, "DCGM_EXP_P2P_STATUS, gauge, P2P status\n").unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    let p2p = series(&page, "DCGM_EXP_P2P_STATUS");
    assert_eq!(p2p.len(), 3 * 2, "{}", dump(&page));
    assert!(p2p
        .iter()
        .all(|s| s.value == 0.0 && s.label("link_status") == Some("OK")));
}

#[test]
fn ecc_errors_and_remapped_rows_of_one_gpu_stay_on_that_gpu() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("ecc");
    let mut gpus = vec![Gpu::default(); 3];
    gpus[2].ecc_volatile = (7, 2);
    gpus[2].ecc_aggregate = (70, 20);
    gpus[2].remapped_rows = (3, 1, 0, 0);
    let yaml = dir.yaml(&gpus);
    let csv = dir.0.join("ecc.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, sbe volatile\n\
         DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, dbe volatile\n\
         DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, sbe aggregate\n\
         DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, dbe aggregate\n\
         DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, remapped cor\n\
         DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, remapped unc\n",
    )
    .unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(10, |p| {
        series(p, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL").len() == 3
            && series(p, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS").len() == 3
    });
    for (name, want) in [
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 7.0),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2.0),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 70.0),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 20.0),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 3.0),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1.0),
    ] {
        assert_eq!(gpu_value(&page, name, "2"), want, "{name}");
        assert_eq!(gpu_value(&page, name, "0"), 0.0, "{name}");
        assert_eq!(gpu_value(&page, name, "1"), 0.0, "{name}");
    }
}

#[test]
fn remote_mode_recovers_from_a_killed_and_restarted_host_engine() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("remote");
    let yaml = dir.yaml(&four_gpus());
    let port = free_port();
    let mut engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let e = kit
        .remote(port)
        .args(&["-c", "300"])
        .env("NODE_NAME", "real-node")
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4);
    assert_eq!(gpu_value(&page, "DCGM_FI_DEV_GPU_TEMP", "3"), 43.0);
    // 4.8.3's rule (#697): a loopback engine is this node, named by NODE_NAME.
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP")[0].label("hostname"),
        Some("real-node")
    );
    for round in 0..2 {
        engine.kill();
        let outage = e.scrape_until(20, |p| {
            self_metric(p, "dcgm_exporter_dcgm_connected", &[]) == 0.0
        });
        assert!(
            outage.iter().all(|s| !s.name.starts_with("DCGM_")),
            "round {round}: stale DCGM values served during the outage"
        );
        assert_eq!(e.get("/ready").0, 503);
        engine.restart(kit);
        let back = e.scrape_until(20, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 4);
        assert_eq!(gpu_value(&back, "DCGM_FI_DEV_POWER_USAGE", "2"), 95.0);
        assert!(self_metric(&back, "dcgm_exporter_reconnects_total", &[]) >= f64::from(round + 1));
        assert_eq!(e.get("/ready").0, 200);
    }
}

#[test]
fn an_xid_injected_into_the_host_engine_is_exported_on_its_gpu() {
    let Some((kit, dir, _yaml, port, _engine)) = real_engine("xid", &four_gpus()) else {
        return;
    };
    let csv = dir.0.join("xid.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_XID_ERRORS, gauge, last XID\n\
         DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs in the window\n\
         DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n",
    )
    .unwrap();
    let e = kit
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", "300"])
        .start();
    // DCGM_FI_DEV_XID_ERRORS is 230; 79 is "GPU has fallen off the bus".
    kit.inject(port, 1, 230, 79);
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_EXP_XID_ERRORS_COUNT")
            .iter()
            .any(|s| s.label("xid") == Some("79"))
    });
    let counts: Vec<&Sample> = series(&page, "DCGM_EXP_XID_ERRORS_COUNT")
        .into_iter()
        .filter(|s| s.label("xid") == Some("79"))
        .collect();
    assert_eq!(counts.len(), 1);
    assert_eq!(counts[0].label("gpu"), Some("1"));
    assert_eq!(counts[0].value, 1.0);
    let last = series(&page, "DCGM_FI_DEV_XID_ERRORS");
    let on1: Vec<&&Sample> = last
        .iter()
        .filter(|s| s.label("gpu") == Some("1"))
        .collect();
    assert_eq!(on1.len(), 1, "{}", dump(&page));
    assert_eq!(on1[0].value, 79.0);
    assert_eq!(on1[0].label("err_code"), Some("79"));
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4);
}

/// A GPU-level XID on a MIG GPU, on the real DCGM: it is stored on the GPU entity (an XID
/// is a compute-instance-level field, so a watch of an instance reads only its own and is
/// not remapped to the GPU), and the exporter counts it once on each instance's series.
#[test]
fn a_gpu_level_xid_on_a_mig_gpu_counts_once_on_each_instance() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("mig-xid");
    let gpus = two_gpus_the_first_split();
    let yaml = dir.yaml(&gpus);
    let port = free_port();
    let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let csv = dir.0.join("xid.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_XID_ERRORS, gauge, last XID\n\
         DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs in the window\n\
         DCGM_EXP_XID_ERRORS_TOTAL, counter, XIDs since start\n\
         DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n",
    )
    .unwrap();
    let e = kit
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", "300"])
        .start();
    e.scrape_until(15, |p| series(p, "DCGM_EXP_XID_ERRORS_TOTAL").len() == 3);
    kit.inject(port, 0, 230, 43);
    let hits = |p: &[Sample], name: &str| -> Vec<(String, String, f64)> {
        let mut v: Vec<_> = series(p, name)
            .into_iter()
            .filter(|s| s.label("xid") == Some("43"))
            .map(|s| {
                let l = |k: &str| s.label(k).unwrap_or_default().to_string();
                (l("gpu"), l("GPU_I_ID"), s.value)
            })
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    let want = vec![
        ("0".to_string(), "2".to_string(), 1.0),
        ("0".to_string(), "9".to_string(), 1.0),
    ];
    let page = e.scrape_until(15, |p| hits(p, "DCGM_EXP_XID_ERRORS_TOTAL") == want);
    assert_eq!(
        hits(&page, "DCGM_EXP_XID_ERRORS_TOTAL"),
        want,
        "{}",
        dump(&page)
    );
    assert_eq!(
        hits(&page, "DCGM_EXP_XID_ERRORS_COUNT"),
        want,
        "{}",
        dump(&page)
    );
    // Still once each several collections later.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let page = e.scrape();
    assert_eq!(
        hits(&page, "DCGM_EXP_XID_ERRORS_TOTAL"),
        want,
        "{}",
        dump(&page)
    );
    // The last-XID field is DCGM's own per entity: the instances store none.
    assert!(
        series(&page, "DCGM_FI_DEV_XID_ERRORS")
            .iter()
            .all(|s| s.label("GPU_I_ID").is_none()),
        "{}",
        dump(&page)
    );
}

/// Issue 9's contract for a hung engine: after one missed interval the GPU series leave
/// /metrics and /health says 503; values come back within two intervals of SIGCONT.
#[test]
fn a_stopped_host_engine_is_not_served_as_live_and_recovers_after_sigcont() {
    let Some((kit, _dir, _yaml, port, engine)) = real_engine("sigstop", &four_gpus()) else {
        return;
    };
    let interval_ms = 500u64;
    let e = kit
        .remote(port)
        .args(&["-c", &interval_ms.to_string()])
        .start();
    assert_eq!(series(&e.scrape(), "DCGM_FI_DEV_GPU_TEMP").len(), 4);
    engine.signal("STOP");
    let stopped = std::time::Instant::now();
    let page = e.scrape_until(10, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    // One missed interval plus the collection that notices it.
    assert!(
        stopped.elapsed() <= std::time::Duration::from_millis(3 * interval_ms + 1000),
        "GPU series were served {:?} after the engine stopped",
        stopped.elapsed()
    );
    assert_eq!(self_metric(&page, "dcgm_exporter_dcgm_connected", &[]), 0.0);
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    engine.signal("CONT");
    let resumed = std::time::Instant::now();
    e.scrape_until(10, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 4);
    assert!(
        resumed.elapsed() <= std::time::Duration::from_millis(2 * interval_ms + 1000),
        "values came back {:?} after SIGCONT",
        resumed.elapsed()
    );
}

#[test]
fn nvlink_states_from_nvml_decide_which_links_are_watched() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("nvlink");
    // GPU 0: 18 links up; GPU 1: link 5 down.
    let gpus: Vec<Gpu> = (0..2)
        .map(|i| Gpu {
            nvlinks: (0..18).map(|l| !(i == 1 && l == 5)).collect(),
            ..Gpu::default()
        })
        .collect();
    let yaml = dir.yaml(&gpus);
    let csv = dir.0.join("links.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, NVLink bandwidth\n\
         DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, link down events\n",
    )
    .unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL").len(), 2);
    // Up links only: 18 + 17. (The injected NVML has no per-link counters, so the link
    // series themselves stay empty; see etc/sim/README.md, "Real DCGM and dcgm-sim".)
    e.assert_logged(" 35 NvLink entities x ");
}

/// The real library refuses a whole watch of link fields for its one profiling field
/// (ModuleNotLoaded); the exporter retries field by field and loses only that one.
#[test]
fn a_refused_per_link_profiling_field_costs_only_itself() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("link-prof");
    let gpus = vec![
        Gpu {
            nvlinks: vec![true; 4],
            ..Gpu::default()
        };
        2
    ];
    let yaml = dir.yaml(&gpus);
    let csv = dir.0.join("links.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, per-link tx\n\
         DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, link down events\n",
    )
    .unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 2);
    assert_eq!(
        self_metric(
            &page,
            "dcgm_exporter_collection_errors_total",
            &[
                ("source", "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK"),
                ("reason", "ModuleNotLoaded")
            ],
        ),
        1.0,
        "{}",
        dump(&page)
    );
    assert!(e.stderr().contains(" 8 NvLink entities x 1 fields"));
}

/// MIG through NVML injection: GPU 0 split into a 3g.40gb and a 1g.10gb instance. The real
/// DCGM lists them in its hierarchy, and answers a GPU-level field asked of an instance
/// with the parent GPU's value.
#[test]
fn mig_instances_are_exported_with_their_labels_and_the_parents_gpu_values() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("mig");
    let gpus = two_gpus_the_first_split();
    let yaml = dir.yaml(&gpus);
    let e = kit.embedded(&yaml).start();
    let page = e.scrape();
    let temp = series(&page, "DCGM_FI_DEV_GPU_TEMP");
    let mut seen: Vec<(String, Option<String>, Option<String>, f64)> = temp
        .iter()
        .map(|s| {
            (
                s.label("gpu").unwrap_or("").to_string(),
                s.label("GPU_I_PROFILE").map(str::to_string),
                s.label("GPU_I_ID").map(str::to_string),
                s.value,
            )
        })
        .collect();
    seen.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        seen,
        vec![
            (
                "0".to_string(),
                Some(nvml_yaml::mig_profile_name(1)),
                Some("9".to_string()),
                40.0
            ),
            (
                "0".to_string(),
                Some(nvml_yaml::mig_profile_name(3)),
                Some("2".to_string()),
                40.0
            ),
            ("1".to_string(), None, None, 41.0),
        ],
        "{}",
        dump(&page)
    );
    assert_eq!(nvml_yaml::mig_profile_name(3), "3g.40gb");
}

/// DCGM's health module judges the GPU's own counters: a row-remap failure on GPU 1 is a
/// memory failure of GPU 1 only.
#[test]
fn a_row_remap_failure_fails_the_memory_health_of_its_gpu_only() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("health");
    let mut gpus = vec![Gpu::default(); 2];
    gpus[1].remapped_rows = (3, 1, 1, 1);
    let yaml = dir.yaml(&gpus);
    let csv = dir.0.join("health.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n",
    )
    .unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(10, |p| {
        series(p, "DCGM_EXP_GPU_HEALTH_STATUS")
            .iter()
            .any(|s| s.value != 0.0)
    });
    let mut failing: Vec<String> = series(&page, "DCGM_EXP_GPU_HEALTH_STATUS")
        .iter()
        .filter(|s| s.value != 0.0)
        .map(|s| {
            format!(
                "gpu {} {} {} {}",
                s.labels["gpu"], s.labels["health_watch"], s.labels["health_error_code"], s.value
            )
        })
        .collect();
    failing.sort();
    assert_eq!(
        failing,
        [
            "gpu 1 ALL DCGM_FR_ROW_REMAP_FAILURE 20",
            "gpu 1 MEM DCGM_FR_ROW_REMAP_FAILURE 20"
        ]
    );
}

/// DRA on the real library: a claim the kubelet reports by pool and device name, resolved
/// through the driver's ResourceSlice to the UUID the real DCGM gives GPU 1, copies exactly
/// that GPU's series with the claim's labels.
#[test]
fn a_dra_claim_lands_on_the_gpu_the_real_dcgm_names() {
    use crate::support::fake_apiserver::{gpu_slice, FakeApiServer};
    use crate::support::kubelet::{claim, dra_pod, FakeKubelet};
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("dra");
    let yaml = dir.yaml(&four_gpus()[..2]);
    let server = FakeApiServer::start();
    server.serve_group("resource.k8s.io", &["v1"]);
    let kubelet = FakeKubelet::start();
    let e = kit
        .embedded(&yaml)
        .args(&[
            "-k",
            "--kubernetes-enable-dra",
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .env("KUBECONFIG", server.kubeconfig().to_str().unwrap())
        .start();
    let page = e.scrape_until(10, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 2);
    let uuid = series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .find(|s| s.label("gpu") == Some("1"))
        .and_then(|s| s.label("UUID"))
        .expect("GPU 1's UUID")
        .to_string();
    let slice = gpu_slice("node-r-gpu.nvidia.com-1", "node-r", "gpu-1", &uuid);
    server.apply(slice);
    kubelet.set_pods(vec![dra_pod(
        "ml",
        "train-0",
        "main",
        vec![claim("train-gpu", "ml", &[("node-r", "gpu-1")])],
    )]);
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .any(|s| s.label("pod") == Some("train-0"))
    });
    let temps = series(&page, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temps.len(), 2, "{}", dump(&page));
    for s in temps {
        let claimed = s.label("gpu") == Some("1");
        assert_eq!(s.label("pod").is_some(), claimed, "{s:?}");
        assert_eq!(
            s.label("dra_device_name"),
            claimed.then_some("gpu-1"),
            "{s:?}"
        );
    }
    // The real value, not a placeholder: GPU 1 reads 41 C in the injected YAML.
    assert_eq!(gpu_value(&page, "DCGM_FI_DEV_GPU_TEMP", "1"), 41.0);
}

/// How often the log says a bind/unbind event completed.
fn reinitializations(e: &Exporter) -> usize {
    e.stderr()
        .lines()
        .filter(|l| l.contains("reinitialization completed"))
        .count()
}

/// The real nv-hostengine accepts the bind/unbind watch (DCGM_FI_BIND_UNBIND_EVENT, field
/// 6, through GPU 0). An event is injected as DCGM's own tests inject values (`dcgmi test
/// --inject`, state 2 = reinitialization completed); it rebuilds the watches, and still does
/// after the host engine was killed and restarted (the watch is set up again on the new
/// session).
#[test]
fn bind_unbind_events_from_the_real_host_engine_rebuild_also_after_a_restart() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("bind");
    let yaml = dir.yaml(&four_gpus());
    let port = free_port();
    let mut engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let e = kit
        .remote(port)
        .args(&[
            "-c",
            "300",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=100ms",
        ])
        .start();
    e.wait_for_log(10, "watching for GPU bind/unbind events");
    kit.inject(port, 0, 6, 2);
    e.wait_for_log(15, "reinitialization completed");
    e.wait_for_log(15, "reloaded");
    assert_eq!(reinitializations(&e), 1);

    engine.kill();
    e.scrape_until(20, |p| {
        self_metric(p, "dcgm_exporter_dcgm_connected", &[]) == 0.0
    });
    engine.restart(kit);
    e.scrape_until(20, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 4);
    // The watch on the new session is set up before discovery; give its poll a moment to
    // have a baseline by waiting for a working /health.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (code, body) = e.get("/ready");
        if code == 200 && !body.contains("bind/unbind") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/health {code}: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    kit.inject(port, 0, 6, 2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while reinitializations(&e) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no event after the restart:\n{}",
            e.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
}

/// The real libdcgm, embedded, accepts the bind/unbind watch too (a refusal would stop the
/// exporter at start with the flag's name); its poll thread runs, and no poll failure is
/// on /health or in the log.
#[test]
fn the_real_embedded_library_accepts_the_bind_unbind_watch() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("bind-embedded");
    let yaml = dir.yaml(&four_gpus());
    let e = kit
        .embedded(&yaml)
        .args(&[
            "-c",
            "300",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=100ms",
        ])
        .start();
    e.wait_for_log(10, "watching for GPU bind/unbind events");
    let page = e.scrape_until(20, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 4);
    let restarts: Vec<f64> = series(&page, "dcgm_exporter_thread_restarts_total")
        .iter()
        .filter(|s| s.label("thread") == Some("bind-unbind-watch"))
        .map(|s| s.value)
        .collect();
    assert_eq!(restarts, [0.0], "{}", dump(&page));
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("bind"), "{body}");
    e.assert_not_logged("GPU bind/unbind watch:");
}

/// The start-up line reads the version from the real library as from the simulator, and
/// a real host engine not up yet at start is waited for (/health 503 meanwhile).
#[test]
fn start_up_names_the_real_dcgm_version_and_waits_for_a_late_engine() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("late-engine");
    let yaml = dir.yaml(&four_gpus());
    let port = free_port();
    let e = kit.remote(port).spawn();
    e.wait_until(60, |e| e.get_with("/ready", &[]).0 == 503);
    e.assert_logged("), DCGM library 4.6.0 (");
    let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let page = e.scrape_until(60, |p| series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 4);
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4);
    e.wait_until(30, |e| e.get_with("/ready", &[]).0 == 200);
}

/// What the real DCGM 4.6 answers for the health action's sources, recorded. The NVML
/// injection library has no GPU recovery action to report: DCGM answers field 1523 with
/// the NOT_FOUND sentinel (DCGM_INT64_NOT_FOUND, status OK; dcgmi dmon shows N/A), counted
/// as `reason="not_found"`, and a value injected into the host engine's cache
/// (`dcgmi test --inject`) is replaced by that sentinel at the next update, so this tier cannot
/// show a recovery action; the simulator's tier does (tests/it/health_actions.rs). An injected
/// XID 79 is kept, and DCGM's own health module fails every watch of that GPU with
/// DCGM_FR_FALLEN_OFF_BUS: the action is reboot_node, decided by the XID's catalog class.
#[test]
fn the_real_library_answers_the_health_action_sources() {
    let Some((kit, dir, _yaml, port, _engine)) =
        real_engine("action", &[Gpu::default(), Gpu::default()])
    else {
        return;
    };
    let csv = dir.0.join("action.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
         DCGM_FI_DEV_GPU_RECOVERY_ACTION, gauge, recovery action\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n\
         DCGM_EXP_GPU_HEALTH_ACTION, gauge, action\n\
         DCGM_EXP_GPU_COUNT, gauge, GPUs\n",
    )
    .unwrap();
    let e = kit
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", "300"])
        .start();
    let action = |p: &[Sample], gpu: &str| -> (String, String, f64) {
        let s: Vec<&Sample> = series(p, "DCGM_EXP_GPU_HEALTH_ACTION")
            .into_iter()
            .filter(|s| s.label("gpu") == Some(gpu))
            .collect();
        assert_eq!(s.len(), 1, "{}", dump(p));
        (
            s[0].labels["action"].clone(),
            s[0].labels["reason"].clone(),
            s[0].value,
        )
    };
    let count = |p: &[Sample], state: &str| {
        series(p, "DCGM_EXP_GPU_COUNT")
            .iter()
            .find(|s| s.label("state") == Some(state))
            .map(|s| s.value)
    };
    let page = e.scrape_until(10, |p| count(p, "expected").is_some());
    let info = series(&page, "dcgm_exporter_build_info");
    assert_eq!(
        info[0].label("dcgm_version"),
        Some("4.6.0"),
        "{}",
        dump(&page)
    );
    assert_eq!(info[0].label("mode"), Some("remote"));
    for g in ["0", "1"] {
        assert_eq!(action(&page, g), ("none".into(), "none".into(), 0.0));
    }
    assert_eq!(
        (
            count(&page, "expected"),
            count(&page, "present"),
            count(&page, "lost")
        ),
        (Some(2.0), Some(2.0), Some(0.0))
    );
    // NOT_FOUND on the injection NVML: no series, and the page says so field by field
    // (not as blank, unsupported or refused), on both GPUs.
    assert!(
        series(&page, "DCGM_FI_DEV_GPU_RECOVERY_ACTION").is_empty(),
        "{}",
        dump(&page)
    );
    let drops = |p: &[Sample], reason: &str| {
        self_metric(
            p,
            "dcgm_exporter_field_values_dropped_total",
            &[
                ("field", "DCGM_FI_DEV_GPU_RECOVERY_ACTION"),
                ("reason", reason),
            ],
        )
    };
    let page = e.scrape_until(15, |p| drops(p, "not_found") >= 4.0);
    for other in ["blank", "not_supported", "not_permissioned", "status"] {
        assert_eq!(drops(&page, other), 0.0, "{other}: {}", dump(&page));
    }

    kit.inject(port, 0, 1523, 1);
    kit.inject(port, 1, 230, 79);
    let page = e.scrape_until(15, |p| action(p, "1").0 == "reboot_node");
    assert_eq!(
        action(&page, "1"),
        ("reboot_node".into(), "xid".into(), 4.0)
    );
    let pcie: Vec<&Sample> = series(&page, "DCGM_EXP_GPU_HEALTH_STATUS")
        .into_iter()
        .filter(|s| s.label("gpu") == Some("1") && s.label("health_watch") == Some("PCIE"))
        .collect();
    assert_eq!(
        pcie[0].label("health_error_code"),
        Some("DCGM_FR_FALLEN_OFF_BUS")
    );
    assert_eq!(pcie[0].value, 20.0);
    // Three collections later the injected recovery action is still NOT_FOUND: GPU 0 asks
    // nothing, and the node still has both GPUs (an injected XID does not lose the GPU).
    let collections = |p: &[Sample]| {
        self_metric(
            p,
            "dcgm_exporter_collections_total",
            &[("result", "success")],
        )
    };
    let seen = collections(&page);
    let not_found_seen = drops(&page, "not_found");
    let page = e.scrape_until(15, |p| collections(p) >= seen + 3.0);
    assert!(collections(&page) >= seen + 3.0);
    assert_eq!(action(&page, "0"), ("none".into(), "none".into(), 0.0));
    assert!(
        series(&page, "DCGM_FI_DEV_GPU_RECOVERY_ACTION").is_empty(),
        "{}",
        dump(&page)
    );
    // Those collections read NOT_FOUND again, though not always twice each: one CI run
    // counted 10 over 6 collections, where the helper's runs counted 2 per collection. The
    // pin is that the count keeps growing, under that reason only.
    assert!(
        drops(&page, "not_found") > not_found_seen,
        "{}",
        dump(&page)
    );
    assert_eq!(count(&page, "present"), Some(2.0));
}

/// Usage accounting reads its two inputs, the energy counter and the GPU's utilisation, from
/// what the real DCGM answers: HPC jobs each holding one GPU alone get that GPU's
/// utilisation as their share and its energy increase (none here: the injection NVML's
/// counter stands still), nothing is left as idle energy, and the job on the unused GPU
/// turns allocated-but-idle after the window while the busy one does not.
#[test]
fn usage_accounting_reads_the_real_library_s_energy_and_utilisation() {
    let Some((kit, dir, jobs, port, _engine)) =
        busy_and_idle_with_jobs("usage", &["job-busy", "job-unused"])
    else {
        return;
    };
    let csv = dir.0.join("usage.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, energy\n\
         DCGM_FI_DEV_GPU_UTIL, gauge, utilisation\n",
    )
    .unwrap();
    let e = kit
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", "300"])
        .args(&["--hpc-job-mapping-dir", jobs.to_str().unwrap()])
        .args(&["--usage-accounting", "--usage-idle-window", "2s"])
        .start();
    let of_job = |p: &[Sample], name: &str, job: &str| -> Option<f64> {
        series(p, name)
            .iter()
            .find(|s| s.label("hpc_job") == Some(job))
            .map(|s| s.value)
    };
    let page = e.scrape_until(20, |p| {
        of_job(p, "DCGM_EXP_ALLOCATED_IDLE", "job-unused") == Some(1.0)
    });
    assert_eq!(
        of_job(&page, "DCGM_EXP_UTIL_SHARE", "job-busy"),
        Some(35.0),
        "{}",
        dump(&page)
    );
    assert_eq!(
        of_job(&page, "DCGM_EXP_UTIL_SHARE", "job-unused"),
        Some(0.0)
    );
    assert_eq!(
        of_job(&page, "DCGM_EXP_ALLOCATED_IDLE", "job-busy"),
        Some(0.0)
    );
    for job in ["job-busy", "job-unused"] {
        assert_eq!(
            of_job(&page, "DCGM_EXP_ENERGY_JOULES_TOTAL", job),
            Some(0.0),
            "{job}: {}",
            dump(&page)
        );
    }
    let idle = series(&page, "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL");
    assert_eq!(idle.len(), 2, "{}", dump(&page));
    assert!(idle.iter().all(|s| s.value == 0.0), "{}", dump(&page));
}

/// Every rebuild trigger an operator uses (SIGHUP, the counters file rewritten in place and
/// replaced by a rename) keeps every DCGM series of the page for 5+ intervals after it.
/// DCGM keys a watch by (entity, field, connection): a rebuild that removes the old watches
/// after making the new ones removes every pair the two share, DCGM then answers the last
/// sample with its old timestamp, and freshness drops each series (issue 28: 32 series,
/// then 0 for good after one SIGHUP). A sample is served only while it is at most an
/// interval and a second old, so a series still there 6 s after the rebuild at `-c 1000`
/// was sampled anew.
fn rebuilds_keep_every_series_fresh(e: &Exporter, csv: &std::path::Path) {
    let before = dcgm_series(&e.scrape_until(20, |p| dcgm_series(p).len() >= 16));
    let text = std::fs::read_to_string(csv).expect("read the counters file");
    for (n, how) in ["SIGHUP", "rewritten in place", "replaced by a rename"]
        .into_iter()
        .enumerate()
    {
        match how {
            "SIGHUP" => {
                signal(e.child.id(), "HUP");
            }
            "rewritten in place" => {
                std::fs::write(csv, format!("{text}\n# rewritten in place\n")).unwrap();
            }
            _ => {
                let tmp = csv.with_extension("new");
                std::fs::write(&tmp, format!("{text}\n# replaced\n")).unwrap();
                std::fs::rename(&tmp, csv).unwrap();
            }
        }
        e.wait_until(20, |e| e.stderr().matches("reloaded ").count() > n);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(6);
        let (mut scrapes, mut short) = (0, Vec::new());
        while std::time::Instant::now() < until {
            let now = dcgm_series(&e.scrape());
            scrapes += 1;
            let lost = before.difference(&now).count();
            if lost > 0 {
                short.push(lost);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        // A loaded CI machine may let one sample age past the limit now and then; a rebuild
        // that stopped sampling loses every series on every scrape after the first two.
        assert!(
            short.len() * 4 <= scrapes,
            "after the counters were {how}: series missing on {} of {scrapes} scrapes \
             ({short:?} of {})\n{}",
            short.len(),
            before.len(),
            e.stderr()
        );
        let page = e.scrape_until(5, |p| dcgm_series(p) == before);
        assert_eq!(dcgm_series(&page), before, "after the counters were {how}");
        let (code, body) = e.get("/ready");
        assert_eq!(code, 200, "after the counters were {how}: {body}");
    }
}

#[test]
fn embedded_rebuilds_keep_every_series_fresh() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("rebuild");
    let yaml = dir.yaml(&four_gpus()[..2]);
    let csv = dir.0.join("counters.csv");
    std::fs::copy(repo("etc/default-counters.csv"), &csv).unwrap();
    let e = kit
        .embedded(&yaml)
        .args(&["-c", "1000", "-f", csv.to_str().unwrap()])
        .start();
    rebuilds_keep_every_series_fresh(&e, &csv);
}

#[test]
fn remote_rebuilds_keep_every_series_fresh() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("rebuild-remote");
    let yaml = dir.yaml(&four_gpus()[..2]);
    let csv = dir.0.join("counters.csv");
    std::fs::copy(repo("etc/default-counters.csv"), &csv).unwrap();
    let port = free_port();
    let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let e = kit
        .remote(port)
        .args(&["-c", "1000", "-f", csv.to_str().unwrap()])
        .start();
    rebuilds_keep_every_series_fresh(&e, &csv);
}

/// `DCGM_EXP_XID_ERRORS_TOTAL` is a counter: a rebuild carries each GPU's totals and how
/// far they were read to the new watches, so an XID before the SIGHUP stays counted (once)
/// and one after it is added (a rebuild used to start every total again from nothing).
#[test]
fn xid_totals_carry_across_a_rebuild() {
    let Some((kit, dir, _yaml, port, _engine)) = real_engine("xid-rebuild", &four_gpus()[..2])
    else {
        return;
    };
    let csv = dir.0.join("xid.csv");
    std::fs::write(
        &csv,
        "DCGM_EXP_XID_ERRORS_TOTAL, counter, XIDs since start\n\
         DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n",
    )
    .unwrap();
    let e = kit
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", "500"])
        .start();
    let total = |p: &[Sample], xid: &str| -> Option<f64> {
        series(p, "DCGM_EXP_XID_ERRORS_TOTAL")
            .into_iter()
            .find(|s| s.label("gpu") == Some("1") && s.label("xid") == Some(xid))
            .map(|s| s.value)
    };
    kit.inject(port, 1, 230, 13);
    e.scrape_until(15, |p| total(p, "13") == Some(1.0));
    signal(e.child.id(), "HUP");
    e.wait_for_log(20, "reloaded ");
    kit.inject(port, 1, 230, 31);
    let page = e.scrape_until(15, |p| total(p, "31") == Some(1.0));
    assert_eq!(total(&page, "13"), Some(1.0), "{}", dump(&page));
    // Still counted once a few collections later.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let page = e.scrape();
    assert_eq!(total(&page, "13"), Some(1.0), "{}", dump(&page));
    assert_eq!(total(&page, "31"), Some(1.0), "{}", dump(&page));
}

/// Two real nv-hostengines with different injected GPUs, named in the configuration file
/// (`sources.dcgm.hostEngines`), served by one exporter: their series apart by the
/// `engine` label with the injected values; one killed while the other keeps serving on
/// every scrape, then back; then stopped (SIGSTOP) while the other's collections advance
/// interval after interval, then continued (SIGCONT) and its series back.
#[test]
fn two_real_host_engines_in_one_exporter() {
    let Some(kit) = kit() else { return };
    let (dir_a, dir_b) = (Scratch::new("multi-a"), Scratch::new("multi-b"));
    let yaml_a = dir_a.yaml(&four_gpus()[..2]);
    let gpus_b: Vec<Gpu> = (0..3u32)
        .map(|i| Gpu {
            temp_c: 60 + i,
            power_mw: 200_000 + 1_000 * i,
            ..Gpu::default()
        })
        .collect();
    let yaml_b = dir_b.yaml(&gpus_b);
    let (port_a, port_b) = (free_port(), free_port());
    let mut engine_a = RealHostEngine::start(kit, &yaml_a, &dir_a.0, port_a);
    let _engine_b = RealHostEngine::start(kit, &yaml_b, &dir_b.0, port_b);
    let config = dir_a.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "version: 2\nsources:\n  dcgm:\n    hostEngines:\n      - {{name: vm-a, address: \"127.0.0.1:{port_a}\"}}\n      - {{name: vm-b, address: \"127.0.0.1:{port_b}\"}}\n"
        ),
    )
    .unwrap();
    let e = exporter()
        .arg("--dcgm-library")
        .arg(kit.lib().to_str().unwrap())
        .args(&["--config-file", config.to_str().unwrap(), "-c", "300"])
        .env("LD_LIBRARY_PATH", kit.lib_dir().to_str().unwrap())
        .start();
    let of = |p: &[Sample], name: &str, engine: &str, gpu: &str| -> Vec<f64> {
        series(p, name)
            .into_iter()
            .filter(|s| s.label("engine") == Some(engine) && s.label("gpu") == Some(gpu))
            .map(|s| s.value)
            .collect()
    };
    let count = |p: &[Sample], engine: &str| {
        series(p, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .filter(|s| s.label("engine") == Some(engine))
            .count()
    };
    let page = e.scrape_until(30, |p| count(p, "vm-a") == 2 && count(p, "vm-b") == 3);
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP").len(),
        5,
        "{}",
        dump(&page)
    );
    // Both engines have a gpu 0 (and the same UUIDs): the label keeps them apart.
    assert_eq!(of(&page, "DCGM_FI_DEV_GPU_TEMP", "vm-a", "0"), [40.0]);
    assert_eq!(of(&page, "DCGM_FI_DEV_GPU_TEMP", "vm-a", "1"), [41.0]);
    assert_eq!(of(&page, "DCGM_FI_DEV_GPU_TEMP", "vm-b", "0"), [60.0]);
    assert_eq!(of(&page, "DCGM_FI_DEV_GPU_TEMP", "vm-b", "2"), [62.0]);
    assert_eq!(of(&page, "DCGM_FI_DEV_POWER_USAGE", "vm-a", "1"), [85.0]);
    assert_eq!(of(&page, "DCGM_FI_DEV_POWER_USAGE", "vm-b", "1"), [201.0]);
    assert!(page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_"))
        .all(|s| s.label("engine").is_some()));

    engine_a.kill();
    // From the first page without vm-a, every page still has vm-b's three GPUs.
    e.scrape_until(20, |p| count(p, "vm-a") == 0);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(2) {
        let p = e.scrape();
        assert_eq!(
            (count(&p, "vm-a"), count(&p, "vm-b")),
            (0, 3),
            "{}",
            dump(&p)
        );
        assert_eq!(of(&p, "DCGM_FI_DEV_GPU_TEMP", "vm-b", "1"), [61.0]);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("vm-a"), "{body}");
    assert_eq!(
        self_metric(
            &e.scrape(),
            "dcgm_exporter_engine_up",
            &[("engine", "vm-a")]
        ),
        0.0
    );
    engine_a.restart(kit);
    let back = e.scrape_until(30, |p| count(p, "vm-a") == 2 && count(p, "vm-b") == 3);
    assert_eq!(of(&back, "DCGM_FI_DEV_GPU_TEMP", "vm-a", "1"), [41.0]);

    // Stopped rather than killed: its calls hang; its series go within the collection
    // deadline while vm-b's collections go on, interval after interval, with its values.
    let collections = |p: &[Sample], engine: &str| {
        self_metric(
            p,
            "dcgm_exporter_engine_collections_total",
            &[("engine", engine), ("status", "success")],
        )
    };
    engine_a.signal("STOP");
    e.scrape_until(20, |p| count(p, "vm-a") == 0);
    let mut before = collections(&e.scrape(), "vm-b");
    for _ in 0..4 {
        let p = e.scrape_until(10, |p| collections(p, "vm-b") > before);
        assert_eq!(
            (count(&p, "vm-a"), count(&p, "vm-b")),
            (0, 3),
            "{}",
            dump(&p)
        );
        assert_eq!(of(&p, "DCGM_FI_DEV_GPU_TEMP", "vm-b", "2"), [62.0]);
        assert_eq!(
            self_metric(&p, "dcgm_exporter_engine_up", &[("engine", "vm-a")]),
            0.0
        );
        before = collections(&p, "vm-b");
    }
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");
    // Continued: its series return, and both engines' collections advance again.
    engine_a.signal("CONT");
    let back = e.scrape_until(60, |p| count(p, "vm-a") == 2 && count(p, "vm-b") == 3);
    assert_eq!(of(&back, "DCGM_FI_DEV_GPU_TEMP", "vm-a", "0"), [40.0]);
    let (a, b) = (collections(&back, "vm-a"), collections(&back, "vm-b"));
    e.scrape_until(10, |p| {
        collections(p, "vm-a") >= a + 2.0 && collections(p, "vm-b") >= b + 2.0
    });
}

/// NVML GPM metrics of a busy Hopper GPU (`NVML_GPM_METRIC_*` id -> value): graphics 42 %,
/// SM 40 %, occupancy 30 %, any tensor 12 %, DRAM 25 %, PCIe TX 100 and RX 200 MiB/s.
const BUSY_GPM: &[(u32, f64)] = &[
    (1, 42.0),
    (2, 40.0),
    (3, 30.0),
    (5, 12.0),
    (10, 25.0),
    (20, 100.0),
    (21, 200.0),
];

/// The same GPU's GPM metrics all at 0: what NVIDIA/DCGM#303 shows while the GPU is busy.
const ZERO_GPM: &[(u32, f64)] = &[
    (1, 0.0),
    (2, 0.0),
    (3, 0.0),
    (5, 0.0),
    (10, 0.0),
    (20, 0.0),
    (21, 0.0),
];

/// `gpus` as `nvml_yaml::render` writes them, with each GPU whose `gpm` entry is `Some`
/// made GPM-capable as a recorded H200 is: `QueryDeviceSupport: {isSupportedDevice: 1}`
/// and `GpmMetrics` (DCGM's `nvml-injection` `GpmMetricsParser`: metric id ->
/// `{FunctionReturn, ReturnValue: {value}}`). DCGM then samples that GPU's profiling
/// fields through NVML's GPM, in its core, without the profiling module.
fn gpm_yaml(dir: &Scratch, gpus: &[Gpu], gpm: &[Option<&[(u32, f64)]>]) -> std::path::PathBuf {
    let unsupported = "    QueryDeviceSupport: {FunctionReturn: 0, ReturnValue: {version: 1, \
                       isSupportedDevice: 0}}";
    let mut out = String::new();
    let mut n = 0;
    for line in nvml_yaml::render(gpus).lines() {
        if line != unsupported {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        match gpm.get(n).copied().flatten() {
            Some(metrics) => {
                out.push_str(&line.replace("isSupportedDevice: 0", "isSupportedDevice: 1"));
                let m: Vec<String> = metrics
                    .iter()
                    .map(|(id, v)| {
                        format!("{id}: {{FunctionReturn: 0, ReturnValue: {{value: {v:.1}}}}}")
                    })
                    .collect();
                out.push_str(&format!(
                    "\n    GpmMetrics: {{FunctionReturn: 0, ReturnValue: {{{}}}}}\n",
                    m.join(", ")
                ));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
        n += 1;
    }
    assert_eq!(n, gpus.len(), "one QueryDeviceSupport per GPU");
    let p = dir.0.join("gpm.yaml");
    std::fs::write(&p, out).expect("write the GPM YAML");
    p
}

fn busy_gpus(n: usize) -> Vec<Gpu> {
    (0..n)
        .map(|_| Gpu {
            gpu_util: 100,
            ..Gpu::default()
        })
        .collect()
}

/// The profiling module's state on a real nv-hostengine, as `dcgmi modules -l` words it.
fn dcgmi_profiling_state(kit: &support::real_dcgm::Kit, port: u16) -> String {
    let out = output_within(
        std::process::Command::new(kit.bin("dcgmi"))
            .args(["modules", "-l", "--host", &format!("127.0.0.1:{port}")])
            .env("LD_LIBRARY_PATH", kit.lib_dir()),
        QUICK,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find(|l| l.contains("Profiling"))
        .and_then(|l| l.split('|').nth(3))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no Profiling row in dcgmi modules -l:\n{text}"))
}

/// What the embedded engine said of its profiling module at each build (`--debug`).
fn embedded_profiling_states(e: &Exporter) -> Vec<String> {
    e.stderr()
        .lines()
        .filter_map(|l| l.split("DCGM's profiling module: ").nth(1))
        .map(|s| s.trim_end_matches('"').to_string())
        .collect()
}

fn hup(e: &Exporter) {
    signal(e.child.id(), "HUP");
}

fn prof_rows_of(page: &[Sample], gpu: &str) -> Vec<String> {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_FI_PROF_") && s.label("gpu") == Some(gpu))
        .map(|s| s.name.clone())
        .collect()
}

const DEFAULT_PROF_ROWS: [&str; 5] = [
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
];

/// Issue 44's guarantee on NVIDIA's library: with GPM-capable GPUs and the default counters,
/// DCGM 4.6 serves every DCGM_FI_PROF_* row through GPM and never loads its profiling module
/// (`dcgmModuleGetStatuses` says "not loaded" at every build, embedded; `dcgmi modules -l`
/// on the engine, remote), also after a rebuild re-made every watch.
#[test]
fn gpm_gpus_serve_the_profiling_rows_without_ever_loading_the_profiling_module() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("gpm");
    let yaml = gpm_yaml(&dir, &busy_gpus(2), &[Some(BUSY_GPM), Some(BUSY_GPM)]);
    let served = |p: &[Sample]| {
        ["0", "1"].iter().all(|g| prof_rows_of(p, g).len() == 5)
            && series(p, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                .iter()
                .all(|s| (s.value - 0.42).abs() < 1e-9)
    };
    let e = kit.embedded(&yaml).args(&["-c", "500", "--debug"]).start();
    let page = e.scrape_until(20, served);
    assert_eq!(
        gpu_value(&page, "DCGM_FI_PROF_PCIE_TX_BYTES", "0"),
        104_857_600.0
    );
    hup(&e);
    e.wait_until(20, |e| e.stderr().contains("reloaded "));
    e.scrape_until(20, served);
    let states = embedded_profiling_states(&e);
    assert!(states.len() >= 2, "{}", e.stderr());
    assert!(
        states.iter().all(|s| s == "not loaded"),
        "{states:?}\n{}",
        e.stderr()
    );

    let port = free_port();
    let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    let e = kit.remote(port).args(&["-c", "500"]).start();
    e.scrape_until(20, served);
    assert_eq!(dcgmi_profiling_state(kit, port), "Not loaded");
}

/// A GPM GPU beside one without GPM: only the latter's rows need the profiling module. The
/// kit has none (open-source build), so the latter's rows are left out, named per field,
/// and the GPM GPU keeps every row: its profiling fields are watched on a group of their
/// own, which DCGM serves in its core (a watch of both GPUs asks the module for the whole
/// group and is refused whole, which used to cost the GPM GPU its rows too).
#[test]
fn beside_a_gpu_without_gpm_only_that_gpus_profiling_rows_need_the_module() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("gpm-mixed");
    let yaml = gpm_yaml(&dir, &busy_gpus(2), &[Some(BUSY_GPM), None]);
    let check = |e: &Exporter| {
        let page = e.scrape_until(20, |p| prof_rows_of(p, "0").len() == 5);
        assert_eq!(
            prof_rows_of(&page, "0"),
            DEFAULT_PROF_ROWS,
            "{}",
            dump(&page)
        );
        assert!(prof_rows_of(&page, "1").is_empty(), "{}", dump(&page));
        assert_eq!(gpu_value(&page, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0"), 0.42);
        assert_eq!(gpu_value(&page, "DCGM_FI_DEV_GPU_TEMP", "1"), 45.0);
        let log = e.stderr();
        assert!(
            log.contains("skipping DCGM_FI_PROF_PCIE_TX_BYTES on GPUs 1"),
            "{log}"
        );
    };
    let e = kit.embedded(&yaml).args(&["-c", "500", "--debug"]).start();
    check(&e);
    // The metric-group query of GPU 1 asked for the module, which the kit cannot load.
    assert_eq!(
        embedded_profiling_states(&e),
        ["failed to load"],
        "{}",
        e.stderr()
    );
    let port = free_port();
    let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    check(&kit.remote(port).args(&["-c", "500"]).start());
    assert_eq!(dcgmi_profiling_state(kit, port), "Failed to load");
}

/// Issue 44 item 2 on NVIDIA's library: `--dcgm-denylist-modules profiling` starts the
/// embedded engine through `dcgmStartEmbedded_v2` with the profiling module on its
/// denylist: DCGM reports it denylisted, one start-up line names the profiling rows left
/// out (on the GPU without GPM only; the GPM GPU keeps them), the rest is served. Also from
/// the configuration file's `sources.dcgm.denylistModules`.
#[test]
fn the_embedded_engine_starts_with_the_profiling_module_denied() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("deny");
    let yaml = gpm_yaml(&dir, &busy_gpus(2), &[Some(BUSY_GPM), None]);
    let config = dir.0.join("config.yaml");
    std::fs::write(
        &config,
        "version: 2\nsources:\n  dcgm:\n    denylistModules: [profiling]\n",
    )
    .unwrap();
    for how in [
        ["--dcgm-denylist-modules", "profiling"],
        ["--config-file", config.to_str().unwrap()],
    ] {
        let e = kit
            .embedded(&yaml)
            .args(&["-c", "500", "--debug"])
            .args(&how)
            .start();
        let page = e.scrape_until(20, |p| prof_rows_of(p, "0").len() == 5);
        assert!(prof_rows_of(&page, "1").is_empty(), "{}", dump(&page));
        assert_eq!(gpu_value(&page, "DCGM_FI_DEV_POWER_USAGE", "1"), 75.0);
        let log = e.stderr();
        assert!(
            log.contains("started without the module(s) profiling"),
            "{how:?}: {log}"
        );
        assert_eq!(embedded_profiling_states(&e), ["denylisted"], "{log}");
        let lines = lines_with(&log, "profiling module is denied");
        assert_eq!(lines.len(), 1, "{log}");
        for row in DEFAULT_PROF_ROWS {
            assert!(lines[0].contains(row), "{row}: {}", lines[0]);
        }
        assert!(lines[0].contains("on GPUs 1 "), "{}", lines[0]);
        assert!(!log.contains("skipping DCGM_FI_PROF"), "{log}");
    }
}

/// Re-arming a GPU's profiling watches (issue 44, DCGM#303) on NVIDIA's library: GPU 0 busy
/// with every GPM metric at 0 is re-armed again and again (the kit's values are static, so it
/// never heals), and every other series, GPU 0's own included, stays on every page with the
/// same value; GPU 1 is never touched. Embedded (no engine restart:
/// `--profiling-restart-period 0`) and remote.
#[test]
fn re_arming_a_gpus_profiling_watches_leaves_every_other_series_steady() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("rearm");
    let yaml = gpm_yaml(&dir, &busy_gpus(2), &[Some(ZERO_GPM), Some(BUSY_GPM)]);
    let flags = [
        "-c",
        "500",
        "--profiling-rearm-after",
        "2",
        "--profiling-restart-period",
        "0",
    ];
    let port = free_port();
    let engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    for remote in [false, true] {
        let e = if remote {
            kit.remote(port).args(&flags).start()
        } else {
            kit.embedded(&yaml).args(&flags).start()
        };
        steady_while_re_armed(&e, remote);
    }
    drop(engine);
}

/// DCGM series (name, gpu) -> value; the kit's values are static.
fn dcgm_values(page: &[Sample]) -> std::collections::BTreeMap<(String, String), f64> {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_FI_"))
        .map(|s| {
            let gpu = s.label("gpu").unwrap_or_default().to_string();
            ((s.name.clone(), gpu), s.value)
        })
        .collect()
}

fn steady_while_re_armed(e: &Exporter, remote: bool) {
    let full = |p: &[Sample]| {
        prof_rows_of(p, "0").len() == 5
            && prof_rows_of(p, "1").len() == 5
            && series(p, "DCGM_FI_DEV_GPU_UTIL").len() == 2
    };
    // The NVLink rate and energy read 0 or a constant after the first sample; the page of
    // the second collection on is the baseline.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let base = dcgm_values(&e.scrape_until(20, full));
    assert_eq!(
        base[&("DCGM_FI_PROF_GR_ENGINE_ACTIVE".into(), "0".into())],
        0.0
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(12);
    let mut pages = 0;
    while std::time::Instant::now() < until {
        let now = dcgm_values(&e.scrape());
        pages += 1;
        assert_eq!(
            now,
            base,
            "remote {remote}: a series changed or went while GPU 0 was re-armed\n{}",
            e.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let p = e.scrape();
    let rearms = |gpu: &str| {
        self_metric(
            &p,
            "dcgm_exporter_profiling_rearms_total",
            &[("gpu", gpu), ("action", "rearm")],
        )
    };
    assert!(rearms("0") >= 2.0, "remote {remote}: {}", dump(&p));
    assert_eq!(rearms("1"), 0.0);
    assert_eq!(
        self_metric(&p, "dcgm_exporter_profiling_stuck", &[("gpu", "0")]),
        1.0
    );
    assert!(pages > 50, "{pages}");
    assert!(e.stderr().contains("re-arming its profiling watches"));
}

/// Sub-interval aggregation (issue 47) on the real DCGM, embedded: the aggregated fields
/// are watched every 100 ms and every sample since the previous collection is read back
/// (`dcgmGetValuesSince_v2`). The kit's values are the injection YAML's, static, so each
/// window is that value throughout: min = max = mean = the gauge, over at least the
/// samples 100 ms sampling gives in a 2 s interval, less a few.
#[test]
fn aggregation_reads_every_sample_of_the_real_library() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("aggregate");
    let yaml = dir.yaml(&four_gpus());
    let rows = [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
    ];
    let e = kit
        .embedded(&yaml)
        .args(&["-c", "2000", "--aggregate", &rows.join(",")])
        .args(&["--aggregate-period", "100ms"])
        .start();
    let stat = |row: &str, s: &str| format!("{row}_interval_{s}");
    // The third window: the first ones start with the watches.
    let page = e.scrape_until(30, |p| {
        let done = self_metric(
            p,
            "dcgm_exporter_collections_total",
            &[("result", "success")],
        );
        done >= 3.0 && series(p, &stat(rows[0], "samples")).len() == 4
    });
    for row in rows {
        for gpu in ["0", "1", "2", "3"] {
            let gauge = gpu_value(&page, row, gpu);
            for s in ["min", "max", "mean"] {
                assert_eq!(
                    gpu_value(&page, &stat(row, s), gpu),
                    gauge,
                    "{row} {s} of GPU {gpu}"
                );
            }
            let n = gpu_value(&page, &stat(row, "samples"), gpu);
            assert!(
                n >= 15.0,
                "{row} of GPU {gpu}: {n} samples in 2 s at 100 ms"
            );
        }
    }
}

/// The real host engine's cache takes a value injected live (`dcgmi test --inject`, as
/// DCGM's own tests do) between its 100 ms NVML samples: a 900 W power sample of GPU 1
/// between two collections shows in its max, while the gauge at the next collection is the
/// YAML's again.
#[test]
fn a_power_sample_injected_into_the_real_host_engine_shows_in_the_max_only() {
    let Some((kit, _dir, _yaml, port, _engine)) = real_engine("aggregate-inject", &four_gpus())
    else {
        return;
    };
    let e = kit
        .remote(port)
        .args(&["-c", "2000", "--aggregate", "DCGM_FI_DEV_POWER_USAGE"])
        .args(&["--aggregate-period", "100ms"])
        .start();
    let max = "DCGM_FI_DEV_POWER_USAGE_interval_max";
    let collections = |p: &[Sample]| {
        self_metric(
            p,
            "dcgm_exporter_collections_total",
            &[("result", "success")],
        )
    };
    let before = e.scrape_until(30, |p| series(p, max).len() == 4);
    // Just after a collection, so that the next one is some 2 s (20 NVML samples) away.
    let n = collections(&before);
    e.scrape_until(10, |p| collections(p) > n);
    kit.inject(port, 1, 155, 900);
    let page = e.scrape_until(15, |p| series(p, max).iter().any(|s| s.value == 900.0));
    assert_eq!(gpu_value(&page, max, "1"), 900.0, "{}", dump(&page));
    assert_eq!(gpu_value(&page, "DCGM_FI_DEV_POWER_USAGE", "1"), 85.0);
    let mean = gpu_value(&page, "DCGM_FI_DEV_POWER_USAGE_interval_mean", "1");
    assert!(mean > 85.0 && mean < 900.0, "{mean}");
    assert_eq!(
        gpu_value(&page, "DCGM_FI_DEV_POWER_USAGE_interval_min", "1"),
        85.0
    );
    for (gpu, w) in [("0", 75.0), ("2", 95.0), ("3", 105.0)] {
        assert_eq!(gpu_value(&page, max, gpu), w, "GPU {gpu}");
    }
}
