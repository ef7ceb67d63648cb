//! Threads that ask the collection loop to rebuild: a change of the counters file on disk,
//! and GPU bind/unbind events. Each sends [`crate::lifecycle::control::Control::Reload`], the same message
//! as SIGHUP, so a rebuild re-reads the counters and rediscovers the node.

pub mod bind_unbind;
pub mod counters_file;
pub mod files;
