//! Messages to the collection loop, from start-up, signals and the rebuild triggers.

/// Messages to the collection thread.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Control {
    /// Remove the watches and return.
    Stop,
    /// SIGHUP: re-read the counters CSV and rebuild the watches, keeping the HTTP server
    /// and the DCGM connection (dcgm-exporter's hot reload).
    Reload,
}
