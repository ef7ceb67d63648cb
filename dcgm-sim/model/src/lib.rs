//! The simulated node, shared by the simulated DCGM (`dcgm-sim`) and the simulated NVML
//! (`nvml-sim`) so that both describe the same GPUs: the TOML profile ([`profile`], format
//! in etc/sim/README.md), the entities and MIG layouts built from it ([`node`]), value
//! generators ([`generator`]) and run-time faults ([`faults`]).
//!
//! A plain library: no C exports and no link arguments, so a simulator's cdylib can depend
//! on it without taking in the other simulator's symbols or SONAME.

#![forbid(unsafe_code)]

pub mod faults;
pub mod fields;
pub mod generator;
pub mod node;
pub mod nvlink;
pub mod profile;
pub mod values;

use serde::{Deserialize, Serialize};

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
pub const FE_CONNECTX: u32 = 9;

/// A field value payload, as the real engine stores it (sentinels included).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Int64(i64),
    Double(f64),
    Str(String),
    Blob(Vec<u8>),
}

/// A DCGM profiling metric group: the fields one hardware counter set can sample together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricGroup {
    pub major_id: u16,
    pub minor_id: u16,
    pub field_ids: Vec<u16>,
}
