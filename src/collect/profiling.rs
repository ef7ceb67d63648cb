//! Profiling (DCP) support: DCGM refuses a whole watch holding a `DCGM_FI_PROF_*` field it
//! cannot serve, so support is asked (`dcgmProfGetSupportedMetricGroups`) before watching.

use super::field_name;
use super::targets::WatchSet;
use dcgm_sys::{Entity, Session};
use std::collections::{BTreeMap, HashSet};

/// Profiling support of one GPU watch set.
pub struct Profiling {
    /// Profiling fields no GPU of the set can serve, with why: left out of the watch.
    pub unwatched: Vec<(u16, String)>,
    /// (entity, field) pairs watched for other GPUs but not supported on this one.
    pub pairs: HashSet<(Entity, u16)>,
}

/// Profiling (DCP) fields are only watched and collected on GPUs whose supported metric
/// groups list them; the rest are skipped with one warning per field, as dcgm-exporter does.
/// A GPU whose query fails (the profiling module not loaded, profiling unsupported)
/// supports none.
pub fn unsupported_profiling(session: &Session, set: &WatchSet) -> Profiling {
    let prof: Vec<u16> = set
        .fields
        .iter()
        .copied()
        .filter(|f| is_profiling(*f))
        .collect();
    let mut out = Profiling {
        unwatched: Vec::new(),
        pairs: HashSet::new(),
    };
    if prof.is_empty() {
        return out;
    }
    let mut supported: BTreeMap<u32, Result<HashSet<u16>, String>> = BTreeMap::new();
    for gpu in set.targets.iter().filter_map(|t| t.gpu) {
        supported
            .entry(gpu)
            .or_insert_with(|| match session.supported_metric_groups(gpu) {
                Ok(groups) => Ok(groups.into_iter().flat_map(|g| g.field_ids).collect()),
                Err(e) => Err(e.to_string()),
            });
    }
    for f in prof {
        let lacking: Vec<(u32, &str)> = supported
            .iter()
            .filter_map(|(gpu, s)| match s {
                Ok(ok) if ok.contains(&f) => None,
                Ok(_) => Some((*gpu, "not in its supported profiling metric groups")),
                Err(e) => Some((*gpu, e.as_str())),
            })
            .collect();
        if lacking.is_empty() {
            continue;
        }
        if lacking.len() == supported.len() {
            // One reason per field: the first GPU's (they agree on a node without the module).
            let why = lacking[0].1;
            out.unwatched
                .push((f, format!("profiling metrics unavailable ({why})")));
            continue;
        }
        let gpus: Vec<String> = lacking.iter().map(|(g, _)| g.to_string()).collect();
        tracing::warn!(
            "skipping {} on GPUs {}: not in their supported profiling metric groups",
            field_name(f),
            gpus.join(",")
        );
        for (gpu, _) in &lacking {
            for t in set.targets.iter().filter(|t| t.gpu == Some(*gpu)) {
                out.pairs.insert((t.entity, f));
            }
        }
    }
    out
}

/// DCGM_FI_PROF_* fields (served by DCGM's profiling module).
fn is_profiling(id: u16) -> bool {
    dcgm_sys::fields::by_id(id).is_some_and(|m| m.name.starts_with("DCGM_FI_PROF_"))
}
