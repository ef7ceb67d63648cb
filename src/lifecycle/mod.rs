//! What runs the stages: `startup` (from a parsed configuration to a running process;
//! `startup::settings` turns the command line into each stage's settings), `app` (one
//! collection's steps and the loop that drives them, on a `runtime::worker` thread that
//! owns the DCGM session so every DCGM step has a deadline), `control` (the loop's
//! messages), `watchers` (threads that ask the loop to rebuild), `events_cmd`
//! (`dcgm-exporter events`: a client of a running exporter's `/events`). Side threads run
//! under `runtime::supervisor`.

pub(crate) mod app;
pub(crate) mod control;
pub mod events_cmd;
pub mod startup;
pub(crate) mod watchers;

/// Hands collection's `DCGM_EXP_*` names to the counters reader, which configuration owns
/// and which, coming before collection, cannot ask for them: once, before any counters are
/// read (start-up's first step; a test reading counters through the library calls it too).
pub fn know_derived_metrics() {
    crate::config::counters::know_exp_names(crate::collect::exp::names());
}
