//! The web configuration in force. A watcher thread re-reads it when the web config file, the
//! certificate, the key or the client CA changes on disk (cert-manager rotates certificates in
//! place) and swaps the new state in atomically; connections and requests only load the
//! current pointer, never touch the files. The files' directories are watched with inotify
//! (`runtime::wakeup`); the files are stat'ed every 500 ms only where inotify cannot be used.
//!
//! Reloads fail closed: a new version that is broken, empty, or would remove TLS, a
//! client-certificate check or every basic-auth user is refused (logged once, counted in
//! `dcgm_exporter_web_config_reload_refused_total`, a degraded line on /health) and the
//! configuration in force stays; lowering security takes a restart. An attacker or a rotation
//! script that truncates the file in place must not open the port, even for a moment.

use super::auth::BasicAuth;
use super::webconfig::{ClientAuth, Protection, WebConfig};
use super::{tls, webconfig};
use crate::output::published::Shared;
use crate::runtime::wakeup::{DirEvents, Wake};
use arc_swap::ArcSwap;
use hyper::header::{HeaderName, HeaderValue};
use prometheus::{IntCounterVec, IntGauge, Opts};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio_rustls::TlsAcceptor;

/// How often the watcher looks at the files (a `stat` each) where inotify cannot be used.
const POLL: Duration = Duration::from_millis(500);

/// With inotify, how often the watcher wakes without an event, only to notice that every
/// `Web` handle is gone (then it ends).
const ALIVE_CHECK: Duration = Duration::from_secs(30);

/// How long the files' directories must be quiet after an event before they are read.
const SETTLE: Duration = Duration::from_millis(100);

/// The longest wait for a quiet period after an event.
const SETTLE_AT_MOST: Duration = Duration::from_secs(2);

/// How the watcher learns of changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchMode {
    /// Directory events from the kernel (inotify).
    Events,
    /// A `stat` of each file every 500 ms (inotify unavailable).
    Polling,
}

/// After an event, waits until the directory has been quiet for [`SETTLE`]: a file being
/// written (truncated, then filled) must not be read half-way, which could swap in a
/// configuration without its users or certificate for a moment.
fn settled(events: &DirEvents, first: Wake) -> Wake {
    if first != Wake::Event {
        return first;
    }
    // Bounded: a directory that never goes quiet (a log written next to the certificates)
    // must not hold a rotation back for ever; after 2 s the files are read anyway.
    let deadline = std::time::Instant::now() + SETTLE_AT_MOST;
    while std::time::Instant::now() < deadline {
        match events.wait_timeout(SETTLE) {
            Wake::Event => continue,
            Wake::Timeout => return Wake::Event,
            Wake::Gone => return Wake::Gone,
        }
    }
    Wake::Event
}

/// Events for the directories of `files`, or `None` (polling) where inotify cannot be used.
fn events_for(files: &[PathBuf]) -> Option<DirEvents> {
    match DirEvents::for_files(files) {
        Ok(ev) => Some(ev),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot watch the web configuration's files with inotify: checking them every 500 ms instead"
            );
            None
        }
    }
}

/// Why `--enable-pprof` refuses a web configuration.
pub(crate) const PPROF_NEEDS_IDENTITY: &str = "--enable-pprof: profiles are served only to clients that are asked who they are, and this web configuration asks no one: set tls_server_config.client_auth_type: RequireAndVerifyClientCert (with client_ca_file), or list at least one user under basic_auth_users";

/// Why a web configuration is refused, at start or on a reload; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The web config file cannot be read.
    #[error("--web-config-file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file's text is refused (by key).
    #[error(transparent)]
    Invalid(#[from] webconfig::Error),
    /// The TLS settings do not make a server configuration (a file they name, rustls).
    #[error("--web-config-file {}: {source}", .path.display())]
    Tls { path: PathBuf, source: tls::Error },
    /// `--enable-pprof` with a configuration that identifies no client.
    #[error("{} (--web-config-file {})", PPROF_NEEDS_IDENTITY, .path.display())]
    PprofNeedsIdentity { path: PathBuf },
    #[error("cannot start the web configuration watcher: {0}")]
    WatcherThread(#[source] std::io::Error),
}

/// What one connection is served with.
pub(crate) struct WebState {
    pub tls: Option<TlsAcceptor>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<Arc<BasicAuth>>,
    /// Every client is asked who it is: a verified client certificate is required, or basic
    /// auth is on (the condition for serving pprof).
    pub identifies_clients: bool,
}

impl WebState {
    pub(crate) fn plain() -> WebState {
        WebState {
            tls: None,
            headers: Vec::new(),
            auth: None,
            identifies_clients: false,
        }
    }

    fn build(c: &WebConfig) -> Result<WebState, tls::Error> {
        let tls = match &c.tls {
            Some(t) => Some(TlsAcceptor::from(tls::server_config(t, c.http2)?)),
            None => None,
        };
        let headers = c
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        // RequireAnyClientCert accepts any self-made certificate and VerifyClientCertIfGiven
        // lets clients without one in: neither says who the client is.
        let verified_certs = c
            .tls
            .as_ref()
            .is_some_and(|t| t.client_auth == ClientAuth::RequireAndVerifyClientCert);
        Ok(WebState {
            tls,
            headers,
            auth: (!c.users.is_empty()).then(|| Arc::new(BasicAuth::new(c.users.clone()))),
            identifies_clients: verified_certs || !c.users.is_empty(),
        })
    }
}

/// (modified time, length, inode) of a file, or None when it cannot be read.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        })
        .collect()
}

/// The current state; cheap to clone and to read from any thread.
#[derive(Clone)]
pub(crate) struct Web {
    current: Arc<ArcSwap<WebState>>,
    source: Option<Source>,
    /// Changes the watcher acted on (a reload or a refused file), for tests to wait on.
    reloads: Arc<AtomicU64>,
    reload: Arc<ReloadStatus>,
}

/// Where a watched configuration comes from.
#[derive(Clone)]
struct Source {
    path: PathBuf,
    /// `--enable-pprof`: a configuration that identifies no one is refused.
    pprof: bool,
    /// The files of the configuration in force, and how they looked when it was read.
    files: Vec<PathBuf>,
    stamps: Vec<Stamp>,
    /// What the configuration in force asks of clients, and whether its file was empty.
    protection: Protection,
    empty: bool,
}

/// One reading of the files.
struct Loaded {
    state: WebState,
    files: Vec<PathBuf>,
    protection: Protection,
    empty: bool,
}

impl Source {
    fn read(&self) -> Result<Loaded, Error> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| Error::Read {
            path: self.path.clone(),
            source,
        })?;
        let c = webconfig::parse(&text, &self.path)?;
        let mut files = vec![self.path.clone()];
        files.extend(c.files());
        let state = WebState::build(&c).map_err(|source| Error::Tls {
            path: self.path.clone(),
            source,
        })?;
        Ok(Loaded {
            state,
            files,
            protection: c.protection(),
            empty: text.trim().is_empty(),
        })
    }

    fn pprof_refuses(&self, state: &WebState) -> Option<Error> {
        (self.pprof && !state.identifies_clients).then(|| Error::PprofNeedsIdentity {
            path: self.path.clone(),
        })
    }

    /// Why a new reading must not replace the configuration in force (fail closed):
    /// lowering what is asked of clients takes a restart, and an empty file is a file
    /// being written or truncated, not an intent.
    fn refuses(&self, new: &Loaded) -> Vec<String> {
        let mut why = Vec::new();
        if new.empty && !self.empty {
            why.push("the file is empty".to_string());
        }
        let lost = self.protection.removed_by(&new.protection);
        if !lost.is_empty() {
            let lost: Vec<String> = lost.iter().map(ToString::to_string).collect();
            why.push(format!("it would remove {}", lost.join(", ")));
        }
        if let Some(pprof) = self.pprof_refuses(&new.state) {
            why.push(pprof.to_string());
        }
        why
    }
}

/// How reloads went: self-metrics, and the `/health` line while the file on disk is not
/// the configuration in force.
pub(crate) struct ReloadStatus {
    refused: IntCounterVec,
    last_successful: IntGauge,
    note: Mutex<Option<String>>,
}

impl ReloadStatus {
    fn new() -> ReloadStatus {
        let refused = IntCounterVec::new(
            Opts::new(
                format!(
                    "{}web_config_reload_refused_total",
                    crate::model::naming::PREFIX
                ),
                "Changed web configuration files not put in force, by reason: lowers_security \
                 (it would remove TLS, client-certificate checks or every basic-auth user, \
                 lower the TLS versions, widen the suites or curves, drop or weaken a \
                 header, turn HTTP/2 back on, or the file is empty; lowering security takes \
                 a restart) or invalid (unreadable or unparseable file or certificate).",
            ),
            &["reason"],
        )
        .expect("static metric options are valid");
        for reason in ["lowers_security", "invalid"] {
            refused.with_label_values(&[reason]);
        }
        let last_successful = IntGauge::with_opts(Opts::new(
            format!(
                "{}web_config_last_reload_successful",
                crate::model::naming::PREFIX
            ),
            "1 while the web configuration in force is the one on disk, 0 after a change was \
             refused (until a later change is put in force).",
        ))
        .expect("static metric options are valid");
        last_successful.set(1);
        ReloadStatus {
            refused,
            last_successful,
            note: Mutex::new(None),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.refused.clone()),
            Box::new(self.last_successful.clone()),
        ]
    }

    /// The `/health` line while a change is refused.
    pub(crate) fn note(&self) -> Option<String> {
        self.note.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn applied(&self) {
        self.last_successful.set(1);
        *self.note.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn refused(&self, reason: &str, why: String) {
        tracing::error!("{why}");
        crate::model::events::web_config_refused(reason, &why);
        self.refused.with_label_values(&[reason]).inc();
        self.last_successful.set(0);
        *self.note.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
}

impl Web {
    /// Loads the file once; errors here stop the exporter. With `pprof`, a configuration that
    /// does not identify clients is an error, now and on every reload.
    pub(crate) fn load(path: Option<&Path>, pprof: bool) -> Result<Web, Error> {
        let reload = Arc::new(ReloadStatus::new());
        let Some(path) = path else {
            return Ok(Web {
                current: Arc::new(ArcSwap::from_pointee(WebState::plain())),
                source: None,
                reloads: Arc::default(),
                reload,
            });
        };
        let mut source = Source {
            path: path.to_path_buf(),
            pprof,
            files: Vec::new(),
            stamps: Vec::new(),
            protection: Protection::default(),
            empty: true,
        };
        let loaded = source.read()?;
        if let Some(e) = source.pprof_refuses(&loaded.state) {
            return Err(e);
        }
        source.stamps = stamps(&loaded.files);
        source.files = loaded.files;
        source.protection = loaded.protection;
        source.empty = loaded.empty;
        Ok(Web {
            current: Arc::new(ArcSwap::from_pointee(loaded.state)),
            source: Some(source),
            reloads: Arc::default(),
            reload,
        })
    }

    pub(crate) fn is_tls(&self) -> bool {
        self.current().tls.is_some()
    }

    /// The state in force now: one atomic load, no file access, no lock.
    pub(crate) fn current(&self) -> Arc<WebState> {
        self.current.load_full()
    }

    /// The configuration in force, for the time of one call: no reference count shared by
    /// every core changes (arc-swap's borrowed load), unlike [`Self::current`].
    pub(crate) fn peek(&self) -> arc_swap::Guard<Arc<WebState>> {
        self.current.load()
    }

    /// As [`Self::watch`], and the exporter sees how reloads go: their self-metrics in
    /// `shared`'s registry, a refused change as a degraded line of `/health`.
    pub(crate) fn watch_reporting(&self, shared: &Shared) -> Result<Option<WatchMode>, Error> {
        let mode = self.watch()?;
        if mode.is_some() {
            for c in self.reload.collectors() {
                shared.metrics.register(c);
            }
            let reload = self.reload.clone();
            shared.add_note_source(move || reload.note());
        }
        Ok(mode)
    }

    /// Starts the thread that re-reads the configuration when one of its files changes. It
    /// ends by itself once every `Web` handle is gone. `None` without a configuration file.
    pub(crate) fn watch(&self) -> Result<Option<WatchMode>, Error> {
        self.watch_with(true)
    }

    /// As [`Self::watch`]; `inotify: false` polls (the fallback, for its test).
    fn watch_with(&self, inotify: bool) -> Result<Option<WatchMode>, Error> {
        let Some(source) = self.source.clone() else {
            return Ok(None);
        };
        let current = Arc::downgrade(&self.current);
        let (reloads, reload) = (self.reloads.clone(), self.reload.clone());
        // Started before the thread so that no change made after this returns is missed.
        let events = if inotify {
            events_for(&source.files)
        } else {
            None
        };
        let mode = if events.is_some() {
            WatchMode::Events
        } else {
            WatchMode::Polling
        };
        std::thread::Builder::new()
            .name("web-config".into())
            .spawn(move || {
                let mut w = Watcher {
                    source,
                    events,
                    reload,
                };
                w.run(&current, &reloads);
            })
            .map(|_| Some(mode))
            .map_err(Error::WatcherThread)
    }
}

/// The watcher thread's state: the configuration in force (`source`) and how it learns of
/// changes.
struct Watcher {
    source: Source,
    events: Option<DirEvents>,
    reload: Arc<ReloadStatus>,
}

impl Watcher {
    fn run(&mut self, current: &Weak<ArcSwap<WebState>>, reloads: &AtomicU64) {
        // A refused or failed reading records the new look of the files too, so it is
        // reported once.
        let mut seen = self.source.stamps.clone();
        loop {
            let wake = match &self.events {
                Some(ev) => settled(ev, ev.wait_timeout(ALIVE_CHECK)),
                None => {
                    std::thread::sleep(POLL);
                    Wake::Timeout
                }
            };
            if wake == Wake::Gone {
                self.events = None;
            }
            let Some(current) = current.upgrade() else {
                return;
            };
            let now = stamps(&self.source.files);
            if now == seen {
                continue;
            }
            if self.events.is_none() {
                // Polling sees no quiet period: a file still being written (truncated,
                // then filled) is read once it has stayed the same for one more period.
                std::thread::sleep(POLL);
                if stamps(&self.source.files) != now {
                    continue;
                }
            }
            let reading = self.source.read();
            if stamps(&self.source.files) != now {
                // Changed while being read: read it again once it is quiet.
                continue;
            }
            seen = now;
            if let Some(files) = self.decide(reading, &current) {
                seen = stamps(&files);
            }
            reloads.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Puts a reading in force, or refuses it (logged, counted, on `/health`); the files of
    /// the new configuration when it was put in force.
    fn decide(
        &mut self,
        reading: Result<Loaded, Error>,
        current: &ArcSwap<WebState>,
    ) -> Option<Vec<PathBuf>> {
        let path = self.source.path.display();
        let new = match reading {
            Ok(new) => new,
            Err(e) => {
                self.reload.refused(
                    "invalid",
                    format!("{e}; keeping the web configuration in force"),
                );
                return None;
            }
        };
        let why = self.source.refuses(&new);
        if !why.is_empty() {
            self.reload.refused(
                "lowers_security",
                format!(
                    "--web-config-file {path}: refusing the changed file: {}; keeping the web \
                     configuration in force (lowering security takes a restart)",
                    why.join("; ")
                ),
            );
            return None;
        }
        if new.files != self.source.files && self.events.is_some() {
            // Certificates may have moved to other directories.
            self.events = events_for(&new.files);
        }
        current.store(Arc::new(new.state));
        tracing::info!("reloaded the web configuration from {path}");
        self.reload.applied();
        self.source.files = new.files.clone();
        self.source.protection = new.protection;
        self.source.empty = new.empty;
        Some(new.files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

    /// Writes `text` and waits until the watcher has acted on it.
    fn rewrite(web: &Web, path: &Path, text: &str) {
        let before = web.reloads.load(Ordering::SeqCst);
        std::fs::write(path, text).unwrap();
        for _ in 0..200 {
            if web.reloads.load(Ordering::SeqCst) > before {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the watcher did not see {path:?} change");
    }

    fn wait_for(web: &Web, what: impl Fn(&WebState) -> bool) -> bool {
        for _ in 0..200 {
            if what(&web.current()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    #[test]
    fn a_changed_file_is_swapped_in_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, "").unwrap();
        let web = Web::load(Some(&path), false).unwrap();
        web.watch().unwrap();
        let held = web.current();
        assert!(held.auth.is_none());
        std::fs::write(&path, format!("basic_auth_users:\n  alice: {ALICE}\n")).unwrap();
        assert!(wait_for(&web, |s| s.auth.is_some()), "not reloaded");
        // A connection holding the old state keeps it whole.
        assert!(held.auth.is_none());
        rewrite(&web, &path, "basic_auth_users: [\n");
        assert!(
            web.current().auth.is_some(),
            "a broken file replaced the state"
        );
    }

    /// inotify is used where the kernel has it (here), and the 500 ms stat loop is what
    /// remains where it does not; both pick up a rewritten file, and a certificate named by
    /// a new version of the file in another directory is watched from then on.
    #[test]
    fn changes_arrive_as_events_and_polling_is_the_fallback() {
        for inotify in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("web.yml");
            std::fs::write(&path, "").unwrap();
            let web = Web::load(Some(&path), false).unwrap();
            let mode = web.watch_with(inotify).unwrap();
            let want = if inotify {
                WatchMode::Events
            } else {
                WatchMode::Polling
            };
            assert_eq!(mode, Some(want));
            std::fs::write(&path, format!("basic_auth_users:\n  alice: {ALICE}\n")).unwrap();
            assert!(
                wait_for(&web, |s| s.auth.is_some()),
                "{want:?}: not reloaded"
            );
        }
        assert_eq!(Web::load(None, false).unwrap().watch().unwrap(), None);
    }

    /// A directory that never goes quiet (something else written beside the file every
    /// 20 ms) still lets a change through: the quiet period is bounded.
    #[test]
    fn a_busy_directory_does_not_hold_a_change_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, "").unwrap();
        let web = Web::load(Some(&path), false).unwrap();
        assert_eq!(web.watch().unwrap(), Some(WatchMode::Events));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let noise = {
            let (stop, log) = (stop.clone(), dir.path().join("noise.log"));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    std::fs::write(&log, n.to_string()).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        std::fs::write(&path, format!("basic_auth_users:\n  alice: {ALICE}\n")).unwrap();
        let reloaded = wait_for(&web, |s| s.auth.is_some());
        stop.store(true, Ordering::SeqCst);
        noise.join().unwrap();
        assert!(reloaded, "a busy directory held the change back");
    }

    #[test]
    fn pprof_refuses_a_configuration_that_identifies_no_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        for yaml in [
            "",
            "http_server_config:\n  http2: false\n",
            "tls_server_config: {}\n",
        ] {
            std::fs::write(&path, yaml).unwrap();
            let e = Web::load(Some(&path), true).err().expect(yaml);
            assert!(
                matches!(&e, Error::PprofNeedsIdentity { path: p } if *p == path),
                "{e:?}"
            );
            assert!(Web::load(Some(&path), false).is_ok(), "{yaml}");
        }
        std::fs::write(&path, format!("basic_auth_users:\n  alice: {ALICE}\n")).unwrap();
        let web = Web::load(Some(&path), true).unwrap();
        assert!(web.current().identifies_clients);
        // A reload that would expose the profiles to anyone is refused; the users stay.
        web.watch().unwrap();
        rewrite(&web, &path, "");
        assert!(web.current().auth.is_some());
    }

    /// Fail closed, with events and with polling: an empty (truncated) or unparseable file
    /// and a file without users leave the users in force, count, and show on /health until
    /// a file that lowers nothing arrives; fewer users but some apply at once.
    #[test]
    fn a_change_that_lowers_security_is_refused_and_shown() {
        let bob = bcrypt::hash("bob", 4).unwrap();
        for inotify in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("web.yml");
            std::fs::write(
                &path,
                format!("basic_auth_users:\n  alice: {ALICE}\n  bob: {bob}\n"),
            )
            .unwrap();
            let web = Web::load(Some(&path), false).unwrap();
            web.watch_with(inotify).unwrap();
            let users = |w: &Web| w.current().auth.as_ref().map(|a| a.users().len());
            let refused = |reason: &str| web.reload.refused.with_label_values(&[reason]).get();
            for (text, reason, n) in [
                ("", "lowers_security", 1),
                (
                    "http_server_config:\n  http2: false\n",
                    "lowers_security",
                    2,
                ),
                ("basic_auth_users: [\n", "invalid", 1),
            ] {
                rewrite(&web, &path, text);
                assert_eq!(users(&web), Some(2), "{inotify} {text:?}");
                assert_eq!(refused(reason), n, "{inotify} {text:?}");
                assert_eq!(web.reload.last_successful.get(), 0);
                let note = web.reload.note().expect("a /health line");
                // Pins the /health line an operator reads: it names the file and the loss.
                assert!(note.contains("web.yml"), "{note}");
                if reason == "lowers_security" {
                    assert!(note.contains("every basic-auth user (alice, bob"), "{note}");
                }
            }
            rewrite(&web, &path, &format!("basic_auth_users:\n  bob: {bob}\n"));
            assert_eq!(
                users(&web),
                Some(1),
                "{inotify}: fewer users but some apply"
            );
            assert_eq!(web.reload.last_successful.get(), 1);
            assert_eq!(web.reload.note(), None);
        }
    }
}
