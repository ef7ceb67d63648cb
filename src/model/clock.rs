//! The page's clock: now on DCGM's timestamp scale (time since the Unix epoch), and how
//! long a page may be served after its oldest sample was taken.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch; zero for a clock set before it.
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Microseconds since the Unix epoch, DCGM's timestamp clock.
pub(crate) fn now_us() -> i64 {
    i64::try_from(since_epoch().as_micros()).unwrap_or(i64::MAX)
}

/// Nanoseconds since the Unix epoch (OTLP's timestamps).
pub(crate) fn now_ns() -> u64 {
    u64::try_from(since_epoch().as_nanos()).unwrap_or(u64::MAX)
}

/// Seconds since the Unix epoch (a Prometheus timestamp gauge).
pub(crate) fn now_secs_f64() -> f64 {
    since_epoch().as_secs_f64()
}

/// The slack on top of an interval for DCGM's sampling and our collection.
pub(crate) const SLACK: Duration = Duration::from_secs(1);

/// The oldest a sample may be while it is served, under collect interval `interval`: one
/// interval for the collection that replaces it to be late, and the slack
/// (`collect::freshness` says the whole promise).
pub(crate) fn max_served_age(interval: Duration) -> Duration {
    interval * 2 + SLACK
}
