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
pub(crate) type EntityKey = (String, Option<u32>);

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
pub(crate) const KUBELET: &str = "kubelet";
pub(crate) const CONTAINERS: &str = "container-runtime";
pub(crate) const HPC: &str = "hpc";

/// `--usage-idle-window` and `--usage-max-consumers-per-gpu`.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub idle_window: Duration,
    pub max_consumers_per_gpu: usize,
}

mod cap;
pub(crate) mod families;
pub(crate) mod ledger;
pub(crate) mod pods;
pub(crate) mod readings;
pub(crate) mod share;
#[cfg(test)]
mod tests;

use crate::attribution::nvml::Process;
use crate::model::Page;
use ledger::{Book, ConsumerBook, ConsumerId};
use readings::Reading;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

/// What one collection tells the accountant besides the page's readings.
pub(crate) struct Inputs<'a> {
    pub consumers: &'a HashMap<EntityKey, Vec<Consumer>>,
    /// Processes per GPU UUID.
    pub processes: &'a HashMap<String, Vec<Process>>,
    pub owners: &'a HashMap<u32, Owner>,
    /// The sources failing this collection (a kubelet `List` that failed, a container
    /// runtime that did not answer): their consumers missing now are kept, their shares
    /// unknown, for [`ledger::MAX_UNKNOWN`] collections.
    pub failed: &'a BTreeSet<&'static str>,
    /// Consumers per device that a failing part of a source may still name (the jobs of an
    /// HPC file that could not be read): kept while missing as a failing source's are.
    pub unknown: &'a HashMap<EntityKey, Vec<ledger::ConsumerId>>,
}

/// A device as the last collection showed it.
#[derive(Clone, Debug)]
struct Device {
    labels: Vec<(String, String)>,
    gpu: String,
}

/// The books of every device on the node, kept between collections; only devices on the
/// page and consumers holding them now are kept.
pub(crate) struct Accountant {
    settings: Settings,
    books: HashMap<EntityKey, Book>,
    devices: BTreeMap<EntityKey, Device>,
    /// Consumers seen so far, for their order of first sight.
    seq: u64,
}

/// One consumer's part of one interval on its device.
struct Part<'a> {
    consumer: &'a Consumer,
    /// Its share of the device's utilisation, percent: the sum of its processes' interval
    /// means, clamped to the device's own value (the device's value for an exclusive holder).
    share: f64,
    /// Its fraction of the device's energy (1 for an exclusive holder, share / 100 else).
    fraction: f64,
    active: bool,
    /// Whether what it does can be told (an exclusive holder, or a known owner).
    known: bool,
}

/// Every consumer's part of one interval on one device.
struct Parts<'a> {
    parts: Vec<Part<'a>>,
    /// The shares are known: NVML answered for a shared device's GPU (an exclusive holder's
    /// is the device's own utilisation, known without it).
    shares_known: bool,
}

impl Accountant {
    pub(crate) fn new(settings: Settings) -> Accountant {
        Accountant {
            settings,
            books: HashMap::new(),
            devices: BTreeMap::new(),
            seq: 0,
        }
    }

    /// The devices on a collected page, read before the merge copies its series.
    pub(crate) fn read(&self, page: &Page, id_type: crate::attribution::IdType) -> Vec<Reading> {
        readings::read(page, id_type)
    }

    /// Books one collection at `now`. Returns, per GPU (`gpu` label) with consumers, how
    /// many of them the cap newly left without series.
    pub(crate) fn account(
        &mut self,
        readings: Vec<Reading>,
        inputs: &Inputs,
        now: Instant,
    ) -> BTreeMap<String, u64> {
        self.devices.clear();
        for r in &readings {
            let parts = self.parts(r, inputs);
            self.book_device(r, parts, inputs, now);
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
    fn parts<'a>(&self, r: &Reading, inputs: &Inputs<'a>) -> Parts<'a> {
        let mut parts: Vec<Part<'a>> = Vec::new();
        for c in inputs.consumers.get(&r.key).into_iter().flatten() {
            let dup = parts.iter().any(|x| {
                x.consumer.labels == c.labels || (c.owner.is_some() && x.consumer.owner == c.owner)
            });
            if !dup {
                parts.push(Part {
                    consumer: c,
                    share: 0.0,
                    fraction: 0.0,
                    active: false,
                    known: c.owner.is_some(),
                });
            }
        }
        let procs = inputs.processes.get(&r.key.0).map(Vec::as_slice);
        for p in share::on_entity(procs.unwrap_or_default(), r.key.1) {
            let Some(owner) = inputs.owners.get(&p.pid) else {
                continue;
            };
            for part in parts.iter_mut() {
                if part.consumer.owner.as_ref() == Some(owner) {
                    part.share += share::interval_mean(p);
                    part.active |= share::active(p);
                }
            }
        }
        let exclusive = parts.len() == 1 && !parts[0].consumer.replica;
        if exclusive {
            let part = &mut parts[0];
            part.share = r.util.unwrap_or(part.share.min(100.0));
            part.active |= part.share > 0.0;
            part.fraction = 1.0;
            part.known = true;
        } else {
            let mut shares: Vec<f64> = parts.iter().map(|p| p.share).collect();
            share::clamp(&mut shares, r.util.unwrap_or(100.0).min(100.0));
            for (part, share) in parts.iter_mut().zip(shares) {
                part.share = share;
                part.fraction = share / 100.0;
            }
        }
        let shares_known = exclusive || parts.is_empty() || procs.is_some();
        Parts {
            parts,
            shares_known,
        }
    }

    fn book_device(&mut self, r: &Reading, parts: Parts, inputs: &Inputs, now: Instant) {
        let book = self.books.entry(r.key.clone()).or_default();
        let ids: Vec<ConsumerId> = parts
            .parts
            .iter()
            .map(|p| p.consumer.labels.clone())
            .collect();
        let unknown = inputs.unknown.get(&r.key).map_or(&[][..], Vec::as_slice);
        // A consumer of a failing source kept while missing may still be using the device:
        // the interval's fractions leave it out, so they are not booked.
        let everyone_told = book.keep_only(&ids, inputs.failed, unknown) == 0;
        let mut fractions = Vec::with_capacity(ids.len());
        for p in parts.parts {
            let c = book
                .consumers
                .entry(p.consumer.labels.clone())
                .or_insert_with(|| {
                    self.seq += 1;
                    ConsumerBook::new(now, self.seq, p.consumer.source)
                });
            c.known = p.known;
            if p.active {
                c.last_active = Some(now);
            }
            // Unknown shares keep the last ones on show.
            if parts.shares_known {
                c.share = Some(p.share);
                fractions.push((p.consumer.labels.clone(), p.fraction));
            }
        }
        let bookable = everyone_told && parts.shares_known;
        book.book(bookable.then_some(fractions), r.energy_mj);
    }

    /// Adds the usage families to the page (after the merge, so that no pod copies them).
    pub(crate) fn add_to(&self, page: &mut Page, now: Instant) {
        for (key, dev) in &self.devices {
            if let Some(book) = self.books.get(key) {
                families::add(page, &dev.labels, book, now, self.settings.idle_window);
            }
        }
    }
}
