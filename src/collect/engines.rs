//! Several host engines in one exporter (`-r a:5555,b:5555`, `sources.dcgm.hostEngines`):
//! which engines there are ([`RemoteEngine`]), and how their collections become one
//! ([`merge`]: every series labelled with its engine) or lose one engine's series
//! ([`withdraw`]). The threads that run each engine's loop and wait for their pages are the
//! lifecycle's (`lifecycle::app::engines`).

use super::info::LowCardinality;
use super::topology::Topology;
use crate::model::{Page, ENGINE_LABEL};
use dcgm_sys::ConnectTarget;
use std::time::Duration;

/// One host engine of several.
#[derive(Clone, Debug)]
pub(crate) struct RemoteEngine {
    /// The engine label's value: its configured name, else its host.
    pub label: String,
    pub target: ConnectTarget,
    /// The `hostname` label of its series (its host, by the loopback rule).
    pub hostname: Option<String>,
}

/// What one collection job hands back to the loop: the page as DCGM (or NVML) filled it
/// (attribution and rendering happen on the loop's thread, outside the DCGM deadline).
pub(crate) struct Collected {
    pub page: Page,
    /// The node the page describes, for the sinks (when any).
    pub topology: Option<Topology>,
    pub gpus: usize,
    /// Selections that match no entity: degraded notes on /health.
    pub unmatched: Vec<String>,
    /// `--low-cardinality`: the info series and what strips the page's static labels.
    pub low_cardinality: Option<(Page, LowCardinality)>,
    /// DCGM sampled none of the polled fields watched (see `Collector::stalled`).
    pub stalled: bool,
}

/// One collection of this round's engine collections (each with its engine's label and how
/// long it took), each series labelled with its engine; the longest collection stands for
/// the round's duration. `notes`: the round's degraded notes so far.
pub(crate) fn merge<'a>(
    fresh: impl IntoIterator<Item = (&'a str, Collected, Duration)>,
    mut notes: Vec<String>,
) -> (Collected, Duration) {
    let mut page = Page::reuse();
    let mut info: Option<(Page, LowCardinality)> = None;
    let (mut gpus, mut stalled, mut took) = (0, true, Duration::ZERO);
    let mut topology = None;
    let mut oldest: Option<i64> = None;
    for (label, c, t) in fresh {
        oldest = match (oldest, c.page.oldest_sample_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        page.append_labelled(c.page, ENGINE_LABEL, label);
        if let Some((p, strip)) = c.low_cardinality {
            let (all, _) = info.get_or_insert_with(|| (Page::default(), strip));
            all.append_labelled(p, ENGINE_LABEL, label);
        }
        gpus += c.gpus;
        stalled &= c.stalled;
        took = took.max(t);
        if let Some(t) = c.topology {
            join(topology.get_or_insert_with(Default::default), t);
        }
        notes.extend(c.unmatched.into_iter().map(|n| format!("{label}: {n}")));
    }
    page.oldest_sample_us = oldest;
    let merged = Collected {
        page,
        topology,
        gpus,
        unmatched: notes,
        low_cardinality: info,
        stalled,
    };
    (merged, took)
}

/// Removes the series of the `gone` engines from `page`; false when no engine's series is
/// left.
pub(crate) fn withdraw(page: &mut Page, gone: &[String]) -> bool {
    page.rewrite(|_, s| {
        let theirs = s
            .label(ENGINE_LABEL)
            .is_some_and(|e| gone.iter().any(|g| g == e));
        if theirs {
            Vec::new()
        } else {
            vec![s]
        }
    });
    page.families().any(|f| {
        f.series()
            .any(|s| s.labels().any(|(k, _)| k == ENGINE_LABEL))
    })
}

/// Adds engine `t`'s entities to `all`: the sinks describe every engine's GPUs (their ids
/// may repeat across engines, as on the page, where the engine label tells them apart).
fn join(all: &mut Topology, t: Topology) {
    let Topology {
        gpus,
        lost_gpus,
        instances,
        mig_rows,
        switches,
        links,
        cpus,
        warnings,
    } = t;
    all.gpus.extend(gpus);
    all.lost_gpus.extend(lost_gpus);
    all.instances.extend(instances);
    all.mig_rows.extend(mig_rows);
    all.switches.extend(switches);
    all.links.extend(links);
    all.cpus.extend(cpus);
    all.warnings.extend(warnings);
}
