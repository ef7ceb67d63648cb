//! The simulated node built from a profile: GPUs with their MIG instances and NVLinks,
//! NvSwitches, CPUs; entity ids exactly as DCGM numbers them.

use crate::generator::mix;
use crate::profile::{self, GiSpec, Profile};
use crate::MetricGroup;
use crate::{FE_CPU, FE_CPU_CORE, FE_GPU, FE_GPU_CI, FE_GPU_I, FE_LINK, FE_SWITCH};
use std::collections::HashSet;

// dcgmNvLinkLinkState_t.
pub const LINK_NOT_SUPPORTED: u32 = 0;
pub const LINK_DISABLED: u32 = 1;
pub const LINK_DOWN: u32 = 2;
pub const LINK_UP: u32 = 3;

// dcgmNvLinkGpuP2PStatus_t.
pub const P2P_OK: u32 = 0;
pub const P2P_NOT_SUPPORTED: u32 = 5;

#[derive(Clone, Debug)]
pub struct Ci {
    pub entity_id: u32,
    pub nvml_id: u32,
    pub profile_id: u32,
    pub slices: u32,
}

#[derive(Clone, Debug)]
pub struct Gi {
    pub entity_id: u32,
    pub nvml_id: u32,
    pub profile: String,
    pub profile_id: u32,
    pub slices: u32,
    pub memory_mib: i64,
    pub uuid: String,
    pub cis: Vec<Ci>,
}

#[derive(Clone, Debug)]
pub struct Gpu {
    pub id: u32,
    pub model: String,
    pub brand: String,
    pub uuid: String,
    pub serial: String,
    pub pci_bus_id: String,
    pub vbios: String,
    pub inforom: String,
    pub memory_mib: i64,
    pub power_limit_w: f64,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub compute_capability: i64,
    pub pci_device_id: u32,
    pub bar1_mib: i64,
    pub mig_slices: i64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    pub supported: bool,
    pub lost: bool,
    /// Driver unbound (`gpu_unbind`): DCGM keeps the GPU listed with status Detached (its
    /// uuid is not found again when the driver re-attaches), refuses it in groups and drops
    /// its MIG instances from the entity lists until it is bound again.
    pub unbound: bool,
    /// `attributes_fail`: dcgmGetDeviceAttributes answers NOT_SUPPORTED.
    pub attributes_fail: bool,
    /// dcgmNvLinkLinkState_t per link index.
    pub links: Vec<u32>,
    /// `Some` when MIG mode is on (possibly with no instances yet).
    pub mig: Option<Vec<Gi>>,
    /// DCGM samples its profiling fields through NVML's GPM (no profiling module needed).
    pub gpm: bool,
}

impl Gpu {
    pub fn instances(&self) -> &[Gi] {
        self.mig.as_deref().unwrap_or(&[])
    }
}

#[derive(Clone, Debug)]
pub struct Switch {
    pub id: u32,
    pub ports: Vec<u32>,
}

#[derive(Clone, Debug)]
pub struct Cpu {
    pub id: u32,
    pub cores: Vec<u32>,
    /// Empty: DCGM reports no serial number.
    pub serial: String,
}

/// An entity resolved to the node's objects.
#[derive(Clone, Copy, Debug)]
pub enum Ent<'a> {
    Gpu(&'a Gpu),
    Gi(&'a Gpu, &'a Gi),
    Ci(&'a Gpu, &'a Gi, &'a Ci),
    GpuLink(&'a Gpu, u32),
    Switch(&'a Switch),
    SwitchLink(&'a Switch, u32),
    Cpu(&'a Cpu),
    Core(&'a Cpu, u32),
}

impl<'a> Ent<'a> {
    /// The physical GPU behind a GPU, instance, compute-instance or GPU-link entity.
    pub fn gpu(&self) -> Option<&'a Gpu> {
        match *self {
            Ent::Gpu(g) | Ent::Gi(g, _) | Ent::Ci(g, _, _) | Ent::GpuLink(g, _) => Some(g),
            _ => None,
        }
    }
}

pub struct Node {
    pub driver_version: String,
    pub lost_gpu_attributes: super::profile::LostAttributes,
    pub nvml_version: String,
    pub cuda_driver_version: i64,
    pub seed: u64,
    pub gpus: Vec<Gpu>,
    pub switches: Vec<Switch>,
    pub cpus: Vec<Cpu>,
    pub cpu_vendor: String,
    pub cpu_model: String,
    pub max_mig: u32,
    pub dcp: bool,
    pub dcp_error: i32,
    pub profiling_module: bool,
    /// DCGM's sysmon module loads only on supported (Grace) CPUs: without `[cpus]` the CPU
    /// requests answer MODULE_NOT_LOADED.
    pub sysmon_module: bool,
    pub metric_groups: Vec<MetricGroup>,
    pub p2p_mode: String,
    pub p2p_overrides: Vec<(u32, u32, u32)>,
    /// The profile's `[[nvml_fields]]`: the NVLink KiB counters (`nvlink.rs`).
    pub nvml_fields: Vec<super::profile::NvmlFieldOverride>,
}

/// Link dcgm_link_t packing: `type | index << 8 | parent << 24` (dcgm_structs.h:537-556).
pub fn pack_link(parent_group: u32, index: u32, parent_id: u32) -> u32 {
    parent_group | (index & 0xffff) << 8 | (parent_id & 0xff) << 24
}

/// (parent group, index, parent id) of a packed dcgm_link_t.
pub fn unpack_link(raw: u32) -> (u32, u32, u32) {
    (raw & 0xff, (raw >> 8) & 0xffff, raw >> 24)
}

fn hex_uuid(seed: u64, what: u64, a: u64, b: u64) -> String {
    let h1 = mix(seed ^ mix(what ^ mix(a ^ mix(b))));
    let h2 = mix(h1 ^ 0x5151);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    )
}

/// DCP metric groups of a Hopper GPU: every profiling field an exporter asks for.
pub fn default_metric_groups() -> Vec<MetricGroup> {
    let g = |major: u16, minor: u16, ids: Vec<u16>| MetricGroup {
        major_id: major,
        minor_id: minor,
        field_ids: ids,
    };
    vec![
        g(1, 0, vec![1001, 1002, 1003]),
        g(1, 1, vec![1004, 1013, 1014, 1015, 1016]),
        g(1, 2, vec![1006, 1007, 1008]),
        g(2, 0, vec![1005]),
        g(3, 0, vec![1009, 1010, 1091, 1092]),
        g(4, 0, vec![1011, 1012]),
        g(4, 1, (1040..=1075).collect()),
        g(4, 2, vec![1532, 1533]),
        g(5, 0, (1017..=1034).collect()),
        g(6, 0, (1084..=1090).chain(1093..=1096).collect()),
    ]
}

/// NVML_GPU_INSTANCE_PROFILE_* index of a profile (the order NVML enumerates instances in,
/// which is the order DCGM numbers them in): 1 slice 0, 2 → 1, 3 → 2, 4 → 3, 7 → 4, 8 → 5,
/// 6 → 6, 1 slice +me 7, 2 slices +me 8, 1 slice with double memory 9.
/// A link's or port's initial state: down or disabled where the profile lists it, else up.
fn link_state(down: &[(u32, u32)], disabled: &[(u32, u32)], at: (u32, u32)) -> u32 {
    if down.contains(&at) {
        LINK_DOWN
    } else if disabled.contains(&at) {
        LINK_DISABLED
    } else {
        LINK_UP
    }
}

fn profile_index(slices: u32, gb: u32, suffix: &str, gpu_memory_mib: i64) -> u32 {
    let per_slice_gb = gpu_memory_mib as f64 / 1024.0 / 8.0;
    match (slices, suffix.starts_with("+me")) {
        (1, true) => 7,
        (2, true) => 8,
        (1, false) if f64::from(gb) > per_slice_gb * 1.6 => 9,
        (1, _) => 0,
        (2, _) => 1,
        (3, _) => 2,
        (4, _) => 3,
        (7, _) => 4,
        (8, _) => 5,
        _ => 6,
    }
}

/// The NVML profile id `nvidia-smi mig -lgip` shows for an instance profile index.
fn default_profile_id(index: u32) -> u32 {
    match index {
        0 => 19,
        1 => 14,
        2 => 9,
        3 => 5,
        4 => 0,
        7 => 20,
        8 => 21,
        9 => 15,
        _ => 32,
    }
}

/// NVML_COMPUTE_INSTANCE_PROFILE_* of a compute instance with this many slices.
fn ci_profile_id(slices: u32) -> u32 {
    match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        8 => 5,
        6 => 6,
        _ => 7,
    }
}

/// GPU-instance ids the driver usually hands out for a slice count (A100/H100 placements).
fn nvml_gi_candidates(slices: u32) -> &'static [u32] {
    match slices {
        7 | 8 => &[0],
        4 => &[1],
        3 => &[1, 2],
        2 => &[3, 4, 5],
        _ => &[7, 8, 9, 10, 11, 12, 13],
    }
}

/// Builds a GPU's instances from a layout already checked by `profile::check_layout`:
/// ordered like NVML enumerates them (by profile, then instance id), GI entity ids
/// `gpu * max + index`, CI entity ids `gpu * max + running count` (DcgmCacheManager.cpp:943, 978).
pub fn build_layout(seed: u64, gpu: &Gpu, max: u32, specs: &[GiSpec]) -> Vec<Gi> {
    struct Pending<'a> {
        spec: &'a GiSpec,
        slices: u32,
        gb: u32,
        index: u32,
        nvml_id: Option<u32>,
    }
    let mut pending: Vec<Pending> = specs
        .iter()
        .map(|s| {
            let (slices, gb, suffix) = profile::parse_mig_name(&s.profile).unwrap_or((1, 10, ""));
            let slices = s.slices.unwrap_or(slices);
            Pending {
                spec: s,
                slices,
                gb,
                index: profile_index(slices, gb, suffix, gpu.memory_mib),
                nvml_id: s.nvml_id,
            }
        })
        .collect();
    let mut used: HashSet<u32> = pending.iter().filter_map(|p| p.nvml_id).collect();
    for p in pending.iter_mut().filter(|p| p.nvml_id.is_none()) {
        let id = nvml_gi_candidates(p.slices)
            .iter()
            .copied()
            .find(|c| !used.contains(c))
            .unwrap_or_else(|| (1..).find(|c| !used.contains(c)).unwrap_or(0));
        used.insert(id);
        p.nvml_id = Some(id);
    }
    pending.sort_by_key(|p| (p.index, p.nvml_id));
    let mut ci_count = 0;
    pending
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let nvml_id = p.nvml_id.unwrap_or(0);
            let n_ci = if p.spec.cis.is_empty() {
                p.spec.compute_instances.unwrap_or(1).max(1)
            } else {
                p.spec.cis.len() as u32
            };
            let even = (p.slices / n_ci).max(1);
            // Compute-instance sizes come in 1, 2, 3, 4 and 7 slices.
            let even = [7, 4, 3, 2, 1]
                .into_iter()
                .find(|s| *s <= even)
                .unwrap_or(1);
            let cis = (0..n_ci)
                .map(|c| {
                    let spec = p.spec.cis.get(c as usize);
                    let slices = spec.and_then(|s| s.slices).unwrap_or(even);
                    let ci = Ci {
                        entity_id: gpu.id * max + ci_count,
                        nvml_id: spec.and_then(|s| s.nvml_id).unwrap_or(c),
                        profile_id: spec
                            .and_then(|s| s.profile_id)
                            .unwrap_or_else(|| ci_profile_id(slices)),
                        slices,
                    };
                    ci_count += 1;
                    ci
                })
                .collect();
            Gi {
                entity_id: gpu.id * max + i as u32,
                nvml_id,
                profile: p.spec.profile.clone(),
                profile_id: p
                    .spec
                    .profile_id
                    .unwrap_or_else(|| default_profile_id(p.index)),
                slices: p.slices,
                memory_mib: i64::from(p.gb) * 1024 * 95 / 100,
                uuid: p.spec.uuid.clone().unwrap_or_else(|| {
                    format!(
                        "MIG-{}",
                        hex_uuid(
                            seed,
                            0x004d_4947,
                            u64::from(gpu.id),
                            u64::from(nvml_id) << 8 | u64::from(p.index)
                        )
                    )
                }),
                cis,
            }
        })
        .collect()
}

impl Node {
    pub fn build(p: &Profile) -> Node {
        let seed = p.node.seed;
        let d = &p.gpus;
        let bus_step = if d.count <= 14 { 0x10 } else { 0x4 };
        let gpus: Vec<Gpu> = (0..d.count)
            .map(|id| {
                let spec = p.gpu_spec(id).cloned().unwrap_or_default();
                let model = spec.model.clone().unwrap_or_else(|| d.model.clone());
                let info = profile::model_info(&model);
                let links = spec.links.clone().unwrap_or_else(|| {
                    (0..d.nvlinks)
                        .map(|l| link_state(&d.down_links, &d.disabled_links, (id, l)))
                        .collect()
                });
                Gpu {
                    id,
                    brand: spec.brand.clone().unwrap_or_else(|| d.brand.clone()),
                    uuid: spec.uuid.clone().unwrap_or_else(|| {
                        format!("GPU-{}", hex_uuid(seed, 0x475055, u64::from(id), 0))
                    }),
                    serial: spec.serial.clone().unwrap_or_else(|| {
                        format!(
                            "{}",
                            1_650_000_000_000u64 + mix(seed ^ u64::from(id) ^ 0x5e) % 1_000_000_000
                        )
                    }),
                    pci_bus_id: spec.pci_bus_id.clone().unwrap_or_else(|| {
                        format!(
                            "00000000:{:02X}:00.0",
                            (d.pci_bus_base + id * bus_step) & 0xff
                        )
                    }),
                    vbios: spec
                        .vbios
                        .clone()
                        .or_else(|| d.vbios.clone())
                        .unwrap_or_else(|| info.vbios.to_string()),
                    inforom: d
                        .inforom
                        .clone()
                        .unwrap_or_else(|| "G520.0200.00.05".into()),
                    memory_mib: spec.memory_mib.or(d.memory_mib).unwrap_or(info.memory_mib),
                    power_limit_w: spec
                        .power_limit_w
                        .or(d.power_limit_w)
                        .unwrap_or(info.power_limit_w),
                    sm_clock_mhz: d.sm_clock_mhz.unwrap_or(info.sm_clock_mhz),
                    mem_clock_mhz: d.mem_clock_mhz.unwrap_or(info.mem_clock_mhz),
                    compute_capability: info.compute_capability,
                    pci_device_id: d.pci_device_id.unwrap_or(info.pci_device_id),
                    bar1_mib: info.bar1_mib,
                    mig_slices: info.mig_slices,
                    pcie_gen: d.pcie_gen,
                    pcie_width: d.pcie_width,
                    supported: spec.supported.unwrap_or(!d.unsupported.contains(&id)),
                    lost: spec.lost,
                    unbound: false,
                    attributes_fail: false,
                    links,
                    mig: None,
                    gpm: spec.gpm.unwrap_or(d.gpm),
                    model,
                }
            })
            .collect();
        let switches = p
            .switches
            .as_ref()
            .map(|s| {
                (0..s.count)
                    .map(|sw| Switch {
                        id: sw,
                        ports: (0..s.ports)
                            .map(|port| link_state(&s.down_ports, &s.disabled_ports, (sw, port)))
                            .collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let cpus = p
            .cpus
            .as_ref()
            .map(|c| {
                (0..c.count)
                    .map(|i| Cpu {
                        id: i,
                        cores: (i * c.cores_per_cpu..(i + 1) * c.cores_per_cpu).collect(),
                        serial: c.serials.get(i as usize).cloned().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut node = Node {
            driver_version: p.node.driver_version.clone(),
            lost_gpu_attributes: p.node.lost_gpu_attributes,
            nvml_version: p.node.nvml_version.clone(),
            cuda_driver_version: p.node.cuda_driver_version,
            seed,
            gpus,
            switches,
            cpus,
            cpu_vendor: p
                .cpus
                .as_ref()
                .map(|c| c.vendor.clone())
                .unwrap_or_default(),
            cpu_model: p.cpus.as_ref().map(|c| c.model.clone()).unwrap_or_default(),
            max_mig: d.max_mig_devices,
            dcp: d.dcp,
            dcp_error: d.dcp_error,
            profiling_module: d.profiling_module,
            sysmon_module: p.cpus.is_some(),
            metric_groups: d
                .metric_groups
                .as_ref()
                .map(|gs| {
                    gs.iter()
                        .map(|g| MetricGroup {
                            major_id: g.major,
                            minor_id: g.minor,
                            field_ids: g.fields.clone(),
                        })
                        .collect()
                })
                .unwrap_or_else(default_metric_groups),
            p2p_mode: d.p2p.clone(),
            p2p_overrides: d.p2p_overrides.clone(),
            nvml_fields: p.nvml_fields.clone(),
        };
        for m in &p.mig {
            node.set_mig(m.gpu, Some(&m.gi_specs()));
        }
        node
    }

    /// Replaces a GPU's MIG layout (`None`: MIG mode off). The layout must be valid.
    pub fn set_mig(&mut self, gpu: u32, specs: Option<&[GiSpec]>) {
        let (seed, max) = (self.seed, self.max_mig);
        if let Some(g) = self.gpus.get_mut(gpu as usize) {
            g.mig = specs.map(|s| build_layout(seed, g, max, s));
        }
    }

    pub fn gpu(&self, id: u32) -> Option<&Gpu> {
        self.gpus.get(id as usize)
    }

    pub fn gpu_mut(&mut self, id: u32) -> Option<&mut Gpu> {
        self.gpus.get_mut(id as usize)
    }

    /// The DCGM entity of a MIG instance named by NVML ids (as an XID event names it): GPU
    /// instance `gi` of GPU `gpu`, or its compute instance `ci`.
    pub fn instance_entity(&self, gpu: u32, gi: u32, ci: Option<u32>) -> Option<(u32, u32)> {
        let i = self
            .gpu(gpu)?
            .instances()
            .iter()
            .find(|i| i.nvml_id == gi)?;
        match ci {
            None => Some((FE_GPU_I, i.entity_id)),
            Some(ci) => i
                .cis
                .iter()
                .find(|c| c.nvml_id == ci)
                .map(|c| (FE_GPU_CI, c.entity_id)),
        }
    }

    /// The reverse of [`Node::instance_entity`]: (GPU, NVML GPU-instance id, NVML
    /// compute-instance id) of an entity, `None` for the ids a GPU-level entity lacks.
    pub fn nvml_ids(&self, (group, id): (u32, u32)) -> Option<(u32, Option<u32>, Option<u32>)> {
        if group == FE_GPU {
            return self.gpu(id).map(|g| (g.id, None, None));
        }
        self.gpus.iter().find_map(|g| {
            g.instances().iter().find_map(|i| match group {
                FE_GPU_I if i.entity_id == id => Some((g.id, Some(i.nvml_id), None)),
                FE_GPU_CI => i
                    .cis
                    .iter()
                    .find(|c| c.entity_id == id)
                    .map(|c| (g.id, Some(i.nvml_id), Some(c.nvml_id))),
                _ => None,
            })
        })
    }

    /// The objects behind an (entity group, entity id) pair, if it exists.
    pub fn resolve(&self, (group, id): (u32, u32)) -> Option<Ent<'_>> {
        match group {
            FE_GPU => self.gpu(id).map(Ent::Gpu),
            FE_GPU_I => {
                let g = self.gpu(id / self.max_mig)?;
                let gi = g.instances().iter().find(|i| i.entity_id == id)?;
                Some(Ent::Gi(g, gi))
            }
            FE_GPU_CI => {
                let g = self.gpu(id / self.max_mig)?;
                g.instances().iter().find_map(|gi| {
                    gi.cis
                        .iter()
                        .find(|c| c.entity_id == id)
                        .map(|c| Ent::Ci(g, gi, c))
                })
            }
            FE_SWITCH => self.switches.get(id as usize).map(Ent::Switch),
            FE_LINK => {
                let (parent, idx, pid) = unpack_link(id);
                match parent {
                    FE_GPU => {
                        let g = self.gpu(pid)?;
                        ((idx as usize) < g.links.len()).then_some(Ent::GpuLink(g, idx))
                    }
                    FE_SWITCH => {
                        let s = self.switches.get(pid as usize)?;
                        ((idx as usize) < s.ports.len()).then_some(Ent::SwitchLink(s, idx))
                    }
                    _ => None,
                }
            }
            FE_CPU => self.cpus.get(id as usize).map(Ent::Cpu),
            FE_CPU_CORE => self
                .cpus
                .iter()
                .find(|c| c.cores.contains(&id))
                .map(|c| Ent::Core(c, id)),
            _ => None,
        }
    }

    /// Every entity of a group, in DCGM's order. Groups the node has none of (vGPU,
    /// ConnectX, ...) are empty.
    pub fn all_of(&self, group: u32) -> Vec<(u32, u32)> {
        match group {
            // Detached GPUs stay listed (GetAllEntitiesOfEntityGroup, activeOnly 0); their
            // instances do not (DcgmCacheManager.cpp, GetAllEntitiesOfEntityGroup).
            FE_GPU => self.gpus.iter().map(|g| (FE_GPU, g.id)).collect(),
            FE_GPU_I => self
                .gpus
                .iter()
                .filter(|g| !g.unbound)
                .flat_map(|g| g.instances().iter().map(|i| (FE_GPU_I, i.entity_id)))
                .collect(),
            FE_GPU_CI => self
                .gpus
                .iter()
                .filter(|g| !g.unbound)
                .flat_map(|g| {
                    g.instances()
                        .iter()
                        .flat_map(|i| i.cis.iter().map(|c| (FE_GPU_CI, c.entity_id)))
                })
                .collect(),
            FE_SWITCH => self.switches.iter().map(|s| (FE_SWITCH, s.id)).collect(),
            FE_LINK => {
                let mut v: Vec<(u32, u32)> = self
                    .gpus
                    .iter()
                    .flat_map(|g| {
                        (0..g.links.len() as u32)
                            .map(move |l| (FE_LINK, pack_link(FE_GPU, l, g.id)))
                    })
                    .collect();
                for s in &self.switches {
                    v.extend(
                        (0..s.ports.len() as u32).map(|p| (FE_LINK, pack_link(FE_SWITCH, p, s.id))),
                    );
                }
                v
            }
            FE_CPU => self.cpus.iter().map(|c| (FE_CPU, c.id)).collect(),
            FE_CPU_CORE => self
                .cpus
                .iter()
                .flat_map(|c| c.cores.iter().map(|&k| (FE_CPU_CORE, k)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether an entity counts as "supported" (DCGM_GEGE_FLAG_ONLY_SUPPORTED): DCGM's
    /// activeOnly lists keep GPUs whose status is Ok, so neither an unsupported, a lost nor a
    /// detached one (DcgmCacheManager::GetGpuIds, GetAllEntitiesOfEntityGroup).
    pub fn supported(&self, ent: (u32, u32)) -> bool {
        match self.resolve(ent) {
            Some(e) => e.gpu().is_none_or(|g| g.supported && !g.unbound && !g.lost),
            None => false,
        }
    }

    /// dcgmNvLinkGpuP2PStatus_t from GPU `a` toward GPU `b`.
    pub fn p2p(&self, a: &Gpu, b: &Gpu) -> u32 {
        if a.id == b.id || a.lost || b.lost {
            return P2P_NOT_SUPPORTED;
        }
        if let Some(o) = self
            .p2p_overrides
            .iter()
            .find(|(x, y, _)| (*x, *y) == (a.id, b.id) || (*x, *y) == (b.id, a.id))
        {
            return o.2;
        }
        let has_up = |g: &Gpu| g.links.contains(&LINK_UP);
        match self.p2p_mode.as_str() {
            "nvlink" => P2P_OK,
            "pcie" => P2P_NOT_SUPPORTED,
            _ if has_up(a) && has_up(b) => P2P_OK,
            _ => P2P_NOT_SUPPORTED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_pack_like_dcgm_link_t() {
        assert_eq!(pack_link(FE_GPU, 17, 7), 1 | 17 << 8 | 7 << 24);
        assert_eq!(unpack_link(pack_link(FE_SWITCH, 63, 3)), (FE_SWITCH, 63, 3));
    }

    #[test]
    fn instances_are_numbered_in_nvml_profile_order() {
        let p = Profile::parse(
            "[gpus]\ncount = 2\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
             [[mig]]\ngpu = 1\ninstances = [\"3g.40gb\", \"2g.20gb\", \"1g.10gb\", \"1g.10gb\"]\n\
             compute_instances = [2]\n",
        )
        .unwrap();
        let n = Node::build(&p);
        let gis = n.gpus[1].instances();
        let names: Vec<&str> = gis.iter().map(|g| g.profile.as_str()).collect();
        assert_eq!(names, ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]);
        let ids: Vec<u32> = gis.iter().map(|g| g.entity_id).collect();
        assert_eq!(ids, [8, 9, 10, 11]);
        let nvml: Vec<u32> = gis.iter().map(|g| g.nvml_id).collect();
        assert_eq!(nvml, [7, 8, 3, 1]);
        let profile_ids: Vec<u32> = gis.iter().map(|g| g.profile_id).collect();
        assert_eq!(profile_ids, [19, 19, 14, 9]);
        // The 3g instance has two compute instances; CI ids count up across the GPU.
        let cis: Vec<u32> = gis
            .iter()
            .flat_map(|g| g.cis.iter().map(|c| c.entity_id))
            .collect();
        assert_eq!(cis, [8, 9, 10, 11, 12]);
        assert_eq!(
            gis[3].cis.iter().map(|c| c.slices).collect::<Vec<_>>(),
            [1, 1]
        );
        assert!(
            matches!(n.resolve((FE_GPU_CI, 12)), Some(Ent::Ci(_, gi, _)) if gi.entity_id == 11)
        );
        assert!(n.resolve((FE_GPU_I, 12)).is_none());
        assert!(gis.iter().all(|g| g.uuid.starts_with("MIG-")));
    }
}
