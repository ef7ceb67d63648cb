//! One device's books between collections: its last energy reading, the idle energy, and per
//! consumer the energy attributed, the last share and when it was last active. Readings
//! without an energy value (a lost or blank sample) attribute nothing; their intervals'
//! shares wait, bounded, for the next reading, whose delta covers them.

use std::collections::HashMap;
use std::time::Instant;

/// A consumer's labels: what tells it apart on its device.
pub type ConsumerId = Vec<(String, String)>;

/// Intervals without an energy value whose shares are kept for the next one, at most. A
/// device that never reports energy keeps none (nothing to wait for).
pub const MAX_PENDING: usize = 256;

/// One consumer on one device.
#[derive(Clone, Debug)]
pub struct ConsumerBook {
    /// Joules attributed since it was first seen on this device.
    pub energy_j: f64,
    /// Its share of the device's utilisation over the last interval, percent.
    pub share: f64,
    pub first_seen: Instant,
    pub last_active: Option<Instant>,
    /// Order of first sight over the whole node (the cap keeps the earliest).
    pub seq: u64,
    /// Left without series by the cap on the last collection.
    pub capped: bool,
    /// What it does can be told: an exclusive holder, or one whose processes are known
    /// (a pod without its UID on a shared device is not: it gets no series).
    pub known: bool,
}

impl ConsumerBook {
    pub fn new(now: Instant, seq: u64) -> ConsumerBook {
        ConsumerBook {
            energy_j: 0.0,
            share: 0.0,
            first_seen: now,
            last_active: None,
            seq,
            capped: false,
            known: true,
        }
    }

    /// Held for at least `window` with no utilisation and no memory in use.
    pub fn idle(&self, now: Instant, window: std::time::Duration) -> bool {
        let since = self
            .last_active
            .map_or(self.first_seen, |a| a.max(self.first_seen));
        now.saturating_duration_since(since) >= window
    }
}

/// One device.
#[derive(Debug, Default)]
pub struct Book {
    /// The last energy reading, mJ.
    pub last_energy_mj: Option<f64>,
    /// Joules no consumer used, since the device was first seen with an energy value.
    pub idle_j: f64,
    pub consumers: HashMap<ConsumerId, ConsumerBook>,
    /// Per interval since the last energy delta: each consumer's fraction of the device's
    /// energy (1 for an exclusive holder, share / 100 on a shared device).
    pending: Vec<Vec<(ConsumerId, f64)>>,
}

/// The energy a counter went up by, in joules: `None` without two readings; after a reset
/// (a driver reload: lower than before) the new reading itself, counted from 0 as
/// Prometheus' `increase()` does.
pub fn delta_j(prev_mj: Option<f64>, now_mj: Option<f64>) -> Option<f64> {
    let (prev, now) = (prev_mj?, now_mj?);
    let mj = if now < prev { now } else { now - prev };
    Some(mj.max(0.0) / 1000.0)
}

impl Book {
    /// Books one interval: the consumers' fractions of the device's energy, and the energy
    /// reading (`None`: lost this time). Returns the joules attributed this time (consumers'
    /// and idle together), for the sum rule's tests.
    pub fn book(&mut self, fractions: Vec<(ConsumerId, f64)>, energy_mj: Option<f64>) -> f64 {
        let Some(now) = energy_mj else {
            if self.last_energy_mj.is_some() {
                if self.pending.len() == MAX_PENDING {
                    self.pending.remove(0);
                }
                self.pending.push(fractions);
            }
            return 0.0;
        };
        self.pending.push(fractions);
        let pending = std::mem::take(&mut self.pending);
        let Some(delta) = delta_j(self.last_energy_mj.replace(now), Some(now)) else {
            return 0.0;
        };
        self.split(delta, &pending);
        delta
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

    /// Intervals waiting for an energy value.
    #[cfg(test)]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Forgets the consumers not in `present`.
    pub fn keep_only(&mut self, present: &[ConsumerId]) {
        self.consumers.retain(|id, _| present.contains(id));
    }
}
