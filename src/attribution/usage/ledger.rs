//! One device's books between collections: its last energy reading, the idle energy, and per
//! consumer the energy attributed, the last share and when it was last active. Readings
//! without an energy value (a lost or blank sample) attribute nothing; their intervals'
//! shares wait, bounded, for the next reading, whose delta covers them.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// A consumer's labels: what tells it apart on its device.
pub(crate) type ConsumerId = Vec<(String, String)>;

/// Intervals without an energy value whose shares are kept for the next one, at most. A
/// device that never reports energy keeps none (nothing to wait for).
pub(crate) const MAX_PENDING: usize = 256;

/// Collections in a row without process data after which a device's energy is booked as
/// idle rather than waiting longer for its shares.
pub(crate) const MAX_UNKNOWN: usize = 10;

/// One consumer on one device.
#[derive(Clone, Debug)]
pub(crate) struct ConsumerBook {
    /// Joules attributed since it was first seen on this device.
    pub energy_j: f64,
    /// Its share of the device's utilisation over the last interval it was known for,
    /// percent (`None` until NVML first answered for its device).
    pub share: Option<f64>,
    pub first_seen: Instant,
    pub last_active: Option<Instant>,
    /// Order of first sight over the whole node (the cap keeps the earliest).
    pub seq: u64,
    /// Left without series by the cap on the last collection.
    pub capped: bool,
    /// What it does can be told: an exclusive holder, or one whose processes are known
    /// (a pod without its UID on a shared device is not: it gets no series).
    pub known: bool,
    /// The source that named it (`Consumer::source`).
    pub source: &'static str,
    /// Collections in a row it was kept while its failing source did not name it.
    pub missing: usize,
}

impl ConsumerBook {
    pub(crate) fn new(now: Instant, seq: u64, source: &'static str) -> ConsumerBook {
        ConsumerBook {
            energy_j: 0.0,
            share: None,
            first_seen: now,
            last_active: None,
            seq,
            capped: false,
            known: true,
            source,
            missing: 0,
        }
    }

    /// Held for at least `window` with no utilisation and no memory in use.
    pub(crate) fn idle(&self, now: Instant, window: std::time::Duration) -> bool {
        let since = self
            .last_active
            .map_or(self.first_seen, |a| a.max(self.first_seen));
        now.saturating_duration_since(since) >= window
    }
}

/// One device.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// The last energy reading, mJ.
    pub last_energy_mj: Option<f64>,
    /// Joules no consumer used, since the device was first seen with an energy value.
    pub idle_j: f64,
    pub consumers: HashMap<ConsumerId, ConsumerBook>,
    /// Per interval since the last energy delta: each consumer's fraction of the device's
    /// energy (1 for an exclusive holder, share / 100 on a shared device).
    pending: Vec<Vec<(ConsumerId, f64)>>,
    /// Energy booked in neither, waiting for known shares (J).
    waiting_j: f64,
    /// Collections in a row whose shares were unknown.
    unknown: usize,
}

/// The energy a counter went up by, in joules: `None` without two readings; after a reset
/// (a driver reload: lower than before) the new reading itself, counted from 0 as
/// Prometheus' `increase()` does.
pub(crate) fn delta_j(prev_mj: Option<f64>, now_mj: Option<f64>) -> Option<f64> {
    let (prev, now) = (prev_mj?, now_mj?);
    let mj = if now < prev { now } else { now - prev };
    Some(mj.max(0.0) / 1000.0)
}

impl Book {
    /// Books one interval: the consumers' fractions of the device's energy (`None`: unknown
    /// this time, NVML gave no processes for the device) and the energy reading (`None`: lost
    /// this time). Returns the joules attributed this time (consumers' and idle together).
    ///
    /// Energy waits while the shares are unknown and is split by the next known ones (NVML's
    /// samples since its previous answer cover the gap), for `MAX_UNKNOWN` collections at
    /// most: then it is idle. Shares wait while the energy is lost; the next reading's
    /// increase is split by the mean of every interval's shares.
    pub(crate) fn book(
        &mut self,
        fractions: Option<Vec<(ConsumerId, f64)>>,
        energy_mj: Option<f64>,
    ) -> f64 {
        match fractions {
            // A device that never reported energy has nothing to wait for.
            Some(f) if self.last_energy_mj.is_some() || energy_mj.is_some() => {
                if self.pending.len() == MAX_PENDING {
                    self.pending.remove(0);
                }
                self.pending.push(f);
            }
            Some(_) => {}
            None => self.unknown += 1,
        }
        let Some(now) = energy_mj else {
            return 0.0;
        };
        let Some(delta) = delta_j(self.last_energy_mj.replace(now), Some(now)) else {
            // The first reading is the baseline.
            self.pending.clear();
            self.unknown = 0;
            return 0.0;
        };
        self.waiting_j += delta;
        if self.pending.is_empty() && self.unknown < MAX_UNKNOWN {
            return 0.0;
        }
        let joules = std::mem::take(&mut self.waiting_j);
        let pending = std::mem::take(&mut self.pending);
        self.unknown = 0;
        self.split(joules, &pending);
        joules
    }

    /// Splits `delta` by the mean of each consumer's fraction over the pending intervals;
    /// the rest (and the part of consumers gone since) is idle.
    fn split(&mut self, delta: f64, pending: &[Vec<(ConsumerId, f64)>]) {
        let n = pending.len().max(1) as f64;
        let mut mean: HashMap<&ConsumerId, f64> = HashMap::new();
        for interval in pending {
            for (id, f) in interval {
                *mean.entry(id).or_default() += f.clamp(0.0, 1.0) / n;
            }
        }
        let mut used = 0.0;
        for (id, f) in mean {
            if let Some(c) = self.consumers.get_mut(id) {
                let j = delta * f.min(1.0);
                c.energy_j += j;
                used += j;
            }
        }
        self.idle_j += (delta - used).max(0.0);
    }

    /// Intervals waiting for an energy value, and energy waiting for shares.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> (usize, f64) {
        (self.pending.len(), self.waiting_j)
    }

    /// Forgets the consumers not in `present`, but those whose source is `failed` this
    /// collection or who are `unknown` (named by a part of a source that failed): one
    /// failed kubelet `List`, container-runtime answer or HPC file read says nothing about
    /// who left. Those are kept (their counters and order) for [`MAX_UNKNOWN`] collections
    /// in a row at most; returns how many were kept so.
    pub(crate) fn keep_only(
        &mut self,
        present: &[ConsumerId],
        failed: &BTreeSet<&'static str>,
        unknown: &[ConsumerId],
    ) -> usize {
        let mut kept = 0;
        self.consumers.retain(|id, c| {
            if present.contains(id) {
                c.missing = 0;
                return true;
            }
            let keep =
                (failed.contains(c.source) || unknown.contains(id)) && c.missing < MAX_UNKNOWN;
            if keep {
                c.missing += 1;
                kept += 1;
            }
            keep
        });
        kept
    }
}
