//! The node's event history: a bounded in-memory log of what happened on the node, each
//! event with its time (DCGM's or NVML's timestamp where it has one, else the exporter's),
//! the entity it happened to (`gpu:0`, `gpu:0/gi:1`, `gpu:0/link:3`, `switch:1`,
//! `engine:embedded`, `node`, `exporter`) and its details. The producers call the functions
//! of [`record`] at the place they log the happening; `/events` (`output/http/events.rs`)
//! serves the history as JSON, `dcgm-exporter events` queries it and the OTLP push sends
//! each event as a log record (`output/otlp/logs.rs`).
//!
//! One history per process ([`global`]): the happenings are spread over collection, the
//! lifecycle and the HTTP stage, on many threads (DCGM workers, one loop per host engine,
//! the web-config watcher), and a handle threaded to each would change every signature on
//! the way for a log line's worth of work. Its bounds are set once at start
//! ([`Recorder::set_bounds`]); the oldest events make room and are counted.

pub(crate) mod record;
mod track;

pub use record::*;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Events kept by default (`--events-max-count`).
pub(crate) const DEFAULT_MAX_EVENTS: usize = 10_000;
/// Bytes the kept events may take by default (`--events-max-bytes`): 4 MiB.
pub(crate) const DEFAULT_MAX_BYTES: usize = 4 << 20;
/// The smallest byte bound: the largest single event (its strings are cut) always fits.
#[cfg(test)]
pub(crate) const MIN_MAX_BYTES: usize = 16 << 10;
/// A message or detail value longer than this is cut (at a character boundary).
const MAX_TEXT: usize = 1024;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Xid,
    HealthAction,
    HealthSystem,
    GpuLost,
    GpuFound,
    GpuUnbound,
    GpuBound,
    EngineDown,
    EngineUp,
    FailoverEngaged,
    FailoverReleased,
    Reload,
    MigChange,
    ProfilingRearm,
    WebConfigRefused,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Xid,
        Kind::HealthAction,
        Kind::HealthSystem,
        Kind::GpuLost,
        Kind::GpuFound,
        Kind::GpuUnbound,
        Kind::GpuBound,
        Kind::EngineDown,
        Kind::EngineUp,
        Kind::FailoverEngaged,
        Kind::FailoverReleased,
        Kind::Reload,
        Kind::MigChange,
        Kind::ProfilingRearm,
        Kind::WebConfigRefused,
    ];

    /// The `type` of the event in JSON, in `/events?type=` and in OTLP.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Xid => "xid",
            Kind::HealthAction => "health_action",
            Kind::HealthSystem => "health_system",
            Kind::GpuLost => "gpu_lost",
            Kind::GpuFound => "gpu_found",
            Kind::GpuUnbound => "gpu_unbound",
            Kind::GpuBound => "gpu_bound",
            Kind::EngineDown => "engine_down",
            Kind::EngineUp => "engine_up",
            Kind::FailoverEngaged => "failover_engaged",
            Kind::FailoverReleased => "failover_released",
            Kind::Reload => "reload",
            Kind::MigChange => "mig_change",
            Kind::ProfilingRearm => "profiling_rearm",
            Kind::WebConfigRefused => "web_config_refused",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// How bad it is (the OTLP record's severity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Whose clock the event's time is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// The DCGM sample's timestamp (XIDs).
    Dcgm,
    /// NVML's.
    Nvml,
    /// When the exporter saw it.
    Exporter,
}

impl TimeSource {
    pub fn name(self) -> &'static str {
        match self {
            TimeSource::Dcgm => "dcgm",
            TimeSource::Nvml => "nvml",
            TimeSource::Exporter => "exporter",
        }
    }
}

/// One detail's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Detail {
    Int(i64),
    Str(String),
}

impl From<i64> for Detail {
    fn from(v: i64) -> Detail {
        Detail::Int(v)
    }
}

impl From<u32> for Detail {
    fn from(v: u32) -> Detail {
        Detail::Int(i64::from(v))
    }
}

impl From<&str> for Detail {
    fn from(v: &str) -> Detail {
        Detail::Str(cut(v))
    }
}

impl From<String> for Detail {
    fn from(v: String) -> Detail {
        Detail::Str(cut(&v))
    }
}

/// One event of the history.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Its place in the order events were recorded, from 1; never reused.
    pub seq: u64,
    /// When it happened, Unix µs, by `source`'s clock.
    pub time_us: i64,
    pub source: TimeSource,
    /// When the exporter recorded it, Unix µs.
    pub recorded_us: i64,
    pub kind: Kind,
    pub severity: Severity,
    pub entity: String,
    /// With several host engines, the engine whose loop saw it.
    pub engine: Option<Arc<str>>,
    pub message: String,
    pub details: Vec<(&'static str, Detail)>,
}

impl Event {
    /// What the event holds, as counted against `--events-max-bytes`.
    pub fn size(&self) -> usize {
        let details: usize = self
            .details
            .iter()
            .map(|(k, v)| {
                k.len()
                    + 16
                    + match v {
                        Detail::Int(_) => 8,
                        Detail::Str(s) => s.len(),
                    }
            })
            .sum();
        std::mem::size_of::<Event>()
            + self.entity.len()
            + self.message.len()
            + self.engine.as_ref().map_or(0, |e| e.len())
            + details
    }

    /// A detail by name.
    #[cfg(test)]
    pub(crate) fn detail(&self, key: &str) -> Option<&Detail> {
        self.details.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The event as `/events` serves it.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let details: serde_json::Map<String, serde_json::Value> = self
            .details
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Detail::Int(i) => serde_json::Value::from(*i),
                    Detail::Str(s) => serde_json::Value::from(s.as_str()),
                };
                (k.to_string(), v)
            })
            .collect();
        let mut o = serde_json::json!({
            "seq": self.seq,
            "time": rfc3339_us(self.time_us),
            "time_source": self.source.name(),
            "recorded": rfc3339_us(self.recorded_us),
            "type": self.kind.name(),
            "severity": self.severity.name(),
            "entity": self.entity,
            "message": self.message,
            "details": details,
        });
        if let Some(e) = &self.engine {
            o["engine"] = serde_json::Value::from(e.as_ref());
        }
        o
    }
}

/// A text cut to [`MAX_TEXT`] bytes at a character boundary.
fn cut(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Unix µs as RFC 3339 in UTC with microseconds: `2026-11-28T10:15:03.123456Z`.
pub fn rfc3339_us(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let whole = crate::logging::utc::Utc::from_unix(secs).rfc3339();
    format!("{}.{frac:06}Z", whole.trim_end_matches('Z'))
}

/// The history's bounds: whichever is reached first drops the oldest events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// 0: no history (nothing is recorded).
    pub max_events: usize,
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_events: DEFAULT_MAX_EVENTS,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    bytes: usize,
    bounds: Bounds,
    next_seq: u64,
}

/// Which events a query wants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Events that happened at or after this (Unix µs).
    pub since_us: Option<i64>,
    /// Entities (an event matches its own entity and those within it: `gpu:0` takes
    /// `gpu:0/gi:1`); empty: every entity.
    pub entities: Vec<String>,
    /// Empty: every type.
    pub kinds: Vec<Kind>,
    /// The newest this many at most.
    pub limit: Option<usize>,
}

impl Filter {
    pub fn matches(&self, e: &Event) -> bool {
        self.since_us.is_none_or(|s| e.time_us >= s)
            && (self.kinds.is_empty() || self.kinds.contains(&e.kind))
            && (self.entities.is_empty() || self.entities.iter().any(|f| within(&e.entity, f)))
    }
}

/// Whether `entity` is `outer` or lies within it.
pub fn within(entity: &str, outer: &str) -> bool {
    entity
        .strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// What a query found, and the history's state.
pub struct Found {
    /// In time order (ties in the order recorded).
    pub events: Vec<Arc<Event>>,
    /// Events dropped from the history since start to keep it in bounds.
    pub dropped: u64,
    pub kept: usize,
    pub bytes: usize,
    pub bounds: Bounds,
}

/// The history.
pub struct Recorder {
    ring: Mutex<Ring>,
    changed: Condvar,
    tracker: Mutex<track::Tracker>,
    recorded: AtomicU64,
    dropped: AtomicU64,
}

impl Recorder {
    pub fn new(bounds: Bounds) -> Recorder {
        Recorder {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                bytes: 0,
                bounds,
                next_seq: 1,
            }),
            changed: Condvar::new(),
            tracker: Mutex::new(track::Tracker::default()),
            recorded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tracker(&self) -> MutexGuard<'_, track::Tracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the bounds, dropping the oldest events that no longer fit.
    pub(crate) fn set_bounds(&self, bounds: Bounds) {
        let mut r = self.lock();
        r.bounds = bounds;
        self.trim(&mut r, 0);
    }

    /// Drops the oldest events until `extra` more bytes and one more event fit (`extra`
    /// 0: until the history is within its bounds).
    fn trim(&self, r: &mut Ring, extra: usize) {
        let one = usize::from(extra > 0);
        while let Some(old) = r.events.front() {
            if r.events.len() + one <= r.bounds.max_events && r.bytes + extra <= r.bounds.max_bytes
            {
                break;
            }
            r.bytes -= old.size();
            r.events.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds `e` (its `seq` and `recorded_us` are set here); the oldest events make room.
    pub fn push(&self, mut e: Event) {
        let mut r = self.lock();
        if r.bounds.max_events == 0 {
            return;
        }
        e.seq = r.next_seq;
        r.next_seq += 1;
        let size = e.size();
        self.trim(&mut r, size);
        r.bytes += size;
        r.events.push_back(Arc::new(e));
        self.recorded.fetch_add(1, Ordering::Relaxed);
        drop(r);
        self.changed.notify_all();
    }

    /// The events `f` wants.
    pub fn query(&self, f: &Filter) -> Found {
        let r = self.lock();
        let mut events: Vec<Arc<Event>> =
            r.events.iter().filter(|e| f.matches(e)).cloned().collect();
        let (kept, bytes, bounds) = (r.events.len(), r.bytes, r.bounds);
        drop(r);
        events.sort_by_key(|e| (e.time_us, e.seq));
        if let Some(n) = f.limit {
            let skip = events.len().saturating_sub(n);
            events.drain(..skip);
        }
        Found {
            events,
            dropped: self.dropped(),
            kept,
            bytes,
            bounds,
        }
    }

    /// Up to `max` events recorded after `seq`, in the order recorded, and how many
    /// recorded after `seq` were dropped before they could be read.
    pub fn after(&self, seq: u64, max: usize) -> (Vec<Arc<Event>>, u64) {
        let r = self.lock();
        let first = r.events.front().map_or(r.next_seq, |e| e.seq);
        let missed = first.saturating_sub(seq.saturating_add(1));
        // Sequence numbers are consecutive in the ring: the first event after `seq` is found
        // by its number, not by a walk over the whole history under the lock that every
        // producer takes (10 million events at the flags' maximum).
        let skip = usize::try_from(seq.saturating_add(1).saturating_sub(first))
            .map_or(r.events.len(), |s| s.min(r.events.len()));
        let out = r.events.range(skip..).take(max).cloned().collect();
        (out, missed)
    }

    /// Waits until an event after `seq` is recorded, [`Recorder::wake`] is called or
    /// `timeout` passes; not at all when `done` holds. `done` is asked under the lock that
    /// `wake` takes, so a waker that changes what `done` reads before waking is never
    /// missed between the caller's own check and the wait.
    pub(crate) fn wait_after(&self, seq: u64, timeout: Duration, done: impl Fn() -> bool) {
        let r = self.lock();
        if r.next_seq > seq + 1 || done() {
            return;
        }
        let _ = self.changed.wait_timeout(r, timeout);
    }

    /// Wakes every [`Recorder::wait_after`].
    pub(crate) fn wake(&self) {
        let _r = self.lock();
        self.changed.notify_all();
    }

    /// Events recorded since start.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Events dropped since start to keep the history within its bounds.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The process's history.
pub fn global() -> &'static Recorder {
    static G: OnceLock<Recorder> = OnceLock::new();
    G.get_or_init(|| Recorder::new(Bounds::default()))
}

/// `dcgm_exporter_events_recorded_total` and `dcgm_exporter_events_dropped_total`, read
/// from the process's history at each scrape.
pub fn collectors() -> Vec<Box<dyn prometheus::core::Collector>> {
    vec![Box::new(Counts)]
}

struct Counts;

impl prometheus::core::Collector for Counts {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        counts_descs().iter().collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let counter = |name: &str, help: &str, v: u64| {
            let c = prometheus::IntCounter::new(name, help).expect("a valid metric");
            c.inc_by(v);
            prometheus::core::Collector::collect(&c)
        };
        let g = global();
        let (r, d) = COUNTS_HELP;
        [
            counter(&counts_name(r.0), r.1, g.recorded()),
            counter(&counts_name(d.0), d.1, g.dropped()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

type Help = (&'static str, &'static str);
const COUNTS_HELP: (Help, Help) = (
    (
        "events_recorded_total",
        "Events recorded in the event history (/events) since start.",
    ),
    (
        "events_dropped_total",
        "Oldest events dropped from the event history to keep it within \
         --events-max-count and --events-max-bytes.",
    ),
);

fn counts_name(n: &str) -> String {
    format!("{}{n}", crate::model::naming::PREFIX)
}

fn counts_descs() -> &'static [prometheus::core::Desc] {
    static D: OnceLock<Vec<prometheus::core::Desc>> = OnceLock::new();
    D.get_or_init(|| {
        let (r, d) = COUNTS_HELP;
        [r, d]
            .into_iter()
            .map(|(n, h)| {
                prometheus::core::Desc::new(
                    counts_name(n),
                    h.into(),
                    Vec::new(),
                    Default::default(),
                )
                .expect("a valid metric")
            })
            .collect()
    })
}

#[cfg(test)]
mod tests;
