//! Shared by the integration tests: loads the built cdylib the way a C client would (by
//! file, through `dlopen`) and wraps the exports used by the tests as `unsafe fn`s with the
//! real C signatures from `dcgm_sys::ffi`.
//!
//! The library has process-wide state (init, embedded engine, connections), so tests that
//! call it must hold [`lock`] for their whole body.

#![allow(dead_code, non_snake_case)]

/// Skipping honestly (fails under CI), shared with the exporter's tests.
#[path = "../../../tests/support/skip.rs"]
pub mod skip;

use dcgm_sys::ffi::*;
use libloading::Library;
use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

pub const EMBEDDED: dcgmHandle_t = 0x7fff_ffff;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises tests that use the library; a failed test does not poison the rest.
pub fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<target>/<profile>`: the test binary lives in `<target>/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    if let Some(dir) = exe.parent().and_then(Path::parent) {
        if dir.join("build").is_dir() {
            return dir.to_path_buf();
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug")
}

/// The simulator as clients find it: `libdcgm.so.4` (a symlink made by build.rs), else the
/// cdylib itself. Built with cargo if neither exists yet.
pub fn library_path() -> PathBuf {
    let dir = profile_dir();
    // libdcgm.so.4 points into deps/, where `cargo test` puts the freshly built cdylib.
    let find = || {
        ["libdcgm.so.4", "deps/libdcgm_sim.so"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.exists())
    };
    if let Some(p) = find() {
        return p;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The profile this test binary was built with (`release` or the default `dev`).
    let profile = if dir.file_name().is_some_and(|n| n == "release") {
        "release"
    } else {
        "dev"
    };
    let target = dir
        .parent()
        .expect("a target directory above the profile directory");
    let status = Command::new(cargo)
        .args(["build", "-p", "dcgm-sim", "--lib", "--profile", profile])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build -p dcgm-sim");
    assert!(status.success(), "cargo build -p dcgm-sim failed");
    find().unwrap_or_else(|| {
        panic!(
            "no libdcgm.so.4 or deps/libdcgm_sim.so in {} after building",
            dir.display()
        )
    })
}

pub fn lib() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = library_path();
        // SAFETY: loading our own cdylib; its initialisers only set up Rust statics.
        unsafe { Library::new(&path) }.unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()))
    })
}

/// Whether the library exports `name`.
pub fn has_symbol(name: &str) -> bool {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: only the address is looked up; the type is never used to call it.
    unsafe { lib().get::<*const c_void>(&n) }.is_ok()
}

macro_rules! exports {
    ($(fn $name:ident($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        $(
            /// Calls the export of the same name.
            ///
            /// # Safety
            /// The arguments must satisfy the C API's contract for this function.
            pub unsafe fn $name($($arg: $t),*) -> $r {
                // SAFETY: the symbol is looked up with the exact C signature.
                let f = unsafe {
                    lib().get::<unsafe extern "C" fn($($t),*) -> $r>(concat!(stringify!($name), "\0").as_bytes())
                }
                .expect(concat!("export ", stringify!($name)));
                // SAFETY: per this function's contract.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

exports! {
    fn dcgmInit() -> dcgmReturn_t;
    fn dcgmShutdown() -> dcgmReturn_t;
    fn dcgmStartEmbedded(mode: dcgmOperationMode_t, h: *mut dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmStartEmbedded_v2(p: *mut dcgmStartEmbeddedV2Params_v1) -> dcgmReturn_t;
    fn dcgmStopEmbedded(h: dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmConnect(addr: *const c_char, h: *mut dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmConnect_v2(addr: *const c_char, p: *mut dcgmConnectV2Params_v2, h: *mut dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmConnect_v3(addr: *const c_char, p: *mut dcgmConnectV3Params_v1, h: *mut dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmDisconnect(h: dcgmHandle_t) -> dcgmReturn_t;
    fn errorString(r: dcgmReturn_t) -> *const c_char;
    fn dcgmGetAllDevices(h: dcgmHandle_t, ids: *mut u32, count: *mut c_int) -> dcgmReturn_t;
    fn dcgmGetAllSupportedDevices(h: dcgmHandle_t, ids: *mut u32, count: *mut c_int) -> dcgmReturn_t;
    fn dcgmGetDeviceAttributes(h: dcgmHandle_t, gpu: u32, a: *mut dcgmDeviceAttributes_v3) -> dcgmReturn_t;
    fn dcgmGetGpuStatus(h: dcgmHandle_t, gpu: u32, s: *mut DcgmEntityStatus_t) -> dcgmReturn_t;
    fn dcgmGetEntityGroupEntities(h: dcgmHandle_t, g: dcgm_field_entity_group_t, e: *mut u32, n: *mut c_int, flags: u32) -> dcgmReturn_t;
    fn dcgmGetGpuInstanceHierarchy(h: dcgmHandle_t, m: *mut dcgmMigHierarchy_v2) -> dcgmReturn_t;
    fn dcgmGetNvLinkLinkStatus(h: dcgmHandle_t, s: *mut dcgmNvLinkStatus_v5) -> dcgmReturn_t;
    fn dcgmGetNvLinkP2PStatus(h: dcgmHandle_t, s: *mut dcgmNvLinkP2PStatus_v1) -> dcgmReturn_t;
    fn dcgmGetCpuHierarchy(h: dcgmHandle_t, c: *mut dcgmCpuHierarchy_v1) -> dcgmReturn_t;
    fn dcgmProfGetSupportedMetricGroups(h: dcgmHandle_t, m: *mut dcgmProfGetMetricGroups_v3) -> dcgmReturn_t;
    fn dcgmGroupCreate(h: dcgmHandle_t, t: dcgmGroupType_t, name: *const c_char, g: *mut dcgmGpuGrp_t) -> dcgmReturn_t;
    fn dcgmGroupDestroy(h: dcgmHandle_t, g: dcgmGpuGrp_t) -> dcgmReturn_t;
    fn dcgmGroupAddDevice(h: dcgmHandle_t, g: dcgmGpuGrp_t, gpu: u32) -> dcgmReturn_t;
    fn dcgmGroupAddEntity(h: dcgmHandle_t, g: dcgmGpuGrp_t, eg: dcgm_field_entity_group_t, e: u32) -> dcgmReturn_t;
    fn dcgmGroupGetInfo(h: dcgmHandle_t, g: dcgmGpuGrp_t, i: *mut dcgmGroupInfo_v3) -> dcgmReturn_t;
    fn dcgmFieldGroupCreate(h: dcgmHandle_t, n: c_int, ids: *const u16, name: *const c_char, fg: *mut dcgmFieldGrp_t) -> dcgmReturn_t;
    fn dcgmFieldGroupDestroy(h: dcgmHandle_t, fg: dcgmFieldGrp_t) -> dcgmReturn_t;
    fn dcgmFieldGroupGetInfo(h: dcgmHandle_t, i: *mut dcgmFieldGroupInfo_v1) -> dcgmReturn_t;
    fn dcgmWatchFields(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t, freq: c_longlong, age: f64, samples: c_int) -> dcgmReturn_t;
    fn dcgmUnwatchFields(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t) -> dcgmReturn_t;
    fn dcgmUpdateAllFields(h: dcgmHandle_t, wait: c_int) -> dcgmReturn_t;
    fn dcgmEntityGetLatestValues(h: dcgmHandle_t, eg: dcgm_field_entity_group_t, e: c_int, f: *const u16, n: u32, v: *mut dcgmFieldValue_v1) -> dcgmReturn_t;
    fn dcgmGetLatestValuesForFields(h: dcgmHandle_t, gpu: c_int, f: *const u16, n: u32, v: *mut dcgmFieldValue_v1) -> dcgmReturn_t;
    fn dcgmEntitiesGetLatestValues(h: dcgmHandle_t, e: *const dcgmGroupEntityPair_t, ne: u32, f: *const u16, nf: u32, flags: u32, v: *mut dcgmFieldValue_v2) -> dcgmReturn_t;
    fn dcgmGetValuesSince_v2(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t, since: c_longlong, next: *mut c_longlong, cb: dcgmFieldValueEntityEnumeration_f, user: *mut c_void) -> dcgmReturn_t;
    fn dcgmGetValuesSince(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t, since: c_longlong, next: *mut c_longlong, cb: dcgmFieldValueEnumeration_f, user: *mut c_void) -> dcgmReturn_t;
    fn dcgmGetLatestValues_v2(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t, cb: dcgmFieldValueEntityEnumeration_f, user: *mut c_void) -> dcgmReturn_t;
    fn dcgmGetLatestValues(h: dcgmHandle_t, g: dcgmGpuGrp_t, fg: dcgmFieldGrp_t, cb: dcgmFieldValueEnumeration_f, user: *mut c_void) -> dcgmReturn_t;
    fn dcgmHealthSet(h: dcgmHandle_t, g: dcgmGpuGrp_t, s: dcgmHealthSystems_t) -> dcgmReturn_t;
    fn dcgmHealthGet(h: dcgmHandle_t, g: dcgmGpuGrp_t, s: *mut dcgmHealthSystems_t) -> dcgmReturn_t;
    fn dcgmHealthCheck(h: dcgmHandle_t, g: dcgmGpuGrp_t, r: *mut dcgmHealthResponse_v5) -> dcgmReturn_t;
    fn DcgmFieldsInit() -> c_int;
    fn DcgmFieldsTerm() -> c_int;
    fn DcgmFieldGetById(id: u16) -> *const dcgm_field_meta_t;
    fn DcgmFieldGetByTag(tag: *const c_char) -> *const dcgm_field_meta_t;
    fn DcgmFieldsGetEntityGroupString(g: dcgm_field_entity_group_t) -> *const c_char;
    fn dcgmPolicyTrigger(h: dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmJobRemoveAll(h: dcgmHandle_t) -> dcgmReturn_t;
    fn dcgmGetDeviceTopology(h: dcgmHandle_t, gpu: u32, t: *mut c_void) -> dcgmReturn_t;
    fn dcgmStatusCreate(s: *mut usize) -> dcgmReturn_t;
    fn dcgmConfigGet(h: dcgmHandle_t, g: dcgmGpuGrp_t, t: u32, n: c_int, c: *mut c_void, s: usize) -> dcgmReturn_t;
    fn dcgmVersionInfo(v: *mut c_void) -> dcgmReturn_t;
}

/// A zeroed heap allocation of a C struct with its version set: DCGM's big structs
/// (1 MB health responses) must never live on a test thread's stack.
pub fn boxed<T>(version: u32) -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    assert!(layout.size() >= 4);
    // SAFETY: the layout is non-zero-sized; every T used here is a plain-data C struct for
    // which all-zero bytes are valid, and it starts with its u32 version.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        assert!(!p.is_null(), "out of memory");
        p.cast::<u32>().write(version);
        Box::from_raw(p)
    }
}

/// A NUL-terminated C char array as a Rust string.
pub fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A C string pointer as a Rust string (None for NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub unsafe fn c_text(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| {
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    })
}

/// Resets the library and starts an embedded engine on the built-in node.
pub fn fresh_embedded() -> dcgmHandle_t {
    std::env::remove_var("DCGM_SIM_PROFILE");
    std::env::remove_var("DCGM_SIM_CONTROL");
    let mut h = 0;
    // SAFETY: `h` is a live local.
    unsafe {
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
        assert_eq!(dcgmInit(), DCGM_ST_OK);
        assert_eq!(
            dcgmStartEmbedded(DCGM_OPERATION_MODE_AUTO, &mut h),
            DCGM_ST_OK
        );
    }
    assert_eq!(h, EMBEDDED);
    h
}
