//! Where "now" comes from: the wall clock, or a clock tests move by hand.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Microseconds since the Unix epoch.
pub trait Clock: Send {
    fn now_us(&self) -> i64;
}

/// The machine's clock, `offset_us` ahead (a profile's `clock_offset_ms`).
#[derive(Default)]
pub struct WallClock {
    pub offset_us: i64,
}

impl Clock for WallClock {
    fn now_us(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0)
            .saturating_add(self.offset_us)
    }
}

/// A clock tests move by hand; clones share the time.
#[derive(Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_us: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(start_us)))
    }

    pub fn advance_ms(&self, ms: i64) {
        self.advance_us(ms * 1000);
    }

    pub fn advance_us(&self, us: i64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }

    pub fn set_us(&self, us: i64) {
        self.0.store(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
