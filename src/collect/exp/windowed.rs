//! `DCGM_EXP_XID_ERRORS_COUNT`/`_TOTAL` and `DCGM_EXP_CLOCK_EVENTS_COUNT`/`_TOTAL`: counts of
//! one field's sample values over a sliding window, plus since-start totals.

use super::{accepted, exp_labels, CsvLabels, Derived, Pass, Registration, Start};
use crate::collect::failures;
use crate::collect::fields;
use crate::collect::targets::Target;
use crate::collect::topology::Topology;
use crate::collect::watch::{watch_all, Watch};
use crate::config::counters::Counter;
use crate::model::clock::now_us;
use crate::model::Page;
use dcgm_sys::{Entity, Reading, Session, Value};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};

/// What a failure of the XID watch kept for the event history alone is counted under.
const EVENTS_SOURCE: &str = "xid events";

/// Clock-event reason bits and their `clock_event` label (dcgm_fields.h
/// `DCGM_CLOCKS_EVENT_REASON_*`).
const CLOCK_EVENTS: &[(i64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
];

/// What one windowed count reads and how it is named.
struct Spec {
    field: u16,
    /// The label of a sample's value (`xid`, `clock_event`).
    label: &'static str,
    count: &'static str,
    total: &'static str,
    window_ms: u64,
    /// The watch's name.
    name: &'static str,
}

const XID_ERRORS_COUNT: &str = "DCGM_EXP_XID_ERRORS_COUNT";
const XID_ERRORS_TOTAL: &str = "DCGM_EXP_XID_ERRORS_TOTAL";
const CLOCK_EVENTS_COUNT: &str = "DCGM_EXP_CLOCK_EVENTS_COUNT";
const CLOCK_EVENTS_TOTAL: &str = "DCGM_EXP_CLOCK_EVENTS_TOTAL";

pub(super) const XID_REGISTRATION: Registration = Registration {
    names: &[XID_ERRORS_COUNT, XID_ERRORS_TOTAL],
    start: xid,
};

pub(super) const CLOCK_EVENTS_REGISTRATION: Registration = Registration {
    names: &[CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL],
    start: clock_events,
};

/// The XID window, when the counters ask for its count or total; otherwise a watch of the
/// XIDs for the event history alone (no series), so that every XID DCGM reports is an
/// event whichever counters are collected (the GPU operator's profiling list has no XID
/// row).
fn xid(start: &mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let spec = Spec {
        field: fields::XID_ERRORS,
        label: "xid",
        count: XID_ERRORS_COUNT,
        total: XID_ERRORS_TOTAL,
        window_ms: start.settings.xid_window_ms,
        name: "xid",
    };
    windowed(start, spec)
}

/// The clock-event window, when the counters ask for its count or total.
fn clock_events(start: &mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let spec = Spec {
        field: fields::CLOCKS_EVENT_REASONS,
        label: "clock_event",
        count: CLOCK_EVENTS_COUNT,
        total: CLOCK_EVENTS_TOTAL,
        window_ms: start.settings.clock_events_window_ms,
        name: "clock-events",
    };
    windowed(start, spec)
}

/// A window watching its source field (even when the CSV lacks it) with samples kept for
/// the whole window. XIDs are watched without a row too, for their events: the window is
/// then empty (each read starts after the last) and no series is added.
fn windowed(start: &mut Start<'_>, spec: Spec) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let targets: Vec<Entity> = start.gpu_targets.iter().map(|t| t.entity).collect();
    let (count_row, total_row) = (start.row(spec.count), start.row(spec.total));
    let events_only = count_row.is_none() && total_row.is_none();
    if (events_only && spec.field != fields::XID_ERRORS) || targets.is_empty() {
        return Ok(None);
    }
    let window_ms = if events_only { 0 } else { spec.window_ms };
    let (sources, entities) = read_entities(spec.field, start.topology, &targets);
    // The hidden dependency: watch the source field even when the CSV lacks it, keeping
    // samples for at least the whole window (for events alone, a late read's worth).
    let kept_ms = if events_only {
        start.settings.interval_ms
    } else {
        window_ms
    };
    let (keep_age_s, keep_samples) = start.settings.window_retention(kept_ms);
    let source = count_row
        .as_ref()
        .or(total_row.as_ref())
        .map_or(EVENTS_SOURCE, |r| r.name.as_str())
        .to_string();
    let watched = match watch_all(
        start.session,
        &format!("dcgm-exporter-{}", spec.name),
        &entities,
        &[spec.field],
        start.fastest_interval_ms(&[spec.field]),
        keep_age_s,
        keep_samples,
    ) {
        Ok(w) => w,
        Err(e) if failures::is_fatal(&e) => return Err(e),
        Err(e) => {
            start.failures.refused_at_start(&source, &e);
            return Ok(None);
        }
    };
    if let Some((_, e)) = watched.refused.first() {
        start.failures.refused_at_start(&source, e);
        return Ok(None);
    }
    Ok(Some(Box::new(Windowed {
        field: spec.field,
        window_ms,
        label: spec.label,
        count_row,
        total_row,
        // A GPU the group refused is not counted: no series rather than a false 0.
        targets: accepted(start.gpu_targets, &watched.refused_entities),
        sources,
        watches: watched.watches,
        totals: HashMap::new(),
        last_ts: now_us(),
        previous: HashMap::new(),
    })))
}

/// Per target, the entities whose samples of `field` its series count, and every entity to
/// watch: the targets first, then the others (XIDs: `xid::sources`; else each its own).
fn read_entities(
    field: u16,
    topology: &Topology,
    targets: &[Entity],
) -> (HashMap<Entity, Vec<Entity>>, Vec<Entity>) {
    let sources = if field == fields::XID_ERRORS {
        crate::collect::xid::sources(&topology.instances, targets)
    } else {
        HashMap::new()
    };
    let mut entities = targets.to_vec();
    for e in targets.iter().filter_map(|t| sources.get(t)).flatten() {
        if !entities.contains(e) {
            entities.push(*e);
        }
    }
    (sources, entities)
}

/// Counts of one field's sample values over a sliding window, plus since-start totals.
struct Windowed {
    field: u16,
    window_ms: u64,
    label: &'static str,
    count_row: Option<Counter>,
    total_row: Option<Counter>,
    targets: Vec<Target>,
    /// Per target, the entities whose samples its series count (XIDs: `xid::sources`;
    /// clock events: its own).
    sources: HashMap<Entity, Vec<Entity>>,
    watches: Vec<Watch>,
    /// Per entity whose samples are read.
    totals: HashMap<Entity, BTreeMap<String, u64>>,
    /// Samples at or before this timestamp are already in `totals`.
    last_ts: i64,
    /// Clock events: each GPU's last reason bitmask, so that the total counts a reason once
    /// when it becomes active (upstream 4.8.3's clock_events_total collector).
    previous: HashMap<Entity, i64>,
}

impl Derived for Windowed {
    /// What a failure of this piece costs (the `source` of the error counter).
    fn source(&self) -> &str {
        self.count_row
            .as_ref()
            .or(self.total_row.as_ref())
            .map_or(EVENTS_SOURCE, |r| r.name.as_str())
    }

    /// A window samples first so that it ends now; the XID watch kept for events alone
    /// reads what DCGM already has (no extra sampling for counters without a window).
    fn reads_window(&self) -> bool {
        self.has_rows()
    }

    fn serves_series(&self) -> bool {
        self.has_rows()
    }

    fn collect(&mut self, pass: &mut Pass<'_>, page: &mut Page) -> dcgm_sys::Result<()> {
        let since = now_us() - (self.window_ms as i64) * 1000;
        let in_window = self.count_samples(pass.session, since)?;
        let mut part = Page::default();
        self.render(pass.csv_labels, &in_window, &mut part);
        page.append(part);
        Ok(())
    }

    fn watches(&self) -> Vec<&Watch> {
        self.watches.iter().collect()
    }

    /// Takes the window's since-start totals, its read position and its clock-event
    /// baselines from the collector this one replaces, so that `_TOTAL` series stay
    /// monotonic across a rebuild and the samples DCGM took between the old collector's
    /// last read and this one's first are counted once, not lost (the cache keeps them: an
    /// unwatch does not clear it). An entity no longer read takes its totals with it.
    fn inherit(&mut self, old: &mut [Box<dyn Derived>]) {
        let Some(o) = old.iter_mut().find_map(|o| {
            o.as_any_mut()
                .downcast_mut::<Windowed>()
                .filter(|o| o.field == self.field)
        }) else {
            return;
        };
        let mut kept: Vec<Entity> = self.targets.iter().map(|t| t.entity).collect();
        kept.extend(self.sources.values().flatten());
        self.totals = std::mem::take(&mut o.totals);
        self.totals.retain(|e, _| kept.contains(e));
        self.previous = std::mem::take(&mut o.previous);
        self.previous.retain(|e, _| kept.contains(e));
        self.last_ts = o.last_ts;
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Windowed {
    /// Whether the counters ask for its count or total (else it is kept for XID events).
    fn has_rows(&self) -> bool {
        self.count_row.is_some() || self.total_row.is_some()
    }

    /// The values a sample stands for: the XID itself, or each clock-event bit set.
    fn keys(&self, v: i64) -> Vec<String> {
        if self.field == fields::XID_ERRORS {
            if v == 0 {
                Vec::new()
            } else {
                vec![v.to_string()]
            }
        } else {
            CLOCK_EVENTS
                .iter()
                .filter(|(bit, _)| v & bit != 0)
                .map(|(_, n)| n.to_string())
                .collect()
        }
    }

    /// What a new sample adds to the since-start totals: an XID counts once per sample; a
    /// clock-event reason once per inactive-to-active edge, the first sample of a GPU only
    /// setting its baseline (a reason active at start is no transition seen), as upstream.
    fn total_keys(&mut self, entity: Entity, v: i64) -> Vec<String> {
        if self.field == fields::XID_ERRORS {
            return self.keys(v);
        }
        match self.previous.insert(entity, v) {
            Some(before) => self.keys(v & !before),
            None => Vec::new(),
        }
    }

    /// Reads the samples since the window (or the last read) began: the counts inside the
    /// window per GPU and reason, and the since-start totals advanced.
    fn count_samples(
        &mut self,
        session: &Session,
        since: i64,
    ) -> dcgm_sys::Result<HashMap<Entity, BTreeMap<String, u64>>> {
        let mut in_window: HashMap<Entity, BTreeMap<String, u64>> = HashMap::new();
        let mut newest = self.last_ts;
        let mut samples = Vec::new();
        for w in &self.watches {
            samples.extend(
                session
                    .values_since(&w.group, &w.fields, since.min(self.last_ts + 1).max(0))?
                    .0,
            );
        }
        // Edges need each GPU's samples in time order.
        samples.sort_by_key(|s| s.ts_us);
        for s in samples {
            let v = match s.reading {
                Reading::Value(Value::Int64(v)) => v,
                _ => continue,
            };
            if s.ts_us >= since {
                for key in self.keys(v) {
                    *in_window
                        .entry(s.entity)
                        .or_default()
                        .entry(key)
                        .or_default() += 1;
                }
            }
            if s.ts_us > self.last_ts {
                if self.field == fields::XID_ERRORS && v != 0 {
                    crate::model::events::dcgm_xid(
                        s.entity,
                        v,
                        s.ts_us,
                        crate::collect::xid::describe(v),
                    );
                }
                for key in self.total_keys(s.entity, v) {
                    *self
                        .totals
                        .entry(s.entity)
                        .or_default()
                        .entry(key)
                        .or_default() += 1;
                }
            }
            newest = newest.max(s.ts_us);
        }
        self.last_ts = newest;
        Ok(in_window)
    }

    /// A target's counts: those of every entity it counts the samples of.
    fn counts_of(
        &self,
        t: &Target,
        per_entity: &HashMap<Entity, BTreeMap<String, u64>>,
    ) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let own = [t.entity];
        let sources = self.sources.get(&t.entity).map_or(&own[..], Vec::as_slice);
        for counts in sources.iter().filter_map(|e| per_entity.get(e)) {
            for (k, n) in counts {
                *out.entry(k.clone()).or_default() += n;
            }
        }
        out
    }

    fn render(
        &self,
        csv_labels: &CsvLabels,
        in_window: &HashMap<Entity, BTreeMap<String, u64>>,
        page: &mut Page,
    ) {
        let window = self.window_ms.to_string();
        for t in &self.targets {
            if let Some(row) = &self.count_row {
                match self.counts_of(t, in_window) {
                    counts if !counts.is_empty() => {
                        for (k, n) in &counts {
                            let l = exp_labels(
                                t,
                                csv_labels,
                                &[(self.label, k), ("window_size_in_ms", &window)],
                            );
                            page.add(&row.name, &row.help, row.prom_type, &l, *n as f64);
                        }
                    }
                    _ => {
                        let l = exp_labels(t, csv_labels, &[("window_size_in_ms", &window)]);
                        page.add(&row.name, &row.help, row.prom_type, &l, 0.0);
                    }
                }
            }
            if let Some(row) = &self.total_row {
                match self.counts_of(t, &self.totals) {
                    counts if !counts.is_empty() => {
                        for (k, n) in &counts {
                            let l = exp_labels(t, csv_labels, &[(self.label, k)]);
                            page.add(&row.name, &row.help, row.prom_type, &l, *n as f64);
                        }
                    }
                    _ => {
                        let l = exp_labels(t, csv_labels, &[]);
                        page.add(&row.name, &row.help, row.prom_type, &l, 0.0);
                    }
                }
            }
        }
    }
}
