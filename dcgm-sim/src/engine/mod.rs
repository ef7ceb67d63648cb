//! The simulated host engine: a node from a profile, DCGM's groups, field groups, watches
//! and sample cache, health, and run-time faults. Every C call (embedded mode) and every
//! remote request ends in [`Engine::handle`].
//!
//! Modules: [`profile`] (the TOML format), [`node`] (entities built from it), [`generator`]
//! (values over time), `values` (what a field reads on an entity), `watch` (the sample
//! cache), `health`, [`faults`] (run-time faults and the control file), [`clock`].

#![forbid(unsafe_code)]

pub mod clock;
mod dispatch;
mod health;
pub mod modules;
mod watch;

/// The node model lives in its own crate (shared with nvml-sim); its modules keep their
/// paths here.
pub use dcgm_sim_model::{faults, fields, generator, node, nvlink, profile, values};

pub use clock::{Clock, ManualClock, WallClock};
pub use faults::Fault;
pub use profile::Profile;

use crate::proto::*;
use generator::Sentinel;
use health::Health;
use node::Node;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use values::World;
use watch::{Key, Watch, WatcherId};

// dcgmReturn_t values the engine returns.
pub const ST_OK: i32 = 0;
pub const ST_BADPARAM: i32 = -1;
pub const ST_GENERIC_ERROR: i32 = -3;
pub const ST_UNINITIALIZED: i32 = -10;
pub const ST_NOT_CONFIGURED: i32 = -5;
pub const ST_NOT_SUPPORTED: i32 = -6;
pub const ST_UNKNOWN_FIELD: i32 = -13;
pub const ST_NO_DATA: i32 = -14;
pub const ST_NOT_WATCHED: i32 = -16;
pub const ST_NO_PERMISSION: i32 = -17;
pub const ST_GPU_IS_LOST: i32 = -18;
pub const ST_GPU_NOT_SUPPORTED: i32 = -22;
pub const ST_MAX_LIMIT: i32 = -24;
pub const ST_DUPLICATE_KEY: i32 = -26;
pub const ST_MODULE_NOT_LOADED: i32 = -33;
pub const ST_PROFILING_NOT_SUPPORTED: i32 = -36;
pub const ST_FUNCTION_NOT_FOUND: i32 = -20;

// dcgm_field_entity_group_t.
pub use dcgm_sim_model::{
    FE_CONNECTX, FE_CPU, FE_CPU_CORE, FE_GPU, FE_GPU_CI, FE_GPU_I, FE_LINK, FE_NONE, FE_SWITCH,
    FE_VGPU,
};
/// DCGM_FE_COUNT in 4.6: entity groups at or above it are unknown.
const FE_COUNT: u32 = 10;

// Group ids (dcgm_structs.h:451-456). Only the low 32 bits of a group id matter.
pub const GROUP_ALL_GPUS: u32 = 0x7fff_ffff;
pub const GROUP_ALL_NVSWITCHES: u32 = 0x7fff_fffe;
pub const GROUP_ALL_INSTANCES: u32 = 0x7fff_fffd;
pub const GROUP_ALL_COMPUTE_INSTANCES: u32 = 0x7fff_fffc;
pub const GROUP_ALL_ENTITIES: u32 = 0x7fff_fffb;
/// The engine's own groups: all GPUs (0) and all NvSwitches (1), created first
/// (DcgmGroupManager::CreateDefaultGroups); they count toward the limit.
const INTERNAL_GROUPS: usize = 2;
const MAX_GROUPS: usize = 64;
const MAX_FIELD_GROUPS: usize = 64;
const MAX_GROUP_ENTITIES: usize = 1024;
const MAX_FIELDS_PER_GROUP: usize = 128;
const MAX_NAME: usize = 256;

/// The field groups the host engine creates for itself at start-up
/// (DcgmHostEngineHandler::WatchHostEngineFields): ids 1-3, listed by GetAll, not removable.
const INTERNAL_FIELD_GROUPS: [(&str, &[&str]); 3] = [
    ("DCGM_INTERNAL_30SEC", &["DCGM_FI_DEV_ECC_MODE"]),
    (
        "DCGM_INTERNAL_HOURLY",
        &[
            "DCGM_FI_DEV_VGPU_SUPPORTED_INFO",
            "DCGM_FI_DEV_VGPU_SUPPORTED_IDS",
            "DCGM_FI_DEV_VGPU_TYPE_INFO",
            "DCGM_FI_DEV_VGPU_TYPE_NAME",
            "DCGM_FI_DEV_VGPU_TYPE_CLASS",
            "DCGM_FI_DEV_VGPU_TYPE_LICENSE",
        ],
    ),
    (
        "DCGM_INTERNAL_JOB",
        &[
            "DCGM_FI_DEV_PROCESS_ACCOUNTING_STATS",
            "DCGM_FI_DEV_BOARD_POWER_WATTS",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
            "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
            "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
            "DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL",
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
            "DCGM_FI_DEV_XID_ERROR",
            "DCGM_FI_DEV_POWER_VIOLATION",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
            "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",
            "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL",
            "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
            "DCGM_FI_DEV_INFOROM_VALID",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL",
        ],
    ),
];

struct Group {
    name: String,
    entities: Vec<(u32, u32)>,
    owner: u64,
}

struct FieldGroupDef {
    name: String,
    fields: Vec<u16>,
    /// `None` for the engine's internal field groups.
    owner: Option<u64>,
}

pub struct Engine {
    world: World,
    clock: Box<dyn Clock>,
    groups: BTreeMap<u32, Group>,
    next_group: u32,
    health_masks: HashMap<u32, u32>,
    field_groups: BTreeMap<u64, FieldGroupDef>,
    next_field_group: u64,
    watches: HashMap<Key, Watch>,
    health: Health,
    control: Option<faults::ControlFile>,
    /// Profile faults not applied yet, earliest first.
    scheduled: VecDeque<(i64, Fault)>,
    persistent: HashSet<u64>,
    /// `library_gone` happened: nothing answers any more.
    gone: bool,
    /// The engine answered UNINITIALIZED: `library_restored` does not bring it back.
    gone_for_good: bool,
    /// The host engine's modules: denied, loaded or not yet (`modules`).
    modules: modules::Modules,
    /// `prof_stuck` GPUs -> (heals only with a new engine, its profiling watches were
    /// removed since).
    prof_stuck: HashMap<u32, (bool, bool)>,
    /// The control file has been read once: what it held then was before this engine.
    control_read: bool,
    /// The DCGM release this engine answers as (`[node] dcgm_version`).
    release: dcgm_sys::Release,
    /// The library release each remote connection logged in with.
    client_releases: HashMap<u64, dcgm_sys::Release>,
}

impl Engine {
    pub fn new(profile: Profile) -> Engine {
        let offset_us = profile.node.clock_offset_ms.saturating_mul(1000);
        Self::with_clock(profile, Box::new(WallClock { offset_us }))
    }

    /// `DCGM_SIM_PROFILE` (a TOML file) or the built-in 8-GPU H100 node; `DCGM_SIM_CONTROL`
    /// names a control file for run-time faults.
    pub fn from_env() -> Result<Engine, String> {
        let profile = match std::env::var_os("DCGM_SIM_PROFILE") {
            Some(p) if !p.is_empty() => Profile::load(std::path::Path::new(&p))
                .map_err(|e| format!("DCGM_SIM_PROFILE: {e}"))?,
            _ => Profile::builtin_default(),
        };
        let mut e = Engine::new(profile);
        if let Some(c) = std::env::var_os("DCGM_SIM_CONTROL").filter(|c| !c.is_empty()) {
            e.control = Some(faults::ControlFile::new(c.into()));
        }
        Ok(e)
    }

    /// An engine on a given clock (tests pass a [`ManualClock`]).
    pub fn with_clock(profile: Profile, clock: Box<dyn Clock>) -> Engine {
        fields::set_base_units(profile.node.base_unit_fields);
        fields::set_release(profile.node.release());
        let start_us = clock.now_us();
        let mut scheduled: Vec<(i64, Fault)> = profile
            .faults
            .iter()
            // Validated when the profile was parsed.
            .filter_map(|f| {
                Some((
                    start_us + (f.at_s * 1e6) as i64,
                    faults::parse_line(&f.action).ok()?,
                ))
            })
            .collect();
        scheduled.sort_by_key(|f| f.0);
        let mut field_groups = BTreeMap::new();
        for (i, (name, names)) in INTERNAL_FIELD_GROUPS.iter().enumerate() {
            field_groups.insert(
                i as u64 + 1,
                FieldGroupDef {
                    name: (*name).to_string(),
                    fields: names
                        .iter()
                        .filter_map(|n| fields::by_name(n))
                        .map(|m| m.id)
                        .collect(),
                    owner: None,
                },
            );
        }
        Engine {
            world: World::new(Node::build(&profile), start_us, &profile.fields),
            clock,
            groups: BTreeMap::new(),
            next_group: INTERNAL_GROUPS as u32,
            health_masks: HashMap::new(),
            next_field_group: field_groups.len() as u64 + 1,
            field_groups,
            watches: HashMap::new(),
            health: Health::default(),
            control: None,
            scheduled: scheduled.into(),
            persistent: HashSet::new(),
            gone: false,
            gone_for_good: false,
            modules: modules::Modules::default(),
            prof_stuck: HashMap::new(),
            control_read: false,
            release: profile.node.release(),
            client_releases: HashMap::new(),
        }
    }

    /// A 4.6 library reads values through a request (`DCGM_CORE_SR_ENTITIES_GET_LATEST_VALUES_V4`)
    /// that host engines before 4.6.0 do not know: they answer FUNCTION_NOT_FOUND to its
    /// value reads (device attributes are read that way too), as the real 4.4.2 and 4.5.3
    /// engines answer NVIDIA's own 4.6.0 dcgmi.
    fn refuses(&self, conn: u64, req: &Request) -> bool {
        const V4_VALUES: dcgm_sys::Release = dcgm_sys::Release::new(4, 6, 0);
        let newer_client = self
            .client_releases
            .get(&conn)
            .is_some_and(|c| *c >= V4_VALUES && self.release < V4_VALUES);
        newer_client
            && matches!(
                req,
                Request::EntitiesGetLatestValues { .. } | Request::GetDeviceAttributes { .. }
            )
    }

    /// Puts modules on the denylist before any request (`dcgmStartEmbedded_v2`'s denylist,
    /// `nv-hostengine --denylist-modules`); BADPARAM for an id past the last module.
    pub fn deny_modules(&mut self, ids: &[u32]) -> Result<(), i32> {
        self.modules.deny(ids)
    }

    /// The status (`dcgmModuleStatus_t`) of a module, for tests.
    pub fn module_state(&self, id: u32) -> modules::State {
        self.modules.state(id)
    }

    /// Handles one request of connection `conn` (0 in embedded mode).
    pub fn handle(&mut self, conn: u64, req: &Request) -> Reply {
        let now = self.clock.now_us();
        self.apply_due_faults(now);
        if self.gone {
            self.gone_for_good = true;
            return Reply::Error(ST_UNINITIALIZED);
        }
        match self.dispatch(conn, req, now) {
            Ok(r) => r,
            Err(code) => Reply::Error(code),
        }
    }

    /// Forgets the groups, field groups and watches a connection created, unless it logged
    /// in with persistAfterDisconnect.
    pub fn disconnect(&mut self, conn: u64) {
        self.client_releases.remove(&conn);
        if self.persistent.remove(&conn) {
            return;
        }
        // DcgmCacheManager::OnConnectionRemove: the connection's watcher leaves every watch;
        // the samples stay.
        let keys: Vec<Key> = self.watches.keys().copied().collect();
        let now = self.clock.now_us();
        // Every key exists: nothing to report.
        let _ = self.unwatch(conn, &keys, now);
        let groups: Vec<u32> = self
            .groups
            .iter()
            .filter(|(_, g)| g.owner == conn)
            .map(|(id, _)| *id)
            .collect();
        for g in groups {
            self.destroy_group(g);
        }
        let fgs: Vec<u64> = self
            .field_groups
            .iter()
            .filter(|(_, f)| f.owner == Some(conn))
            .map(|(id, _)| *id)
            .collect();
        for f in fgs {
            self.field_groups.remove(&f);
        }
    }

    /// Applies a fault now.
    pub fn inject(&mut self, fault: Fault) {
        let now = self.clock.now_us();
        self.inject_at(fault, now);
    }

    fn apply_due_faults(&mut self, now: i64) {
        while self.scheduled.front().is_some_and(|f| f.0 <= now) {
            if let Some((at, f)) = self.scheduled.pop_front() {
                self.inject_at(f, at);
            }
        }
        let from_file = self.control.as_mut().map(|c| c.poll()).unwrap_or_default();
        let before_start = !std::mem::replace(&mut self.control_read, true);
        for f in from_file {
            // DCGM#303's state belongs to the engine it happened in: one started later
            // (DCGM restarted) comes up healthy.
            if before_start && matches!(f, Fault::ProfStuck { .. }) {
                continue;
            }
            self.inject_at(f, now);
        }
    }

    /// Brings every watch up to `t`, so that samples before a change keep the old state.
    fn catch_up_all(&mut self, t: i64) {
        for (key, w) in self.watches.iter_mut() {
            if let Some(meta) = fields::by_id(key.2) {
                w.catch_up(*key, meta, &self.world, t);
            }
        }
    }

    fn inject_at(&mut self, fault: Fault, at: i64) {
        self.catch_up_all(at);
        let gpus = self.world.node.gpus.len() as u32;
        let no_gpu = |gpu: u32| {
            eprintln!("dcgm-sim: fault {fault:?} ignored: GPU {gpu} does not exist ({gpus} GPUs)");
        };
        match &fault {
            Fault::GpuLost { gpu } | Fault::GpuRecovered { gpu } => {
                match self.world.node.gpu_mut(*gpu) {
                    Some(g) => g.lost = matches!(fault, Fault::GpuLost { .. }),
                    None => no_gpu(*gpu),
                }
            }
            Fault::Xid { gpu, xid } => {
                if *gpu < gpus {
                    self.world.faults.xids.push(((FE_GPU, *gpu), at, *xid));
                    self.health.record_xid(*gpu, *xid);
                } else {
                    no_gpu(*gpu);
                }
            }
            Fault::ClockEvent { gpu, reasons } => {
                if *gpu < gpus {
                    self.world.faults.add_clock_event(*gpu, at, *reasons);
                } else {
                    no_gpu(*gpu);
                }
            }
            Fault::FieldNotSupported { .. }
            | Fault::FieldRestored { .. }
            | Fault::SetField { .. }
            | Fault::Spike { .. } => {
                self.world.faults.apply_field_fault(&fault, at);
            }
            Fault::MigReconfigure { gpu, instances } => self.reconfigure_mig(*gpu, instances),
            Fault::LinkState { gpu, link, state } => {
                match self
                    .world
                    .node
                    .gpu_mut(*gpu)
                    .and_then(|g| g.links.get_mut(*link as usize))
                {
                    Some(s) => *s = *state,
                    None => {
                        eprintln!("dcgm-sim: fault {fault:?} ignored: no link {link} on GPU {gpu}")
                    }
                }
            }
            Fault::SwitchPortState {
                switch,
                port,
                state,
            } => {
                match self
                    .world
                    .node
                    .switches
                    .get_mut(*switch as usize)
                    .and_then(|s| s.ports.get_mut(*port as usize))
                {
                    Some(s) => *s = *state,
                    None => eprintln!(
                        "dcgm-sim: fault {fault:?} ignored: no port {port} on NvSwitch {switch}"
                    ),
                }
            }
            Fault::HealthIncident {
                gpu,
                system,
                health,
                code,
                msg,
            } => {
                if *gpu < gpus {
                    self.health
                        .inject(*gpu, *system, *health, *code, msg.clone());
                } else {
                    no_gpu(*gpu);
                }
            }
            Fault::HealthClear { gpu } => self.health.clear(*gpu),
            Fault::InstanceXid { gpu, gi, ci, xid } => match self.instance_entity(*gpu, *gi, *ci) {
                Some(e) => self.world.faults.xids.push((e, at, *xid)),
                None => eprintln!("dcgm-sim: fault {fault:?} ignored: no such MIG instance"),
            },
            Fault::NodeHealthIncident {
                system,
                health,
                code,
                msg,
            } => self
                .health
                .inject_node(*system, *health, *code, msg.clone()),
            Fault::NodeHealthClear => self.health.clear_node(),
            Fault::ProfStuck {
                gpu,
                status,
                restart_only,
            } => {
                if *gpu < gpus {
                    self.world.faults.prof_stuck.insert(*gpu, *status);
                    self.prof_stuck.insert(*gpu, (*restart_only, false));
                } else {
                    no_gpu(*gpu);
                }
            }
            Fault::Sampling { stopped } => self.world.faults.sampling_stopped = *stopped,
            Fault::FailReads { count } => self.world.faults.fail_reads = *count,
            Fault::FailValuesSince { count, field } => {
                self.world.faults.fail_values_since = Some((*count, *field))
            }
            Fault::UnwatchFails { field, status: 0 } => {
                self.world.faults.unwatch_fails.remove(field);
            }
            Fault::UnwatchFails { field, status } => {
                self.world.faults.unwatch_fails.insert(*field, *status);
            }
            Fault::AttributesFail { gpu, fail } => match self.world.node.gpu_mut(*gpu) {
                Some(g) => g.attributes_fail = *fail,
                None => no_gpu(*gpu),
            },
            Fault::GpuBind { gpu, bound } => match self.world.node.gpu_mut(*gpu) {
                Some(g) => {
                    g.unbound = !bound;
                    // DCGM's system event thread: reinitializing, then completed.
                    self.world.faults.bind_events.push((at, 1));
                    self.world.faults.bind_events.push((at + 1, 2));
                    self.forget_detached();
                }
                None => no_gpu(*gpu),
            },
            Fault::LibraryGone => self.gone = true,
            Fault::LibraryRestored => self.gone = self.gone_for_good,
            // Read by dcgmStartEmbedded before an engine exists; a running one goes on.
            Fault::EmbeddedStart { .. } => {}
            // Processes are the simulated NVML's; DCGM does not list them.
            Fault::ProcessStart { .. }
            | Fault::ProcessStop { .. }
            | Fault::ProcessUtil { .. }
            | Fault::ProcessMemory { .. } => {}
        }
    }

    /// The entity of GPU `gpu`'s GPU instance `gi` (NVML id), or of its compute instance `ci`.
    fn instance_entity(&self, gpu: u32, gi: u32, ci: Option<u32>) -> Option<(u32, u32)> {
        self.world.node.instance_entity(gpu, gi, ci)
    }

    fn reconfigure_mig(&mut self, gpu: u32, instances: &[String]) {
        if self.world.node.gpu(gpu).is_none() {
            eprintln!("dcgm-sim: MIG reconfiguration ignored: GPU {gpu} does not exist");
            return;
        }
        let mut specs = Vec::new();
        for item in instances {
            match faults::split_mig_item(item) {
                Ok((name, n)) => specs.push(profile::GiSpec {
                    profile: name.to_string(),
                    compute_instances: Some(n),
                    ..profile::GiSpec::default()
                }),
                Err(e) => {
                    eprintln!("dcgm-sim: MIG reconfiguration of GPU {gpu} ignored: {e}");
                    return;
                }
            }
        }
        if let Err(e) = profile::check_layout(&specs, self.world.node.max_mig) {
            eprintln!("dcgm-sim: MIG reconfiguration of GPU {gpu} ignored: {e}");
            return;
        }
        // An empty list turns MIG mode off.
        let layout = (!specs.is_empty()).then_some(specs.as_slice());
        // Watches on instances that no longer exist stay, with their last samples, as in
        // DCGM (nothing unwatches them); they take no more samples (watch.rs).
        self.world.node.set_mig(gpu, layout);
    }

    /// What DCGM does once the driver is attached again after a bind/unbind event
    /// (DcgmNvmlSystemEventThread::AttachDriverImpl): the watches on entities of GPUs still
    /// detached are cleared with their samples (DcgmCacheManager::AttachDriver, "Remove
    /// watches on still-detached GPUs"), and those entities leave every user group
    /// (DcgmGroupManager::AttachGpus).
    fn forget_detached(&mut self) {
        let node = &self.world.node;
        self.watches.retain(|k, _| !detached(node, (k.0, k.1)));
        for g in self.groups.values_mut() {
            g.entities.retain(|e| !detached(node, *e));
        }
    }

    fn is_detached(&self, e: (u32, u32)) -> bool {
        detached(&self.world.node, e)
    }

    /// Removes connection `conn`'s watcher from the watches of `keys`, each brought up to
    /// `now` first (its samples stay; DCGM keeps the watch entry too). NOT_WATCHED when a
    /// pair was never watched at all, after the others were done
    /// (DcgmCacheManager::RemoveEntityFieldWatch; UnwatchFieldGroup keeps going).
    fn unwatch(&mut self, conn: WatcherId, keys: &[Key], now: i64) -> Result<(), i32> {
        let mut status = Ok(());
        for key in keys {
            let Some(w) = self.watches.get_mut(key) else {
                status = Err(ST_NOT_WATCHED);
                continue;
            };
            if let Some(meta) = fields::by_id(key.2) {
                w.catch_up(*key, meta, &self.world, now);
            }
            w.remove_watcher(conn);
        }
        status
    }

    /// DcgmGroupManager::RemoveGroup: the group goes, the watches set through it stay.
    fn destroy_group(&mut self, id: u32) {
        self.groups.remove(&id);
        self.health_masks.remove(&id);
    }

    /// Entities that DCGM would put in a DEFAULT* group: present and usable.
    fn active(&self, group: u32) -> Vec<(u32, u32)> {
        let node = &self.world.node;
        node.all_of(group)
            .into_iter()
            .filter(|e| {
                node.supported(*e)
                    && !node
                        .resolve(*e)
                        .and_then(|r| r.gpu())
                        .is_some_and(|g| g.lost)
            })
            .collect()
    }

    /// Name and members of a group id, special and internal ids included.
    fn group(&self, group_id: u64) -> Option<(String, Vec<(u32, u32)>)> {
        let node = &self.world.node;
        let id = group_id as u32;
        let special = |name: &str, entities: Vec<(u32, u32)>| Some((name.to_string(), entities));
        match id {
            0 | GROUP_ALL_GPUS => special("DCGM_ALL_SUPPORTED_GPUS", node.all_of(FE_GPU)),
            1 | GROUP_ALL_NVSWITCHES => {
                special("DCGM_ALL_SUPPORTED_NVSWITCHES", node.all_of(FE_SWITCH))
            }
            GROUP_ALL_INSTANCES => special("DCGM_ALL_INSTANCES", node.all_of(FE_GPU_I)),
            GROUP_ALL_COMPUTE_INSTANCES => {
                special("DCGM_ALL_COMPUTE_INSTANCES", node.all_of(FE_GPU_CI))
            }
            GROUP_ALL_ENTITIES => special(
                "DCGM_ALL_ENTITIES",
                [FE_GPU, FE_SWITCH, FE_GPU_I, FE_GPU_CI]
                    .iter()
                    .flat_map(|g| node.all_of(*g))
                    .collect(),
            ),
            _ => self
                .groups
                .get(&id)
                .map(|g| (g.name.clone(), g.entities.clone())),
        }
    }

    fn field_group_fields(&self, id: u64) -> Result<Vec<u16>, i32> {
        self.field_groups
            .get(&id)
            .map(|f| f.fields.clone())
            .ok_or(ST_NO_DATA)
    }

    fn latest(&mut self, ent: (u32, u32), field: u16, live: bool, now: i64) -> Sample {
        let Some(meta) = fields::by_id(field) else {
            return Sample {
                entity_group: ent.0,
                entity_id: ent.1,
                field_id: field,
                field_type: b'i',
                status: ST_UNKNOWN_FIELD,
                ts_us: 0,
                value: Sentinel::Blank.value(b'i'),
            };
        };
        let blank = |status: i32| Sample {
            entity_group: ent.0,
            entity_id: ent.1,
            field_id: field,
            field_type: meta.field_type,
            status,
            ts_us: 0,
            value: Sentinel::Blank.value(meta.field_type),
        };
        if live {
            // A live read has no previous sample: DCGM's NVLink rates read 0 there.
            let prev = match nvlink::sources(field) {
                Some(_) => now,
                None => now - 1_000_000,
            };
            let (value, status) = self.world.read(ent, meta, now, prev);
            if status == ST_NO_DATA {
                return blank(status);
            }
            return Sample {
                ts_us: now,
                value,
                status,
                ..blank(status)
            };
        }
        match self.watches.get_mut(&(ent.0, ent.1, field)) {
            Some(w) => {
                w.catch_up((ent.0, ent.1, field), meta, &self.world, now);
                let none = if w.is_watched() {
                    ST_NO_DATA
                } else {
                    ST_NOT_WATCHED
                };
                w.latest(ent, meta).unwrap_or_else(|| blank(none))
            }
            None if self.world.node.resolve(ent).is_none() => blank(ST_NO_DATA),
            None => blank(ST_NOT_WATCHED),
        }
    }

    fn device_attributes(&self, gpu_id: u32, now: i64) -> Result<DeviceAttributes, i32> {
        let node = &self.world.node;
        let g = node.gpu(gpu_id).ok_or(ST_BADPARAM)?;
        if g.lost {
            return match node.lost_gpu_attributes {
                profile::LostAttributes::Error => Err(ST_GPU_IS_LOST),
                profile::LostAttributes::Blank => Ok(DeviceAttributes::blank()),
            };
        }
        if g.attributes_fail {
            return Err(ST_NOT_SUPPORTED);
        }
        let read_i = |field: u16| -> i64 {
            match fields::by_id(field).map(|m| self.world.read((FE_GPU, gpu_id), m, now, now).0) {
                Some(Value::Int64(v)) if v < generator::INT64_BLANK => v,
                _ => 0,
            }
        };
        let (total, used, free) = (read_i(250), read_i(252), read_i(251));
        let limit = g.power_limit_w.round() as u32;
        // Supported clocks: the memory clock with SM clocks from the maximum down in 15 MHz
        // steps, as nvidia-smi -q -d SUPPORTED_CLOCKS lists them.
        let clock_sets = (0..)
            .map(|i| g.sm_clock_mhz.saturating_sub(15 * i))
            .take_while(|sm| *sm >= 210)
            .take(256)
            .map(|sm| (g.mem_clock_mhz, sm))
            .collect();
        Ok(DeviceAttributes {
            brand: g.brand.clone(),
            name: g.model.clone(),
            pci_bus_id: g.pci_bus_id.clone(),
            serial: g.serial.clone(),
            uuid: g.uuid.clone(),
            vbios: g.vbios.clone(),
            inforom_image_version: g.inforom.clone(),
            pci_device_id: g.pci_device_id << 16 | 0x10de,
            pci_subsystem_id: 0x16c1_10de,
            driver_version: node.driver_version.clone(),
            virtualization_mode: 0,
            slowdown_temp: 87,
            shutdown_temp: 92,
            power_limit_cur: limit,
            power_limit_default: limit,
            power_limit_enforced: limit,
            power_limit_min: (f64::from(limit) * 0.3).round() as u32,
            power_limit_max: limit,
            bar1_total_mb: u32::try_from(g.bar1_mib).unwrap_or(0),
            fb_total_mb: u32::try_from(total).unwrap_or(0),
            fb_used_mb: u32::try_from(used).unwrap_or(0),
            fb_free_mb: u32::try_from(free).unwrap_or(0),
            persistence_mode: 1,
            mig_mode: u32::from(g.mig.is_some()),
            confidential_compute_mode: 0,
            clock_sets,
        })
    }

    fn mig_hierarchy(&self) -> Vec<MigEntry> {
        let mut rows = Vec::new();
        for g in self.world.node.gpus.iter().filter(|g| !g.unbound) {
            for gi in g.instances() {
                // A GI row, then its CIs' rows; GI rows carry no compute instance id.
                let row = |entity, parent, ci_id, profile_id, slices| MigEntry {
                    entity,
                    parent,
                    gpu_uuid: g.uuid.clone(),
                    nvml_gpu_index: g.id,
                    nvml_instance_id: gi.nvml_id,
                    nvml_compute_instance_id: ci_id,
                    nvml_mig_profile_id: profile_id,
                    nvml_profile_slices: slices,
                };
                let gi_entity = (FE_GPU_I, gi.entity_id);
                rows.push(row(
                    gi_entity,
                    (FE_GPU, g.id),
                    u32::MAX,
                    gi.profile_id,
                    gi.slices,
                ));
                for ci in &gi.cis {
                    let ci_entity = (FE_GPU_CI, ci.entity_id);
                    rows.push(row(
                        ci_entity,
                        gi_entity,
                        ci.nvml_id,
                        ci.profile_id,
                        ci.slices,
                    ));
                }
            }
        }
        rows
    }

    /// Routes a request to the handler of its family (`dispatch/`).
    fn dispatch(&mut self, conn: u64, req: &Request, now: i64) -> Result<Reply, i32> {
        if self.refuses(conn, req) {
            return Err(ST_FUNCTION_NOT_FOUND);
        }
        match req {
            Request::Login {
                persist_after_disconnect,
                library,
            } => {
                self.login(conn, *persist_after_disconnect, library.as_deref());
                Ok(Reply::Ok)
            }
            Request::GetAllDevices { .. }
            | Request::GetDeviceAttributes { .. }
            | Request::GetGpuStatus { .. }
            | Request::GetEntityGroupEntities { .. }
            | Request::GetGpuInstanceHierarchy
            | Request::GetNvLinkLinkStatus
            | Request::GetNvLinkP2PStatus
            | Request::GetCpuHierarchy
            | Request::ProfGetSupportedMetricGroups { .. } => self.discovery_request(req, now),
            Request::GroupCreate { .. }
            | Request::GroupDestroy { .. }
            | Request::GroupAddEntity { .. }
            | Request::GroupGetInfo { .. }
            | Request::FieldGroupCreate { .. }
            | Request::FieldGroupDestroy { .. }
            | Request::FieldGroupGetInfo { .. }
            | Request::FieldGroupGetAll => self.group_request(conn, req),
            Request::WatchFields { .. }
            | Request::UnwatchFields { .. }
            | Request::UpdateAllFields { .. }
            | Request::EntitiesGetLatestValues { .. }
            | Request::GetValuesSince { .. } => self.watch_request(conn, req, now),
            Request::HealthSet { .. } | Request::HealthGet { .. } | Request::HealthCheck { .. } => {
                self.health_request(req, now)
            }
            Request::ModuleGetStatuses => Ok(Reply::ModuleStatuses(self.modules.statuses())),
            Request::EngineVersion => Ok(Reply::Version(self.release.to_string())),
        }
    }

    /// How many (entity, field) pairs are watched (for tests and diagnostics).
    pub fn watch_count(&self) -> usize {
        self.watches.values().filter(|w| w.is_watched()).count()
    }

    /// Samples kept for one (entity, field), 0 when unwatched (for tests and diagnostics).
    pub fn history_len(&self, entity: (u32, u32), field: u16) -> usize {
        self.watches
            .get(&(entity.0, entity.1, field))
            .map_or(0, Watch::len)
    }
}

/// Whether an entity is a GPU whose driver is unbound (status Detached) or one of its MIG
/// instances (their status is their GPU's, DcgmCacheManager::GetEntityStatus).
fn detached(node: &Node, e: (u32, u32)) -> bool {
    matches!(e.0, FE_GPU | FE_GPU_I | FE_GPU_CI)
        && node
            .resolve(e)
            .and_then(|r| r.gpu())
            .is_some_and(|g| g.unbound)
}

// The engine lives in an Arc<Mutex<_>> shared between threads.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Engine>();
};
