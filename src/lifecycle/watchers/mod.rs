//! Threads that ask the collection loop to rebuild: a change of the counters file on disk,
//! and GPU bind/unbind events. Each sends [`crate::lifecycle::control::Control::Reload`], the same message
//! as SIGHUP, so a rebuild re-reads the counters and rediscovers the node.

pub mod bind_unbind;
pub mod counters_file;

use crate::lifecycle::app::Runner;
use crate::lifecycle::control::Control;
use std::sync::mpsc::Sender;

/// Starts the rebuild triggers: the counters file watch (always, as upstream) and, when
/// enabled, the GPU bind/unbind watch, polled through the worker that owns the session.
pub fn start(runner: &Runner, control: &Sender<Control>) -> Result<(), String> {
    // A ConfigMap (-m) has a watch of its own.
    if let Some(path) = runner.collectors.path() {
        counters_file::spawn(path.clone(), control.clone())
            .map_err(|e| format!("cannot start the counters file watch: {e}"))?;
    }
    if let Some(interval) = runner.bind_unbind {
        bind_unbind::spawn(runner.current.clone(), interval, control.clone())?;
    }
    Ok(())
}
