//! The simulated driver state behind the C exports: the node dcgm-sim builds from the same
//! profile (so GPUs, UUIDs, PCI ids and MIG layouts agree with the simulated DCGM), the
//! profile's processes, device handles, and the run-time faults NVML can see.
//!
//! Everything here is safe Rust; the exports translate pointers to and from these answers.

use crate::ffi::{self, Return};
use dcgm_sim_model::faults::{self, ControlFile, Fault};
use dcgm_sim_model::generator::mix;
use dcgm_sim_model::node::{Ci, Gi, Gpu, Node};
use dcgm_sim_model::profile::{GiSpec, MigLookup, ProcessSpec, Profile, ScheduledFault};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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

fn handle_of(gpu: u32, slot: u32) -> usize {
    HANDLE_BASE | (gpu as usize) << 8 | slot as usize
}

/// The simulated driver, alive between the first `nvmlInit` and the last `nvmlShutdown`.
pub struct Sim {
    node: Node,
    processes: Vec<ProcessSpec>,
    control: Option<ControlFile>,
    scheduled: Vec<ScheduledFault>,
    started: Instant,
    /// How the direct MIG lookups answer (`[nvml] mig_lookup`).
    pub mig_lookup: MigLookup,
    /// MIG lookups never return (`[nvml] hang_mig_lookup`).
    pub hang_mig_lookup: bool,
    /// nvmlInit calls not yet matched by nvmlShutdown.
    pub refcount: u32,
}

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
        Sim {
            node: Node::build(profile),
            processes: profile.processes.clone(),
            control: None,
            scheduled: profile.faults.clone(),
            started: Instant::now(),
            mig_lookup: profile.nvml.mig_lookup,
            hang_mig_lookup: profile.nvml.hang_mig_lookup,
            refcount: 0,
        }
    }

    /// Applies the faults NVML can observe that arrived since the last call: GPUs lost and
    /// recovered, MIG reconfigurations. Field and health faults are DCGM's business.
    pub fn catch_up(&mut self) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut due = Vec::new();
        self.scheduled.retain(|f| {
            if f.at_s <= elapsed {
                due.push(f.action.clone());
                false
            } else {
                true
            }
        });
        let mut faults: Vec<Fault> = due
            .iter()
            .filter_map(|a| faults::parse_line(a).ok())
            .collect();
        if let Some(c) = self.control.as_mut() {
            faults.extend(c.poll());
        }
        for f in faults {
            self.apply(&f);
        }
    }

    fn apply(&mut self, fault: &Fault) {
        match fault {
            Fault::GpuLost { gpu } => {
                if let Some(g) = self.node.gpu_mut(*gpu) {
                    g.lost = true;
                }
            }
            Fault::GpuRecovered { gpu } => {
                if let Some(g) = self.node.gpu_mut(*gpu) {
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
                if dcgm_sim_model::profile::check_layout(&specs, self.node.max_mig).is_err() {
                    return;
                }
                let layout = (!specs.is_empty()).then_some(specs.as_slice());
                self.node.set_mig(*gpu, layout);
            }
            _ => {}
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
        &self.node.driver_version
    }

    pub fn nvml_version(&self) -> &str {
        &self.node.nvml_version
    }

    pub fn cuda_driver_version(&self) -> i64 {
        self.node.cuda_driver_version
    }

    pub fn gpu_count(&self) -> u32 {
        self.node.gpus.len() as u32
    }

    pub fn gpu(&self, index: u32) -> Option<Dev<'_>> {
        self.node.gpu(index).map(Dev::Gpu)
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
        let gpu = self.node.gpu(((handle >> 8) & 0xffff) as u32)?;
        match (handle & 0xff) as u32 {
            0 => Some(Dev::Gpu(gpu)),
            slot => self.mig_devices(gpu).nth(slot as usize - 1),
        }
    }

    pub fn by_uuid(&self, uuid: &str) -> Option<Dev<'_>> {
        self.node.gpus.iter().find_map(|g| {
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
        self.node
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

    /// Per-process utilisation samples of a whole GPU, newer than `last_seen_us`. The driver
    /// samples once a second here; the sample of the current second carries every process.
    pub fn utilization_samples(
        &self,
        gpu: &Gpu,
        last_seen_us: u64,
    ) -> Vec<ffi::ProcessUtilizationSample> {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let ts = now_us - now_us % 1_000_000;
        if ts <= last_seen_us {
            return Vec::new();
        }
        let mut seen = Vec::new();
        self.processes
            .iter()
            .filter(|p| p.gpu == gpu.id && p.gpu_instance.is_none())
            .filter(|p| {
                // A compute+graphics process is one sample, not two.
                let first = !seen.contains(&p.pid);
                seen.push(p.pid);
                first
            })
            .map(|p| ffi::ProcessUtilizationSample {
                pid: p.pid,
                time_stamp: ts,
                sm_util: p.sm_util,
                mem_util: p.mem_util,
                enc_util: 0,
                dec_util: 0,
            })
            .collect()
    }

    /// (total, reserved, used) bytes: totals and reservations as the simulated DCGM's
    /// FB_TOTAL / FB_RESERVED; used is what the device's processes hold.
    pub fn memory(&self, dev: &Dev<'_>) -> (u64, u64, u64) {
        let (total_mib, reserved_mib) = match dev {
            Dev::Gpu(g) => (g.memory_mib, 512.min(g.memory_mib / 8)),
            Dev::Mig { gi, .. } => (gi.memory_mib, 0),
        };
        let (total, reserved) = (
            total_mib.max(0) as u64 * MIB,
            reserved_mib.max(0) as u64 * MIB,
        );
        let used: u64 = match dev {
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
                .map(|(_, m)| m)
                .sum(),
            // Memory belongs to the GPU instance, which its compute instances share.
            Dev::Mig { gpu, gi, .. } => self
                .processes
                .iter()
                .filter(|p| p.gpu == gpu.id && p.gpu_instance == Some(gi.nvml_id))
                .map(|p| p.used_memory_mib * MIB)
                .sum(),
        };
        (total, reserved, used.min(total - reserved))
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
        let g = s.node.gpu(1).unwrap();
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
        s.apply(&Fault::MigReconfigure {
            gpu: 1,
            instances: vec![],
        });
        assert_eq!(s.mig_devices(s.node.gpu(1).unwrap()).count(), 0);
        // Process 11 ran on an instance that no longer exists.
        assert!(s.processes(&s.gpu(1).unwrap(), false).is_empty());
        s.apply(&Fault::GpuLost { gpu: 0 });
        assert_eq!(alive(&s.gpu(0).unwrap()), Err(ffi::ERROR_GPU_IS_LOST));
    }
}
