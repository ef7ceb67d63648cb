//! Sub-interval aggregation (`--aggregate`, `--aggregate-period`, `aggregate:` in the
//! configuration file): an opted-in field is sampled faster than the collection interval,
//! and each collection adds, beside its usual series, the minimum, maximum and mean of the
//! field's samples taken since the previous collection and how many they were, in four
//! families of their own (`model::Stat`: `<row>_interval_min`, `_interval_max`,
//! `_interval_mean`, `_interval_samples`), with the row's labels.
//!
//! On DCGM ([`Dcgm`]) the field is watched every `period` and every sample since the last
//! read is read back (`dcgmGetValuesSince_v2`), never only the latest; on NVML
//! (`collect::nvml::samples`) the driver's own sample buffer (`nvmlDeviceGetSamples`) is read
//! where NVML keeps one for the field. Samples are kept apart per (entity, field) and per
//! collector: a rebuild (reload, MIG change, reconnect) or a failover starts a new collector
//! whose first window begins when it was built (on the engine's clock: after the newest
//! sample it holds then), so a window never holds samples of two entities or two sources.
//! Blank samples (DCGM's sentinels, a non-OK status, NVML's refusals) and non-finite
//! numbers never count; a window without a sample adds no series.

use crate::config::counters::{Counter, CounterField, Counters};
use crate::config::file::field_matches;
use crate::model::naming::PromType;
use crate::model::{Page, Stat};
use dcgm_sys::Entity;
use std::collections::HashMap;

/// The fastest sampling asked of DCGM for an aggregated field.
pub(crate) const MIN_PERIOD_MS: u64 = 100;

/// Fields whose samples are read back in full, never aggregated: event-driven fields
/// (DCGM_FI_DEV_XID_ERRORS, DCGM_FI_BIND_UNBIND_EVENT) have no periodic samples.
const EVENT_FIELDS: [u16; 2] = [230, 6];

/// What is aggregated and how fast it is sampled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// Globs over DCGM field names and aliases (as the watch groups'), or field ids.
    pub fields: Vec<String>,
    /// How often DCGM samples an aggregated field (ms); 0 when nothing is aggregated.
    pub period_ms: u64,
}

impl Options {
    /// From `--aggregate` (comma-separated) and `--aggregate-period` (a Go duration), for a
    /// collection every `interval_ms`. Each pattern must name a DCGM field; the period is
    /// at least [`MIN_PERIOD_MS`] and below the interval.
    pub(crate) fn from_flags(
        fields: &str,
        period: &str,
        interval_ms: u64,
    ) -> Result<Options, String> {
        let fields: Vec<String> = fields
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect();
        if fields.is_empty() {
            return Ok(Options::default());
        }
        for f in &fields {
            if !dcgm_sys::fields::FIELDS
                .iter()
                .any(|m| pattern_matches(f, m.id))
            {
                return Err(format!("--aggregate: {f} names no DCGM field"));
            }
        }
        let d = crate::config::duration::parse(period)
            .map_err(|e| format!("--aggregate-period: {e}"))?;
        let period_ms = d.as_millis() as u64;
        if d.subsec_nanos() % 1_000_000 != 0 {
            return Err(format!(
                "--aggregate-period: {period} is not a whole number of milliseconds"
            ));
        }
        if period_ms < MIN_PERIOD_MS {
            return Err(format!(
                "--aggregate-period: {period} is below the {MIN_PERIOD_MS}ms DCGM samples at most"
            ));
        }
        if period_ms >= interval_ms {
            return Err(format!(
                "--aggregate-period: {period} is not below the collection interval ({interval_ms} ms, -c): it would aggregate one sample"
            ));
        }
        Ok(Options { fields, period_ms })
    }

    /// Whether any field is aggregated.
    pub(crate) fn is_on(&self) -> bool {
        !self.fields.is_empty()
    }

    /// Whether `field` is aggregated.
    pub fn matches(&self, field: u16) -> bool {
        !EVENT_FIELDS.contains(&field) && self.fields.iter().any(|p| pattern_matches(p, field))
    }

    /// The watch interval of `field`: an aggregated one is sampled every period, unless its
    /// own (`own_ms`, a watch group's) is faster already.
    pub fn interval_ms(&self, field: u16, own_ms: u64) -> u64 {
        if self.matches(field) {
            own_ms.min(self.period_ms)
        } else {
            own_ms
        }
    }

    /// The retention of `field` (maxKeepAge s, maxKeepSamples): an aggregated one keeps at
    /// least two collection intervals of samples, so a late collection still finds every
    /// sample since the one before.
    pub fn retention(&self, field: u16, own: (f64, i32), interval_ms: u64) -> (f64, i32) {
        if self.matches(field) {
            (own.0.max(2.0 * interval_ms as f64 / 1000.0), own.1)
        } else {
            own
        }
    }
}

/// A pattern of `--aggregate`: a field id, or a glob over the field's names.
fn pattern_matches(pattern: &str, field: u16) -> bool {
    match pattern.parse::<u16>() {
        Ok(id) => id == field,
        Err(_) => field_matches(pattern, field),
    }
}

/// Each (entity, field)'s samples in one window.
pub(crate) type Windows = HashMap<(Entity, u16), Acc, super::ReadingHash>;

/// The samples of one (entity, field) in one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Acc {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Default for Acc {
    fn default() -> Acc {
        Acc {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Acc {
    /// Counts one sample; a non-finite one (NaN, an infinity) is no measurement.
    pub(crate) fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub(crate) fn mean(&self) -> f64 {
        self.sum / self.count as f64
    }
}

/// An aggregated CSV row: its index in `Counters::all`, its field, and its four families'
/// names and help (made once, not per series).
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub index: usize,
    pub field: u16,
    names: [String; 4],
    helps: [String; 4],
}

impl Row {
    fn new(index: usize, field: u16, c: &Counter) -> Row {
        let what = |s: Stat| {
            match s {
            Stat::Min => "the minimum of its samples since the previous collection",
            Stat::Max => "the maximum of its samples since the previous collection",
            Stat::Mean => "the mean of its samples since the previous collection",
            Stat::Samples => "how many samples since the previous collection the _interval_min, _interval_max and _interval_mean series are of",
        }
        };
        Row {
            index,
            field,
            names: Stat::ALL.map(|s| format!("{}{}", c.name, s.suffix())),
            helps: Stat::ALL.map(|s| {
                format!(
                    "{} (sub-interval aggregation: {})",
                    c.help.trim_end(),
                    what(s)
                )
            }),
        }
    }

    /// Adds the row's four series for each target that has samples, in family order.
    /// `windows` gives a target's samples (already converted to the row's field). The four
    /// series of a target share its labels (`Page::add_alike`): stored, hashed and rendered
    /// once, where four series of their own cost more than aggregating their samples.
    pub(crate) fn add_to(
        &self,
        c: &Counter,
        targets: &[(Entity, Vec<(&str, &str)>)],
        windows: &Windows,
        page: &mut Page,
    ) {
        let mut families = [None; 4];
        let mut any = false;
        let convert = |v: f64| crate::config::rename::value_of(c, self.field, v);
        for (entity, labels) in targets {
            let Some(acc) = windows.get(&(*entity, self.field)).filter(|a| a.count > 0) else {
                continue;
            };
            if !any {
                // Made on the first series, as `Page::add` makes a family.
                for (i, f) in families.iter_mut().enumerate() {
                    *f = page.family_id(&self.names[i], &self.helps[i], PromType::Gauge);
                }
                any = true;
            }
            let values = Stat::ALL.map(|stat| match stat {
                Stat::Min => convert(acc.min),
                Stat::Max => convert(acc.max),
                Stat::Mean => convert(acc.mean()),
                Stat::Samples => acc.count as f64,
            });
            page.add_alike(&families, labels, &values);
        }
        for (name, stat) in self.names.iter().zip(Stat::ALL) {
            page.set_stat(name, stat);
        }
    }
}

/// The rows of `rows` (indices into `Counters::all`) that are aggregated: gauge rows of a
/// numeric DCGM field `options` matches; each other row of a matched field is named once
/// at start with why it is not aggregated.
pub(crate) fn rows(options: &Options, counters: &Counters, rows: &[usize]) -> Vec<Row> {
    let mut out = Vec::new();
    for &i in rows {
        let c = &counters.all[i];
        let CounterField::Dcgm(meta) = &c.field else {
            continue;
        };
        if !options.matches(meta.id) {
            continue;
        }
        let numeric = matches!(meta.field_type, b'i' | b'd');
        match c.prom_type {
            PromType::Gauge if numeric => out.push(Row::new(i, meta.id, c)),
            _ => tracing::warn!(
                "not aggregating {}: only gauges of numbers are (--aggregate)",
                c.name
            ),
        }
    }
    out
}

/// Says once at start which `--aggregate` patterns match no row collected here.
pub(crate) fn warn_unmatched(options: &Options, counters: &Counters, aggregated: &[&Row]) {
    for p in &options.fields {
        let hit = aggregated.iter().any(|r| pattern_matches(p, r.field));
        if !hit {
            let in_csv = counters
                .all
                .iter()
                .any(|c| matches!(&c.field, CounterField::Dcgm(m) if pattern_matches(p, m.id)));
            let why = if in_csv {
                "no gauge row of it is collected here"
            } else {
                "no row of the counters reads it"
            };
            tracing::warn!("--aggregate {p}: {why}; nothing aggregated for it");
        }
    }
}

/// Missed collections (a read that failed, or left for later) a window makes up for by
/// holding their samples too: one, as two intervals is the least retention asked of DCGM
/// for an aggregated field. After more, a window holds its own interval alone. The NVML
/// side and the OTLP push's window starts follow the same number.
pub(crate) const MADE_UP_FOR: u32 = 1;

/// The DCGM side: where each watch holding an aggregated field is read from next.
pub(crate) struct Dcgm {
    /// Per watch set (in the collector's order), its aggregated rows.
    rows: Vec<Vec<Row>>,
    cursors: Vec<Cursor>,
}

/// One watch (`ActiveSet::watches[watch]` of set `set`) read back with
/// `dcgmGetValuesSince_v2`: the newest sample read of each (entity, field) it holds.
struct Cursor {
    set: usize,
    watch: usize,
    /// Its aggregated fields.
    fields: Vec<u16>,
    last: HashMap<(Entity, u16), i64, super::ReadingHash>,
    /// Before the first read: the collector's build on DCGM's clock (µs): the newest
    /// sample DCGM held then (`Cursor::start_after`); samples before it are another
    /// collector's.
    start_us: i64,
    /// Two collection intervals (µs): how far behind its newest pair a pair that has gone
    /// quiet (a lost GPU) may hold a read back.
    span_us: i64,
    /// Collections in a row whose samples were not counted (a read that failed, or left
    /// for the next window): one is made up for by the next window, which DCGM's retention
    /// of two intervals still holds; after more the next window is its last interval alone.
    missed: u32,
}

impl Cursor {
    /// Where the next `dcgmGetValuesSince_v2` starts: after the oldest pair's newest
    /// sample (each pair is filtered again), at most two intervals before the newest.
    fn since(&self, pairs: usize) -> i64 {
        let newest = self.last.values().copied().max().unwrap_or(self.start_us);
        let oldest = if self.last.len() < pairs {
            self.start_us
        } else {
            self.last.values().copied().min().unwrap_or(self.start_us)
        };
        oldest
            .max(newest.saturating_sub(self.span_us))
            .max(self.start_us)
            .saturating_add(1)
    }

    /// Starts each pair after the newest sample DCGM holds of it at the build (`latest`,
    /// as `dcgmEntitiesGetLatestValues` answers), and pairs with none (and the first read)
    /// after the oldest of those: positions on DCGM's clock, which a remote engine's may
    /// not share with ours. Without any (none sampled yet, or the read refused) the
    /// exporter's clock stands in.
    fn start_after(&mut self, latest: &[dcgm_sys::FieldReading]) {
        for r in latest {
            if r.ts_us > 0 && self.fields.contains(&r.field_id) {
                let at = self.last.entry((r.entity, r.field_id)).or_insert(r.ts_us);
                *at = (*at).max(r.ts_us);
            }
        }
        if let Some(&oldest) = self.last.values().min() {
            self.start_us = oldest;
        }
    }

    /// Counts each new numeric sample of an aggregated field into its window. DCGM answers
    /// pair by pair ((entity, field), oldest first), so each run of one pair's samples is
    /// looked up once: a lookup per sample cost more than aggregating the sample. After
    /// more than one missed collection only the last interval's samples (on DCGM's clock,
    /// before the newest read) count: the window says it began at the previous collection.
    fn take(&mut self, samples: &[dcgm_sys::FieldReading], windows: &mut Windows) {
        use dcgm_sys::{Reading, Value};
        let floor = match self.missed {
            0..=MADE_UP_FOR => i64::MIN,
            _ => samples
                .iter()
                .map(|s| s.ts_us)
                .max()
                .map_or(i64::MIN, |newest| newest.saturating_sub(self.span_us / 2)),
        };
        self.missed = 0;
        let pair = |s: &dcgm_sys::FieldReading| (s.entity, s.field_id);
        for run in samples.chunk_by(|a, b| pair(a) == pair(b)) {
            let key = pair(&run[0]);
            if !self.fields.contains(&key.1) {
                continue;
            }
            let before = self.last.get(&key).copied().unwrap_or(self.start_us);
            let mut last = before;
            let acc = windows.entry(key).or_default();
            for s in run {
                if s.ts_us <= last {
                    continue;
                }
                last = s.ts_us;
                if s.ts_us <= floor {
                    continue;
                }
                match &s.reading {
                    Reading::Value(Value::Int64(i)) => acc.add(*i as f64),
                    Reading::Value(Value::Double(d)) => acc.add(*d),
                    // Sentinels, a non-OK status, text: no measurement.
                    _ => {}
                }
            }
            if last != before {
                self.last.insert(key, last);
            }
        }
    }
}

impl Dcgm {
    /// The aggregated rows of each watch set, and the watches holding their fields, each
    /// pair read from after the newest sample DCGM holds of it now.
    pub(super) fn new(
        session: &dcgm_sys::Session,
        settings: &super::Settings,
        sets: &[super::ActiveSet],
        counters: &Counters,
    ) -> Dcgm {
        let (options, interval_ms) = (&settings.aggregate, settings.interval_ms);
        let start_us = crate::model::clock::now_us();
        let rows: Vec<Vec<Row>> = sets
            .iter()
            .map(|a| {
                if options.is_on() {
                    self::rows(options, counters, &a.value_rows)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let mut cursors = Vec::new();
        for (set, (active, rows)) in sets.iter().zip(&rows).enumerate() {
            for (watch, w) in active.watches.iter().enumerate() {
                let mut fields: Vec<u16> = w
                    .fields
                    .fields()
                    .iter()
                    .copied()
                    .filter(|f| rows.iter().any(|r| r.field == *f))
                    .collect();
                fields.dedup();
                if fields.is_empty() {
                    continue;
                }
                let latest = session.latest_values(w.group.entities(), &fields, false);
                let mut cursor = Cursor {
                    set,
                    watch,
                    fields,
                    last: HashMap::default(),
                    start_us,
                    // Saturating: `-c` may be as long as i64 µs allow.
                    span_us: i64::try_from(interval_ms)
                        .unwrap_or(i64::MAX)
                        .saturating_mul(2000),
                    missed: 0,
                };
                match latest {
                    Ok(latest) => cursor.start_after(&latest),
                    Err(e) => tracing::debug!(
                        "aggregation: no latest values at the build ({e}): windows start on the exporter's clock"
                    ),
                }
                cursors.push(cursor);
            }
        }
        if options.is_on() {
            let all: Vec<&Row> = rows.iter().flatten().collect();
            warn_unmatched(options, counters, &all);
        }
        Dcgm { rows, cursors }
    }

    /// Reads every aggregated watch's samples since the last read and adds the rows'
    /// series. A watch DCGM refuses to read back costs only its own aggregates (counted
    /// under `source`), and a watch of a set whose values were not read is not read either:
    /// their samples go to the next window. A lost session is the collection's error.
    pub(super) fn collect(
        &mut self,
        session: &dcgm_sys::Session,
        sets: &[super::ActiveSet],
        counters: &Counters,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        failures: &mut super::Failures,
        page: &mut Page,
    ) -> dcgm_sys::Result<()> {
        if self.cursors.is_empty() {
            return Ok(());
        }
        let source = "sub-interval samples";
        let mut windows = Windows::default();
        let mut failed = false;
        for c in &mut self.cursors {
            // The set's own read failed: its targets get no series this time, so their
            // samples are left to the next window rather than read and dropped (as often
            // as a window makes up for; then they are read and dropped, so that no window
            // holds more than DCGM's retention holds).
            let targets = &sets[c.set].set.targets;
            let served = targets.iter().any(|t| csv_labels.contains_key(&t.entity));
            if !served && c.missed < MADE_UP_FOR {
                c.missed += 1;
                continue;
            }
            let w = &sets[c.set].watches[c.watch];
            let pairs = w.group.entities().len() * c.fields.len();
            match session.values_since(&w.group, &w.fields, c.since(pairs)) {
                Ok((samples, _)) => c.take(&samples, &mut windows),
                Err(e) if super::failures::is_fatal(&e) => return Err(e),
                Err(e) => {
                    c.missed += 1;
                    failures.failed(source, &e, page);
                    failed = true;
                }
            }
        }
        if !failed {
            failures.ok(source);
        }
        for (active, rows) in sets.iter().zip(&self.rows) {
            if rows.is_empty() {
                continue;
            }
            let targets: Vec<(Entity, Vec<(&str, &str)>)> = active
                .set
                .targets
                .iter()
                // A target whose values were not read this time (its set's read failed)
                // has no labels to match its series with: none of its aggregates either.
                .filter(|t| csv_labels.contains_key(&t.entity))
                .map(|t| (t.entity, t.labels_with(csv_labels)))
                .collect();
            for r in rows {
                r.add_to(&counters.all[r.index], &targets, &windows, page);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dcgm_sys::{FieldReading, Reading, Sentinel, Value};

    #[test]
    fn flags_name_fields_and_bound_the_period() {
        let o = Options::from_flags(
            "DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_GPU_TEMP,100",
            "100ms",
            30_000,
        )
        .unwrap();
        assert_eq!(o.period_ms, 100);
        assert!(o.matches(155) && o.matches(150) && o.matches(100));
        assert!(!o.matches(101));
        assert_eq!(o.interval_ms(155, 30_000), 100);
        assert_eq!(o.interval_ms(155, 50), 50);
        assert_eq!(o.interval_ms(101, 30_000), 30_000);
        assert_eq!(o.retention(155, (0.0, 4), 30_000), (60.0, 4));
        assert_eq!(o.retention(101, (0.0, 4), 30_000), (0.0, 4));
        // Off: nothing matches, the period is not even read.
        let off = Options::from_flags("", "nonsense", 1000).unwrap();
        assert!(!off.is_on() && !off.matches(155));
        for (fields, period, interval, needle) in [
            ("DCGM_FI_DEV_NO_SUCH", "1s", 30_000, "names no DCGM field"),
            ("155", "50ms", 30_000, "below the 100ms"),
            ("155", "1s", 1000, "not below the collection interval"),
            ("155", "1.5ms", 30_000, "whole number"),
            ("155", "soon", 30_000, "not a duration"),
        ] {
            let e = Options::from_flags(fields, period, interval).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
        // XIDs are events, never sampled periodically.
        let x = Options::from_flags("DCGM_FI_DEV_XID_ERRORS", "1s", 30_000).unwrap();
        assert!(!x.matches(230));
    }

    /// A cursor over DCGM_FI_DEV_POWER_USAGE alone, nothing read yet.
    fn power_cursor(start_us: i64, span_us: i64, missed: u32) -> Cursor {
        Cursor {
            set: 0,
            watch: 0,
            fields: vec![155],
            last: HashMap::default(),
            start_us,
            span_us,
            missed,
        }
    }

    #[test]
    fn windows_skip_blanks_and_keep_entities_apart() {
        let mut acc = Acc::default();
        for v in [3.0, f64::NAN, 1.0, 8.0, f64::INFINITY] {
            acc.add(v);
        }
        assert_eq!(
            (acc.count, acc.min, acc.max, acc.mean()),
            (3, 1.0, 8.0, 4.0)
        );

        let (a, b) = (Entity::gpu(0), Entity::gpu(1));
        let s = |e: Entity, ts: i64, r: Reading| FieldReading {
            entity: e,
            field_id: 155,
            ts_us: ts,
            reading: r,
        };
        let mut c = power_cursor(1000, 10_000, 0);
        assert_eq!(c.since(2), 1001);
        let samples = [
            // Before the collector was built: another collector's.
            s(a, 900, Reading::Value(Value::Double(999.0))),
            s(a, 1100, Reading::Value(Value::Double(100.0))),
            s(a, 1200, Reading::Sentinel(Sentinel::Blank)),
            s(b, 1100, Reading::Value(Value::Int64(7))),
            s(b, 1200, Reading::Error(dcgm_sys::Status::NoData)),
        ];
        let mut w = Windows::default();
        c.take(&samples, &mut w);
        assert_eq!(w[&(a, 155)].count, 1);
        assert_eq!(w[&(a, 155)].max, 100.0);
        assert_eq!(w[&(b, 155)].max, 7.0);
        // Read again from after the oldest pair's newest sample: nothing counts twice.
        assert_eq!(c.since(2), 1201);
        let mut again = Windows::default();
        c.take(&samples, &mut again);
        assert!(again.values().all(|w| w.count == 0), "{again:?}");
        // Pairs interleaved, and a sample no newer than one before it in its run: each new
        // sample counts once, in its own pair's window.
        let later = [
            s(a, 1300, Reading::Value(Value::Double(5.0))),
            s(a, 1250, Reading::Value(Value::Double(555.0))),
            s(b, 1300, Reading::Value(Value::Int64(9))),
            s(a, 1400, Reading::Value(Value::Double(6.0))),
            s(a, 1400, Reading::Value(Value::Double(666.0))),
        ];
        let mut w = Windows::default();
        c.take(&later, &mut w);
        let a_w = w[&(a, 155)];
        assert_eq!((a_w.count, a_w.min, a_w.max), (2, 5.0, 6.0));
        assert_eq!((w[&(b, 155)].count, w[&(b, 155)].max), (1, 9.0));
        assert_eq!(c.last[&(a, 155)], 1400);
        // A pair gone quiet holds the read back two intervals at most.
        c.last.insert((a, 155), 50_000);
        assert_eq!(c.since(2), 40_001);
    }

    /// A remote engine's clock is its own: the build's positions come from DCGM's newest
    /// samples, not from the exporter's clock, ahead or behind.
    #[test]
    fn windows_start_on_dcgms_clock_whatever_the_exporters() {
        let (a, b) = (Entity::gpu(0), Entity::gpu(1));
        let s = |e: Entity, ts: i64, v: f64| FieldReading {
            entity: e,
            field_id: 155,
            ts_us: ts,
            reading: Reading::Value(Value::Double(v)),
        };
        let cursor = |exporter_now: i64| power_cursor(exporter_now, 10_000, 0);
        // The engine 4 s ahead: its samples just before the build (a 950 W spike the
        // collector replaced counted) must not count again.
        let mut ahead = cursor(1_000_000);
        ahead.start_after(&[s(a, 5_000_000, 300.0)]);
        assert_eq!(ahead.start_us, 5_000_000);
        let mut w = Windows::default();
        ahead.take(
            &[
                s(a, 4_900_000, 950.0),
                s(a, 5_100_000, 310.0),
                s(b, 4_950_000, 950.0),
                s(b, 5_050_000, 320.0),
            ],
            &mut w,
        );
        assert_eq!((w[&(a, 155)].count, w[&(a, 155)].max), (1, 310.0));
        assert_eq!((w[&(b, 155)].count, w[&(b, 155)].max), (1, 320.0));
        // The engine 8 s behind: its samples after the build count, none is lost.
        let mut behind = cursor(10_000_000);
        behind.start_after(&[s(a, 2_000_000, 300.0), s(b, 1_990_000, 300.0)]);
        assert_eq!(behind.since(2), 1_990_001);
        let mut w = Windows::default();
        behind.take(&[s(a, 2_100_000, 330.0), s(b, 2_100_000, 340.0)], &mut w);
        assert_eq!(w[&(a, 155)].count + w[&(b, 155)].count, 2);
        // Nothing sampled yet (or a blank timestamp): the exporter's clock stands in.
        let mut none = cursor(10_000_000);
        none.start_after(&[s(a, 0, 300.0)]);
        assert_eq!((none.start_us, none.last.len()), (10_000_000, 0));
    }

    /// One collection missed (a read that failed, or left for later): the next window
    /// counts both intervals' samples. More: only the last interval before the newest
    /// sample, so that no window holds more than it says it spans.
    #[test]
    fn a_window_makes_up_for_one_missed_collection_not_more() {
        let a = Entity::gpu(0);
        let s = |ts: i64| FieldReading {
            entity: a,
            field_id: 155,
            ts_us: ts,
            reading: Reading::Value(Value::Double(ts as f64)),
        };
        // Two intervals of 5 ms (span 10 ms), a sample every millisecond.
        let samples: Vec<FieldReading> = (1..=20).map(|i| s(1_000_000 + i * 1000)).collect();
        let counted = |missed: u32| {
            let mut c = power_cursor(1_000_000, 10_000, missed);
            let mut w = Windows::default();
            c.take(&samples, &mut w);
            assert_eq!(c.missed, 0);
            let acc = w[&(a, 155)];
            (acc.count, acc.min)
        };
        assert_eq!(counted(0), (20, 1_001_000.0));
        assert_eq!(counted(1), (20, 1_001_000.0));
        // The newest at 1,020,000: after 1,015,000.
        assert_eq!(counted(2), (5, 1_016_000.0));
        assert_eq!(counted(7), (5, 1_016_000.0));
        // Nothing read after missed collections: nothing counted, no overflow.
        let mut c = power_cursor(0, i64::MAX, 3);
        c.take(&[], &mut Windows::default());
        c.missed = 2;
        let mut w = Windows::default();
        c.take(&samples[..1], &mut w);
        assert_eq!(w[&(a, 155)].count, 1);
    }
}
