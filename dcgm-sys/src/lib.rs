//! Run-time loaded bindings to NVIDIA DCGM (`libdcgm.so.4`) and a thin safe layer.
//!
//! * [`ffi`]: bindgen output for our header subset (`include/dcgm_subset.h`, DCGM 4.6.0),
//!   committed so that a build needs neither libclang nor DCGM.
//! * [`versions`]: the `MAKE_DCGM_VERSION` numbers of every struct we pass, with
//!   compile-time checks of their sizes against the real 4.6.0 layouts.
//! * [`Library`]: finds and loads libdcgm; a missing symbol only fails when it is used.
//! * [`Session`] and friends: the safe API used by the exporter. Every FFI call into
//!   libdcgm is made here; the exporter crate forbids `unsafe`. (The simulator has its own
//!   unsafe code: its C exports and a few libc calls of its host engine.)

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
pub mod ffi {
    include!("bindings.rs");
}

pub mod error;
pub mod fields;
mod handles;
pub mod loader;
mod modules;
pub mod nvlink;
pub mod nvml_ext;
pub mod releases;
mod session;
pub mod types;
pub mod value;
pub mod versions;
pub mod vsock;

pub use error::{is_version_skew, Error, Result, Status};
pub use handles::{FieldGroup, Group};
pub use loader::{exit_now, Library, LibraryField, Shutdown};
pub use modules::{Module, ModuleStatus};
pub use releases::{Release, Versions};
pub use session::{ConnectTarget, Session, SessionKind, MAX_VALUES_PER_CALL};
pub use types::*;
pub use value::{FieldReading, Reading, Sentinel, Value};
