//! What a field reads on an entity at a given time: faults first, then the profile's
//! overrides, then values that describe the node (names, ids, sizes), then the field's
//! default generator. Shared by both simulators: the simulated NVML answers its calls from
//! the same readings, so the two agree on every value NVML and DCGM both serve.

/// dcgmReturn_t of a reading: OK, and NO_DATA for an entity that does not exist.
pub const ST_OK: i32 = 0;
pub const ST_NO_DATA: i32 = -14;

use crate::faults::Fault;
use crate::generator::{self, default_for, Generator, Scale, Sentinel};
use crate::node::{Ent, Node, LINK_UP};
use crate::profile::{FieldOverride, ENTITY_GROUP_NAMES};
use crate::Value;
use crate::{FE_CPU, FE_CPU_CORE, FE_GPU, FE_GPU_CI, FE_GPU_I, FE_LINK, FE_NONE, FE_SWITCH};
use dcgm_sys::fields::FieldMeta;
use std::collections::{HashMap, HashSet, VecDeque};

pub const FI_CLOCK_EVENTS: u16 = 112;
pub const FI_XID: u16 = 230;
/// DCGM_FI_SYSTEM_GPU_BIND_EVENT (alias DCGM_FI_BIND_UNBIND_EVENT), a global field.
pub const FI_BIND_UNBIND: u16 = 6;
const FI_FB_USED: u16 = 252;
/// How many clock events per GPU are remembered (older ones can no longer be sampled).
const CLOCK_EVENTS_KEPT: usize = 256;

/// Run-time changes from faults that values depend on.
#[derive(Default)]
pub struct FaultState {
    pub not_supported: HashSet<(Option<u32>, u16)>,
    pub set: HashMap<(Option<u32>, u16), Generator>,
    /// Per GPU: (time, clock-event mask), oldest first.
    pub clock_events: HashMap<u32, VecDeque<(i64, i64)>>,
    /// ((entity group, entity id), time, xid), append-only: watches of
    /// DCGM_FI_DEV_XID_ERRORS keep a cursor. The entity NVML attributed the XID to: a GPU,
    /// or one of its GPU or compute instances.
    pub xids: Vec<((u32, u32), i64, i64)>,
    /// `sampling_stop`: polled fields take no new samples.
    pub sampling_stopped: bool,
    /// `unwatch_fails F STATUS`: what an unwatch of a field group holding F answers.
    pub unwatch_fails: HashMap<u16, i32>,
    /// `fail_reads N`: reads of latest values still to fail.
    pub fail_reads: u32,
    /// `fail_values_since N F`: dcgmGetValuesSince calls on field F still to fail.
    pub fail_values_since: Option<(u32, u16)>,
    /// (time, state) of DCGM_FI_BIND_UNBIND_EVENT, append-only like `xids`.
    pub bind_events: Vec<(i64, i64)>,
    /// `prof_stuck`: GPU -> the status its profiling fields' samples get (0: they read 0).
    pub prof_stuck: HashMap<u32, i32>,
    /// `spike`: (GPU or every entity, field, value, from µs, until µs), oldest first.
    pub spikes: VecDeque<(Option<u32>, u16, f64, i64, i64)>,
}

/// How many spikes are remembered (older ones can no longer be sampled).
const SPIKES_KEPT: usize = 256;

impl FaultState {
    /// A `spike` read at `at` (µs): samples in (at + after, at + after + ms] read `value`.
    pub fn add_spike(
        &mut self,
        gpu: Option<u32>,
        field: u16,
        value: f64,
        ms: u64,
        after_ms: u64,
        at: i64,
    ) {
        let from = at.saturating_add((after_ms as i64).saturating_mul(1000));
        let until = from.saturating_add((ms as i64).saturating_mul(1000));
        self.spikes.push_back((gpu, field, value, from, until));
        while self.spikes.len() > SPIKES_KEPT {
            self.spikes.pop_front();
        }
    }

    /// Applies a fault that changes how one field reads (`not_supported`, `restored`, `set`,
    /// `spike`) at `at` (µs), the same in the simulated DCGM and NVML; false for any other
    /// fault, which the caller applies itself.
    pub fn apply_field_fault(&mut self, fault: &Fault, at: i64) -> bool {
        match fault {
            Fault::FieldNotSupported { gpu, field } => {
                self.not_supported.insert((*gpu, *field));
            }
            Fault::FieldRestored { gpu, field } => {
                self.not_supported.remove(&(*gpu, *field));
                self.set.remove(&(*gpu, *field));
            }
            Fault::SetField { gpu, field, gen } => {
                self.set.insert((*gpu, *field), gen.clone());
            }
            Fault::Spike {
                gpu,
                field,
                value,
                ms,
                after_ms,
            } => self.add_spike(*gpu, *field, *value, *ms, *after_ms, at),
            _ => return false,
        }
        true
    }

    /// The value a spike gives `field` of GPU `gpu` in a sample at `t`, the latest spike's.
    pub fn spike_at(&self, gpu: Option<u32>, field: u16, t: i64) -> Option<f64> {
        self.spikes
            .iter()
            .rev()
            .find(|s| s.1 == field && (s.0.is_none() || s.0 == gpu) && s.3 < t && t <= s.4)
            .map(|s| s.2)
    }

    pub fn add_clock_event(&mut self, gpu: u32, ts: i64, mask: i64) {
        let q = self.clock_events.entry(gpu).or_default();
        q.push_back((ts, mask));
        while q.len() > CLOCK_EVENTS_KEPT {
            q.pop_front();
        }
    }
}

/// The node and everything its values depend on.
pub struct World {
    pub node: Node,
    pub start_us: i64,
    pub faults: FaultState,
    overrides: HashMap<u16, Vec<FieldOverride>>,
}

/// Whether a field has values on an entity, and whose values they are.
#[derive(Debug, PartialEq)]
enum Applies {
    Yes,
    No,
    /// Read on another entity, as DCGM's cache manager maps a field asked of a MIG
    /// instance to its "practical entity" (`SetPracticalEntityInfo` in
    /// DcgmCacheManager.cpp): a GPU-level field to the parent GPU, a GPU_I-level field
    /// asked of a compute instance to its GPU instance.
    On((u32, u32)),
}

/// `DCGM_FS_GLOBAL`: one value for the whole node, whatever entity it is asked of.
const FS_GLOBAL: i32 = 0;

/// The link index of a per-link NVLink field on a GPU entity (dcgm_fields.h numbering).
fn legacy_link_index(id: u16) -> Option<u32> {
    let id = u32::from(id);
    let ranges: [(u32, u32, u32); 22] = [
        // (first id, last id, first link)
        (440, 445, 0),
        (475, 480, 6),
        (446, 448, 12),
        (494, 496, 15),
        (825, 842, 0),
        (879, 896, 0),
        (400, 405, 0),
        (451, 456, 6),
        (406, 408, 12),
        (481, 483, 15),
        (410, 415, 0),
        (457, 462, 6),
        (416, 418, 12),
        (484, 486, 15),
        (420, 425, 0),
        (463, 468, 6),
        (426, 428, 12),
        (487, 489, 15),
        (430, 435, 0),
        (469, 474, 6),
        (436, 438, 12),
        (491, 493, 15),
    ];
    if (1040..=1075).contains(&id) {
        return Some((id - 1040) / 2);
    }
    ranges
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&id))
        .map(|(a, _, first)| first + id - a)
}

/// Fields that carry traffic: they read 0 on a link that is not Up.
fn is_traffic(id: u16) -> bool {
    matches!(id, 440..=449 | 475..=480 | 494..=496 | 825..=843 | 879..=897 | 1011 | 1012 | 1040..=1075 | 1529..=1533 | 780 | 781)
}

fn is_profiling(id: u16) -> bool {
    (1000..1100).contains(&id) || id == 1532 || id == 1533
}

fn key(seed: u64, group: u32, id: u32, field: u16) -> u64 {
    generator::mix(
        seed ^ generator::mix(u64::from(group) << 40 ^ u64::from(id) << 16 ^ u64::from(field)),
    )
}

impl World {
    pub fn new(node: Node, start_us: i64, overrides: &[FieldOverride]) -> World {
        let mut by_field: HashMap<u16, Vec<FieldOverride>> = HashMap::new();
        for o in overrides {
            by_field.entry(o.id).or_default().push(o.clone());
        }
        World {
            node,
            start_us,
            faults: FaultState::default(),
            overrides: by_field,
        }
    }

    fn applies(&self, e: &Ent, meta: &FieldMeta) -> Applies {
        let lvl = meta.entity_level;
        let id = meta.id;
        if lvl == FE_NONE || meta.scope == FS_GLOBAL {
            return Applies::Yes;
        }
        if is_profiling(id) && !self.node.dcp {
            return Applies::No;
        }
        let yes = |b: bool| if b { Applies::Yes } else { Applies::No };
        match e {
            Ent::Gpu(g) => {
                if !matches!(lvl, FE_GPU | FE_GPU_I | FE_GPU_CI) {
                    return Applies::No;
                }
                yes(legacy_link_index(id).is_none_or(|l| (l as usize) < g.links.len()))
            }
            // The profiling module answers for the instance it is asked about: instance-level
            // metrics per instance, device-level ones (PCIe, NVLink, NVDEC/NVJPG bytes and
            // ratios) N/A on MIG (github.com/NVIDIA/DCGM issue 88).
            Ent::Gi(..) | Ent::Ci(..) if is_profiling(id) => {
                yes(matches!(lvl, FE_GPU_I | FE_GPU_CI))
            }
            Ent::Gi(g, _) | Ent::Ci(g, _, _) if lvl == FE_GPU => Applies::On((FE_GPU, g.id)),
            Ent::Ci(_, gi, _) if lvl == FE_GPU_I => Applies::On((FE_GPU_I, gi.entity_id)),
            // The cache manager keeps GPU_CI-level fields (and GPU_I-level ones asked of a GPU
            // instance) on the instance; it has no reader for the other levels there.
            Ent::Gi(..) | Ent::Ci(..) => yes(matches!(lvl, FE_GPU_I | FE_GPU_CI)),
            Ent::GpuLink(..) | Ent::SwitchLink(..) => yes(lvl == FE_LINK),
            Ent::Switch(_) => yes(lvl == FE_SWITCH),
            // A CPU reports core-level fields as the aggregate over its cores.
            Ent::Cpu(_) => yes(lvl == FE_CPU || lvl == FE_CPU_CORE),
            Ent::Core(..) => yes(lvl == FE_CPU_CORE),
        }
    }

    fn scale(e: &Ent) -> Scale {
        let h100 = Scale {
            power_limit_w: 700.0,
            memory_mib: 81559.0,
            sm_clock_mhz: 1980.0,
            mem_clock_mhz: 2619.0,
        };
        let Some(g) = e.gpu() else {
            return h100;
        };
        let memory_mib = match e {
            Ent::Gi(_, gi) | Ent::Ci(_, gi, _) => gi.memory_mib,
            _ => g.memory_mib,
        } as f64;
        Scale {
            power_limit_w: g.power_limit_w,
            memory_mib,
            sm_clock_mhz: f64::from(g.sm_clock_mhz),
            mem_clock_mhz: f64::from(g.mem_clock_mhz),
        }
    }

    /// The profile's override of `field` for this entity, the last that matches.
    fn profile_override(&self, ent: (u32, u32), e: &Ent, field: u16) -> Option<&Generator> {
        let gpu = e.gpu().map(|g| g.id);
        self.overrides.get(&field)?.iter().rev().find_map(|o| {
            let gpu_ok = o
                .gpus
                .as_ref()
                .is_none_or(|gs| gpu.is_some_and(|g| gs.contains(&g)));
            let group_ok = o.entity_group.as_ref().is_none_or(|name| {
                ENTITY_GROUP_NAMES
                    .iter()
                    .any(|(n, fe)| n == name && *fe == ent.0)
            });
            (gpu_ok && group_ok).then_some(&o.gen)
        })
    }

    fn t_s(&self, t: i64) -> f64 {
        (t - self.start_us) as f64 / 1e6
    }

    /// The value a sample of `meta` on `ent` taken at `t` holds; `prev` is the time of the
    /// sample before it (events in [prev, t) show in this one). Returns (payload, status).
    pub fn read(&self, ent: (u32, u32), meta: &FieldMeta, t: i64, prev: i64) -> (Value, i32) {
        let ty = meta.field_type;
        let Some(e) = self.node.resolve(ent) else {
            return (Sentinel::Blank.value(ty), ST_NO_DATA);
        };
        let gpu = e.gpu();
        // A GPU off the bus: NVML fails, the cache stores blanks (DcgmCacheManager.cpp:10107).
        if gpu.is_some_and(|g| g.lost) {
            return (Sentinel::Blank.value(ty), ST_OK);
        }
        let gid = gpu.map(|g| g.id);
        let f = meta.id;
        let faults = &self.faults;
        if faults.not_supported.contains(&(None, f)) || faults.not_supported.contains(&(gid, f)) {
            return (Sentinel::NotSupported.value(ty), ST_OK);
        }
        if let Some(status) = gid.and_then(|g| faults.prof_stuck.get(&g)) {
            if is_profiling(f) {
                return match *status {
                    0 if ty == b'd' => (Value::Double(0.0), ST_OK),
                    0 => (Value::Int64(0), ST_OK),
                    st => (Sentinel::Blank.value(ty), st),
                };
            }
        }
        if let Some(v) = faults.spike_at(gid, f, t) {
            return (generator::number(ty, v), ST_OK);
        }
        if let Some((legacy, factor)) = crate::fields::base_unit_source(f) {
            return self.base_unit(ent, meta, legacy, factor, t, prev);
        }
        match self.applies(&e, meta) {
            Applies::No => return (Sentinel::NotSupported.value(ty), ST_OK),
            Applies::On(practical) => return self.read(practical, meta, t, prev),
            Applies::Yes => {}
        }
        let seed = self.node.seed;
        // Global fields read the same on every entity; a compute instance shares its GPU
        // instance's memory.
        let k = match (&e, f) {
            _ if meta.scope == FS_GLOBAL => key(seed, 0, 0, f),
            (Ent::Ci(_, gi, _), 90..=93 | 250..=254) => key(seed, FE_GPU_I, gi.entity_id, f),
            _ => key(seed, ent.0, ent.1, f),
        };
        let t_s = self.t_s(t);
        if let Some(gen) = faults
            .set
            .get(&(gid, f))
            .or_else(|| faults.set.get(&(None, f)))
        {
            return gen.eval(ty, t_s, k);
        }
        if let (Some(ids), Ent::Gpu(g)) = (crate::nvlink::sources(f), &e) {
            return match self.nvlink_rate(g, ids, t, prev) {
                Some(v) => (Value::Int64(v), ST_OK),
                None => (Sentinel::NotSupported.value(ty), ST_OK),
            };
        }
        if let Some(gen) = self.profile_override(ent, &e, f) {
            return gen.eval(ty, t_s, k);
        }
        if let Some(v) = self.described(ent, &e, meta, t, prev) {
            return (v, ST_OK);
        }
        default_for(f, meta.name, ty, &Self::scale(&e)).eval(ty, t_s, k)
    }

    /// NVML's NVLink KiB counter `id` (`nvlink::DATA_TX`/`DATA_RX`) of `gpu` at `t`; `None`
    /// where NVML refuses it: the profile says so, or `not_supported G 449` (DCGM's field
    /// computed from it) is in force.
    pub fn nvlink_kib(&self, gpu: &crate::node::Gpu, id: u32, t: i64) -> Option<u64> {
        let off = |g: Option<u32>| self.faults.not_supported.contains(&(g, 449));
        if off(None) || off(Some(gpu.id)) {
            return None;
        }
        let n = &self.node;
        crate::nvlink::counter_kib(&n.nvml_fields, n.seed, gpu, id, self.t_s(t))
    }

    /// DCGM's NVLink rate field on `gpu` for the sample at `t`, the watch's previous sample
    /// being at `prev` (`prev >= t`: none, as the first sample of a watch and a live read).
    fn nvlink_rate(&self, gpu: &crate::node::Gpu, ids: &[u32], t: i64, prev: i64) -> Option<i64> {
        let sum = |at: i64| {
            ids.iter().try_fold(0i64, |s, &id| {
                Some(s.wrapping_add(self.nvlink_kib(gpu, id, at)? as i64))
            })
        };
        let now = sum(t)?;
        // A previous sample NVML refused was never stored: DCGM has no sum to compare with.
        let before = if prev < t {
            sum(prev).map(|s| (s, prev))
        } else {
            None
        };
        Some(crate::nvlink::rate((now, t), before))
    }

    /// A base-unit field: the legacy field's reading in the base unit (a blank or
    /// unsupported legacy reading stays one, in the base field's type).
    fn base_unit(
        &self,
        ent: (u32, u32),
        meta: &FieldMeta,
        legacy: u16,
        factor: f64,
        t: i64,
        prev: i64,
    ) -> (Value, i32) {
        let Some(lm) = dcgm_sys::fields::by_id(legacy) else {
            return (Sentinel::NotSupported.value(meta.field_type), ST_OK);
        };
        let (v, st) = self.read(ent, lm, t, prev);
        let x = match v {
            Value::Int64(i) if i < generator::INT64_BLANK => i as f64,
            Value::Double(d) if d < generator::FP64_BLANK => d,
            _ => return (Sentinel::Blank.value(meta.field_type), st),
        };
        let y = x * factor;
        let out = match meta.field_type {
            // An integer base unit (J, Hz, bytes): whole units, as DCGM stores it.
            b'i' => Value::Int64(y.trunc() as i64),
            _ => Value::Double(y),
        };
        (out, st)
    }

    /// Framebuffer (total, reserved, used) in MiB: one `used` draw so that
    /// used + free + reserved = total in every sample.
    fn fb(&self, ent: (u32, u32), e: &Ent, t: i64) -> (i64, i64, i64) {
        let (total, reserved, k) = match e {
            Ent::Gpu(g) => (
                g.memory_mib,
                512.min(g.memory_mib / 8),
                key(self.node.seed, ent.0, ent.1, FI_FB_USED),
            ),
            Ent::Gi(_, gi) | Ent::Ci(_, gi, _) => (
                gi.memory_mib,
                0,
                key(self.node.seed, FE_GPU_I, gi.entity_id, FI_FB_USED),
            ),
            _ => return (0, 0, 0),
        };
        let gen = self
            .profile_override(ent, e, FI_FB_USED)
            .cloned()
            .unwrap_or_else(|| {
                default_for(FI_FB_USED, "DCGM_FI_DEV_FB_USED", b'i', &Self::scale(e))
            });
        let used = match gen.eval(b'i', self.t_s(t), k).0 {
            Value::Int64(u) => u,
            Value::Double(u) => u as i64,
            _ => 0,
        };
        (total, reserved, used.clamp(0, (total - reserved).max(0)))
    }

    /// Values that describe the node rather than move, and values derived from others.
    fn described(
        &self,
        ent: (u32, u32),
        e: &Ent,
        meta: &FieldMeta,
        t: i64,
        prev: i64,
    ) -> Option<Value> {
        let n = &self.node;
        let gpu = e.gpu();
        let s = |x: &str| Some(Value::Str(x.to_string()));
        let i = |x: i64| Some(Value::Int64(x));
        let d = |x: f64| Some(Value::Double(x));
        match meta.id {
            1 => s(&n.driver_version),
            2 => s(&n.nvml_version),
            4 => i(n.gpus.len() as i64),
            5 => i(n.cuda_driver_version),
            50 => match e {
                Ent::Gi(_, gi) | Ent::Ci(_, gi, _) => s(&gi.profile),
                _ => s(&gpu?.model),
            },
            51 => s(&gpu?.brand),
            52 | 55 => i(i64::from(gpu?.id)),
            53 => s(&gpu?.serial),
            54 | 68 => match e {
                Ent::Gi(_, gi) | Ent::Ci(_, gi, _) => s(&gi.uuid),
                _ => s(&gpu?.uuid),
            },
            57 => s(&gpu?.pci_bus_id),
            58 => i(i64::from(gpu?.pci_device_id) << 16 | 0x10de),
            59 => i(0x16c1_10de),
            63 => {
                let cc = gpu?.compute_capability;
                i(((cc / 10) << 32) | (cc % 10))
            }
            65 => i(0),
            66 => i(1),
            67 => i(i64::from(gpu?.mig.is_some())),
            69 => i(gpu?.mig_slices),
            74 => i(0),
            80 => s("6.16"),
            81 => s("0.0"),
            82 => s(&gpu?.inforom),
            84 => i(1),
            85 => s(&gpu?.vbios),
            90 => i(gpu?.bar1_mib),
            92 => i(gpu?.bar1_mib / 64),
            93 => i(gpu?.bar1_mib - gpu?.bar1_mib / 64),
            FI_CLOCK_EVENTS => {
                let g = gpu?.id;
                let mask = self.faults.clock_events.get(&g).map_or(0, |q| {
                    q.iter()
                        .filter(|(ts, _)| *ts >= prev && *ts < t)
                        .fold(0, |m, (_, x)| m | x)
                });
                i(mask)
            }
            FI_BIND_UNBIND => i(self
                .faults
                .bind_events
                .iter()
                .rev()
                .find(|(ts, _)| *ts <= t)
                .map_or(0, |e| e.1)),
            FI_XID => {
                let g = gpu?.id;
                i(self
                    .faults
                    .xids
                    .iter()
                    .rev()
                    .find(|(x, ts, _)| *x == (FE_GPU, g) && *ts <= t)
                    .map_or(0, |e| e.2))
            }
            235 | 237 => i(i64::from(gpu?.pcie_gen)),
            236 | 238 => i(i64::from(gpu?.pcie_width)),
            250..=254 if gpu.is_some() => {
                let (total, reserved, used) = self.fb(ent, e, t);
                match meta.id {
                    250 => i(total),
                    251 => i(total - reserved - used),
                    252 => i(used),
                    253 => i(reserved),
                    _ => d(if total > 0 {
                        used as f64 / total as f64
                    } else {
                        0.0
                    }),
                }
            }
            500 => i(0),
            // NVML_FI_DEV_NVLINK_GET_STATE: 1 active, 0 not.
            1508 => match e {
                Ent::GpuLink(g, l) => i(i64::from(g.links.get(*l as usize) == Some(&LINK_UP))),
                Ent::SwitchLink(sw, p) => i(i64::from(sw.ports.get(*p as usize) == Some(&LINK_UP))),
                _ => None,
            },
            863 => match e {
                Ent::Switch(sw) => i(i64::from(sw.id)),
                _ => None,
            },
            865 => match e {
                Ent::SwitchLink(_, p) => i(i64::from(*p)),
                _ => None,
            },
            866 | 868 | 869 => i(0),
            867 => match e {
                Ent::Switch(sw) => i(0x41 + i64::from(sw.id)),
                _ => None,
            },
            // DCGM_FI_DEV_NVSWITCH_LINK_STATUS: OFF 0, SAFE 1, ACTIVE 2.
            870 => match e {
                Ent::SwitchLink(sw, p) => i(if sw.ports.get(*p as usize) == Some(&LINK_UP) {
                    2
                } else {
                    0
                }),
                _ => None,
            },
            1140 => s(&n.cpu_vendor),
            1141 => s(&n.cpu_model),
            id => {
                // Traffic on a link that is not Up, or on a GPU without links, is zero.
                let idle = match e {
                    Ent::Gpu(g) if is_traffic(id) => match legacy_link_index(id) {
                        Some(l) => g.links.get(l as usize) != Some(&LINK_UP),
                        None => !g.links.contains(&LINK_UP),
                    },
                    Ent::GpuLink(g, l) if is_traffic(id) => {
                        g.links.get(*l as usize) != Some(&LINK_UP)
                    }
                    Ent::SwitchLink(sw, p) if is_traffic(id) => {
                        sw.ports.get(*p as usize) != Some(&LINK_UP)
                    }
                    _ => false,
                };
                idle.then(|| generator::number(meta.field_type, 0.0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_link_fields_map_to_their_link() {
        assert_eq!(legacy_link_index(440), Some(0));
        assert_eq!(legacy_link_index(480), Some(11));
        assert_eq!(legacy_link_index(448), Some(14));
        assert_eq!(legacy_link_index(496), Some(17));
        assert_eq!(legacy_link_index(842), Some(17));
        assert_eq!(legacy_link_index(879), Some(0));
        assert_eq!(legacy_link_index(493), Some(17));
        assert_eq!(legacy_link_index(1075), Some(17));
        assert_eq!(legacy_link_index(449), None);
        assert_eq!(legacy_link_index(843), None);
        assert_eq!(legacy_link_index(490), None);
    }
}
