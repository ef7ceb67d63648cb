//! Struct version numbers (`MAKE_DCGM_VERSION(type, ver) = sizeof(type) | ver << 24`) and
//! compile-time layout checks.
//!
//! The expected sizes are the ones measured by compiling against NVIDIA's DCGM 4.6.0
//! headers with gcc on x86_64 (see shared/reference/dcgm-api.md §3). If our header subset
//! drifts from the real ABI, the build fails here instead of corrupting memory at run time.

use crate::ffi::*;
use std::mem::{align_of, size_of};

/// `MAKE_DCGM_VERSION` from dcgm_structs.h.
pub const fn make_version(size: usize, ver: u32) -> u32 {
    (size as u32) | (ver << 24)
}

macro_rules! versioned {
    ($($name:ident = $ty:ty, $ver:expr, $size:expr, $expect:expr;)*) => {
        $(
            pub const $name: u32 = make_version(size_of::<$ty>(), $ver);
            const _: () = assert!(size_of::<$ty>() == $size, concat!("size of ", stringify!($ty)));
            const _: () = assert!($name == $expect, concat!("version of ", stringify!($ty)));
        )*
    };
}

versioned! {
    VERSION_INFO_V2 = dcgmVersionInfo_v2, 2, 516, 0x0200_0204;
    FIELD_VALUE_V1 = dcgmFieldValue_v1, 1, 4120, 0x0100_1018;
    FIELD_VALUE_V2 = dcgmFieldValue_v2, 2, 4128, 0x0200_1020;
    CONNECT_V2_PARAMS_V1 = dcgmConnectV2Params_v1, 1, 8, 0x0100_0008;
    CONNECT_V2_PARAMS_V2 = dcgmConnectV2Params_v2, 2, 16, 0x0200_0010;
    CONNECT_V3_PARAMS_V1 = dcgmConnectV3Params_v1, 1, 12, 0x0100_000c;
    START_EMBEDDED_V2_PARAMS_V1 = dcgmStartEmbeddedV2Params_v1, 1, 72, 0x0100_0048;
    START_EMBEDDED_V2_PARAMS_V2 = dcgmStartEmbeddedV2Params_v2, 2, 80, 0x0200_0050;
    START_EMBEDDED_V2_PARAMS_V3 = dcgmStartEmbeddedV2Params_v3, 3, 104, 0x0300_0068;
    GROUP_INFO_V3 = dcgmGroupInfo_v3, 3, 8456, 0x0300_2108;
    FIELD_GROUP_INFO_V1 = dcgmFieldGroupInfo_v1, 1, 528, 0x0100_0210;
    MIG_HIERARCHY_V2 = dcgmMigHierarchy_v2, 2, 73480, 0x0201_1f08;
    DEVICE_ATTRIBUTES_V3 = dcgmDeviceAttributes_v3, 3, 5220, 0x0300_1464;
    DEVICE_SUPPORTED_CLOCK_SETS_V1 = dcgmDeviceSupportedClockSets_v1, 1, 3080, 0x0100_0c08;
    DEVICE_THERMALS_V1 = dcgmDeviceThermals_v1, 1, 12, 0x0100_000c;
    DEVICE_POWER_LIMITS_V1 = dcgmDevicePowerLimits_v1, 1, 24, 0x0100_0018;
    DEVICE_IDENTIFIERS_V1 = dcgmDeviceIdentifiers_v1, 1, 2064, 0x0100_0810;
    DEVICE_MEMORY_USAGE_V1 = dcgmDeviceMemoryUsage_v1, 1, 20, 0x0100_0014;
    DEVICE_SETTINGS_V2 = dcgmDeviceSettings_v2, 2, 16, 0x0200_0010;
    NVLINK_STATUS_V4 = dcgmNvLinkStatus_v4, 4, 14780, 0x0400_39bc;
    NVLINK_STATUS_V5 = dcgmNvLinkStatus_v5, 5, 17084, 0x0500_42bc;
    PROF_GET_METRIC_GROUPS_V3 = dcgmProfGetMetricGroups_v3, 3, 1376, 0x0300_0560;
    HEALTH_RESPONSE_V5 = dcgmHealthResponse_v5, 5, 1_069_068, 0x0510_500c;
    CPU_HIERARCHY_V2 = dcgmCpuHierarchy_v2, 2, 3208, 0x0200_0c88;
    MODULE_GET_STATUSES_V1 = dcgmModuleGetStatuses_v1, 1, 136, 0x0100_0088;
}

/// Version 1 of `dcgmNvLinkP2PStatus_t` (size not listed in the reference; computed from
/// the 4.6.0 definition: 8 + 32 × (4 + 32 × 4) = 4232).
pub const NVLINK_P2P_STATUS_V1: u32 = make_version(size_of::<dcgmNvLinkP2PStatus_v1>(), 1);
const _: () = assert!(size_of::<dcgmNvLinkP2PStatus_v1>() == 4232);

/// Version 1 of `dcgmCpuHierarchy_t`: 8 + 8 × (4 + 4 + 8 × 16 + alignment) bytes.
pub const CPU_HIERARCHY_V1: u32 = make_version(size_of::<dcgmCpuHierarchy_v1>(), 1);
pub const CPU_HIERARCHY_OWNED_CORES_V1: u32 =
    make_version(size_of::<dcgmCpuHierarchyOwnedCores_v1>(), 1);
const _: () = assert!(size_of::<dcgmCpuHierarchyOwnedCores_v1>() == 136);
const _: () = assert!(size_of::<dcgmCpuHierarchy_v1>() == 8 + 8 * 144);

// Members whose offsets other clients rely on.
const _: () = assert!(std::mem::offset_of!(dcgmFieldValue_v1, ts) == 16);
const _: () = assert!(std::mem::offset_of!(dcgmFieldValue_v1, value) == 24);
const _: () = assert!(std::mem::offset_of!(dcgmFieldValue_v2, ts) == 24);
const _: () = assert!(std::mem::offset_of!(dcgmFieldValue_v2, value) == 32);
const _: () = assert!(std::mem::offset_of!(dcgmDeviceAttributes_v3, identifiers) == 3120);
const _: () = assert!(std::mem::offset_of!(dcgmDeviceAttributes_v3, memoryUsage) == 5184);
const _: () = assert!(std::mem::offset_of!(dcgmDeviceAttributes_v3, settings) == 5204);
const _: () = assert!(std::mem::offset_of!(dcgmNvLinkStatus_v5, numNvSwitches) == 4744);
const _: () = assert!(std::mem::offset_of!(dcgmNvLinkStatus_v5, nvSwitches) == 4748);
const _: () = assert!(std::mem::offset_of!(dcgmNvLinkStatus_v4, numNvSwitches) == 2440);
const _: () = assert!(std::mem::offset_of!(dcgmStartEmbeddedV2Params_v2, denyList) == 40);
const _: () = assert!(std::mem::offset_of!(dcgmStartEmbeddedV2Params_v2, denyListCount) == 28);
const _: () = assert!(std::mem::offset_of!(dcgmStartEmbeddedV2Params_v2, serviceAccount) == 32);
const _: () = assert!(std::mem::offset_of!(dcgmStartEmbeddedV2Params_v1, denyList) == 32);
const _: () = assert!(std::mem::offset_of!(dcgmStartEmbeddedV2Params_v3, denyList) == 40);
const _: () = assert!(size_of::<dcgmModuleGetStatusesModule_t>() == 8);
const _: () = assert!(size_of::<dcgmMigHierarchyInfo_v2>() == 164);
const _: () = assert!(size_of::<dcgmMigEntityInfo_t>() == 148);
const _: () = assert!(size_of::<dcgmGroupEntityPair_t>() == 8);
const _: () = assert!(size_of::<dcgmIncidentInfo_t>() == 1044);
const _: () = assert!(size_of::<dcgm_field_meta_t>() == 72);
const _: () = assert!(std::mem::offset_of!(dcgm_field_meta_t, valueFormat) == 64);
const _: () = assert!(size_of::<dcgm_field_output_format_t>() == 16);
const _: () = assert!(align_of::<dcgmFieldValue_v1>() == 8);
const _: () = assert!(size_of::<dcgmHandle_t>() == 8);

/// `dcgmGetDeviceAttributes` only accepts exactly this version.
pub const DEVICE_ATTRIBUTES: u32 = DEVICE_ATTRIBUTES_V3;
