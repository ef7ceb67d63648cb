//! Why an output did not start: the HTTP listener, its web config, the textfile, the
//! dumps and OTLP. Start-up prints it once (its `Display`); tests match the variants.

/// An output that cannot start, or the HTTP server's end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `-a :port` with a port that is not a number.
    #[error("-a {addr}: invalid port '{port}'")]
    InvalidPort { addr: String, port: String },
    /// `-a host:port` that does not resolve.
    #[error("-a {addr}: {source} (expected :port, host:port or [ipv6]:port)")]
    Resolve {
        addr: String,
        source: std::io::Error,
    },
    #[error("-a {addr}: resolves to no address")]
    NoAddress { addr: String },
    /// No address of `-a` could be bound; each distinct reason once.
    #[error("cannot listen on {address}: {}", distinct(.reasons))]
    Bind {
        address: String,
        reasons: Vec<std::io::Error>,
    },
    #[error(
        "--web-systemd-socket: no socket was passed (LISTEN_FDS/LISTEN_PID are unset or name \
         another process; start the exporter from a systemd .socket unit)"
    )]
    NoSystemdSocket,
    #[error("--web-systemd-socket: socket {fd} was already taken")]
    SystemdSocketTaken { fd: usize },
    #[error("--web-systemd-socket: file descriptor {fd} is not a TCP listening socket: {source}")]
    SystemdNotTcp { fd: usize, source: std::io::Error },
    /// A bound socket that tokio cannot take over.
    #[error("cannot use the listening socket: {0}")]
    ListeningSocket(#[source] std::io::Error),
    /// The HTTP flags or the web config file (read at start or watched).
    #[error("{0}")]
    WebConfig(String),
    #[error("--dump-retention {0}: must not be negative")]
    NegativeDumpRetention(i64),
    /// `--textfile-directory`.
    #[error("{0}")]
    Textfile(String),
    /// `--dump-directory`.
    #[error("{0}")]
    Dump(String),
    /// The OTLP exporter's settings (endpoint, TLS).
    #[error("{0}")]
    Otlp(String),
}

/// The bind failures' texts, each once, in order.
fn distinct(reasons: &[std::io::Error]) -> String {
    let mut texts: Vec<String> = Vec::new();
    for r in reasons {
        let t = r.to_string();
        if !texts.contains(&t) {
            texts.push(t);
        }
    }
    texts.join("; ")
}
