//! `DCGM_EXP_GPU_HEALTH_ACTION` and `DCGM_EXP_GPU_COUNT` on the simulator: every source
//! of a decision driven through the control file (XIDs by class, the driver's recovery
//! action, health failures and warnings, a lost GPU), each seen on the page.

use crate::support::*;

/// (action, reason, value) of GPU `gpu`'s health-action series; None without one.
fn action(p: &[Sample], gpu: &str) -> Option<(String, String, f64)> {
    let s: Vec<&Sample> = series(p, "DCGM_EXP_GPU_HEALTH_ACTION")
        .into_iter()
        .filter(|s| s.label("gpu") == Some(gpu))
        .collect();
    assert!(s.len() <= 1, "one series per GPU: {}", dump(p));
    s.first().map(|s| {
        (
            s.label("action").unwrap_or_default().to_string(),
            s.label("reason").unwrap_or_default().to_string(),
            s.value,
        )
    })
}

fn count(p: &[Sample], state: &str) -> Option<f64> {
    series(p, "DCGM_EXP_GPU_COUNT")
        .into_iter()
        .find(|s| s.label("state") == Some(state))
        .map(|s| s.value)
}

fn wait_action(e: &Exporter, gpu: &str, want: (&str, &str, f64)) {
    let page = e.scrape_until(15, |p| {
        action(p, gpu).is_some_and(|(a, r, v)| (a.as_str(), r.as_str(), v) == want)
    });
    assert_eq!(
        action(&page, gpu),
        Some((want.0.into(), want.1.into(), want.2)),
        "GPU {gpu}: {}",
        dump(&page)
    );
}

#[test]
fn every_source_of_a_health_action_reaches_the_page() {
    let (_dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let e = b.args(&["-c", "200"]).start();
    let page = e.scrape_until(10, |p| count(p, "expected").is_some());
    // Healthy node: no action on any GPU, all 8 expected and present.
    for g in 0..8 {
        assert_eq!(
            action(&page, &g.to_string()),
            Some(("none".into(), "none".into(), 0.0)),
            "{}",
            dump(&page)
        );
    }
    assert_eq!(count(&page, "expected"), Some(8.0));
    assert_eq!(count(&page, "present"), Some(8.0));
    assert_eq!(count(&page, "lost"), Some(0.0));
    // The cumulative counters are on by default.
    assert!(!series(&page, "DCGM_EXP_XID_ERRORS_TOTAL").is_empty());
    assert!(!series(&page, "DCGM_EXP_CLOCK_EVENTS_TOTAL").is_empty());

    // XIDs by the catalog's class.
    control(&ctl, "xid 1 13");
    wait_action(&e, "1", ("restart_workload", "xid", 1.0));
    control(&ctl, "xid 2 48");
    wait_action(&e, "2", ("reset_gpu", "xid", 3.0));
    // An XID the catalog table does not list asks for nothing but is counted.
    control(&ctl, "xid 7 9999");
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_EXP_XID_ERRORS_TOTAL")
            .iter()
            .any(|s| s.label("xid") == Some("9999"))
    });
    assert_eq!(action(&page, "7").map(|a| a.0), Some("none".into()));

    // The driver's recovery action (DCGM_FI_DEV_GPU_RECOVERY_ACTION, 2 = NODE_REBOOT).
    control(&ctl, "set 0 1523 2");
    wait_action(&e, "0", ("reboot_node", "recovery_action", 4.0));
    control(&ctl, "recovery_action 0 3");
    wait_action(&e, "0", ("drain", "recovery_action", 2.0));
    control(&ctl, "set 0 1523 0");
    wait_action(&e, "0", ("none", "none", 0.0));

    // Health: a warning asks nothing, a thermal failure a drain, a row-remap failure
    // (DCGM_FR_ROW_REMAP_FAILURE = 80) a replacement.
    control(&ctl, "health 3 0x80 10 0 warm");
    let page = e.scrape_until(15, |p| {
        series(p, "DCGM_EXP_GPU_HEALTH_STATUS").is_empty()
            || series(p, "DCGM_EXP_GPU_HEALTH_STATUS")
                .iter()
                .any(|s| s.label("gpu") == Some("3") && s.value == 10.0)
    });
    assert_eq!(action(&page, "3").map(|a| a.0), Some("none".into()));
    control(&ctl, "health 4 0x80 20 0 too hot");
    wait_action(&e, "4", ("drain", "health_thermal", 2.0));
    control(&ctl, "health 5 0x10 20 80 row remap failed");
    wait_action(&e, "5", ("replace", "health_mem", 5.0));
    control(&ctl, "health_clear 5");
    wait_action(&e, "5", ("none", "none", 0.0));

    // A GPU off the bus: reboot, and the node count says so.
    control(&ctl, "gpu_lost 6");
    wait_action(&e, "6", ("reboot_node", "gpu_lost", 4.0));
    let page = e.scrape_until(15, |p| count(p, "lost") == Some(1.0));
    assert_eq!(count(&page, "expected"), Some(8.0));
    assert_eq!(count(&page, "present"), Some(7.0));
    control(&ctl, "gpu_recovered 6");
    let page = e.scrape_until(15, |p| count(p, "lost") == Some(0.0));
    assert_eq!(count(&page, "present"), Some(8.0));
}

#[test]
fn without_the_recovery_action_field_the_other_sources_still_decide() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("control");
    // The field reads NOT_SUPPORTED from the start, as on drivers before R575.
    std::fs::write(&ctl, "not_supported * 1523\n").unwrap();
    let e = exporter()
        .profile("one-gpu.toml")
        .control(&ctl)
        .args(&["-c", "200"])
        .start();
    wait_action(&e, "0", ("none", "none", 0.0));
    control(&ctl, "xid 0 79");
    wait_action(&e, "0", ("reboot_node", "xid", 4.0));
}

#[test]
fn a_gpu_lost_at_start_is_expected_and_counted_lost() {
    let (_dir, ctl) = temp_file("control", "gpu_lost 2\n");
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&ctl)
        .args(&["-c", "200"])
        .start();
    let page = e.scrape_until(10, |p| count(p, "expected").is_some());
    assert_eq!(count(&page, "expected"), Some(8.0), "{}", dump(&page));
    assert_eq!(count(&page, "present"), Some(7.0));
    assert_eq!(count(&page, "lost"), Some(1.0));
    // Not watched, so no per-GPU series for it.
    assert_eq!(action(&page, "2"), None);
}

/// A node-level incident (DCGM's entity NONE: the IMEX daemon not ready on GB200/GB300) is
/// the node's: every GPU gets its action, under `health_node`, and every GPU's health
/// status shows it; it is not GPU 0's, whose entity id it shares.
#[test]
fn a_node_level_incident_is_every_gpus_not_gpu_0s() {
    let (_dir, ctl, csv) = control_and_file(
        "c.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
         DCGM_EXP_GPU_HEALTH_ACTION, gauge, a\n\
         DCGM_EXP_GPU_HEALTH_STATUS, gauge, s\n",
    );
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&ctl)
        .args(&["-f", csv.to_str().unwrap(), "-c", "200"])
        .start();
    wait_action(&e, "0", ("none", "none", 0.0));
    control(&ctl, "health node 0x2 20 0 IMEX daemon is not ready");
    // A GPU reset cannot mend the node: drain, on every GPU.
    for g in 0..8 {
        wait_action(&e, &g.to_string(), ("drain", "health_node", 2.0));
    }
    let page = e.scrape();
    for g in 0..8 {
        let nvlink = series(&page, "DCGM_EXP_GPU_HEALTH_STATUS")
            .into_iter()
            .find(|s| {
                s.label("gpu") == Some(&g.to_string()) && s.label("health_watch") == Some("NVLINK")
            })
            .unwrap_or_else(|| panic!("GPU {g}: {}", dump(&page)));
        assert_eq!(nvlink.value, 20.0, "GPU {g}: {nvlink:?}");
    }
    // A GPU's own failure still wins where it asks for more.
    control(&ctl, "health 3 0x10 20 0 sm");
    wait_action(&e, "3", ("reset_gpu", "health_mem", 3.0));
    control(&ctl, "health_clear node");
    control(&ctl, "health_clear 3");
    for g in 0..8 {
        wait_action(&e, &g.to_string(), ("none", "none", 0.0));
    }
}

/// On a MIG GPU NVML attributes an XID to the GPU or compute instance it hit; DCGM stores it
/// there. The GPU's action counts it, with or without `--compute-instances`.
#[test]
fn xids_of_mig_instances_reach_their_gpus_action() {
    let (_dir, ctl, b) = controlled("a100-mixed-mig.toml");
    let e = b.args(&["-c", "200"]).start();
    wait_action(&e, "0", ("none", "none", 0.0));
    // GPU 0's GPU instance 9 (a 1g.10gb): XID 13 asks to restart the workload.
    control(&ctl, "xid 0/9 13");
    wait_action(&e, "0", ("restart_workload", "xid", 1.0));
    // GPU 2's second compute instance of its 7g.80gb: XID 95 asks for a reset.
    control(&ctl, "xid 2/0/1 95");
    wait_action(&e, "2", ("reset_gpu", "xid", 3.0));
    // Nothing on the other GPUs.
    for g in [1, 3, 4] {
        wait_action(&e, &g.to_string(), ("none", "none", 0.0));
    }
}

/// The `(gpu, GPU_I_ID, GPU_CI_ID, xid, value)` of every `DCGM_EXP_XID_ERRORS_TOTAL`
/// series with an XID, sorted.
fn xid_totals(p: &[Sample]) -> Vec<(String, String, String, String, f64)> {
    let mut v: Vec<_> = series(p, "DCGM_EXP_XID_ERRORS_TOTAL")
        .into_iter()
        .filter(|s| s.label("xid").is_some())
        .map(|s| {
            let l = |k: &str| s.label(k).unwrap_or_default().to_string();
            (l("gpu"), l("GPU_I_ID"), l("GPU_CI_ID"), l("xid"), s.value)
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

/// DCGM stores an XID on the one entity NVML attributed it to. On the instances' XID
/// series, a GPU-level XID counts on every instance of its GPU (their users are hit), and a
/// compute instance's XID counts on its GPU instance's series when compute instances have
/// no series of their own, or on its own series (and no other) with `--compute-instances`.
#[test]
fn mig_xids_count_on_the_instance_series_they_hit() {
    for compute_instances in [false, true] {
        let (_dir, ctl, csv) = control_and_file(
            "c.csv",
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
             DCGM_FI_DEV_XID_ERRORS, gauge, last xid\n\
             DCGM_EXP_XID_ERRORS_COUNT, gauge, x\n\
             DCGM_EXP_XID_ERRORS_TOTAL, counter, x\n",
        );
        let mut args = vec!["-f", csv.to_str().unwrap(), "-c", "200"];
        if compute_instances {
            args.push("--compute-instances");
        }
        let e = exporter()
            .profile("a100-mixed-mig.toml")
            .control(&ctl)
            .args(&args)
            .start();
        e.scrape_until(10, |p| !series(p, "DCGM_EXP_XID_ERRORS_TOTAL").is_empty());
        // GPU 0 (seven 1g.10gb, NVML ids 7-13) at the GPU level; GPU 2's second compute
        // instance of its 7g.80gb (NVML GI 0).
        control(&ctl, "xid 0 79");
        control(&ctl, "xid 2/0/1 95");
        let mut want: Vec<(String, String, String, String, f64)> = Vec::new();
        let s = |x: &str| x.to_string();
        for gi in 7..=13 {
            want.push((s("0"), gi.to_string(), s(""), s("79"), 1.0));
            if compute_instances {
                // Each 1g.10gb's one compute instance is hit too.
                want.push((s("0"), gi.to_string(), s("0"), s("79"), 1.0));
            }
        }
        want.push(if compute_instances {
            (s("2"), s("0"), s("1"), s("95"), 1.0)
        } else {
            (s("2"), s("0"), s(""), s("95"), 1.0)
        });
        want.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let page = e.scrape_until(15, |p| xid_totals(p) == want);
        assert_eq!(xid_totals(&page), want, "{}", dump(&page));
        // Still once each several collections later: no sample counted twice.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let page = e.scrape();
        assert_eq!(xid_totals(&page), want, "{}", dump(&page));
        let windowed = series(&page, "DCGM_EXP_XID_ERRORS_COUNT")
            .into_iter()
            .filter(|s| s.label("xid").is_some())
            .count();
        assert_eq!(windowed, want.len(), "{}", dump(&page));
        // The last-XID field is DCGM's own per entity, as the real one stores it: only the
        // compute instance's, on its own series (none of GPU 0's: its GPU has no series).
        let last: Vec<(String, String, String, f64)> = series(&page, "DCGM_FI_DEV_XID_ERRORS")
            .into_iter()
            .map(|x| {
                let l = |k: &str| x.label(k).unwrap_or_default().to_string();
                (l("gpu"), l("GPU_I_ID"), l("GPU_CI_ID"), x.value)
            })
            .collect();
        let want_last = if compute_instances {
            vec![(s("2"), s("0"), s("1"), 95.0)]
        } else {
            vec![]
        };
        assert_eq!(last, want_last, "{}", dump(&page));
    }
}
