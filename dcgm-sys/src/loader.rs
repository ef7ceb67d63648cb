//! Finds and loads libdcgm at run time.
//!
//! Order: an explicit path (the exporter's `--dcgm-library`), then `libdcgm.so.4`, then
//! `libdcgm.so`, each through the normal dynamic-linker search (LD_LIBRARY_PATH, the
//! ldconfig cache, default paths). No `ldconfig -p` parsing, so snaps and custom prefixes
//! work as long as the dynamic linker can see the library.

use crate::error::{Error, Result, Status};
use crate::ffi::DcgmLib;
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The names tried when no explicit path is given, in order.
pub const DEFAULT_NAMES: &[&str] = &["libdcgm.so.4", "libdcgm.so"];

const INSTALL_HINT: &str = "install DCGM 4 (package datacenter-gpu-manager-4-core), \
     add its directory to LD_LIBRARY_PATH, or pass --dcgm-library PATH";

/// A loaded libdcgm. Every function pointer is resolved at load time but a missing one
/// only becomes an error when it is called.
///
/// The library is never unloaded. `dcgmInit`, a connect attempt (even a failed one) and an
/// embedded engine start threads of DCGM's own (`dcgm_ipc`, the engine's); dlclose while
/// one of them still runs unmaps the code under it and the process dies with SIGSEGV on its
/// way out. [`Library::shutdown`] ends them in order, but a call stuck past its deadline can
/// keep one alive, so the mapping stays for the life of the process.
pub struct Library {
    /// Deliberately leaked (ManuallyDrop): dropping it would dlclose libdcgm.
    lib: ManuallyDrop<DcgmLib>,
    path: PathBuf,
    /// libdcgm's process-wide state as far as we drove it: `dcgmInit` done, sessions live.
    state: Mutex<State>,
    /// Signalled when the last session ends.
    idle: Condvar,
    /// Set as `dcgmShutdown` starts: no call goes into the library after that (a remote
    /// call would bring DCGM's client threads back).
    closed: AtomicBool,
    /// Modules every embedded engine started from this library is started without
    /// ([`Library::set_module_denylist`]).
    denylist: Mutex<Vec<crate::modules::Module>>,
}

#[derive(Default)]
struct State {
    initialized: bool,
    /// Sessions opened or being opened and not yet stopped/disconnected.
    sessions: usize,
}

/// A field as the loaded library's metadata describes it ([`Library::field_meta`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryField {
    pub id: u16,
    /// `DCGM_FT_*` as its ASCII code (`b'i'`, `b'd'`, ...).
    pub field_type: u8,
    pub tag: String,
    pub entity_level: u32,
    pub short_name: String,
    /// The dmon unit text, untrimmed (`" C"`, `"Hz"`, often empty).
    pub unit: String,
}

/// How [`Library::shutdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `dcgmShutdown` returned (or DCGM was never initialised): no DCGM thread is left.
    Done,
    /// `dcgmShutdown` did not return before the deadline (it waits for calls in flight,
    /// which a hung host engine holds for up to 60 s). DCGM's threads may still run.
    TimedOut,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish()
    }
}

impl Library {
    /// Loads `explicit` if given, else the first of [`DEFAULT_NAMES`] that loads.
    pub fn load(explicit: Option<&Path>) -> Result<Library> {
        let candidates: Vec<PathBuf> = match explicit {
            Some(p) => vec![p.to_path_buf()],
            None => DEFAULT_NAMES.iter().map(PathBuf::from).collect(),
        };
        let mut tried = Vec::new();
        for candidate in candidates {
            // SAFETY: loading a shared library runs its initialisers. libdcgm (or the
            // simulator) has no initialiser with preconditions on the caller; we load it
            // once, from one thread, before any DCGM call.
            match unsafe { DcgmLib::new(&candidate) } {
                Ok(lib) => {
                    return Ok(Library {
                        lib: ManuallyDrop::new(lib),
                        path: candidate,
                        state: Mutex::new(State::default()),
                        idle: Condvar::new(),
                        closed: AtomicBool::new(false),
                        denylist: Mutex::new(Vec::new()),
                    })
                }
                Err(e) => tried.push(format!("{}: {e}", candidate.display())),
            }
        }
        Err(Error::Load(format!(
            "cannot load libdcgm; tried {}; {INSTALL_HINT}",
            tried.join("; ")
        )))
    }

    /// What was loaded, as given to the dynamic linker.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The modules an embedded engine started from now on is started without (through
    /// `dcgmStartEmbedded_v2`'s denylist; at most 10). Empty (the default): every module
    /// may load, as with `dcgmStartEmbedded`.
    pub fn set_module_denylist(&self, modules: &[crate::modules::Module]) {
        let mut d = self.denylist.lock().unwrap_or_else(PoisonError::into_inner);
        d.clear();
        for m in modules {
            if !d.contains(m) {
                d.push(*m);
            }
        }
    }

    /// See [`Library::set_module_denylist`].
    pub fn module_denylist(&self) -> Vec<crate::modules::Module> {
        self.denylist
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn raw(&self) -> &DcgmLib {
        &self.lib
    }

    /// True once [`Library::shutdown`] has started `dcgmShutdown`: every call is refused.
    pub fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a single assignment or increment: a poisoned lock is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a session about to be opened, running `dcgmInit` first when needed. The
    /// count is dropped by [`Library::leave`] once the session is stopped or disconnected
    /// (or failed to open).
    pub(crate) fn enter(&self) -> Result<()> {
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        let mut st = self.state();
        // Checked again under the lock shutdown sets it under.
        if self.is_shut_down() {
            return Err(Error::ShutDown);
        }
        if !st.initialized {
            let f = sym!(self, dcgmInit);
            // SAFETY: dcgmInit takes no arguments; it is called under our state lock, so
            // never concurrently with dcgmShutdown.
            let rc = unsafe { f() };
            self.check("dcgmInit", rc)?;
            st.initialized = true;
        }
        st.sessions += 1;
        Ok(())
    }

    /// The end of a session counted by [`Library::enter`].
    pub(crate) fn leave(&self) {
        let mut st = self.state();
        st.sessions = st.sessions.saturating_sub(1);
        if st.sessions == 0 {
            self.idle.notify_all();
        }
    }

    /// Sessions opened (or being opened) and not yet ended.
    pub fn live_sessions(&self) -> usize {
        self.state().sessions
    }

    /// Shuts DCGM down in order before the process exits: waits up to `grace` for the
    /// sessions still open to end (each stops its embedded engine or disconnects), then
    /// runs `dcgmShutdown`, which also ends whatever engine or connection is left, and
    /// DCGM's own threads with them. `dcgmShutdown` waits for calls in flight, so it runs
    /// on a thread of its own and is given up at `deadline`; the library stays mapped
    /// either way (see [`Library`]). After it, every call answers [`Error::ShutDown`].
    pub fn shutdown(&self, grace: Duration, deadline: Duration) -> Shutdown {
        let started = Instant::now();
        let st = self.state();
        let (st, _) = self
            .idle
            .wait_timeout_while(st, grace, |s| s.sessions > 0)
            .unwrap_or_else(PoisonError::into_inner);
        if !st.initialized || self.is_shut_down() {
            return Shutdown::Done;
        }
        let Ok(f) = &self.lib.dcgmShutdown else {
            // Every DCGM since 1.0 has it; without it there is nothing more to do.
            return Shutdown::Done;
        };
        let f = *f;
        // Later calls are refused from here on: a call made during dcgmShutdown would
        // allocate DCGM's client again.
        self.closed.store(true, Ordering::SeqCst);
        drop(st);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("dcgm-shutdown".into())
            .spawn(move || {
                // SAFETY: dcgmShutdown takes no arguments and tolerates sessions still
                // open (it closes them); the library is never unloaded, so the function
                // stays mapped for as long as this thread may run.
                let rc = unsafe { f() };
                let _ = tx.send(rc);
            });
        if spawned.is_err() {
            return Shutdown::TimedOut;
        }
        let left = deadline.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(_) => {
                self.state().initialized = false;
                Shutdown::Done
            }
            Err(_) => Shutdown::TimedOut,
        }
    }

    /// The DCGM release of the loaded library (`dcgmVersionInfo`'s `version:` entry, like
    /// `4.6.0`), for the start-up line. Needs no `dcgmInit`.
    pub fn version(&self) -> Result<String> {
        let f = sym!(self, dcgmVersionInfo);
        let mut info = version_info();
        // SAFETY: a valid, writable struct of the size its version field announces.
        let rc = unsafe { f(&mut info) };
        self.check("dcgmVersionInfo", rc)?;
        Ok(release_of(&info))
    }

    /// What this library's own field table says of field `id` (`DcgmFieldsInit`, then
    /// `DcgmFieldGetById`): `None` when the library has no such field. The table is the
    /// client library's, also for a remote host engine, and tells which DCGM release's
    /// fields (ids, value types, units) this library knows.
    pub fn field_meta(&self, id: u16) -> Result<Option<LibraryField>> {
        let init = sym!(self, DcgmFieldsInit);
        let get = sym!(self, DcgmFieldGetById);
        // SAFETY: no arguments; idempotent, and safe to call before or after dcgmInit.
        let rc = unsafe { init() };
        if rc != 0 {
            return Err(Error::Dcgm {
                function: "DcgmFieldsInit",
                status: Status::from_code(rc).unwrap_or(Status::GenericError),
                message: format!("DcgmFieldsInit returned {rc}"),
            });
        }
        // SAFETY: takes any id; returns NULL or a pointer into the library's field table,
        // valid until DcgmFieldsTerm, which nothing in this crate calls.
        let p = unsafe { get(id) };
        if p.is_null() {
            return Ok(None);
        }
        // SAFETY: non-NULL pointers from DcgmFieldGetById point to a dcgm_field_meta_t.
        let m = unsafe { *p };
        let text = |chars: &[std::ffi::c_char]| -> String {
            let bytes: Vec<u8> = chars
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let (short_name, unit) = if m.valueFormat.is_null() {
            (String::new(), String::new())
        } else {
            // SAFETY: a non-NULL valueFormat points to the field's output format, which
            // lives in the same table as the meta.
            let f = unsafe { *m.valueFormat };
            (text(&f.shortName), text(&f.unit))
        };
        Ok(Some(LibraryField {
            id: m.fieldId,
            field_type: m.fieldType as u8,
            tag: text(&m.tag),
            entity_level: m.entityLevel,
            short_name,
            unit,
        }))
    }

    /// `errorString()` of a code, or a generic text when the library has none.
    pub fn error_string(&self, code: i32) -> String {
        if let Ok(f) = &self.lib.errorString {
            // SAFETY: errorString takes any int and returns NULL or a pointer to a static
            // NUL-terminated string owned by the library, valid while it is loaded.
            let p = unsafe { f(code) };
            if !p.is_null() {
                // SAFETY: non-NULL pointers from errorString are static C strings.
                return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            }
        }
        format!("unknown DCGM error {code}")
    }

    /// Turns a return code into `Ok(())` or an [`Error::Dcgm`] carrying errorString text.
    pub(crate) fn check(&self, function: &'static str, code: i32) -> Result<()> {
        match Status::from_code(code) {
            None => Ok(()),
            Some(status) => Err(Error::Dcgm {
                function,
                status,
                message: self.error_string(code),
            }),
        }
    }
}

/// An empty `dcgmVersionInfo_v2` with its version set, for `dcgmVersionInfo` and
/// `dcgmHostengineVersionInfo` to fill.
pub(crate) fn version_info() -> crate::ffi::dcgmVersionInfo_v2 {
    crate::ffi::dcgmVersionInfo_v2 {
        version: crate::versions::VERSION_INFO_V2,
        rawBuildInfoString: [0; 512],
    }
}

/// The release a filled `dcgmVersionInfo_v2` names (`unknown` when it names none).
pub(crate) fn release_of(info: &crate::ffi::dcgmVersionInfo_v2) -> String {
    let raw: Vec<u8> = info
        .rawBuildInfoString
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    let text = String::from_utf8_lossy(&raw);
    build_info_version(&text).unwrap_or("unknown").to_string()
}

/// The `version:` entry of DCGM's raw build information
/// (`version:4.6.0;arch:x86_64;buildtype:Release;...`).
pub fn build_info_version(raw: &str) -> Option<&str> {
    raw.split(';')
        .find_map(|kv| kv.strip_prefix("version:"))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The DCGM release that introduced a function, for missing-symbol errors.
pub(crate) fn introduced_in(function: &str) -> &'static str {
    match function {
        "dcgmConnect_v3" => "4.5.0",
        "dcgmStartEmbedded_v2" | "dcgmModuleGetStatuses" => "2.0.0",
        "dcgmGetCpuHierarchy" => "3.2.0",
        "dcgmGetNvLinkP2PStatus" => "3.3.0",
        _ => "4.0.0",
    }
}

/// Resolves one function pointer of the loaded library or explains which DCGM it needs.
/// Refuses every call once the library is shut down.
macro_rules! sym {
    ($lib:expr, $name:ident) => {
        match &$lib.raw().$name {
            _ if $lib.is_shut_down() => return Err($crate::error::Error::ShutDown),
            Ok(f) => *f,
            Err(e) => {
                return Err($crate::error::Error::MissingSymbol {
                    function: stringify!($name),
                    needs: $crate::loader::introduced_in(stringify!($name)),
                    detail: e.to_string(),
                })
            }
        }
    };
}
pub(crate) use sym;

/// Ends the process at once with `code`, without running atexit handlers or the loaded
/// libraries' destructors. For an exit after [`Library::shutdown`] timed out: DCGM threads
/// still run then, and libdcgm's static destructors would tear their state down under them.
/// Nothing is flushed: write what must be said to stderr (unbuffered) first.
pub fn exit_now(code: u8) -> ! {
    // SAFETY: _exit has no preconditions; it never returns.
    unsafe { libc::_exit(i32::from(code)) }
}

#[cfg(test)]
mod tests {
    use super::build_info_version;

    #[test]
    fn the_release_is_read_from_the_build_information() {
        // As DCGM 4.6.0 built from source answers.
        let real = "version:4.6.0;arch:x86_64;buildtype:Release;buildid:;builddate:2026-11-23;\
                    commit:72fa3feaa67d716a75323a8f47c34ff3ee73f824(dirty);branch:master;\
                    buildplatform:Linux 6.18 x86_64;;crc:6dd2a681506bb3c18f978d1c3a45414c";
        assert_eq!(build_info_version(real), Some("4.6.0"));
        assert_eq!(build_info_version("arch:x86_64;version:"), None);
        assert_eq!(build_info_version(""), None);
    }
}
