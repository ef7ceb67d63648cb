//! What a GPU needs now (`DCGM_EXP_GPU_HEALTH_ACTION`): one decision per GPU from four
//! sources, the most disruptive action winning:
//!
//! * the GPU is lost (DCGM's status Lost, or gone from the device list): `reboot_node`
//!   (`reason="gpu_lost"`; NVIDIA's catalog asks for a bare-metal restart after XID 79);
//! * the driver's recovery action, `DCGM_FI_DEV_GPU_RECOVERY_ACTION` (field 1523, named
//!   `DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION` before DCGM 4.5; NVML's
//!   `nvmlDeviceGpuRecoveryAction_t`), `reason="recovery_action"`;
//! * the XIDs seen in the XID window, classed by `etc/data/xid-actions.csv` (NVIDIA's Xid
//!   Catalog, immediate-action bucket), `reason="xid"`;
//! * failed DCGM health watches, `reason="health_<watch>"`;
//! * failed node-level health incidents (DCGM's entity NONE, e.g. the IMEX daemon not
//!   ready on GB200/GB300), on every GPU of the node, `reason="health_node"`: a GPU reset
//!   cannot fix the node, so what would reset a GPU drains it instead.
//!
//! XIDs count for the GPU whatever entity DCGM stores them on: the GPU itself, or one of
//! its GPU or compute instances (NVML attributes an XID to the MIG instance it hit).
//!
//! Every label value comes from the fixed lists below, so the series has at most one
//! label set per GPU at a time and a bounded number over its life.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The bucket of a decision. The value of the series is the rank (`as u8`), so that
/// `max` over a node or `>= 3` in an alert mean "at least this disruptive".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Action {
    None = 0,
    RestartWorkload = 1,
    Drain = 2,
    ResetGpu = 3,
    RebootNode = 4,
    Replace = 5,
}

impl Action {
    pub(crate) const ALL: [Action; 6] = [
        Action::None,
        Action::RestartWorkload,
        Action::Drain,
        Action::ResetGpu,
        Action::RebootNode,
        Action::Replace,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::RestartWorkload => "restart_workload",
            Action::Drain => "drain",
            Action::ResetGpu => "reset_gpu",
            Action::RebootNode => "reboot_node",
            Action::Replace => "replace",
        }
    }

    fn by_label(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.label() == s)
    }
}

/// NVIDIA's Xid Catalog for Ampere and newer GPUs ("Analyzing Xid Errors with the Xid
/// Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, retrieved
/// November 2026; the page is undated, its newest rows name driver R575 / CUDA 12.9, so the
/// table calls that revision `catalog-R575`), column "Resolution Bucket (Immediate
/// Action)", as kept in `etc/data/xid-actions.csv`: one row per XID the catalog applies to
/// A100, H100, B100 or GB200 and gives a bucket, each checked against the page's text
/// (`source` column; `etc/data/README.md`).
const XID_ACTIONS: &str = include_str!("../../etc/data/xid-actions.csv");

fn xid_table() -> &'static HashMap<i64, Action> {
    static T: OnceLock<HashMap<i64, Action>> = OnceLock::new();
    T.get_or_init(|| {
        XID_ACTIONS
            .lines()
            .skip(1)
            .filter_map(|l| {
                let mut c = l.split(',');
                let xid = c.next()?.trim().parse().ok()?;
                let action = Action::by_label(c.nth(1)?.trim())?;
                Some((xid, action))
            })
            .collect()
    })
}

/// What an XID asks for; an XID the catalog table does not list asks for nothing (it is
/// still counted by the XID series).
pub(crate) fn xid_action(xid: i64) -> Action {
    xid_table().get(&xid).copied().unwrap_or(Action::None)
}

/// `nvmlDeviceGpuRecoveryAction_t`: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
/// 4 drain and reset; newer drivers add 5 recover the IMEX domain, 6 PCIe bus reset,
/// 7 system reboot. An unknown value asks for a drain: the driver wants something done.
pub(crate) fn recovery_action(v: i64) -> Action {
    match v {
        0 => Action::None,
        1 | 4 | 6 => Action::ResetGpu,
        2 | 7 => Action::RebootNode,
        3 | 5 => Action::Drain,
        _ => Action::Drain,
    }
}

// `DCGM_FR_*` codes (dcgm_errors.h of DCGM 4.6, dcgm-sys/fields/health-codes-4.6.0.csv):
// the first three mean the GPU cannot heal any more, the last that an error escaped
// containment (the node's state is suspect).
const FR_RETIRED_PAGES_LIMIT: u32 = 7;
const FR_CORRUPT_INFOROM: u32 = 9;
const FR_ROW_REMAP_FAILURE: u32 = 80;
const FR_UNCONTAINED_ERROR: u32 = 81;

/// The health watches, their `health_system` bits and the `reason` they give.
pub(crate) const WATCH_REASONS: &[(u32, &str)] = &[
    (dcgm_sys::health_system::PCIE, "health_pcie"),
    (dcgm_sys::health_system::NVLINK, "health_nvlink"),
    (dcgm_sys::health_system::PMU, "health_pmu"),
    (dcgm_sys::health_system::MCU, "health_mcu"),
    (dcgm_sys::health_system::MEM, "health_mem"),
    (dcgm_sys::health_system::SM, "health_sm"),
    (dcgm_sys::health_system::INFOROM, "health_inforom"),
    (dcgm_sys::health_system::THERMAL, "health_thermal"),
    (dcgm_sys::health_system::POWER, "health_power"),
    (dcgm_sys::health_system::DRIVER, "health_driver"),
];

/// What a health incident asks for: a warning asks for nothing (it stays visible in
/// `DCGM_EXP_GPU_HEALTH_STATUS`); a failure by the system that failed.
pub(crate) fn health_action(system: u32, health: u32, code: u32) -> Action {
    use dcgm_sys::health_system as hs;
    if health < 20 {
        return Action::None;
    }
    match code {
        FR_RETIRED_PAGES_LIMIT | FR_ROW_REMAP_FAILURE | FR_CORRUPT_INFOROM => {
            return Action::Replace
        }
        FR_UNCONTAINED_ERROR => return Action::RebootNode,
        _ => {}
    }
    match system {
        s if s == hs::PCIE || s == hs::DRIVER => Action::RebootNode,
        s if s == hs::MEM || s == hs::SM || s == hs::PMU || s == hs::MCU => Action::ResetGpu,
        s if s == hs::NVLINK => Action::ResetGpu,
        s if s == hs::INFOROM => Action::Replace,
        // Thermal and power failures need the cooling or power checked, not the GPU reset.
        _ => Action::Drain,
    }
}

/// What one GPU showed this collection.
#[derive(Debug, Default)]
pub(crate) struct Evidence {
    pub lost: bool,
    /// The latest `DCGM_FI_DEV_GPU_RECOVERY_ACTION`, when the driver reports one.
    pub recovery: Option<i64>,
    /// XIDs seen in the window.
    pub xids: Vec<i64>,
    /// (system bit, health, code) of each health incident.
    pub incidents: Vec<(u32, u32, u32)>,
    /// (system bit, health, code) of each node-level health incident (entity NONE).
    pub node_incidents: Vec<(u32, u32, u32)>,
}

/// The reason of an action asked for by a node-level health incident.
pub(crate) const NODE_REASON: &str = "health_node";

/// What a node-level incident asks of each GPU: a GPU reset cannot mend the node (drain it
/// instead); the rest as for a GPU's own incident.
pub(crate) fn node_health_action(system: u32, health: u32, code: u32) -> Action {
    match health_action(system, health, code) {
        Action::ResetGpu | Action::Replace => Action::Drain,
        a => a,
    }
}

/// The most disruptive action asked for and the first source (in the order of the
/// module documentation) that asked for it.
pub(crate) fn decide(e: &Evidence) -> (Action, &'static str) {
    let mut best = (Action::None, "none");
    let mut offer = |a: Action, reason: &'static str| {
        if a > best.0 {
            best = (a, reason);
        }
    };
    if e.lost {
        offer(Action::RebootNode, "gpu_lost");
    }
    if let Some(v) = e.recovery {
        offer(recovery_action(v), "recovery_action");
    }
    for x in &e.xids {
        offer(xid_action(*x), "xid");
    }
    for (system, health, code) in &e.incidents {
        let reason = WATCH_REASONS
            .iter()
            .find(|(bit, _)| bit & system != 0)
            .map_or("health_other", |(_, r)| r);
        offer(health_action(*system, *health, *code), reason);
    }
    for (system, health, code) in &e.node_incidents {
        offer(node_health_action(*system, *health, *code), NODE_REASON);
    }
    best
}

/// `DCGM_EXP_GPU_COUNT`'s three states.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GpuCount {
    pub expected: usize,
    pub present: usize,
    pub lost: usize,
}

/// `expected`: the GPUs the exporter started with (selected, lost ones included);
/// `listed`: what DCGM lists now; `lost_now`: those DCGM reports lost.
pub(crate) fn count(expected: &[u32], listed: &[u32], lost_now: &[u32]) -> GpuCount {
    let lost = expected
        .iter()
        .filter(|g| !listed.contains(g) || lost_now.contains(g))
        .count();
    GpuCount {
        expected: expected.len(),
        present: expected.len() - lost,
        lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dcgm_sys::health_system as hs;

    #[test]
    fn the_xid_table_loads_and_classes_the_catalogs_examples() {
        assert!(xid_table().len() >= 90, "{}", xid_table().len());
        assert_eq!(xid_action(79), Action::RebootNode);
        assert_eq!(xid_action(48), Action::ResetGpu);
        assert_eq!(xid_action(95), Action::ResetGpu);
        assert_eq!(xid_action(13), Action::RestartWorkload);
        assert_eq!(xid_action(43), Action::None);
        // Rows the catalog check corrected (the earlier table had 38 and 109 as
        // RESTART_APP, 63 as RESET_GPU, 64 as CONTACT_SUPPORT, 137 as RESTART_APP).
        assert_eq!(xid_action(38), Action::None);
        assert_eq!(xid_action(63), Action::None);
        assert_eq!(xid_action(64), Action::ResetGpu);
        assert_eq!(xid_action(109), Action::ResetGpu);
        assert_eq!(xid_action(137), Action::None);
        // "Unused" on Ampere and newer (PMU_BREAKPOINT): not listed.
        assert_eq!(xid_action(61), Action::None);
        // Not in the catalog table: counted, no action.
        assert_eq!(xid_action(9999), Action::None);
        // Each row's action is the one docs/alerts-and-dashboards.md gives its bucket, and
        // names the catalog revision it was checked against.
        for l in XID_ACTIONS.lines().skip(1) {
            let c: Vec<&str> = l.split(',').collect();
            let want = match c[1] {
                "RESTART_APP" => "restart_workload",
                "RESET_GPU"
                | "WORKFLOW_XID_48"
                | "WORKFLOW_NVLINK_ERR"
                | "WORKFLOW_NVLINK5_ERR" => "reset_gpu",
                "RESTART_BM" | "RESTART_VM" => "reboot_node",
                "CONTACT_SUPPORT" | "CHECK_MECHANICALS" | "UPDATE_SWFW" => "drain",
                "IGNORE" | "WORKFLOW_XID_45" | "XID_154" => "none",
                other => panic!("{l}: bucket {other} has no documented action"),
            };
            assert_eq!(c[2], want, "{l}");
            assert_eq!(c.get(3), Some(&"catalog-R575"), "{l}");
        }
        // Every row names one of our actions (a typo would drop the row silently).
        let rows = XID_ACTIONS
            .lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .count();
        assert_eq!(rows, xid_table().len());
    }

    #[test]
    fn recovery_actions_map_every_nvml_value() {
        let got: Vec<&str> = (0..=8).map(|v| recovery_action(v).label()).collect();
        assert_eq!(
            got,
            [
                "none",
                "reset_gpu",
                "reboot_node",
                "drain",
                "reset_gpu",
                "drain",
                "reset_gpu",
                "reboot_node",
                "drain"
            ]
        );
    }

    #[test]
    fn health_warnings_ask_nothing_failures_by_system_and_code() {
        assert_eq!(health_action(hs::MEM, 10, 0), Action::None);
        assert_eq!(health_action(hs::MEM, 20, 0), Action::ResetGpu);
        assert_eq!(
            health_action(hs::MEM, 20, FR_ROW_REMAP_FAILURE),
            Action::Replace
        );
        assert_eq!(health_action(hs::PCIE, 20, 0), Action::RebootNode);
        assert_eq!(health_action(hs::THERMAL, 20, 0), Action::Drain);
        assert_eq!(health_action(hs::INFOROM, 20, 0), Action::Replace);
    }

    #[test]
    fn the_most_disruptive_source_wins_and_names_the_reason() {
        assert_eq!(decide(&Evidence::default()), (Action::None, "none"));
        let e = Evidence {
            xids: vec![13, 48],
            ..Default::default()
        };
        assert_eq!(decide(&e), (Action::ResetGpu, "xid"));
        let e = Evidence {
            lost: true,
            recovery: Some(1),
            xids: vec![79],
            ..Default::default()
        };
        // Lost comes first at the same rank as XID 79.
        assert_eq!(decide(&e), (Action::RebootNode, "gpu_lost"));
        let e = Evidence {
            recovery: Some(3),
            xids: vec![13],
            incidents: vec![(hs::THERMAL, 10, 0)],
            ..Default::default()
        };
        assert_eq!(decide(&e), (Action::Drain, "recovery_action"));
        let e = Evidence {
            recovery: Some(0),
            incidents: vec![(hs::MEM, 20, FR_ROW_REMAP_FAILURE), (hs::PCIE, 20, 0)],
            ..Default::default()
        };
        assert_eq!(decide(&e), (Action::Replace, "health_mem"));
    }

    /// A node-level failure asks each GPU for what the node needs: never a GPU reset or a
    /// replacement; a GPU's own incident that asks for more still wins.
    #[test]
    fn node_incidents_ask_each_gpu_for_what_the_node_needs() {
        let node = |system, code| Evidence {
            node_incidents: vec![(system, 20, code)],
            ..Default::default()
        };
        assert_eq!(decide(&node(hs::NVLINK, 0)), (Action::Drain, NODE_REASON));
        assert_eq!(decide(&node(hs::INFOROM, 0)), (Action::Drain, NODE_REASON));
        assert_eq!(
            decide(&node(hs::PCIE, 0)),
            (Action::RebootNode, NODE_REASON)
        );
        let warn = Evidence {
            node_incidents: vec![(hs::NVLINK, 10, 0)],
            ..Default::default()
        };
        assert_eq!(decide(&warn), (Action::None, "none"));
        let mut both = node(hs::NVLINK, 0);
        both.incidents.push((hs::MEM, 20, 0));
        assert_eq!(decide(&both), (Action::ResetGpu, "health_mem"));
    }

    #[test]
    fn gpus_counted_against_the_expected_set() {
        assert_eq!(
            count(&[0, 1, 2, 3], &[0, 1, 2, 3], &[]),
            GpuCount {
                expected: 4,
                present: 4,
                lost: 0
            }
        );
        // GPU 1 reports Lost, GPU 3 left the list.
        assert_eq!(
            count(&[0, 1, 2, 3], &[0, 1, 2], &[1]),
            GpuCount {
                expected: 4,
                present: 2,
                lost: 2
            }
        );
        // A GPU outside the selection does not count.
        assert_eq!(count(&[0], &[0, 1], &[1]).lost, 0);
    }
}
