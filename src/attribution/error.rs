//! Why an attribution source did not start. Start-up prints it once (its `Display`).

/// An attribution source that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The thread that refreshes a source (`--container-labels`) did not start.
    #[error("cannot start the {name} thread: {source}")]
    Thread {
        name: &'static str,
        source: std::io::Error,
    },
}
