//! The rest of DCGM 4.6.0's export list (`dcgmlib/dcgmlib.linux_def`): policy, config,
//! diagnostics, jobs, introspection, injection and test hooks. The simulator models none
//! of them; each has the real arity and answers `DCGM_ST_NOT_SUPPORTED` (after the usual
//! `DCGM_ST_UNINITIALIZED` before `dcgmInit`), never touching its pointer arguments.
//!
//! They exist because go-dcgm (and so dcgm-exporter) binds every function it references
//! lazily through one `dlopen` handle: a missing symbol only hurts when called, but a
//! present one that reports "not supported" keeps such a call an ordinary error.

use super::api;
use dcgm_sys::ffi::{dcgmGpuGrp_t, dcgmHandle_t, dcgmReturn_t, DCGM_ST_NOT_SUPPORTED};
use std::ffi::{c_char, c_int, c_longlong, c_void};

/// `dcgmStatus_t`: an opaque `uintptr_t`.
type Status = usize;
type Ptr = *mut c_void;

fn not_supported() -> dcgmReturn_t {
    api(|| Err(DCGM_ST_NOT_SUPPORTED))
}

macro_rules! stubs {
    ($($name:ident($($ty:ty),*);)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($(_: $ty),*) -> dcgmReturn_t {
                not_supported()
            }
        )*
        /// Names of every stub, for tests that check the export list.
        pub const STUB_NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

stubs! {
    dcgmActionValidate(dcgmHandle_t, dcgmGpuGrp_t, u32, Ptr);
    dcgmActionValidate_v2(dcgmHandle_t, Ptr, Ptr);
    dcgmAddFakeInstances(dcgmHandle_t, Ptr);
    dcgmAttachDriver(dcgmHandle_t);
    dcgmConfigEnforce(dcgmHandle_t, dcgmGpuGrp_t, Status);
    dcgmConfigGet(dcgmHandle_t, dcgmGpuGrp_t, u32, c_int, Ptr, Status);
    dcgmConfigSet(dcgmHandle_t, dcgmGpuGrp_t, Ptr, Status);
    dcgmConfigSetWorkloadPowerProfile(dcgmHandle_t, Ptr);
    dcgmCreateFakeEntities(dcgmHandle_t, Ptr);
    dcgmCreateMigEntity(dcgmHandle_t, Ptr);
    dcgmCreateNvmlInjectionGpu(dcgmHandle_t, u32);
    dcgmDeleteMigEntity(dcgmHandle_t, Ptr);
    dcgmDetachDriver(dcgmHandle_t);
    dcgmDiagSendHeartbeat(dcgmHandle_t);
    dcgmEmptyCache(dcgmHandle_t);
    dcgmEngineRun(u16, *const c_char, u32);
    dcgmEntityInjectFieldValue(dcgmHandle_t, u32, u32, Ptr);
    dcgmGetCacheManagerFieldInfo(dcgmHandle_t, Ptr);
    dcgmGetDeviceTopology(dcgmHandle_t, u32, Ptr);
    dcgmGetDeviceWorkloadPowerProfileInfo(dcgmHandle_t, u32, Ptr, Ptr);
    dcgmGetFieldSummary(dcgmHandle_t, Ptr);
    dcgmGetFieldValuesSince(dcgmHandle_t, dcgmGpuGrp_t, c_longlong, *mut u16, c_int, *mut c_longlong, Ptr, Ptr);
    dcgmGetGpuChipArchitecture(dcgmHandle_t, u32, Ptr);
    dcgmGetGroupTopology(dcgmHandle_t, dcgmGpuGrp_t, Ptr);
    dcgmGetMultipleValuesForField(dcgmHandle_t, c_int, u16, *mut c_int, c_longlong, c_longlong, u32, Ptr);
    dcgmGetNvmlInjectFuncCallCount(dcgmHandle_t, Ptr);
    dcgmGetPidInfo(dcgmHandle_t, dcgmGpuGrp_t, Ptr);
    dcgmGetVgpuDeviceAttributes(dcgmHandle_t, u32, Ptr);
    dcgmGetVgpuInstanceAttributes(dcgmHandle_t, u32, Ptr);
    dcgmGroupGetAllIds(dcgmHandle_t, *mut dcgmGpuGrp_t, *mut u32);
    dcgmGroupRemoveDevice(dcgmHandle_t, dcgmGpuGrp_t, u32);
    dcgmGroupRemoveEntity(dcgmHandle_t, dcgmGpuGrp_t, u32, u32);
    dcgmHostengineEnvironmentVariableInfo(dcgmHandle_t, Ptr);
    dcgmHostengineSetLoggingSeverity(dcgmHandle_t, Ptr);
    dcgmInjectEntityFieldValue(dcgmHandle_t, u32, u32, Ptr);
    dcgmInjectEntityFieldValueToNvml(dcgmHandle_t, u32, u32, Ptr);
    dcgmInjectFieldValue(dcgmHandle_t, u32, Ptr);
    dcgmInjectNvmlDevice(dcgmHandle_t, u32, *const c_char, Ptr, u32, Ptr);
    dcgmInjectNvmlDeviceForFollowingCalls(dcgmHandle_t, u32, *const c_char, Ptr, u32, Ptr, u32);
    dcgmInjectedNvmlDeviceReset(dcgmHandle_t, u32);
    dcgmIntrospectGetHostengineCpuUtilization(dcgmHandle_t, Ptr, c_int);
    dcgmIntrospectGetHostengineMemoryUsage(dcgmHandle_t, Ptr, c_int);
    dcgmJobGetStats(dcgmHandle_t, *mut c_char, Ptr);
    dcgmJobRemove(dcgmHandle_t, *mut c_char);
    dcgmJobRemoveAll(dcgmHandle_t);
    dcgmJobStartStats(dcgmHandle_t, dcgmGpuGrp_t, *mut c_char);
    dcgmJobStopStats(dcgmHandle_t, *mut c_char);
    dcgmMarkModulesReloadable(dcgmHandle_t, Ptr);
    dcgmModuleDenylist(dcgmHandle_t, u32);
    dcgmMultinodeRequest(dcgmHandle_t, Ptr);
    dcgmNvswitchGetBackend(dcgmHandle_t, *mut bool, *mut c_char, u32);
    dcgmPauseTelemetryForDiag(dcgmHandle_t);
    dcgmPolicyGet(dcgmHandle_t, dcgmGpuGrp_t, c_int, Ptr, Status);
    dcgmPolicyRegister_v2(dcgmHandle_t, dcgmGpuGrp_t, u32, Ptr, u64);
    dcgmPolicySet(dcgmHandle_t, dcgmGpuGrp_t, Ptr, Status);
    dcgmPolicyTrigger(dcgmHandle_t);
    dcgmPolicyUnregister(dcgmHandle_t, dcgmGpuGrp_t, u32);
    dcgmProfPause(dcgmHandle_t);
    dcgmProfResume(dcgmHandle_t);
    dcgmRemoveNvmlInjectedGpu(dcgmHandle_t, *const c_char);
    dcgmResetNvmlInjectFuncCallCount(dcgmHandle_t);
    dcgmRestoreNvmlInjectedGpu(dcgmHandle_t, *const c_char);
    dcgmResumeTelemetryForDiag(dcgmHandle_t);
    dcgmRunDiagnostic(dcgmHandle_t, dcgmGpuGrp_t, u32, Ptr);
    dcgmRunMnDiagnostic(dcgmHandle_t, Ptr, Ptr);
    dcgmSelectGpusByTopology(dcgmHandle_t, u64, u32, *mut u64, u64);
    dcgmSetEntityNvLinkLinkState(dcgmHandle_t, Ptr);
    dcgmStatusClear(Status);
    dcgmStatusCreate(*mut Status);
    dcgmStatusDestroy(Status);
    dcgmStatusGetCount(Status, *mut u32);
    dcgmStatusPopError(Status, Ptr);
    dcgmStopDiagnostic(dcgmHandle_t);
    dcgmStopMnDiagnostic(dcgmHandle_t);
    dcgmUnwatchFieldValue(dcgmHandle_t, c_int, u16, c_int);
    dcgmVgpuConfigEnforce(dcgmHandle_t, dcgmGpuGrp_t, Status);
    dcgmVgpuConfigGet(dcgmHandle_t, dcgmGpuGrp_t, u32, c_int, Ptr, Status);
    dcgmVgpuConfigSet(dcgmHandle_t, dcgmGpuGrp_t, Ptr, Status);
    dcgmWatchFieldValue(dcgmHandle_t, c_int, u16, c_longlong, f64, c_int);
    dcgmWatchJobFields(dcgmHandle_t, dcgmGpuGrp_t, c_longlong, f64, c_int);
    dcgmWatchPidFields(dcgmHandle_t, dcgmGpuGrp_t, c_longlong, f64, c_int);
}

/// `unsigned int dcgmCpuHierarchyCpuOwnsCore(unsigned int coreId, dcgmCpuHierarchyOwnedCores_v1 const *)`
/// (dcgm_helpers.h): a plain bit test, so implemented rather than stubbed.
#[no_mangle]
pub unsafe extern "C" fn dcgmCpuHierarchyCpuOwnsCore(
    core_id: u32,
    owned: *const dcgm_sys::ffi::dcgmCpuHierarchyOwnedCores_v1,
) -> u32 {
    if owned.is_null() {
        return 0;
    }
    // SAFETY: non-NULL and, per the API, points to a readable owned-cores struct.
    let owned = unsafe { &*owned };
    owned
        .bitmask
        .get(core_id as usize / 64)
        .map_or(0, |word| u32::from(word & (1u64 << (core_id % 64)) != 0))
}
