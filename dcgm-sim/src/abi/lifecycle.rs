//! Init/shutdown, embedded engine start/stop, remote connect/disconnect, version info.

use super::layouts::{HostengineHealthV1, VersionInfoV2, HOSTENGINE_HEALTH_V1, VERSION_INFO_V2};
use super::{
    api, ask, call, check_version, fill_slots, globals, guard, non_null, put_str, read_str,
    version_of, zero_keep_version, EMBEDDED_HANDLE,
};
use crate::engine::Engine;
use crate::proto::{Reply, Request};
use crate::transport::{Address, Client, DEFAULT_CONNECT_TIMEOUT};
use dcgm_sys::ffi::*;
use dcgm_sys::versions::{
    CONNECT_V2_PARAMS_V1, CONNECT_V2_PARAMS_V2, CONNECT_V3_PARAMS_V1, START_EMBEDDED_V2_PARAMS_V1,
    START_EMBEDDED_V2_PARAMS_V2, START_EMBEDDED_V2_PARAMS_V3,
};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `dcgmVersionInfo` reports: the DCGM release simulated (`release`), with the keys in
/// the order and shape the real 4.6.0 library gives them (an empty entry before `crc`).
fn build_info(release: &str) -> String {
    format!(
        "version:{release};arch:x86_64;buildtype:Release;buildid:;builddate:;\
         commit:dcgm-sim;branch:dcgm-sim;buildplatform:dcgm-sim;;crc:"
    )
}

/// The DCGM release this library answers as: `[node] dcgm_version` of the profile named by
/// `DCGM_SIM_PROFILE` (the embedded engine's too), else 4.6.0.
pub(crate) fn library_release() -> dcgm_sys::Release {
    static RELEASE: std::sync::OnceLock<dcgm_sys::Release> = std::sync::OnceLock::new();
    *RELEASE.get_or_init(|| {
        std::env::var_os("DCGM_SIM_PROFILE")
            .filter(|p| !p.is_empty())
            .and_then(|p| crate::engine::profile::Profile::load(std::path::Path::new(&p)).ok())
            .map_or(dcgm_sys::releases::BINDINGS, |p| p.node.release())
    })
}

/// `dcgmReturn_t dcgmInit(void)`: idempotent; also initialises the field table.
#[no_mangle]
pub extern "C" fn dcgmInit() -> dcgmReturn_t {
    guard(|| {
        super::fields::init();
        globals().initialized = true;
        Ok(())
    })
}

/// `dcgmReturn_t dcgmShutdown(void)`: closes remote connections, stops the embedded
/// engine, terminates the field table. OK when not initialised. Like the real one, it first
/// waits for every remote request in flight to return (a stopped host engine holds one for
/// the request timeout, 60 s by default).
#[no_mangle]
pub extern "C" fn dcgmShutdown() -> dcgmReturn_t {
    guard(|| {
        if !globals().initialized {
            return Ok(());
        }
        while super::IN_FLIGHT.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (engine, remotes) = {
            let mut g = globals();
            if !g.initialized {
                return Ok(());
            }
            g.initialized = false;
            g.client_handler = false;
            g.engine_started = false;
            (g.embedded.take(), std::mem::take(&mut g.remotes))
        };
        // Dropped outside the state lock: closing sockets and engines may take a moment.
        drop(remotes);
        drop(engine);
        super::fields::term();
        Ok(())
    })
}

/// Starts (or finds) the embedded engine; the common part of every StartEmbedded version.
/// `deny`: the module ids of the parameters' denylist, applied to an engine started now (a
/// running one keeps its own, as DCGM answers "already running").
fn start_embedded(op_mode: dcgmOperationMode_t, deny: &[u32]) -> Result<(), dcgmReturn_t> {
    if op_mode != DCGM_OPERATION_MODE_AUTO && op_mode != DCGM_OPERATION_MODE_MANUAL {
        return Err(DCGM_ST_BADPARAM);
    }
    let mut g = globals();
    if !g.initialized {
        return Err(DCGM_ST_UNINITIALIZED);
    }
    if g.embedded.is_none() {
        if start_refused() {
            // The real library's answer when DcgmHostEngineHandler::Init fails (no driver,
            // NVML not initialising): INIT_ERROR, nothing started, a later call may succeed.
            eprintln!("dcgm-sim: cannot start the embedded engine: embedded_start_fail");
            return Err(DCGM_ST_INIT_ERROR);
        }
        let mut engine = Engine::from_env().map_err(|e| {
            // The C API has no channel for the reason; stderr is where nv-hostengine's
            // start-up failures go too.
            eprintln!("dcgm-sim: cannot start the embedded engine: {e}");
            DCGM_ST_INIT_ERROR
        })?;
        // ApplyModuleDenylist failing makes DcgmHostEngineHandler::Init throw: INIT_ERROR.
        engine.deny_modules(deny).map_err(|_| {
            eprintln!("dcgm-sim: cannot start the embedded engine: module denylist {deny:?}");
            DCGM_ST_INIT_ERROR
        })?;
        g.embedded = Some(Arc::new(Mutex::new(engine)));
        g.engine_started = true;
    }
    Ok(())
}

/// Whether the control file's `embedded_start_fail` refuses a start now.
fn start_refused() -> bool {
    std::env::var_os("DCGM_SIM_CONTROL")
        .filter(|c| !c.is_empty())
        .is_some_and(|c| crate::engine::faults::embedded_start_refused(std::path::Path::new(&c)))
}

/// `dcgmReturn_t dcgmStartEmbedded_v2(dcgmStartEmbeddedV2Params_v1 *params)`: params
/// version 1, 2 or 3; the handle is written to `params->dcgmHandle`.
#[no_mangle]
pub unsafe extern "C" fn dcgmStartEmbedded_v2(
    params: *mut dcgmStartEmbeddedV2Params_v1,
) -> dcgmReturn_t {
    guard(|| {
        non_null(params)?;
        // SAFETY: non-NULL; every version starts with `version`.
        let version = unsafe { version_of(params) };
        if ![
            START_EMBEDDED_V2_PARAMS_V1,
            START_EMBEDDED_V2_PARAMS_V2,
            START_EMBEDDED_V2_PARAMS_V3,
        ]
        .contains(&version)
        {
            return Err(DCGM_ST_VER_MISMATCH);
        }
        // SAFETY: `opMode` (offset 4) and `dcgmHandle` (offset 8) sit at the same place in
        // all three versions (checked in layouts.rs), and the caller's struct is at least
        // as large as the v1 view.
        let op_mode = unsafe { (*params).opMode };
        // SAFETY: the version says which struct the caller passed, so reading that type's
        // denylist stays within it.
        let deny = unsafe { denylist(params, version) };
        start_embedded(op_mode, &deny)?;
        // SAFETY: as above.
        unsafe { (*params).dcgmHandle = EMBEDDED_HANDLE };
        Ok(())
    })
}

/// The module ids of a `dcgmStartEmbedded_v2` parameter struct's denylist, as DCGM copies
/// them: a v3 list is cut to the v2 capacity with its count; v1 and v2 count entries of
/// their 10 are taken as given (DCGM does not check that count; here it is capped).
///
/// # Safety
/// `params` points to a readable struct of the version `version` names.
unsafe fn denylist(params: *const dcgmStartEmbeddedV2Params_v1, version: u32) -> Vec<u32> {
    let (count, list): (u32, &[u32]) = if version == START_EMBEDDED_V2_PARAMS_V1 {
        // SAFETY: the caller's struct is a v1 one, per the contract.
        let p = unsafe { &*params };
        (p.denyListCount, &p.denyList)
    } else if version == START_EMBEDDED_V2_PARAMS_V2 {
        // SAFETY: the caller's struct is a v2 one, per the contract.
        let p = unsafe { &*params.cast::<dcgmStartEmbeddedV2Params_v2>() };
        (p.denyListCount, &p.denyList)
    } else {
        // SAFETY: the caller's struct is a v3 one (the only other version let through).
        let p = unsafe { &*params.cast::<dcgmStartEmbeddedV2Params_v3>() };
        (p.denyListCount, &p.denyList)
    };
    list[..(count as usize).min(list.len())].to_vec()
}

/// `dcgmReturn_t dcgmModuleGetStatuses(dcgmHandle_t, dcgmModuleGetStatuses_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmModuleGetStatuses(
    handle: dcgmHandle_t,
    statuses: *mut dcgmModuleGetStatuses_v1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(statuses, dcgm_sys::versions::MODULE_GET_STATUSES_V1) }?;
        let list = ask!(handle, Request::ModuleGetStatuses, Reply::ModuleStatuses);
        // SAFETY: non-NULL and, per its version, a whole dcgmModuleGetStatuses_v1.
        let out = unsafe { &mut *statuses };
        out.numStatuses = fill_slots(&mut out.statuses, &list, |slot, &(id, status)| {
            slot.id = id;
            slot.status = status;
        });
        Ok(())
    })
}

/// `dcgmReturn_t dcgmStartEmbedded(dcgmOperationMode_t, dcgmHandle_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmStartEmbedded(
    op_mode: dcgmOperationMode_t,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard(|| {
        non_null(handle)?;
        let result = start_embedded(op_mode, &[]);
        // The real library writes the handle whatever happened (0 on failure).
        // SAFETY: non-NULL and, per the API, points to a writable handle.
        unsafe { *handle = if result.is_ok() { EMBEDDED_HANDLE } else { 0 } };
        result
    })
}

/// `dcgmStartEmbedded_v3`: listed in DCGM's export map but never defined by it.
#[no_mangle]
pub extern "C" fn dcgmStartEmbedded_v3(_params: *mut c_void) -> dcgmReturn_t {
    guard(|| Err(DCGM_ST_NOT_SUPPORTED))
}

/// `dcgmReturn_t dcgmStopEmbedded(dcgmHandle_t)`: only the embedded handle is accepted.
#[no_mangle]
pub extern "C" fn dcgmStopEmbedded(handle: dcgmHandle_t) -> dcgmReturn_t {
    guard(|| {
        let engine = {
            let mut g = globals();
            if !g.initialized {
                return Err(DCGM_ST_UNINITIALIZED);
            }
            if handle != EMBEDDED_HANDLE {
                return Err(DCGM_ST_BADPARAM);
            }
            g.embedded.take()
        };
        drop(engine);
        Ok(())
    })
}

/// Connects, logs in, and registers a new remote handle.
fn connect(addr: Address, timeout_ms: u32, persist: bool) -> Result<dcgmHandle_t, dcgmReturn_t> {
    let timeout = if timeout_ms == 0 {
        DEFAULT_CONNECT_TIMEOUT
    } else {
        Duration::from_millis(timeout_ms.into())
    };
    {
        let mut g = globals();
        if !g.initialized {
            return Err(DCGM_ST_UNINITIALIZED);
        }
        g.client_handler = true;
    }
    let counted = super::InFlight::enter();
    // No state lock while connecting: this may take the whole timeout.
    let client = Client::connect(&addr, timeout)?;
    let login = client.request(&Request::Login {
        persist_after_disconnect: persist,
        library: Some(library_release().to_string()),
    });
    drop(counted);
    match login? {
        Reply::Ok => {}
        Reply::Error(code) => return Err(code),
        _ => return Err(DCGM_ST_GENERIC_ERROR),
    }
    let mut g = globals();
    if !g.initialized {
        // dcgmShutdown ran meanwhile.
        return Err(DCGM_ST_UNINITIALIZED);
    }
    let mut handle = g.next_handle;
    if handle == EMBEDDED_HANDLE || handle == 0 {
        handle = 1;
    }
    g.next_handle = handle + 1;
    g.remotes.insert(handle, Arc::new(client));
    Ok(handle)
}

/// Argument checks shared by the connect exports, in the real library's order: NULL and
/// empty arguments first, then initialisation.
///
/// # Safety
/// `address` is NULL or a NUL-terminated string.
unsafe fn connect_args(
    address: *const c_char,
    params_null: bool,
    handle_null: bool,
) -> Result<String, dcgmReturn_t> {
    if params_null || handle_null {
        return Err(DCGM_ST_BADPARAM);
    }
    // SAFETY: per this function's contract.
    let address = unsafe { read_str(address) }?;
    if address.is_empty() {
        return Err(DCGM_ST_BADPARAM);
    }
    super::require_init()?;
    Ok(address)
}

/// `dcgmReturn_t dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_t *, dcgmHandle_t *)`:
/// params version 1 (8 bytes) or 2.
#[no_mangle]
pub unsafe extern "C" fn dcgmConnect_v2(
    ip_address: *const c_char,
    params: *mut dcgmConnectV2Params_v2,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard(|| {
        // SAFETY: the API requires a NUL-terminated address.
        let address = unsafe { connect_args(ip_address, params.is_null(), handle.is_null()) }?;
        // SAFETY: non-NULL; both versions start with `version`.
        let version = unsafe { version_of(params) };
        let (persist, timeout_ms, unix) = if version == CONNECT_V2_PARAMS_V1 {
            // Only the 8 bytes of the v1 struct may be read.
            // SAFETY: a v1 caller provides at least a `dcgmConnectV2Params_v1`.
            let p = unsafe { &*params.cast::<dcgmConnectV2Params_v1>() };
            (p.persistAfterDisconnect, 0, 0)
        } else if version == CONNECT_V2_PARAMS_V2 {
            // SAFETY: a v2 caller provides the full struct.
            let p = unsafe { &*params };
            (p.persistAfterDisconnect, p.timeoutMs, p.addressIsUnixSocket)
        } else {
            return Err(DCGM_ST_VER_MISMATCH);
        };
        let addr = if unix != 0 {
            Address::Unix(address.into())
        } else {
            Address::parse_tcp(&address)?
        };
        let h = connect(addr, timeout_ms, persist != 0)?;
        // SAFETY: non-NULL and writable per the API.
        unsafe { *handle = h };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmConnect(const char *ipAddress, dcgmHandle_t *)`: v2 with defaults.
#[no_mangle]
pub unsafe extern "C" fn dcgmConnect(
    ip_address: *const c_char,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    let mut params = dcgmConnectV2Params_v2 {
        version: CONNECT_V2_PARAMS_V2,
        persistAfterDisconnect: 0,
        timeoutMs: 0,
        addressIsUnixSocket: 0,
    };
    // SAFETY: the caller's pointers are passed on unchanged; `params` lives across the call.
    unsafe { dcgmConnect_v2(ip_address, &mut params, handle) }
}

/// `dcgmReturn_t dcgmConnect_v3(const char *connectionString, dcgmConnectV3Params_t *, dcgmHandle_t *)`:
/// `tcp://host[:port]`, `unix:///path`, or no scheme (TCP); `vsock://` → NOT_SUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn dcgmConnect_v3(
    connection_string: *const c_char,
    params: *mut dcgmConnectV3Params_v1,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard(|| {
        // SAFETY: the API requires a NUL-terminated connection string.
        let address =
            unsafe { connect_args(connection_string, params.is_null(), handle.is_null()) }?;
        // SAFETY: non-NULL; starts with `version`.
        if unsafe { version_of(params) } != CONNECT_V3_PARAMS_V1 {
            return Err(DCGM_ST_VER_MISMATCH);
        }
        // SAFETY: the version says the caller provided the full struct.
        let p = unsafe { &*params };
        let h = connect(
            Address::parse_uri(&address)?,
            p.timeoutMs,
            p.persistAfterDisconnect != 0,
        )?;
        // SAFETY: non-NULL and writable per the API.
        unsafe { *handle = h };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmDisconnect(dcgmHandle_t)`: always OK, even before init (the Python
/// bindings disconnect from garbage-collected handles after shutdown).
#[no_mangle]
pub extern "C" fn dcgmDisconnect(handle: dcgmHandle_t) -> dcgmReturn_t {
    guard(|| {
        let client = globals().remotes.remove(&handle);
        drop(client);
        Ok(())
    })
}

/// # Safety
/// `info` is NULL or points to a writable `dcgmVersionInfo_v2`-sized struct.
unsafe fn fill_version_info(info: *mut VersionInfoV2, release: &str) -> Result<(), dcgmReturn_t> {
    // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
    unsafe { check_version(info, VERSION_INFO_V2) }?;
    // SAFETY: the version says the caller's struct is a full `dcgmVersionInfo_v2`.
    unsafe {
        zero_keep_version(info);
        put_str(&mut (*info).raw_build_info_string, &build_info(release));
    }
    Ok(())
}

/// `dcgmReturn_t dcgmVersionInfo(dcgmVersionInfo_t *)`. Like the real 4.6 library it
/// answers before `dcgmInit` (it reads the library's own build information).
#[no_mangle]
pub unsafe extern "C" fn dcgmVersionInfo(info: *mut VersionInfoV2) -> dcgmReturn_t {
    let release = library_release().to_string();
    // SAFETY: the caller's pointer, checked inside.
    guard(|| unsafe { fill_version_info(info, &release) })
}

/// Round-trips a cheap request, so that a dead connection reports -21.
fn ping(handle: dcgmHandle_t) -> Result<(), dcgmReturn_t> {
    call(
        handle,
        Request::GetAllDevices {
            only_supported: false,
        },
    )
    .map(|_| ())
}

/// `dcgmReturn_t dcgmHostengineVersionInfo(dcgmHandle_t, dcgmVersionInfo_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmHostengineVersionInfo(
    handle: dcgmHandle_t,
    info: *mut VersionInfoV2,
) -> dcgmReturn_t {
    api(|| {
        non_null(info)?;
        // The embedded engine is this library's; a remote one says its own release.
        let release = if handle == EMBEDDED_HANDLE {
            ping(handle)?;
            library_release().to_string()
        } else {
            ask!(handle, Request::EngineVersion, Reply::Version)
        };
        // SAFETY: non-NULL; checked and filled inside.
        unsafe { fill_version_info(info, &release) }
    })
}

/// `dcgmReturn_t dcgmHostengineIsHealthy(dcgmHandle_t, dcgmHostengineHealth_t *)`: 0 when
/// the engine answers.
#[no_mangle]
pub unsafe extern "C" fn dcgmHostengineIsHealthy(
    handle: dcgmHandle_t,
    health: *mut HostengineHealthV1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(health, HOSTENGINE_HEALTH_V1) }?;
        ping(handle)?;
        // SAFETY: the version says the struct is a full `dcgmHostengineHealth_v1`.
        unsafe { (*health).overall_health = 0 };
        Ok(())
    })
}

/// Runs when libdcgm is unloaded (dlclose) or the process exits with it loaded (ELF
/// `.fini_array`). The real library's threads (the client handler's `dcgm_ipc`, the embedded
/// engine's) outlive a process that never called dcgmShutdown, and fault when dlclose
/// unmaps their code or the library's destructors run under them: exit code 139 in 3 of 42
/// runs. The simulator has no such threads, so it says so here, and with
/// `DCGM_SIM_STRICT_EXIT=1` faults every time, so a test can tell.
extern "C" fn at_unload() {
    let live = match super::GLOBALS.try_lock() {
        Ok(g) => g.threads_live(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().threads_live(),
        // A call is in flight on another thread.
        Err(std::sync::TryLockError::WouldBlock) => true,
    };
    if !live {
        return;
    }
    eprintln!(
        "dcgm-sim: libdcgm unloaded (or the process exiting) with DCGM's engine or client \
         threads live and no dcgmShutdown: the real library faults here"
    );
    if std::env::var_os("DCGM_SIM_STRICT_EXIT").is_some_and(|v| !v.is_empty() && v != "0") {
        // SAFETY: restoring the default action then raising the signal ends the process
        // as the real library's fault does; nothing runs after it. (Rust's own SIGSEGV
        // handler would otherwise treat a raised signal as handled and return.)
        unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        }
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;
