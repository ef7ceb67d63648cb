//! dcgm-exporter: exports NVIDIA DCGM metrics in Prometheus format, a drop-in replacement
//! for NVIDIA's Go dcgm-exporter. See ARCHITECTURE.md for how the stages fit.
//!
//! Stages, in data-flow order: `config` (flags, counters CSV, selectors), `collect` (DCGM
//! discovery, watches, values, the derived `DCGM_EXP_*` metrics, several engines merged,
//! NVML), `attribution` (pods, MIG devices, HPC jobs added to the GPU series), `output`
//! (render, self-metrics, HTTP), wired together by `lifecycle` (the collection loop, the
//! DCGM worker thread, start-up and the rebuild triggers). Beneath them: `model` (the page
//! every stage passes on, what a metric is, the clock), `runtime` (supervised threads, file
//! wake-ups, process identity, the Kubernetes API client) and `logging` (logrus-shaped
//! lines).
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod attribution;
pub mod collect;
pub mod config;
pub mod lifecycle;
pub mod logging;
pub mod model;
pub mod output;
pub mod runtime;
