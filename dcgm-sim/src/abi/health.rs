//! Health watches.

use super::layouts::{HealthSetParamsV2, HEALTH_SET_PARAMS_V2};
use super::{
    api, ask, call, call_ok, check_version, cleared, fill_slots, group_id, non_null, put_str,
    unexpected,
};
use crate::proto::{Reply, Request};
use dcgm_sys::ffi::*;
use dcgm_sys::versions::HEALTH_RESPONSE_V5;

/// `dcgmReturn_t dcgmHealthSet(dcgmHandle_t, dcgmGpuGrp_t, dcgmHealthSystems_t)`.
#[no_mangle]
pub extern "C" fn dcgmHealthSet(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    systems: dcgmHealthSystems_t,
) -> dcgmReturn_t {
    api(|| {
        call_ok(
            handle,
            Request::HealthSet {
                group_id: group_id(group),
                systems,
            },
        )
    })
}

/// `dcgmReturn_t dcgmHealthSet_v2(dcgmHandle_t, dcgmHealthSetParams_v2 *)`. The simulated
/// health checks look at the engine's current state, so the sampling interval and keep
/// age are accepted but have no effect.
#[no_mangle]
pub unsafe extern "C" fn dcgmHealthSet_v2(
    handle: dcgmHandle_t,
    params: *mut HealthSetParamsV2,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(params, HEALTH_SET_PARAMS_V2) }?;
        // SAFETY: the version says the caller's struct is a full v2.
        let p = unsafe { &*params };
        call_ok(
            handle,
            Request::HealthSet {
                group_id: group_id(p.group_id),
                systems: p.systems,
            },
        )
    })
}

/// `dcgmReturn_t dcgmHealthGet(dcgmHandle_t, dcgmGpuGrp_t, dcgmHealthSystems_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmHealthGet(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    systems: *mut dcgmHealthSystems_t,
) -> dcgmReturn_t {
    api(|| {
        non_null(systems)?;
        let s = ask!(
            handle,
            Request::HealthGet {
                group_id: group_id(group),
            },
            Reply::HealthSystems
        );
        // SAFETY: non-NULL and writable per the API.
        unsafe { *systems = s };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmHealthCheck(dcgmHandle_t, dcgmGpuGrp_t, dcgmHealthResponse_t *)`:
/// `dcgmHealthResponse_version5` only. The 1 MB response is filled in place.
#[no_mangle]
pub unsafe extern "C" fn dcgmHealthCheck(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    results: *mut dcgmHealthResponse_v5,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(results, HEALTH_RESPONSE_V5) }?;
        let (overall, incidents) = match call(
            handle,
            Request::HealthCheck {
                group_id: group_id(group),
            },
        )? {
            Reply::Health { overall, incidents } => (overall, incidents),
            r => return unexpected(r),
        };
        // SAFETY: the version says the caller's struct is a full v5; a reference to it
        // lives in place, nothing is copied to the stack.
        let out = unsafe { cleared(results) };
        out.overallHealth = overall;
        out.incidentCount = fill_slots(&mut out.incidents, &incidents, |slot, inc| {
            slot.system = inc.system;
            slot.health = inc.health;
            put_str(&mut slot.error.msg, &inc.msg);
            slot.error.code = inc.code;
            slot.entityInfo = dcgmGroupEntityPair_t {
                entityGroupId: inc.entity.0,
                entityId: inc.entity.1,
            };
        });
        Ok(())
    })
}
