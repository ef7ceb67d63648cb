//! What asks the collection loop to rebuild: a change of the counters source (the file on
//! disk, `counters_file`, or the `-m` ConfigMap, `counters_configmap`), and GPU bind/unbind
//! events. Each sends [`crate::lifecycle::control::Control::Reload`], the message SIGHUP
//! sends, naming itself as the trigger; a rebuild re-reads the counters and rediscovers
//! the node.

pub(crate) mod bind_unbind;
pub(crate) mod counters_configmap;
pub(crate) mod counters_file;

use crate::config::configmap::CountersSource;
use crate::lifecycle::app::Runner;
use crate::lifecycle::control::Control;
use std::sync::mpsc::Sender;

/// The counters' source could not be read or followed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot start the counters file watch: {0}")]
    FileWatch(#[source] std::io::Error),
    /// The `-m` ConfigMap's first read.
    #[error(transparent)]
    ConfigMap(#[from] counters_configmap::Error),
}

/// Starts the counters file watch (always, as upstream). Called before the file is first
/// read, so that an edit made while DCGM starts (which can take 30 s) is a reload the
/// collection loop takes once it runs, not a change nobody saw.
pub(crate) fn watch_counters_file(
    collectors: &CountersSource,
    control: &Sender<Control>,
) -> Result<(), SourceError> {
    // A ConfigMap (-m) has a watch of its own.
    if let Some(path) = collectors.path() {
        counters_file::spawn(path.clone(), control.clone()).map_err(SourceError::FileWatch)?;
    }
    Ok(())
}

/// Starts the GPU bind/unbind watch when enabled, polled through the worker that owns the
/// session.
pub(crate) fn start(runner: &Runner, control: &Sender<Control>) -> Result<(), bind_unbind::Error> {
    if let Some(interval) = runner.bind_unbind {
        bind_unbind::spawn(runner.current.clone(), interval, control.clone())?;
    }
    Ok(())
}
