//! Entity groups and field groups.

use super::layouts::{AllFieldGroupV1, ALL_FIELD_GROUP_V1};
use super::{
    api, ask, call, call_ok, check_version, cleared, fill_slots, group_id, non_null, put_str,
    read_str, unexpected,
};
use crate::proto::{FieldGroupEntry, Reply, Request};
use dcgm_sys::ffi::*;
use dcgm_sys::versions::{FIELD_GROUP_INFO_V1, GROUP_INFO_V3};
use std::ffi::{c_char, c_int};

/// Longest name the engine stores (`char[DCGM_MAX_STR_LENGTH]` including the NUL).
const MAX_NAME: usize = DCGM_MAX_STR_LENGTH as usize - 1;

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// `dcgmReturn_t dcgmGroupCreate(dcgmHandle_t, dcgmGroupType_t, const char *groupName, dcgmGpuGrp_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmGroupCreate(
    handle: dcgmHandle_t,
    group_type: dcgmGroupType_t,
    name: *const c_char,
    group: *mut dcgmGpuGrp_t,
) -> dcgmReturn_t {
    api(|| {
        non_null(group)?;
        // SAFETY: NULL is rejected inside; otherwise the API requires a C string.
        let name = truncate(unsafe { read_str(name) }?, MAX_NAME);
        let id = ask!(handle, Request::GroupCreate { group_type, name }, Reply::Id);
        // SAFETY: non-NULL and writable per the API.
        unsafe { *group = id as dcgmGpuGrp_t };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmGroupDestroy(dcgmHandle_t, dcgmGpuGrp_t)`.
#[no_mangle]
pub extern "C" fn dcgmGroupDestroy(handle: dcgmHandle_t, group: dcgmGpuGrp_t) -> dcgmReturn_t {
    api(|| {
        call_ok(
            handle,
            Request::GroupDestroy {
                group_id: group_id(group),
            },
        )
    })
}

/// `dcgmReturn_t dcgmGroupAddEntity(dcgmHandle_t, dcgmGpuGrp_t, dcgm_field_entity_group_t, dcgm_field_eid_t)`.
#[no_mangle]
pub extern "C" fn dcgmGroupAddEntity(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    entity_group: dcgm_field_entity_group_t,
    entity_id: dcgm_field_eid_t,
) -> dcgmReturn_t {
    api(|| {
        call_ok(
            handle,
            Request::GroupAddEntity {
                group_id: group_id(group),
                entity_group,
                entity_id,
            },
        )
    })
}

/// `dcgmReturn_t dcgmGroupAddDevice(dcgmHandle_t, dcgmGpuGrp_t, unsigned int gpuId)`.
#[no_mangle]
pub extern "C" fn dcgmGroupAddDevice(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    gpu_id: u32,
) -> dcgmReturn_t {
    dcgmGroupAddEntity(handle, group, DCGM_FE_GPU, gpu_id)
}

/// A group's name and members.
pub(crate) fn group_info(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
) -> Result<(String, Vec<(u32, u32)>), dcgmReturn_t> {
    match call(
        handle,
        Request::GroupGetInfo {
            group_id: group_id(group),
        },
    )? {
        Reply::GroupInfo { name, entities } => Ok((name, entities)),
        r => unexpected(r),
    }
}

/// `dcgmReturn_t dcgmGroupGetInfo(dcgmHandle_t, dcgmGpuGrp_t, dcgmGroupInfo_t *)`:
/// `dcgmGroupInfo_version3` only.
#[no_mangle]
pub unsafe extern "C" fn dcgmGroupGetInfo(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    info: *mut dcgmGroupInfo_v3,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(info, GROUP_INFO_V3) }?;
        let (name, entities) = group_info(handle, group)?;
        if entities.len() > DCGM_GROUP_MAX_ENTITIES_V2 as usize {
            // What the real client does when the engine claims more than fits.
            return Err(DCGM_ST_GENERIC_ERROR);
        }
        // SAFETY: the version says the caller's struct is a full v3.
        let out = unsafe { cleared(info) };
        put_str(&mut out.groupName, &name);
        out.count = entities.len() as u32;
        for (slot, &(g, e)) in out.entityList.iter_mut().zip(&entities) {
            *slot = dcgmGroupEntityPair_t {
                entityGroupId: g,
                entityId: e,
            };
        }
        Ok(())
    })
}

/// `dcgmReturn_t dcgmFieldGroupCreate(dcgmHandle_t, int numFieldIds, const unsigned short *fieldIds,
/// const char *fieldGroupName, dcgmFieldGrp_t *)`: the real client rejects
/// `numFieldIds < 1 || >= 128` and empty or ≥ 256-byte names before asking the engine.
#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupCreate(
    handle: dcgmHandle_t,
    num_field_ids: c_int,
    field_ids: *const u16,
    name: *const c_char,
    field_group: *mut dcgmFieldGrp_t,
) -> dcgmReturn_t {
    api(|| {
        let n = usize::try_from(num_field_ids).map_err(|_| DCGM_ST_BADPARAM)?;
        if !(1..DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP as usize).contains(&n)
            || field_ids.is_null()
            || field_group.is_null()
        {
            return Err(DCGM_ST_BADPARAM);
        }
        // SAFETY: NULL is rejected inside; otherwise the API requires a C string.
        let name = unsafe { read_str(name) }?;
        if name.is_empty() || name.len() >= DCGM_MAX_STR_LENGTH as usize {
            return Err(DCGM_ST_BADPARAM);
        }
        // SAFETY: the caller passes `numFieldIds` ids at `fieldIds` (non-NULL, checked).
        let ids = unsafe { std::slice::from_raw_parts(field_ids, n) }.to_vec();
        let id = ask!(
            handle,
            Request::FieldGroupCreate {
                field_ids: ids,
                name,
            },
            Reply::Id
        );
        // SAFETY: non-NULL and writable per the API.
        unsafe { *field_group = id as dcgmFieldGrp_t };
        Ok(())
    })
}

/// `dcgmReturn_t dcgmFieldGroupDestroy(dcgmHandle_t, dcgmFieldGrp_t)`.
#[no_mangle]
pub extern "C" fn dcgmFieldGroupDestroy(
    handle: dcgmHandle_t,
    field_group: dcgmFieldGrp_t,
) -> dcgmReturn_t {
    api(|| {
        call_ok(
            handle,
            Request::FieldGroupDestroy {
                field_group_id: field_group as u64,
            },
        )
    })
}

/// One field group by id.
pub(crate) fn field_group_info(
    handle: dcgmHandle_t,
    field_group: dcgmFieldGrp_t,
) -> Result<FieldGroupEntry, dcgmReturn_t> {
    match call(
        handle,
        Request::FieldGroupGetInfo {
            field_group_id: field_group as u64,
        },
    )? {
        Reply::FieldGroups(mut v) if v.len() == 1 => Ok(v.remove(0)),
        r => unexpected(r),
    }
}

fn fill_field_group(out: &mut dcgmFieldGroupInfo_v1, fg: &FieldGroupEntry) {
    out.version = FIELD_GROUP_INFO_V1;
    out.fieldGroupId = fg.id as dcgmFieldGrp_t;
    put_str(&mut out.fieldGroupName, &fg.name);
    out.numFieldIds = fill_slots(&mut out.fieldIds, &fg.field_ids, |d, &id| *d = id);
}

/// `dcgmReturn_t dcgmFieldGroupGetInfo(dcgmHandle_t, dcgmFieldGroupInfo_t *)`: looks up
/// `fieldGroupInfo->fieldGroupId`.
#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupGetInfo(
    handle: dcgmHandle_t,
    info: *mut dcgmFieldGroupInfo_v1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(info, FIELD_GROUP_INFO_V1) }?;
        // SAFETY: the version says the caller's struct is a full v1.
        let id = unsafe { (*info).fieldGroupId };
        let fg = field_group_info(handle, id)?;
        // SAFETY: as above.
        fill_field_group(unsafe { cleared(info) }, &fg);
        Ok(())
    })
}

/// `dcgmReturn_t dcgmFieldGroupGetAll(dcgmHandle_t, dcgmAllFieldGroup_t *)`.
#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupGetAll(
    handle: dcgmHandle_t,
    all: *mut AllFieldGroupV1,
) -> dcgmReturn_t {
    api(|| {
        // SAFETY: NULL or the caller's versioned struct (dcgm_agent.h).
        unsafe { check_version(all, ALL_FIELD_GROUP_V1) }?;
        let list = ask!(handle, Request::FieldGroupGetAll, Reply::FieldGroups);
        // SAFETY: the version says the caller's struct is a full v1 (34 KB, written in place).
        let out = unsafe { cleared(all) };
        out.num_field_groups = fill_slots(&mut out.field_groups, &list, fill_field_group);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn names_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("abc".into(), 2), "ab");
        assert_eq!(truncate("aé".into(), 2), "a");
        assert_eq!(truncate("x".into(), 255), "x");
    }
}
