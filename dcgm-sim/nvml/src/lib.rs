//! A simulated `libnvidia-ml.so.1`: NVIDIA's NVML C API over the node that dcgm-sim builds
//! from `DCGM_SIM_PROFILE`, so that an NVML client and a DCGM client of the simulators see
//! the same GPUs, UUIDs, PCI bus ids, MIG devices and processes. See etc/sim/README.md.
//!
//! * [`ffi`]: our declarations of the `nvml.h` types the simulator fills,
//! * [`sim`]: the simulated driver state (safe Rust),
//! * [`exports`]: the C symbols, including NOT_SUPPORTED stubs for the rest of `nvml.h`.

pub mod exports;
pub mod ffi;
pub mod samples;
pub mod sim;
