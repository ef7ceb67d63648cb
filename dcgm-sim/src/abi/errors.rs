//! `errorString` and the other error-description exports.

use super::{api, guard, non_null};
use dcgm_sys::ffi::*;
use std::ffi::{c_char, c_void, CStr};
use std::panic::catch_unwind;
use std::ptr;

/// The texts of DCGM 4.6.0's `errorString` (`dcgmlib/src/dcgm_errors.c`), which callers
/// show to users and some match on.
pub fn error_text(code: dcgmReturn_t) -> Option<&'static CStr> {
    Some(match code {
        DCGM_ST_OK => c"Success",
        DCGM_ST_BADPARAM => c"Bad parameter passed to function",
        DCGM_ST_GENERIC_ERROR => c"Generic unspecified error",
        DCGM_ST_MEMORY => c"Out of memory error",
        DCGM_ST_NOT_CONFIGURED => c"Setting not configured",
        DCGM_ST_NOT_SUPPORTED => c"Feature not supported",
        DCGM_ST_INIT_ERROR => c"DCGM initialization error",
        DCGM_ST_NVML_ERROR => c"NVML error",
        DCGM_ST_PENDING => c"Object is in a pending state",
        DCGM_ST_UNINITIALIZED => c"Object is in an undefined state",
        DCGM_ST_TIMEOUT => c"Timeout",
        DCGM_ST_VER_MISMATCH => c"API version mismatch",
        DCGM_ST_UNKNOWN_FIELD => c"Unknown field identifier",
        DCGM_ST_NO_DATA => c"No data is available",
        DCGM_ST_STALE_DATA => c"Only stale data is available",
        DCGM_ST_NOT_WATCHED => c"Field is not being watched",
        DCGM_ST_NO_PERMISSION => c"No permission",
        DCGM_ST_GPU_IS_LOST => c"GPU is lost",
        DCGM_ST_RESET_REQUIRED => c"GPU requires reset",
        DCGM_ST_FUNCTION_NOT_FOUND => c"The requested function was not found",
        DCGM_ST_CONNECTION_NOT_VALID => c"Host engine connection invalid/disconnected",
        DCGM_ST_GPU_NOT_SUPPORTED => c"This GPU is not supported by DCGM",
        DCGM_ST_GROUP_INCOMPATIBLE => c"The GPUs of this group are incompatible with each other for the requested operation",
        DCGM_ST_MAX_LIMIT => c"Max limit reached for the object",
        DCGM_ST_LIBRARY_NOT_FOUND => c"DCGM library could not be found",
        DCGM_ST_DUPLICATE_KEY => c"Duplicate Key passed to function",
        DCGM_ST_GPU_IN_SYNC_BOOST_GROUP => c"GPU is a part of a Sync Boost Group",
        DCGM_ST_GPU_NOT_IN_SYNC_BOOST_GROUP => c"GPU is not a part of Sync Boost Group",
        DCGM_ST_REQUIRES_ROOT => c"Host engine is running as non-root",
        DCGM_ST_NVVS_ERROR => c"DCGM GPU Diagnostic returned an error",
        DCGM_ST_INSUFFICIENT_SIZE => c"An input argument is not large enough",
        DCGM_ST_FIELD_UNSUPPORTED_BY_API => c"The given field ID is not supported by the API being called",
        DCGM_ST_MODULE_NOT_LOADED => c"This request is serviced by a module of DCGM that is not currently loaded",
        DCGM_ST_IN_USE => c"The requested operation could not be completed because the affected resource is in use",
        DCGM_ST_GROUP_IS_EMPTY => c"The specified group is empty, and this operation is incompatible with an empty group",
        DCGM_ST_PROFILING_NOT_SUPPORTED => c"Profiling is not supported for this group of GPUs or GPU",
        DCGM_ST_PROFILING_LIBRARY_ERROR => c"The third-party Profiling module returned an unrecoverable error",
        DCGM_ST_PROFILING_MULTI_PASS => c"The requested profiling metrics cannot be collected in a single pass",
        DCGM_ST_DIAG_ALREADY_RUNNING => c"A diag instance is already running, cannot run a new diag until the current one finishes",
        DCGM_ST_DIAG_BAD_JSON => c"The GPU Diagnostic returned Json that cannot be parsed.",
        DCGM_ST_DIAG_BAD_LAUNCH => c"Error while launching the GPU Diagnostic.",
        DCGM_ST_DIAG_UNUSED => c"Unused error code",
        DCGM_ST_DIAG_THRESHOLD_EXCEEDED => c"A field value met or exceeded the error threshold.",
        DCGM_ST_INSUFFICIENT_DRIVER_VERSION => c"The installed driver version is insufficient for this API",
        DCGM_ST_INSTANCE_NOT_FOUND => c"The specified GPU instance does not exist",
        DCGM_ST_COMPUTE_INSTANCE_NOT_FOUND => c"The specified GPU compute instance does not exist",
        DCGM_ST_CHILD_NOT_KILLED => c"Failed to kill a child process",
        DCGM_ST_3RD_PARTY_LIBRARY_ERROR => c"Detected an error in a 3rd-party library",
        DCGM_ST_INSUFFICIENT_RESOURCES => c"Not enough resources available",
        DCGM_ST_PLUGIN_EXCEPTION => c"Exception thrown from a diagnostic plugin",
        DCGM_ST_NVVS_ISOLATE_ERROR => c"The diagnostic returned an error that indicates the need to drain the GPU",
        DCGM_ST_NVVS_BINARY_NOT_FOUND => c"The NVVS binary was not found in the specified location; please install it to /usr/libexec/datacenter-gpu-manager-4/ or set environment variable NVVS_BIN_PATH to the directory containing nvvs. If you set NVVS_BIN_PATH, please restart the DCGM service (nv-hostengine) if it is active.",
        DCGM_ST_NVVS_KILLED => c"The DCGM diagnostic was killed by a signal",
        DCGM_ST_PAUSED => c"The hostengine and all modules are paused",
        DCGM_ST_ALREADY_INITIALIZED => c"The object has already been initialized",
        DCGM_ST_NVML_NOT_LOADED => c"Cannot perform the requested operation because NVML doesn't exist on this system.",
        DCGM_ST_NVML_DRIVER_TIMEOUT => c"Cannot perform the requested operation because an NVML driver timeout error was detected. Verify NVML is responsive before restarting the hostengine.",
        DCGM_ST_NVVS_NO_AVAILABLE_TEST => c"Requested tests were not found among possible test choices.",
        DCGM_ST_MNDIAG_CONNECTION_NOT_AVAILABLE => c"No connection is currently authorized for multi-node diagnostic",
        DCGM_ST_MNDIAG_CONNECTION_UNAUTHORIZED => c"The connection is not authorized for multi-node diagnostic",
        DCGM_ST_REMOTE_SSH_CONNECTION_FAILED => c"An SSH connection to a remote hostengine failed",
        DCGM_ST_CHILD_SPAWN_FAILED => c"A child process could not be spawned",
        DCGM_ST_FILE_IO_ERROR => c"A file operation failed",
        DCGM_ST_CHILD_SIGNAL_RECEIVED => c"A child process received a signal",
        DCGM_ST_CALLER_ALREADY_STOPPED => c"The caller is already stopped",
        DCGM_ST_DIAG_STOPPED => c"The DCGM Diagnostic was stopped",
        DCGM_ST_GPUS_DETACHED => c"Cannot perform the requested operation because the GPUs are detached",
        _ => return None,
    })
}

/// `const char *errorString(dcgmReturn_t)`: NULL for codes DCGM does not know.
#[no_mangle]
pub extern "C" fn errorString(result: dcgmReturn_t) -> *const c_char {
    catch_unwind(|| error_text(result).map_or(ptr::null(), CStr::as_ptr)).unwrap_or(ptr::null())
}

/// `dcgmErrorSeverity_t dcgmErrorGetPriorityByCode(unsigned int)`: the simulator has no
/// diagnostic error table, so every code is `DCGM_ERROR_UNKNOWN` (3).
#[no_mangle]
pub extern "C" fn dcgmErrorGetPriorityByCode(_code: u32) -> u32 {
    3
}

/// `dcgmErrorCategory_t dcgmErrorGetCategoryByCode(unsigned int)`: `DCGM_FR_EC_NONE` (0).
#[no_mangle]
pub extern "C" fn dcgmErrorGetCategoryByCode(_code: u32) -> u32 {
    0
}

/// `const char *dcgmErrorGetFormatMsgByCode(unsigned int)`: NULL, as for an unknown code.
#[no_mangle]
pub extern "C" fn dcgmErrorGetFormatMsgByCode(_code: u32) -> *const c_char {
    ptr::null()
}

/// `const dcgm_error_meta_t *dcgmGetErrorMeta(dcgmError_t)`: NULL, as for an unknown code.
#[no_mangle]
pub extern "C" fn dcgmGetErrorMeta(_error: u32) -> *const c_void {
    ptr::null()
}

const MODULE_NAMES: [&CStr; 11] = [
    c"Core",
    c"NvSwitch",
    c"VGPU",
    c"Introspection",
    c"Health",
    c"Policy",
    c"Config",
    c"Diag",
    c"Profiling",
    c"SysMon",
    c"MnDiag",
];

/// `dcgmReturn_t dcgmModuleIdToName(dcgmModuleId_t id, char const **name)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmModuleIdToName(id: u32, name: *mut *const c_char) -> dcgmReturn_t {
    api(|| {
        non_null(name)?;
        let text = MODULE_NAMES.get(id as usize).ok_or(DCGM_ST_BADPARAM)?;
        // SAFETY: `name` is non-NULL and, per the API, points to a writable `const char *`.
        unsafe { *name = text.as_ptr() };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmPowerProfileIdToName(dcgmPowerProfileType_t, char const **)`: the
/// simulator models no workload power profiles.
#[no_mangle]
pub extern "C" fn dcgmPowerProfileIdToName(_id: u32, _name: *mut *const c_char) -> dcgmReturn_t {
    guard(|| {
        super::require_init()?;
        Err(DCGM_ST_NOT_SUPPORTED)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_return_code_has_its_text() {
        assert_eq!(
            error_text(DCGM_ST_CONNECTION_NOT_VALID).unwrap(),
            c"Host engine connection invalid/disconnected"
        );
        assert_eq!(error_text(0).unwrap(), c"Success");
        assert!(error_text(-2).is_none());
        assert!(error_text(-68).is_none());
        assert!(error_text(1).is_none());
        assert_eq!((-67..=0).filter(|&c| error_text(c).is_some()).count(), 67);
    }
}
