//! Health checks: what dcgmHealthCheck reports for a group, from the XIDs seen, lost GPUs
//! and incidents a test injected.
//!
//! XIDs are judged with DCGM 4.6's own table (modules/health/DcgmHealthWatch.cpp,
//! `BuildXidMappings`): "devastating" XIDs are reported under system ALL whatever the
//! group watches, the others only when the group watches their subsystem, and an XID the
//! table does not know raises nothing. As in DCGM, a GPU's XID history lasts until the
//! engine restarts (or `health_clear`).

use super::node::Node;
use super::{FE_GPU, FE_NONE};
use crate::proto::Incident;

pub const SYS_PCIE: u32 = 0x1;
pub const SYS_NVLINK: u32 = 0x2;
pub const SYS_MEM: u32 = 0x10;
pub const SYS_THERMAL: u32 = 0x80;
pub const SYS_POWER: u32 = 0x100;
pub const SYS_ALL: u32 = 0xFFFF_FFFF;

pub const WARN: u32 = 10;
pub const FAIL: u32 = 20;

// DCGM_FR_* codes (dcgm_errors.h).
pub const FR_PENDING_PAGE_RETIREMENTS: u32 = 6;
pub const FR_CLOCKS_EVENT_THERMAL: u32 = 10;
pub const FR_CLOCKS_EVENT_POWER: u32 = 12;
pub const FR_ROW_REMAP_FAILURE: u32 = 80;
pub const FR_UNCONTAINED_ERROR: u32 = 81;
pub const FR_XID_ERROR: u32 = 101;
pub const FR_FALLEN_OFF_BUS: u32 = 120;
pub const FR_CONTAINED_ERROR: u32 = 131;

struct XidRule {
    system: u32,
    health: u32,
    code: u32,
    what: &'static str,
}

fn xid_rule(xid: i64) -> Option<XidRule> {
    let r = |system, health, code, what| {
        Some(XidRule {
            system,
            health,
            code,
            what,
        })
    };
    match xid {
        48 => r(SYS_ALL, FAIL, FR_XID_ERROR, "Double Bit ECC Error"),
        74 => r(SYS_ALL, FAIL, FR_XID_ERROR, "NVLink Critical Error"),
        79 => r(
            SYS_ALL,
            FAIL,
            FR_FALLEN_OFF_BUS,
            "GPU has fallen off the bus",
        ),
        94 => r(
            SYS_ALL,
            WARN,
            FR_CONTAINED_ERROR,
            "GPU had a contained error.",
        ),
        95 => r(
            SYS_ALL,
            FAIL,
            FR_UNCONTAINED_ERROR,
            "GPU had an uncontained error (XID 95)",
        ),
        119 => r(SYS_ALL, FAIL, FR_XID_ERROR, "GSP RPC Timeout"),
        120 => r(SYS_ALL, FAIL, FR_XID_ERROR, "GSP Error"),
        140 => r(SYS_ALL, FAIL, FR_XID_ERROR, "ECC unrecovered error"),
        31 => r(SYS_MEM, WARN, FR_XID_ERROR, "MMU Error"),
        32 => r(SYS_MEM, WARN, FR_XID_ERROR, "PBDMA Error"),
        43 => r(SYS_MEM, WARN, FR_XID_ERROR, "Reset Channel Verif Error"),
        63 => r(
            SYS_MEM,
            WARN,
            FR_PENDING_PAGE_RETIREMENTS,
            "Pending page retirement",
        ),
        64 => r(SYS_MEM, FAIL, FR_ROW_REMAP_FAILURE, "Row remapping failure"),
        38 => r(SYS_PCIE, WARN, FR_XID_ERROR, "PCIe Bus Error"),
        39 => r(SYS_PCIE, WARN, FR_XID_ERROR, "PCIe Fabric Error"),
        42 => r(SYS_PCIE, WARN, FR_XID_ERROR, "PCIe Replay Error"),
        60 => r(
            SYS_THERMAL,
            WARN,
            FR_CLOCKS_EVENT_THERMAL,
            "Thermal clocks event",
        ),
        61 => r(
            SYS_THERMAL,
            WARN,
            FR_XID_ERROR,
            "EDPP Power Brake Thermal limit",
        ),
        62 => r(SYS_THERMAL, WARN, FR_XID_ERROR, "Thermal Violation"),
        54 => r(SYS_POWER, WARN, FR_XID_ERROR, "Power state change"),
        56 => r(SYS_POWER, WARN, FR_XID_ERROR, "Clock change"),
        57 => r(
            SYS_POWER,
            WARN,
            FR_CLOCKS_EVENT_POWER,
            "Clock change due to power",
        ),
        58 => r(SYS_POWER, WARN, FR_XID_ERROR, "Clock change due to thermal"),
        78 => r(SYS_POWER, WARN, FR_XID_ERROR, "Power state forced change"),
        67 => r(SYS_NVLINK, WARN, FR_XID_ERROR, "NVLink Error"),
        73 => r(SYS_NVLINK, WARN, FR_XID_ERROR, "NVLink Flow Control Error"),
        121 => r(SYS_NVLINK, WARN, FR_XID_ERROR, "C2C Link corrected error"),
        137 => r(SYS_NVLINK, WARN, FR_XID_ERROR, "NVLink FLA privilege error"),
        _ => None,
    }
}

/// The DCGM_FR_* message of a code, formatted for a GPU (dcgm_errors.h `*_MSG`).
/// An injected incident's message: the fault's own, or the real one for its code.
fn or_default(msg: String, default: impl FnOnce() -> String) -> String {
    if msg.is_empty() {
        default()
    } else {
        msg
    }
}

fn code_message(code: u32, gpu: u32, xid: i64) -> String {
    match code {
        FR_XID_ERROR => format!("Detected XID {xid} for GPU {gpu}"),
        FR_FALLEN_OFF_BUS => format!("GPU {gpu} has fallen off the bus"),
        FR_CONTAINED_ERROR => "GPU had a contained error.".into(),
        FR_UNCONTAINED_ERROR => "GPU had an uncontained error (XID 95)".into(),
        FR_PENDING_PAGE_RETIREMENTS => {
            format!("A pending retired page has been detected in GPU {gpu}.")
        }
        FR_ROW_REMAP_FAILURE => {
            format!("GPU {gpu} had uncorrectable memory errors and row remapping failed.")
        }
        FR_CLOCKS_EVENT_THERMAL => {
            format!("Detected clocks event due to thermal violation in GPU {gpu}.")
        }
        FR_CLOCKS_EVENT_POWER => {
            format!("Detected clocks event due to power violation in GPU {gpu}.")
        }
        _ => format!("Health incident on GPU {gpu}"),
    }
}

#[derive(Default)]
pub struct Health {
    /// (gpu, xid), each pair once, in the order first seen.
    xids: Vec<(u32, i64)>,
    injected: Vec<Incident>,
}

impl Health {
    pub fn record_xid(&mut self, gpu: u32, xid: i64) {
        if !self.xids.contains(&(gpu, xid)) {
            self.xids.push((gpu, xid));
        }
    }

    pub fn inject(&mut self, gpu: u32, system: u32, health: u32, code: u32, msg: String) {
        let msg = or_default(msg, || code_message(code, gpu, 0));
        self.push_injected((FE_GPU, gpu), system, health, code, msg);
    }

    /// A node-level incident (entity NONE), part of every health check.
    pub fn inject_node(&mut self, system: u32, health: u32, code: u32, msg: String) {
        let msg = or_default(msg, || "Health incident on the node".to_string());
        self.push_injected((FE_NONE, 0), system, health, code, msg);
    }

    fn push_injected(
        &mut self,
        entity: (u32, u32),
        system: u32,
        health: u32,
        code: u32,
        msg: String,
    ) {
        self.injected.push(Incident {
            system,
            health,
            msg,
            code,
            entity,
        });
    }

    pub fn clear_node(&mut self) {
        self.injected.retain(|i| i.entity.0 != FE_NONE);
    }

    pub fn clear(&mut self, gpu: u32) {
        self.xids.retain(|(g, _)| *g != gpu);
        self.injected.retain(|i| i.entity != (FE_GPU, gpu));
    }

    /// (overall result, incidents) for a group's entities and watched systems.
    /// The incident DCGM's memory check raises from a GPU's own counters: a row-remap
    /// failure (DCGM_FI_DEV_ROW_REMAP_FAILED != 0) fails MEM, as real DCGM 4.6 reports it.
    pub fn row_remap_incident(gpu: u32, row_remap_failed: i64) -> Option<Incident> {
        (row_remap_failed != 0).then(|| Incident {
            system: SYS_MEM,
            health: FAIL,
            msg: code_message(FR_ROW_REMAP_FAILURE, gpu, 0),
            code: FR_ROW_REMAP_FAILURE,
            entity: (FE_GPU, gpu),
        })
    }

    pub fn check(&self, node: &Node, entities: &[(u32, u32)], mask: u32) -> (u32, Vec<Incident>) {
        let mut out = Vec::new();
        if mask == 0 {
            return (0, out);
        }
        for &(group, gpu) in entities {
            if group != FE_GPU {
                continue;
            }
            if mask & SYS_PCIE != 0 && node.gpu(gpu).is_some_and(|g| g.lost) {
                out.push(Incident {
                    system: SYS_PCIE,
                    health: FAIL,
                    msg: code_message(FR_FALLEN_OFF_BUS, gpu, 0),
                    code: FR_FALLEN_OFF_BUS,
                    entity: (FE_GPU, gpu),
                });
            }
            for &(_, xid) in self.xids.iter().filter(|(g, _)| *g == gpu) {
                let Some(rule) = xid_rule(xid) else {
                    continue;
                };
                if rule.system != SYS_ALL && rule.system & mask == 0 {
                    continue;
                }
                out.push(Incident {
                    system: rule.system,
                    health: rule.health,
                    msg: format!(
                        "{} (triggered by XID {xid}: {})",
                        code_message(rule.code, gpu, xid),
                        rule.what
                    ),
                    code: rule.code,
                    entity: (FE_GPU, gpu),
                });
            }
            out.extend(
                self.injected
                    .iter()
                    .filter(|i| i.entity == (FE_GPU, gpu) && i.system & mask != 0)
                    .cloned(),
            );
        }
        // DCGM reports the node's own incidents (entity NONE) in any group's check.
        out.extend(
            self.injected
                .iter()
                .filter(|i| i.entity.0 == FE_NONE && i.system & mask != 0)
                .cloned(),
        );
        (out.iter().map(|i| i.health).max().unwrap_or(0), out)
    }
}
