//! `DCGM_EXP_GPU_HEALTH_STATUS`: DCGM's health watches on the whole GPUs, per watch and
//! GPU. Its check is also the health action's (`actions`), so it runs when either is asked.

use super::{accepted, exp_labels, CsvLabels, Derived, Pass, Registration, Start, HEALTH_ACTION};
use crate::collect::failures;
use crate::collect::targets::Target;
use crate::config::counters::Counter;
use crate::model::Page;
use dcgm_sys::{health_system, Entity, EntityGroup, Group};
use std::any::Any;
use std::collections::HashMap;

/// The `health_watch` rows, in dcgm-exporter's order.
const HEALTH_WATCHES: &[(&str, u32)] = &[
    ("PCIE", health_system::PCIE),
    ("NVLINK", health_system::NVLINK),
    ("PMU", health_system::PMU),
    ("MCU", health_system::MCU),
    ("MEM", health_system::MEM),
    ("SM", health_system::SM),
    ("INFOROM", health_system::INFOROM),
    ("THERMAL", health_system::THERMAL),
    ("POWER", health_system::POWER),
    ("DRIVER", health_system::DRIVER),
    ("ALL", health_system::ALL),
];

const HEALTH_STATUS: &str = "DCGM_EXP_GPU_HEALTH_STATUS";

/// Serves the health status; the health action is `actions`' (which reads this check).
pub(super) const REGISTRATION: Registration = Registration {
    names: &[HEALTH_STATUS],
    start,
};

/// DCGM's health watches on the whole GPUs, for the health status and the health action.
fn start(start: &mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let status_row = start.row(HEALTH_STATUS);
    let action_row = start.row(HEALTH_ACTION);
    let whole_gpus = &start.whole_gpus;
    if (status_row.is_none() && action_row.is_none()) || whole_gpus.is_empty() {
        return Ok(None);
    }
    let ents: Vec<Entity> = whole_gpus.iter().map(|t| t.entity).collect();
    let mut refused = Vec::new();
    let session = start.session;
    let group = crate::collect::watch::group_of_accepted(
        session,
        &format!("dcgm-exporter-health-{}", std::process::id()),
        &ents,
        &mut refused,
    )
    .and_then(|g| session.health_set(&g, health_system::ALL).map(|_| g));
    match group {
        Ok(group) => Ok(Some(Box::new(Health {
            row: status_row,
            group,
            // A GPU the group refused has no health watch: no status rather than "pass".
            targets: accepted(whole_gpus, &refused),
            codes: crate::collect::health_codes::names(),
        }))),
        Err(e) if failures::is_fatal(&e) => Err(e),
        Err(e) => {
            for r in status_row.iter().chain(&action_row) {
                start.failures.refused_at_start(&r.name, &e);
            }
            Ok(None)
        }
    }
}

/// The health watches of every whole GPU: read for `DCGM_EXP_GPU_HEALTH_STATUS` (`row`)
/// and for the health action.
struct Health {
    row: Option<Counter>,
    group: Group,
    targets: Vec<Target>,
    codes: &'static HashMap<u32, String>,
}

impl Derived for Health {
    /// The name failures of the health check are counted under.
    fn source(&self) -> &str {
        self.row.as_ref().map_or(HEALTH_ACTION, |r| r.name.as_str())
    }

    fn collect(&mut self, pass: &mut Pass<'_>, page: &mut Page) -> dcgm_sys::Result<()> {
        let resp = pass.session.health_check(&self.group)?;
        crate::model::events::health(&resp);
        self.add(&resp, pass.csv_labels, page);
        pass.health = Some(resp);
        Ok(())
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Health {
    fn add(&self, resp: &dcgm_sys::HealthResponse, csv_labels: &CsvLabels, page: &mut Page) {
        let Some(row) = &self.row else { return };
        for t in &self.targets {
            for (watch, bit) in HEALTH_WATCHES {
                // A node-level incident (entity NONE) is every GPU's too.
                let worst = resp
                    .incidents
                    .iter()
                    .filter(|i| i.entity == t.entity || i.entity.group == EntityGroup::None)
                    .filter(|i| (i.system & bit) != 0)
                    .max_by_key(|i| i.health);
                let (value, code) = match worst {
                    Some(i) => (
                        i.health,
                        self.codes
                            .get(&i.code)
                            .cloned()
                            .unwrap_or_else(|| format!("DCGM_FR_UNKNOWN({})", i.code)),
                    ),
                    None => (0, "DCGM_FR_OK".to_string()),
                };
                let l = exp_labels(
                    t,
                    csv_labels,
                    &[("health_watch", watch), ("health_error_code", &code)],
                );
                page.add(&row.name, &row.help, row.prom_type, &l, f64::from(value));
            }
        }
    }
}
