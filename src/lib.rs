//! dcgm-exporter: exports NVIDIA DCGM metrics in Prometheus format, a drop-in replacement
//! for NVIDIA's Go dcgm-exporter. See ARCHITECTURE.md for how the stages fit.
//!
//! Stages, in data-flow order: `config` (flags, counters CSV, selectors), `collect`
//! (DCGM discovery, watches, values), `attribution` (pods, MIG devices, HPC jobs added to the
//! GPU series), `output` (render, self-metrics, HTTP), wired together by `lifecycle` (the
//! collection loop, the DCGM worker thread, start-up and the rebuild triggers); `logging`
//! writes logrus-shaped lines.
#![forbid(unsafe_code)]

pub mod attribution;
pub mod collect;
pub mod common;
pub mod config;
pub mod lifecycle;
pub mod logging;
pub mod model;
pub mod output;
