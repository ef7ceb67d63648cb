//! Why an output did not start: the HTTP listener, its web config, the textfile, the
//! dumps and OTLP. Start-up prints it once (its `Display`); tests match the variants.

use std::path::PathBuf;

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
    #[error(
        "--web-telemetry-path {0:?}: must start with '/' and not be /health or under \
         /debug/pprof/"
    )]
    TelemetryPath(String),
    #[error("--max-concurrent-scrapes {0}: must be at least 1")]
    MaxConcurrentScrapes(i64),
    /// `--web-read-timeout` or `--web-write-timeout` (`flag`, without its dashes).
    #[error("--{flag} {source}")]
    Timeout {
        flag: &'static str,
        source: crate::config::duration::Error,
    },
    #[error(
        "--enable-pprof requires --web-config-file (profiles are served only to clients the \
         web configuration identifies: verified client certificates or basic auth)"
    )]
    PprofNeedsWebConfig,
    /// The web config file (read at start or watched).
    #[error(transparent)]
    WebConfig(#[from] crate::output::http::state::Error),
    #[error("--dump-retention {0}: must not be negative")]
    NegativeDumpRetention(i64),
    /// `--textfile-directory` or `--dump-directory`, refused by `dirs`' rules.
    #[error(transparent)]
    Directory(#[from] DirError),
    /// The textfile's directory takes no file.
    #[error("--textfile-directory {}: {source}", .dir.display())]
    Textfile {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the dump cleanup thread: {0}")]
    DumpThread(#[source] std::io::Error),
    /// The OTLP exporter's settings (endpoint, TLS).
    #[error(transparent)]
    Otlp(#[from] crate::output::otlp::Error),
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

/// A directory the exporter writes into that is refused: the flag, the path given, and
/// what is wrong on the way to it (`dirs`' rules).
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: {why}", .dir.display())]
pub struct DirError {
    pub flag: &'static str,
    pub dir: PathBuf,
    pub why: DirWhy,
}

/// What is wrong with a directory, or with one on the way to it.
#[derive(Debug, thiserror::Error)]
pub enum DirWhy {
    /// This process's uid could not be told.
    #[error(transparent)]
    Uid(crate::runtime::process::Error),
    #[error("must not contain \"..\" (give the directory's own path)")]
    ParentComponent,
    #[error("is not a directory the exporter may write into")]
    NoComponent,
    #[error("no working directory: {0}")]
    NoWorkingDirectory(#[source] std::io::Error),
    #[error("{}: {source}", .path.display())]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} became a symbolic link while it was being created: someone else is writing \
         here; refusing to write through it", .0.display()
    )]
    BecameLink(PathBuf),
    #[error(
        "{} appeared as a symbolic link while the directory was being created; refusing to \
         write through it", .0.display()
    )]
    AppearedAsLink(PathBuf),
    #[error("{} is not a directory", .0.display())]
    NotDirectory(PathBuf),
    /// The private directory itself is a link.
    #[error(
        "{} is a symbolic link (to {target}); dumps are written only into a real directory: \
         give its own path", .link.display()
    )]
    IsLink { link: PathBuf, target: String },
    #[error(
        "{} is a symbolic link (to {target}) owned by uid {owner}, who could point it anywhere",
        .link.display()
    )]
    ForeignLink {
        link: PathBuf,
        target: String,
        owner: u32,
    },
    #[error(
        "{} is owned by uid {owner}, not by this process (uid {uid}): another user's \
         directory is refused", .path.display()
    )]
    NotOurs { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "{} (above the directory) is owned by uid {owner}, who could replace what is below it",
        .path.display()
    )]
    ForeignAbove { path: PathBuf, owner: u32 },
    #[error(
        "{} is writable by group or others (mode {mode:o}) without the sticky bit",
        .path.display()
    )]
    OpenToOthers { path: PathBuf, mode: u32 },
    #[error(
        "{} was replaced while it was being checked: someone else is writing here; refusing \
         to write into it", .0.display()
    )]
    Replaced(PathBuf),
    #[error("cannot open {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
}
