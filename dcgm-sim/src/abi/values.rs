//! Watches and value reads.

use super::groups::{field_group_info, group_info};
use super::{api, call, call_ok, group_id, non_null, unexpected, write_fv1, write_fv2};
use crate::proto::{Reply, Request, Sample};
use dcgm_sys::ffi::*;
use std::ffi::{c_int, c_longlong, c_void};

/// `dcgmReturn_t dcgmWatchFields(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t, long long updateFreq,
/// double maxKeepAge, int maxKeepSamples)`: group 0 is rejected by the client.
#[no_mangle]
pub extern "C" fn dcgmWatchFields(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    update_freq: c_longlong,
    max_keep_age: f64,
    max_keep_samples: c_int,
) -> dcgmReturn_t {
    watch_call(handle, group, field_group, |group_id, field_group_id| {
        Request::WatchFields {
            group_id,
            field_group_id,
            update_freq_us: update_freq,
            max_keep_age_s: max_keep_age,
            max_keep_samples,
        }
    })
}

/// A watch request for a group and field group; group 0 is rejected by the client.
fn watch_call(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    request: impl FnOnce(u64, u64) -> Request,
) -> dcgmReturn_t {
    api(|| {
        if group == 0 {
            return Err(DCGM_ST_BADPARAM);
        }
        call_ok(handle, request(group_id(group), field_group as u64))
    })
}

/// `dcgmReturn_t dcgmUnwatchFields(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t)`.
#[no_mangle]
pub extern "C" fn dcgmUnwatchFields(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
) -> dcgmReturn_t {
    watch_call(handle, group, field_group, |group_id, field_group_id| {
        Request::UnwatchFields {
            group_id,
            field_group_id,
        }
    })
}

/// `dcgmReturn_t dcgmUpdateAllFields(dcgmHandle_t, int waitForUpdate)`.
#[no_mangle]
pub extern "C" fn dcgmUpdateAllFields(
    handle: dcgmHandle_t,
    wait_for_update: c_int,
) -> dcgmReturn_t {
    api(|| {
        call_ok(
            handle,
            Request::UpdateAllFields {
                wait: wait_for_update != 0,
            },
        )
    })
}

fn latest(
    handle: dcgmHandle_t,
    entities: Vec<(u32, u32)>,
    field_ids: Vec<u16>,
    live: bool,
) -> Result<Vec<Sample>, dcgmReturn_t> {
    match call(
        handle,
        Request::EntitiesGetLatestValues {
            entities,
            field_ids,
            live,
        },
    )? {
        Reply::Samples(s) => Ok(s),
        r => unexpected(r),
    }
}

/// The single-entity reads: one v1 value per requested field, in order.
///
/// # Safety
/// `fields` and `values` are NULL or valid for `count` elements.
unsafe fn entity_latest_v1(
    handle: dcgmHandle_t,
    entity: (u32, u32),
    fields: *const u16,
    count: u32,
    values: *mut dcgmFieldValue_v1,
) -> dcgmReturn_t {
    api(|| {
        if fields.is_null()
            || values.is_null()
            || count == 0
            || count > DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
        {
            return Err(DCGM_ST_BADPARAM);
        }
        // SAFETY: the caller passes `count` field ids (non-NULL, checked).
        let ids = unsafe { std::slice::from_raw_parts(fields, count as usize) }.to_vec();
        let samples = latest(handle, vec![entity], ids, false)?;
        if samples.len() != count as usize {
            // The engine promises one value per field; anything else is a bug, not data.
            return Err(DCGM_ST_GENERIC_ERROR);
        }
        for (i, s) in samples.iter().enumerate() {
            // SAFETY: the caller's array holds `count` values and `i < count`.
            unsafe { write_fv1(values.add(i), s) };
        }
        Ok(())
    })
}

/// `dcgmReturn_t dcgmEntityGetLatestValues(dcgmHandle_t, dcgm_field_entity_group_t, int entityId,
/// unsigned short fields[], unsigned int count, dcgmFieldValue_v1 values[])`.
#[no_mangle]
pub unsafe extern "C" fn dcgmEntityGetLatestValues(
    handle: dcgmHandle_t,
    entity_group: dcgm_field_entity_group_t,
    entity_id: c_int,
    fields: *const u16,
    count: u32,
    values: *mut dcgmFieldValue_v1,
) -> dcgmReturn_t {
    // SAFETY: the caller's pointers, passed on under the same contract.
    unsafe {
        entity_latest_v1(
            handle,
            (entity_group, entity_id as u32),
            fields,
            count,
            values,
        )
    }
}

/// `dcgmReturn_t dcgmGetLatestValuesForFields(dcgmHandle_t, int gpuId, unsigned short fields[],
/// unsigned int count, dcgmFieldValue_v1 values[])`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetLatestValuesForFields(
    handle: dcgmHandle_t,
    gpu_id: c_int,
    fields: *const u16,
    count: u32,
    values: *mut dcgmFieldValue_v1,
) -> dcgmReturn_t {
    // SAFETY: the caller's pointers, passed on under the same contract.
    unsafe { entity_latest_v1(handle, (DCGM_FE_GPU, gpu_id as u32), fields, count, values) }
}

/// `dcgmReturn_t dcgmEntitiesGetLatestValues(dcgmHandle_t, dcgmGroupEntityPair_t entities[],
/// unsigned int entityCount, unsigned short fields[], unsigned int fieldCount, unsigned int flags,
/// dcgmFieldValue_v2 values[])`: `values` holds `entityCount * fieldCount` records.
#[no_mangle]
pub unsafe extern "C" fn dcgmEntitiesGetLatestValues(
    handle: dcgmHandle_t,
    entities: *const dcgmGroupEntityPair_t,
    entity_count: u32,
    fields: *const u16,
    field_count: u32,
    flags: u32,
    values: *mut dcgmFieldValue_v2,
) -> dcgmReturn_t {
    api(|| {
        if entities.is_null()
            || fields.is_null()
            || values.is_null()
            || entity_count == 0
            || field_count == 0
            || entity_count > DCGM_GROUP_MAX_ENTITIES_V2
            || field_count > DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
        {
            return Err(DCGM_ST_BADPARAM);
        }
        // SAFETY: the caller passes `entityCount` pairs and `fieldCount` ids (non-NULL).
        let (pairs, ids) = unsafe {
            (
                std::slice::from_raw_parts(entities, entity_count as usize),
                std::slice::from_raw_parts(fields, field_count as usize),
            )
        };
        let pairs = pairs
            .iter()
            .map(|p| (p.entityGroupId, p.entityId))
            .collect();
        let samples = latest(
            handle,
            pairs,
            ids.to_vec(),
            flags & DCGM_FV_FLAG_LIVE_DATA != 0,
        )?;
        let expected = entity_count as usize * field_count as usize;
        if samples.len() != expected {
            return Err(DCGM_ST_GENERIC_ERROR);
        }
        for (i, s) in samples.iter().enumerate() {
            // SAFETY: the caller's array holds `entityCount * fieldCount` records and
            // `i` is below that.
            unsafe { write_fv2(values.add(i), s) };
        }
        Ok(())
    })
}

/// Where enumerated values go: the v1 callback (GPU id only) or the entity-aware one.
#[derive(Clone, Copy)]
enum Callback {
    V1(unsafe extern "C" fn(u32, *mut dcgmFieldValue_v1, c_int, *mut c_void) -> c_int),
    V2(
        unsafe extern "C" fn(
            dcgm_field_entity_group_t,
            dcgm_field_eid_t,
            *mut dcgmFieldValue_v1,
            c_int,
            *mut c_void,
        ) -> c_int,
    ),
}

/// Calls the callback once per sample (`numValues = 1`, like the real library) until it
/// returns non-zero. The v1 callback never sees non-GPU entities. No lock is held here,
/// so a callback may call back into the library.
///
/// # Safety
/// The callback and `user_data` are what the caller passed to the export.
unsafe fn enumerate(samples: &[Sample], cb: Callback, user_data: *mut c_void) -> bool {
    // 4 KB: keep it off small foreign thread stacks. Zeroed once, then reused for every
    // sample as the real library reuses its own (each written over only as far as its value).
    let mut fv = Box::<dcgmFieldValue_v1>::new_zeroed();
    for s in samples {
        if matches!(cb, Callback::V1(_))
            && s.entity_group != DCGM_FE_GPU
            && s.entity_group != DCGM_FE_NONE
        {
            continue;
        }
        let p = fv.as_mut_ptr();
        // SAFETY: `p` points to our own zeroed heap allocation of one value, which
        // `write_fv1` fills from the sample. The callback gets it for the duration of the call,
        // as the API promises, together with the caller's own `user_data`.
        let stop = unsafe {
            write_fv1(p, s);
            match cb {
                Callback::V1(f) => f(s.entity_id, p, 1, user_data),
                Callback::V2(f) => f(s.entity_group, s.entity_id, p, 1, user_data),
            }
        };
        if stop != 0 {
            return false;
        }
    }
    true
}

/// # Safety
/// `next` is NULL or writable; the callback and `user_data` are the caller's.
unsafe fn values_since(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    since: c_longlong,
    next: *mut c_longlong,
    cb: Callback,
    user_data: *mut c_void,
) -> Result<(), dcgmReturn_t> {
    non_null(next)?;
    // SAFETY: non-NULL and writable per the API; unchanged unless the call completes.
    unsafe { *next = since };
    if let Callback::V1(_) = cb {
        // The v1 API cannot name non-GPU entities, so it refuses such groups outright.
        let (_, entities) = group_info(handle, group)?;
        if entities
            .iter()
            .any(|&(g, _)| g != DCGM_FE_GPU && g != DCGM_FE_NONE)
        {
            return Err(DCGM_ST_NOT_SUPPORTED);
        }
    }
    let req = Request::GetValuesSince {
        group_id: group_id(group),
        field_group_id: field_group as u64,
        since_us: since,
    };
    let (samples, next_since, status) = match call(handle, req)? {
        Reply::ValuesSince {
            samples,
            next_since_us,
            status,
        } => (samples, next_since_us, status),
        r => return unexpected(r),
    };
    // A library of an older release will not read a field it does not know (the real
    // 4.4.2 library: UNKNOWN_FIELD for DCGM_FI_DEV_GPU_RECOVERY_ACTION from a 4.6 engine).
    let release = super::lifecycle::library_release();
    if samples
        .iter()
        .any(|s| !dcgm_sys::releases::knows_field(release, s.field_id))
    {
        return Err(DCGM_ST_UNKNOWN_FIELD);
    }
    // SAFETY: the caller's callback and user data.
    let completed = unsafe { enumerate(&samples, cb, user_data) };
    if !completed {
        // A callback that stopped early ends the call with OK and `next` unchanged.
        return Ok(());
    }
    if status != DCGM_ST_OK {
        return Err(status);
    }
    // SAFETY: as above.
    unsafe { *next = next_since };
    Ok(())
}

/// # Safety
/// The callback and `user_data` are the caller's.
unsafe fn latest_values(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    cb: Callback,
    user_data: *mut c_void,
) -> Result<(), dcgmReturn_t> {
    // The real engine resolves both ids itself; asking for the members and fields and
    // then for their values gives the same answer with the requests we have.
    let (_, entities) = group_info(handle, group)?;
    let fields = field_group_info(handle, field_group)?.field_ids;
    if entities.is_empty() || fields.is_empty() {
        return Ok(());
    }
    let samples = latest(handle, entities, fields, false)?;
    // SAFETY: the caller's callback and user data.
    unsafe { enumerate(&samples, cb, user_data) };
    Ok(())
}

/// The exports that report through a callback, v1 (GPUs only) and v2 (any entity): the
/// caller's arguments passed on, the callback wrapped as its version.
macro_rules! callback_exports {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty,)*) $cb:ty => $variant:path, $inner:ident;
    )*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            handle: dcgmHandle_t,
            group: dcgmGpuGrp_t,
            field_group: dcgmFieldGrp_t,
            $($arg: $ty,)*
            cb: $cb,
            user_data: *mut c_void,
        ) -> dcgmReturn_t {
            api(|| {
                let Some(cb) = cb.map($variant) else {
                    return Err(DCGM_ST_BADPARAM);
                };
                // SAFETY: the caller's pointers and callback, passed on under the same
                // contract.
                unsafe { $inner(handle, group, field_group, $($arg,)* cb, user_data) }
            })
        }
    )*};
}

callback_exports! {
    /// `dcgmReturn_t dcgmGetValuesSince_v2(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t, long long since,
    /// long long *nextSinceTimestamp, dcgmFieldValueEntityEnumeration_f, void *userData)`.
    fn dcgmGetValuesSince_v2(since: c_longlong, next: *mut c_longlong,)
        dcgmFieldValueEntityEnumeration_f => Callback::V2, values_since;
    /// `dcgmReturn_t dcgmGetValuesSince(...)`: v1 callback; NOT_SUPPORTED for groups holding
    /// non-GPU entities.
    fn dcgmGetValuesSince(since: c_longlong, next: *mut c_longlong,)
        dcgmFieldValueEnumeration_f => Callback::V1, values_since;
    /// `dcgmReturn_t dcgmGetLatestValues_v2(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t,
    /// dcgmFieldValueEntityEnumeration_f, void *)`: one value per (entity, field).
    fn dcgmGetLatestValues_v2() dcgmFieldValueEntityEnumeration_f => Callback::V2, latest_values;
    /// `dcgmReturn_t dcgmGetLatestValues(...)`: v1 callback; non-GPU entities are skipped.
    fn dcgmGetLatestValues() dcgmFieldValueEnumeration_f => Callback::V1, latest_values;
}
