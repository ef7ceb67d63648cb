//! What runs the stages: `startup` (from a parsed configuration to a running process),
//! `app` (the collection loop), `worker` (the thread that owns the DCGM session, so every
//! DCGM step has a deadline), `operations` (retention, sinks and rebuild triggers wired at
//! start), `watchers` (threads that ask the loop to rebuild) (side threads run under
//! `common::supervisor`).

pub mod app;
pub mod operations;
pub mod startup;
pub mod watchers;
pub mod worker;
