//! Finds and loads libdcgm at run time.
//!
//! Order: an explicit path (the exporter's `--dcgm-library`), then `libdcgm.so.4`, then
//! `libdcgm.so`, each through the normal dynamic-linker search (LD_LIBRARY_PATH, the
//! ldconfig cache, default paths). No `ldconfig -p` parsing, so snaps and custom prefixes
//! work as long as the dynamic linker can see the library.

use crate::error::{Error, Result, Status};
use crate::ffi::DcgmLib;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

/// The names tried when no explicit path is given, in order.
pub const DEFAULT_NAMES: &[&str] = &["libdcgm.so.4", "libdcgm.so"];

const INSTALL_HINT: &str = "install DCGM 4 (package datacenter-gpu-manager-4-core), \
     add its directory to LD_LIBRARY_PATH, or pass --dcgm-library PATH";

/// A loaded libdcgm. Every function pointer is resolved at load time but a missing one
/// only becomes an error when it is called.
pub struct Library {
    lib: DcgmLib,
    path: PathBuf,
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
                        lib,
                        path: candidate,
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

    pub(crate) fn raw(&self) -> &DcgmLib {
        &self.lib
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

/// The DCGM release that introduced a function, for missing-symbol errors.
pub(crate) fn introduced_in(function: &str) -> &'static str {
    match function {
        "dcgmConnect_v3" => "4.5.0",
        "dcgmGetCpuHierarchy" => "3.2.0",
        "dcgmGetNvLinkP2PStatus" => "3.3.0",
        _ => "4.0.0",
    }
}

/// Resolves one function pointer of the loaded library or explains which DCGM it needs.
macro_rules! sym {
    ($lib:expr, $name:ident) => {
        match &$lib.raw().$name {
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
