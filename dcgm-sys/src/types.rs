//! Plain Rust views of DCGM's entities and topology.

use std::fmt;

/// `dcgm_field_entity_group_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityGroup {
    None,
    Gpu,
    Vgpu,
    Switch,
    GpuInstance,
    ComputeInstance,
    Link,
    Cpu,
    CpuCore,
    ConnectX,
    Other(u32),
}

impl EntityGroup {
    pub fn from_raw(v: u32) -> EntityGroup {
        match v {
            0 => EntityGroup::None,
            1 => EntityGroup::Gpu,
            2 => EntityGroup::Vgpu,
            3 => EntityGroup::Switch,
            4 => EntityGroup::GpuInstance,
            5 => EntityGroup::ComputeInstance,
            6 => EntityGroup::Link,
            7 => EntityGroup::Cpu,
            8 => EntityGroup::CpuCore,
            9 => EntityGroup::ConnectX,
            o => EntityGroup::Other(o),
        }
    }

    pub fn raw(self) -> u32 {
        match self {
            EntityGroup::None => 0,
            EntityGroup::Gpu => 1,
            EntityGroup::Vgpu => 2,
            EntityGroup::Switch => 3,
            EntityGroup::GpuInstance => 4,
            EntityGroup::ComputeInstance => 5,
            EntityGroup::Link => 6,
            EntityGroup::Cpu => 7,
            EntityGroup::CpuCore => 8,
            EntityGroup::ConnectX => 9,
            EntityGroup::Other(o) => o,
        }
    }
}

/// One DCGM entity: a group and an id within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entity {
    pub group: EntityGroup,
    pub id: u32,
}

impl Entity {
    pub fn new(group: EntityGroup, id: u32) -> Entity {
        Entity { group, id }
    }
    pub fn gpu(id: u32) -> Entity {
        Entity::new(EntityGroup::Gpu, id)
    }
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{}", self.group, self.id)
    }
}

/// A `dcgm_link_t`: the entity id DCGM uses for `DCGM_FE_LINK`. Bit layout (little endian,
/// `#pragma pack(1)`): type (entity group of the parent) in bits 0-7, link index in bits
/// 8-23, parent GPU or switch id in bits 24-31.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId {
    pub parent: EntityGroup,
    pub index: u16,
    pub parent_id: u8,
}

impl LinkId {
    pub fn pack(self) -> u32 {
        (self.parent.raw() & 0xff)
            | (u32::from(self.index) << 8)
            | (u32::from(self.parent_id) << 24)
    }
    pub fn unpack(raw: u32) -> LinkId {
        LinkId {
            parent: EntityGroup::from_raw(raw & 0xff),
            index: ((raw >> 8) & 0xffff) as u16,
            parent_id: (raw >> 24) as u8,
        }
    }
}

/// `dcgmNvLinkLinkState_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    NotSupported,
    Disabled,
    Down,
    Up,
    Other(u32),
}

impl LinkState {
    pub fn from_raw(v: u32) -> LinkState {
        match v {
            0 => LinkState::NotSupported,
            1 => LinkState::Disabled,
            2 => LinkState::Down,
            3 => LinkState::Up,
            o => LinkState::Other(o),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkStatus {
    /// (gpu id, state of each link index).
    pub gpus: Vec<(u32, Vec<LinkState>)>,
    /// (switch id, state of each port).
    pub switches: Vec<(u32, Vec<LinkState>)>,
}

/// `dcgmDeviceAttributes_v3`, strings decoded. Blank strings stay as DCGM returns them;
/// use [`crate::value::classify_str`] before exporting one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceAttributes {
    pub brand: String,
    pub name: String,
    pub pci_bus_id: String,
    pub serial: String,
    pub uuid: String,
    pub vbios: String,
    pub inforom_image_version: String,
    pub driver_version: String,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub virtualization_mode: u32,
    pub power_limit_current_w: u32,
    pub power_limit_max_w: u32,
    pub slowdown_temp_c: u32,
    pub shutdown_temp_c: u32,
    pub fb_total_mib: u32,
    pub fb_used_mib: u32,
    pub fb_free_mib: u32,
    pub bar1_total_mib: u32,
    pub persistence_mode: bool,
    pub mig_mode: bool,
}

/// One row of the MIG hierarchy: a GPU instance or a compute instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigEntity {
    /// `GpuInstance` or `ComputeInstance`.
    pub entity: Entity,
    /// The GPU for an instance; the GPU instance for a compute instance.
    pub parent: Entity,
    pub gpu_uuid: String,
    pub nvml_gpu_index: u32,
    /// NVML GPU-instance id (what dcgm-exporter exports as `GPU_I_ID`).
    pub nvml_instance_id: u32,
    /// NVML compute-instance id; `None` on GPU-instance rows.
    pub nvml_compute_instance_id: Option<u32>,
    pub nvml_profile_id: u32,
    pub profile_slices: u32,
}

/// A CPU (Grace) and the cores it owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub id: u32,
    pub cores: Vec<u32>,
    /// The serial number `dcgmGetCpuHierarchy_v2` reports (empty where it reports none, or
    /// with a library that only has the v1 call).
    pub serial: String,
}

/// One profiling metric group of `dcgmProfGetSupportedMetricGroups`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricGroup {
    pub major_id: u16,
    pub minor_id: u16,
    pub field_ids: Vec<u16>,
}

/// `dcgmNvLinkGpuP2PStatus_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2PStatus {
    Ok,
    ChipsetNotSupported,
    GpuNotSupported,
    TopologyNotSupported,
    DisabledByRegKey,
    NotSupported,
    Unknown,
}

impl P2PStatus {
    pub fn from_raw(v: u32) -> P2PStatus {
        match v {
            0 => P2PStatus::Ok,
            1 => P2PStatus::ChipsetNotSupported,
            2 => P2PStatus::GpuNotSupported,
            3 => P2PStatus::TopologyNotSupported,
            4 => P2PStatus::DisabledByRegKey,
            5 => P2PStatus::NotSupported,
            _ => P2PStatus::Unknown,
        }
    }
    pub fn code(self) -> u32 {
        self as u32
    }
    /// The label dcgm-exporter renders for `link_status`.
    pub fn label(self) -> &'static str {
        match self {
            P2PStatus::Ok => "OK",
            P2PStatus::ChipsetNotSupported => "ChipsetNotSupported",
            P2PStatus::GpuNotSupported => "GPUNotSupported",
            P2PStatus::TopologyNotSupported => "TopologyNotSupported",
            P2PStatus::DisabledByRegKey => "DisabledByRegKey",
            P2PStatus::NotSupported => "NotSupported",
            P2PStatus::Unknown => "Unknown",
        }
    }
}

/// P2P status from each GPU toward every other GPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct P2PMatrix {
    /// (gpu id, status toward gpu index j, for every j).
    pub gpus: Vec<(u32, Vec<P2PStatus>)>,
}

/// `dcgmHealthSystems_t` bits.
pub mod health_system {
    pub const PCIE: u32 = 0x1;
    pub const NVLINK: u32 = 0x2;
    pub const PMU: u32 = 0x4;
    pub const MCU: u32 = 0x8;
    pub const MEM: u32 = 0x10;
    pub const SM: u32 = 0x20;
    pub const INFOROM: u32 = 0x40;
    pub const THERMAL: u32 = 0x80;
    pub const POWER: u32 = 0x100;
    pub const DRIVER: u32 = 0x200;
    pub const NVSWITCH_NONFATAL: u32 = 0x400;
    pub const NVSWITCH_FATAL: u32 = 0x800;
    pub const CONNECTX: u32 = 0x1000;
    pub const ALL: u32 = 0xFFFF_FFFF;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthIncident {
    /// One `health_system` bit.
    pub system: u32,
    /// 0 pass, 10 warn, 20 fail.
    pub health: u32,
    /// `dcgmError_t` (DCGM_FR_*) code.
    pub code: u32,
    pub message: String,
    pub entity: Entity,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthResponse {
    pub overall: u32,
    pub incidents: Vec<HealthIncident>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_ids_pack_like_go_dcgm() {
        // go-dcgm packs bytes [group, index_lo, index_hi, parent].
        let l = LinkId {
            parent: EntityGroup::Gpu,
            index: 17,
            parent_id: 3,
        };
        assert_eq!(l.pack().to_le_bytes(), [1, 17, 0, 3]);
        assert_eq!(LinkId::unpack(l.pack()), l);
        let s = LinkId {
            parent: EntityGroup::Switch,
            index: 300,
            parent_id: 2,
        };
        assert_eq!(s.pack().to_le_bytes(), [3, 44, 1, 2]);
    }
}
