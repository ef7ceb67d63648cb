//! Profiling (DCP) support: DCGM refuses a whole watch holding a `DCGM_FI_PROF_*` field it
//! cannot serve, so support is asked (`dcgmProfGetSupportedMetricGroups`) before watching.

use super::field_name;
use super::targets::WatchSet;
use crate::config::counters::Counters;
use dcgm_sys::{Entity, Module, ModuleStatus, Session};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Profiling support of one GPU watch set.
pub(super) struct Profiling {
    /// Profiling fields no GPU of the set can serve, with why: left out of the watch.
    pub unwatched: Vec<(u16, String)>,
    /// (entity, field) pairs watched for other GPUs but not supported on this one.
    pub pairs: HashSet<(Entity, u16)>,
    /// DCGM's profiling module is on the host engine's denylist (`dcgmModuleGetStatuses`):
    /// what it costs is said in one line, not a warning per row.
    pub denied: bool,
    /// The GPUs some profiling field is left out on.
    lacking: BTreeSet<u32>,
}

impl Profiling {
    /// Says what is left out: with the module denied, one line naming every profiling row
    /// left out and on which GPUs; else a warning per row no GPU can serve (the rows some
    /// GPUs lack were named per field already).
    pub(super) fn report(&self, set: &WatchSet, counters: &Counters) {
        if !self.denied {
            for (field, why) in &self.unwatched {
                for name in super::targets::row_names(set, counters, *field) {
                    tracing::warn!("skipping {name}: {why}");
                }
            }
            return;
        }
        let fields: BTreeSet<u16> = self
            .unwatched
            .iter()
            .map(|u| u.0)
            .chain(self.pairs.iter().map(|p| p.1))
            .collect();
        let rows: Vec<String> = fields
            .iter()
            .flat_map(|f| super::targets::row_names(set, counters, *f))
            .collect();
        let gpus: Vec<String> = self.lacking.iter().map(u32::to_string).collect();
        if rows.is_empty() {
            tracing::info!(
                "DCGM's profiling module is denied (module denylist): no profiling row is left \
                 out (DCGM samples these GPUs' profiling through NVML's GPM)"
            );
        } else {
            tracing::info!(
                "DCGM's profiling module is denied (module denylist): leaving out {} on GPUs {} \
                 (GPUs DCGM samples through NVML's GPM keep them)",
                rows.join(", "),
                gpus.join(",")
            );
        }
    }
}

/// Profiling (DCP) fields are only watched and collected on GPUs whose supported metric
/// groups list them; the rest are skipped with one warning per field, as dcgm-exporter does.
/// A GPU whose query fails (the profiling module not loaded, profiling unsupported)
/// supports none.
pub(super) fn unsupported_profiling(session: &Session, set: &WatchSet) -> Profiling {
    let prof: Vec<u16> = set
        .fields
        .iter()
        .copied()
        .filter(|f| is_profiling(*f))
        .collect();
    let mut out = Profiling {
        unwatched: Vec::new(),
        pairs: HashSet::new(),
        denied: false,
        lacking: BTreeSet::new(),
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
    // Asked only when a query failed: whether the operator denied the module.
    out.denied = supported.values().any(Result::is_err)
        && matches!(
            session.module_status(Module::Profiling),
            Ok(Some(ModuleStatus::Denylisted))
        );
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
        out.lacking.extend(lacking.iter().map(|l| l.0));
        if lacking.len() == supported.len() {
            // One reason per field: the first GPU's (they agree on a node without the module).
            let why = lacking[0].1;
            out.unwatched
                .push((f, format!("profiling metrics unavailable ({why})")));
            continue;
        }
        let gpus: Vec<String> = lacking.iter().map(|(g, _)| g.to_string()).collect();
        if !out.denied {
            tracing::warn!(
                "skipping {} on GPUs {}: not in their supported profiling metric groups",
                field_name(f),
                gpus.join(",")
            );
        }
        for (gpu, _) in &lacking {
            for t in set.targets.iter().filter(|t| t.gpu == Some(*gpu)) {
                out.pairs.insert((t.entity, f));
            }
        }
    }
    out
}

/// Whether the host engine has loaded its profiling module (one debug line per build):
/// DCGM loads it on the first request a GPU without GPM needs it for, and it is most of an
/// embedded engine's memory where it loads (docs/metrics.md, "The profiling module").
pub(super) fn log_module_status(session: &Session) {
    match session.module_status(Module::Profiling) {
        Ok(Some(s)) => tracing::debug!("DCGM's profiling module: {}", s.as_str()),
        Ok(None) => tracing::debug!("DCGM's profiling module: not listed by the host engine"),
        Err(e) => tracing::debug!("DCGM's profiling module: status unknown ({e})"),
    }
}

/// DCGM_FI_PROF_* fields (served by DCGM's profiling module).
pub(super) fn is_profiling(id: u16) -> bool {
    dcgm_sys::fields::by_id(id).is_some_and(|m| m.name.starts_with("DCGM_FI_PROF_"))
}
