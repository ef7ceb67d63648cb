//! The simulated host engine: a node from a profile, DCGM's groups, field groups, watches
//! and sample cache, and faults. Every C call (embedded) and every remote request ends in
//! [`Engine::handle`].

pub mod faults;
mod generate;
pub mod profile;

pub use faults::Fault;
pub use profile::Profile;

use crate::proto::*;
use dcgm_sys::fields::{self, FieldMeta};
use generate::Sentinel;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

// dcgmReturn_t values the engine returns.
pub const ST_OK: i32 = 0;
pub const ST_BADPARAM: i32 = -1;
pub const ST_NOT_CONFIGURED: i32 = -5;
pub const ST_NOT_SUPPORTED: i32 = -6;
pub const ST_NO_DATA: i32 = -14;
pub const ST_NOT_WATCHED: i32 = -16;
pub const ST_GPU_IS_LOST: i32 = -18;
pub const ST_MAX_LIMIT: i32 = -24;
pub const ST_DUPLICATE_KEY: i32 = -26;
pub const ST_MODULE_NOT_LOADED: i32 = -33;

// dcgm_field_entity_group_t.
pub const FE_NONE: u32 = 0;
pub const FE_GPU: u32 = 1;
pub const FE_VGPU: u32 = 2;
pub const FE_SWITCH: u32 = 3;
pub const FE_GPU_I: u32 = 4;
pub const FE_GPU_CI: u32 = 5;
pub const FE_LINK: u32 = 6;
pub const FE_CPU: u32 = 7;
pub const FE_CPU_CORE: u32 = 8;

const GROUP_ALL_GPUS: u32 = 0x7fff_ffff;
const GROUP_ALL_NVSWITCHES: u32 = 0x7fff_fffe;
const GROUP_ALL_INSTANCES: u32 = 0x7fff_fffd;
const GROUP_ALL_COMPUTE_INSTANCES: u32 = 0x7fff_fffc;
const GROUP_ALL_ENTITIES: u32 = 0x7fff_fffb;
const MAX_GROUPS: usize = 64;
const MAX_FIELD_GROUPS: usize = 64;
const MAX_GROUP_ENTITIES: usize = 1024;

const FI_XID: u16 = 230;
const FI_CLOCK_EVENTS: u16 = 112;
const FR_XID_ERROR: u32 = 101;
const FR_FALLEN_OFF_BUS: u32 = 120;

/// Where "now" comes from: the wall clock, or a hand-driven one in tests.
pub trait Clock: Send {
    fn now_us(&self) -> i64;
}

pub struct WallClock;

impl Clock for WallClock {
    fn now_us(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0)
    }
}

/// A clock tests move by hand; clones share the time.
#[derive(Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_us: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(start_us)))
    }
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Debug)]
struct Gi {
    entity_id: u32,
    nvml_id: u32,
    profile: String,
    slices: u32,
    uuid: String,
    /// (CI entity id, NVML CI id).
    cis: Vec<(u32, u32)>,
}

#[derive(Clone, Debug)]
struct Gpu {
    id: u32,
    uuid: String,
    pci_bus_id: String,
    serial: String,
    supported: bool,
    lost: bool,
    links: Vec<u32>,
    instances: Vec<Gi>,
    next_ci: u32,
}

struct Group {
    name: String,
    entities: Vec<(u32, u32)>,
    owner: u64,
    health: u32,
}

struct FieldGroupDef {
    name: String,
    fields: Vec<u16>,
    owner: u64,
}

struct Watch {
    freq_us: i64,
    keep_age_us: i64,
    keep_samples: usize,
    last_ts: Option<i64>,
    samples: VecDeque<(i64, Value, i32)>,
    walk: Option<f64>,
    /// (group, field group) pairs that asked for this watch.
    refs: HashSet<(u32, u64)>,
    /// Asked for per ref: (freq, keep age, keep samples), to recompute on unwatch.
    asks: HashMap<(u32, u64), (i64, i64, usize)>,
}

pub struct Engine {
    profile: Profile,
    clock: Box<dyn Clock>,
    start_us: i64,
    gpus: Vec<Gpu>,
    switches: Vec<(u32, Vec<u32>)>,
    cpus: Vec<(u32, Vec<u32>)>,
    groups: BTreeMap<u32, Group>,
    next_group: u32,
    field_groups: BTreeMap<u64, FieldGroupDef>,
    next_field_group: u64,
    watches: HashMap<(u32, u32, u16), Watch>,
    incidents: Vec<Incident>,
    not_supported: HashSet<(Option<u32>, u16)>,
    pending_clock_events: HashMap<u32, i64>,
    control: Option<faults::ControlFile>,
    scheduled: Vec<(i64, Fault)>,
    persistent: HashSet<u64>,
}

fn uuid_for(seed: u64, kind: &str, a: u32, b: u32) -> String {
    let h1 = generate::mix(seed ^ u64::from(a) << 8 ^ u64::from(b) << 20 ^ kind.len() as u64);
    let h2 = generate::mix(h1);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    )
}

impl Engine {
    pub fn new(profile: Profile) -> Engine {
        Self::with_clock(profile, Box::new(WallClock))
    }

    /// `DCGM_SIM_PROFILE` (a TOML file) or the built-in 8-GPU H100 node; `DCGM_SIM_CONTROL`
    /// names a control file for run-time faults.
    pub fn from_env() -> Result<Engine, String> {
        let profile = match std::env::var_os("DCGM_SIM_PROFILE") {
            Some(p) if !p.is_empty() => Profile::load(std::path::Path::new(&p))?,
            _ => Profile::builtin_default(),
        };
        let mut e = Engine::new(profile);
        if let Some(c) = std::env::var_os("DCGM_SIM_CONTROL").filter(|c| !c.is_empty()) {
            e.control = Some(faults::ControlFile::new(c.into()));
        }
        Ok(e)
    }

    pub fn with_clock(profile: Profile, clock: Box<dyn Clock>) -> Engine {
        let seed = profile.node.seed;
        let g = &profile.gpus;
        let gpus = (0..g.count)
            .map(|id| Gpu {
                id,
                uuid: format!("GPU-{}", uuid_for(seed, "gpu", id, 0)),
                pci_bus_id: format!("00000000:{:02X}:00.0", g.pci_bus_base + id * 0x10),
                serial: format!(
                    "{}",
                    1_650_000_000_000u64 + generate::mix(seed ^ u64::from(id)) % 1_000_000_000
                ),
                supported: !g.unsupported.contains(&id),
                lost: false,
                links: (0..g.nvlinks)
                    .map(|l| {
                        if g.down_links.contains(&(id, l)) {
                            2
                        } else {
                            3
                        }
                    })
                    .collect(),
                instances: Vec::new(),
                next_ci: 0,
            })
            .collect();
        let switches = profile
            .switches
            .as_ref()
            .map(|s| {
                (0..s.count)
                    .map(|sw| {
                        (
                            sw,
                            (0..s.ports)
                                .map(|p| {
                                    if s.down_ports.contains(&(sw, p)) {
                                        2
                                    } else {
                                        3
                                    }
                                })
                                .collect(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let cpus = profile
            .cpus
            .as_ref()
            .map(|c| {
                (0..c.count)
                    .map(|i| {
                        (
                            i,
                            (i * c.cores_per_cpu..(i + 1) * c.cores_per_cpu).collect(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let start_us = clock.now_us();
        let scheduled = profile
            .faults
            .iter()
            .filter_map(|f| {
                Some((
                    start_us + (f.at_s * 1e6) as i64,
                    faults::parse_line(&f.action).ok()?,
                ))
            })
            .collect();
        let mut e = Engine {
            clock,
            start_us,
            gpus,
            switches,
            cpus,
            groups: BTreeMap::new(),
            next_group: 2,
            field_groups: BTreeMap::new(),
            next_field_group: 1,
            watches: HashMap::new(),
            incidents: Vec::new(),
            not_supported: HashSet::new(),
            pending_clock_events: HashMap::new(),
            control: None,
            scheduled,
            persistent: HashSet::new(),
            profile,
        };
        for m in e.profile.mig.clone() {
            e.set_mig(m.gpu, &m.instances, &m.compute_instances);
        }
        e
    }

    fn now(&self) -> i64 {
        self.clock.now_us()
    }

    fn set_mig(&mut self, gpu: u32, instances: &[String], cis: &[u32]) {
        let seed = self.profile.node.seed;
        let Some(g) = self.gpus.iter_mut().find(|g| g.id == gpu) else {
            return;
        };
        let mut used = HashSet::new();
        g.instances.clear();
        for (i, p) in instances.iter().enumerate() {
            let slices = profile::slices_of(p).unwrap_or(1);
            // NVML numbers instances by profile, not by creation order.
            let mut nvml_id = match slices {
                7 | 8 => 0,
                4 | 3 => 1,
                2 => 3,
                _ => 7,
            };
            while !used.insert(nvml_id) {
                nvml_id += 1;
            }
            let n_ci = cis.get(i).copied().unwrap_or(1).max(1);
            let mut ci_list = Vec::new();
            for c in 0..n_ci {
                ci_list.push((gpu * 8 + g.next_ci % 8, c));
                g.next_ci += 1;
            }
            g.instances.push(Gi {
                entity_id: gpu * 8 + i as u32,
                nvml_id,
                profile: p.clone(),
                slices,
                uuid: format!(
                    "MIG-{}",
                    uuid_for(seed ^ u64::from(g.next_ci), "mig", gpu, nvml_id)
                ),
                cis: ci_list,
            });
        }
    }

    fn gpu(&self, id: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.id == id)
    }

    /// The physical GPU behind a GPU, instance, compute-instance or GPU-link entity.
    fn gpu_of(&self, (group, id): (u32, u32)) -> Option<&Gpu> {
        match group {
            FE_GPU => self.gpu(id),
            FE_GPU_I => self
                .gpus
                .iter()
                .find(|g| g.instances.iter().any(|i| i.entity_id == id)),
            FE_GPU_CI => self
                .gpus
                .iter()
                .find(|g| g.instances.iter().any(|i| i.cis.iter().any(|c| c.0 == id))),
            FE_LINK if id & 0xff == FE_GPU => self.gpu(id >> 24),
            _ => None,
        }
    }

    fn gi_of(&self, (group, id): (u32, u32)) -> Option<&Gi> {
        let gpu = self.gpu_of((group, id))?;
        gpu.instances.iter().find(|i| match group {
            FE_GPU_I => i.entity_id == id,
            FE_GPU_CI => i.cis.iter().any(|c| c.0 == id),
            _ => false,
        })
    }

    fn entity_exists(&self, (group, id): (u32, u32)) -> bool {
        match group {
            FE_GPU => self.gpu(id).is_some(),
            FE_GPU_I | FE_GPU_CI => self.gi_of((group, id)).is_some(),
            FE_SWITCH => self.switches.iter().any(|s| s.0 == id),
            FE_LINK => {
                let (parent, idx, pid) = (id & 0xff, (id >> 8) & 0xffff, id >> 24);
                match parent {
                    FE_GPU => self
                        .gpu(pid)
                        .is_some_and(|g| (idx as usize) < g.links.len()),
                    FE_SWITCH => self
                        .switches
                        .iter()
                        .any(|s| s.0 == pid && (idx as usize) < s.1.len()),
                    _ => false,
                }
            }
            FE_CPU => self.cpus.iter().any(|c| c.0 == id),
            FE_CPU_CORE => self.cpus.iter().any(|c| c.1.contains(&id)),
            _ => false,
        }
    }

    fn all_of(&self, group: u32) -> Vec<(u32, u32)> {
        match group {
            FE_GPU => self.gpus.iter().map(|g| (FE_GPU, g.id)).collect(),
            FE_GPU_I => self
                .gpus
                .iter()
                .flat_map(|g| g.instances.iter().map(|i| (FE_GPU_I, i.entity_id)))
                .collect(),
            FE_GPU_CI => self
                .gpus
                .iter()
                .flat_map(|g| {
                    g.instances
                        .iter()
                        .flat_map(|i| i.cis.iter().map(|c| (FE_GPU_CI, c.0)))
                })
                .collect(),
            FE_SWITCH => self.switches.iter().map(|s| (FE_SWITCH, s.0)).collect(),
            FE_LINK => {
                let mut v: Vec<(u32, u32)> = self
                    .gpus
                    .iter()
                    .flat_map(|g| {
                        (0..g.links.len() as u32)
                            .map(move |l| (FE_LINK, FE_GPU | l << 8 | g.id << 24))
                    })
                    .collect();
                for (sw, ports) in &self.switches {
                    v.extend(
                        (0..ports.len() as u32).map(|p| (FE_LINK, FE_SWITCH | p << 8 | sw << 24)),
                    );
                }
                v
            }
            FE_CPU => self.cpus.iter().map(|c| (FE_CPU, c.0)).collect(),
            FE_CPU_CORE => self
                .cpus
                .iter()
                .flat_map(|c| c.1.iter().map(|&k| (FE_CPU_CORE, k)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Members of a group id, special ids included.
    fn group_entities(&self, group_id: u64) -> Option<Vec<(u32, u32)>> {
        let id = group_id as u32;
        Some(match id {
            GROUP_ALL_GPUS => self.all_of(FE_GPU),
            GROUP_ALL_NVSWITCHES => self.all_of(FE_SWITCH),
            GROUP_ALL_INSTANCES => self.all_of(FE_GPU_I),
            GROUP_ALL_COMPUTE_INSTANCES => self.all_of(FE_GPU_CI),
            GROUP_ALL_ENTITIES => [FE_GPU, FE_GPU_I, FE_GPU_CI, FE_SWITCH, FE_CPU, FE_CPU_CORE]
                .iter()
                .flat_map(|g| self.all_of(*g))
                .collect(),
            _ => self.groups.get(&id)?.entities.clone(),
        })
    }

    // ------------------------------------------------------------------ values

    fn generator_for(&self, ent: (u32, u32), meta: &FieldMeta) -> profile::Generator {
        let gpu = self.gpu_of(ent).map(|g| g.id);
        for o in self.profile.fields.iter().rev() {
            if o.id == meta.id
                && o.gpus
                    .as_ref()
                    .is_none_or(|gs| gpu.is_some_and(|g| gs.contains(&g)))
            {
                return o.gen.clone();
            }
        }
        generate::default_for(
            meta.id,
            meta.field_type,
            self.profile.gpus.power_limit_w,
            self.profile.gpus.memory_mib,
        )
    }

    /// Whether the field gives real values on this entity (else NOT_SUPPORTED, as the real
    /// engine answers for e.g. a GPU-only field read on a MIG instance).
    fn applies(&self, ent: (u32, u32), meta: &FieldMeta) -> bool {
        let lvl = meta.entity_level;
        match ent.0 {
            _ if lvl == FE_NONE => true,
            FE_GPU => {
                matches!(lvl, FE_GPU | FE_GPU_I | FE_GPU_CI)
                    && !(meta.id >= 1000 && meta.id < 1100 && !self.profile.gpus.dcp)
            }
            FE_GPU_I | FE_GPU_CI => {
                matches!(lvl, FE_GPU_I | FE_GPU_CI)
                    && (self.profile.gpus.dcp || !(1000..1100).contains(&meta.id))
                    || matches!(meta.id, 50 | 54)
            }
            FE_SWITCH => lvl == FE_SWITCH,
            FE_LINK => lvl == FE_LINK,
            FE_CPU => lvl == FE_CPU,
            FE_CPU_CORE => lvl == FE_CPU_CORE,
            _ => false,
        }
    }

    /// Strings that describe the node rather than move.
    fn text_value(&self, ent: (u32, u32), id: u16) -> Option<String> {
        let gpu = self.gpu_of(ent);
        let p = &self.profile;
        Some(match id {
            1 => p.node.driver_version.clone(),
            2 => p.node.nvml_version.clone(),
            50 => match self.gi_of(ent) {
                Some(gi) => gi.profile.clone(),
                None => p.gpus.model.clone(),
            },
            51 => p.gpus.brand.clone(),
            53 => gpu?.serial.clone(),
            54 => match self.gi_of(ent) {
                Some(gi) => gi.uuid.clone(),
                None => gpu?.uuid.clone(),
            },
            57 => gpu?.pci_bus_id.clone(),
            82 => "G520.0200.00.05".into(),
            85 => "96.00.74.00.0E".into(),
            1140 => "NVIDIA".into(),
            1141 => "Grace".into(),
            _ => return None,
        })
    }

    /// Reads a field now: the value a sample taken at `t` would hold.
    fn read(
        &self,
        ent: (u32, u32),
        meta: &FieldMeta,
        t: i64,
        walk: &mut Option<f64>,
    ) -> (Value, i32) {
        let ty = meta.field_type;
        if !self.entity_exists(ent) {
            return (Sentinel::Blank.value(ty), ST_NO_DATA);
        }
        let gpu = self.gpu_of(ent);
        if gpu.is_some_and(|g| g.lost) {
            return (Sentinel::Blank.value(ty), ST_OK);
        }
        let gid = gpu.map(|g| g.id);
        if self.not_supported.contains(&(None, meta.id))
            || gid.is_some_and(|g| self.not_supported.contains(&(Some(g), meta.id)))
        {
            return (Sentinel::NotSupported.value(ty), ST_OK);
        }
        if !self.applies(ent, meta) {
            return (Sentinel::NotSupported.value(ty), ST_OK);
        }
        if let Some(s) = self.text_value(ent, meta.id) {
            return (Value::Str(s), ST_OK);
        }
        match meta.id {
            5 => return (Value::Int64(self.profile.node.cuda_driver_version), ST_OK),
            FI_XID => return (Value::Int64(0), ST_OK),
            FI_CLOCK_EVENTS => {
                let v = gid
                    .and_then(|g| self.pending_clock_events.get(&g).copied())
                    .unwrap_or(0);
                return (Value::Int64(v), ST_OK);
            }
            // Free = total - used - reserved, from the same time.
            251 | 254 => {
                let total = self.profile.gpus.memory_mib as f64;
                let used_meta = fields::by_id(252).expect("field 252 exists");
                let (used, _) = self.read(ent, used_meta, t, &mut None);
                let used = match used {
                    Value::Int64(u) => u as f64,
                    _ => 0.0,
                };
                return if meta.id == 251 {
                    (Value::Int64((total - used - 512.0) as i64), ST_OK)
                } else {
                    (Value::Double(used / total), ST_OK)
                };
            }
            _ => {}
        }
        let g = self.generator_for(ent, meta);
        let key = self.profile.node.seed
            ^ u64::from(ent.0) << 56
            ^ u64::from(ent.1) << 20
            ^ u64::from(meta.id);
        let t_s = (t - self.start_us) as f64 / 1e6;
        // Phases and offsets depend on the key only (counters stay monotonic); the random
        // walk draws its steps from the sample time.
        generate::eval(&g, ty, t_s, key, walk)
    }

    /// Takes every sample that is due by `now` (DCGM's AUTO mode, computed lazily).
    fn advance(&mut self) {
        let now = self.now();
        self.apply_due_faults(now);
        let keys: Vec<(u32, u32, u16)> = self.watches.keys().copied().collect();
        let mut consumed = HashSet::new();
        for key in keys {
            let Some(meta) = fields::by_id(key.2) else {
                continue;
            };
            let mut w = match self.watches.remove(&key) {
                Some(w) => w,
                None => continue,
            };
            let mut due = Vec::new();
            match w.last_ts {
                None => due.push(now),
                Some(last) => {
                    let mut t = last;
                    // Nothing older than the keep age matters: skip ahead on the grid.
                    if now - t > w.keep_age_us + w.freq_us {
                        t += ((now - t - w.keep_age_us) / w.freq_us) * w.freq_us;
                    }
                    while t + w.freq_us <= now {
                        t += w.freq_us;
                        due.push(t);
                    }
                }
            }
            let sampled = !due.is_empty();
            for t in due {
                // XIDs are events: the field records a sample when one happens (inject),
                // plus the initial reading when the watch starts.
                if key.2 != FI_XID || w.last_ts.is_none() {
                    let (v, st) = self.read((key.0, key.1), meta, t, &mut w.walk);
                    w.samples.push_back((t, v, st));
                }
                w.last_ts = Some(t);
            }
            if key.2 == FI_CLOCK_EVENTS && sampled {
                if let Some(g) = self.gpu_of((key.0, key.1)).map(|g| g.id) {
                    consumed.insert(g);
                }
            }
            trim(&mut w, now);
            self.watches.insert(key, w);
        }
        // A clock event lasts for the one sampling cycle that saw it.
        for g in consumed {
            self.pending_clock_events.remove(&g);
        }
    }

    fn apply_due_faults(&mut self, now: i64) {
        let mut due = Vec::new();
        self.scheduled.retain(|(at, f)| {
            if *at <= now {
                due.push(f.clone());
                false
            } else {
                true
            }
        });
        if let Some(c) = self.control.as_mut() {
            due.extend(c.poll());
        }
        for f in due {
            self.inject(f);
        }
    }

    pub fn inject(&mut self, fault: Fault) {
        let now = self.now();
        match fault {
            Fault::GpuLost { gpu } => {
                if let Some(g) = self.gpus.iter_mut().find(|g| g.id == gpu) {
                    g.lost = true;
                    self.incidents.push(Incident {
                        system: 0x1,
                        health: 20,
                        msg: format!("GPU {gpu} has fallen off the bus"),
                        code: FR_FALLEN_OFF_BUS,
                        entity: (FE_GPU, gpu),
                    });
                }
            }
            Fault::GpuRecovered { gpu } => {
                if let Some(g) = self.gpus.iter_mut().find(|g| g.id == gpu) {
                    g.lost = false;
                }
                self.incidents
                    .retain(|i| !(i.entity == (FE_GPU, gpu) && i.code == FR_FALLEN_OFF_BUS));
            }
            Fault::Xid { gpu, xid } => {
                let watched: Vec<(u32, u32, u16)> = self
                    .watches
                    .keys()
                    .filter(|k| {
                        k.2 == FI_XID && self.gpu_of((k.0, k.1)).is_some_and(|g| g.id == gpu)
                    })
                    .copied()
                    .collect();
                for k in watched {
                    if let Some(w) = self.watches.get_mut(&k) {
                        w.samples.push_back((now, Value::Int64(xid), ST_OK));
                    }
                }
                let (system, health) = match xid {
                    79 => (0x1, 20),
                    48 | 63 | 64 | 92 | 94 | 95 => (0x10, 20),
                    13 | 43 => (0x20, 10),
                    _ => (0x200, 20),
                };
                self.incidents.push(Incident {
                    system,
                    health,
                    msg: format!("Detected XID {xid} for GPU {gpu}"),
                    code: FR_XID_ERROR,
                    entity: (FE_GPU, gpu),
                });
            }
            Fault::ClockEvent { gpu, reasons } => {
                self.pending_clock_events.insert(gpu, reasons);
            }
            Fault::FieldNotSupported { gpu, field } => {
                self.not_supported.insert((gpu, field));
            }
            Fault::FieldRestored { gpu, field } => {
                self.not_supported.remove(&(gpu, field));
            }
            Fault::MigReconfigure { gpu, instances } => {
                self.set_mig(gpu, &instances, &[]);
                // Watches on instances that no longer exist go away with them.
                let gone: Vec<(u32, u32, u16)> = self
                    .watches
                    .keys()
                    .filter(|k| {
                        matches!(k.0, FE_GPU_I | FE_GPU_CI) && !self.entity_exists((k.0, k.1))
                    })
                    .copied()
                    .collect();
                for k in gone {
                    self.watches.remove(&k);
                }
            }
            Fault::LinkState { gpu, link, up } => {
                if let Some(s) = self
                    .gpus
                    .iter_mut()
                    .find(|g| g.id == gpu)
                    .and_then(|g| g.links.get_mut(link as usize))
                {
                    *s = if up { 3 } else { 2 };
                }
            }
        }
    }

    // ---------------------------------------------------------------- requests

    pub fn handle(&mut self, conn: u64, req: &Request) -> Reply {
        self.advance();
        match self.dispatch(conn, req) {
            Ok(r) => r,
            Err(code) => Reply::Error(code),
        }
    }

    /// Forgets what a connection created, unless it asked to persist.
    pub fn disconnect(&mut self, conn: u64) {
        if self.persistent.remove(&conn) {
            return;
        }
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
            .filter(|(_, f)| f.owner == conn)
            .map(|(id, _)| *id)
            .collect();
        for f in fgs {
            self.unwatch_refs(|r| r.1 == f);
            self.field_groups.remove(&f);
        }
    }

    fn destroy_group(&mut self, id: u32) {
        self.unwatch_refs(|r| r.0 == id);
        self.groups.remove(&id);
    }

    fn unwatch_refs(&mut self, pred: impl Fn(&(u32, u64)) -> bool) {
        self.watches.retain(|_, w| {
            w.refs.retain(|r| !pred(r));
            w.asks.retain(|r, _| !pred(r));
            if w.refs.is_empty() {
                return false;
            }
            // The remaining watchers decide the frequency and retention.
            w.freq_us = w.asks.values().map(|a| a.0).min().unwrap_or(w.freq_us);
            w.keep_age_us = w.asks.values().map(|a| a.1).max().unwrap_or(w.keep_age_us);
            true
        });
    }

    fn samples_latest(&self, ent: (u32, u32), meta: &FieldMeta, live: bool) -> Sample {
        let mk = |ts: i64, value: Value, status: i32| Sample {
            entity_group: ent.0,
            entity_id: ent.1,
            field_id: meta.id,
            field_type: meta.field_type,
            status,
            ts_us: ts,
            value,
        };
        if live {
            let now = self.now();
            let (v, st) = self.read(ent, meta, now, &mut None);
            return mk(now, v, st);
        }
        match self.watches.get(&(ent.0, ent.1, meta.id)) {
            None => mk(0, Sentinel::Blank.value(meta.field_type), ST_NOT_WATCHED),
            Some(w) => match w.samples.back() {
                Some((ts, v, st)) => mk(*ts, v.clone(), *st),
                None => mk(0, Sentinel::Blank.value(meta.field_type), ST_NO_DATA),
            },
        }
    }

    fn dispatch(&mut self, conn: u64, req: &Request) -> Result<Reply, i32> {
        Ok(match req {
            Request::Login {
                persist_after_disconnect,
            } => {
                if *persist_after_disconnect {
                    self.persistent.insert(conn);
                }
                Reply::Ok
            }
            Request::GetAllDevices { only_supported } => Reply::Ids(
                self.gpus
                    .iter()
                    .filter(|g| !only_supported || g.supported)
                    .map(|g| g.id)
                    .collect(),
            ),
            Request::GetDeviceAttributes { gpu_id } => {
                let g = self.gpu(*gpu_id).ok_or(ST_BADPARAM)?;
                let p = &self.profile.gpus;
                let used = match self
                    .read(
                        (FE_GPU, g.id),
                        fields::by_id(252).ok_or(ST_BADPARAM)?,
                        self.now(),
                        &mut None,
                    )
                    .0
                {
                    Value::Int64(u) => u as u32,
                    _ => 0,
                };
                let total = p.memory_mib as u32;
                Reply::DeviceAttributes(Box::new(DeviceAttributes {
                    brand: p.brand.clone(),
                    name: p.model.clone(),
                    pci_bus_id: g.pci_bus_id.clone(),
                    serial: g.serial.clone(),
                    uuid: g.uuid.clone(),
                    vbios: "96.00.74.00.0E".into(),
                    inforom_image_version: "G520.0200.00.05".into(),
                    pci_device_id: 0x2330_10de,
                    pci_subsystem_id: 0x16c1_10de,
                    driver_version: self.profile.node.driver_version.clone(),
                    virtualization_mode: 0,
                    slowdown_temp: 87,
                    shutdown_temp: 92,
                    power_limit_cur: p.power_limit_w as u32,
                    power_limit_default: p.power_limit_w as u32,
                    power_limit_enforced: p.power_limit_w as u32,
                    power_limit_min: 200,
                    power_limit_max: p.power_limit_w as u32,
                    bar1_total_mb: 131_072,
                    fb_total_mb: total,
                    fb_used_mb: used,
                    fb_free_mb: total.saturating_sub(used + 512),
                    persistence_mode: 1,
                    mig_mode: u32::from(!g.instances.is_empty()),
                    confidential_compute_mode: 0,
                    clock_sets: vec![(2619, 1980), (2619, 1755), (2619, 1410)],
                }))
            }
            Request::GetGpuStatus { gpu_id } => {
                let g = self.gpu(*gpu_id).ok_or(ST_BADPARAM)?;
                Reply::Status(if g.lost {
                    4
                } else if g.supported {
                    1
                } else {
                    2
                })
            }
            Request::GetEntityGroupEntities {
                entity_group,
                only_supported,
            } => {
                if *entity_group >= 10 {
                    return Err(ST_NOT_SUPPORTED);
                }
                let mut v = self.all_of(*entity_group);
                if *only_supported && *entity_group == FE_GPU {
                    v.retain(|e| self.gpu(e.1).is_some_and(|g| g.supported));
                }
                Reply::Ids(v.into_iter().map(|e| e.1).collect())
            }
            Request::GetGpuInstanceHierarchy => {
                let mut rows = Vec::new();
                for g in &self.gpus {
                    for gi in &g.instances {
                        let profile_id = match gi.slices {
                            1 => 0,
                            2 => 1,
                            3 => 2,
                            4 => 3,
                            7 => 4,
                            8 => 5,
                            _ => 6,
                        };
                        rows.push(MigEntry {
                            entity: (FE_GPU_I, gi.entity_id),
                            parent: (FE_GPU, g.id),
                            gpu_uuid: g.uuid.clone(),
                            nvml_gpu_index: g.id,
                            nvml_instance_id: gi.nvml_id,
                            nvml_compute_instance_id: u32::MAX,
                            nvml_mig_profile_id: profile_id,
                            nvml_profile_slices: gi.slices,
                        });
                        for (ci, nvml_ci) in &gi.cis {
                            rows.push(MigEntry {
                                entity: (FE_GPU_CI, *ci),
                                parent: (FE_GPU_I, gi.entity_id),
                                gpu_uuid: g.uuid.clone(),
                                nvml_gpu_index: g.id,
                                nvml_instance_id: gi.nvml_id,
                                nvml_compute_instance_id: *nvml_ci,
                                nvml_mig_profile_id: profile_id,
                                nvml_profile_slices: gi.slices,
                            });
                        }
                    }
                }
                Reply::MigHierarchy(rows)
            }
            Request::GetNvLinkLinkStatus => Reply::LinkStatus(LinkStatus {
                gpus: self.gpus.iter().map(|g| (g.id, g.links.clone())).collect(),
                switches: self.switches.clone(),
            }),
            Request::GetNvLinkP2PStatus => {
                let status = if self.profile.gpus.p2p == "nvlink" {
                    0
                } else {
                    3
                };
                let n = self.gpus.len();
                Reply::P2PStatus(
                    self.gpus
                        .iter()
                        .map(|g| {
                            (
                                g.id,
                                (0..n)
                                    .map(|j| if j as u32 == g.id { 0 } else { status })
                                    .collect(),
                            )
                        })
                        .collect(),
                )
            }
            Request::GetCpuHierarchy => Reply::CpuHierarchy(self.cpus.clone()),
            Request::ProfGetSupportedMetricGroups { gpu_id } => {
                self.gpu(*gpu_id).ok_or(ST_BADPARAM)?;
                if !self.profile.gpus.dcp {
                    return Err(ST_MODULE_NOT_LOADED);
                }
                let group = |major: u16, ids: Vec<u16>| MetricGroup {
                    major_id: major,
                    minor_id: 0,
                    field_ids: ids,
                };
                Reply::MetricGroups(vec![
                    group(1, (1001..=1008).collect()),
                    group(2, vec![1009, 1010, 1011, 1012, 1091, 1092]),
                    group(3, (1013..=1016).collect()),
                    group(4, (1017..=1032).collect()),
                    group(5, (1040..=1075).chain([1532, 1533]).collect()),
                ])
            }
            Request::GroupCreate { group_type, name } => {
                if self.groups.len() >= MAX_GROUPS {
                    return Err(ST_MAX_LIMIT);
                }
                let entities = match group_type {
                    0 => self.all_of(FE_GPU),
                    1 => Vec::new(),
                    2 => self.all_of(FE_SWITCH),
                    3 => self.all_of(FE_GPU_I),
                    4 => self.all_of(FE_GPU_CI),
                    5 => self
                        .group_entities(u64::from(GROUP_ALL_ENTITIES))
                        .unwrap_or_default(),
                    _ => return Err(ST_BADPARAM),
                };
                let id = self.next_group;
                self.next_group += 1;
                self.groups.insert(
                    id,
                    Group {
                        name: name.clone(),
                        entities,
                        owner: conn,
                        health: 0,
                    },
                );
                Reply::Id(u64::from(id))
            }
            Request::GroupDestroy { group_id } => {
                let id = *group_id as u32;
                if !self.groups.contains_key(&id) {
                    return Err(ST_NOT_CONFIGURED);
                }
                self.destroy_group(id);
                Reply::Ok
            }
            Request::GroupAddEntity {
                group_id,
                entity_group,
                entity_id,
            } => {
                let ent = (*entity_group, *entity_id);
                let id = *group_id as u32;
                if !self.groups.contains_key(&id) {
                    return Err(ST_NOT_CONFIGURED);
                }
                if !self.entity_exists(ent) {
                    return Err(ST_BADPARAM);
                }
                if ent.0 == FE_GPU && self.gpu(ent.1).is_some_and(|g| g.lost) {
                    return Err(ST_GPU_IS_LOST);
                }
                let g = self.groups.get_mut(&id).ok_or(ST_NOT_CONFIGURED)?;
                if g.entities.contains(&ent) {
                    return Err(ST_BADPARAM);
                }
                if g.entities.len() >= MAX_GROUP_ENTITIES {
                    return Err(ST_MAX_LIMIT);
                }
                g.entities.push(ent);
                Reply::Ok
            }
            Request::GroupGetInfo { group_id } => {
                let entities = self.group_entities(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let name = self
                    .groups
                    .get(&(*group_id as u32))
                    .map(|g| g.name.clone())
                    .unwrap_or_else(|| "ALL".into());
                Reply::GroupInfo { name, entities }
            }
            Request::FieldGroupCreate { field_ids, name } => {
                if field_ids.is_empty() || field_ids.len() >= 128 || name.is_empty() {
                    return Err(ST_BADPARAM);
                }
                if field_ids.iter().any(|f| fields::by_id(*f).is_none()) {
                    return Err(ST_BADPARAM);
                }
                if self.field_groups.values().any(|f| &f.name == name) {
                    return Err(ST_DUPLICATE_KEY);
                }
                if self.field_groups.len() >= MAX_FIELD_GROUPS {
                    return Err(ST_MAX_LIMIT);
                }
                let id = self.next_field_group;
                self.next_field_group += 1;
                self.field_groups.insert(
                    id,
                    FieldGroupDef {
                        name: name.clone(),
                        fields: field_ids.clone(),
                        owner: conn,
                    },
                );
                Reply::Id(id)
            }
            Request::FieldGroupDestroy { field_group_id } => {
                if self.field_groups.remove(field_group_id).is_none() {
                    return Err(ST_NO_DATA);
                }
                let f = *field_group_id;
                self.unwatch_refs(|r| r.1 == f);
                Reply::Ok
            }
            Request::WatchFields {
                group_id,
                field_group_id,
                update_freq_us,
                max_keep_age_s,
                max_keep_samples,
            } => {
                if *group_id == 0 || *update_freq_us <= 0 {
                    return Err(ST_BADPARAM);
                }
                let entities = self.group_entities(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let fg = self
                    .field_groups
                    .get(field_group_id)
                    .ok_or(ST_NOT_CONFIGURED)?
                    .fields
                    .clone();
                let r = (*group_id as u32, *field_group_id);
                let keep_age = ((max_keep_age_s.max(0.0) * 1e6) as i64).max(*update_freq_us);
                let keep_n = usize::try_from(*max_keep_samples).unwrap_or(0);
                for e in entities {
                    for f in &fg {
                        let w = self.watches.entry((e.0, e.1, *f)).or_insert_with(|| Watch {
                            freq_us: *update_freq_us,
                            keep_age_us: keep_age,
                            keep_samples: keep_n,
                            last_ts: None,
                            samples: VecDeque::new(),
                            walk: None,
                            refs: HashSet::new(),
                            asks: HashMap::new(),
                        });
                        w.refs.insert(r);
                        w.asks.insert(r, (*update_freq_us, keep_age, keep_n));
                        w.freq_us = w.freq_us.min(*update_freq_us);
                        w.keep_age_us = w.keep_age_us.max(keep_age);
                        w.keep_samples = if w.keep_samples == 0 || keep_n == 0 {
                            0
                        } else {
                            w.keep_samples.max(keep_n)
                        };
                    }
                }
                // The first sample is taken when the watch starts, as the real engine's next
                // update cycle does (immediately in AUTO mode).
                self.advance();
                Reply::Ok
            }
            Request::UnwatchFields {
                group_id,
                field_group_id,
            } => {
                let r = (*group_id as u32, *field_group_id);
                self.group_entities(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                self.unwatch_refs(|x| *x == r);
                Reply::Ok
            }
            // Sampling already happened in `advance`; AUTO mode needs nothing more.
            Request::UpdateAllFields { .. } => Reply::Ok,
            Request::EntitiesGetLatestValues {
                entities,
                field_ids,
                live,
            } => {
                if entities.is_empty()
                    || field_ids.is_empty()
                    || entities.len() > 1024
                    || field_ids.len() > 128
                {
                    return Err(ST_BADPARAM);
                }
                let mut out = Vec::with_capacity(entities.len() * field_ids.len());
                for e in entities {
                    for f in field_ids {
                        match fields::by_id(*f) {
                            Some(meta) => out.push(self.samples_latest(*e, meta, *live)),
                            None => out.push(Sample {
                                entity_group: e.0,
                                entity_id: e.1,
                                field_id: *f,
                                field_type: b'i',
                                status: -13,
                                ts_us: 0,
                                value: Sentinel::Blank.value(b'i'),
                            }),
                        }
                    }
                }
                Reply::Samples(out)
            }
            Request::GetValuesSince {
                group_id,
                field_group_id,
                since_us,
            } => {
                let entities = self.group_entities(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let fg = self
                    .field_groups
                    .get(field_group_id)
                    .ok_or(ST_NOT_CONFIGURED)?
                    .fields
                    .clone();
                let mut out = Vec::new();
                for e in &entities {
                    for f in &fg {
                        let (Some(w), Some(meta)) =
                            (self.watches.get(&(e.0, e.1, *f)), fields::by_id(*f))
                        else {
                            continue;
                        };
                        out.extend(w.samples.iter().filter(|s| s.0 >= *since_us).map(
                            |(ts, v, st)| Sample {
                                entity_group: e.0,
                                entity_id: e.1,
                                field_id: *f,
                                field_type: meta.field_type,
                                status: *st,
                                ts_us: *ts,
                                value: v.clone(),
                            },
                        ));
                    }
                }
                Reply::ValuesSince {
                    samples: out,
                    next_since_us: self.now() + 1,
                }
            }
            Request::FieldGroupGetInfo { field_group_id } => {
                let f = self.field_groups.get(field_group_id).ok_or(ST_NO_DATA)?;
                Reply::FieldGroups(vec![FieldGroupEntry {
                    id: *field_group_id,
                    name: f.name.clone(),
                    field_ids: f.fields.clone(),
                }])
            }
            Request::FieldGroupGetAll => Reply::FieldGroups(
                self.field_groups
                    .iter()
                    .map(|(id, f)| FieldGroupEntry {
                        id: *id,
                        name: f.name.clone(),
                        field_ids: f.fields.clone(),
                    })
                    .collect(),
            ),
            Request::HealthSet { group_id, systems } => {
                let g = self
                    .groups
                    .get_mut(&(*group_id as u32))
                    .ok_or(ST_NOT_CONFIGURED)?;
                g.health = *systems;
                Reply::Ok
            }
            Request::HealthGet { group_id } => Reply::HealthSystems(
                self.groups
                    .get(&(*group_id as u32))
                    .ok_or(ST_NOT_CONFIGURED)?
                    .health,
            ),
            Request::HealthCheck { group_id } => {
                let g = self
                    .groups
                    .get(&(*group_id as u32))
                    .ok_or(ST_NOT_CONFIGURED)?;
                let incidents: Vec<Incident> = self
                    .incidents
                    .iter()
                    .filter(|i| g.entities.contains(&i.entity) && g.health & i.system != 0)
                    .cloned()
                    .collect();
                Reply::Health {
                    overall: incidents.iter().map(|i| i.health).max().unwrap_or(0),
                    incidents,
                }
            }
        })
    }
}

fn trim(w: &mut Watch, now: i64) {
    while w.samples.front().is_some_and(|s| s.0 < now - w.keep_age_us) && w.samples.len() > 1 {
        w.samples.pop_front();
    }
    if w.keep_samples > 0 {
        while w.samples.len() > w.keep_samples {
            w.samples.pop_front();
        }
    }
}
