//! The exporter's integration tests: one binary, one module per topic. Each module runs the
//! real `dcgm-exporter` (or a piece of the crate) the way its topic needs; the helpers they
//! share are in `tests/support/` (whose `skip.rs` the simulators' tests include too).
//!
//! All topics share this process: a test that must change the process itself (its
//! environment, a library loaded into it) runs alone in a child process of this binary
//! (`support::alone!`), and every child process a test waits on has a deadline
//! (`support::run`).

#[path = "../support/mod.rs"]
mod support;

mod alert_rules;
mod auth_flood;
mod config_v2;
mod conformance;
mod containers;
mod counters_csv;
mod crossing;
mod dashboard;
mod dcgm_versions;
mod deployment;
mod doc_examples;
mod docs;
mod dra;
mod dump_dir;
mod entities;
mod exit_codes;
mod exp_labels;
mod exp_totals;
mod exporter;
mod faults;
mod fn_length;
mod fresh_machine;
mod fuzz;
mod fuzz_inputs;
mod gpu_tier;
mod health_actions;
mod hermetic;
mod hostile_clients;
mod hpa_rules;
mod isolation;
mod kubeapi;
mod kubernetes;
mod layering;
mod lifecycle;
mod low_cardinality;
mod many_fields;
mod mig_fields;
mod mig_nvml;
mod multi_engine;
mod newcomer;
mod nvml_backend;
mod nvml_real;
mod nvml_samples;
mod ops;
mod otlp;
mod prometheus;
mod real_dcgm;
mod real_dcgm_units;
mod refused_entity;
mod remote;
mod rename_rules;
mod render_identity;
mod self_metrics;
mod skips;
mod symbol_order;
mod textfile_alert;
mod units;
mod upstream_pages;
mod usage;
mod usage_outside;
mod vsock;
mod web;
