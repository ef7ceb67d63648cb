//! Several host engines in one exporter (`-r a:5555,b:5555`, `sources.dcgm.hostEngines`):
//! which engines there are ([`RemoteEngine`]), what each has handed in since the last
//! publish and when a round of them is complete ([`Rounds`]), and how their collections
//! become one ([`merge`]: every series labelled with its engine) or lose one engine's series
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

/// How long a round waits for the other live engines' pages once one came: half an
/// interval more than one, so that a loop late by some jitter (a busy machine) still makes
/// this round instead of leaving a gap in its series.
pub(crate) fn round_wait(interval: Duration) -> Duration {
    interval * 3 / 2
}

/// One engine's state between two publishes.
#[derive(Default)]
struct Slot {
    /// The page collected since the last publish, and how long it took.
    fresh: Option<(Box<Collected>, Duration)>,
    up: bool,
    /// Why the engine is down (`None` while up, or before its first try ended).
    down: Option<String>,
    /// Its series are on the served page and must go.
    withdraw: bool,
    /// Its series are on the served page.
    published: bool,
    /// A session to it was opened before (the next one is a reconnect).
    connected_before: bool,
}

/// What every engine handed in since the last publish, by engine index.
pub(crate) struct Rounds {
    slots: Vec<Slot>,
}

/// One publish's worth of the engines: the pages to merge, or the series to withdraw.
pub(crate) struct Round {
    /// (engine index, page, how long it took).
    fresh: Vec<(usize, Box<Collected>, Duration)>,
    /// The labels of the engines whose series must leave the served page.
    pub withdrawn: Vec<String>,
    /// A degraded note per engine that is down.
    pub down: Vec<String>,
}

impl Rounds {
    pub(crate) fn new(engines: usize) -> Rounds {
        Rounds {
            slots: (0..engines).map(|_| Slot::default()).collect(),
        }
    }

    /// Engine `i` collected `c`; an older page not yet merged is replaced. True when it
    /// was down until now.
    pub(crate) fn offer(&mut self, i: usize, c: Collected, took: Duration) -> bool {
        let slot = &mut self.slots[i];
        if let Some((old, _)) = slot.fresh.replace((Box::new(c), took)) {
            old.page.recycle();
        }
        slot.up = true;
        slot.down.take().is_some()
    }

    /// Engine `i` failed (`why`): its series leave the served page at the next publish.
    /// True when it was not down already.
    pub(crate) fn down(&mut self, i: usize, why: &str) -> bool {
        let slot = &mut self.slots[i];
        slot.fresh = None;
        slot.up = false;
        let newly = slot.down.replace(why.to_string()).is_none();
        slot.withdraw = slot.published;
        newly
    }

    /// Engine `i` opened a session: true when it is a reconnect (one was opened before).
    pub(crate) fn connected(&mut self, i: usize) -> bool {
        std::mem::replace(&mut self.slots[i].connected_before, true)
    }

    /// Whether a round can start: a page came, or an engine's series must go.
    pub(crate) fn anything(&self) -> bool {
        self.any_fresh() || self.slots.iter().any(|s| s.withdraw)
    }

    pub(crate) fn any_fresh(&self) -> bool {
        self.slots.iter().any(|s| s.fresh.is_some())
    }

    /// Every engine that is up has handed in its page: the round need not wait.
    pub(crate) fn all_up_fresh(&self) -> bool {
        self.slots.iter().all(|s| !s.up || s.fresh.is_some())
    }

    /// Takes this round's pages, withdrawals and down notes (`engines` by index); the
    /// engines with a page become those published.
    pub(crate) fn take(&mut self, engines: &[RemoteEngine]) -> Round {
        let mut round = Round {
            fresh: Vec::new(),
            withdrawn: Vec::new(),
            down: Vec::new(),
        };
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let engine = &engines[i];
            if std::mem::take(&mut slot.withdraw) {
                round.withdrawn.push(engine.label.clone());
            }
            if let Some(why) = &slot.down {
                round.down.push(format!(
                    "host engine {} ({}) is down: {why}",
                    engine.label, engine.target
                ));
            }
            if let Some((c, t)) = slot.fresh.take() {
                round.fresh.push((i, c, t));
            }
        }
        if !round.fresh.is_empty() {
            for (i, slot) in self.slots.iter_mut().enumerate() {
                slot.published = round.fresh.iter().any(|(j, ..)| *j == i);
            }
        }
        round
    }
}

impl Round {
    /// No engine handed in a page: only withdrawals.
    pub(crate) fn is_empty(&self) -> bool {
        self.fresh.is_empty()
    }

    /// The round's pages as one ([`merge`]), with its down notes.
    pub(crate) fn merge(self, engines: &[RemoteEngine]) -> (Collected, Duration) {
        let fresh = self
            .fresh
            .into_iter()
            .map(|(i, c, t)| (engines[i].label.as_str(), *c, t));
        merge(fresh, self.down)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(label: &str) -> RemoteEngine {
        RemoteEngine {
            label: label.into(),
            target: ConnectTarget::parse(&format!("{label}:5555")).unwrap(),
            hostname: None,
        }
    }

    fn collected() -> Collected {
        Collected {
            page: Page::default(),
            topology: None,
            gpus: 1,
            unmatched: Vec::new(),
            low_cardinality: None,
            stalled: false,
        }
    }

    /// A round waits for every engine that is up; one that goes down after its series were
    /// published is withdrawn once and noted as down until it serves again.
    #[test]
    fn rounds_merge_the_live_engines_and_withdraw_one_that_went_down() {
        let engines = [engine("a"), engine("b")];
        let mut r = Rounds::new(2);
        assert!(!r.anything());
        assert!(!r.connected(0) && r.connected(0));
        assert!(!r.offer(0, collected(), Duration::from_millis(5)));
        assert!(!r.offer(1, collected(), Duration::from_millis(7)));
        assert!(r.all_up_fresh());
        let round = r.take(&engines);
        assert!(!round.is_empty() && round.withdrawn.is_empty() && round.down.is_empty());
        let (merged, took) = round.merge(&engines);
        assert_eq!((merged.gpus, took), (2, Duration::from_millis(7)));

        assert!(r.down(1, "gone"));
        assert!(!r.down(1, "gone"));
        assert!(r.anything() && !r.any_fresh());
        let round = r.take(&engines);
        assert!(round.is_empty());
        assert_eq!(round.withdrawn, ["b"]);
        assert_eq!(round.down, ["host engine b (b:5555) is down: gone"]);
        assert!(!r.anything(), "withdrawn once");

        assert!(!r.offer(0, collected(), Duration::ZERO));
        assert!(r.all_up_fresh(), "b is down: a round need not wait for it");
        assert!(r.offer(1, collected(), Duration::ZERO), "b serves again");
    }
}
