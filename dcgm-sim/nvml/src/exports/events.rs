//! Device events: XIDs only (`nvmlEventTypeXidCriticalError`), raised by the same `xid`
//! control lines that give the simulated DCGM its DCGM_FI_DEV_XID_ERRORS samples (the
//! model's XID log), attributed to the MIG instance the line names, as the driver does.

use super::{api_mut, guard, object_exports, put, with_device};
use crate::ffi::{self, Device, EventData, EventSet, Return, NO_INSTANCE};
use crate::sim::{Dev, XidEvent};
use std::ffi::{c_uint, c_ulonglong};
use std::time::{Duration, Instant};

object_exports!(
    nvmlEventSetCreate,
    nvmlEventSetFree,
    EventSet,
    create_event_set,
    free_event_set
);

/// Whole GPUs raise XIDs; MIG device handles raise none of their own.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: Device,
    types: *mut c_ulonglong,
) -> Return {
    with_device(device, |_, dev| {
        let supported = match dev {
            Dev::Gpu(_) => ffi::EVENT_TYPE_XID_CRITICAL_ERROR,
            Dev::Mig { .. } => 0,
        };
        // SAFETY: nvml.h: `eventTypes` is an output unsigned long long.
        unsafe { put(types, supported) }
    })
}

/// nvml.h: NOT_SUPPORTED when "some of requested event types" are not supported, as any
/// other than XIDs is here.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: Device,
    types: c_ulonglong,
    set: EventSet,
) -> Return {
    let gpu = {
        let mut gpu = None;
        let rc = with_device(device, |_, dev| match dev {
            Dev::Gpu(g) if types & !ffi::EVENT_TYPE_XID_CRITICAL_ERROR == 0 => {
                gpu = Some(g.id);
                Ok(())
            }
            _ => Err(ffi::ERROR_NOT_SUPPORTED),
        });
        match gpu {
            Some(g) => g,
            None => return rc,
        }
    };
    api_mut(|sim| {
        if types & ffi::EVENT_TYPE_XID_CRITICAL_ERROR == 0 {
            // Nothing asked for: the set is only checked.
            return sim.check_event_set(set as usize);
        }
        sim.register_xids(set as usize, gpu)
    })
}

/// How often a wait with a timeout looks for a new event (the state lock is not held
/// meanwhile, so other calls go on).
const POLL: Duration = Duration::from_millis(20);

/// The set's next event, waiting up to `timeout_ms` for one (TIMEOUT without).
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: EventSet,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> Return {
    if data.is_null() {
        return guard(|| Err(ffi::ERROR_INVALID_ARGUMENT));
    }
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
    loop {
        let mut event = None;
        let rc = api_mut(|sim| {
            event = sim.next_event(set as usize)?;
            Ok(())
        });
        if rc != ffi::SUCCESS {
            return rc;
        }
        if let Some(e) = event {
            // SAFETY: nvml.h: `data` is an output nvmlEventData_t (checked non-NULL).
            return guard(|| unsafe { put(data, event_data(e)) });
        }
        let now = Instant::now();
        if now >= deadline {
            return ffi::ERROR_TIMEOUT;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

fn event_data(e: XidEvent) -> EventData {
    EventData {
        device: crate::sim::gpu_handle(e.gpu) as Device,
        event_type: ffi::EVENT_TYPE_XID_CRITICAL_ERROR,
        event_data: e.xid as c_ulonglong,
        gpu_instance_id: e.gpu_instance.unwrap_or(NO_INSTANCE),
        compute_instance_id: e.compute_instance.unwrap_or(NO_INSTANCE),
    }
}
