//! What the accountant reads of a collected page (before the merge copies series per pod):
//! each GPU and MIG instance with its identity labels, its energy counter and its utilisation.

use super::EntityKey;
use crate::attribution::IdType;
use crate::model::Page;
use std::collections::BTreeMap;

/// One device on the page.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reading {
    pub key: EntityKey,
    /// The `gpu` label (the GPU's index), which the dropped-consumers counter is labelled by.
    pub gpu: String,
    /// How the kubelet's device ids name it (as `merge` keys pods: `"<gpu>-<gi>"` for a MIG
    /// instance, else the UUID or `nvidia<N>`).
    pub pod_key: String,
    /// Its series' labels, in order.
    pub labels: Vec<(String, String)>,
    /// Energy counter, mJ; `None` when the page has no value this collection.
    pub energy_mj: Option<f64>,
    /// Utilisation, percent.
    pub util: Option<f64>,
}

/// The energy families by the DCGM field the collector tagged them with (never by the name
/// a release exports them under), with their factor to mJ: `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`
/// (156, mJ) or 4.9.0's `DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL` (1611, J).
fn energy_scale(field: u16) -> Option<f64> {
    match field {
        156 => Some(1.0),
        1611 => Some(1000.0),
        _ => None,
    }
}

/// The utilisation families, with their factor to percent: `DCGM_FI_DEV_GPU_UTIL` (203, %,
/// also under 4.8.x's `DCGM_FI_DEV_GPU_UTIL_RATIO`) or 4.9.0's ratio (1613, 0-1).
fn util_scale(field: u16) -> Option<f64> {
    match field {
        203 => Some(1.0),
        1613 => Some(100.0),
        _ => None,
    }
}

/// The devices with an energy or utilisation series on the page, sorted by key.
pub(crate) fn read(page: &Page, id_type: IdType) -> Vec<Reading> {
    let mut out: BTreeMap<EntityKey, Reading> = BTreeMap::new();
    for fam in page.families() {
        let energy = fam.field().and_then(energy_scale);
        let util = fam.field().and_then(util_scale);
        if energy.is_none() && util.is_none() {
            continue;
        }
        for s in fam.series() {
            let labels: Vec<(String, String)> = s
                .labels()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let Some(r) = identify(labels, id_type) else {
                continue;
            };
            let compute_instance = r
                .labels
                .iter()
                .any(|(k, v)| k == "GPU_CI_ID" && !v.is_empty());
            let e = out.entry(r.key.clone()).or_insert(r.clone());
            // A GPU instance's own series names it better than one of its compute instances.
            if !compute_instance && e.labels != r.labels {
                e.labels = r.labels;
            }
            // A value that is not a number is as good as none.
            let v = Some(s.value()).filter(|v| v.is_finite());
            match (energy, util) {
                (Some(k), _) => e.energy_mj = e.energy_mj.or(v.map(|v| v * k)),
                (_, Some(k)) => e.util = e.util.or(v.map(|v| v * k)),
                _ => {}
            }
        }
    }
    out.into_values().collect()
}

/// A GPU or MIG-instance series (first label `gpu`), as `merge` recognises one.
fn identify(labels: Vec<(String, String)>, id_type: IdType) -> Option<Reading> {
    let (first, gpu) = labels.first()?;
    if first != "gpu" {
        return None;
    }
    let get = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let profiled = get("GPU_I_PROFILE").is_some_and(|p| !p.is_empty());
    let instance = if profiled { get("GPU_I_ID") } else { None };
    let engine = get(crate::model::ENGINE_LABEL);
    // A GPU without a UUID label (a fake GPU) is still a device of its own.
    let uuid = get("UUID")
        .or_else(|| get("uuid"))
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| match &engine {
            // A fake GPU's index is its only name, one per engine.
            Some(e) => format!("{e}/gpu{gpu}"),
            None => format!("gpu{gpu}"),
        });
    let gi = match &instance {
        Some(gi) => Some(gi.parse::<u32>().ok()?),
        None => None,
    };
    let device = get("device").unwrap_or_default();
    let pod_key = crate::attribution::merge::pod_key(
        gpu,
        &uuid,
        &device,
        instance.as_deref(),
        engine.as_deref(),
        id_type,
    );
    Some(Reading {
        key: (uuid, gi),
        gpu: gpu.clone(),
        pod_key,
        labels,
        energy_mj: None,
        util: None,
    })
}
