//! The simulated driver state behind the C exports: the node dcgm-sim builds from the same
//! profile (so GPUs, UUIDs, PCI ids and MIG layouts agree with the simulated DCGM), the
//! profile's processes and their utilisation samples, device handles, and the run-time
//! faults NVML can see.
//!
//! Per-process utilisation is sampled once per simulated second, as the driver keeps a
//! buffer of recent samples that `nvmlDeviceGetProcessUtilization` reads from. Samples are
//! taken lazily: each call first records the seconds that passed since the previous one,
//! with the processes as they were, then applies the faults that arrived, so a control
//! command shows from the second it was read in and never rewrites history.
//!
//! Everything here is safe Rust; the exports translate pointers to and from these answers.

#![forbid(unsafe_code)]

use crate::ffi::{self, Return};
use dcgm_sim_model::faults::{self, ControlFile, Fault};
use dcgm_sim_model::generator::mix;
use dcgm_sim_model::node::{Ci, Gi, Gpu, Node};
use dcgm_sim_model::profile::{
    FieldValueBug, GiSpec, MigLookup, ProcessSpec, Profile, ScheduledFault,
};
use dcgm_sim_model::values::World;
use dcgm_sim_model::FE_GPU;
use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds per second: NVML's sample timestamps are CPU time in µs.
const US: u64 = 1_000_000;

/// The wall clock in µs since the epoch, the clock NVML stamps samples with.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Handles are tagged integers, never dereferenced: `BASE | gpu << 8 | slot`, slot 0 the
/// physical GPU and slot n its MIG device n-1. The tag lets a stale or foreign pointer be
/// told apart from a handle of ours (INVALID_ARGUMENT, as NVML answers).
const HANDLE_BASE: usize = 0x6e76_6d00_0000;
const HANDLE_TAG_MASK: usize = !0xff_ffff;

/// One device an NVML handle can name.
#[derive(Clone, Copy, Debug)]
pub enum Dev<'a> {
    Gpu(&'a Gpu),
    /// A MIG device: one compute instance of one GPU instance.
    Mig {
        gpu: &'a Gpu,
        gi: &'a Gi,
        ci: &'a Ci,
        /// Its index under the parent (nvmlDeviceGetMigDeviceHandleByIndex).
        index: u32,
    },
}

impl<'a> Dev<'a> {
    pub fn gpu(&self) -> &'a Gpu {
        match *self {
            Dev::Gpu(g) | Dev::Mig { gpu: g, .. } => g,
        }
    }

    pub fn handle(&self) -> usize {
        match *self {
            Dev::Gpu(g) => handle_of(g.id, 0),
            Dev::Mig { gpu, index, .. } => handle_of(gpu.id, index + 1),
        }
    }
}

/// The handle of a whole GPU.
pub fn gpu_handle(gpu: u32) -> usize {
    handle_of(gpu, 0)
}

fn handle_of(gpu: u32, slot: u32) -> usize {
    HANDLE_BASE | (gpu as usize) << 8 | slot as usize
}

/// The simulated driver, alive between the first `nvmlInit` and the last `nvmlShutdown`.
pub struct Sim {
    /// The node and what its fields read, as the simulated DCGM computes them: NVML's
    /// value calls answer from the same readings.
    world: World,
    processes: Vec<ProcessSpec>,
    control: Option<ControlFile>,
    /// Profile faults not yet applied.
    scheduled: Vec<ScheduledFault>,
    /// When the driver started, µs since the epoch.
    start_us: u64,
    /// Per GPU id: the utilisation samples of the last `history_s` seconds, oldest first.
    samples: BTreeMap<u32, VecDeque<ffi::ProcessUtilizationSample>>,
    /// The last second (since the epoch) whose samples are taken.
    sampled_through_s: u64,
    history_s: u64,
    /// How the direct MIG lookups answer (`[nvml] mig_lookup`).
    pub mig_lookup: MigLookup,
    /// MIG lookups never return (`[nvml] hang_mig_lookup`).
    pub hang_mig_lookup: bool,
    /// How `nvmlDeviceGetFieldValues` misanswers (`[nvml] field_value_bugs`).
    pub field_value_bugs: Vec<FieldValueBug>,
    /// nvmlInit calls not yet matched by nvmlShutdown.
    pub refcount: u32,
    /// Event sets by id (`nvmlEventSetCreate`).
    event_sets: BTreeMap<usize, EventSetState>,
    next_event_set: usize,
    /// GPM samples by id (`nvmlGpmSampleAlloc`), each empty until taken.
    gpm_samples: BTreeMap<usize, Option<GpmTaken>>,
    next_gpm_sample: usize,
    /// The device sample buffers clients asked for (`nvmlDeviceGetSamples`).
    device_samples: crate::samples::DeviceSamples,
}

/// A GPM sample taken (`nvmlGpmSampleGet`, `nvmlGpmMigSampleGet`): of which entity, when.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GpmTaken {
    entity: (u32, u32),
    at_us: i64,
}

/// GPM sample handles, tagged like the others.
/// Stores `value` under the next key of a table of driver-side objects and returns its
/// handle, the key tagged with the table's `base`.
fn table_insert<T>(
    table: &mut BTreeMap<usize, T>,
    next: &mut usize,
    base: usize,
    value: T,
) -> usize {
    let id = *next;
    *next += 1;
    table.insert(id, value);
    base | id
}

/// The key behind a handle of the table tagged `base`: a handle of another kind, or one
/// freed or never given out, is INVALID_ARGUMENT.
fn table_id<T>(table: &BTreeMap<usize, T>, base: usize, handle: usize) -> Result<usize, Return> {
    let id = handle & !HANDLE_TAG_MASK;
    if handle & HANDLE_TAG_MASK != base || !table.contains_key(&id) {
        return Err(ffi::ERROR_INVALID_ARGUMENT);
    }
    Ok(id)
}

const GPM_SAMPLE_BASE: usize = 0x6e76_6700_0000;

/// NVML GPM metric id -> the profiling field the simulated DCGM reads for it
/// (`DcgmFieldIdToNvmlGpmMetricId` in DCGM's dcgm_fields.cpp) and the factor from DCGM's
/// unit to GPM's: GPM answers percent where DCGM's fields are ratios, MiB/s where DCGM's
/// are bytes/s (DCGM multiplies by 2^20 again, `DCGM_FIELD_ID_IS_GPM_MIB_BANDWIDTH`).
const GPM_METRICS: [(u32, u16, f64); 9] = [
    (1, 1001, 100.0),              // NVML_GPM_METRIC_GRAPHICS_UTIL
    (2, 1002, 100.0),              // NVML_GPM_METRIC_SM_UTIL
    (3, 1003, 100.0),              // NVML_GPM_METRIC_SM_OCCUPANCY
    (5, 1004, 100.0),              // NVML_GPM_METRIC_ANY_TENSOR_UTIL
    (10, 1005, 100.0),             // NVML_GPM_METRIC_DRAM_BW_UTIL
    (20, 1009, 1.0 / 1_048_576.0), // NVML_GPM_METRIC_PCIE_TX_PER_SEC
    (21, 1010, 1.0 / 1_048_576.0), // NVML_GPM_METRIC_PCIE_RX_PER_SEC
    (60, 1012, 1.0 / 1_048_576.0), // NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
    (61, 1011, 1.0 / 1_048_576.0), // NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
];

/// An event set: per GPU registered for XIDs, the first entry of the model's XID log
/// (`FaultState::xids`, shared with the simulated DCGM) it hears of, as a driver tells a
/// set only of events after its registration; and how far the set has been read.
#[derive(Default)]
struct EventSetState {
    gpus: BTreeMap<u32, usize>,
    cursor: usize,
}

/// One XID event as `nvmlEventSetWait_v2` reports it: on the physical GPU, attributed to a
/// GPU instance and compute instance (NVML ids) where the XID hit one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct XidEvent {
    pub gpu: u32,
    pub xid: i64,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
}

/// Event-set handles are tagged like device handles, with a tag of their own.
const EVENT_SET_BASE: usize = 0x6e76_6500_0000;

impl Sim {
    /// The node of `DCGM_SIM_PROFILE` (or dcgm-sim's built-in one), following
    /// `DCGM_SIM_CONTROL` like the simulated DCGM does.
    pub fn from_env() -> Result<Sim, String> {
        let profile = match std::env::var_os("DCGM_SIM_PROFILE") {
            Some(p) => Profile::load(std::path::Path::new(&p))
                .map_err(|e| format!("DCGM_SIM_PROFILE: {e}"))?,
            None => Profile::builtin_default(),
        };
        let mut sim = Sim::new(&profile);
        sim.control = std::env::var_os("DCGM_SIM_CONTROL").map(|c| ControlFile::new(c.into()));
        Ok(sim)
    }

    pub fn new(profile: &Profile) -> Sim {
        Sim::new_at(profile, now_us())
    }

    /// A driver started at `start_us` (µs since the epoch).
    pub fn new_at(profile: &Profile, start_us: u64) -> Sim {
        Sim {
            world: World::new(Node::build(profile), start_us as i64, &profile.fields),
            processes: profile.processes.clone(),
            control: None,
            scheduled: profile.faults.clone(),
            start_us,
            samples: BTreeMap::new(),
            sampled_through_s: (start_us / US).saturating_sub(1),
            history_s: u64::from(profile.nvml.sample_history_s()),
            mig_lookup: profile.nvml.mig_lookup,
            hang_mig_lookup: profile.nvml.hang_mig_lookup,
            field_value_bugs: profile.nvml.field_value_bugs.clone(),
            refcount: 0,
            event_sets: BTreeMap::new(),
            next_event_set: 0,
            gpm_samples: BTreeMap::new(),
            next_gpm_sample: 0,
            device_samples: Default::default(),
        }
    }

    /// Applies the faults NVML can observe that arrived since the last call (GPUs lost and
    /// recovered, MIG reconfigurations, processes), sampling utilisation up to now.
    pub fn catch_up(&mut self) {
        self.catch_up_at(now_us());
    }

    /// [`Sim::catch_up`] at `now_us` (µs since the epoch). Scheduled faults apply in time
    /// order, each after the seconds before it are sampled; the control file's new lines
    /// apply after the seconds before this one, so they show in the current second's
    /// samples.
    pub fn catch_up_at(&mut self, now_us: u64) {
        let elapsed_us = now_us.saturating_sub(self.start_us) as f64;
        let (mut due, later): (Vec<ScheduledFault>, Vec<ScheduledFault>) = self
            .scheduled
            .drain(..)
            .partition(|f| f.at_s * 1e6 <= elapsed_us);
        self.scheduled = later;
        due.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        for f in due {
            let at_us = self.start_us + (f.at_s * 1e6) as u64;
            self.sample_through((at_us / US).saturating_sub(1));
            self.device_samples.catch_up(&self.world, at_us);
            // Profile validation parsed every action already.
            if let Ok(fault) = faults::parse_line(&f.action) {
                self.apply(&fault, at_us);
            }
        }
        let now_s = now_us / US;
        self.sample_through(now_s.saturating_sub(1));
        self.device_samples.catch_up(&self.world, now_us);
        let polled = self.control.as_mut().map(ControlFile::poll);
        for f in polled.unwrap_or_default() {
            self.apply(&f, now_us);
        }
        self.sample_through(now_s);
    }

    /// Takes the samples of every second after the last one sampled up to `last_s`, at
    /// most the `history_s` newest, and forgets those older than the history.
    fn sample_through(&mut self, last_s: u64) {
        if last_s <= self.sampled_through_s {
            return;
        }
        let oldest_kept = (last_s + 1).saturating_sub(self.history_s);
        for s in (self.sampled_through_s + 1).max(oldest_kept)..=last_s {
            self.sample_second(s);
        }
        self.sampled_through_s = last_s;
        for ring in self.samples.values_mut() {
            while ring
                .front()
                .is_some_and(|f| f.time_stamp < oldest_kept * US)
            {
                ring.pop_front();
            }
        }
    }

    /// One second's samples: a sample per process with non-zero utilisation on each whole
    /// GPU (nvml.h: "one utilization sample structure is returned per process running, that
    /// had some non-zero utilization during the last sample period"; none under MIG, none
    /// from a lost GPU).
    fn sample_second(&mut self, s: u64) {
        let t_s = s.saturating_sub(self.start_us / US) as f64;
        for gpu in &self.world.node.gpus {
            if gpu.lost || gpu.mig.is_some() {
                continue;
            }
            let ring = self.samples.entry(gpu.id).or_default();
            for p in self
                .processes
                .iter()
                .filter(|p| p.gpu == gpu.id && p.gpu_instance.is_none())
            {
                let key = mix(self.world.node.seed ^ (u64::from(p.pid) << 8 | u64::from(gpu.id)));
                let sm_util = p.sm_util_at(t_s, key);
                if sm_util == 0 && p.mem_util == 0 {
                    continue;
                }
                ring.push_back(ffi::ProcessUtilizationSample {
                    pid: p.pid,
                    time_stamp: s * US,
                    sm_util,
                    mem_util: p.mem_util,
                    enc_util: 0,
                    dec_util: 0,
                });
            }
        }
    }

    fn apply(&mut self, fault: &Fault, at_us: u64) {
        let at = at_us as i64;
        let gpus = self.world.node.gpus.len() as u32;
        let faults = &mut self.world.faults;
        // The value faults, as the simulated DCGM applies them (dcgm-sim's engine): NVML's
        // value calls read the same readings.
        match fault {
            Fault::Xid { gpu, xid } if *gpu < gpus => faults.xids.push(((FE_GPU, *gpu), at, *xid)),
            Fault::InstanceXid { gpu, gi, ci, xid } => {
                if let Some(e) = self.world.node.instance_entity(*gpu, *gi, *ci) {
                    faults.xids.push((e, at, *xid));
                }
            }
            Fault::ClockEvent { gpu, reasons } if *gpu < gpus => {
                faults.add_clock_event(*gpu, at, *reasons)
            }
            _ => {
                faults.apply_field_fault(fault, at);
            }
        }
        match fault {
            Fault::GpuLost { gpu } => {
                if let Some(g) = self.world.node.gpu_mut(*gpu) {
                    g.lost = true;
                }
            }
            Fault::GpuRecovered { gpu } => {
                if let Some(g) = self.world.node.gpu_mut(*gpu) {
                    g.lost = false;
                }
            }
            Fault::MigReconfigure { gpu, instances } => {
                let specs: Option<Vec<GiSpec>> = instances
                    .iter()
                    .map(|item| {
                        faults::split_mig_item(item).ok().map(|(name, n)| GiSpec {
                            profile: name.to_string(),
                            compute_instances: Some(n),
                            ..GiSpec::default()
                        })
                    })
                    .collect();
                // The simulated DCGM reports a bad line; here it is simply not applied.
                let Some(specs) = specs else { return };
                if dcgm_sim_model::profile::check_layout(&specs, self.world.node.max_mig).is_err() {
                    return;
                }
                let layout = (!specs.is_empty()).then_some(specs.as_slice());
                self.world.node.set_mig(*gpu, layout);
            }
            Fault::ProcessStart { process } => {
                let twice = self
                    .processes
                    .iter()
                    .any(|p| p.pid == process.pid && p.gpu == process.gpu);
                let placed = process.check_placement(&self.world.node).and_then(|()| {
                    if twice {
                        Err(format!("already runs on GPU {}", process.gpu))
                    } else {
                        Ok(())
                    }
                });
                match placed {
                    Ok(()) => self.processes.push((**process).clone()),
                    // Where the simulated DCGM reports a bad control line.
                    Err(e) => eprintln!("nvml-sim: process_start {} ignored: {e}", process.pid),
                }
            }
            Fault::ProcessStop { pid, gpu } => self
                .processes
                .retain(|p| p.pid != *pid || matches!(gpu, Some(g) if *g != p.gpu)),
            Fault::ProcessUtil {
                pid,
                sm_util,
                mem_util,
            } => self.each_process(*pid, |p| {
                p.sm_util = Some(*sm_util);
                p.sm_util_gen = None;
                if let Some(m) = mem_util {
                    p.mem_util = *m;
                }
            }),
            Fault::ProcessMemory { pid, mib } => {
                self.each_process(*pid, |p| p.used_memory_mib = *mib)
            }
            _ => {}
        }
    }

    fn each_process(&mut self, pid: u32, mut f: impl FnMut(&mut ProcessSpec)) {
        let mut found = false;
        for p in self.processes.iter_mut().filter(|p| p.pid == pid) {
            f(p);
            found = true;
        }
        if !found {
            eprintln!("nvml-sim: no process {pid} runs (control line ignored)");
        }
    }

    /// A new, empty event set's handle.
    pub fn create_event_set(&mut self) -> usize {
        let (sets, next) = (&mut self.event_sets, &mut self.next_event_set);
        table_insert(sets, next, EVENT_SET_BASE, EventSetState::default())
    }

    fn event_set_id(&self, handle: usize) -> Result<usize, Return> {
        table_id(&self.event_sets, EVENT_SET_BASE, handle)
    }

    pub fn check_event_set(&self, handle: usize) -> Result<(), Return> {
        self.event_set_id(handle).map(|_| ())
    }

    pub fn free_event_set(&mut self, handle: usize) -> Result<(), Return> {
        let id = self.event_set_id(handle)?;
        self.event_sets.remove(&id);
        Ok(())
    }

    /// Registers a whole GPU's XIDs with a set: XIDs from now on are reported.
    pub fn register_xids(&mut self, handle: usize, gpu: u32) -> Result<(), Return> {
        let id = self.event_set_id(handle)?;
        let from = self.world.faults.xids.len();
        if let Some(set) = self.event_sets.get_mut(&id) {
            set.gpus.entry(gpu).or_insert(from);
        }
        Ok(())
    }

    /// The set's next unread XID event, if one happened.
    pub fn next_event(&mut self, handle: usize) -> Result<Option<XidEvent>, Return> {
        let id = self.event_set_id(handle)?;
        let Some(set) = self.event_sets.get_mut(&id) else {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        };
        let log = &self.world.faults.xids;
        while set.cursor < log.len() {
            let (entity, _, xid) = log[set.cursor];
            let at = set.cursor;
            set.cursor += 1;
            // An instance that a reconfiguration removed since is no longer named.
            let Some((gpu, gi, ci)) = self.world.node.nvml_ids(entity) else {
                continue;
            };
            if set.gpus.get(&gpu).is_some_and(|&from| at >= from) {
                return Ok(Some(XidEvent {
                    gpu,
                    xid,
                    gpu_instance: gi,
                    compute_instance: ci,
                }));
            }
        }
        Ok(None)
    }

    /// GPM on a GPU: Hopper and newer (compute capability 9.0+) where the node has the
    /// profiling metrics DCGM serves.
    pub fn gpm_supported(&self, gpu: &Gpu) -> bool {
        gpu.compute_capability >= 90 && self.world.node.dcp
    }

    pub fn gpm_alloc(&mut self) -> usize {
        let (samples, next) = (&mut self.gpm_samples, &mut self.next_gpm_sample);
        table_insert(samples, next, GPM_SAMPLE_BASE, None)
    }

    fn gpm_id(&self, handle: usize) -> Result<usize, Return> {
        table_id(&self.gpm_samples, GPM_SAMPLE_BASE, handle)
    }

    pub fn gpm_free(&mut self, handle: usize) -> Result<(), Return> {
        let id = self.gpm_id(handle)?;
        self.gpm_samples.remove(&id);
        Ok(())
    }

    /// Takes a sample of a whole GPU (`gi: None`) or of its GPU instance with NVML id `gi`.
    pub fn gpm_take(&mut self, handle: usize, gpu: u32, gi: Option<u32>) -> Result<(), Return> {
        let id = self.gpm_id(handle)?;
        let g = self
            .world
            .node
            .gpu(gpu)
            .ok_or(ffi::ERROR_INVALID_ARGUMENT)?;
        if !self.gpm_supported(g) {
            return Err(ffi::ERROR_NOT_SUPPORTED);
        }
        let entity = match gi {
            None => (FE_GPU, gpu),
            Some(gi) => self
                .world
                .node
                .instance_entity(gpu, gi, None)
                .ok_or(ffi::ERROR_INVALID_ARGUMENT)?,
        };
        let taken = GpmTaken {
            entity,
            at_us: now_us() as i64,
        };
        self.gpm_samples.insert(id, Some(taken));
        Ok(())
    }

    /// One metric between two samples of the same entity: the simulated DCGM's reading of
    /// its field at the later sample, in GPM's unit; NOT_SUPPORTED for a metric not modelled.
    pub fn gpm_metric(&self, s1: usize, s2: usize, metric: u32) -> Result<f64, Return> {
        use dcgm_sim_model::generator::{FP64_BLANK, INT64_BLANK};
        let taken = |h: usize| -> Result<GpmTaken, Return> {
            let id = self.gpm_id(h)?;
            self.gpm_samples[&id].ok_or(ffi::ERROR_INVALID_ARGUMENT)
        };
        let (a, b) = (taken(s1)?, taken(s2)?);
        if a.entity != b.entity || b.at_us <= a.at_us {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let &(_, field, factor) = GPM_METRICS
            .iter()
            .find(|m| m.0 == metric)
            .ok_or(ffi::ERROR_NOT_SUPPORTED)?;
        let meta = dcgm_sim_model::fields::by_id(field).ok_or(ffi::ERROR_NOT_SUPPORTED)?;
        match self.world.read(b.entity, meta, b.at_us, a.at_us).0 {
            dcgm_sim_model::Value::Double(d) if d < FP64_BLANK => Ok(d * factor),
            dcgm_sim_model::Value::Int64(i) if i < INT64_BLANK => Ok(i as f64 * factor),
            _ => Err(ffi::ERROR_NOT_SUPPORTED),
        }
    }

    /// Where `hang_mig_lookup` is set, blocks for good, as a call into a hung driver does
    /// (holding the driver's lock, so every other call waits too).
    pub fn hang_if_asked(&self) {
        if self.hang_mig_lookup {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }

    pub fn driver_version(&self) -> &str {
        &self.world.node.driver_version
    }

    pub fn nvml_version(&self) -> &str {
        &self.world.node.nvml_version
    }

    pub fn cuda_driver_version(&self) -> i64 {
        self.world.node.cuda_driver_version
    }

    pub fn gpu_count(&self) -> u32 {
        self.world.node.gpus.len() as u32
    }

    pub fn gpu(&self, index: u32) -> Option<Dev<'_>> {
        self.world.node.gpu(index).map(Dev::Gpu)
    }

    /// MIG devices of a GPU in the order NVML indexes them: by GPU instance (in DCGM's
    /// entity order), then compute instance.
    pub fn mig_devices<'a>(&'a self, gpu: &'a Gpu) -> impl Iterator<Item = Dev<'a>> + 'a {
        gpu.instances()
            .iter()
            .flat_map(move |gi| gi.cis.iter().map(move |ci| (gi, ci)))
            .enumerate()
            .map(move |(i, (gi, ci))| Dev::Mig {
                gpu,
                gi,
                ci,
                index: i as u32,
            })
    }

    /// The device behind a handle we gave out; `None` for anything else (including a MIG
    /// device that a reconfiguration removed).
    pub fn device(&self, handle: usize) -> Option<Dev<'_>> {
        if handle & HANDLE_TAG_MASK != HANDLE_BASE {
            return None;
        }
        let gpu = self.world.node.gpu(((handle >> 8) & 0xffff) as u32)?;
        match (handle & 0xff) as u32 {
            0 => Some(Dev::Gpu(gpu)),
            slot => self.mig_devices(gpu).nth(slot as usize - 1),
        }
    }

    pub fn by_uuid(&self, uuid: &str) -> Option<Dev<'_>> {
        self.world.node.gpus.iter().find_map(|g| {
            if g.uuid == uuid {
                Some(Dev::Gpu(g))
            } else {
                self.mig_devices(g)
                    .find(|d| mig_uuid(d) == Some(uuid.to_string()))
            }
        })
    }

    pub fn by_pci_bus_id(&self, id: &str) -> Option<Dev<'_>> {
        let want = parse_bus_id(id)?;
        self.world
            .node
            .gpus
            .iter()
            .find(|g| parse_bus_id(&g.pci_bus_id) == Some(want))
            .map(Dev::Gpu)
    }

    /// Maximum MIG devices of a GPU: zero unless MIG mode is on (nvml.h), else the model's
    /// slice count (7 on A100/H100), or more if the layout has more compute instances.
    pub fn max_mig_devices(&self, gpu: &Gpu) -> u32 {
        match &gpu.mig {
            None => 0,
            Some(gis) => {
                let cis: usize = gis.iter().map(|gi| gi.cis.len()).sum();
                (gpu.mig_slices.max(0) as u32).max(cis as u32)
            }
        }
    }

    /// Processes on a device as NVML lists them: on a GPU in MIG mode every instance's,
    /// tagged with its GPU/compute-instance ids; on a MIG device only that instance's.
    pub fn processes(&self, dev: &Dev<'_>, graphics: bool) -> Vec<ffi::ProcessInfo> {
        let gpu = dev.gpu();
        self.processes
            .iter()
            .filter(|p| {
                p.gpu == gpu.id
                    && if graphics {
                        p.is_graphics()
                    } else {
                        p.is_compute()
                    }
            })
            .filter_map(|p| {
                let placed = match (dev, &gpu.mig, p.gpu_instance) {
                    (Dev::Gpu(_), None, None) => Some((ffi::NO_INSTANCE, ffi::NO_INSTANCE)),
                    (Dev::Gpu(_), Some(gis), Some(gi)) => {
                        let ci = p.compute_instance.unwrap_or(0);
                        gis.iter()
                            .any(|g| g.nvml_id == gi && g.cis.iter().any(|c| c.nvml_id == ci))
                            .then_some((gi, ci))
                    }
                    (Dev::Mig { gi, ci, .. }, Some(_), Some(pgi)) => (gi.nvml_id == pgi
                        && ci.nvml_id == p.compute_instance.unwrap_or(0))
                    .then_some((gi.nvml_id, ci.nvml_id)),
                    // A process whose placement no longer exists (MIG changed) is gone.
                    _ => None,
                }?;
                Some(ffi::ProcessInfo {
                    pid: p.pid,
                    used_gpu_memory: p.used_memory_mib * MIB,
                    gpu_instance_id: placed.0,
                    compute_instance_id: placed.1,
                })
            })
            .collect()
    }

    /// Per-process utilisation samples of a whole GPU newer than `last_seen_us`, oldest
    /// first: one per process and second the driver still keeps.
    pub fn utilization_samples(
        &self,
        gpu: &Gpu,
        last_seen_us: u64,
    ) -> Vec<ffi::ProcessUtilizationSample> {
        let Some(ring) = self.samples.get(&gpu.id) else {
            return Vec::new();
        };
        let mut out: Vec<_> = ring
            .iter()
            .rev()
            .take_while(|s| s.time_stamp > last_seen_us)
            .copied()
            .collect();
        out.reverse();
        out
    }

    /// The number the simulated DCGM reads for DCGM field `field` on this device now (a MIG
    /// device reads its GPU instance's): NVML's value calls answer from it, as the real
    /// DCGM reads NVML. A reading DCGM holds as a sentinel (a field made unsupported, a
    /// blank) is NOT_SUPPORTED here; a lost GPU is GPU_IS_LOST.
    pub fn reading(&self, dev: &Dev<'_>, field: u16) -> Result<f64, Return> {
        use dcgm_sim_model::generator::{FP64_BLANK, INT64_BLANK};
        use dcgm_sim_model::Value;
        alive(dev)?;
        let meta = dcgm_sim_model::fields::by_id(field).ok_or(ffi::ERROR_NOT_SUPPORTED)?;
        let ent = match dev {
            Dev::Gpu(g) => (FE_GPU, g.id),
            Dev::Mig { gi, .. } => (dcgm_sim_model::FE_GPU_I, gi.entity_id),
        };
        let now = now_us() as i64;
        // Events (clock-event reasons) of the last second count as current.
        match self.world.read(ent, meta, now, now - US as i64).0 {
            Value::Int64(i) if i < INT64_BLANK => Ok(i as f64),
            Value::Double(d) if d < FP64_BLANK => Ok(d),
            _ => Err(ffi::ERROR_NOT_SUPPORTED),
        }
    }

    /// The samples of buffer `kind` (`nvmlSamplingType_t`) of the GPU behind `handle` newer
    /// than `last_seen` (`nvmlDeviceGetSamples`): a MIG device or a type without a buffer
    /// NOT_SUPPORTED, a lost GPU GPU_IS_LOST.
    pub fn device_samples(
        &mut self,
        handle: usize,
        kind: std::ffi::c_uint,
        last_seen: u64,
    ) -> Result<Vec<ffi::Sample>, Return> {
        let dev = self.device(handle).ok_or(ffi::ERROR_INVALID_ARGUMENT)?;
        alive(&dev)?;
        let Dev::Gpu(g) = dev else {
            return Err(ffi::ERROR_NOT_SUPPORTED);
        };
        let gpu = g.id;
        self.device_samples
            .newer(&self.world, gpu, kind, last_seen, now_us())
            .ok_or(ffi::ERROR_NOT_SUPPORTED)
    }

    /// NVLink KiB counter `id` (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`/`RX`) of the
    /// device's GPU, all links, at `now_us` (the answer's timestamp): the counters the
    /// simulated DCGM computes its NVLink rates from. NOT_SUPPORTED where the profile or a
    /// fault makes NVML refuse it.
    pub fn nvlink_kib(&self, dev: &Dev<'_>, id: u32, now_us: i64) -> Result<u64, Return> {
        alive(dev)?;
        self.world
            .nvlink_kib(dev.gpu(), id, now_us)
            .ok_or(ffi::ERROR_NOT_SUPPORTED)
    }

    /// (total, reserved, used) bytes: total and reserved as the simulated DCGM's FB_TOTAL
    /// and FB_RESERVED; used is what the device's processes hold where the node runs any
    /// on it (the profile's `[[processes]]`, started and stopped at run time), else DCGM's
    /// FB_USED.
    pub fn memory(&self, dev: &Dev<'_>) -> (u64, u64, u64) {
        let mib = |f: u16| self.reading(dev, f).map_or(0, |v| v.max(0.0) as u64 * MIB);
        let (total, reserved) = (mib(250), mib(253));
        let held: Vec<u64> = match dev {
            Dev::Gpu(_) => self
                .processes(dev, false)
                .iter()
                .chain(self.processes(dev, true).iter())
                .fold(Vec::new(), |mut acc: Vec<(u32, u64)>, p| {
                    if !acc.iter().any(|(pid, _)| *pid == p.pid) {
                        acc.push((p.pid, p.used_gpu_memory));
                    }
                    acc
                })
                .iter()
                .map(|(_, m)| *m)
                .collect(),
            // Memory belongs to the GPU instance, which its compute instances share.
            Dev::Mig { gpu, gi, .. } => self
                .processes
                .iter()
                .filter(|p| p.gpu == gpu.id && p.gpu_instance == Some(gi.nvml_id))
                .map(|p| p.used_memory_mib * MIB)
                .collect(),
        };
        let used = if held.is_empty() {
            mib(252)
        } else {
            held.iter().sum()
        };
        (total, reserved, used.min(total.saturating_sub(reserved)))
    }

    pub fn process_name(&self, pid: u32) -> Option<&str> {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.name.as_str())
    }
}

const MIB: u64 = 1024 * 1024;

/// The UUID of a MIG device. The first compute instance of a GPU instance carries the
/// instance's UUID, the one the simulated DCGM reports for it (DCGM_FI_DEV_UUID of the
/// GPU_I entity); further compute instances get their own.
pub fn mig_uuid(dev: &Dev<'_>) -> Option<String> {
    let Dev::Mig { gi, ci, .. } = dev else {
        return None;
    };
    if gi.cis.first().is_some_and(|c| c.nvml_id == ci.nvml_id) {
        return Some(gi.uuid.clone());
    }
    let seed = gi
        .uuid
        .bytes()
        .fold(u64::from(ci.nvml_id), |h, b| mix(h ^ u64::from(b)));
    let (h1, h2) = (mix(seed), mix(seed ^ 0x4349));
    Some(format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    ))
}

/// What nvmlDeviceGetName answers: the board name, or for a MIG device the board name and
/// the instance profile (`... MIG 3g.40gb`, `... MIG 1c.3g.40gb` for a smaller compute
/// instance), as the driver names them.
pub fn name(dev: &Dev<'_>) -> String {
    match dev {
        Dev::Gpu(g) => g.model.clone(),
        Dev::Mig { gpu, gi, ci, .. } if ci.slices < gi.slices => {
            format!("{} MIG {}c.{}", gpu.model, ci.slices, gi.profile)
        }
        Dev::Mig { gpu, gi, .. } => format!("{} MIG {}", gpu.model, gi.profile),
    }
}

pub fn uuid(dev: &Dev<'_>) -> String {
    match dev {
        Dev::Gpu(g) => g.uuid.clone(),
        Dev::Mig { .. } => mig_uuid(dev).unwrap_or_default(),
    }
}

/// (domain, bus, device) of a PCI bus id in any of NVML's spellings:
/// `00000000:18:00.0`, `0000:18:00.0`, `18:00.0`, any case.
pub fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let (rest, _function) = s.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let hex = |p: &str| u32::from_str_radix(p, 16).ok();
    match parts.as_slice() {
        [domain, bus, dev] => Some((hex(domain)?, hex(bus)?, hex(dev)?)),
        [bus, dev] => Some((0, hex(bus)?, hex(dev)?)),
        _ => None,
    }
}

/// The nvmlPciInfo_t of a device; a MIG device reports its parent's.
pub fn pci_info(dev: &Dev<'_>) -> ffi::PciInfo {
    let g = dev.gpu();
    let (domain, bus, device) = parse_bus_id(&g.pci_bus_id).unwrap_or((0, 0, 0));
    let mut info = ffi::PciInfo {
        bus_id_legacy: [0; ffi::DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
        domain,
        bus,
        device,
        pci_device_id: g.pci_device_id << 16 | 0x10de,
        // What the simulated DCGM reports as DCGM_FI_DEV_PCI_SUBSYS_ID.
        pci_sub_system_id: 0x16c1_10de,
        bus_id: [0; ffi::DEVICE_PCI_BUS_ID_BUFFER_SIZE],
    };
    copy_c(
        &mut info.bus_id_legacy,
        &format!("{domain:04X}:{bus:02X}:{device:02X}.0"),
    );
    copy_c(
        &mut info.bus_id,
        &format!("{domain:08X}:{bus:02X}:{device:02X}.0"),
    );
    info
}

/// Copies `s` into a fixed C buffer, truncated, always NUL-terminated.
pub fn copy_c(buf: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(buf.len().saturating_sub(1));
    for (d, b) in buf.iter_mut().zip(s.bytes().take(n)) {
        *d = b as std::ffi::c_char;
    }
    if let Some(end) = buf.get_mut(n) {
        *end = 0;
    }
}

/// A lost GPU answers GPU_IS_LOST to anything that would need the hardware.
pub fn alive(dev: &Dev<'_>) -> Result<(), Return> {
    if dev.gpu().lost {
        Err(ffi::ERROR_GPU_IS_LOST)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim() -> Sim {
        Sim::new(
            &Profile::parse(
                "[gpus]\ncount = 2\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
                 [[mig]]\ngpu = 1\ninstances = [\"3g.40gb\", \"1g.10gb\"]\ncompute_instances = [3]\n\
                 [[processes]]\npid = 10\ngpu = 0\nused_memory_mib = 100\nsm_util = 30\n\
                 [[processes]]\npid = 11\ngpu = 1\ngpu_instance = 1\ncompute_instance = 2\nused_memory_mib = 7\n\
                 [[processes]]\npid = 12\ngpu = 1\ngpu_instance = 7\nkind = \"graphics\"\n",
            )
            .unwrap(),
        )
    }

    #[test]
    fn handles_round_trip_and_reject_strangers() {
        let s = sim();
        let g1 = s.gpu(1).unwrap();
        let migs: Vec<_> = s.mig_devices(g1.gpu()).collect();
        // 1g.10gb (one CI) first, then the 3g.40gb's three compute instances.
        assert_eq!(migs.len(), 4);
        for d in migs.iter().chain([&g1]) {
            assert_eq!(uuid(&s.device(d.handle()).unwrap()), uuid(d));
        }
        assert!(s.device(0).is_none());
        assert!(s.device(handle_of(1, 9)).is_none());
        assert!(s.device(handle_of(7, 0)).is_none());
        assert!(s.device(0x1234_5678).is_none());
    }

    #[test]
    fn mig_devices_carry_the_dcgm_instance_uuid_once() {
        let s = sim();
        let g = s.world.node.gpu(1).unwrap();
        let migs: Vec<_> = s.mig_devices(g).collect();
        let uuids: Vec<String> = migs.iter().map(uuid).collect();
        assert_eq!(uuids[0], g.instances()[0].uuid);
        assert_eq!(uuids[1], g.instances()[1].uuid);
        assert_ne!(uuids[2], uuids[1]);
        assert!(uuids.iter().all(|u| u.starts_with("MIG-") && u.len() == 40));
        assert_eq!(name(&migs[1]), "NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb");
        assert_eq!(name(&migs[0]), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
        assert!(matches!(
            s.by_uuid(&uuids[2]),
            Some(Dev::Mig { index: 2, .. })
        ));
    }

    #[test]
    fn processes_are_listed_where_they_run() {
        let s = sim();
        let g0 = s.gpu(0).unwrap();
        let p = s.processes(&g0, false);
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].pid, p[0].gpu_instance_id), (10, ffi::NO_INSTANCE));
        let g1 = s.gpu(1).unwrap();
        let all: Vec<(u32, u32, u32)> = s
            .processes(&g1, false)
            .iter()
            .map(|p| (p.pid, p.gpu_instance_id, p.compute_instance_id))
            .collect();
        assert_eq!(all, [(11, 1, 2)]);
        assert_eq!(s.processes(&g1, true)[0].pid, 12);
        let on_ci2: Vec<u32> = s
            .mig_devices(g1.gpu())
            .filter(|d| !s.processes(d, false).is_empty())
            .map(|d| match d {
                Dev::Mig { ci, .. } => ci.nvml_id,
                Dev::Gpu(_) => 99,
            })
            .collect();
        assert_eq!(on_ci2, [2]);
        assert_eq!(s.memory(&g0).2, 100 * MIB);
        let mut s = sim();
        s.catch_up();
        let g0 = s.gpu(0).unwrap();
        assert_eq!(s.utilization_samples(g0.gpu(), 0)[0].sm_util, 30);
        assert!(s.utilization_samples(g0.gpu(), u64::MAX).is_empty());
    }

    #[test]
    fn bus_ids_parse_in_every_spelling() {
        assert_eq!(parse_bus_id("00000000:18:00.0"), Some((0, 0x18, 0)));
        assert_eq!(parse_bus_id("0000:3b:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_bus_id("3B:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_bus_id("nonsense"), None);
    }

    #[test]
    fn mig_reconfiguration_and_lost_gpus_are_followed() {
        let mut s = sim();
        s.apply(
            &Fault::MigReconfigure {
                gpu: 1,
                instances: vec![],
            },
            now_us(),
        );
        assert_eq!(s.mig_devices(s.world.node.gpu(1).unwrap()).count(), 0);
        // Process 11 ran on an instance that no longer exists.
        assert!(s.processes(&s.gpu(1).unwrap(), false).is_empty());
        s.apply(&Fault::GpuLost { gpu: 0 }, now_us());
        assert_eq!(alive(&s.gpu(0).unwrap()), Err(ffi::ERROR_GPU_IS_LOST));
    }

    /// NVML's value calls read what the simulated DCGM reads, value faults included: the
    /// profile's constants, `set`, `not_supported` and `restored` lines, per GPU.
    #[test]
    fn readings_follow_the_profile_and_the_value_faults() {
        let p = Profile::parse(
            "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
             [[fields]]\nid = 150\ngen = { kind = \"constant\", value = 45.0 }\n\
             [[fields]]\nid = 150\ngpus = [1]\ngen = { kind = \"constant\", value = 61.0 }\n",
        )
        .unwrap();
        let mut s = Sim::new(&p);
        let temp = |s: &Sim, g: u32| s.reading(&s.gpu(g).unwrap(), 150);
        assert_eq!((temp(&s, 0), temp(&s, 1)), (Ok(45.0), Ok(61.0)));
        s.apply(&faults::parse_line("set 1 150 77").unwrap(), now_us());
        s.apply(
            &faults::parse_line("not_supported 0 150").unwrap(),
            now_us(),
        );
        assert_eq!(temp(&s, 1), Ok(77.0));
        assert_eq!(temp(&s, 0), Err(ffi::ERROR_NOT_SUPPORTED));
        s.apply(&faults::parse_line("restored 0 150").unwrap(), now_us());
        assert_eq!(temp(&s, 0), Ok(45.0));
        s.apply(&Fault::GpuLost { gpu: 1 }, now_us());
        assert_eq!(temp(&s, 1), Err(ffi::ERROR_GPU_IS_LOST));
    }

    /// A second boundary plus 0.3 s: the driver starts mid-second.
    const T0_S: u64 = 1_800_000_000;
    const T0: u64 = T0_S * US + 300_000;

    fn timed(extra: &str) -> Sim {
        Sim::new_at(
            &Profile::parse(&format!(
                "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
                 [nvml]\nprocess_sample_history_s = 5\n\
                 [[processes]]\npid = 10\ngpu = 0\nsm_util = 30\nmem_util = 4\n\
                 [[processes]]\npid = 20\ngpu = 0\n\
                 sm_util_gen = {{ kind = \"ramp\", start = 10, per_s = 10, max = 100 }}\n\
                 [[processes]]\npid = 30\ngpu = 0\nused_memory_mib = 512\n\
                 [[processes]]\npid = 40\ngpu = 1\nsm_util = 50\n{extra}"
            ))
            .unwrap(),
            T0,
        )
    }

    /// (pid, second after T0_S, sm_util) of GPU `gpu`'s samples newer than `last_seen`.
    fn seen(s: &Sim, gpu: u32, last_seen: u64) -> Vec<(u32, u64, u32)> {
        s.utilization_samples(s.world.node.gpu(gpu).unwrap(), last_seen)
            .iter()
            .map(|x| (x.pid, x.time_stamp / US - T0_S, x.sm_util))
            .collect()
    }

    #[test]
    fn one_sample_per_busy_process_and_second_newer_than_last_seen() {
        let mut s = timed("");
        assert!(seen(&s, 0, 0).is_empty(), "nothing before the first call");
        s.catch_up_at(T0);
        // pid 30 holds memory but no utilisation: no sample (nvml.h).
        assert_eq!(seen(&s, 0, 0), [(10, 0, 30), (20, 0, 10)]);
        s.catch_up_at(T0 + 3 * US);
        assert_eq!(
            seen(&s, 0, 0),
            [
                (10, 0, 30),
                (20, 0, 10),
                (10, 1, 30),
                (20, 1, 20),
                (10, 2, 30),
                (20, 2, 30),
                (10, 3, 30),
                (20, 3, 40)
            ]
        );
        // Strictly newer than lastSeenTimeStamp.
        assert_eq!(seen(&s, 0, (T0_S + 2) * US), [(10, 3, 30), (20, 3, 40)]);
        assert!(seen(&s, 0, (T0_S + 3) * US).is_empty());
        assert!(seen(&s, 0, u64::MAX).is_empty());
        assert_eq!(seen(&s, 1, 0).len(), 4);
        let sample = s.utilization_samples(s.world.node.gpu(0).unwrap(), 0)[0];
        assert_eq!((sample.mem_util, sample.enc_util), (4, 0));
        // Calls within the same second take no new sample.
        s.catch_up_at(T0 + 3 * US + 600_000);
        assert_eq!(seen(&s, 0, 0).len(), 8);
    }

    #[test]
    fn the_driver_keeps_a_bounded_history() {
        let mut s = timed("");
        s.catch_up_at(T0);
        // Long silence: only the newest 5 seconds exist, and were sampled.
        s.catch_up_at(T0 + 1000 * US);
        let got = seen(&s, 0, 0);
        assert_eq!(got.len(), 10);
        assert_eq!(got[0], (10, 996, 30));
        assert_eq!(got[9], (20, 1000, 100));
        s.catch_up_at(T0 + 1002 * US);
        assert_eq!(seen(&s, 0, 0)[0], (10, 998, 30));
        assert_eq!(seen(&s, 0, 0).len(), 10);
    }

    #[test]
    fn control_commands_change_processes_from_the_second_they_are_read() {
        let ctl = std::env::temp_dir().join(format!("nvml-sim-ctl-{}", std::process::id()));
        std::fs::write(&ctl, "").unwrap();
        let mut s = timed("");
        s.control = Some(ControlFile::new(ctl.clone()));
        s.catch_up_at(T0);
        let mut f = std::fs::OpenOptions::new().append(true).open(&ctl).unwrap();
        use std::io::Write;
        writeln!(
            f,
            "process_util 10 75 9\nprocess_stop 20\nprocess_memory 30 2048\n\
             process_start 50 0 sm_util=15 used_memory_mib=100 name=late\n\
             process_start 51 0 gpu_instance=1\nprocess_start 10 0 sm_util=1"
        )
        .unwrap();
        s.catch_up_at(T0 + 2 * US);
        // Second 1 passed before the lines were read: the old state. Second 2: the new one.
        assert_eq!(
            seen(&s, 0, T0_S * US),
            [(10, 1, 30), (20, 1, 20), (10, 2, 75), (50, 2, 15)]
        );
        let newest = s.utilization_samples(s.world.node.gpu(0).unwrap(), (T0_S + 1) * US);
        assert_eq!(newest[0].mem_util, 9);
        let g0 = s.gpu(0).unwrap();
        let listed: Vec<(u32, u64)> = s
            .processes(&g0, false)
            .iter()
            .map(|p| (p.pid, p.used_gpu_memory / MIB))
            .collect();
        // 51 (a MIG instance on a GPU without MIG) and a second 10 were refused.
        assert_eq!(listed, [(10, 0), (30, 2048), (50, 100)]);
        assert_eq!(s.process_name(50), Some("late"));
        assert_eq!(s.memory(&g0).2, 2148 * MIB);
        // A stop on another GPU leaves the process alone; on its own GPU it ends it.
        writeln!(f, "process_stop 40 0\nprocess_util 20 50").unwrap();
        s.catch_up_at(T0 + 3 * US);
        assert_eq!(seen(&s, 1, (T0_S + 2) * US), [(40, 3, 50)]);
        writeln!(f, "process_stop 40 1").unwrap();
        s.catch_up_at(T0 + 4 * US);
        assert!(seen(&s, 1, (T0_S + 3) * US).is_empty());
        std::fs::remove_file(&ctl).unwrap();
    }

    #[test]
    fn scheduled_process_changes_apply_at_their_second() {
        let mut s = timed(
            "[[faults]]\nat_s = 2.0\naction = \"process_util 10 90\"\n\
             [[faults]]\nat_s = 1.0\naction = \"gpu_lost 1\"\n",
        );
        s.catch_up_at(T0);
        s.catch_up_at(T0 + 4 * US);
        let pid10: Vec<u32> = seen(&s, 0, 0)
            .iter()
            .filter(|x| x.0 == 10)
            .map(|x| x.2)
            .collect();
        // T0 + 2.0 s falls in second 2.
        assert_eq!(pid10, [30, 30, 90, 90, 90]);
        // GPU 1 was lost during second 1: no samples from then on.
        let gpu1: Vec<u64> = seen(&s, 1, 0).iter().map(|x| x.1).collect();
        assert_eq!(gpu1, [0]);
    }
}
