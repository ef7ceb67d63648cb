//! Our own declarations of the parts of NVIDIA's `nvml.h` (NVML API 12/13, as shipped in
//! the `nvidia-nvml-dev` wheel) that the simulator implements: return codes, buffer sizes,
//! and the structs it fills. Layouts are pinned below with compile-time size and offset
//! checks taken from the header (`sizeof`/`offsetof` of a C build against `nvml.h`).

#![forbid(unsafe_code)]

use std::ffi::{c_char, c_uint, c_ulonglong, c_void};

/// `nvmlReturn_t`.
pub type Return = c_uint;
/// `nvmlDevice_t`: an opaque pointer (`struct nvmlDevice_st *`).
pub type Device = *mut c_void;

pub const SUCCESS: Return = 0;
pub const ERROR_UNINITIALIZED: Return = 1;
pub const ERROR_INVALID_ARGUMENT: Return = 2;
pub const ERROR_NOT_SUPPORTED: Return = 3;
pub const ERROR_NOT_FOUND: Return = 6;
pub const ERROR_INSUFFICIENT_SIZE: Return = 7;
pub const ERROR_TIMEOUT: Return = 10;
pub const ERROR_GPU_IS_LOST: Return = 15;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: Return = 25;
pub const ERROR_UNKNOWN: Return = 999;

/// `nvmlErrorString`'s texts, by code (NVML's own wording).
pub const ERROR_STRINGS: [(Return, &std::ffi::CStr); 32] = [
    (0, c"Success"),
    (1, c"Uninitialized"),
    (2, c"Invalid Argument"),
    (3, c"Not Supported"),
    (4, c"Insufficient Permissions"),
    (5, c"Already Initialized"),
    (6, c"Not Found"),
    (7, c"Insufficient Size"),
    (8, c"Insufficient External Power"),
    (9, c"Driver Not Loaded"),
    (10, c"Timeout"),
    (11, c"Interrupt request issue"),
    (12, c"NVML Shared Library Not Found"),
    (13, c"Function Not Found"),
    (14, c"Corrupted infoROM"),
    (15, c"GPU is lost"),
    (16, c"GPU requires restart"),
    (17, c"The operating system has blocked the request."),
    (18, c"RM has detected an NVML/RM version mismatch."),
    (19, c"In use by another client"),
    (20, c"Insufficient Memory"),
    (21, c"No data"),
    (
        22,
        c"The requested vgpu operation is not available on target device, becasue ECC is enabled",
    ),
    (23, c"Insufficient resources for the operation"),
    (24, c"Frequency not supported"),
    (25, c"Argument version mismatch"),
    (26, c"Deprecated"),
    (27, c"Not ready"),
    (28, c"GPU not found"),
    (29, c"Invalid state"),
    (30, c"Reset type not supported"),
    (999, c"Unknown Error"),
];

// Buffer sizes (nvmlConstants).
pub const DEVICE_PCI_BUS_ID_BUFFER_SIZE: usize = 32;
pub const DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: usize = 16;

// nvmlDeviceGetMigMode values.
pub const DEVICE_MIG_DISABLE: c_uint = 0;
pub const DEVICE_MIG_ENABLE: c_uint = 1;

/// `nvmlProcessInfo_v2_t::gpuInstanceId` / `computeInstanceId` outside MIG mode.
pub const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlPciInfo_t` (filled by `nvmlDeviceGetPciInfo`, `_v2`, `_v3`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; DEVICE_PCI_BUS_ID_BUFFER_SIZE],
}

/// `nvmlMemory_t` (v1: total = free + used).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)` = sizeof | 2 << 24.
pub const MEMORY_V2: c_uint = std::mem::size_of::<MemoryV2>() as c_uint | 2 << 24;

/// `nvmlProcessInfo_v1_t` (the unversioned `*RunningProcesses` symbols).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t` = `nvmlProcessInfo_t` (the `_v2` and `_v3` symbols).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    /// CPU timestamp in microseconds.
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlValueType_t` values the simulator writes.
pub const VALUE_TYPE_DOUBLE: c_uint = 0;
pub const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
pub const VALUE_TYPE_UNSIGNED_LONG_LONG: c_uint = 3;

/// `nvmlFieldValue_t`; `value` is the `nvmlValue_t` union, written as its widest member
/// (the low bytes are `uiVal` on a little-endian machine; [`FieldValue::set`] writes the
/// member `value_type` names).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: c_uint,
    pub nvml_return: Return,
    pub value: [u8; 8],
}

impl FieldValue {
    /// Stores `v` as the union member of `value_type` (uint or unsigned long long).
    pub fn set(&mut self, value_type: c_uint, v: u64) {
        self.value_type = value_type;
        self.value = [0; 8];
        if value_type == VALUE_TYPE_UNSIGNED_INT {
            self.value[..4].copy_from_slice(&(v as u32).to_ne_bytes());
        } else {
            self.value = v.to_ne_bytes();
        }
    }
}

/// `nvmlEventSet_t`: an opaque pointer (`struct nvmlEventSet_st *`).
pub type EventSet = *mut c_void;

/// `nvmlEventTypeXidCriticalError`: the one event type the simulator raises.
pub const EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 0x8;

/// `nvmlEventData_t`: what `nvmlEventSetWait_v2` fills. `gpu_instance_id` and
/// `compute_instance_id` are [`NO_INSTANCE`] where the event is not attributed to a MIG
/// instance.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventData {
    pub device: Device,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlGpmSample_t`: an opaque pointer (`struct nvmlGpmSample_st *`).
pub type GpmSample = *mut c_void;

/// `NVML_GPM_METRIC_MAX`: the length of `nvmlGpmMetricsGet_t::metrics`.
pub const GPM_METRIC_MAX: usize = 210;
/// `NVML_GPM_METRICS_GET_VERSION`, `NVML_GPM_SUPPORT_VERSION`.
pub const GPM_METRICS_GET_VERSION: c_uint = 1;
pub const GPM_SUPPORT_VERSION: c_uint = 1;

/// `nvmlGpmMetric_t::metricInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmMetricInfo {
    pub short_name: *mut c_char,
    pub long_name: *mut c_char,
    pub unit: *mut c_char,
}

/// `nvmlGpmMetric_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmMetric {
    pub metric_id: c_uint,
    pub nvml_return: Return,
    pub value: f64,
    pub metric_info: GpmMetricInfo,
}

/// `nvmlGpmMetricsGet_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmMetricsGet {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: GpmSample,
    pub sample2: GpmSample,
    pub metrics: [GpmMetric; GPM_METRIC_MAX],
}

/// `nvmlGpmSupport_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GpmSupport {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}

/// Sizes and offsets as a C compiler lays out the header's structs on LP64 Linux.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<PciInfo>() == 68);
    assert!(offset_of!(PciInfo, domain) == 16);
    assert!(offset_of!(PciInfo, pci_device_id) == 28);
    assert!(offset_of!(PciInfo, pci_sub_system_id) == 32);
    assert!(offset_of!(PciInfo, bus_id) == 36);
    assert!(size_of::<Memory>() == 24);
    assert!(size_of::<MemoryV2>() == 40);
    assert!(offset_of!(MemoryV2, total) == 8);
    assert!(offset_of!(MemoryV2, used) == 32);
    // nvml.h: #define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2), 0x02000028.
    assert!(MEMORY_V2 == 0x0200_0028);
    assert!(size_of::<ProcessInfoV1>() == 16);
    assert!(offset_of!(ProcessInfoV1, used_gpu_memory) == 8);
    assert!(size_of::<ProcessInfo>() == 24);
    assert!(offset_of!(ProcessInfo, gpu_instance_id) == 16);
    assert!(offset_of!(ProcessInfo, compute_instance_id) == 20);
    assert!(size_of::<ProcessUtilizationSample>() == 32);
    assert!(offset_of!(ProcessUtilizationSample, time_stamp) == 8);
    assert!(offset_of!(ProcessUtilizationSample, sm_util) == 16);
    assert!(offset_of!(ProcessUtilizationSample, dec_util) == 28);
    assert!(size_of::<Utilization>() == 8);
    assert!(size_of::<FieldValue>() == 40);
    assert!(offset_of!(FieldValue, timestamp) == 8);
    assert!(offset_of!(FieldValue, value_type) == 24);
    assert!(offset_of!(FieldValue, nvml_return) == 28);
    assert!(offset_of!(FieldValue, value) == 32);
    assert!(size_of::<EventData>() == 32);
    assert!(offset_of!(EventData, event_data) == 16);
    assert!(offset_of!(EventData, gpu_instance_id) == 24);
    assert!(offset_of!(EventData, compute_instance_id) == 28);
    assert!(size_of::<GpmMetric>() == 40);
    assert!(offset_of!(GpmMetric, value) == 8);
    assert!(size_of::<GpmMetricsGet>() == 24 + 40 * GPM_METRIC_MAX);
    assert!(offset_of!(GpmMetricsGet, metrics) == 24);
    assert!(size_of::<GpmSupport>() == 8);
};

/// `nvmlSamplingType_t` values the simulator keeps device samples of.
pub const TOTAL_POWER_SAMPLES: c_uint = 0;
pub const GPU_UTILIZATION_SAMPLES: c_uint = 1;
pub const MEMORY_UTILIZATION_SAMPLES: c_uint = 2;
pub const ENC_UTILIZATION_SAMPLES: c_uint = 3;
pub const DEC_UTILIZATION_SAMPLES: c_uint = 4;
pub const PROCESSOR_CLK_SAMPLES: c_uint = 5;
pub const MEMORY_CLK_SAMPLES: c_uint = 6;

/// `nvmlSample_t`: a CPU timestamp in µs and the `nvmlValue_t` union, written as its
/// 8 bytes (the simulator writes `uiVal`, as nvml.h says power, utilisation and clock
/// samples are: the low 4 bytes on a little-endian machine).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sample {
    pub time_stamp: c_ulonglong,
    pub sample_value: [u8; 8],
}

impl Sample {
    /// A sample whose value is the unsigned int `v` (`NVML_VALUE_TYPE_UNSIGNED_INT`).
    pub fn uint(time_stamp: u64, v: u32) -> Sample {
        let mut sample_value = [0; 8];
        sample_value[..4].copy_from_slice(&v.to_ne_bytes());
        Sample {
            time_stamp,
            sample_value,
        }
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Sample>() == 16);
    assert!(offset_of!(Sample, sample_value) == 8);
};
