//! Watches and the sample cache, the way DCGM's cache manager keeps them.
//!
//! One [`Watch`] per (entity, field), with one watcher per connection, as DCGM's cache
//! manager keys them (DcgmCacheManager::AddOrUpdateWatcher / RemoveWatcher compare the
//! DcgmWatcher, type and connection id, never the group or field group): watching a pair
//! again from the same connection updates that connection's frequency and age, and
//! unwatching it through any group/field group that holds it removes that connection's
//! watcher. The watch samples at the smallest frequency any watcher asked for and keeps the
//! longest age any watcher asked for (DcgmCacheManager::UpdateWatchFromWatchers).
//!
//! With no watcher left a watch stops sampling but keeps its samples: DCGM answers the last
//! one with OK (PrecheckWatchInfoForSamples: "if there is data for an entity, then we can
//! return it"), NOT_WATCHED only where it never had one. Watched again, it samples from
//! then on, without filling the gap.
//!
//! Sampling is lazy: nothing runs between requests. When a watch is read, the samples that
//! the real engine's update thread would have taken since the last read are generated
//! then, on the watch's own grid (first sample at watch time, then every `freq`). So two
//! reads within one interval see the same value and timestamp, and an idle engine costs
//! nothing. A stretch older than the retention is skipped rather than generated.
//!
//! DCGM_FI_DEV_XID_ERRORS is event-driven in DCGM (NVML events, DcgmCacheManager.cpp:7535
//! `RecordXidForGpu`; the update loop skips it, DcgmCacheManager.cpp:13751): its watch has
//! no sample (latest value: NO_DATA) until an XID, then one sample per XID at the XID's
//! time, and nothing in between. Real DCGM 4.6 answers exactly so (tests/it/real_dcgm.rs).

use super::values::{World, FI_BIND_UNBIND, FI_XID};
use crate::proto::{Sample, Value};
use dcgm_sys::fields::FieldMeta;
use std::collections::VecDeque;

/// (entity group, entity id, field id).
pub type Key = (u32, u32, u16);

/// Who asked for a watch: a connection (0 for every embedded client, as DCGM's
/// DCGM_CONNECTION_ID_NONE).
pub type WatcherId = u64;

/// A safety net against unbounded memory: no watch keeps more samples than this, whatever
/// its frequency and age.
pub const MAX_HISTORY: usize = 100_000;

/// One kept sample: 24 bytes, as a number (nearly every field) is stored in place; a
/// string or blob value goes to the watch's `texts` queue, in the same order. (A `Value`
/// inline made it 48 bytes, over twice DCGM's ~21 bytes per sample.)
#[derive(Clone, Copy, Debug)]
struct Stored {
    ts: i64,
    bits: u64,
    status: i32,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Double,
    /// The value is the next one in `texts`.
    Text,
}

pub struct Watch {
    /// (who, frequency µs, retention µs).
    watchers: Vec<(WatcherId, i64, i64)>,
    freq_us: i64,
    age_us: i64,
    event: bool,
    created_us: i64,
    /// Time of the newest periodic sample.
    last_ts: Option<i64>,
    /// How far into `FaultState::xids` (or `bind_events`) this watch has looked.
    xid_cursor: usize,
    samples: VecDeque<Stored>,
    /// The string and blob values of the `Kind::Text` samples, oldest first.
    texts: VecDeque<Value>,
}

/// How long a watch keeps samples: DCGM's `GetMaxAge` (common/DcgmUtilities.cpp:364): the
/// larger of the age asked for and the span of `max_keep_samples` samples plus 10 %, each
/// at least one second. (So `max_keep_samples` is a duration, not a count.)
pub fn retention_us(freq_us: i64, max_keep_age_s: f64, max_keep_samples: i32) -> i64 {
    let age = if max_keep_age_s.is_finite() && max_keep_age_s > 0.0 {
        (max_keep_age_s.min(1e9) * 1e6) as i64
    } else {
        0
    };
    let span = (f64::from(max_keep_samples.max(0)) * freq_us as f64 * 1.1).min(1e15) as i64;
    age.max(1_000_000).max(span.max(1_000_000))
}

impl Watch {
    pub fn new(field: u16, now: i64) -> Watch {
        Watch {
            watchers: Vec::new(),
            freq_us: i64::MAX,
            age_us: 0,
            event: field == FI_XID || field == FI_BIND_UNBIND,
            created_us: now,
            last_ts: None,
            xid_cursor: 0,
            samples: VecDeque::new(),
            texts: VecDeque::new(),
        }
    }

    /// Adds (or updates) a connection's watcher and recomputes frequency and retention. A
    /// watch that had stopped starts again at `now`.
    pub fn add_watcher(&mut self, who: WatcherId, freq_us: i64, age_us: i64, now: i64) {
        if self.watchers.is_empty() {
            self.created_us = now;
            self.last_ts = None;
        }
        self.watchers.retain(|w| w.0 != who);
        self.watchers.push((who, freq_us.max(1), age_us));
        self.recompute();
    }

    /// Removes a connection's watcher. The caller brings the watch up to date first: with
    /// no watcher left it samples no more.
    pub fn remove_watcher(&mut self, who: WatcherId) {
        let before = self.watchers.len();
        self.watchers.retain(|w| w.0 != who);
        if self.watchers.len() != before {
            self.recompute();
        }
    }

    pub fn is_watched(&self) -> bool {
        !self.watchers.is_empty()
    }

    /// Neither watched nor holding a sample: DCGM answers NOT_WATCHED for it, but knows
    /// the pair (an unwatch of it is no error).
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty() && self.samples.is_empty()
    }

    fn recompute(&mut self) {
        self.freq_us = self.watchers.iter().map(|w| w.1).min().unwrap_or(i64::MAX);
        self.age_us = self.watchers.iter().map(|w| w.2).max().unwrap_or(0);
    }

    /// Takes the samples due by `now`.
    pub fn catch_up(&mut self, key: Key, meta: &FieldMeta, world: &World, now: i64) {
        let ent = (key.0, key.1);
        if !self.is_watched() {
            return;
        }
        if self.event {
            if self.last_ts.is_none() {
                if now < self.created_us {
                    return;
                }
                let t = self.created_us;
                self.last_ts = Some(t);
                self.xid_cursor = match meta.id {
                    FI_BIND_UNBIND => world.faults.bind_events.len(),
                    _ => world.faults.xids.len(),
                };
            }
            if meta.id == FI_BIND_UNBIND {
                let new = world
                    .faults
                    .bind_events
                    .get(self.xid_cursor..)
                    .unwrap_or(&[]);
                for &(ts, state) in new {
                    self.push(ts, 0, Value::Int64(state));
                }
                self.xid_cursor = world.faults.bind_events.len();
                if let Some(&(ts, _)) = new.last() {
                    self.trim(ts);
                }
                return;
            }
            let new = world.faults.xids.get(self.xid_cursor..).unwrap_or(&[]);
            let mut newest = None;
            for &(at, ts, xid) in new {
                if ent == at {
                    self.push(ts, 0, Value::Int64(xid));
                    newest = Some(ts);
                }
            }
            self.xid_cursor = world.faults.xids.len();
            if let Some(ts) = newest {
                self.trim(ts);
            }
            return;
        }
        let freq = self.freq_us;
        let mut t = match self.last_ts {
            None => self.created_us,
            Some(last) => last.saturating_add(freq),
        };
        if t > now {
            return;
        }
        // The sample before the first one taken now: the one kept from an earlier watch of
        // the pair (DCGM keeps a time series across an unwatch), else none at all. Only the
        // NVLink rates compare two samples; other fields read events since `t - freq`.
        let mut first = (self.last_ts.is_none()
            && crate::engine::nvlink::sources(meta.id).is_some())
        .then(|| self.samples.back().map_or(t, |s| s.ts));
        // Samples older than the retention would be dropped at once: skip to the ones kept.
        let due = (now - t) / freq + 1;
        let keep = (self.age_us / freq + 2).clamp(1, MAX_HISTORY as i64);
        if due > keep {
            t += (due - keep) * freq;
            first = None;
        }
        // An instance gone with a MIG re-partition keeps its last samples and takes no more.
        // So does every watch of an engine told to stop sampling (`sampling_stop`).
        let exists = world.node.resolve(ent).is_some() && !world.faults.sampling_stopped;
        let mut newest = t;
        while t <= now {
            let prev = first.take().unwrap_or(t - freq);
            if exists {
                let (value, status) = world.read(ent, meta, t, prev);
                self.push(t, status, value);
            }
            newest = t;
            // An interval near i64's µs (`-c` of millennia) has no next sample.
            let Some(next) = t.checked_add(freq) else {
                break;
            };
            t = next;
        }
        self.last_ts = Some(newest);
        if exists {
            self.trim(newest);
        }
    }

    fn push(&mut self, ts: i64, status: i32, value: Value) {
        let (kind, bits) = match value {
            Value::Int64(v) => (Kind::Int, v as u64),
            Value::Double(v) => (Kind::Double, v.to_bits()),
            other => {
                self.texts.push_back(other);
                (Kind::Text, 0)
            }
        };
        self.samples.push_back(Stored {
            ts,
            bits,
            status,
            kind,
        });
    }

    fn pop_front(&mut self) {
        if let Some(s) = self.samples.pop_front() {
            if s.kind == Kind::Text {
                self.texts.pop_front();
            }
        }
    }

    /// Drops what is older than the retention before the newest sample (DCGM trims when it
    /// inserts, so the newest sample always stays).
    fn trim(&mut self, newest: i64) {
        let oldest_kept = newest.saturating_sub(self.age_us);
        while self.samples.len() > 1 && self.samples.front().is_some_and(|s| s.ts < oldest_kept) {
            self.pop_front();
        }
        while self.samples.len() > MAX_HISTORY {
            self.pop_front();
        }
    }

    /// The value of a sample; `text` is its index in `texts` when it is a `Kind::Text`.
    fn value_of(&self, s: &Stored, text: usize) -> Value {
        match s.kind {
            Kind::Int => Value::Int64(s.bits as i64),
            Kind::Double => Value::Double(f64::from_bits(s.bits)),
            Kind::Text => self.texts.get(text).cloned().unwrap_or(Value::Int64(0)),
        }
    }

    pub fn latest(&self, ent: (u32, u32), meta: &FieldMeta) -> Option<Sample> {
        let s = self.samples.back()?;
        let text = self.texts.len().saturating_sub(1);
        Some(to_sample(ent, meta, s, self.value_of(s, text)))
    }

    /// Every kept sample with ts >= since, oldest first.
    pub fn since(&self, ent: (u32, u32), meta: &FieldMeta, since: i64, out: &mut Vec<Sample>) {
        let first = self.samples.partition_point(|s| s.ts < since);
        let mut text = self
            .samples
            .range(..first)
            .filter(|s| s.kind == Kind::Text)
            .count();
        for s in self.samples.range(first..) {
            out.push(to_sample(ent, meta, s, self.value_of(s, text)));
            if s.kind == Kind::Text {
                text += 1;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }
}

fn to_sample(ent: (u32, u32), meta: &FieldMeta, s: &Stored, value: Value) -> Sample {
    Sample {
        entity_group: ent.0,
        entity_id: ent.1,
        field_id: meta.id,
        field_type: meta.field_type,
        status: s.status,
        ts_us: s.ts,
        value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_follows_dcgm_get_max_age() {
        // dcgm-exporter: 30 s, 600 s, 0 samples.
        assert_eq!(retention_us(30_000_000, 600.0, 0), 600_000_000);
        // go-dcgm's helper: 30 s, 0 s, 1 sample -> 33 s.
        assert_eq!(retention_us(30_000_000, 0.0, 1), 33_000_000);
        // Nothing asked: one second.
        assert_eq!(retention_us(100_000, 0.0, 0), 1_000_000);
        assert_eq!(retention_us(1_000_000, 5.0, 10), 11_000_000);
        assert_eq!(retention_us(1_000_000, f64::NAN, -3), 1_000_000);
    }

    #[test]
    fn a_kept_sample_costs_24_bytes_and_mixed_values_come_back_in_order() {
        assert_eq!(std::mem::size_of::<Stored>(), 24);
        let mut w = Watch::new(150, 0);
        w.add_watcher(1, 1_000_000, 3_000_000, 0);
        let values = [
            Value::Str("a".into()),
            Value::Int64(-7),
            Value::Double(2.5),
            Value::Blob(vec![1, 2]),
            Value::Str("b".into()),
            Value::Int64(i64::MIN),
        ];
        for (i, v) in values.iter().enumerate() {
            let ts = i as i64 * 1_000_000;
            w.push(ts, i as i32, v.clone());
            w.trim(ts);
        }
        let meta = dcgm_sys::fields::by_id(150).unwrap();
        // 3 s of retention before the newest (5 s): samples from 2 s on, the first
        // string dropped with its sample.
        let mut out = Vec::new();
        w.since((1, 0), meta, 0, &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|s| (s.ts_us, s.status, s.value.clone()))
            .collect();
        let want: Vec<_> = (2..6)
            .map(|i| (i as i64 * 1_000_000, i as i32, values[i].clone()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(w.texts.len(), 2);
        let mut out = Vec::new();
        w.since((1, 0), meta, 4_000_000, &mut out);
        assert_eq!(out[0].value, Value::Str("b".into()));
        assert_eq!(
            w.latest((1, 0), meta).unwrap().value,
            Value::Int64(i64::MIN)
        );
    }
}
