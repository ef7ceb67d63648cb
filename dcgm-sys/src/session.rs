//! A connection to a DCGM host engine (embedded in this process or remote) and the safe
//! calls the exporter makes over it.

use crate::error::{Error, Result, Status};
use crate::ffi;
use crate::handles::{FieldGroup, Group};
use crate::loader::{release_of, sym, version_info, Library};
use crate::modules::{Module, ModuleStatus};
use crate::releases::Versions;
use crate::types::*;
use crate::value::{c_buf_to_string, decode, FieldReading, Reading};
use crate::versions;
use std::ffi::{c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where a remote host engine listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectTarget {
    /// `host`, `host:port` or `[v6]:port` (port 5555 when omitted).
    Tcp(String),
    /// A unix domain socket path (`nv-hostengine -d PATH`).
    Unix(PathBuf),
    /// `vsock://CID:PORT` (`nv-hostengine --vsock-cid`), through `dcgmConnect_v3` (DCGM 4.5+).
    Vsock { cid: u32, port: u32 },
}

impl ConnectTarget {
    /// Parses what users pass to `-r`: `host:port`, `[v6]:port`, `tcp://host:port`,
    /// `unix:///path`, an absolute socket path, or `vsock://CID:PORT`.
    pub fn parse(s: &str) -> std::result::Result<ConnectTarget, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty host engine address".into());
        }
        if let Some(path) = s.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(format!("'{s}': unix:// needs a socket path"));
            }
            return Ok(ConnectTarget::Unix(PathBuf::from(path)));
        }
        if s.starts_with('/') {
            return Ok(ConnectTarget::Unix(PathBuf::from(s)));
        }
        if let Some(rest) = s.strip_prefix("vsock://") {
            let bad = || format!("'{s}': expected vsock://CID:PORT (both numbers)");
            let (cid, port) = rest.split_once(':').ok_or_else(bad)?;
            return Ok(ConnectTarget::Vsock {
                cid: cid.parse().map_err(|_| bad())?,
                port: port.parse().map_err(|_| bad())?,
            });
        }
        let hostport = s.strip_prefix("tcp://").unwrap_or(s);
        if hostport.contains("://") {
            return Err(format!(
                "'{s}': unknown scheme (use host:port, tcp://, unix:// or vsock://)"
            ));
        }
        // Validate the port now so a typo fails with our message, not a connect timeout.
        let port = if let Some(rest) = hostport.strip_prefix('[') {
            match rest.split_once(']') {
                Some((_, "")) => None,
                Some((_, p)) => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return Err(format!("'{s}': expected [ipv6]:port")),
                },
                None => return Err(format!("'{s}': unclosed '[' in IPv6 address")),
            }
        } else {
            match hostport.matches(':').count() {
                0 => None,
                1 => hostport.split_once(':').map(|(_, p)| p),
                _ => {
                    return Err(format!(
                        "'{s}': IPv6 addresses must be written in brackets, e.g. [::1]:5555"
                    ))
                }
            }
        };
        if let Some(p) = port {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => {}
                _ => return Err(format!("'{s}': invalid port '{p}'")),
            }
        }
        Ok(ConnectTarget::Tcp(hostport.to_string()))
    }

    /// The host part, for the exporter's hostname label in remote mode.
    pub fn host(&self) -> Option<String> {
        match self {
            ConnectTarget::Unix(_) | ConnectTarget::Vsock { .. } => None,
            ConnectTarget::Tcp(hp) => {
                if let Some(rest) = hp.strip_prefix('[') {
                    rest.split_once(']').map(|(h, _)| h.to_string())
                } else {
                    Some(hp.split(':').next().unwrap_or(hp).to_string())
                }
            }
        }
    }
}

impl std::fmt::Display for ConnectTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectTarget::Tcp(hp) => write!(f, "{hp}"),
            ConnectTarget::Unix(p) => write!(f, "unix://{}", p.display()),
            ConnectTarget::Vsock { cid, port } => write!(f, "vsock://{cid}:{port}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionKind {
    Embedded,
    Remote(ConnectTarget),
}

pub(crate) struct Inner {
    lib: Arc<Library>,
    handle: ffi::dcgmHandle_t,
    kind: SessionKind,
    /// The DCGM releases of the library and of the host engine.
    versions: Versions,
    /// Reused output buffer for dcgmEntitiesGetLatestValues (4128 B per value; megabytes
    /// on a large node), so a collection does not allocate it each time.
    scratch: Mutex<Vec<ffi::dcgmFieldValue_v2>>,
    /// Reused output of dcgmHealthCheck (1 MB; zeroing a fresh one was a tenth of a
    /// collection's CPU on an 8-GPU node). DCGM's health module zeroes the response before
    /// it fills it, and only what it reports (`incidentCount` of them) is read back.
    health: Mutex<Option<Box<ffi::dcgmHealthResponse_v5>>>,
}

impl Inner {
    fn check(&self, function: &'static str, code: i32) -> Result<()> {
        self.lib.check(function, code)
    }

    pub(crate) fn destroy_group(&self, id: u64) -> Result<()> {
        let f = sym!(self.lib, dcgmGroupDestroy);
        // SAFETY: plain integer arguments; the handle is live while `self` exists.
        let rc = unsafe { f(self.handle, id as ffi::dcgmGpuGrp_t) };
        self.check("dcgmGroupDestroy", rc)
    }

    pub(crate) fn destroy_field_group(&self, id: u64) -> Result<()> {
        let f = sym!(self.lib, dcgmFieldGroupDestroy);
        // SAFETY: plain integer arguments.
        let rc = unsafe { f(self.handle, id as ffi::dcgmFieldGrp_t) };
        self.check("dcgmFieldGroupDestroy", rc)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // After dcgmShutdown the engine and connections are already gone and a call would
        // only bring DCGM's client back.
        if !self.lib.is_shut_down() {
            match self.kind {
                SessionKind::Embedded => {
                    if let Ok(f) = &self.lib.raw().dcgmStopEmbedded {
                        // SAFETY: the handle came from dcgmStartEmbedded and is stopped once.
                        unsafe { f(self.handle) };
                    }
                }
                SessionKind::Remote(_) => {
                    if let Ok(f) = &self.lib.raw().dcgmDisconnect {
                        // SAFETY: the handle came from dcgmConnect_v2 and is closed once;
                        // dcgmDisconnect tolerates connections the engine already dropped.
                        unsafe { f(self.handle) };
                    }
                }
            }
        }
        self.lib.leave();
    }
}

/// A session being opened: counted as live until it is open (then `Inner` owns the count)
/// or has failed.
struct Entered<'a>(&'a Library);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Opens a session through `open`, which calls the library's start or connect function
/// with the handle to fill and returns its code: the session counts as live from before
/// that call and stops counting if it fails.
fn opening(
    lib: &Library,
    function: &'static str,
    open: impl FnOnce(&mut ffi::dcgmHandle_t) -> Result<i32>,
) -> Result<ffi::dcgmHandle_t> {
    lib.enter()?;
    let entered = Entered(lib);
    let mut handle: ffi::dcgmHandle_t = 0;
    let rc = open(&mut handle)?;
    lib.check(function, rc)?;
    std::mem::forget(entered);
    Ok(handle)
}

/// A live host-engine handle. Cheap to clone; the engine is stopped (embedded) or the
/// connection closed (remote) when the last clone and every group made from it are gone.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Session({:?}, handle {})",
            self.inner.kind, self.inner.handle
        )
    }
}

/// The core ids of a CPU's ownership bitmask.
fn owned_cores(owned: &ffi::dcgmCpuHierarchyOwnedCores_v1) -> Vec<u32> {
    let mut cores = Vec::new();
    for (word, bits) in owned.bitmask.iter().enumerate() {
        for bit in 0..64 {
            if bits & (1u64 << bit) != 0 {
                cores.push((word * 64 + bit) as u32);
            }
        }
    }
    cores
}

/// One GPU's or switch's link states, in link order.
fn link_states(id: u32, raw: &[ffi::dcgmNvLinkLinkState_t]) -> (u32, Vec<LinkState>) {
    (id, raw.iter().map(|&x| LinkState::from_raw(x)).collect())
}

/// The release a remote host engine reports (`dcgmHostengineVersionInfo`).
fn engine_version(lib: &Library, handle: ffi::dcgmHandle_t) -> Result<String> {
    let f = sym!(lib, dcgmHostengineVersionInfo);
    let mut info = version_info();
    // SAFETY: the handle was just connected; `info` is a valid, writable struct of the size
    // its version field announces.
    let rc = unsafe { f(handle, &mut info) };
    lib.check("dcgmHostengineVersionInfo", rc)?;
    Ok(release_of(&info))
}

/// Allocates a zeroed DCGM struct on the heap (several are far too large for a stack).
/// Calls a DCGM query that fills a versioned struct, `function(handle, args..., &mut
/// struct)`, with the struct zeroed on the heap (the large ones stay off the stack) and its
/// `version` set. The filled struct, or the call's error.
macro_rules! versioned {
    ($session:expr, $function:ident($($arg:expr),*), $version:expr) => {{
        let f = sym!($session.lib(), $function);
        let (out, rc) = zeroed_versioned($version, |out| {
            // SAFETY: a heap-allocated struct of the exact size its version names, valid
            // for reads and writes for the call.
            unsafe { f($session.h(), $($arg,)* out) }
        });
        $session.lib().check(stringify!($function), rc).map(|()| out)
    }};
}

/// The GPU links and switch ports of a `dcgmNvLinkStatus_v4` or `_v5` (the same members;
/// v5 has more links per GPU).
macro_rules! link_status_of {
    ($s:expr) => {{
        let s = $s;
        LinkStatus {
            gpus: counted(&s.gpus, s.numGpus)
                .iter()
                .map(|g| link_states(g.entityId, &g.linkState))
                .collect(),
            switches: counted(&s.nvSwitches, s.numNvSwitches)
                .iter()
                .map(|w| link_states(w.entityId, &w.linkState))
                .collect(),
        }
    }};
}

/// The CPUs of a `dcgmCpuHierarchy_v1` or `_v2` (the same members; v2 adds a serial
/// number), each serial number what `serial` makes of its entry.
macro_rules! cpus_of {
    ($h:expr, |$c:pat_param| $serial:expr) => {
        counted(&$h.cpus, $h.numCpus)
            .iter()
            .map(|c| {
                let $c = c;
                Cpu {
                    id: c.cpuId,
                    cores: owned_cores(&c.ownedCores),
                    serial: $serial,
                }
            })
            .collect()
    };
}

/// The first `count` entries of a fixed array DCGM filled (all of it if `count` claims
/// more).
fn counted<T>(list: &[T], count: u32) -> &[T] {
    &list[..(count as usize).min(list.len())]
}

/// A zeroed `T` on the heap with `version` set, handed to `call` to fill.
fn zeroed_versioned<T>(version: u32, call: impl FnOnce(*mut T) -> i32) -> (Box<T>, i32) {
    let mut out = boxed_zeroed::<T>();
    let p: *mut T = &mut *out;
    // SAFETY: every versioned DCGM struct starts with its `unsigned int version`, and `p`
    // points to a whole, writable `T`.
    unsafe { p.cast::<u32>().write(version) };
    let rc = call(p);
    (out, rc)
}

fn boxed_zeroed<T>() -> Box<T> {
    // SAFETY: every DCGM struct we use is plain data (integers, floats, char arrays and
    // unions of them) for which all-zero bytes are a valid value.
    unsafe { Box::<T>::new_zeroed().assume_init() }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| Error::InvalidArgument(format!("{what} contains a NUL byte: {s:?}")))
}

/// Field ids per dcgmEntitiesGetLatestValues call (the library rejects more than 128).
const MAX_FIELDS_PER_CALL: usize = 128;
/// Entities per call (the library rejects more than 1024).
const MAX_ENTITIES_PER_CALL: usize = 1024;
/// Values per `dcgmEntitiesGetLatestValues` call. Each record carries a 4 KiB union, and the
/// buffer they are read into is kept: 512 records (about 2 MiB) instead of the up to
/// 1024 x 128 the API allows (12.7 MB on a 32-GPU node with its NvLinks); a larger request
/// is split over more calls.
pub const MAX_VALUES_PER_CALL: usize = 512;

impl Session {
    /// Starts an embedded host engine in this process (`DCGM_OPERATION_MODE_AUTO`: DCGM
    /// samples watched fields on its own threads), without the modules of the library's
    /// denylist ([`Library::set_module_denylist`]; none by default).
    pub fn embedded(lib: Arc<Library>) -> Result<Session> {
        let deny = lib.module_denylist();
        Self::embedded_denying(lib, &deny)
    }

    /// Starts an embedded host engine through `dcgmStartEmbedded_v2` (parameters version 2)
    /// with `deny` on its module denylist: DCGM marks them before it could load any
    /// (`DcgmHostEngineHandler::Init` -> `ApplyModuleDenylist`), and every request one of
    /// them would serve answers `DCGM_ST_MODULE_NOT_LOADED`. No log file and the
    /// environment's severity, as `dcgmStartEmbedded` (which is this call with an empty
    /// denylist in DCGM). A library without `dcgmStartEmbedded_v2` (before DCGM 2.0) is
    /// started through `dcgmStartEmbedded` when nothing is denied.
    pub fn embedded_denying(lib: Arc<Library>, deny: &[Module]) -> Result<Session> {
        let mut list = [0u32; 10];
        if deny.len() > list.len() {
            return Err(Error::InvalidArgument(format!(
                "at most {} DCGM modules can be denied, not {}",
                list.len(),
                deny.len()
            )));
        }
        for (slot, m) in list.iter_mut().zip(deny) {
            *slot = m.id();
        }
        if lib.raw().dcgmStartEmbedded_v2.is_err() && deny.is_empty() {
            return Self::embedded_v1(lib);
        }
        let handle = opening(&lib, "dcgmStartEmbedded_v2", |handle| {
            let f = sym!(lib, dcgmStartEmbedded_v2);
            let mut params = ffi::dcgmStartEmbeddedV2Params_v2 {
                version: versions::START_EMBEDDED_V2_PARAMS_V2,
                opMode: ffi::DCGM_OPERATION_MODE_AUTO,
                dcgmHandle: 0,
                logFile: std::ptr::null(),
                severity: ffi::DcgmLoggingSeverityUnspecified,
                denyListCount: deny.len() as u32,
                serviceAccount: std::ptr::null(),
                denyList: list,
            };
            // SAFETY: `params` is a version-2 struct of the size its version names, valid for
            // reads and writes for the call; its two pointers are NULL, which DCGM reads as
            // "no log file" and "no service account"; the function takes it through its v1
            // pointer type and dispatches on `version` (DcgmApi.cpp dcgmStartEmbedded_v2).
            let rc = unsafe { f((&mut params as *mut ffi::dcgmStartEmbeddedV2Params_v2).cast()) };
            *handle = params.dcgmHandle;
            Ok(rc)
        })?;
        let versions = Versions::embedded(&lib);
        Ok(Self::wrap(lib, handle, SessionKind::Embedded, versions))
    }

    fn embedded_v1(lib: Arc<Library>) -> Result<Session> {
        let handle = opening(&lib, "dcgmStartEmbedded", |handle| {
            let f = sym!(lib, dcgmStartEmbedded);
            // SAFETY: `handle` is a valid out-pointer for the duration of the call.
            Ok(unsafe { f(ffi::DCGM_OPERATION_MODE_AUTO, handle) })
        })?;
        let versions = Versions::embedded(&lib);
        Ok(Self::wrap(lib, handle, SessionKind::Embedded, versions))
    }

    /// Connects to a remote host engine. `timeout_ms` 0 means DCGM's default (5 s).
    pub fn connect(lib: Arc<Library>, target: &ConnectTarget, timeout_ms: u32) -> Result<Session> {
        let (addr, unix) = match target {
            ConnectTarget::Tcp(hp) => (cstring("host engine address", hp)?, 0),
            ConnectTarget::Unix(p) => (cstring("socket path", &p.to_string_lossy())?, 1),
            ConnectTarget::Vsock { .. } => return Self::connect_v3(lib, target, timeout_ms),
        };
        let handle = opening(&lib, "dcgmConnect_v2", |handle| {
            let f = sym!(lib, dcgmConnect_v2);
            let mut params = ffi::dcgmConnectV2Params_v2 {
                version: versions::CONNECT_V2_PARAMS_V2,
                persistAfterDisconnect: 0,
                timeoutMs: timeout_ms,
                addressIsUnixSocket: unix,
            };
            // SAFETY: `addr` is NUL-terminated and outlives the call; params and handle are
            // valid for reads/writes of their own types.
            Ok(unsafe { f(addr.as_ptr(), &mut params, handle) })
        })?;
        Self::meet(lib, handle, SessionKind::Remote(target.clone()))
    }

    /// `dcgmConnect_v3` with a connection string (vsock is reachable only through it).
    fn connect_v3(lib: Arc<Library>, target: &ConnectTarget, timeout_ms: u32) -> Result<Session> {
        let uri = cstring("host engine address", &target.to_string())?;
        let handle = opening(&lib, "dcgmConnect_v3", |handle| {
            let f = sym!(lib, dcgmConnect_v3);
            let mut params = ffi::dcgmConnectV3Params_v1 {
                version: versions::CONNECT_V3_PARAMS_V1,
                persistAfterDisconnect: 0,
                timeoutMs: timeout_ms,
            };
            // SAFETY: `uri` is NUL-terminated and outlives the call; params and handle are
            // valid for reads/writes of their own types.
            Ok(unsafe { f(uri.as_ptr(), &mut params, handle) })
        })?;
        Self::meet(lib, handle, SessionKind::Remote(target.clone()))
    }

    /// A remote session just connected: asks the host engine's release and, where it is
    /// not the library's, whether the engine answers the library's request for values at
    /// all. A 4.6 library reads values through a request that older engines answer with
    /// `FunctionNotFound` (NVIDIA's own dcgmi included): that pair is refused here, with
    /// both releases named, instead of failing every collection. Other pairs of releases
    /// work, each side knowing less than the other: see [`crate::releases`].
    fn meet(lib: Arc<Library>, handle: ffi::dcgmHandle_t, kind: SessionKind) -> Result<Session> {
        let versions = Versions {
            library: lib.version().ok(),
            engine: engine_version(&lib, handle).ok(),
        };
        let session = Self::wrap(lib, handle, kind, versions);
        let (Some(library), Some(engine)) = (
            session.inner.versions.library.clone(),
            session.inner.versions.engine.clone(),
        ) else {
            return Ok(session);
        };
        if library == engine {
            return Ok(session);
        }
        // DCGM_FI_DRIVER_VERSION of the node (entity NONE): every engine has it.
        let probe = session.latest_values(&[Entity::new(EntityGroup::None, 0)], &[1], false);
        match probe {
            Err(e) if e.status() == Some(Status::FunctionNotFound) => {
                // Dropping the session disconnects it.
                Err(Error::VersionSkew {
                    library,
                    engine,
                    function: "dcgmEntitiesGetLatestValues",
                    status: Status::FunctionNotFound,
                })
            }
            _ => Ok(session),
        }
    }

    fn wrap(
        lib: Arc<Library>,
        handle: ffi::dcgmHandle_t,
        kind: SessionKind,
        versions: Versions,
    ) -> Session {
        Session {
            inner: Arc::new(Inner {
                lib,
                handle,
                kind,
                versions,
                scratch: Mutex::new(Vec::new()),
                health: Mutex::new(None),
            }),
        }
    }

    /// The DCGM releases of the library and of the host engine of this session.
    pub fn versions(&self) -> &Versions {
        &self.inner.versions
    }

    pub fn kind(&self) -> &SessionKind {
        &self.inner.kind
    }

    pub fn library(&self) -> &Arc<Library> {
        &self.inner.lib
    }

    fn lib(&self) -> &Library {
        &self.inner.lib
    }

    fn h(&self) -> ffi::dcgmHandle_t {
        self.inner.handle
    }

    /// GPU ids known to DCGM (`only_supported`: those DCGM can fully manage).
    pub fn gpus(&self, only_supported: bool) -> Result<Vec<u32>> {
        let mut ids = [0u32; ffi::DCGM_MAX_NUM_DEVICES as usize];
        let mut count: c_int = 0;
        let (name, rc) = if only_supported {
            let f = sym!(self.lib(), dcgmGetAllSupportedDevices);
            // SAFETY: `ids` has the DCGM_MAX_NUM_DEVICES elements the API writes at most.
            ("dcgmGetAllSupportedDevices", unsafe {
                f(self.h(), ids.as_mut_ptr(), &mut count)
            })
        } else {
            let f = sym!(self.lib(), dcgmGetAllDevices);
            // SAFETY: as above.
            ("dcgmGetAllDevices", unsafe {
                f(self.h(), ids.as_mut_ptr(), &mut count)
            })
        };
        self.lib().check(name, rc)?;
        let n = (count.max(0) as usize).min(ids.len());
        Ok(ids[..n].to_vec())
    }

    /// Whether DCGM reports the GPU as fallen off the bus (`DcgmEntityStatusLost`).
    pub fn gpu_is_lost(&self, gpu: u32) -> Result<bool> {
        Ok(self.gpu_status(gpu)? == ffi::DcgmEntityStatusLost)
    }

    /// Whether DCGM lists the GPU but will not take it into a group: detached from its
    /// driver (an unbind), inaccessible or disabled (`dcgmGetGpuStatus`).
    pub fn gpu_is_unusable(&self, gpu: u32) -> Result<Option<&'static str>> {
        Ok(match self.gpu_status(gpu)? {
            ffi::DcgmEntityStatusDetached => Some("detached"),
            ffi::DcgmEntityStatusInaccessible => Some("inaccessible"),
            ffi::DcgmEntityStatusDisabled => Some("disabled"),
            _ => None,
        })
    }

    fn gpu_status(&self, gpu: u32) -> Result<ffi::DcgmEntityStatus_t> {
        let f = sym!(self.lib(), dcgmGetGpuStatus);
        let mut status: ffi::DcgmEntityStatus_t = ffi::DcgmEntityStatusUnknown;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let rc = unsafe { f(self.h(), gpu, &mut status) };
        self.lib().check("dcgmGetGpuStatus", rc)?;
        Ok(status)
    }

    pub fn device_attributes(&self, gpu: u32) -> Result<DeviceAttributes> {
        let a = versioned!(
            self,
            dcgmGetDeviceAttributes(gpu),
            versions::DEVICE_ATTRIBUTES_V3
        )?;
        let id = &a.identifiers;
        Ok(DeviceAttributes {
            brand: c_buf_to_string(&id.brandName),
            name: c_buf_to_string(&id.deviceName),
            pci_bus_id: c_buf_to_string(&id.pciBusId),
            serial: c_buf_to_string(&id.serial),
            uuid: c_buf_to_string(&id.uuid),
            vbios: c_buf_to_string(&id.vbios),
            inforom_image_version: c_buf_to_string(&id.inforomImageVersion),
            driver_version: c_buf_to_string(&id.driverVersion),
            pci_device_id: id.pciDeviceId,
            pci_subsystem_id: id.pciSubSystemId,
            virtualization_mode: id.virtualizationMode,
            power_limit_current_w: a.powerLimits.curPowerLimit,
            power_limit_max_w: a.powerLimits.maxPowerLimit,
            slowdown_temp_c: a.thermalSettings.slowdownTemp,
            shutdown_temp_c: a.thermalSettings.shutdownTemp,
            fb_total_mib: a.memoryUsage.fbTotal,
            fb_used_mib: a.memoryUsage.fbUsed,
            fb_free_mib: a.memoryUsage.fbFree,
            bar1_total_mib: a.memoryUsage.bar1Total,
            persistence_mode: a.settings.persistenceModeEnabled != 0,
            mig_mode: a.settings.migModeEnabled != 0,
        })
    }

    /// Entity ids of one group (switches, CPUs, cores, links, instances...).
    pub fn entities(&self, group: EntityGroup, only_supported: bool) -> Result<Vec<u32>> {
        let f = sym!(self.lib(), dcgmGetEntityGroupEntities);
        let flags = if only_supported {
            ffi::DCGM_GEGE_FLAG_ONLY_SUPPORTED
        } else {
            0
        };
        let mut buf = vec![0u32; 64];
        loop {
            let mut n: c_int = buf.len() as c_int;
            // SAFETY: `buf` holds `n` writable elements; DCGM writes at most `n`.
            let rc = unsafe { f(self.h(), group.raw(), buf.as_mut_ptr(), &mut n, flags) };
            if rc == ffi::DCGM_ST_INSUFFICIENT_SIZE && n as usize > buf.len() {
                buf.resize(n as usize, 0);
                continue;
            }
            self.lib().check("dcgmGetEntityGroupEntities", rc)?;
            buf.truncate((n.max(0) as usize).min(buf.len()));
            return Ok(buf);
        }
    }

    /// GPU and compute instances of every MIG-enabled GPU (empty when MIG is off).
    pub fn mig_hierarchy(&self) -> Result<Vec<MigEntity>> {
        let h = versioned!(
            self,
            dcgmGetGpuInstanceHierarchy(),
            versions::MIG_HIERARCHY_V2
        )?;
        Ok(counted(&h.entityList, h.count)
            .iter()
            .map(|e| {
                let entity = Entity::new(
                    EntityGroup::from_raw(e.entity.entityGroupId),
                    e.entity.entityId,
                );
                MigEntity {
                    entity,
                    parent: Entity::new(
                        EntityGroup::from_raw(e.parent.entityGroupId),
                        e.parent.entityId,
                    ),
                    gpu_uuid: c_buf_to_string(&e.info.gpuUuid),
                    nvml_gpu_index: e.info.nvmlGpuIndex,
                    nvml_instance_id: e.info.nvmlInstanceId,
                    nvml_compute_instance_id: (entity.group == EntityGroup::ComputeInstance)
                        .then_some(e.info.nvmlComputeInstanceId),
                    nvml_profile_id: e.info.nvmlMigProfileId,
                    profile_slices: e.info.nvmlProfileSlices,
                }
            })
            .collect())
    }

    /// NVLink state of every GPU link and switch port: the 4.6 `v5` layout (36 links per
    /// GPU), or, from a library older than 4.6 (which answers `VerMismatch` to v5), the `v4`
    /// layout every DCGM 4 knows (18 links per GPU). Each answer is read through the layout
    /// of the version the library accepted.
    pub fn link_status(&self) -> Result<LinkStatus> {
        let s = match versioned!(self, dcgmGetNvLinkLinkStatus(), versions::NVLINK_STATUS_V5) {
            Err(e) if e.status() == Some(Status::VerMismatch) => return self.link_status_v4(),
            r => r?,
        };
        Ok(link_status_of!(s))
    }

    /// `dcgmGetNvLinkLinkStatus` with `dcgmNvLinkStatus_v4`, as DCGM 4.0 to 4.5 define it.
    fn link_status_v4(&self) -> Result<LinkStatus> {
        let f = sym!(self.lib(), dcgmGetNvLinkLinkStatus);
        let v4 = |s: *mut ffi::dcgmNvLinkStatus_v4| {
            // SAFETY: the library reads the version first and then writes only as many
            // bytes as that version's struct has: a heap-allocated `dcgmNvLinkStatus_v4`,
            // whose pointer is cast to the type the 4.6 prototype names.
            unsafe { f(self.h(), s.cast()) }
        };
        let (s, rc) = zeroed_versioned(versions::NVLINK_STATUS_V4, v4);
        self.lib().check("dcgmGetNvLinkLinkStatus", rc)?;
        Ok(link_status_of!(s))
    }

    pub fn p2p_status(&self) -> Result<P2PMatrix> {
        // numGpus 0 asks for every GPU.
        let s = versioned!(
            self,
            dcgmGetNvLinkP2PStatus(),
            versions::NVLINK_P2P_STATUS_V1
        )?;
        let gpus = counted(&s.gpus, s.numGpus);
        let n = gpus.len();
        Ok(P2PMatrix {
            gpus: gpus
                .iter()
                .map(|g| {
                    (
                        g.entityId,
                        g.linkStatus[..n]
                            .iter()
                            .map(|&x| P2PStatus::from_raw(x))
                            .collect(),
                    )
                })
                .collect(),
        })
    }

    /// The CPUs and their cores, with serial numbers through `dcgmGetCpuHierarchy_v2`
    /// where the library has it (DCGM 4.x), else through the v1 call.
    pub fn cpu_hierarchy(&self) -> Result<Vec<Cpu>> {
        match self.cpu_hierarchy_v2() {
            Err(Error::MissingSymbol { .. }) => self.cpu_hierarchy_v1(),
            Err(e) if e.status() == Some(Status::VerMismatch) => self.cpu_hierarchy_v1(),
            other => other,
        }
    }

    fn cpu_hierarchy_v2(&self) -> Result<Vec<Cpu>> {
        let h = versioned!(self, dcgmGetCpuHierarchy_v2(), versions::CPU_HIERARCHY_V2)?;
        Ok(cpus_of!(h, |c| c_buf_to_string(&c.serial)
            .trim()
            .to_string()))
    }

    fn cpu_hierarchy_v1(&self) -> Result<Vec<Cpu>> {
        let h = versioned!(self, dcgmGetCpuHierarchy(), versions::CPU_HIERARCHY_V1)?;
        Ok(cpus_of!(h, |_| String::new()))
    }

    /// Profiling (DCP) metric groups a GPU supports.
    pub fn supported_metric_groups(&self, gpu: u32) -> Result<Vec<MetricGroup>> {
        let f = sym!(self.lib(), dcgmProfGetSupportedMetricGroups);
        let (m, rc) = zeroed_versioned(
            versions::PROF_GET_METRIC_GROUPS_V3,
            |m: *mut ffi::dcgmProfGetMetricGroups_v3| {
                // SAFETY: a heap-allocated, versioned struct of the exact size the API expects;
                // `gpuId` is its one input besides the version.
                unsafe {
                    (*m).gpuId = gpu;
                    f(self.h(), m)
                }
            },
        );
        self.lib().check("dcgmProfGetSupportedMetricGroups", rc)?;
        Ok(counted(&m.metricGroups, m.numMetricGroups)
            .iter()
            .map(|g| MetricGroup {
                major_id: g.majorId,
                minor_id: g.minorId,
                field_ids: counted(&g.fieldIds, g.numFieldIds).to_vec(),
            })
            .collect())
    }

    /// What the host engine says of each of its modules (`dcgmModuleGetStatuses`): which
    /// are loaded, denied, failed to load or not loaded yet.
    pub fn module_statuses(&self) -> Result<Vec<(u32, ModuleStatus)>> {
        let m = versioned!(
            self,
            dcgmModuleGetStatuses(),
            versions::MODULE_GET_STATUSES_V1
        )?;
        Ok(counted(&m.statuses, m.numStatuses)
            .iter()
            .map(|s| (s.id, ModuleStatus::from_raw(s.status)))
            .collect())
    }

    /// The status of one module (`None` when the engine does not list it).
    pub fn module_status(&self, module: Module) -> Result<Option<ModuleStatus>> {
        Ok(self
            .module_statuses()?
            .into_iter()
            .find(|(id, _)| *id == module.id())
            .map(|(_, s)| s))
    }

    /// Creates an empty group and adds `entities`. The group is destroyed when dropped.
    pub fn create_group(&self, name: &str, entities: &[Entity]) -> Result<Group> {
        let create = sym!(self.lib(), dcgmGroupCreate);
        let add = sym!(self.lib(), dcgmGroupAddEntity);
        let cname = cstring("group name", name)?;
        let mut id: ffi::dcgmGpuGrp_t = 0;
        // SAFETY: `cname` is NUL-terminated and outlives the call; `id` is a valid out-pointer.
        let rc = unsafe { create(self.h(), ffi::DCGM_GROUP_EMPTY, cname.as_ptr(), &mut id) };
        self.lib().check("dcgmGroupCreate", rc)?;
        let group = Group {
            session: self.inner.clone(),
            id: id as u64,
            entities: entities.to_vec(),
        };
        for e in entities {
            // SAFETY: integer arguments only.
            let rc = unsafe { add(self.h(), id, e.group.raw(), e.id) };
            self.lib().check("dcgmGroupAddEntity", rc)?;
        }
        Ok(group)
    }

    /// Name and members of a group as the engine sees it.
    pub fn group_info(&self, group_id: u64) -> Result<(String, Vec<Entity>)> {
        let g = versioned!(
            self,
            dcgmGroupGetInfo(group_id as ffi::dcgmGpuGrp_t),
            versions::GROUP_INFO_V3
        )?;
        Ok((
            c_buf_to_string(&g.groupName),
            counted(&g.entityList, g.count)
                .iter()
                .map(|p| Entity::new(EntityGroup::from_raw(p.entityGroupId), p.entityId))
                .collect(),
        ))
    }

    /// Creates a field group (1 to 127 fields). Destroyed when dropped.
    pub fn create_field_group(&self, name: &str, fields: &[u16]) -> Result<FieldGroup> {
        let f = sym!(self.lib(), dcgmFieldGroupCreate);
        let cname = cstring("field group name", name)?;
        let mut id: ffi::dcgmFieldGrp_t = 0;
        // SAFETY: `fields` is a valid array of `len` u16 the library only reads; `cname`
        // is NUL-terminated; `id` is a valid out-pointer.
        let rc = unsafe {
            f(
                self.h(),
                fields.len() as c_int,
                fields.as_ptr(),
                cname.as_ptr(),
                &mut id,
            )
        };
        self.lib().check("dcgmFieldGroupCreate", rc)?;
        Ok(FieldGroup {
            session: self.inner.clone(),
            id: id as u64,
            fields: fields.to_vec(),
        })
    }

    /// Watches every field of `fields` on every entity of `group`.
    pub fn watch(
        &self,
        group: &Group,
        fields: &FieldGroup,
        update_freq_us: i64,
        max_keep_age_s: f64,
        max_keep_samples: i32,
    ) -> Result<()> {
        let f = sym!(self.lib(), dcgmWatchFields);
        // SAFETY: integer/float arguments only.
        let rc = unsafe {
            f(
                self.h(),
                group.id as ffi::dcgmGpuGrp_t,
                fields.id as ffi::dcgmFieldGrp_t,
                update_freq_us,
                max_keep_age_s,
                max_keep_samples,
            )
        };
        self.lib().check("dcgmWatchFields", rc)
    }

    pub fn unwatch(&self, group: &Group, fields: &FieldGroup) -> Result<()> {
        let f = sym!(self.lib(), dcgmUnwatchFields);
        // SAFETY: integer arguments only.
        let rc = unsafe {
            f(
                self.h(),
                group.id as ffi::dcgmGpuGrp_t,
                fields.id as ffi::dcgmFieldGrp_t,
            )
        };
        self.lib().check("dcgmUnwatchFields", rc)
    }

    /// Runs one sampling cycle now (`wait`: block until it is done).
    pub fn update_all_fields(&self, wait: bool) -> Result<()> {
        let f = sym!(self.lib(), dcgmUpdateAllFields);
        // SAFETY: integer arguments only.
        let rc = unsafe { f(self.h(), c_int::from(wait)) };
        self.lib().check("dcgmUpdateAllFields", rc)
    }

    /// Latest cached value of every field for every entity, in as few
    /// `dcgmEntitiesGetLatestValues` calls as the API limits allow. `live` reads the driver
    /// instead of the cache (`DCGM_FV_FLAG_LIVE_DATA`). The result is in no particular order.
    pub fn latest_values(
        &self,
        entities: &[Entity],
        fields: &[u16],
        live: bool,
    ) -> Result<Vec<FieldReading>> {
        let f = sym!(self.lib(), dcgmEntitiesGetLatestValues);
        let flags = if live { ffi::DCGM_FV_FLAG_LIVE_DATA } else { 0 };
        let mut out = Vec::with_capacity(entities.len() * fields.len());
        let mut scratch = self.inner.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let mut pairs: Vec<ffi::dcgmGroupEntityPair_t> = Vec::new();
        for flds in fields.chunks(MAX_FIELDS_PER_CALL.min(MAX_VALUES_PER_CALL)) {
            let per_call = (MAX_VALUES_PER_CALL / flds.len()).clamp(1, MAX_ENTITIES_PER_CALL);
            for ents in entities.chunks(per_call) {
                pairs.clear();
                pairs.extend(ents.iter().map(|e| ffi::dcgmGroupEntityPair_t {
                    entityGroupId: e.group.raw(),
                    entityId: e.id,
                }));
                let mut ids = flds.to_vec();
                let n = pairs.len() * ids.len();
                // The buffer only grows, zeroed once; between calls every record is kept
                // all-zero (see `clear_after_read`), so DCGM, which writes only the bytes of
                // the value it returns, leaves the same zeros behind it as a fresh buffer.
                if scratch.len() < n {
                    // SAFETY: all-zero is a valid dcgmFieldValue_v2 (plain data).
                    scratch.resize(n, unsafe { std::mem::zeroed() });
                }
                let buf = &mut scratch[..n];
                for v in buf.iter_mut() {
                    v.version = versions::FIELD_VALUE_V2;
                }
                // SAFETY: `pairs` and `ids` are valid for their lengths; `buf` holds
                // exactly entityCount * fieldCount writable values, as the API requires.
                let rc = unsafe {
                    f(
                        self.h(),
                        pairs.as_mut_ptr(),
                        pairs.len() as u32,
                        ids.as_mut_ptr(),
                        ids.len() as u32,
                        flags,
                        buf.as_mut_ptr(),
                    )
                };
                let checked = self.lib().check("dcgmEntitiesGetLatestValues", rc);
                if checked.is_ok() {
                    out.extend(buf.iter().map(|v| FieldReading {
                        entity: Entity::new(EntityGroup::from_raw(v.entityGroupId), v.entityId),
                        field_id: v.fieldId,
                        ts_us: v.ts,
                        reading: decode_v2(v),
                    }));
                }
                clear_after_read(buf, checked.is_ok());
                checked?;
            }
        }
        Ok(out)
    }

    /// Value records held for [`Self::latest_values`] between calls (at most
    /// [`MAX_VALUES_PER_CALL`]).
    pub fn latest_values_buffer(&self) -> usize {
        self.inner
            .scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Latest values of one entity through `dcgmEntityGetLatestValues` (v1 values), in
    /// field order. Kept for parity with go-dcgm; the exporter batches with [`Self::latest_values`].
    pub fn entity_latest_values(
        &self,
        entity: Entity,
        fields: &[u16],
    ) -> Result<Vec<FieldReading>> {
        let f = sym!(self.lib(), dcgmEntityGetLatestValues);
        let mut ids = fields.to_vec();
        // SAFETY: all-zero is a valid dcgmFieldValue_v1 (plain data).
        let mut vals: Vec<ffi::dcgmFieldValue_v1> = vec![unsafe { std::mem::zeroed() }; ids.len()];
        for v in vals.iter_mut() {
            v.version = versions::FIELD_VALUE_V1;
        }
        // SAFETY: `ids` and `vals` are valid arrays of `count` elements.
        let rc = unsafe {
            f(
                self.h(),
                entity.group.raw(),
                entity.id as c_int,
                ids.as_mut_ptr(),
                ids.len() as u32,
                vals.as_mut_ptr(),
            )
        };
        self.lib().check("dcgmEntityGetLatestValues", rc)?;
        Ok(vals
            .iter()
            .map(|v| FieldReading {
                entity,
                field_id: v.fieldId,
                ts_us: v.ts,
                reading: decode(v.fieldType, v.status, &v.value),
            })
            .collect())
    }

    /// Every cached sample with a timestamp at or after `since_us` for the group and field
    /// group, and the timestamp to pass next time.
    pub fn values_since(
        &self,
        group: &Group,
        fields: &FieldGroup,
        since_us: i64,
    ) -> Result<(Vec<FieldReading>, i64)> {
        let f = sym!(self.lib(), dcgmGetValuesSince_v2);
        let mut sink = CallbackSink {
            out: Vec::new(),
            panicked: false,
        };
        let mut next: std::os::raw::c_longlong = 0;
        // SAFETY: the callback only runs during this call and only touches `sink`, which
        // outlives it; `next` is a valid out-pointer.
        let rc = unsafe {
            f(
                self.h(),
                group.id as ffi::dcgmGpuGrp_t,
                fields.id as ffi::dcgmFieldGrp_t,
                since_us,
                &mut next,
                Some(collect_values_cb),
                (&mut sink as *mut CallbackSink).cast::<c_void>(),
            )
        };
        self.lib().check("dcgmGetValuesSince_v2", rc)?;
        if sink.panicked {
            return Err(Error::InvalidArgument(
                "value callback failed while decoding DCGM values".into(),
            ));
        }
        Ok((sink.out, next))
    }

    /// Enables health watches (`health_system` bits) on a group.
    pub fn health_set(&self, group: &Group, systems: u32) -> Result<()> {
        let f = sym!(self.lib(), dcgmHealthSet);
        // SAFETY: integer arguments only.
        let rc = unsafe { f(self.h(), group.id as ffi::dcgmGpuGrp_t, systems) };
        self.lib().check("dcgmHealthSet", rc)
    }

    pub fn health_get(&self, group: &Group) -> Result<u32> {
        let f = sym!(self.lib(), dcgmHealthGet);
        let mut systems: ffi::dcgmHealthSystems_t = 0;
        // SAFETY: `systems` is a valid out-pointer.
        let rc = unsafe { f(self.h(), group.id as ffi::dcgmGpuGrp_t, &mut systems) };
        self.lib().check("dcgmHealthGet", rc)?;
        Ok(systems)
    }

    pub fn health_check(&self, group: &Group) -> Result<HealthResponse> {
        let f = sym!(self.lib(), dcgmHealthCheck);
        let mut kept = self.inner.health.lock().unwrap_or_else(|p| p.into_inner());
        // 1 MB: must live on the heap.
        let r = kept.get_or_insert_with(boxed_zeroed);
        // What the last check left is not this one's answer, whatever the library does.
        r.version = versions::HEALTH_RESPONSE_V5;
        r.overallHealth = 0;
        r.incidentCount = 0;
        // SAFETY: a heap-allocated dcgmHealthResponse_v5, the struct its version names,
        // valid for reads and writes for the call.
        let rc = unsafe { f(self.h(), group.id as ffi::dcgmGpuGrp_t, &mut **r) };
        self.lib().check("dcgmHealthCheck", rc)?;
        Ok(HealthResponse {
            overall: r.overallHealth,
            incidents: counted(&r.incidents, r.incidentCount)
                .iter()
                .map(|i| HealthIncident {
                    system: i.system,
                    health: i.health,
                    code: i.error.code,
                    message: c_buf_to_string(&i.error.msg),
                    entity: Entity::new(
                        EntityGroup::from_raw(i.entityInfo.entityGroupId),
                        i.entityInfo.entityId,
                    ),
                })
                .collect(),
        })
    }
}

/// Puts records DCGM has filled back to all-zero, touching only what it can have written:
/// DCGM copies a value's own bytes (8 for numbers, the string with its NUL, the blob's
/// length) into the caller's record, so a numeric record needs its header and 8 bytes
/// cleared, not its 4 KiB union. After a failed call nothing is assumed: all is zeroed.
fn clear_after_read(buf: &mut [ffi::dcgmFieldValue_v2], call_ok: bool) {
    for v in buf {
        let numeric = matches!(
            v.fieldType as u8,
            ffi::DCGM_FT_INT64 | ffi::DCGM_FT_DOUBLE | ffi::DCGM_FT_TIMESTAMP
        );
        if call_ok && numeric {
            v.version = 0;
            v.entityGroupId = 0;
            v.entityId = 0;
            v.fieldId = 0;
            v.fieldType = 0;
            v.status = 0;
            v.unused = 0;
            v.ts = 0;
            v.value.i64_ = 0;
        } else {
            // SAFETY: all-zero is a valid dcgmFieldValue_v2 (plain data).
            *v = unsafe { std::mem::zeroed() };
        }
    }
}

fn decode_v2(v: &ffi::dcgmFieldValue_v2) -> Reading {
    // SAFETY: the v1 and v2 value unions are identical (same members, size and
    // alignment), so reinterpreting a reference to one as the other is sound.
    let value: &ffi::dcgmFieldValue_v1__bindgen_ty_1 =
        unsafe { &*(&v.value as *const ffi::dcgmFieldValue_v2__bindgen_ty_1).cast() };
    decode(v.fieldType, v.status, value)
}

struct CallbackSink {
    out: Vec<FieldReading>,
    panicked: bool,
}

/// `dcgmFieldValueEntityEnumeration_f`: copies values out (they are only valid during the
/// callback). A panic must not unwind into C, so it is caught and reported afterwards.
unsafe extern "C" fn collect_values_cb(
    entity_group: ffi::dcgm_field_entity_group_t,
    entity_id: ffi::dcgm_field_eid_t,
    values: *mut ffi::dcgmFieldValue_v1,
    n: c_int,
    user: *mut c_void,
) -> c_int {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `user` is the `&mut CallbackSink` passed by values_since, alive for the
        // whole enumeration and not aliased meanwhile.
        let sink = unsafe { &mut *user.cast::<CallbackSink>() };
        if values.is_null() || n <= 0 {
            return;
        }
        // SAFETY: DCGM passes `n` valid values, readable until the callback returns.
        let vals = unsafe { std::slice::from_raw_parts(values, n as usize) };
        let entity = Entity::new(EntityGroup::from_raw(entity_group), entity_id);
        sink.out.extend(vals.iter().map(|v| FieldReading {
            entity,
            field_id: v.fieldId,
            ts_us: v.ts,
            reading: decode(v.fieldType, v.status, &v.value),
        }));
    }));
    match result {
        Ok(()) => 0,
        Err(_) => {
            // SAFETY: as above; we only set a flag.
            unsafe { (*user.cast::<CallbackSink>()).panicked = true };
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_targets_parse_like_dcgm() {
        for (text, target) in [
            (
                "localhost:5555",
                ConnectTarget::Tcp("localhost:5555".into()),
            ),
            (
                "tcp://10.0.0.1:5555",
                ConnectTarget::Tcp("10.0.0.1:5555".into()),
            ),
            ("[::1]:5555", ConnectTarget::Tcp("[::1]:5555".into())),
            ("host", ConnectTarget::Tcp("host".into())),
            ("unix:///tmp/he", ConnectTarget::Unix("/tmp/he".into())),
            (
                "/run/nv-hostengine",
                ConnectTarget::Unix("/run/nv-hostengine".into()),
            ),
        ] {
            assert_eq!(ConnectTarget::parse(text), Ok(target), "{text}");
        }
        assert!(ConnectTarget::parse("::1:5555")
            .unwrap_err()
            .contains("brackets"));
        assert!(ConnectTarget::parse("host:0")
            .unwrap_err()
            .contains("invalid port"));
        assert!(ConnectTarget::parse("host:http").is_err());
        let v = ConnectTarget::parse("vsock://3:5555").unwrap();
        assert_eq!(v, ConnectTarget::Vsock { cid: 3, port: 5555 });
        assert_eq!(
            (v.to_string(), v.host()),
            ("vsock://3:5555".to_string(), None)
        );
        for bad in [
            "vsock://3",
            "vsock://x:5555",
            "vsock://3:",
            "vsock://:5555",
            "vsock://3:-1",
        ] {
            assert!(
                ConnectTarget::parse(bad)
                    .unwrap_err()
                    .contains("vsock://CID:PORT"),
                "{bad}"
            );
        }
        assert!(ConnectTarget::parse("http://x:1")
            .unwrap_err()
            .contains("vsock://"));
        assert!(ConnectTarget::parse("").is_err());
        for (text, host) in [
            ("[fe80::1]:5555", "fe80::1"),
            ("gpu-node-3:5555", "gpu-node-3"),
        ] {
            assert_eq!(
                ConnectTarget::parse(text).unwrap().host().as_deref(),
                Some(host)
            );
        }
    }

    fn bytes_of(v: &ffi::dcgmFieldValue_v2) -> &[u8] {
        // SAFETY: a dcgmFieldValue_v2 built here from zeroed memory is plain data with every
        // byte initialised (padding included), readable as bytes for its size.
        unsafe {
            std::slice::from_raw_parts(
                (v as *const ffi::dcgmFieldValue_v2).cast::<u8>(),
                std::mem::size_of::<ffi::dcgmFieldValue_v2>(),
            )
        }
    }

    /// Records filled as DCGM fills them (header + the value's own bytes) are all-zero
    /// again after a read, so the next call sees what a freshly zeroed buffer would give.
    #[test]
    fn read_records_are_cleared_back_to_zero() {
        // SAFETY: all-zero is a valid dcgmFieldValue_v2 (plain data).
        let zero: ffi::dcgmFieldValue_v2 = unsafe { std::mem::zeroed() };
        let mut buf = vec![zero; 4];
        for (i, v) in buf.iter_mut().enumerate() {
            v.version = versions::FIELD_VALUE_V2;
            v.entityGroupId = 1;
            v.entityId = 7;
            v.fieldId = 150;
            v.status = -5;
            v.unused = 3;
            v.ts = 1_700_000_000_000_000;
            match i {
                0 => {
                    v.fieldType = u16::from(ffi::DCGM_FT_INT64);
                    v.value.i64_ = -1;
                }
                1 => {
                    v.fieldType = u16::from(ffi::DCGM_FT_DOUBLE);
                    v.value.dbl = 3.5;
                }
                2 => {
                    v.fieldType = u16::from(ffi::DCGM_FT_STRING);
                    // SAFETY: writing c_char members of a plain-data union.
                    unsafe { v.value.str_[..3].copy_from_slice(&[b'a' as _, b'b' as _, 0]) };
                }
                _ => {
                    v.fieldType = u16::from(ffi::DCGM_FT_BINARY);
                    // SAFETY: as above; the last byte of the blob is the hostile case.
                    unsafe { v.value.blob[4095] = 9 as _ };
                }
            }
        }
        clear_after_read(&mut buf, true);
        for (i, v) in buf.iter().enumerate() {
            assert!(
                bytes_of(v).iter().all(|b| *b == 0),
                "record {i} not cleared"
            );
        }
        // A failed call may have written anything anywhere: everything goes.
        let mut failed = vec![zero; 1];
        failed[0].fieldType = u16::from(ffi::DCGM_FT_INT64);
        // SAFETY: as above.
        unsafe { failed[0].value.blob[100] = 1 as _ };
        clear_after_read(&mut failed, false);
        assert!(bytes_of(&failed[0]).iter().all(|b| *b == 0));
    }
}
