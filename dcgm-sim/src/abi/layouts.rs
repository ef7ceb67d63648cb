//! DCGM 4.6.0 structs that only the simulator needs, so they are not in dcgm-sys's header
//! subset. Layouts follow dcgm_structs.h; sizes and versions are checked at compile time.

#![forbid(unsafe_code)]

use dcgm_sys::ffi::{dcgmCpuHierarchyOwnedCores_v1, dcgmFieldGroupInfo_v1, dcgmGpuGrp_t};
use dcgm_sys::versions::make_version;
use std::ffi::c_char;
use std::mem::{offset_of, size_of};

/// `struct dcgmCpuHierarchyCpu_v2`: v1 plus the CPU serial number.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CpuHierarchyCpuV2 {
    pub cpu_id: u32,
    pub owned_cores: dcgmCpuHierarchyOwnedCores_v1,
    pub serial: [c_char; 256],
}

/// `dcgmCpuHierarchy_v2` (`dcgmCpuHierarchy_t` in 4.6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CpuHierarchyV2 {
    pub version: u32,
    pub num_cpus: u32,
    pub cpus: [CpuHierarchyCpuV2; 8],
}
pub const CPU_HIERARCHY_V2: u32 = make_version(size_of::<CpuHierarchyV2>(), 2);
const _: () = assert!(size_of::<CpuHierarchyCpuV2>() == 400);
const _: () = assert!(size_of::<CpuHierarchyV2>() == 3208);

/// `dcgmAllFieldGroup_v1`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AllFieldGroupV1 {
    pub version: u32,
    pub num_field_groups: u32,
    pub field_groups: [dcgmFieldGroupInfo_v1; 64],
}
pub const ALL_FIELD_GROUP_V1: u32 = make_version(size_of::<AllFieldGroupV1>(), 1);
const _: () = assert!(size_of::<AllFieldGroupV1>() == 33800);
const _: () = assert!(ALL_FIELD_GROUP_V1 == 0x0100_8408);

/// `dcgmVersionInfo_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VersionInfoV2 {
    pub version: u32,
    pub raw_build_info_string: [c_char; 512],
}
pub const VERSION_INFO_V2: u32 = make_version(size_of::<VersionInfoV2>(), 2);
const _: () = assert!(size_of::<VersionInfoV2>() == 516);

/// `dcgmHostengineHealth_v1`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HostengineHealthV1 {
    pub version: u32,
    pub overall_health: u32,
}
pub const HOSTENGINE_HEALTH_V1: u32 = make_version(size_of::<HostengineHealthV1>(), 1);
const _: () = assert!(HOSTENGINE_HEALTH_V1 == 0x0100_0008);

/// `dcgmHealthSetParams_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HealthSetParamsV2 {
    pub version: u32,
    pub group_id: dcgmGpuGrp_t,
    pub systems: u32,
    /// µs.
    pub update_interval: i64,
    /// s.
    pub max_keep_age: f64,
}
pub const HEALTH_SET_PARAMS_V2: u32 = make_version(size_of::<HealthSetParamsV2>(), 2);
const _: () = assert!(HEALTH_SET_PARAMS_V2 == 0x0200_0028);
const _: () = assert!(offset_of!(HealthSetParamsV2, update_interval) == 24);

// dcgmStartEmbedded_v2 writes the handle through the v1 view whatever the version.
const _: () = assert!(offset_of!(dcgm_sys::ffi::dcgmStartEmbeddedV2Params_v3, dcgmHandle) == 8);
const _: () = assert!(offset_of!(dcgm_sys::ffi::dcgmStartEmbeddedV2Params_v1, dcgmHandle) == 8);
