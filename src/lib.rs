//! dcgm-exporter: exports NVIDIA DCGM metrics in Prometheus format, a drop-in replacement
//! for NVIDIA's Go dcgm-exporter. See ARCHITECTURE.md for how the stages fit.
//!
//! Stages, in data-flow order: `config` (flags, counters CSV, selectors), `collect`
//! (DCGM discovery, watches, values), `attribution` (pods, MIG devices, HPC jobs added to the
//! GPU series), `output` (render, self-metrics, HTTP), wired together by
//! `app` (the collection thread) and `startup` (from a parsed configuration to a running
//! process).
#![forbid(unsafe_code)]

pub mod app;
pub mod attribution;
pub mod collect;
pub mod config;
pub mod hostname;
pub mod output;
pub mod startup;
