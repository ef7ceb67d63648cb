//! The simulator's internal API: one `Request` per DCGM operation and one `Reply`.
//!
//! Every exported C function turns its arguments into a `Request` and hands it to a
//! backend: the in-process engine (embedded mode) or a `dcgm-sim-hostengine` over a
//! socket (remote mode). Both run the same `Engine::handle`, so embedded and remote
//! behave identically. The types are plain data so they serialise as one JSON line.
//!
//! Status codes are raw `dcgmReturn_t` values (i32); the C layer passes them through.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Defined with the node model, which generates them.
pub use dcgm_sim_model::{MetricGroup, Value};

/// One sample, shaped like `dcgmFieldValue_v2`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub entity_group: u32,
    pub entity_id: u32,
    pub field_id: u16,
    /// ASCII field type: b'i', b'd', b's', b'b', b't'.
    pub field_type: u8,
    /// dcgmReturn_t of this value (0 = OK).
    pub status: i32,
    /// Microseconds since the Unix epoch; 0 when there is no sample.
    pub ts_us: i64,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceAttributes {
    pub brand: String,
    pub name: String,
    pub pci_bus_id: String,
    pub serial: String,
    pub uuid: String,
    pub vbios: String,
    pub inforom_image_version: String,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub driver_version: String,
    pub virtualization_mode: u32,
    pub slowdown_temp: u32,
    pub shutdown_temp: u32,
    pub power_limit_cur: u32,
    pub power_limit_default: u32,
    pub power_limit_enforced: u32,
    pub power_limit_min: u32,
    pub power_limit_max: u32,
    pub bar1_total_mb: u32,
    pub fb_total_mb: u32,
    pub fb_used_mb: u32,
    pub fb_free_mb: u32,
    pub persistence_mode: u32,
    pub mig_mode: u32,
    pub confidential_compute_mode: u32,
    /// (memClock, smClock) pairs in MHz.
    pub clock_sets: Vec<(u32, u32)>,
}

impl DeviceAttributes {
    /// What a GPU with no readable attributes reports: DCGM's blank string and the
    /// 32-bit blank for every number.
    pub fn blank() -> DeviceAttributes {
        const S: &str = "<<<NULL>>>";
        const N: u32 = dcgm_sys::ffi::DCGM_INT32_BLANK;
        DeviceAttributes {
            brand: S.into(),
            name: S.into(),
            pci_bus_id: S.into(),
            serial: S.into(),
            uuid: S.into(),
            vbios: S.into(),
            inforom_image_version: S.into(),
            pci_device_id: N,
            pci_subsystem_id: N,
            driver_version: S.into(),
            virtualization_mode: N,
            slowdown_temp: N,
            shutdown_temp: N,
            power_limit_cur: N,
            power_limit_default: N,
            power_limit_enforced: N,
            power_limit_min: N,
            power_limit_max: N,
            bar1_total_mb: N,
            fb_total_mb: N,
            fb_used_mb: N,
            fb_free_mb: N,
            persistence_mode: N,
            mig_mode: N,
            confidential_compute_mode: N,
            clock_sets: Vec::new(),
        }
    }
}

/// One row of `dcgmMigHierarchy_v2`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigEntry {
    /// (entityGroupId, entityId): DCGM_FE_GPU_I or DCGM_FE_GPU_CI.
    pub entity: (u32, u32),
    /// GI rows: (DCGM_FE_GPU, gpuId); CI rows: (DCGM_FE_GPU_I, giEntityId).
    pub parent: (u32, u32),
    pub gpu_uuid: String,
    pub nvml_gpu_index: u32,
    pub nvml_instance_id: u32,
    /// 0xFFFF_FFFF on GI rows.
    pub nvml_compute_instance_id: u32,
    pub nvml_mig_profile_id: u32,
    pub nvml_profile_slices: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkStatus {
    /// (gpuId, state per link index); states are dcgmNvLinkLinkState_t values.
    pub gpus: Vec<(u32, Vec<u32>)>,
    /// (switchId, state per port).
    pub switches: Vec<(u32, Vec<u32>)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// dcgmHealthSystems_t bit.
    pub system: u32,
    /// 0 pass, 10 warn, 20 fail.
    pub health: u32,
    pub msg: String,
    /// DCGM_FR_* code.
    pub code: u32,
    pub entity: (u32, u32),
}

/// One field group, as `dcgmFieldGroupInfo_v1` describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldGroupEntry {
    pub id: u64,
    pub name: String,
    pub field_ids: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Sent once by a remote client after connecting.
    Login {
        persist_after_disconnect: bool,
        /// The client library's DCGM release (`[node] dcgm_version` of its profile).
        #[serde(default)]
        library: Option<String>,
    },
    GetAllDevices {
        only_supported: bool,
    },
    GetDeviceAttributes {
        gpu_id: u32,
    },
    GetGpuStatus {
        gpu_id: u32,
    },
    GetEntityGroupEntities {
        entity_group: u32,
        only_supported: bool,
    },
    GetGpuInstanceHierarchy,
    GetNvLinkLinkStatus,
    GetNvLinkP2PStatus,
    GetCpuHierarchy,
    ProfGetSupportedMetricGroups {
        gpu_id: u32,
    },
    GroupCreate {
        group_type: u32,
        name: String,
    },
    GroupDestroy {
        group_id: u64,
    },
    GroupAddEntity {
        group_id: u64,
        entity_group: u32,
        entity_id: u32,
    },
    GroupGetInfo {
        group_id: u64,
    },
    FieldGroupCreate {
        field_ids: Vec<u16>,
        name: String,
    },
    FieldGroupDestroy {
        field_group_id: u64,
    },
    WatchFields {
        group_id: u64,
        field_group_id: u64,
        update_freq_us: i64,
        max_keep_age_s: f64,
        max_keep_samples: i32,
    },
    UnwatchFields {
        group_id: u64,
        field_group_id: u64,
    },
    UpdateAllFields {
        wait: bool,
    },
    /// dcgmEntitiesGetLatestValues / dcgmEntityGetLatestValues: one sample per (entity, field),
    /// entity-major order.
    EntitiesGetLatestValues {
        entities: Vec<(u32, u32)>,
        field_ids: Vec<u16>,
        live: bool,
    },
    /// dcgmGetValuesSince_v2: every cached sample with ts >= since, per entity and field.
    GetValuesSince {
        group_id: u64,
        field_group_id: u64,
        since_us: i64,
    },
    HealthSet {
        group_id: u64,
        systems: u32,
    },
    HealthGet {
        group_id: u64,
    },
    HealthCheck {
        group_id: u64,
    },
    /// dcgmFieldGroupGetInfo, and the field list behind dcgmGetLatestValues* and
    /// dcgmGetValuesSince (v1): answered with `Reply::FieldGroups` holding one entry, or
    /// `Error(DCGM_ST_NO_DATA)` for an unknown id (the real engine's code).
    FieldGroupGetInfo {
        field_group_id: u64,
    },
    /// dcgmFieldGroupGetAll: every field group the engine knows, as `Reply::FieldGroups`.
    FieldGroupGetAll,
    /// dcgmModuleGetStatuses: `Reply::ModuleStatuses`.
    ModuleGetStatuses,
    /// dcgmHostengineVersionInfo: `Reply::Version` with the engine's DCGM release.
    EngineVersion,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Any request can fail with a dcgmReturn_t.
    Error(i32),
    Ok,
    Ids(Vec<u32>),
    Id(u64),
    Status(u32),
    DeviceAttributes(Box<DeviceAttributes>),
    MigHierarchy(Vec<MigEntry>),
    LinkStatus(LinkStatus),
    /// (gpuId, dcgmNvLinkGpuP2PStatus_t toward each gpu index).
    P2PStatus(Vec<(u32, Vec<u32>)>),
    /// (cpuId, owned core ids).
    /// (CPU id, its cores, its serial number or empty).
    CpuHierarchy(Vec<(u32, Vec<u32>, String)>),
    MetricGroups(Vec<MetricGroup>),
    GroupInfo {
        name: String,
        entities: Vec<(u32, u32)>,
    },
    Samples(Vec<Sample>),
    /// `status` other than OK: the call fails after `samples` (the pairs before the one
    /// that failed) reached the callback, as DCGM's helperGetValuesSince does.
    ValuesSince {
        samples: Vec<Sample>,
        next_since_us: i64,
        #[serde(default)]
        status: i32,
    },
    HealthSystems(u32),
    Health {
        overall: u32,
        incidents: Vec<Incident>,
    },
    FieldGroups(Vec<FieldGroupEntry>),
    /// (dcgmModuleId_t, dcgmModuleStatus_t) of every module.
    ModuleStatuses(Vec<(u32, u32)>),
    /// A DCGM release (`4.5.3`).
    Version(String),
}
