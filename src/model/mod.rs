//! The model of one collected page: metric families (name, help, type) and their series
//! (labels in the order given, one value), with what did not make it onto the page (drop
//! reasons, failed pieces) and the age of its oldest sample. `collect` produces it,
//! `attribution` rewrites its GPU series, `output` renders it.
//!
//! A page holds no per-series heap objects: label names are interned once per page, label
//! values live in one text buffer, and a series is a range of (name, value) pairs in one
//! vector. Rendering walks those buffers directly, and [`Page::clear`] keeps their capacity
//! (and each family's storage) for the next collection. A series that would break the page
//! (the same labels twice in a family, a family added again with another type or help, a
//! label name Prometheus refuses) is dropped and counted instead, so that no renderer ever
//! writes one.
//!
//! Beside the page: what a metric is, for every stage (`naming`: types, the derived
//! `DCGM_EXP_*` names, base units, the self-metric prefix), the page's clock and how long it
//! may be served (`clock`), the node it describes (`node`) and the history of events
//! (`events`).

pub(crate) mod clock;
pub mod events;
pub mod naming;
pub(crate) mod node;

use naming::PromType;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// Why a value did not reach the page (the `reason` label of the drop counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// A DCGM blank / not-found / not-supported / not-permissioned sentinel.
    Sentinel,
    /// DCGM returned the value with an error status (no data, not watched, GPU lost...).
    Status,
    /// A string or blob value in a gauge/counter row.
    NonNumeric,
    /// The same metric name and labels twice.
    Duplicate,
    /// The same metric name with another type or help text.
    Conflict,
    /// A sample too old to serve (the engine stopped sampling the field).
    Stale,
    /// A label name Prometheus refuses (not `[a-zA-Z_][a-zA-Z0-9_]*`, or a reserved `__`
    /// name): the series would make the whole page unreadable.
    InvalidLabelName,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Sentinel => "sentinel",
            DropReason::Status => "status",
            DropReason::NonNumeric => "non_numeric",
            DropReason::Duplicate => "duplicate",
            DropReason::Conflict => "conflict",
            DropReason::Stale => "stale",
            DropReason::InvalidLabelName => "invalid_label_name",
        }
    }
}

/// The label naming the host engine of a series when one exporter serves several
/// (`lifecycle::app::engines`); attribution keys GPUs by it where an index alone would
/// name one GPU of every engine.
pub(crate) const ENGINE_LABEL: &str = "engine";

/// Whether Prometheus accepts `name` as a label name: `[a-zA-Z_][a-zA-Z0-9_]*`, and not
/// `__`-prefixed (reserved for Prometheus' own labels).
pub(crate) fn is_valid_label_name(name: &str) -> bool {
    let b = name.as_bytes();
    match b.first() {
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {}
        _ => return false,
    }
    !name.starts_with("__") && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A name from outside (a pod label's key) as a valid label name: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (dcgm-exporter's rule, so names that were valid there stay
/// the same), then a leading digit gets a `_` before it (`3rd-party` -> `_3rd_party`), and
/// a leading run of underscores becomes one (`__meta` -> `_meta`: `__` is reserved).
pub fn sanitize_label_name(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    if out.starts_with("__") {
        let rest = out.trim_start_matches('_');
        out = format!("_{rest}");
    }
    out
}

/// One label of an owned [`Series`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    name: String,
    value: String,
}

impl Label {
    pub fn new(name: &str, value: &str) -> Label {
        Label {
            name: name.to_string(),
            value: value.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    pub(crate) fn set_value(&mut self, value: &str) {
        value.clone_into(&mut self.value);
    }
}

/// A series taken out of the page for [`Page::rewrite`]: its labels in order and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    labels: Vec<Label>,
    pub value: f64,
}

impl Series {
    pub fn new(labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            labels: labels.iter().map(|(k, v)| Label::new(k, v)).collect(),
            value,
        }
    }

    pub fn labels(&self) -> &[Label] {
        &self.labels
    }

    pub(crate) fn labels_mut(&mut self) -> &mut [Label] {
        &mut self.labels
    }

    /// The value of label `name`, if the series has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.as_str())
    }

    /// Appends a label (after the others; nothing checks that the name is new).
    pub(crate) fn push_label(&mut self, name: &str, value: &str) {
        self.labels.push(Label::new(name, value));
    }
}

/// A label name, interned in its page.
type KeyId = u32;

/// One label of a stored series: an interned name and a range of the page's value text.
#[derive(Clone, Copy)]
struct Pair {
    key: KeyId,
    start: u32,
    end: u32,
}

/// A stored series: a range of the page's pairs and the value.
#[derive(Clone, Copy)]
struct Row {
    first: u32,
    end: u32,
    value: f64,
}

/// The series' label-set hashes are already hashes: no need to hash them again.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type SeenMap = HashMap<u64, u32, BuildHasherDefault<Prehashed>>;

struct Family {
    name: String,
    help: String,
    ty: PromType,
    /// The DCGM field whose values the family holds, in the unit it is exported in (a
    /// base-unit row's own id, whichever field it is read from): later stages find a
    /// measurement by field, never by the name it is exported under in one release.
    field: Option<u16>,
    /// What the family holds of a field's samples between two collections, for a family of
    /// sub-interval aggregation (`collect::aggregate`); `None` for every other family.
    stat: Option<Stat>,
    rows: Vec<Row>,
    /// Label-set hash -> the first row with that hash (duplicates are found through it).
    seen: SeenMap,
}

/// One statistic of a field's samples taken between two collections (sub-interval
/// aggregation): the family `<row name><suffix>` holds it, one series per series of the
/// row, with the same labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stat {
    Min,
    Max,
    Mean,
    /// How many samples the other three are of.
    Samples,
}

impl Stat {
    pub const ALL: [Stat; 4] = [Stat::Min, Stat::Max, Stat::Mean, Stat::Samples];

    /// What the family's name adds to the row's.
    pub fn suffix(self) -> &'static str {
        match self {
            Stat::Min => "_interval_min",
            Stat::Max => "_interval_max",
            Stat::Mean => "_interval_mean",
            Stat::Samples => "_interval_samples",
        }
    }
}

impl Family {
    fn reset(&mut self, help: &str, ty: PromType) {
        help.clone_into(&mut self.help);
        self.ty = ty;
        self.field = None;
        self.stat = None;
        self.rows.clear();
        self.seen.clear();
    }
}

/// Label names, each stored once per page and referred to by number.
#[derive(Default)]
struct Keys {
    names: Vec<Box<str>>,
    /// Per name: whether Prometheus accepts it (checked once, when the name is first seen).
    valid: Vec<bool>,
    ids: HashMap<Box<str>, KeyId>,
    /// The ids of the previous series' labels by position: series of one watch set name
    /// their labels in the same order, so most names are found without hashing.
    recent: Vec<KeyId>,
}

impl Keys {
    fn id(&mut self, pos: usize, name: &str) -> KeyId {
        if let Some(&id) = self.recent.get(pos) {
            if &*self.names[id as usize] == name {
                return id;
            }
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as KeyId;
                self.names.push(name.into());
                self.valid.push(is_valid_label_name(name));
                self.ids.insert(name.into(), id);
                id
            }
        };
        if pos < self.recent.len() {
            self.recent[pos] = id;
        } else if pos == self.recent.len() {
            self.recent.push(id);
        }
        id
    }

    fn name(&self, id: KeyId) -> &str {
        &self.names[id as usize]
    }

    /// Whether every label name of a series is one Prometheus accepts.
    fn all_valid(&self, pairs: &[Pair]) -> bool {
        pairs.iter().all(|p| self.valid[p.key as usize])
    }
}

/// Where the series' labels are stored; a rewrite builds a second one and swaps.
#[derive(Default)]
struct Store {
    pairs: Vec<Pair>,
    text: String,
}

impl Store {
    fn clear(&mut self) {
        self.pairs.clear();
        self.text.clear();
    }

    fn push<'a>(&mut self, labels: impl Iterator<Item = (KeyId, &'a str)>, value: f64) -> Row {
        let first = self.pairs.len() as u32;
        for (key, v) in labels {
            let start = self.text.len() as u32;
            self.text.push_str(v);
            self.pairs.push(Pair {
                key,
                start,
                end: self.text.len() as u32,
            });
        }
        Row {
            first,
            end: self.pairs.len() as u32,
            value,
        }
    }

    fn truncate(&mut self, row: &Row) {
        if let Some(p) = self.pairs.get(row.first as usize) {
            self.text.truncate(p.start as usize);
        }
        self.pairs.truncate(row.first as usize);
    }

    fn pairs(&self, row: &Row) -> &[Pair] {
        &self.pairs[row.first as usize..row.end as usize]
    }

    fn value(&self, p: &Pair) -> &str {
        &self.text[p.start as usize..p.end as usize]
    }
}

/// A label set's hash, whatever the label order: the sum of each label's hash. Equal hashes
/// are always confirmed by comparing the labels, so a weak hash costs time, never a series;
/// FNV-1a with a final mix is enough and far cheaper than SipHash per label.
fn label_set_hash(store: &Store, pairs: &[Pair]) -> u64 {
    let mut sum = 0u64;
    for p in pairs {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ u64::from(p.key);
        for &b in store.value(p).as_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        // splitmix64's finaliser, so that sums of similar labels spread.
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        sum = sum.wrapping_add(h ^ (h >> 31));
    }
    sum ^ (pairs.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Whether two label sets are equal, whatever the label order.
fn same_labels(store: &Store, a: &[Pair], b: &[Pair]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            let n = |s: &[Pair]| {
                s.iter()
                    .filter(|y| y.key == x.key && store.value(y) == store.value(x))
                    .count()
            };
            n(a) == n(b)
        })
}

/// Interned label names kept from one collection to the next, at most.
const MAX_KEPT_KEYS: usize = 4096;

/// The page [`Page::recycle`] keeps for the next collection.
static SPARE: Mutex<Option<Page>> = Mutex::new(None);

#[derive(Default)]
pub struct Page {
    families: Vec<Family>,
    index: HashMap<String, usize>,
    /// Families of earlier collections, kept for their storage (see [`Page::clear`]).
    spare: HashMap<String, Family>,
    keys: Keys,
    store: Store,
    /// The second store a rewrite writes into.
    scratch: Store,
    /// Where each label set stored once for several series ([`Page::add_alike`]) starts in
    /// the store, ascending.
    shared: Vec<u32>,
    pub dropped: BTreeMap<DropReason, u64>,
    /// DCGM timestamp (µs) of the oldest value on the page; it must not be served once
    /// that is too old (`collect::freshness`).
    pub oldest_sample_us: Option<i64>,
    /// Pieces of the collection that failed: (source, reason) -> count.
    pub failures: BTreeMap<(String, String), u64>,
    /// Values left out per field: (field name, reason) -> count. The reason is finer than
    /// [`DropReason`]: a sentinel says which (blank, not_supported, not_permissioned...).
    pub field_drops: BTreeMap<(String, &'static str), u64>,
}

impl Page {
    pub(crate) fn drop_value(&mut self, reason: DropReason) {
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// A value of field `field` left out: counted under `reason` and, per field, under
    /// `detail` (bounded: the CSV's fields times a fixed set of details).
    pub(crate) fn drop_field_value(
        &mut self,
        field: &str,
        reason: DropReason,
        detail: &'static str,
    ) {
        self.drop_value(reason);
        self.count_field_drop(field, detail);
    }

    /// Counts a value of `field` left out per field only (one never asked of DCGM, as a
    /// profiling field the GPU does not support).
    pub(crate) fn count_field_drop(&mut self, field: &str, detail: &'static str) {
        *self
            .field_drops
            .entry((field.to_string(), detail))
            .or_default() += 1;
    }

    /// A piece of the collection (a derived metric, a watch set, a field) failed; the rest
    /// of the page is still served.
    pub(crate) fn piece_failed(&mut self, source: &str, reason: &str) {
        *self
            .failures
            .entry((source.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    /// An empty page on the storage of the last one [`Page::recycle`]d (its buffers and
    /// families), or a new page. The collection loop takes one per collection and gives it
    /// back once rendered, so that a steady page allocates nothing.
    pub(crate) fn reuse() -> Page {
        Page::reuse_from(&SPARE)
    }

    /// Keeps this page's storage for the next [`Page::reuse`].
    pub(crate) fn recycle(self) {
        self.recycle_into(&SPARE);
    }

    fn reuse_from(spare: &Mutex<Option<Page>>) -> Page {
        let spare = spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut page = spare.unwrap_or_default();
        page.clear();
        page
    }

    fn recycle_into(self, spare: &Mutex<Option<Page>>) {
        *spare.lock().unwrap_or_else(|p| p.into_inner()) = Some(self);
    }

    /// Empties the page for the next collection, keeping its storage.
    pub fn clear(&mut self) {
        // Only the last collection's families are kept: a family that is gone stays gone.
        self.spare.clear();
        if self.keys.names.len() > MAX_KEPT_KEYS {
            // Label names come from pod labels too: never let them pile up over months.
            self.keys = Keys::default();
        }
        for f in self.families.drain(..) {
            self.spare.insert(f.name.clone(), f);
        }
        self.index.clear();
        self.store.clear();
        self.shared.clear();
        self.dropped.clear();
        self.failures.clear();
        self.field_drops.clear();
        self.oldest_sample_us = None;
    }

    /// The family `name`, created (after the others) if the page has none yet.
    fn family(&mut self, name: &str, help: &str, ty: PromType) -> usize {
        if let Some(i) = self.families.len().checked_sub(1) {
            // Collection adds one field's series in a row: most adds go to the last family.
            if self.families[i].name == name {
                return i;
            }
        }
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let fam = match self.spare.remove(name) {
            Some(mut f) => {
                f.reset(help, ty);
                f
            }
            None => Family {
                name: name.to_string(),
                help: help.to_string(),
                ty,
                field: None,
                stat: None,
                rows: Vec::new(),
                seen: SeenMap::default(),
            },
        };
        self.families.push(fam);
        self.index.insert(name.to_string(), self.families.len() - 1);
        self.families.len() - 1
    }

    /// Adds one sample. Label order is kept as given.
    pub fn add(
        &mut self,
        name: &str,
        help: &str,
        ty: PromType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let idx = self.family(name, help, ty);
        if self.families[idx].ty != ty || self.families[idx].help != help {
            self.drop_value(DropReason::Conflict);
            return;
        }
        let keys = &mut self.keys;
        let labels = labels
            .iter()
            .enumerate()
            .map(|(pos, &(k, v))| (keys.id(pos, k), v));
        let row = self.store.push(labels, value);
        if !self.keys.all_valid(self.store.pairs(&row)) {
            self.store.truncate(&row);
            self.drop_value(DropReason::InvalidLabelName);
        } else if !Self::admit(&mut self.families[idx], &self.store, row) {
            self.store.truncate(&row);
            self.drop_value(DropReason::Duplicate);
        }
    }

    /// The family `name` for [`Page::add_alike`], created (after the others) if the page
    /// has none yet; `None` when the page has it with another type or help (each series
    /// for it is then dropped as a conflict, as [`Page::add`] drops it).
    pub(crate) fn family_id(&mut self, name: &str, help: &str, ty: PromType) -> Option<FamilyId> {
        let idx = self.family(name, help, ty);
        let fam = &self.families[idx];
        (fam.ty == ty && fam.help == help).then_some(FamilyId(idx))
    }

    /// Adds one series with the same labels to each family of `families`, with the value
    /// of the same position (the statistics of one window): the labels are stored and
    /// hashed once and the series share them, which also lets a renderer write them once.
    /// Label order is kept as given; a family that holds these labels already drops its
    /// series as a duplicate, a `None` family as a conflict.
    pub(crate) fn add_alike(
        &mut self,
        families: &[Option<FamilyId>],
        labels: &[(&str, &str)],
        values: &[f64],
    ) {
        debug_assert_eq!(families.len(), values.len());
        let conflicts = families.iter().filter(|f| f.is_none()).count() as u64;
        if conflicts > 0 {
            *self.dropped.entry(DropReason::Conflict).or_default() += conflicts;
        }
        let keys = &mut self.keys;
        let labels = labels
            .iter()
            .enumerate()
            .map(|(pos, &(k, v))| (keys.id(pos, k), v));
        let shared = self.store.push(labels, 0.0);
        let n = families.len() as u64 - conflicts;
        if !self.keys.all_valid(self.store.pairs(&shared)) {
            self.store.truncate(&shared);
            *self
                .dropped
                .entry(DropReason::InvalidLabelName)
                .or_default() += n;
            return;
        }
        let hash = label_set_hash(&self.store, self.store.pairs(&shared));
        let mut kept = 0;
        for (fam, &value) in families.iter().zip(values) {
            let Some(FamilyId(idx)) = *fam else {
                continue;
            };
            let row = Row { value, ..shared };
            if Self::admit_hashed(&mut self.families[idx], &self.store, row, hash) {
                kept += 1;
            } else {
                self.drop_value(DropReason::Duplicate);
            }
        }
        if kept == 0 {
            self.store.truncate(&shared);
        } else if kept > 1 && shared.end > shared.first {
            self.shared.push(shared.first);
        }
    }

    /// Says which DCGM field family `name` holds (see `Family::field`); nothing when the
    /// page has no such family.
    pub(crate) fn set_field(&mut self, name: &str, field: u16) {
        if let Some(&i) = self.index.get(name) {
            self.families[i].field = Some(field);
        }
    }

    /// Says which statistic of a field's samples family `name` holds (see `Family::stat`);
    /// nothing when the page has no such family.
    pub(crate) fn set_stat(&mut self, name: &str, stat: Stat) {
        if let Some(&i) = self.index.get(name) {
            self.families[i].stat = Some(stat);
        }
    }

    /// Keeps `row` (already in `store`) in the family unless a series with the same labels
    /// is there already.
    fn admit(fam: &mut Family, store: &Store, row: Row) -> bool {
        let hash = label_set_hash(store, store.pairs(&row));
        Self::admit_hashed(fam, store, row, hash)
    }

    /// [`Page::admit`] with the hash of the row's labels already made.
    fn admit_hashed(fam: &mut Family, store: &Store, row: Row, hash: u64) -> bool {
        let pairs = store.pairs(&row);
        let next = fam.rows.len() as u32;
        match fam.seen.get(&hash) {
            None => {
                fam.seen.insert(hash, next);
            }
            Some(&i) => {
                let same = |r: &Row| same_labels(store, store.pairs(r), pairs);
                // A hash shared by different label sets is possible, if unlikely: then
                // every series is compared.
                if same(&fam.rows[i as usize]) || fam.rows.iter().any(same) {
                    return false;
                }
            }
        }
        fam.rows.push(row);
        true
    }

    /// Adds every series of another page (a piece collected on its own), with the same
    /// duplicate and conflict checks.
    pub fn append(&mut self, other: Page) {
        self.append_with(other, None);
    }

    /// [`Page::append`] with one more label, last, on every series of `other`: the pages
    /// of several host engines kept apart in one (`extra` = the engine label).
    pub(crate) fn append_labelled(&mut self, other: Page, name: &str, value: &str) {
        self.append_with(other, Some((name, value)));
    }

    fn append_with(&mut self, other: Page, extra: Option<(&str, &str)>) {
        for (r, n) in other.dropped {
            *self.dropped.entry(r).or_default() += n;
        }
        for (k, n) in other.failures {
            *self.failures.entry(k).or_default() += n;
        }
        for (k, n) in other.field_drops {
            *self.field_drops.entry(k).or_default() += n;
        }
        let mut labels: Vec<(&str, &str)> = Vec::new();
        for fam in &other.families {
            for row in &fam.rows {
                labels.clear();
                labels.extend(
                    other
                        .store
                        .pairs(row)
                        .iter()
                        .map(|p| (other.keys.name(p.key), other.store.value(p))),
                );
                labels.extend(extra);
                self.add(&fam.name, &fam.help, fam.ty, &labels, row.value);
            }
            if let Some(f) = fam.field {
                self.set_field(&fam.name, f);
            }
            if let Some(st) = fam.stat {
                self.set_stat(&fam.name, st);
            }
        }
    }

    /// Lets a later stage (pod attribution) replace each series by what it becomes: itself
    /// with more labels, copies of it, or itself plus extra series. `f` gets the metric's
    /// name and the series; series that come out identical are dropped as duplicates.
    pub fn rewrite(&mut self, mut f: impl FnMut(&str, Series) -> Vec<Series>) {
        let (mut dups, mut invalid) = (0, 0);
        self.scratch.clear();
        for fam in &mut self.families {
            let rows = std::mem::take(&mut fam.rows);
            fam.seen.clear();
            for old in &rows {
                let series = Series {
                    labels: self
                        .store
                        .pairs(old)
                        .iter()
                        .map(|p| Label::new(self.keys.name(p.key), self.store.value(p)))
                        .collect(),
                    value: old.value,
                };
                for out in f(&fam.name, series) {
                    let keys = &mut self.keys;
                    let labels = out
                        .labels
                        .iter()
                        .enumerate()
                        .map(|(pos, l)| (keys.id(pos, &l.name), l.value.as_str()));
                    let row = self.scratch.push(labels, out.value);
                    if !self.keys.all_valid(self.scratch.pairs(&row)) {
                        self.scratch.truncate(&row);
                        invalid += 1;
                    } else if !Self::admit(fam, &self.scratch, row) {
                        self.scratch.truncate(&row);
                        dups += 1;
                    }
                }
            }
        }
        std::mem::swap(&mut self.store, &mut self.scratch);
        self.scratch.clear();
        // Each series was stored anew.
        self.shared.clear();
        if dups > 0 {
            *self.dropped.entry(DropReason::Duplicate).or_default() += dups;
        }
        if invalid > 0 {
            *self
                .dropped
                .entry(DropReason::InvalidLabelName)
                .or_default() += invalid;
        }
    }

    /// How many label sets several series share ([`SeriesRef::shared_labels`]).
    pub fn shared_label_sets(&self) -> usize {
        self.shared.len()
    }

    pub fn series_count(&self) -> usize {
        self.families.iter().map(|f| f.rows.len()).sum()
    }

    /// The families that have series, in the order their first series was added (a rewrite
    /// may leave a family empty; the formats do not allow one).
    pub fn families(&self) -> impl Iterator<Item = FamilyRef<'_>> {
        self.families
            .iter()
            .filter(|f| !f.rows.is_empty())
            .map(move |fam| FamilyRef { page: self, fam })
    }
}

/// A family of a page, for the renderers.
#[derive(Clone, Copy)]
pub struct FamilyRef<'a> {
    page: &'a Page,
    fam: &'a Family,
}

impl<'a> FamilyRef<'a> {
    pub fn name(&self) -> &'a str {
        &self.fam.name
    }

    pub fn help(&self) -> &'a str {
        &self.fam.help
    }

    pub fn prom_type(&self) -> PromType {
        self.fam.ty
    }

    /// The DCGM field the family holds, in its exported unit (`None`: not a DCGM field).
    pub fn field(&self) -> Option<u16> {
        self.fam.field
    }

    /// The statistic of a field's samples the family holds (sub-interval aggregation);
    /// `None` for every other family.
    pub fn stat(&self) -> Option<Stat> {
        self.fam.stat
    }

    /// Counter, or gauge for every other type: a DCGM field is one number, it cannot be a
    /// real histogram or summary, and declaring it one would make the page invalid.
    pub fn is_counter(&self) -> bool {
        self.fam.ty == PromType::Counter
    }

    pub fn len(&self) -> usize {
        self.fam.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fam.rows.is_empty()
    }

    pub fn series(&self) -> impl Iterator<Item = SeriesRef<'a>> + 'a {
        let page = self.page;
        self.fam.rows.iter().map(move |row| SeriesRef { page, row })
    }
}

/// A family of a page, for [`Page::add_alike`]: valid until the page is cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FamilyId(usize);

/// A series of a page, for the renderers.
#[derive(Clone, Copy)]
pub struct SeriesRef<'a> {
    page: &'a Page,
    row: &'a Row,
}

impl<'a> SeriesRef<'a> {
    pub fn value(&self) -> f64 {
        self.row.value
    }

    /// When the series shares its stored labels with other series of the page
    /// ([`Page::add_alike`]): which of the page's shared label sets it is, below
    /// [`Page::shared_label_sets`]. A renderer may then copy what it wrote for the first.
    pub fn shared_labels(&self) -> Option<usize> {
        // An empty label set is never shared, and one may start where a shared one does.
        if self.page.shared.is_empty() || self.row.end == self.row.first {
            return None;
        }
        self.page.shared.binary_search(&self.row.first).ok()
    }

    /// (name, value) of each label, in order.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + 'a {
        let page = self.page;
        page.store
            .pairs(self.row)
            .iter()
            .map(move |p| (page.keys.name(p.key), page.store.value(p)))
    }
}

#[cfg(test)]
mod tests;
