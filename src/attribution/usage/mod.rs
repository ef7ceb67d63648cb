//! Per-consumer GPU accounting (`--usage-accounting`): who really uses a device. Each
//! collection, the energy a GPU or MIG instance used since the previous one
//! (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`) is split between the consumers holding it (pods,
//! containers, HPC jobs) by their share of its utilisation, and what nobody used stays on the
//! device as idle energy, so consumers plus idle add up to the device's total. A consumer that
//! holds a device for longer than a window without using it is flagged allocated-but-idle.
//!
//! The sources say who holds what ([`Consumer`]s per [`EntityKey`] in the `Snapshot`) and
//! which process belongs to whom ([`Owner`]); the [`Accountant`] keeps the counters between
//! collections and adds the `DCGM_EXP_*` usage families to the page after the merge.

use std::time::Duration;

/// A device consumers hold: a whole GPU (its UUID, `None`) or one of its MIG GPU instances
/// (the parent GPU's UUID and the GPU-instance id of its series' `GPU_I_ID`).
pub type EntityKey = (String, Option<u32>);

/// Who a process belongs to, from its cgroup (`<proc-root>/<pid>/cgroup`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// A Kubernetes pod, by UID.
    Pod(String),
    /// A Docker/podman container, by its full id.
    Container(String),
    /// An HPC (Slurm) job, by id.
    Job(String),
}

/// One consumer holding a device this collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// The labels its series carry (`pod`, `namespace`, `container`, `vgpu`; `container`
    /// outside Kubernetes; `hpc_job`), in order.
    pub labels: Vec<(String, String)>,
    /// Whose processes are its own; `None` when unknown (then only an exclusive holding is
    /// attributed: it gets the whole device).
    pub owner: Option<Owner>,
    /// Holds a shared replica (time-slicing, MPS) rather than the whole device.
    pub replica: bool,
    /// The attribution source that says it holds the device, by its name on `/health`
    /// ([`KUBELET`], [`CONTAINERS`], [`HPC`]): while that source fails, the consumer is not
    /// taken for gone.
    pub source: &'static str,
}

/// The sources consumers come from, named as on `/health`.
pub const KUBELET: &str = "kubelet";
pub const CONTAINERS: &str = "container-runtime";
pub const HPC: &str = "hpc";

/// `--usage-idle-window` and `--usage-max-consumers-per-gpu`.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub idle_window: Duration,
    pub max_consumers_per_gpu: usize,
}

mod cap;
mod families;
pub mod ledger;
pub mod pods;
pub mod readings;
pub mod share;
#[cfg(test)]
mod tests;

use crate::attribution::nvml::Process;
use crate::model::Page;
use ledger::{Book, ConsumerBook, ConsumerId};
use readings::Reading;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

/// What one collection tells the accountant besides the page's readings.
pub struct Inputs<'a> {
    pub consumers: &'a HashMap<EntityKey, Vec<Consumer>>,
    /// Processes per GPU UUID.
    pub processes: &'a HashMap<String, Vec<Process>>,
    pub owners: &'a HashMap<u32, Owner>,
    /// The sources failing this collection (a kubelet `List` that failed, a container
    /// runtime that did not answer, an HPC file that could not be read): their consumers
    /// missing now are kept, their shares unknown, for [`ledger::MAX_UNKNOWN`] collections.
    pub failed: &'a BTreeSet<&'static str>,
}

/// A device as the last collection showed it.
#[derive(Clone, Debug)]
struct Device {
    labels: Vec<(String, String)>,
    gpu: String,
}

/// The books of every device on the node, kept between collections; only devices on the
/// page and consumers holding them now are kept.
pub struct Accountant {
    settings: Settings,
    books: HashMap<EntityKey, Book>,
    devices: BTreeMap<EntityKey, Device>,
    /// Consumers seen so far, for their order of first sight.
    seq: u64,
}

/// One consumer's part of one interval on its device.
struct Part {
    id: ConsumerId,
    /// `None`: unknown this interval (NVML gave no processes for a shared device).
    share: Option<f64>,
    fraction: f64,
    active: bool,
    /// Whether what it does can be told (an exclusive holder, or a known owner).
    known: bool,
    source: &'static str,
}

impl Accountant {
    pub fn new(settings: Settings) -> Accountant {
        Accountant {
            settings,
            books: HashMap::new(),
            devices: BTreeMap::new(),
            seq: 0,
        }
    }

    /// The devices on a collected page, read before the merge copies its series.
    pub fn read(&self, page: &Page, id_type: crate::attribution::IdType) -> Vec<Reading> {
        readings::read(page, id_type)
    }

    /// Books one collection at `now`. Returns, per GPU (`gpu` label) with consumers, how
    /// many of them the cap newly left without series.
    pub fn account(
        &mut self,
        readings: Vec<Reading>,
        inputs: &Inputs,
        now: Instant,
    ) -> BTreeMap<String, u64> {
        self.devices.clear();
        for r in &readings {
            let parts = self.parts(r, inputs);
            self.book_device(r, parts, inputs.failed, now);
            self.devices.insert(
                r.key.clone(),
                Device {
                    labels: r.labels.clone(),
                    gpu: r.gpu.clone(),
                },
            );
        }
        let devices = &self.devices;
        self.books.retain(|k, _| devices.contains_key(k));
        let gpus: HashMap<EntityKey, String> = self
            .devices
            .iter()
            .map(|(k, d)| (k.clone(), d.gpu.clone()))
            .collect();
        cap::apply(&mut self.books, &gpus, self.settings.max_consumers_per_gpu)
    }

    /// Each consumer's share, energy fraction and activity on one device this interval.
    fn parts(&self, r: &Reading, inputs: &Inputs) -> Vec<Part> {
        let mut list: Vec<&Consumer> = Vec::new();
        for c in inputs.consumers.get(&r.key).into_iter().flatten() {
            let dup = list
                .iter()
                .any(|x| x.labels == c.labels || (c.owner.is_some() && x.owner == c.owner));
            if !dup {
                list.push(c);
            }
        }
        let exclusive = list.len() == 1 && !list[0].replica;
        let mut raw = vec![0.0; list.len()];
        let mut active = vec![false; list.len()];
        let procs = inputs.processes.get(&r.key.0).map(Vec::as_slice);
        for p in share::on_entity(procs.unwrap_or_default(), r.key.1) {
            let Some(owner) = inputs.owners.get(&p.pid) else {
                continue;
            };
            for (i, c) in list.iter().enumerate() {
                if c.owner.as_ref() == Some(owner) {
                    raw[i] += share::interval_mean(p);
                    active[i] |= share::active(p);
                }
            }
        }
        // A shared device's shares without NVML's answer for its GPU are unknown.
        let told = exclusive || list.is_empty() || procs.is_some();
        let (shares, fractions) = if exclusive {
            let util = r.util.unwrap_or(raw[0].min(100.0));
            active[0] |= util > 0.0;
            (vec![util], vec![1.0])
        } else {
            share::clamp(&mut raw, r.util.unwrap_or(100.0).min(100.0));
            let f = raw.iter().map(|s| s / 100.0).collect();
            (raw, f)
        };
        list.iter()
            .enumerate()
            .map(|(i, c)| Part {
                id: c.labels.clone(),
                share: told.then_some(shares[i]),
                fraction: fractions[i],
                active: active[i],
                known: exclusive || c.owner.is_some(),
                source: c.source,
            })
            .collect()
    }

    fn book_device(
        &mut self,
        r: &Reading,
        parts: Vec<Part>,
        failed: &BTreeSet<&'static str>,
        now: Instant,
    ) {
        let book = self.books.entry(r.key.clone()).or_default();
        let ids: Vec<ConsumerId> = parts.iter().map(|p| p.id.clone()).collect();
        // A consumer of a failing source may still be there: its share is unknown.
        let mut told = book.keep_only(&ids, failed) == 0;
        let mut fractions = Vec::with_capacity(parts.len());
        for p in parts {
            let c = book.consumers.entry(p.id.clone()).or_insert_with(|| {
                self.seq += 1;
                ConsumerBook::new(now, self.seq, p.source)
            });
            c.known = p.known;
            if p.active {
                c.last_active = Some(now);
            }
            // An unknown share keeps the last one on show.
            if let Some(share) = p.share {
                c.share = Some(share);
                fractions.push((p.id, p.fraction));
            } else {
                told = false;
            }
        }
        book.book(told.then_some(fractions), r.energy_mj);
    }

    /// Adds the usage families to the page (after the merge, so that no pod copies them).
    pub fn add_to(&self, page: &mut Page, now: Instant) {
        for (key, dev) in &self.devices {
            if let Some(book) = self.books.get(key) {
                families::add(page, &dev.labels, book, now, self.settings.idle_window);
            }
        }
    }
}
