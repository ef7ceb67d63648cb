//! The NVML source (`--backend nvml`, and `auto` while DCGM cannot be used): the core GPU
//! series read straight from the driver's NVML (`libnvidia-ml.so.1`, loaded at run time
//! through `nvml-wrapper`), into the same page, with the same names, labels, types and units
//! as the DCGM collector gives for the same counters CSV. Which field comes from which call,
//! converted how, is `table.rs`; XIDs come from NVML events (`events.rs`), the profiling
//! activity ratios from GPM samples (`gpm.rs`), the NVLink throughput from the rate of
//! NVML's KiB counters between collections (`nvlink.rs`). A CSV row NVML cannot answer (a field not
//! in the table, a `DCGM_EXP_*` metric computed from DCGM's sample history, XIDs or GPM
//! where NVML has none) is left out with one start-up line naming it.
//!
//! NVML has no watches and no sample cache: each collection asks the driver for the current
//! value, so every value on the page was read during that collection.

mod discover;
mod events;
mod gpm;
mod nvlink;
mod samples;
pub(crate) mod table;

pub(crate) use discover::DiscoverError;

use crate::collect::targets::{self, Kind, Target, WatchSet};
use crate::collect::topology::Topology;
use crate::collect::{info, ReadingHash, Settings};
use crate::config::counters::{CounterField, Counters};
use crate::model::clock::now_us;
use crate::model::naming::PromType;
use crate::model::{DropReason, Page};
use dcgm_sys::Entity;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use table::{Call, Pick, Row};

/// The library as the driver installs it.
pub(crate) const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Loads and initialises NVML: `path` (`--nvml-library`), else the driver's library through
/// the dynamic linker's search.
pub(crate) fn load(path: Option<&std::path::Path>) -> Result<Arc<Nvml>, LoadError> {
    let lib = path.map_or_else(
        || std::ffi::OsString::from(DEFAULT_LIBRARY),
        |p| p.as_os_str().to_owned(),
    );
    Nvml::builder()
        .lib_path(&lib)
        .init()
        .map(Arc::new)
        .map_err(|source| LoadError {
            library: lib.to_string_lossy().into_owned(),
            source: Box::new(source),
        })
}

/// NVML did not load or initialise ([`load`]).
#[derive(Debug, thiserror::Error)]
#[error("cannot load NVML ({library}): {source}")]
pub struct LoadError {
    /// `--nvml-library`, else [`DEFAULT_LIBRARY`].
    pub library: String,
    /// Boxed: `NvmlError` is large, and start-up's error holds this one.
    pub source: Box<NvmlError>,
}

/// Why a collection from NVML failed.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The MIG layout could not be read back.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// No GPU's handle could be had (the last refusal).
    #[error("NVML answers for no GPU: {0}")]
    NoGpu(#[source] Box<NvmlError>),
}

/// The UUIDs of the GPUs NVML lists (one whose UUID cannot be read is left out): this
/// machine's GPUs, which `--backend auto` compares with a remote engine's.
pub(crate) fn gpu_uuids(nvml: &Nvml) -> Result<Vec<String>, String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
    Ok((0..count)
        .filter_map(|i| nvml.device_by_index(i).and_then(|d| d.uuid()).ok())
        .collect())
}

/// The GPU rows NVML answers, on the targets they are exported for.
struct ActiveSet {
    set: WatchSet,
    /// CSV `label` rows (indices into `Counters::all`), sorted by name.
    label_rows: Vec<(usize, &'static Row)>,
    /// The other rows with their table row, sorted by field id then CSV line.
    value_rows: Vec<(usize, &'static Row)>,
}

pub(crate) struct NvmlCollector {
    nvml: Arc<Nvml>,
    counters: Arc<Counters>,
    set: Option<ActiveSet>,
    topology: Topology,
    unmatched: Vec<String>,
    low_cardinality: Option<info::LowCardinality>,
    info: Option<Page>,
    /// XID events, when a counter asks for DCGM_FI_DEV_XID_ERRORS and NVML raises them.
    xids: Option<events::Xids>,
    /// GPM samples, when a counter asks for a profiling ratio and a GPU supports GPM.
    gpm: Option<gpm::Gpm>,
    /// The previous NVLink counter sample of each GPU, for DCGM's throughput rates.
    nvlink: nvlink::Rates,
    /// Sub-interval aggregation from NVML's sample buffers (`--aggregate`).
    samples: samples::Samples,
}

/// One call's answer: up to four numbers (see [`Call`]) or a text.
#[derive(Clone, Debug)]
enum Answer {
    Numbers([f64; 4]),
    Text(String),
}

impl NvmlCollector {
    /// Discovers the GPUs through NVML, applies the selectors and decides, per CSV row,
    /// whether NVML can answer it. Selector errors come back as `Err`. `only`: the GPUs
    /// (UUIDs) NVML serves, where it stands in for a remote engine (its GPUs, never this
    /// machine's others); `None`: every GPU NVML lists.
    pub(crate) fn start_on(
        nvml: Arc<Nvml>,
        counters: Arc<Counters>,
        settings: &Settings,
        only: Option<&[String]>,
    ) -> Result<NvmlCollector, crate::collect::NodeError> {
        let counters = Arc::new(legacy_units(&counters));
        let mut topology = discover::topology(&nvml, settings.fake_gpus)?;
        match only {
            Some(only) => discover::keep_only(&mut topology, only),
            // The event history's names, MIG changes and GPUs lost or back at discovery,
            // as the DCGM collector records them at each build. Not for a remote engine's
            // GPUs: its GPUs NVML cannot see are not unbound, and its lost ones are unknown.
            None => crate::model::events::topology(&topology),
        }
        for w in &topology.warnings {
            tracing::warn!("{w}");
        }
        let opts = options(settings);
        let plan = targets::plan(&topology, &counters, &opts)?;
        for c in counters.exp() {
            tracing::warn!(
                "skipping {}: computed from DCGM's sample history, which the NVML backend does not have",
                c.name
            );
        }
        let gpu_set = plan.into_iter().find(|s| s.kind == Kind::Gpu);
        let xids = start_for(
            &counters,
            gpu_set.as_ref(),
            |c| c == Call::XidEvent,
            "NVML raises no XID events here",
            || events::Xids::start(nvml.clone(), &topology),
        );
        let gpm = start_for(
            &counters,
            gpu_set.as_ref(),
            |c| matches!(c, Call::Gpm(_)),
            "no GPU answers NVML GPM metrics",
            || gpm::Gpm::start(nvml.clone(), &topology),
        );
        let (xid_ok, gpm_ok) = (xids.is_ok(), gpm.is_ok());
        let set = gpu_set.and_then(|s| {
            answerable(s, &counters, |c| match c {
                Call::XidEvent => xid_ok,
                Call::Gpm(_) => gpm_ok,
                _ => true,
            })
        });
        let unmatched = targets::unmatched(&topology, &opts)?;
        for n in &unmatched {
            tracing::warn!("{n}");
        }
        match &set {
            Some(s) => tracing::info!(
                "NVML: collecting {} GPU entities x {} fields",
                s.set.targets.len(),
                s.set.fields.len()
            ),
            None => tracing::info!("NVML: collecting no field"),
        }
        let low_cardinality = settings
            .low_cardinality
            .then(|| info::LowCardinality::new(&counters));
        let samples = samples::Samples::start(&nvml, settings, &counters, set.as_ref());
        Ok(NvmlCollector {
            nvml,
            counters,
            set,
            topology,
            unmatched,
            low_cardinality,
            info: None,
            xids: xids.ok().flatten(),
            gpm: gpm.ok().flatten(),
            nvlink: nvlink::Rates::default(),
            samples,
        })
    }

    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Takes over the latest XIDs of `old`, the collector this one replaces (a reload, a
    /// MIG change): they stay the latest values, as DCGM's cache keeps them through a
    /// rebuild of its watches (`events::Xids::hand_over`).
    pub(crate) fn replacing(&mut self, mut old: NvmlCollector) {
        let (Some(new), Some(before)) = (self.xids.as_mut(), old.xids.take()) else {
            return;
        };
        new.carry(before.hand_over(&old.topology), &self.topology);
    }

    pub(crate) fn unmatched(&self) -> &[String] {
        &self.unmatched
    }

    /// GPU entities (whole GPUs and MIG instances) being collected.
    pub(crate) fn gpu_count(&self) -> usize {
        self.set.as_ref().map_or(0, |s| s.set.targets.len())
    }

    pub(crate) fn low_cardinality(&self) -> Option<&info::LowCardinality> {
        self.low_cardinality.as_ref()
    }

    pub(crate) fn take_info(&mut self) -> Option<Page> {
        self.info.take()
    }

    /// True when the MIG layout differs from the one discovered at start.
    pub(crate) fn mig_changed(&self) -> Result<bool, DiscoverError> {
        Ok(discover::instances(&self.nvml, &self.topology.gpus)? != self.topology.instances)
    }

    /// True when a GPU that was lost at discovery answers again. It was left out of the
    /// targets, and nothing else brings it back: a GPU lost later keeps its targets and
    /// its series return by themselves (as `Collector::lost_gpu_returned` on DCGM).
    pub(crate) fn lost_gpu_returned(&self) -> bool {
        self.topology
            .lost_gpus
            .iter()
            .any(|&id| discover::answers_again(&self.nvml, id))
    }

    /// Reads every value and fills `page`. A value NVML refuses is left out and counted;
    /// the collection fails only when NVML answers for no GPU at all.
    pub(crate) fn collect(&mut self, page: &mut Page) -> Result<(), CollectError> {
        let Some(active) = &self.set else {
            page.oldest_sample_us = Some(now_us());
            self.info = self.info_page(&HashMap::new());
            return Ok(());
        };
        let rows = active.label_rows.len() + active.value_rows.len();
        let mut answers = Answers::on(&self.topology, active.set.targets.len() * rows + 1);
        let mut csv_labels: HashMap<Entity, Vec<(String, String)>> = HashMap::new();
        let mut reached = 0;
        let mut last_error = None;
        for t in &active.set.targets {
            match answers.device_of(&self.nvml, t) {
                Ok(()) => reached += 1,
                Err(e) => last_error = Some(e),
            }
            let labels = active
                .label_rows
                .iter()
                .filter_map(|&(i, row)| {
                    let c = &self.counters.all[i];
                    match answers.get(&self.nvml, t, row) {
                        Ok(Answer::Text(s)) => Some((c.name.clone(), s)),
                        Ok(Answer::Numbers(n)) => {
                            Some((c.name.clone(), pick(row, &n)?.to_string()))
                        }
                        Err(_) => None,
                    }
                })
                .collect();
            csv_labels.insert(t.entity, labels);
        }
        if reached == 0 {
            if let Some(e) = last_error {
                return Err(CollectError::NoGpu(Box::new(e)));
            }
        }
        if let Some(x) = &mut self.xids {
            x.read(&self.topology);
        }
        let rows: Vec<&Row> = active.value_rows.iter().map(|&(_, r)| r).collect();
        if let Some(g) = &mut self.gpm {
            g.sample(&active.set.targets, &rows, &mut answers);
        }
        self.nvlink
            .sample(&self.nvml, &active.set.targets, &rows, &mut answers);
        let ask = Ask {
            nvml: &self.nvml,
            answers: &mut answers,
            xids: self.xids.as_ref(),
        };
        fill(&self.counters, active, ask, &csv_labels, page);
        let (asked, lost) = answers.presence();
        crate::model::events::gpus(&asked, &asked, &lost);
        self.samples
            .collect(&self.nvml, active, &self.counters, &csv_labels, page);
        page.oldest_sample_us = Some(now_us());
        self.info = self.info_page(&csv_labels);
        Ok(())
    }

    fn info_page(&self, csv_labels: &HashMap<Entity, Vec<(String, String)>>) -> Option<Page> {
        self.low_cardinality.as_ref()?;
        let mut page = Page::default();
        if let Some(a) = &self.set {
            info::add_info(&mut page, a.set.kind, &a.set.targets, csv_labels);
        }
        Some(page)
    }
}

/// What a collection reads values from: NVML calls, answered once each, and XID events.
struct Ask<'a> {
    nvml: &'a Nvml,
    answers: &'a mut Answers,
    xids: Option<&'a events::Xids>,
}

/// Turns the value rows into series, in the DCGM collector's order.
fn fill(
    counters: &Counters,
    active: &ActiveSet,
    ask: Ask<'_>,
    csv_labels: &HashMap<Entity, Vec<(String, String)>>,
    page: &mut Page,
) {
    let Ask {
        nvml,
        answers,
        xids,
    } = ask;
    let target_labels: Vec<Vec<(&str, &str)>> = active
        .set
        .targets
        .iter()
        .map(|t| t.labels_with(csv_labels))
        .collect();
    let alive = alive(active, answers, nvml);
    for &(i, row) in &active.value_rows {
        let c = &counters.all[i];
        for ((t, own), alive) in active.set.targets.iter().zip(&target_labels).zip(&alive) {
            if row.call == Call::XidEvent {
                xid_series(c, t.entity, own, *alive, xids, page);
                continue;
            }
            if matches!(row.call, Call::Gpm(_)) && !gpm::answers_for(t, row) {
                page.drop_field_value(&c.name, DropReason::Sentinel, "not_supported");
                continue;
            }
            let value = match answers.get(nvml, t, row) {
                Ok(Answer::Numbers(n)) => match pick(row, &n) {
                    Some(v) => v,
                    None => {
                        page.drop_field_value(&c.name, DropReason::Sentinel, "blank");
                        continue;
                    }
                },
                Ok(Answer::Text(_)) => {
                    page.drop_field_value(&c.name, DropReason::NonNumeric, "non_numeric");
                    continue;
                }
                Err(Refused::NotSupported) => {
                    page.drop_field_value(&c.name, DropReason::Sentinel, "not_supported");
                    continue;
                }
                Err(Refused::Failed | Refused::Lost) => {
                    page.drop_field_value(&c.name, DropReason::Status, "status");
                    continue;
                }
            };
            let value = crate::config::rename::value_of(c, row.field, value);
            page.add(&c.name, &c.help, c.prom_type, own, value);
        }
        page.set_field(&c.name, c.unit.map_or(row.field, |b| b.id));
    }
}

/// Per target, whether it answered a polled value in this collection (or has none to
/// answer). As on the DCGM backend (`freshness.rs`), an XID, which stays the latest value
/// for good, is served only for an entity that is alive: not for a GPU fallen off the bus.
fn alive(active: &ActiveSet, answers: &mut Answers, nvml: &Nvml) -> Vec<bool> {
    let polled: Vec<&Row> = active
        .value_rows
        .iter()
        .map(|&(_, r)| r)
        .filter(|r| r.call != Call::XidEvent)
        .collect();
    active
        .set
        .targets
        .iter()
        .map(|t| {
            polled.is_empty()
                || polled
                    .iter()
                    .any(|r| matches!(answers.get(nvml, t, r), Ok(Answer::Numbers(_))))
        })
        .collect()
}

/// DCGM_FI_DEV_XID_ERRORS of one target: its latest XID, labelled with the XID and its
/// description as the DCGM collector labels it; none before the first XID (DCGM: blank).
fn xid_series(
    c: &crate::config::counters::Counter,
    entity: Entity,
    own: &[(&str, &str)],
    alive: bool,
    xids: Option<&events::Xids>,
    page: &mut Page,
) {
    let Some(xid) = xids.and_then(|x| x.last(entity)) else {
        page.drop_field_value(&c.name, DropReason::Sentinel, "blank");
        return;
    };
    if !alive {
        page.drop_field_value(&c.name, DropReason::Stale, "stale");
        return;
    }
    let code = xid.to_string();
    let mut labels = own.to_vec();
    labels.push(("err_code", &code));
    labels.push(("err_msg", crate::collect::xid::describe(xid)));
    page.add(&c.name, &c.help, c.prom_type, &labels, xid as f64);
}

/// The field's number from a call's answer, converted as DCGM does; `None` where DCGM
/// has none (a used ratio of a device with no memory to use).
fn pick(row: &Row, n: &[f64; 4]) -> Option<f64> {
    let raw = match row.pick {
        // NaN: no value (a GPM metric before its second sample; DCGM: blank).
        Pick::At(i) if n[i].is_nan() => return None,
        Pick::At(i) => n[i],
        Pick::UsedRatio => {
            let usable = n[0] - n[3];
            if n[0] == 0.0 || usable <= 0.0 {
                return None;
            }
            n[2] / usable
        }
    };
    Some(row.convert.apply(raw))
}

/// What a call is asked of: the system, a GPU by NVML index, or a MIG GPU instance (GPU
/// index, NVML GPU-instance id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum On {
    System,
    Gpu(u32),
    Mig(u32, u32),
}

impl On {
    /// Where DCGM reads `row`'s field for target `t`: GPU-level fields of a MIG instance
    /// on its GPU (DCGM's "practical entity"), instance-level ones (the framebuffer) on
    /// the instance's MIG device; `gis`: GPU-instance entity id -> NVML GPU-instance id.
    fn of(t: &Target, row: &Row, gis: &HashMap<u32, u32>) -> On {
        use crate::collect::fields::level;
        if row.call == Call::DriverVersion {
            return On::System;
        }
        let gpu = t.gpu.unwrap_or(t.entity.id);
        let lvl = dcgm_sys::fields::by_id(row.field).map_or(level::GPU, |m| m.entity_level);
        match t.entity.group {
            dcgm_sys::EntityGroup::GpuInstance if matches!(lvl, level::GPU_I | level::GPU_CI) => {
                // Not one of the collector's instances: no MIG device answers this id.
                On::Mig(gpu, gis.get(&t.entity.id).copied().unwrap_or(u32::MAX))
            }
            _ => On::Gpu(gpu),
        }
    }
}

/// The answers of one collection, one call per (device, call): several fields share a call
/// (the four framebuffer figures, GPU and memory utilisation).
struct Answers {
    answers: HashMap<(On, Call), Result<Answer, Refused>, ReadingHash>,
    /// GPU-instance entity id -> NVML GPU-instance id (entities are numbered as DCGM's).
    gis: HashMap<u32, u32>,
}

/// Why NVML gave no answer: unsupported (DCGM stores its NOT_SUPPORTED sentinel), the GPU
/// fallen off the bus, or any other error.
#[derive(Clone, Debug, PartialEq)]
enum Refused {
    NotSupported,
    Lost,
    Failed,
}

impl Answers {
    /// Room for `calls` answers: grown as they came, the map was rehashed whole three times
    /// a collection on an 8-GPU node, and each of its some 200 lookups ran SipHash.
    fn on(topology: &Topology, calls: usize) -> Answers {
        Answers {
            answers: HashMap::with_capacity_and_hasher(calls, ReadingHash::default()),
            gis: topology
                .instances
                .iter()
                .filter(|i| i.compute_instance.is_none())
                .map(|i| (i.entity.id, i.nvml_instance_id))
                .collect(),
        }
    }

    /// Checks that the target's GPU answers to its handle.
    fn device_of(&self, nvml: &Nvml, t: &Target) -> Result<(), NvmlError> {
        nvml.device_by_index(t.gpu.unwrap_or(t.entity.id))
            .map(|_| ())
    }

    fn get(&mut self, nvml: &Nvml, t: &Target, row: &Row) -> Result<Answer, Refused> {
        let on = On::of(t, row, &self.gis);
        self.answers
            .entry((on, row.call))
            .or_insert_with(|| ask(nvml, on, row.call).map_err(|e| refused(&e)))
            .clone()
    }

    /// The GPUs asked anything this collection, and those of them that answered
    /// GPU_IS_LOST to a call: what the event history's `gpu_lost` and `gpu_found` follow,
    /// as the DCGM collector's follow dcgmGetGpuStatus. A GPU asked nothing is not judged.
    fn presence(&self) -> (Vec<u32>, Vec<u32>) {
        let mut asked: BTreeMap<u32, bool> = BTreeMap::new();
        for ((on, _), answer) in &self.answers {
            let (On::Gpu(g) | On::Mig(g, _)) = *on else {
                continue;
            };
            *asked.entry(g).or_default() |= matches!(answer, Err(Refused::Lost));
        }
        let lost = asked.iter().filter(|(_, l)| **l).map(|(g, _)| *g).collect();
        (asked.into_keys().collect(), lost)
    }
}

fn refused(e: &NvmlError) -> Refused {
    match e {
        NvmlError::NotSupported => Refused::NotSupported,
        NvmlError::GpuLost => Refused::Lost,
        _ => Refused::Failed,
    }
}

/// Makes one NVML call.
fn ask(nvml: &Nvml, on: On, call: Call) -> Result<Answer, NvmlError> {
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    use table::ClockKind;
    let one = |v: u64| Ok(Answer::Numbers([v as f64, 0.0, 0.0, 0.0]));
    let d: Device = match on {
        On::System => return nvml.sys_driver_version().map(Answer::Text),
        On::Gpu(index) => nvml.device_by_index(index)?,
        On::Mig(gpu, gi) => {
            let slot = discover::slot_of(nvml, gpu, gi)?;
            nvml.device_by_index(gpu)?.mig_device_by_index(slot)?
        }
    };
    let clock = |k: ClockKind| match k {
        ClockKind::Sm => Clock::SM,
        ClockKind::Memory => Clock::Memory,
        ClockKind::Video => Clock::Video,
    };
    match call {
        // Asked of the system (`On::System`), never of a device.
        Call::DriverVersion => Err(NvmlError::NotSupported),
        Call::Temperature => one(d.temperature(TemperatureSensor::Gpu)?.into()),
        Call::Clock(k) => one(d.clock_info(clock(k))?.into()),
        Call::MaxClock(k) => one(d.max_clock_info(clock(k))?.into()),
        Call::PowerUsage => one(d.power_usage()?.into()),
        Call::PcieReplay => one(d.pcie_replay_counter()?.into()),
        Call::Utilization => {
            let u = d.utilization_rates()?;
            Ok(Answer::Numbers([u.gpu.into(), u.memory.into(), 0.0, 0.0]))
        }
        Call::Encoder => one(d.encoder_utilization()?.utilization.into()),
        Call::Decoder => one(d.decoder_utilization()?.utilization.into()),
        Call::Memory => {
            let m = d.memory_info()?;
            Ok(Answer::Numbers([
                m.total as f64,
                m.free as f64,
                m.used as f64,
                m.reserved as f64,
            ]))
        }
        Call::ClocksEventReasons => one(d.current_throttle_reasons()?.bits()),
        Call::FieldValue(id) => field_value(&d, id),
        // Events, read by `events::Xids`, GPM metrics and NVLink rates, answered by
        // `gpm::Gpm` and `nvlink::Rates` before any row is read: never asked.
        Call::XidEvent | Call::Gpm(_) | Call::NvLinkThroughput(_) => Err(NvmlError::NotSupported),
    }
}

/// One `nvmlDeviceGetFieldValues` field, read as DCGM reads it (`table::field_number`).
fn field_value(d: &Device, id: u32) -> Result<Answer, NvmlError> {
    use nvml_wrapper::structs::device::FieldId;
    let sample = d
        .field_values_for(&[FieldId(id)])?
        .into_iter()
        .next()
        .ok_or(NvmlError::Unknown)??;
    let v = table::field_number(id, sample)?;
    Ok(Answer::Numbers([v, 0.0, 0.0, 0.0]))
}

/// Base-unit rows (dcgm-exporter 4.9.0's names) read their legacy field, converted: the
/// table holds DCGM 4.6's fields.
fn legacy_units(counters: &Counters) -> Counters {
    let mut out = counters.clone();
    for c in &mut out.all {
        if let Some(b) = c.unit {
            c.field = CounterField::Dcgm(b.legacy_meta());
        }
    }
    out
}

/// The GPU set's rows NVML can answer; each other row is named once at start and left out.
fn answerable(
    mut set: WatchSet,
    counters: &Counters,
    available: impl Fn(Call) -> bool,
) -> Option<ActiveSet> {
    let mut named = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for &i in &set.counters {
        let c = &counters.all[i];
        let CounterField::Dcgm(meta) = &c.field else {
            continue;
        };
        match table::lookup(meta.id) {
            Some(row) if !available(row.call) => {
                // Named by `start_for`, which says why.
            }
            Some(row) => rows.push((i, row)),
            None => {
                if named.insert(c.name.clone()) {
                    tracing::warn!(
                        "skipping {}: NVML cannot answer field {} ({}) as DCGM does (--backend nvml)",
                        c.name,
                        meta.id,
                        meta.name
                    );
                }
            }
        }
    }
    set.counters = rows.iter().map(|r| r.0).collect();
    set.fields = rows.iter().map(|r| r.1.field).collect();
    set.fields.sort_unstable();
    set.fields.dedup();
    let (mut label_rows, mut value_rows): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|(i, _)| counters.all[*i].prom_type == PromType::Label);
    if value_rows.is_empty() {
        return None;
    }
    label_rows.sort_by(|a, b| counters.all[a.0].name.cmp(&counters.all[b.0].name));
    value_rows.sort_by_key(|(i, r)| (r.field, counters.all[*i].line));
    Some(ActiveSet {
        set,
        label_rows,
        value_rows,
    })
}

/// Starts what one kind of row needs (XID events, GPM) when the GPU set has such a row:
/// `Ok(None)` when it has none, `Err` when it cannot start, each such row then named at
/// start with `why` and the reason.
fn start_for<T>(
    counters: &Counters,
    set: Option<&WatchSet>,
    kind: impl Fn(Call) -> bool,
    why: &str,
    start: impl FnOnce() -> Result<T, String>,
) -> Result<Option<T>, ()> {
    let asks = |i: &usize| {
        matches!(&counters.all[*i].field, CounterField::Dcgm(m)
            if table::lookup(m.id).is_some_and(|r| kind(r.call)))
    };
    let asking: Vec<&str> = set.map_or(Vec::new(), |s| {
        s.counters
            .iter()
            .filter(|i| asks(i))
            .map(|&i| counters.all[i].name.as_str())
            .collect()
    });
    if asking.is_empty() {
        return Ok(None);
    }
    start().map(Some).map_err(|e| {
        let mut named = std::collections::HashSet::new();
        for name in asking.into_iter().filter(|n| named.insert(*n)) {
            tracing::warn!("skipping {name}: {why} ({e}) (--backend nvml)");
        }
    })
}

fn options(s: &Settings) -> targets::Options<'_> {
    targets::Options {
        gpus: &s.gpus,
        switches: &s.switches,
        cpus: &s.cpus,
        compute_instances: s.compute_instances,
        use_old_namespace: s.use_old_namespace,
        replace_blanks_in_model_name: s.replace_blanks_in_model_name,
        hostname: s.hostname.as_deref(),
        emulate: s.emulate,
    }
}
