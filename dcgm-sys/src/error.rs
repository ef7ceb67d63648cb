//! One error type for everything that can go wrong talking to DCGM.

use std::fmt;

/// A `dcgmReturn_t` other than `DCGM_ST_OK`, by name. Codes we do not know stay numeric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    BadParam,
    GenericError,
    Memory,
    NotConfigured,
    NotSupported,
    InitError,
    NvmlError,
    Pending,
    Uninitialized,
    Timeout,
    VerMismatch,
    UnknownField,
    NoData,
    StaleData,
    NotWatched,
    NoPermission,
    GpuIsLost,
    ResetRequired,
    FunctionNotFound,
    ConnectionNotValid,
    GpuNotSupported,
    GroupIncompatible,
    MaxLimit,
    LibraryNotFound,
    DuplicateKey,
    RequiresRoot,
    InsufficientSize,
    FieldUnsupportedByApi,
    ModuleNotLoaded,
    InUse,
    GroupIsEmpty,
    ProfilingNotSupported,
    ProfilingLibraryError,
    InsufficientDriverVersion,
    InstanceNotFound,
    ComputeInstanceNotFound,
    NvmlNotLoaded,
    NvmlDriverTimeout,
    Other(i32),
}

impl Status {
    /// Maps a raw return code; `None` for `DCGM_ST_OK`.
    pub fn from_code(code: i32) -> Option<Status> {
        use Status::*;
        Some(match code {
            0 => return None,
            -1 => BadParam,
            -3 => GenericError,
            -4 => Memory,
            -5 => NotConfigured,
            -6 => NotSupported,
            -7 => InitError,
            -8 => NvmlError,
            -9 => Pending,
            -10 => Uninitialized,
            -11 => Timeout,
            -12 => VerMismatch,
            -13 => UnknownField,
            -14 => NoData,
            -15 => StaleData,
            -16 => NotWatched,
            -17 => NoPermission,
            -18 => GpuIsLost,
            -19 => ResetRequired,
            -20 => FunctionNotFound,
            -21 => ConnectionNotValid,
            -22 => GpuNotSupported,
            -23 => GroupIncompatible,
            -24 => MaxLimit,
            -25 => LibraryNotFound,
            -26 => DuplicateKey,
            -29 => RequiresRoot,
            -31 => InsufficientSize,
            -32 => FieldUnsupportedByApi,
            -33 => ModuleNotLoaded,
            -34 => InUse,
            -35 => GroupIsEmpty,
            -36 => ProfilingNotSupported,
            -37 => ProfilingLibraryError,
            -44 => InsufficientDriverVersion,
            -45 => InstanceNotFound,
            -46 => ComputeInstanceNotFound,
            -56 => NvmlNotLoaded,
            -57 => NvmlDriverTimeout,
            other => Other(other),
        })
    }

    /// The raw `dcgmReturn_t`.
    pub fn code(self) -> i32 {
        use Status::*;
        match self {
            BadParam => -1,
            GenericError => -3,
            Memory => -4,
            NotConfigured => -5,
            NotSupported => -6,
            InitError => -7,
            NvmlError => -8,
            Pending => -9,
            Uninitialized => -10,
            Timeout => -11,
            VerMismatch => -12,
            UnknownField => -13,
            NoData => -14,
            StaleData => -15,
            NotWatched => -16,
            NoPermission => -17,
            GpuIsLost => -18,
            ResetRequired => -19,
            FunctionNotFound => -20,
            ConnectionNotValid => -21,
            GpuNotSupported => -22,
            GroupIncompatible => -23,
            MaxLimit => -24,
            LibraryNotFound => -25,
            DuplicateKey => -26,
            RequiresRoot => -29,
            InsufficientSize => -31,
            FieldUnsupportedByApi => -32,
            ModuleNotLoaded => -33,
            InUse => -34,
            GroupIsEmpty => -35,
            ProfilingNotSupported => -36,
            ProfilingLibraryError => -37,
            InsufficientDriverVersion => -44,
            InstanceNotFound => -45,
            ComputeInstanceNotFound => -46,
            NvmlNotLoaded => -56,
            NvmlDriverTimeout => -57,
            Other(c) => c,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Other(c) => write!(f, "DCGM error {c}"),
            s => write!(f, "{s:?} ({})", s.code()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No candidate library could be loaded; the text lists every attempt.
    #[error("{0}")]
    Load(String),
    /// The loaded libdcgm lacks a function we called.
    #[error("{function} is not exported by the loaded libdcgm ({detail}); it needs DCGM {needs} or newer")]
    MissingSymbol {
        function: &'static str,
        needs: &'static str,
        detail: String,
    },
    /// A DCGM call returned an error code.
    #[error("{function}: {message} ({status})")]
    Dcgm {
        function: &'static str,
        status: Status,
        /// `errorString()` text of the code.
        message: String,
    },
    /// An argument we refuse before calling DCGM (e.g. an address with a NUL byte).
    #[error("{0}")]
    InvalidArgument(String),
    /// The call came after `dcgmShutdown` (the process is exiting).
    #[error("DCGM is shut down")]
    ShutDown,
    /// The library and the remote host engine are of releases DCGM itself does not let work
    /// together: the engine answers the library's requests for values with
    /// `FunctionNotFound` (a 4.6 library reads values through a request older engines lack).
    #[error(
        "{VERSION_SKEW} library {library} and host engine {engine}: the host engine answers \
         {function} with {status}, so no value can be read; use the host engine's own \
         libdcgm.so.4 ({library} is newer than the engine; --dcgm-library) or a host engine \
         of DCGM {library} or later"
    )]
    VersionSkew {
        library: String,
        engine: String,
        function: &'static str,
        status: Status,
    },
}

/// How every [`Error::VersionSkew`] message starts, so that a caller holding only its text
/// (through a layer that keeps errors as strings) can still tell it: [`is_version_skew`].
pub const VERSION_SKEW: &str = "DCGM refuses this pair of releases:";

/// Whether an error's text is an [`Error::VersionSkew`] (possibly behind a prefix).
pub fn is_version_skew(message: &str) -> bool {
    message.contains(VERSION_SKEW)
}

impl Error {
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Dcgm { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The host engine went away: the session is dead and must be re-created.
    pub fn is_connection_lost(&self) -> bool {
        self.status() == Some(Status::ConnectionNotValid)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
