//! How old a DCGM sample may be and still be served.
//!
//! Promise: no series is served whose DCGM timestamp is older than its field's watch
//! interval + the collect interval + 1 s. A field's watch interval is the collect interval
//! (`-c`), or that of the config file's watch group (`collections[].every`,
//! `watchGroups[].interval`) that takes it. Two checks keep it:
//! * at collection, a sample older than its field's watch interval + 1 s is dropped (a
//!   watched field is re-sampled every watch interval, so an older one means the engine
//!   stopped sampling it); a field watched every 5 s under `-c 1000` is served on every
//!   scrape, its sample up to 6 s old;
//! * the page then carries the time of its oldest sample (a field watched at another
//!   interval than `-c` counted as if taken that difference later), and the server stops
//!   serving it once that sample is 2 x the collect interval + 1 s old
//!   (`model::clock::max_served_age`, applied by `output::published::Shared::page`),
//!   whatever the collection loop is doing.
//!
//! Event-driven fields are the exception: DCGM stores a sample of
//! `DCGM_FI_DEV_XID_ERRORS` only when an XID happens (checked against DCGM 4.6: with no
//! event the field answers NO_DATA with timestamp 0; after one, the latest sample keeps the
//! event's time for as long as no other XID occurs). An old sample of such a field is the
//! current truth ("the last XID was 13"), so its age is not checked; it is as fresh as the
//! collection that read it, provided the entity is alive: DCGM keeps the last event of a
//! GPU that fell off the bus while its polled fields turn blank, so an event field is
//! served only for an entity with at least one fresh polled value in the same collection
//! (or with no polled field watched at all).

use super::fields;
use super::ReadingHash;
use crate::model::clock::SLACK;
use dcgm_sys::{Entity, FieldReading, Reading};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Fields DCGM updates on events rather than by polling.
pub(crate) fn event_driven(field: u16) -> bool {
    field == fields::XID_ERRORS
}

/// The oldest a sample may be when a collection reads it.
pub(crate) fn max_read_age(interval: Duration) -> Duration {
    interval + SLACK
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn cutoff(now_us: i64, interval: Duration) -> i64 {
    now_us.saturating_sub(micros(max_read_age(interval)))
}

/// Sample ages seen by one collection.
#[derive(Clone, Debug)]
pub(crate) struct Freshness {
    now_us: i64,
    interval: Duration,
    /// The fields watched at another interval than the collect interval, with theirs.
    own: HashMap<u16, Duration, ReadingHash>,
    cutoff_us: i64,
    oldest_us: i64,
    /// Entities with a fresh polled value in the readings seen so far.
    live: HashSet<Entity, ReadingHash>,
    /// Entities with a polled field watched.
    polled: HashSet<Entity, ReadingHash>,
    /// Whether any polled reading (a value or a blank) was taken recently.
    sampled: bool,
}

impl Freshness {
    /// `now_us`: when the collection started (microseconds since the Unix epoch, DCGM's
    /// timestamp clock). Values that are not samples (XID and clock-event window counts,
    /// health, P2P) are as of this time.
    pub(crate) fn new(now_us: i64, interval: Duration) -> Freshness {
        Freshness {
            now_us,
            interval,
            own: HashMap::default(),
            cutoff_us: cutoff(now_us, interval),
            oldest_us: now_us,
            live: HashSet::default(),
            polled: HashSet::default(),
            sampled: false,
        }
    }

    /// The fields a watch group samples at its own interval (others: the collect interval).
    pub(crate) fn with_field_intervals(
        mut self,
        own: HashMap<u16, Duration, ReadingHash>,
    ) -> Freshness {
        self.own = own;
        self
    }

    fn interval_of(&self, field: u16) -> Duration {
        self.own.get(&field).copied().unwrap_or(self.interval)
    }

    fn cutoff_of(&self, field: u16) -> i64 {
        match self.own.get(&field) {
            Some(&i) => cutoff(self.now_us, i),
            None => self.cutoff_us,
        }
    }

    /// Learns which entities are alive from one batch of readings (before `admit`).
    pub(crate) fn observe(&mut self, readings: &[FieldReading]) {
        for r in readings.iter().filter(|r| !event_driven(r.field_id)) {
            self.polled.insert(r.entity);
            let recent = r.ts_us >= self.cutoff_of(r.field_id);
            self.sampled |= recent && !matches!(r.reading, Reading::Error(_));
            if matches!(r.reading, Reading::Value(_)) && recent {
                self.live.insert(r.entity);
            }
        }
    }

    /// True when a sample of `field` of `entity` taken at `ts_us` may go on the page;
    /// remembers the oldest one admitted.
    pub(crate) fn admit(&mut self, entity: Entity, field: u16, ts_us: i64) -> bool {
        if event_driven(field) {
            return self.live.contains(&entity) || !self.polled.contains(&entity);
        }
        if ts_us < self.cutoff_of(field) {
            return false;
        }
        // Served until its own interval + the collect interval + slack have passed: as a
        // sample of the collect interval taken (own - collect) later.
        let own = micros(self.interval_of(field));
        let shifted = ts_us
            .saturating_add(own)
            .saturating_sub(micros(self.interval));
        self.oldest_us = self.oldest_us.min(shifted);
        true
    }

    /// The timestamp of the oldest value admitted (the collection's start if none was older).
    pub(crate) fn oldest_us(&self) -> i64 {
        self.oldest_us
    }

    /// True when polled fields are watched yet none of their readings is recent: DCGM has
    /// stopped sampling them (e.g. their watches were removed), and every value is dropped
    /// as stale. `/health` turns this into an outage once it lasts (`output::published`).
    pub(crate) fn stalled(&self) -> bool {
        !self.polled.is_empty() && !self.sampled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::clock::max_served_age;

    use dcgm_sys::{EntityGroup, Sentinel, Value};

    const NOW: i64 = 1_700_000_000_000_000;
    const S: i64 = 1_000_000;
    const TEMP: u16 = 150;

    fn gpu(id: u32) -> Entity {
        Entity::new(EntityGroup::Gpu, id)
    }

    fn reading(id: u32, field_id: u16, ts_us: i64, reading: Reading) -> FieldReading {
        FieldReading {
            entity: gpu(id),
            field_id,
            ts_us,
            reading,
        }
    }

    #[test]
    fn samples_older_than_one_interval_plus_a_second_are_refused() {
        let mut f = Freshness::new(NOW, Duration::from_secs(30));
        assert!(f.admit(gpu(0), TEMP, NOW - 31 * S));
        assert!(!f.admit(gpu(0), TEMP, NOW - 31 * S - 1));
        assert_eq!(f.oldest_us(), NOW - 31 * S);
    }

    #[test]
    fn an_old_xid_event_of_a_live_gpu_is_still_the_current_value() {
        let mut f = Freshness::new(NOW, Duration::from_millis(500));
        let xid = Reading::Value(Value::Int64(13));
        f.observe(&[
            reading(0, TEMP, NOW - S / 10, Reading::Value(Value::Int64(40))),
            reading(0, fields::XID_ERRORS, NOW - 3600 * S, xid),
        ]);
        assert!(f.admit(gpu(0), fields::XID_ERRORS, NOW - 3600 * S));
        // It does not make the page expire early either.
        assert_eq!(f.oldest_us(), NOW);
    }

    #[test]
    fn the_last_xid_of_a_gpu_whose_polled_fields_went_blank_is_not_served() {
        let mut f = Freshness::new(NOW, Duration::from_millis(500));
        f.observe(&[
            reading(0, TEMP, NOW, Reading::Sentinel(Sentinel::Blank)),
            reading(1, TEMP, NOW - 5 * S, Reading::Value(Value::Int64(40))),
        ]);
        assert!(!f.admit(gpu(0), fields::XID_ERRORS, NOW - 10 * S));
        assert!(!f.admit(gpu(1), fields::XID_ERRORS, NOW - 10 * S));
        // With nothing polled to tell, the event stands.
        assert!(f.admit(gpu(2), fields::XID_ERRORS, NOW - 10 * S));
    }

    /// A watch group slower than the collect interval (`every: 5s` under `every: 1s`): its
    /// samples are fresh for 5 s + slack, the other fields' for 1 s + slack; the page is
    /// served as long as the slow sample is within its own bound.
    #[test]
    fn each_field_is_fresh_for_its_own_watch_interval() {
        const POWER: u16 = 155;
        let f = || {
            Freshness::new(NOW, Duration::from_secs(1))
                .with_field_intervals([(POWER, Duration::from_secs(5))].into_iter().collect())
        };
        let mut a = f();
        assert!(a.admit(gpu(0), POWER, NOW - 5 * S));
        assert!(a.admit(gpu(0), POWER, NOW - 6 * S));
        assert!(!a.admit(gpu(0), POWER, NOW - 6 * S - 1));
        assert!(!a.admit(gpu(0), TEMP, NOW - 2 * S - 1));
        // Served until 5 s + 1 s + 1 s after it was taken: as a 1 s sample taken 4 s later.
        assert_eq!(a.oldest_us(), NOW - 6 * S + 4 * S);
        let served_until =
            a.oldest_us() + max_served_age(Duration::from_secs(1)).as_micros() as i64;
        assert_eq!(served_until, NOW - 6 * S + 7 * S);
        // A slow field's sample keeps its entity alive for its XIDs.
        let mut b = f();
        b.observe(&[reading(
            0,
            POWER,
            NOW - 4 * S,
            Reading::Value(Value::Int64(300)),
        )]);
        assert!(b.admit(gpu(0), fields::XID_ERRORS, NOW - 100 * S));
    }

    #[test]
    fn a_watch_set_whose_samples_all_froze_is_stalled_and_one_recent_blank_is_not() {
        let interval = Duration::from_secs(1);
        let frozen = |id| reading(id, TEMP, NOW - 5 * S, Reading::Value(Value::Int64(40)));
        let mut f = Freshness::new(NOW, interval);
        f.observe(&[frozen(0), frozen(1)]);
        assert!(f.stalled());
        // An XID event alone says nothing about sampling.
        let mut f = Freshness::new(NOW, interval);
        let xid = reading(0, fields::XID_ERRORS, NOW, Reading::Value(Value::Int64(13)));
        f.observe(&[frozen(0), xid]);
        assert!(f.stalled());
        // A field the driver has no value for is still sampled.
        let mut f = Freshness::new(NOW, interval);
        f.observe(&[
            frozen(0),
            reading(1, TEMP, NOW, Reading::Sentinel(Sentinel::Blank)),
        ]);
        assert!(!f.stalled());
        // Nothing polled is watched: nothing to stall.
        assert!(!Freshness::new(NOW, interval).stalled());
    }

    #[test]
    fn served_age_is_two_intervals_and_a_second() {
        assert_eq!(
            max_served_age(Duration::from_millis(100)),
            Duration::from_millis(1200)
        );
    }
}
