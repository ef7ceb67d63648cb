//! Messages to the collection loop, from start-up, signals and the rebuild triggers.

/// Messages to the collection thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Control {
    /// Remove the watches and return.
    Stop,
    /// Re-read the counters CSV and rebuild the watches, keeping the HTTP server and the
    /// DCGM connection (dcgm-exporter's hot reload), for the reason given.
    Reload(Trigger),
}

/// What asked for a reload: named in the reload's event, so that an operator reading the
/// history knows whether a person, a file, the API server or the driver started it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// SIGHUP.
    Sighup,
    /// The counters file changed on disk (`--collectors`).
    CountersFile,
    /// The counters ConfigMap changed (`--configmap-data`).
    ConfigMap,
    /// DCGM reported a GPU bind/unbind reinitialization completed.
    BindUnbind,
}

impl Trigger {
    /// The name the event history gives it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Sighup => "sighup",
            Trigger::CountersFile => "counters-file",
            Trigger::ConfigMap => "configmap",
            Trigger::BindUnbind => "bind-unbind",
        }
    }
}
