//! Every entity type and derived metric on the shipped simulator profiles: MIG instances,
//! NVLink links, NvSwitches, CPUs, device selectors, XID / clock-event windows, health,
//! P2P and a MIG reconfiguration while running.

use crate::support;
use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};

fn write_csv(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

fn label_set<'a>(s: &[&'a Sample], k: &str) -> BTreeSet<&'a str> {
    s.iter().filter_map(|x| x.label(k)).collect()
}

#[test]
fn mixed_mig_node_exports_gpu_instances_and_whole_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(
        &dir,
        "mig.csv",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, gr\nDCGM_FI_DEV_FB_USED, gauge, fb\nDCGM_FI_DEV_GPU_TEMP, gauge, temp\n",
    );
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-f", &csv])
        .start();
    let page = e.scrape();
    let gr = series(&page, "DCGM_FI_PROF_GR_ENGINE_ACTIVE");
    let mig: Vec<&&Sample> = gr
        .iter()
        .filter(|s| s.label("GPU_I_ID").is_some())
        .collect();
    let whole: Vec<&&Sample> = gr
        .iter()
        .filter(|s| s.label("GPU_I_ID").is_none())
        .collect();
    let mig_gpus: BTreeSet<&str> = mig.iter().filter_map(|s| s.label("gpu")).collect();
    let whole_gpus: BTreeSet<&str> = whole.iter().filter_map(|s| s.label("gpu")).collect();
    assert!(
        !mig_gpus.is_empty() && !whole_gpus.is_empty(),
        "{}",
        dump(&page)
    );
    assert_eq!(mig_gpus, BTreeSet::from(["0", "1", "2", "3"]));
    assert_eq!(whole_gpus, BTreeSet::from(["4", "5", "6", "7"]));
    assert_eq!(
        mig.len(),
        7 + 4 + 1 + 2,
        "one series per GPU instance of the profile"
    );
    assert!(
        mig_gpus.is_disjoint(&whole_gpus),
        "a MIG GPU has no whole-GPU series: {mig_gpus:?} {whole_gpus:?}"
    );
    for s in &mig {
        let order: Vec<&str> = s.label_order.iter().map(String::as_str).collect();
        assert_eq!(&order[..8], [&MIG_LABELS[..], &["hostname"]].concat());
        let profile = s.label("GPU_I_PROFILE").unwrap();
        assert!(
            profile.contains('g') && profile.contains("gb"),
            "profile name {profile}"
        );
        assert!(
            s.label("UUID").unwrap().starts_with("GPU-"),
            "parent GPU's UUID: {:?}",
            s.labels
        );
        assert!(
            s.label("GPU_CI_ID").is_none(),
            "compute instances only on request"
        );
    }
    // Instances of one GPU are told apart by their NVML instance id.
    let mut per_gpu: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &mig {
        per_gpu
            .entry(s.label("gpu").unwrap())
            .or_default()
            .insert(s.label("GPU_I_ID").unwrap());
    }
    let total: usize = per_gpu.values().map(BTreeSet::len).sum();
    assert_eq!(total, mig.len(), "one series per GPU instance");

    // With --compute-instances, compute-instance series appear with GPU_CI_ID.
    drop(e);
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-f", &csv, "--compute-instances"])
        .start();
    let page = e.scrape();
    let ci: Vec<&Sample> = series(&page, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        .into_iter()
        .filter(|s| s.label("GPU_CI_ID").is_some())
        .collect();
    assert!(!ci.is_empty(), "{}", dump(&page));
}

#[test]
fn nvlink_switch_and_link_series_on_the_nvswitch_node() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(
        &dir,
        "links.csv",
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, per-link tx bytes/s\n\
         DCGM_FI_PROF_NVLINK_RX_BYTES_PER_LINK, gauge, per-link rx bytes/s\n\
         DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX, gauge, switch link tx\n\
         DCGM_FI_PROF_PCIE_TX_BYTES, gauge, pcie tx\n\
         DCGM_FI_PROF_PCIE_RX_BYTES, gauge, pcie rx\n\
         DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT, gauge, switch temperature\n",
    );
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-f", &csv])
        .start();
    let page = e.scrape();
    let tx = series(&page, "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK");
    let gpu_links: Vec<&&Sample> = tx.iter().filter(|s| s.label("gpu").is_some()).collect();
    assert_eq!(label_set(&tx, "gpu").len(), 8, "{}", dump(&page));
    for s in &gpu_links {
        let order: Vec<&str> = s.label_order.iter().map(String::as_str).collect();
        assert_eq!(
            &order[..7],
            &[
                "nvlink",
                "gpu",
                "gpu_uuid",
                "pci_bus_id",
                "device",
                "model_name",
                "hostname"
            ]
        );
    }
    // Every (gpu, link) pair is one series: per-link traffic is one query away.
    let pairs: BTreeSet<(&str, &str)> = gpu_links
        .iter()
        .map(|s| (s.label("gpu").unwrap(), s.label("nvlink").unwrap()))
        .collect();
    assert_eq!(pairs.len(), gpu_links.len());
    // 8 GPUs x 18 links, minus the one link the profile has Down.
    assert_eq!(gpu_links.len(), 8 * 18 - 1);
    assert!(!pairs.contains(&("7", "17")), "Down links are not exported");
    // Switch ports: 4 x 64, one Down; they carry nvswitch and no gpu label.
    let switch_links: Vec<&&Sample> = tx.iter().filter(|s| s.label("gpu").is_none()).collect();
    assert_eq!(switch_links.len(), 4 * 64 - 1);
    assert!(switch_links.iter().all(|s| s.label_order[..3]
        == [
            "nvlink".to_string(),
            "nvswitch".to_string(),
            "hostname".to_string()
        ]));
    assert_eq!(series(&page, "DCGM_FI_PROF_PCIE_TX_BYTES").len(), 8);
    // Each switch keeps its own id.
    let temps = series(&page, "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT");
    let switches = label_set(&temps, "nvswitch");
    assert_eq!(
        switches.len(),
        temps.len(),
        "distinct nvswitch labels: {switches:?}"
    );
    assert_eq!(
        switches,
        BTreeSet::from(["nvswitch0", "nvswitch1", "nvswitch2", "nvswitch3"])
    );
}

#[test]
fn blanks_in_model_names_can_be_replaced() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .arg("-rbmn")
        .start();
    let page = e.scrape();
    assert!(series(&page, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .all(|s| s.label("modelName") == Some("NVIDIA-H100-80GB-HBM3")));
}

#[test]
fn selectors_pick_gpus_and_reject_ids_that_do_not_exist() {
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-d", "g:0,2-3"])
        .start();
    let page = e.scrape();
    assert_eq!(
        label_set(&series(&page, "DCGM_FI_DEV_GPU_TEMP"), "gpu"),
        BTreeSet::from(["0", "2", "3"])
    );
    drop(e);
    for (args, needle) in [
        (vec!["-d", "g:8"], "GPU 8 does not exist"),
        (vec!["-d", "g:1-0"], "-d"),
        (vec!["-d", "f:1"], "-d"),
        (vec!["-d", "i:999"], "-d"),
        (vec!["-s", "g:7"], "-s"),
        (vec!["-p", "g:5"], "-p"),
        (vec!["-d", "g:a"], "-d"),
        (vec!["-d", "g:0:1"], "-d"),
    ] {
        let (code, stderr) = exporter()
            .profile("h100-8gpu-nvswitch.toml")
            .args(&args)
            .run_to_exit();
        assert_ne!(code, 0, "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"));
    }
}

#[test]
fn xid_and_clock_events_show_in_the_window_then_age_out_and_health_fails() {
    let (dir, control) = temp_file("control", "");
    let csv = write_csv(
        &dir,
        "exp.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
         DCGM_FI_DEV_XID_ERRORS, gauge, last xid\n\
         DCGM_EXP_XID_ERRORS_COUNT, gauge, xids in window\n\
         DCGM_EXP_XID_ERRORS_TOTAL, counter, xids since start\n\
         DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, clock events in window\n\
         DCGM_EXP_CLOCK_EVENTS_TOTAL, counter, clock events since start\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n\
         DCGM_EXP_P2P_STATUS, gauge, p2p\n",
    );
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&control)
        .args(&[
            "-f",
            &csv,
            "-c",
            "250",
            "-x",
            "3000",
            "--clock-events-count-window-size",
            "3000",
        ])
        .start();
    let page = e.scrape();
    // Nothing happened yet: one zero series per GPU carrying only window_size_in_ms.
    let zeros = series(&page, "DCGM_EXP_XID_ERRORS_COUNT");
    assert_eq!(zeros.len(), 8, "{}", dump(&page));
    assert!(zeros.iter().all(|s| s.value == 0.0
        && s.label("window_size_in_ms") == Some("3000")
        && s.label("xid").is_none()));
    assert_eq!(series(&page, "DCGM_EXP_GPU_HEALTH_STATUS").len(), 8 * 11);
    let p2p = series(&page, "DCGM_EXP_P2P_STATUS");
    assert_eq!(p2p.len(), 8 * 7, "each ordered GPU pair");
    assert!(p2p
        .iter()
        .all(|s| s.label("peer_gpu").is_some() && s.label("link_status").is_some()));

    control_line(&control, "xid 2 79");
    control_line(&control, "clock_event 1 0x48");
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_EXP_XID_ERRORS_COUNT")
            .iter()
            .any(|s| s.label("xid") == Some("79"))
    });
    // Exactly one XID, on exactly one GPU.
    let hits: Vec<(Option<&str>, f64)> = series(&page, "DCGM_EXP_XID_ERRORS_COUNT")
        .into_iter()
        .filter(|s| s.label("xid").is_some())
        .map(|s| (s.label("gpu"), s.value))
        .collect();
    assert_eq!(hits, [(Some("2"), 1.0)]);
    let totals: Vec<(Option<&str>, Option<&str>, f64)> = series(&page, "DCGM_EXP_XID_ERRORS_TOTAL")
        .into_iter()
        .filter(|s| s.value != 0.0)
        .map(|s| (s.label("gpu"), s.label("xid"), s.value))
        .collect();
    assert_eq!(totals, [(Some("2"), Some("79"), 1.0)]);
    // The last XID is a series of its GPU only (DCGM has no XID sample before one), with
    // err_code / err_msg.
    let page = e.scrape_until(5, |p| !series(p, "DCGM_FI_DEV_XID_ERRORS").is_empty());
    let last = series(&page, "DCGM_FI_DEV_XID_ERRORS");
    assert_eq!(last.len(), 1, "{}", dump(&page));
    assert_eq!(last[0].label("gpu"), Some("2"));
    assert_eq!(last[0].value, 79.0);
    assert_eq!(last[0].label("err_code"), Some("79"));
    assert!(last[0].label("err_msg").is_some_and(|m| !m.is_empty()));
    let page = e.scrape_until(15, |p| {
        let c = series(p, "DCGM_EXP_CLOCK_EVENTS_COUNT");
        c.iter()
            .any(|s| s.label("clock_event") == Some("hw_slowdown") && s.label("gpu") == Some("1"))
            && c.iter().any(|s| {
                s.label("clock_event") == Some("hw_thermal") && s.label("gpu") == Some("1")
            })
    });
    let health: Vec<&Sample> = series(&page, "DCGM_EXP_GPU_HEALTH_STATUS")
        .into_iter()
        .filter(|s| s.label("gpu") == Some("2"))
        .collect();
    assert!(
        health
            .iter()
            .any(|s| s.value == 20.0 && s.label("health_watch") == Some("ALL")),
        "{health:?}"
    );
    assert!(health
        .iter()
        .any(|s| s.value == 20.0 && s.label("health_error_code") != Some("DCGM_FR_OK")));
    assert!(series(&page, "DCGM_EXP_GPU_HEALTH_STATUS")
        .iter()
        .filter(|s| s.label("gpu") == Some("0"))
        .all(|s| s.value == 0.0));

    // After the 3 s window the windowed count returns to the zero series; the total stays.
    let page = e.scrape_until(20, |p| {
        series(p, "DCGM_EXP_XID_ERRORS_COUNT")
            .iter()
            .all(|s| s.label("xid").is_none() && s.value == 0.0)
    });
    let totals: Vec<(Option<&str>, Option<&str>, f64)> = series(&page, "DCGM_EXP_XID_ERRORS_TOTAL")
        .into_iter()
        .filter(|s| s.value != 0.0)
        .map(|s| (s.label("gpu"), s.label("xid"), s.value))
        .collect();
    assert_eq!(totals, [(Some("2"), Some("79"), 1.0)]);
}

fn control_line(path: &std::path::Path, line: &str) {
    support::control(path, line)
}

#[test]
fn mig_reconfiguration_is_noticed_without_a_restart() {
    let (dir, control) = temp_file("control", "");
    let csv = write_csv(
        &dir,
        "mig.csv",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, gr\n",
    );
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .control(&control)
        .args(&["-f", &csv, "-c", "300"])
        .start();
    let before: BTreeSet<String> = series(&e.scrape(), "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        .iter()
        .filter(|s| s.label("gpu") == Some("1"))
        .map(|s| {
            format!(
                "{}/{}",
                s.label("GPU_I_PROFILE").unwrap_or(""),
                s.label("GPU_I_ID").unwrap_or("")
            )
        })
        .collect();
    support::control(&control, "mig 1 3g.40gb,3g.40gb");
    let page = e.scrape_until(15, |p| {
        let now: BTreeSet<String> = series(p, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
            .iter()
            .filter(|s| s.label("gpu") == Some("1"))
            .map(|s| {
                format!(
                    "{}/{}",
                    s.label("GPU_I_PROFILE").unwrap_or(""),
                    s.label("GPU_I_ID").unwrap_or("")
                )
            })
            .collect();
        now != before && now.len() == 2
    });
    assert!(series(&page, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        .iter()
        .filter(|s| s.label("gpu") == Some("1"))
        .all(|s| s.label("GPU_I_PROFILE") == Some("3g.40gb")));
    assert!(!e.stderr().contains("panicked"));
}

#[test]
fn cpus_and_cores_are_labelled() {
    let dir = tempfile::tempdir().unwrap();
    let cpu_field = dcgm_sys::fields::FIELDS
        .iter()
        .find(|f| f.entity_level == 7 && (f.field_type == b'd' || f.field_type == b'i'))
        .unwrap();
    let core_field = dcgm_sys::fields::FIELDS
        .iter()
        .find(|f| f.entity_level == 8 && (f.field_type == b'd' || f.field_type == b'i'))
        .unwrap();
    let csv = write_csv(
        &dir,
        "cpu.csv",
        &format!(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n{}, gauge, cpu\n{}, gauge, core\n",
            cpu_field.name, core_field.name
        ),
    );
    let e = exporter()
        .profile("large-bench.toml")
        .args(&["-f", &csv])
        .start();
    let page = e.scrape();
    let cpus = series(&page, cpu_field.name);
    assert!(!cpus.is_empty(), "{}", dump(&page));
    assert!(cpus.iter().all(|s| s.label_order[0] == "cpu"));
    let cores = series(&page, core_field.name);
    assert!(!cores.is_empty());
    assert!(cores
        .iter()
        .all(|s| s.label_order[..2] == ["cpucore".to_string(), "cpu".to_string()]));
}

#[test]
fn unsupported_profiling_fields_are_skipped_with_one_warning_per_field() {
    let (_dir, profile) = temp_file(
        "nodcp.toml",
        "[gpus]\ncount = 2\nmodel = \"Tesla T4\"\ndcp = false\n",
    );
    let e = exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .start();
    let page = e.scrape();
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 2);
    assert!(
        series(&page, "DCGM_FI_PROF_GR_ENGINE_ACTIVE").is_empty(),
        "{}",
        dump(&page)
    );
    let log = e.stderr();
    assert_profiling_rows_skipped_once(&log);
}
