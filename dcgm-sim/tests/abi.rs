//! The simulator's C ABI, exercised the way a C client uses it: the built cdylib is
//! `dlopen`ed and called through raw function pointers with `dcgm_sys::ffi` structs.

mod support;

use dcgm_sys::ffi::*;
use dcgm_sys::versions::*;
use std::ffi::{c_int, c_longlong, c_void, CString};
use std::ptr;
use support::*;

/// Every function in NVIDIA's `dcgmlib/dcgmlib.linux_def` (DCGM 4.6.0).
const REAL_EXPORTS: &[&str] = &[
    "dcgmActionValidate",
    "dcgmActionValidate_v2",
    "dcgmAddFakeInstances",
    "dcgmConfigEnforce",
    "dcgmConfigGet",
    "dcgmConfigSet",
    "dcgmConnect",
    "dcgmConnect_v2",
    "dcgmConnect_v3",
    "dcgmCpuHierarchyCpuOwnsCore",
    "dcgmDisconnect",
    "dcgmEngineRun",
    "dcgmEntitiesGetLatestValues",
    "dcgmEntityGetLatestValues",
    "dcgmFieldGroupCreate",
    "dcgmFieldGroupDestroy",
    "dcgmFieldGroupGetAll",
    "dcgmFieldGroupGetInfo",
    "dcgmGetAllDevices",
    "dcgmGetAllSupportedDevices",
    "dcgmGetCacheManagerFieldInfo",
    "dcgmGetDeviceAttributes",
    "dcgmGetDeviceWorkloadPowerProfileInfo",
    "dcgmGetDeviceTopology",
    "dcgmGetEntityGroupEntities",
    "dcgmGetFieldSummary",
    "dcgmGetGpuChipArchitecture",
    "dcgmGetGpuInstanceHierarchy",
    "dcgmGetGroupTopology",
    "dcgmGetLatestValues",
    "dcgmGetLatestValues_v2",
    "dcgmGetLatestValuesForFields",
    "dcgmGetNvLinkLinkStatus",
    "dcgmGetNvLinkP2PStatus",
    "dcgmGetCpuHierarchy",
    "dcgmGetCpuHierarchy_v2",
    "dcgmGetPidInfo",
    "dcgmGetValuesSince",
    "dcgmGetValuesSince_v2",
    "dcgmGroupAddDevice",
    "dcgmGroupAddEntity",
    "dcgmGroupCreate",
    "dcgmGroupDestroy",
    "dcgmGroupGetAllIds",
    "dcgmGroupGetInfo",
    "dcgmGroupRemoveDevice",
    "dcgmGroupRemoveEntity",
    "dcgmHealthCheck",
    "dcgmHealthGet",
    "dcgmHealthSet",
    "dcgmHealthSet_v2",
    "dcgmHostengineVersionInfo",
    "dcgmHostengineIsHealthy",
    "dcgmHostengineSetLoggingSeverity",
    "dcgmInit",
    "dcgmInjectFieldValue",
    "dcgmInjectEntityFieldValue",
    "dcgmIntrospectGetHostengineCpuUtilization",
    "dcgmIntrospectGetHostengineMemoryUsage",
    "dcgmJobGetStats",
    "dcgmJobRemove",
    "dcgmJobRemoveAll",
    "dcgmJobStartStats",
    "dcgmJobStopStats",
    "dcgmMarkModulesReloadable",
    "dcgmModuleDenylist",
    "dcgmModuleGetStatuses",
    "dcgmPolicyGet",
    "dcgmPolicyRegister_v2",
    "dcgmPolicySet",
    "dcgmPolicyTrigger",
    "dcgmPolicyUnregister",
    "dcgmProfGetSupportedMetricGroups",
    "dcgmProfPause",
    "dcgmProfResume",
    "dcgmRunDiagnostic",
    "dcgmRunMnDiagnostic",
    "dcgmSelectGpusByTopology",
    "dcgmShutdown",
    "dcgmStartEmbedded",
    "dcgmStartEmbedded_v2",
    "dcgmStartEmbedded_v3",
    "dcgmStatusClear",
    "dcgmStatusCreate",
    "dcgmStatusDestroy",
    "dcgmStatusGetCount",
    "dcgmStatusPopError",
    "dcgmStopDiagnostic",
    "dcgmStopEmbedded",
    "dcgmStopMnDiagnostic",
    "dcgmUnwatchFields",
    "dcgmUpdateAllFields",
    "dcgmVersionInfo",
    "dcgmWatchFields",
    "dcgmWatchJobFields",
    "dcgmWatchPidFields",
    "dcgmGetErrorMeta",
    "errorString",
    "dcgmModuleIdToName",
    "DcgmFieldGetById",
    "DcgmFieldGetByTag",
    "DcgmFieldsInit",
    "DcgmFieldsTerm",
    "DcgmFieldsGetEntityGroupString",
    "dcgmGetMultipleValuesForField",
    "dcgmGetFieldValuesSince",
    "dcgmWatchFieldValue",
    "dcgmUnwatchFieldValue",
    "dcgmVgpuConfigSet",
    "dcgmVgpuConfigGet",
    "dcgmVgpuConfigEnforce",
    "dcgmGetVgpuDeviceAttributes",
    "dcgmGetVgpuInstanceAttributes",
    "dcgmGetGpuStatus",
    "dcgmCreateFakeEntities",
    "dcgmEntityInjectFieldValue",
    "dcgmSetEntityNvLinkLinkState",
    "dcgmCreateMigEntity",
    "dcgmDeleteMigEntity",
    "dcgmEmptyCache",
    "dcgmErrorGetPriorityByCode",
    "dcgmErrorGetCategoryByCode",
    "dcgmErrorGetFormatMsgByCode",
    "dcgmInjectEntityFieldValueToNvml",
    "dcgmCreateNvmlInjectionGpu",
    "dcgmInjectNvmlDevice",
    "dcgmInjectNvmlDeviceForFollowingCalls",
    "dcgmInjectedNvmlDeviceReset",
    "dcgmGetNvmlInjectFuncCallCount",
    "dcgmResetNvmlInjectFuncCallCount",
    "dcgmRemoveNvmlInjectedGpu",
    "dcgmRestoreNvmlInjectedGpu",
    "dcgmPauseTelemetryForDiag",
    "dcgmResumeTelemetryForDiag",
    "dcgmNvswitchGetBackend",
    "dcgmMultinodeRequest",
    "dcgmPowerProfileIdToName",
    "dcgmConfigSetWorkloadPowerProfile",
    "dcgmDiagSendHeartbeat",
    "dcgmHostengineEnvironmentVariableInfo",
    "dcgmAttachDriver",
    "dcgmDetachDriver",
];

#[test]
fn every_real_export_is_there() {
    let missing: Vec<&str> = REAL_EXPORTS
        .iter()
        .copied()
        .filter(|n| !has_symbol(n))
        .collect();
    assert!(missing.is_empty(), "missing exports: {missing:?}");
}

#[test]
fn nothing_works_before_init() {
    let _g = lock();
    let mut h: dcgmHandle_t = 0;
    let mut ids = [0u32; 32];
    let mut n: c_int = 0;
    let addr = CString::new("127.0.0.1").unwrap();
    let mut v2 = dcgmConnectV2Params_v2 {
        version: CONNECT_V2_PARAMS_V2,
        persistAfterDisconnect: 0,
        timeoutMs: 100,
        addressIsUnixSocket: 0,
    };
    // SAFETY: every pointer is to a live local of the declared type.
    unsafe {
        assert_eq!(
            dcgmShutdown(),
            DCGM_ST_OK,
            "shutdown is OK even when not initialised"
        );
        assert_eq!(
            dcgmStartEmbedded(DCGM_OPERATION_MODE_AUTO, &mut h),
            DCGM_ST_UNINITIALIZED
        );
        assert_eq!(dcgmStopEmbedded(EMBEDDED), DCGM_ST_UNINITIALIZED);
        assert_eq!(
            dcgmConnect_v2(addr.as_ptr(), &mut v2, &mut h),
            DCGM_ST_UNINITIALIZED
        );
        assert_eq!(
            dcgmGetAllDevices(EMBEDDED, ids.as_mut_ptr(), &mut n),
            DCGM_ST_UNINITIALIZED
        );
        // apiEnter comes before argument checks.
        assert_eq!(
            dcgmGetAllDevices(EMBEDDED, ptr::null_mut(), ptr::null_mut()),
            DCGM_ST_UNINITIALIZED
        );
        assert_eq!(dcgmUpdateAllFields(EMBEDDED, 1), DCGM_ST_UNINITIALIZED);
        assert_eq!(dcgmPolicyTrigger(EMBEDDED), DCGM_ST_UNINITIALIZED);
        assert_eq!(dcgmDisconnect(5), DCGM_ST_OK, "disconnect is always OK");
        // As the real 4.6 library: the build information needs no dcgmInit.
        let mut vi = vec![0u32; 129];
        vi[0] = 516 | 2 << 24;
        assert_eq!(dcgmVersionInfo(vi.as_mut_ptr().cast()), DCGM_ST_OK);
        assert!(
            DcgmFieldGetById(150).is_null(),
            "no metadata before DcgmFieldsInit"
        );
    }
}

#[test]
fn embedded_start_and_stop_follow_the_real_rules() {
    let _g = lock();
    fresh_embedded();
    // SAFETY: every pointer is to a live, correctly sized local or heap struct.
    unsafe {
        // All three StartEmbeddedV2Params versions are accepted and give the same handle.
        let mut p1: Box<dcgmStartEmbeddedV2Params_v1> = boxed(START_EMBEDDED_V2_PARAMS_V1);
        p1.opMode = DCGM_OPERATION_MODE_MANUAL;
        assert_eq!(dcgmStartEmbedded_v2(&mut *p1), DCGM_ST_OK);
        assert_eq!(p1.dcgmHandle, EMBEDDED);
        let mut p2: Box<dcgmStartEmbeddedV2Params_v2> = boxed(START_EMBEDDED_V2_PARAMS_V2);
        p2.opMode = DCGM_OPERATION_MODE_AUTO;
        assert_eq!(
            dcgmStartEmbedded_v2((&mut *p2 as *mut dcgmStartEmbeddedV2Params_v2).cast()),
            DCGM_ST_OK
        );
        assert_eq!(p2.dcgmHandle, EMBEDDED);
        let mut p3: Box<dcgmStartEmbeddedV2Params_v3> = boxed(START_EMBEDDED_V2_PARAMS_V3);
        p3.opMode = DCGM_OPERATION_MODE_AUTO;
        assert_eq!(
            dcgmStartEmbedded_v2((&mut *p3 as *mut dcgmStartEmbeddedV2Params_v3).cast()),
            DCGM_ST_OK
        );
        assert_eq!(p3.dcgmHandle, EMBEDDED);

        let mut bad: Box<dcgmStartEmbeddedV2Params_v1> = boxed(START_EMBEDDED_V2_PARAMS_V1 + 1);
        bad.opMode = DCGM_OPERATION_MODE_AUTO;
        assert_eq!(dcgmStartEmbedded_v2(&mut *bad), DCGM_ST_VER_MISMATCH);
        let mut mode: Box<dcgmStartEmbeddedV2Params_v1> = boxed(START_EMBEDDED_V2_PARAMS_V1);
        mode.opMode = 7;
        assert_eq!(dcgmStartEmbedded_v2(&mut *mode), DCGM_ST_BADPARAM);
        assert_eq!(dcgmStartEmbedded_v2(ptr::null_mut()), DCGM_ST_BADPARAM);
        assert_eq!(
            dcgmStartEmbedded(DCGM_OPERATION_MODE_AUTO, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );

        assert_eq!(dcgmStopEmbedded(1), DCGM_ST_BADPARAM);
        assert_eq!(dcgmStopEmbedded(EMBEDDED), DCGM_ST_OK);
        let mut n: c_int = 0;
        let mut ids = [0u32; 32];
        assert_eq!(
            dcgmGetAllDevices(EMBEDDED, ids.as_mut_ptr(), &mut n),
            DCGM_ST_UNINITIALIZED,
            "engine stopped"
        );
        assert_eq!(
            dcgmGetAllDevices(42, ids.as_mut_ptr(), &mut n),
            DCGM_ST_CONNECTION_NOT_VALID,
            "unknown handle"
        );
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn null_pointers_are_bad_parameters() {
    let _g = lock();
    let h = fresh_embedded();
    let name = CString::new("n").unwrap();
    let mut n: c_int = 0;
    // SAFETY: NULLs are what is being tested; other pointers are live locals.
    unsafe {
        assert_eq!(
            dcgmGetAllDevices(h, ptr::null_mut(), &mut n),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmGetDeviceAttributes(h, 0, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        assert_eq!(dcgmGetGpuStatus(h, 0, ptr::null_mut()), DCGM_ST_BADPARAM);
        assert_eq!(
            dcgmGetEntityGroupEntities(h, DCGM_FE_GPU, ptr::null_mut(), &mut n, 0),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmGetNvLinkLinkStatus(h, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmGroupCreate(h, DCGM_GROUP_EMPTY, ptr::null(), &mut 0),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmGroupCreate(h, DCGM_GROUP_EMPTY, name.as_ptr(), ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        assert_eq!(dcgmGroupGetInfo(h, 2, ptr::null_mut()), DCGM_ST_BADPARAM);
        assert_eq!(
            dcgmFieldGroupCreate(h, 1, ptr::null(), name.as_ptr(), &mut 0),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmEntityGetLatestValues(h, DCGM_FE_GPU, 0, ptr::null(), 1, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        let f = [150u16];
        assert_eq!(
            dcgmEntitiesGetLatestValues(h, ptr::null(), 1, f.as_ptr(), 1, 0, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        let mut next: c_longlong = 0;
        assert_eq!(
            dcgmGetValuesSince_v2(h, 2, 1, 0, &mut next, None, ptr::null_mut()),
            DCGM_ST_BADPARAM
        );
        assert_eq!(dcgmHealthGet(h, 2, ptr::null_mut()), DCGM_ST_BADPARAM);
        assert_eq!(dcgmHealthCheck(h, 2, ptr::null_mut()), DCGM_ST_BADPARAM);
        assert_eq!(dcgmConnect(ptr::null(), &mut 0), DCGM_ST_BADPARAM);
        assert!(DcgmFieldGetByTag(ptr::null()).is_null());
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn error_strings_are_the_real_texts() {
    // SAFETY: errorString returns NULL or a static string.
    unsafe {
        assert_eq!(
            c_text(errorString(DCGM_ST_CONNECTION_NOT_VALID)).as_deref(),
            Some("Host engine connection invalid/disconnected")
        );
        assert_eq!(
            c_text(errorString(DCGM_ST_NOT_SUPPORTED)).as_deref(),
            Some("Feature not supported")
        );
        assert_eq!(c_text(errorString(DCGM_ST_OK)).as_deref(), Some("Success"));
        assert_eq!(
            c_text(errorString(DCGM_ST_UNINITIALIZED)).as_deref(),
            Some("Object is in an undefined state")
        );
        assert!(errorString(-2).is_null(), "-2 is unused");
        assert!(errorString(-1000).is_null());
        assert!(errorString(7).is_null());
    }
}

#[test]
fn entity_lists_report_insufficient_size() {
    let _g = lock();
    let h = fresh_embedded();
    let mut ids = [u32::MAX; 64];
    // SAFETY: `ids` has room for the capacity passed in `n`.
    unsafe {
        let mut n: c_int = 2;
        assert_eq!(
            dcgmGetEntityGroupEntities(h, DCGM_FE_GPU, ids.as_mut_ptr(), &mut n, 0),
            DCGM_ST_INSUFFICIENT_SIZE
        );
        assert_eq!(n, 8, "the needed count comes back");
        assert!(ids.iter().all(|&i| i == u32::MAX), "nothing copied");
        n = 64;
        assert_eq!(
            dcgmGetEntityGroupEntities(
                h,
                DCGM_FE_GPU,
                ids.as_mut_ptr(),
                &mut n,
                DCGM_GEGE_FLAG_ONLY_SUPPORTED
            ),
            DCGM_ST_OK
        );
        assert_eq!(&ids[..n as usize], &[0, 1, 2, 3, 4, 5, 6, 7]);
        n = 64;
        assert_eq!(
            dcgmGetEntityGroupEntities(h, DCGM_FE_SWITCH, ids.as_mut_ptr(), &mut n, 0),
            DCGM_ST_OK
        );
        assert_eq!(n, 4);
        let mut all = [0u32; 32];
        let mut count: c_int = 0;
        assert_eq!(
            dcgmGetAllDevices(h, all.as_mut_ptr(), &mut count),
            DCGM_ST_OK
        );
        assert_eq!(count, 8);
        assert_eq!(
            dcgmGetAllSupportedDevices(h, all.as_mut_ptr(), &mut count),
            DCGM_ST_OK
        );
        assert_eq!(count, 8);
        let mut status: DcgmEntityStatus_t = 99;
        assert_eq!(dcgmGetGpuStatus(h, 3, &mut status), DCGM_ST_OK);
        assert_eq!(status, DcgmEntityStatusOk);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn field_metadata_pointers_are_stable() {
    let _g = lock();
    fresh_embedded();
    let tag = CString::new("gpu_temp").unwrap();
    let nope = CString::new("no_such_tag").unwrap();
    // SAFETY: non-NULL metadata pointers point to the library's static table.
    unsafe {
        assert_eq!(DcgmFieldsInit(), 0);
        assert_eq!(DcgmFieldsInit(), 0, "idempotent");
        let m = DcgmFieldGetById(150);
        assert!(!m.is_null());
        assert_eq!(m, DcgmFieldGetById(150), "same pointer every time");
        assert_eq!(m, DcgmFieldGetByTag(tag.as_ptr()));
        let meta = &*m;
        assert_eq!(meta.fieldId, 150);
        assert_eq!(meta.fieldType as u8, b'i');
        assert_eq!(meta.size, 8);
        assert_eq!(text(&meta.tag), "gpu_temp");
        assert_eq!(meta.entityLevel, DCGM_FE_GPU);
        assert!(!meta.valueFormat.is_null());
        let fmt = &*meta.valueFormat;
        assert!(!text(&fmt.shortName).is_empty());
        assert!(fmt.width > 0);
        assert_eq!((*DcgmFieldGetById(155)).fieldType as u8, b'd');
        assert_eq!((*DcgmFieldGetById(54)).fieldType as u8, b's');
        assert!(DcgmFieldGetById(0).is_null());
        let hole = (1..DCGM_FI_MAX_FIELDS as u16)
            .find(|&i| dcgm_sys::fields::by_id(i).is_none())
            .unwrap();
        assert!(DcgmFieldGetById(hole).is_null(), "id {hole} has no field");
        assert!(DcgmFieldGetById(u16::MAX).is_null());
        assert!(DcgmFieldGetByTag(nope.as_ptr()).is_null());
        assert_eq!(
            c_text(DcgmFieldsGetEntityGroupString(DCGM_FE_GPU_I)).as_deref(),
            Some("GPU_I")
        );
        assert_eq!(
            c_text(DcgmFieldsGetEntityGroupString(77)).as_deref(),
            Some("None")
        );
        // Copying the struct (as the Python bindings do) keeps a usable format pointer.
        let copy = *m;
        assert_eq!((*copy.valueFormat).width, fmt.width);
        assert_eq!(DcgmFieldsTerm(), 0);
        assert!(
            DcgmFieldGetById(150).is_null(),
            "hidden after DcgmFieldsTerm"
        );
        assert_eq!(
            fmt.width,
            (*copy.valueFormat).width,
            "but the memory stays valid"
        );
        assert_eq!(DcgmFieldsInit(), 0);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn groups_and_field_groups_have_a_lifecycle() {
    let _g = lock();
    let h = fresh_embedded();
    let name = CString::new("abi-test").unwrap();
    let empty = CString::new("").unwrap();
    let long = CString::new("x".repeat(256)).unwrap();
    let fields = [150u16, 155, 54, 1001];
    let many = [150u16; 128];
    // SAFETY: pointers are to live locals or heap structs of the declared types and sizes.
    unsafe {
        let mut g: dcgmGpuGrp_t = 0;
        assert_eq!(
            dcgmGroupCreate(h, DCGM_GROUP_EMPTY, name.as_ptr(), &mut g),
            DCGM_ST_OK
        );
        assert_eq!(dcgmGroupAddDevice(h, g, 0), DCGM_ST_OK);
        assert_eq!(dcgmGroupAddEntity(h, g, DCGM_FE_GPU, 1), DCGM_ST_OK);
        assert_eq!(dcgmGroupAddEntity(h, g, DCGM_FE_SWITCH, 0), DCGM_ST_OK);
        let mut info: Box<dcgmGroupInfo_v3> = boxed(GROUP_INFO_V3);
        // Only the low 32 bits of a group id matter.
        assert_eq!(
            dcgmGroupGetInfo(h, g | 0xdead_0000_0000, &mut *info),
            DCGM_ST_OK
        );
        assert_eq!(info.version, GROUP_INFO_V3);
        assert_eq!(text(&info.groupName), "abi-test");
        assert_eq!(info.count, 3);
        assert_eq!(
            (
                info.entityList[2].entityGroupId,
                info.entityList[2].entityId
            ),
            (DCGM_FE_SWITCH, 0)
        );
        let mut old: Box<dcgmGroupInfo_v3> = boxed(0x0200_0308);
        assert_eq!(
            dcgmGroupGetInfo(h, g, &mut *old),
            DCGM_ST_VER_MISMATCH,
            "only version 3"
        );

        let mut fg: dcgmFieldGrp_t = 0;
        assert_eq!(
            dcgmFieldGroupCreate(h, 0, fields.as_ptr(), name.as_ptr(), &mut fg),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmFieldGroupCreate(h, 128, many.as_ptr(), name.as_ptr(), &mut fg),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmFieldGroupCreate(h, 4, fields.as_ptr(), empty.as_ptr(), &mut fg),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmFieldGroupCreate(h, 4, fields.as_ptr(), long.as_ptr(), &mut fg),
            DCGM_ST_BADPARAM
        );
        assert_eq!(
            dcgmFieldGroupCreate(h, 4, fields.as_ptr(), name.as_ptr(), &mut fg),
            DCGM_ST_OK
        );
        assert_eq!(
            dcgmFieldGroupCreate(h, 4, fields.as_ptr(), name.as_ptr(), &mut 0),
            DCGM_ST_DUPLICATE_KEY
        );
        let mut fgi: Box<dcgmFieldGroupInfo_v1> = boxed(FIELD_GROUP_INFO_V1);
        fgi.fieldGroupId = fg;
        assert_eq!(dcgmFieldGroupGetInfo(h, &mut *fgi), DCGM_ST_OK);
        assert_eq!(
            (
                fgi.numFieldIds,
                &fgi.fieldIds[..4],
                text(&fgi.fieldGroupName).as_str()
            ),
            (4, &fields[..], "abi-test")
        );

        assert_eq!(
            dcgmWatchFields(h, 0, fg, 1_000_000, 60.0, 0),
            DCGM_ST_BADPARAM,
            "group 0"
        );
        assert_eq!(dcgmWatchFields(h, g, fg, 1_000_000, 60.0, 0), DCGM_ST_OK);
        assert_eq!(dcgmUpdateAllFields(h, 1), DCGM_ST_OK);
        let mut vals: Vec<dcgmFieldValue_v1> =
            (0..4).map(|_| *boxed::<dcgmFieldValue_v1>(0)).collect();
        assert_eq!(
            dcgmEntityGetLatestValues(h, DCGM_FE_GPU, 1, fields.as_ptr(), 4, vals.as_mut_ptr()),
            DCGM_ST_OK
        );
        for (v, f) in vals.iter().zip(fields) {
            assert_eq!(
                (v.version, v.fieldId, v.status),
                (FIELD_VALUE_V1, f, DCGM_ST_OK)
            );
            assert!(v.ts > 0);
        }
        assert!(text(&vals[2].value.str_).starts_with("GPU-"));
        assert!(
            (0..=150).contains(&vals[0].value.i64_),
            "temperature {}",
            vals[0].value.i64_
        );
        assert_eq!(
            dcgmGetLatestValuesForFields(h, 0, fields.as_ptr(), 2, vals.as_mut_ptr()),
            DCGM_ST_OK
        );
        assert_eq!(vals[1].fieldType, u16::from(b'd'));

        // Callbacks: one value per (entity, field); the v1 flavour refuses non-GPU groups.
        let mut seen: Vec<(u32, u32, u16)> = Vec::new();
        let mut next: c_longlong = 0;
        let user = (&mut seen as *mut Vec<(u32, u32, u16)>).cast::<c_void>();
        assert_eq!(
            dcgmGetLatestValues_v2(h, g, fg, Some(collect_v2), user),
            DCGM_ST_OK
        );
        assert_eq!(seen.len(), 3 * 4);
        seen.clear();
        assert_eq!(
            dcgmGetValuesSince_v2(h, g, fg, 0, &mut next, Some(collect_v2), user),
            DCGM_ST_OK
        );
        assert!(seen.contains(&(DCGM_FE_GPU, 0, 150)));
        assert!(next > 0, "nextSinceTimestamp advanced");
        assert_eq!(
            dcgmGetValuesSince(h, g, fg, 0, &mut next, Some(collect_v1), user),
            DCGM_ST_NOT_SUPPORTED
        );
        seen.clear();
        assert_eq!(
            dcgmGetLatestValues(h, g, fg, Some(collect_v1), user),
            DCGM_ST_OK
        );
        assert_eq!(
            seen.len(),
            2 * 4,
            "the switch is skipped by the v1 callback"
        );
        seen.clear();
        assert_eq!(
            dcgmGetLatestValues_v2(h, g, fg, Some(stop_at_once), user),
            DCGM_ST_OK,
            "a callback may stop early"
        );

        assert_eq!(dcgmUnwatchFields(h, g, fg), DCGM_ST_OK);
        assert_eq!(dcgmFieldGroupDestroy(h, fg), DCGM_ST_OK);
        assert_eq!(dcgmGroupDestroy(h, g), DCGM_ST_OK);
        assert_eq!(dcgmGroupGetInfo(h, g, &mut *info), DCGM_ST_NOT_CONFIGURED);
        assert_eq!(dcgmGroupDestroy(h, g), DCGM_ST_NOT_CONFIGURED);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

unsafe extern "C" fn collect_v2(
    g: u32,
    e: u32,
    v: *mut dcgmFieldValue_v1,
    n: c_int,
    user: *mut c_void,
) -> c_int {
    assert_eq!(n, 1);
    // SAFETY: `user` is the Vec passed by the test, `v` a value valid during the call.
    unsafe { (*user.cast::<Vec<(u32, u32, u16)>>()).push((g, e, (*v).fieldId)) };
    0
}

unsafe extern "C" fn collect_v1(
    gpu: u32,
    v: *mut dcgmFieldValue_v1,
    n: c_int,
    user: *mut c_void,
) -> c_int {
    assert_eq!(n, 1);
    // SAFETY: as in `collect_v2`.
    unsafe { (*user.cast::<Vec<(u32, u32, u16)>>()).push((DCGM_FE_GPU, gpu, (*v).fieldId)) };
    0
}

unsafe extern "C" fn stop_at_once(
    _: u32,
    _: u32,
    _: *mut dcgmFieldValue_v1,
    _: c_int,
    user: *mut c_void,
) -> c_int {
    // SAFETY: as in `collect_v2`.
    let seen = unsafe { &mut *user.cast::<Vec<(u32, u32, u16)>>() };
    assert!(seen.is_empty(), "called again after asking to stop");
    seen.push((0, 0, 0));
    1
}

#[test]
fn entities_latest_values_fill_v2_records() {
    let _g = lock();
    let h = fresh_embedded();
    let name = CString::new("v2").unwrap();
    let watched = [150u16, 155];
    // SAFETY: pointers are to live locals or heap arrays sized for entityCount × fieldCount.
    unsafe {
        let mut fg: dcgmFieldGrp_t = 0;
        assert_eq!(
            dcgmFieldGroupCreate(h, 2, watched.as_ptr(), name.as_ptr(), &mut fg),
            DCGM_ST_OK
        );
        assert_eq!(
            dcgmWatchFields(
                h,
                DCGM_GROUP_ALL_GPUS as dcgmGpuGrp_t,
                fg,
                1_000_000,
                60.0,
                0
            ),
            DCGM_ST_OK
        );
        assert_eq!(dcgmUpdateAllFields(h, 1), DCGM_ST_OK);

        let entities = [
            dcgmGroupEntityPair_t {
                entityGroupId: DCGM_FE_GPU,
                entityId: 2,
            },
            dcgmGroupEntityPair_t {
                entityGroupId: DCGM_FE_GPU,
                entityId: 5,
            },
        ];
        // 150/155 watched; 156 (int), 157 (double) and 54 (string) not.
        let fields = [150u16, 155, 156, 157, 54];
        let mut out: Vec<dcgmFieldValue_v2> =
            (0..10).map(|_| *boxed::<dcgmFieldValue_v2>(0)).collect();
        assert_eq!(
            dcgmEntitiesGetLatestValues(
                h,
                entities.as_ptr(),
                2,
                fields.as_ptr(),
                5,
                0,
                out.as_mut_ptr()
            ),
            DCGM_ST_OK
        );
        for v in &out {
            assert_eq!(v.version, FIELD_VALUE_V2);
            assert_eq!(v.entityGroupId, DCGM_FE_GPU);
        }
        let find = |e: u32, f: u16| {
            out.iter()
                .find(|v| v.entityId == e && v.fieldId == f)
                .expect("one value per pair")
        };
        assert!(find(5, 150).ts > 0);
        assert_eq!(find(5, 150).status, DCGM_ST_OK);
        assert_eq!(find(2, 155).fieldType, u16::from(b'd'));
        // Unwatched fields: a non-OK status and the BLANK sentinel in the payload.
        let int = find(2, 156);
        assert_eq!(
            (int.status, int.ts, int.value.i64_),
            (DCGM_ST_NOT_WATCHED, 0, DCGM_INT64_BLANK as i64)
        );
        assert_eq!(find(5, 157).value.dbl, DCGM_FP64_BLANK);
        assert_eq!(text(&find(5, 54).value.str_), "<<<NULL>>>");

        // Live data of a GPU field on a switch: NOT_SUPPORTED sentinel with status OK.
        let switch = [dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_SWITCH,
            entityId: 0,
        }];
        assert_eq!(
            dcgmEntitiesGetLatestValues(
                h,
                switch.as_ptr(),
                1,
                fields.as_ptr(),
                1,
                DCGM_FV_FLAG_LIVE_DATA,
                out.as_mut_ptr()
            ),
            DCGM_ST_OK
        );
        assert_eq!(
            (out[0].status, out[0].value.i64_),
            (DCGM_ST_OK, DCGM_INT64_NOT_SUPPORTED as i64)
        );

        // Too many entities (1025), too many fields (129), no entities, no fields.
        let too_many = vec![entities[0]; 1025];
        for (list, n_entities, n_fields) in [
            (too_many.as_ptr(), 1025, 1),
            (entities.as_ptr(), 2, 129),
            (entities.as_ptr(), 0, 1),
            (entities.as_ptr(), 1, 0),
        ] {
            assert_eq!(
                dcgmEntitiesGetLatestValues(
                    h,
                    list,
                    n_entities,
                    fields.as_ptr(),
                    n_fields,
                    0,
                    out.as_mut_ptr()
                ),
                DCGM_ST_BADPARAM,
                "{n_entities} entities, {n_fields} fields"
            );
        }
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn nvlink_status_fills_the_v4_and_v5_layouts() {
    let _g = lock();
    let h = fresh_embedded();
    // SAFETY: the buffers are at least as large as the struct version announced in them.
    unsafe {
        let mut v5: Box<dcgmNvLinkStatus_v5> = boxed(NVLINK_STATUS_V5);
        assert_eq!(dcgmGetNvLinkLinkStatus(h, &mut *v5), DCGM_ST_OK);
        assert_eq!(
            (v5.version, v5.numGpus, v5.numNvSwitches),
            (NVLINK_STATUS_V5, 8, 4)
        );
        assert_eq!(v5.gpus[7].entityId, 7);
        assert_eq!(&v5.gpus[0].linkState[..18], &[DcgmNvLinkLinkStateUp; 18]);
        assert_eq!(v5.gpus[7].linkState[17], DcgmNvLinkLinkStateDown);
        assert_eq!(
            &v5.gpus[0].linkState[18..],
            &[DcgmNvLinkLinkStateNotSupported; 18],
            "H100 has 18 links"
        );
        assert_eq!(v5.nvSwitches[3].linkState[63], DcgmNvLinkLinkStateDown);

        // A 4.0-4.5 client passes the smaller v4 struct: same data, and not one byte past it.
        let size_v4 = std::mem::size_of::<dcgmNvLinkStatus_v4>();
        let mut buf: Box<dcgmNvLinkStatus_v5> = boxed(NVLINK_STATUS_V4);
        let raw = (&mut *buf as *mut dcgmNvLinkStatus_v5).cast::<u8>();
        ptr::write_bytes(
            raw.add(size_v4),
            0xab,
            std::mem::size_of::<dcgmNvLinkStatus_v5>() - size_v4,
        );
        assert_eq!(dcgmGetNvLinkLinkStatus(h, &mut *buf), DCGM_ST_OK);
        let v4 = &*raw.cast::<dcgmNvLinkStatus_v4>();
        assert_eq!(
            (v4.version, v4.numGpus, v4.numNvSwitches),
            (NVLINK_STATUS_V4, 8, 4)
        );
        assert_eq!(v4.gpus[7].linkState[17], DcgmNvLinkLinkStateDown);
        assert_eq!(v4.gpus[6].linkState[17], DcgmNvLinkLinkStateUp);
        assert_eq!(v4.nvSwitches[3].entityId, 3);
        let tail = std::slice::from_raw_parts(
            raw.add(size_v4),
            std::mem::size_of::<dcgmNvLinkStatus_v5>() - size_v4,
        );
        assert!(tail.iter().all(|&b| b == 0xab), "wrote past the v4 struct");

        let mut bad: Box<dcgmNvLinkStatus_v5> = boxed(0x0300_15bc);
        assert_eq!(dcgmGetNvLinkLinkStatus(h, &mut *bad), DCGM_ST_VER_MISMATCH);

        let mut p2p: Box<dcgmNvLinkP2PStatus_v1> = boxed(NVLINK_P2P_STATUS_V1);
        assert_eq!(dcgmGetNvLinkP2PStatus(h, &mut *p2p), DCGM_ST_OK);
        assert_eq!(p2p.numGpus, 8);
        assert_eq!(p2p.gpus[1].linkStatus[2], DcgmNvLinkP2pStatusOK);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn versioned_queries_check_their_versions() {
    let _g = lock();
    let h = fresh_embedded();
    // SAFETY: heap structs of the announced versions.
    unsafe {
        let mut attr: Box<dcgmDeviceAttributes_v3> = boxed(DEVICE_ATTRIBUTES_V3);
        assert_eq!(dcgmGetDeviceAttributes(h, 1, &mut *attr), DCGM_ST_OK);
        assert_eq!(attr.version, DEVICE_ATTRIBUTES_V3);
        assert!(text(&attr.identifiers.uuid).starts_with("GPU-"));
        assert_eq!(text(&attr.identifiers.deviceName), "NVIDIA H100 80GB HBM3");
        assert_eq!(text(&attr.identifiers.driverVersion), "550.54.15");
        assert!(attr.memoryUsage.fbTotal > 0);
        assert!(attr.clockSets.count > 0);
        let mut old: Box<dcgmDeviceAttributes_v3> = boxed(DEVICE_ATTRIBUTES_V3 - (1 << 24));
        assert_eq!(
            dcgmGetDeviceAttributes(h, 1, &mut *old),
            DCGM_ST_VER_MISMATCH
        );

        let mut mig: Box<dcgmMigHierarchy_v2> = boxed(MIG_HIERARCHY_V2);
        assert_eq!(dcgmGetGpuInstanceHierarchy(h, &mut *mig), DCGM_ST_OK);
        assert_eq!(mig.count, 0, "the built-in node has no MIG");
        let mut mig1: Box<dcgmMigHierarchy_v2> = boxed(MIG_HIERARCHY_V2 - (1 << 24));
        assert_eq!(
            dcgmGetGpuInstanceHierarchy(h, &mut *mig1),
            DCGM_ST_VER_MISMATCH
        );

        let mut cpu: Box<dcgmCpuHierarchy_v1> = boxed(CPU_HIERARCHY_V1);
        // The built-in node has no Grace CPUs: the sysmon module is not loaded.
        assert_eq!(dcgmGetCpuHierarchy(h, &mut *cpu), DCGM_ST_MODULE_NOT_LOADED);
        let mut cpu_bad: Box<dcgmCpuHierarchy_v1> = boxed(CPU_HIERARCHY_V1 + 1);
        assert_eq!(dcgmGetCpuHierarchy(h, &mut *cpu_bad), DCGM_ST_VER_MISMATCH);

        let mut mg: Box<dcgmProfGetMetricGroups_v3> = boxed(PROF_GET_METRIC_GROUPS_V3);
        let r = dcgmProfGetSupportedMetricGroups(h, &mut *mg);
        assert!(r == DCGM_ST_OK || r == DCGM_ST_MODULE_NOT_LOADED, "{r}");
        let mut mg_bad: Box<dcgmProfGetMetricGroups_v3> = boxed(0x0200_0560);
        assert_eq!(
            dcgmProfGetSupportedMetricGroups(h, &mut *mg_bad),
            DCGM_ST_VER_MISMATCH
        );

        // dcgmVersionInfo_v2: u32 version + char[512].
        let mut vi = vec![0u32; 129];
        vi[0] = 516 | 2 << 24;
        assert_eq!(dcgmVersionInfo(vi.as_mut_ptr().cast()), DCGM_ST_OK);
        let raw = std::slice::from_raw_parts(vi.as_ptr().add(1).cast::<std::ffi::c_char>(), 512);
        assert!(text(raw).contains("version:4.6.0"));

        // Health: a check of a group with watches set, on the 1 MB v5 response.
        let name = CString::new("health").unwrap();
        let mut g: dcgmGpuGrp_t = 0;
        assert_eq!(
            dcgmGroupCreate(h, DCGM_GROUP_DEFAULT, name.as_ptr(), &mut g),
            DCGM_ST_OK
        );
        assert_eq!(dcgmHealthSet(h, g, DCGM_HEALTH_WATCH_ALL), DCGM_ST_OK);
        let mut systems: dcgmHealthSystems_t = 0;
        assert_eq!(dcgmHealthGet(h, g, &mut systems), DCGM_ST_OK);
        assert_eq!(systems, DCGM_HEALTH_WATCH_ALL);
        let mut resp: Box<dcgmHealthResponse_v5> = boxed(HEALTH_RESPONSE_V5);
        assert_eq!(dcgmHealthCheck(h, g, &mut *resp), DCGM_ST_OK);
        assert_eq!(
            (resp.version, resp.overallHealth, resp.incidentCount),
            (HEALTH_RESPONSE_V5, DCGM_HEALTH_RESULT_PASS, 0)
        );
        let mut resp4: Box<dcgmHealthResponse_v5> = boxed(HEALTH_RESPONSE_V5 - (1 << 24));
        assert_eq!(dcgmHealthCheck(h, g, &mut *resp4), DCGM_ST_VER_MISMATCH);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

#[test]
fn unsimulated_functions_are_not_supported() {
    let _g = lock();
    let h = fresh_embedded();
    let mut status = 0usize;
    // SAFETY: stubs never touch their pointer arguments; the ones passed are valid anyway.
    unsafe {
        assert_eq!(dcgmPolicyTrigger(h), DCGM_ST_NOT_SUPPORTED);
        assert_eq!(dcgmJobRemoveAll(h), DCGM_ST_NOT_SUPPORTED);
        assert_eq!(
            dcgmGetDeviceTopology(h, 0, ptr::null_mut()),
            DCGM_ST_NOT_SUPPORTED
        );
        assert_eq!(dcgmStatusCreate(&mut status), DCGM_ST_NOT_SUPPORTED);
        assert_eq!(
            dcgmConfigGet(h, 2, 0, 1, ptr::null_mut(), 0),
            DCGM_ST_NOT_SUPPORTED
        );
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
}

/// tests/c/client.c, compiled against dcgm-sys's header subset, finds the simulator with a
/// plain `dlopen("libdcgm.so.4")` through `LD_LIBRARY_PATH`: a C client works unchanged.
/// Skipped (with a note) where no C compiler is installed.
#[test]
fn a_c_client_works_unchanged() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_path();
    let out = std::env::temp_dir().join(format!("dcgm-sim-c-client-{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compiled = std::process::Command::new(&cc)
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(manifest.join("../dcgm-sys/include"))
        .arg(manifest.join("tests/c/client.c"))
        .arg("-ldl")
        .arg("-o")
        .arg(&out)
        .status();
    match compiled {
        Err(e) => {
            support::skip::skip(&format!("no C compiler ({cc}: {e})"));
            return;
        }
        Ok(s) => assert!(s.success(), "compiling tests/c/client.c failed"),
    }
    // The client asks for "libdcgm.so.4": give it a directory where that name leads to the
    // library under test, whatever state the target directory's symlinks are in.
    let lib_dir = std::env::temp_dir().join(format!("dcgm-sim-c-lib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&lib_dir);
    std::fs::create_dir_all(&lib_dir).expect("library directory");
    std::os::unix::fs::symlink(
        std::fs::canonicalize(&lib).expect("library path"),
        lib_dir.join("libdcgm.so.4"),
    )
    .expect("libdcgm.so.4 symlink");
    let run = std::process::Command::new(&out)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env_remove("DCGM_SIM_PROFILE")
        .output()
        .expect("run the C client");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_dir_all(&lib_dir);
    assert!(
        run.status.success(),
        "C client failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "ok");
}
