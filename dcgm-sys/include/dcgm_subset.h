/*
 * dcgm_subset.h: the part of the DCGM C API that this project uses.
 *
 * Written for this project from NVIDIA's published DCGM 4.6.0 headers
 * (github.com/NVIDIA/DCGM, tag 4.6.0 / commit 72fa3fe: dcgmlib/dcgm_structs.h,
 * dcgm_agent.h, dcgm_fields.h). Only declarations are here; the library is
 * loaded at run time, so nothing is linked against it.
 *
 * Struct sizes and version numbers are asserted in dcgm-sys/src/layout.rs
 * against values measured from the real 4.6.0 headers.
 *
 * Regenerate the Rust bindings with dcgm-sys/regen-bindings.sh.
 */
#ifndef DCGM_SUBSET_H
#define DCGM_SUBSET_H

#include <stdint.h>

#define DCGM_SUBSET_VERSION "4.6.0"

/* ---------------------------------------------------------------- handles */
typedef uintptr_t dcgmHandle_t;
typedef uintptr_t dcgmGpuGrp_t;
typedef uintptr_t dcgmFieldGrp_t;
typedef unsigned int dcgm_field_eid_t;

/* ----------------------------------------------------------- return codes */
typedef enum dcgmReturn_enum
{
    DCGM_ST_OK                          = 0,
    DCGM_ST_BADPARAM                    = -1,
    DCGM_ST_GENERIC_ERROR               = -3,
    DCGM_ST_MEMORY                      = -4,
    DCGM_ST_NOT_CONFIGURED              = -5,
    DCGM_ST_NOT_SUPPORTED               = -6,
    DCGM_ST_INIT_ERROR                  = -7,
    DCGM_ST_NVML_ERROR                  = -8,
    DCGM_ST_PENDING                     = -9,
    DCGM_ST_UNINITIALIZED               = -10,
    DCGM_ST_TIMEOUT                     = -11,
    DCGM_ST_VER_MISMATCH                = -12,
    DCGM_ST_UNKNOWN_FIELD               = -13,
    DCGM_ST_NO_DATA                     = -14,
    DCGM_ST_STALE_DATA                  = -15,
    DCGM_ST_NOT_WATCHED                 = -16,
    DCGM_ST_NO_PERMISSION               = -17,
    DCGM_ST_GPU_IS_LOST                 = -18,
    DCGM_ST_RESET_REQUIRED              = -19,
    DCGM_ST_FUNCTION_NOT_FOUND          = -20,
    DCGM_ST_CONNECTION_NOT_VALID        = -21,
    DCGM_ST_GPU_NOT_SUPPORTED           = -22,
    DCGM_ST_GROUP_INCOMPATIBLE          = -23,
    DCGM_ST_MAX_LIMIT                   = -24,
    DCGM_ST_LIBRARY_NOT_FOUND           = -25,
    DCGM_ST_DUPLICATE_KEY               = -26,
    DCGM_ST_GPU_IN_SYNC_BOOST_GROUP     = -27,
    DCGM_ST_GPU_NOT_IN_SYNC_BOOST_GROUP = -28,
    DCGM_ST_REQUIRES_ROOT               = -29,
    DCGM_ST_NVVS_ERROR                  = -30,
    DCGM_ST_INSUFFICIENT_SIZE           = -31,
    DCGM_ST_FIELD_UNSUPPORTED_BY_API    = -32,
    DCGM_ST_MODULE_NOT_LOADED           = -33,
    DCGM_ST_IN_USE                      = -34,
    DCGM_ST_GROUP_IS_EMPTY              = -35,
    DCGM_ST_PROFILING_NOT_SUPPORTED     = -36,
    DCGM_ST_PROFILING_LIBRARY_ERROR     = -37,
    DCGM_ST_PROFILING_MULTI_PASS        = -38,
    DCGM_ST_DIAG_ALREADY_RUNNING        = -39,
    DCGM_ST_DIAG_BAD_JSON               = -40,
    DCGM_ST_DIAG_BAD_LAUNCH             = -41,
    DCGM_ST_DIAG_UNUSED                 = -42,
    DCGM_ST_DIAG_THRESHOLD_EXCEEDED     = -43,
    DCGM_ST_INSUFFICIENT_DRIVER_VERSION = -44,
    DCGM_ST_INSTANCE_NOT_FOUND          = -45,
    DCGM_ST_COMPUTE_INSTANCE_NOT_FOUND  = -46,
    DCGM_ST_CHILD_NOT_KILLED            = -47,
    DCGM_ST_3RD_PARTY_LIBRARY_ERROR     = -48,
    DCGM_ST_INSUFFICIENT_RESOURCES      = -49,
    DCGM_ST_PLUGIN_EXCEPTION            = -50,
    DCGM_ST_NVVS_ISOLATE_ERROR          = -51,
    DCGM_ST_NVVS_BINARY_NOT_FOUND       = -52,
    DCGM_ST_NVVS_KILLED                 = -53,
    DCGM_ST_PAUSED                      = -54,
    DCGM_ST_ALREADY_INITIALIZED         = -55,
    DCGM_ST_NVML_NOT_LOADED             = -56,
    DCGM_ST_NVML_DRIVER_TIMEOUT         = -57,
    DCGM_ST_NVVS_NO_AVAILABLE_TEST      = -58,
    DCGM_ST_MNDIAG_CONNECTION_NOT_AVAILABLE = -59,
    DCGM_ST_MNDIAG_CONNECTION_UNAUTHORIZED  = -60,
    DCGM_ST_REMOTE_SSH_CONNECTION_FAILED    = -61,
    DCGM_ST_CHILD_SPAWN_FAILED              = -62,
    DCGM_ST_FILE_IO_ERROR                   = -63,
    DCGM_ST_CHILD_SIGNAL_RECEIVED           = -64,
    DCGM_ST_CALLER_ALREADY_STOPPED          = -65,
    DCGM_ST_DIAG_STOPPED                    = -66,
    DCGM_ST_GPUS_DETACHED                   = -67
} dcgmReturn_t;

/* -------------------------------------------------------------- constants */
#define DCGM_MAX_STR_LENGTH 256
#define DCGM_MAX_BLOB_LENGTH 4096
#define DCGM_MAX_NUM_DEVICES 32
#define DCGM_MAX_NUM_SWITCHES 12
#define DCGM_NVLINK_MAX_LINKS_PER_GPU 36
#define DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3 18
#define DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH 256
#define DCGM_MAX_NUM_GROUPS 64
#define DCGM_GROUP_MAX_ENTITIES_V1 64
#define DCGM_GROUP_MAX_ENTITIES_V2 1024
#define DCGM_MAX_NUM_FIELD_GROUPS 64
#define DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP 128
#define DCGM_MAX_CLOCKS 256
#define DCGM_MAX_INSTANCES_PER_GPU 8
#define DCGM_MAX_TOTAL_INSTANCES_PER_GPU 14
#define DCGM_MAX_HIERARCHY_INFO 448
#define DCGM_MAX_NUM_CPUS 8
#define DCGM_MAX_NUM_CPU_CORES 1024
#define DCGM_CPU_CORE_BITMASK_COUNT_V1 16
#define DCGM_PROF_MAX_NUM_GROUPS_V2 10
#define DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2 64
#define DCGM_MAX_TOPOLOGY_PATHS 31
#define DCGM_AFFINITY_BITMASK_ARRAY_SIZE 8
#define DCGM_HE_PORT_NUMBER 5555
#define DCGM_MAX_AGE_USEC_DEFAULT 30000000
#define DCGM_GEGE_FLAG_ONLY_SUPPORTED 0x00000001
#define DCGM_FV_FLAG_LIVE_DATA 0x00000001
#define DCGM_EMBEDDED_HANDLE 0x7fffffff

/* Special group ids */
#define DCGM_GROUP_ALL_GPUS 0x7fffffff
#define DCGM_GROUP_ALL_NVSWITCHES 0x7ffffffe
#define DCGM_GROUP_ALL_INSTANCES 0x7ffffffd
#define DCGM_GROUP_ALL_COMPUTE_INSTANCES 0x7ffffffc
#define DCGM_GROUP_ALL_ENTITIES 0x7ffffffb
#define DCGM_GROUP_NULL 0x7ffffffa

/* Blank sentinels (the value is stored in the payload itself) */
#define DCGM_INT32_BLANK 0x7ffffff0
#define DCGM_INT32_NOT_FOUND (DCGM_INT32_BLANK + 1)
#define DCGM_INT32_NOT_SUPPORTED (DCGM_INT32_BLANK + 2)
#define DCGM_INT32_NOT_PERMISSIONED (DCGM_INT32_BLANK + 3)
#define DCGM_INT64_BLANK 0x7ffffffffffffff0
#define DCGM_INT64_NOT_FOUND (DCGM_INT64_BLANK + 1)
#define DCGM_INT64_NOT_SUPPORTED (DCGM_INT64_BLANK + 2)
#define DCGM_INT64_NOT_PERMISSIONED (DCGM_INT64_BLANK + 3)
#define DCGM_FP64_BLANK 140737488355328.0
#define DCGM_FP64_NOT_FOUND (DCGM_FP64_BLANK + 1.0)
#define DCGM_FP64_NOT_SUPPORTED (DCGM_FP64_BLANK + 2.0)
#define DCGM_FP64_NOT_PERMISSIONED (DCGM_FP64_BLANK + 3.0)
#define DCGM_STR_BLANK "<<<NULL>>>"
#define DCGM_STR_NOT_FOUND "<<<NOT_FOUND>>>"
#define DCGM_STR_NOT_SUPPORTED "<<<NOT_SUPPORTED>>>"
#define DCGM_STR_NOT_PERMISSIONED "<<<NOT_PERM>>>"

/* Field types (dcgm_fields.h) */
#define DCGM_FT_BINARY 'b'
#define DCGM_FT_DOUBLE 'd'
#define DCGM_FT_INT64 'i'
#define DCGM_FT_STRING 's'
#define DCGM_FT_TIMESTAMP 't'
#define DCGM_FS_GLOBAL 0
#define DCGM_FS_ENTITY 1
#define DCGM_FI_MAX_FIELDS 1534

/* ----------------------------------------------------------------- enums */
typedef enum dcgm_field_entity_group_t
{
    DCGM_FE_NONE     = 0,
    DCGM_FE_GPU      = 1,
    DCGM_FE_VGPU     = 2,
    DCGM_FE_SWITCH   = 3,
    DCGM_FE_GPU_I    = 4,
    DCGM_FE_GPU_CI   = 5,
    DCGM_FE_LINK     = 6,
    DCGM_FE_CPU      = 7,
    DCGM_FE_CPU_CORE = 8,
    DCGM_FE_CONNECTX = 9,
    DCGM_FE_COUNT    = 10
} dcgm_field_entity_group_t;

typedef enum dcgmOperationMode_enum
{
    DCGM_OPERATION_MODE_AUTO   = 1,
    DCGM_OPERATION_MODE_MANUAL = 2
} dcgmOperationMode_t;

typedef enum dcgmGroupType_enum
{
    DCGM_GROUP_DEFAULT                   = 0,
    DCGM_GROUP_EMPTY                     = 1,
    DCGM_GROUP_DEFAULT_NVSWITCHES        = 2,
    DCGM_GROUP_DEFAULT_INSTANCES         = 3,
    DCGM_GROUP_DEFAULT_COMPUTE_INSTANCES = 4,
    DCGM_GROUP_DEFAULT_EVERYTHING        = 5
} dcgmGroupType_t;

typedef enum
{
    DcgmLoggingSeverityUnspecified = -1,
    DcgmLoggingSeverityNone        = 0,
    DcgmLoggingSeverityFatal       = 1,
    DcgmLoggingSeverityError       = 2,
    DcgmLoggingSeverityWarning     = 3,
    DcgmLoggingSeverityInfo        = 4,
    DcgmLoggingSeverityDebug       = 5,
    DcgmLoggingSeverityVerbose     = 6
} DcgmLoggingSeverity_t;

/* Modules of the host engine and their states (dcgm_structs.h, DCGM 4.6.0). Modules are
   loaded lazily, by the first request a module serves; a denylisted one is never loaded. */
typedef enum
{
    DcgmModuleIdCore       = 0,
    DcgmModuleIdNvSwitch   = 1,
    DcgmModuleIdVGPU       = 2,
    DcgmModuleIdIntrospect = 3,
    DcgmModuleIdHealth     = 4,
    DcgmModuleIdPolicy     = 5,
    DcgmModuleIdConfig     = 6,
    DcgmModuleIdDiag       = 7,
    DcgmModuleIdProfiling  = 8,
    DcgmModuleIdSysmon     = 9,
    DcgmModuleIdMnDiag     = 10,
    DcgmModuleIdCount
} dcgmModuleId_t;

typedef enum
{
    DcgmModuleStatusNotLoaded  = 0,
    DcgmModuleStatusDenylisted = 1,
    DcgmModuleStatusFailed     = 2,
    DcgmModuleStatusLoaded     = 3,
    DcgmModuleStatusUnloaded   = 4,
    DcgmModuleStatusPaused     = 5,
    DcgmModuleStatusReloadable = 6
} dcgmModuleStatus_t;

typedef enum dcgmNvLinkLinkState_enum
{
    DcgmNvLinkLinkStateNotSupported = 0,
    DcgmNvLinkLinkStateDisabled     = 1,
    DcgmNvLinkLinkStateDown         = 2,
    DcgmNvLinkLinkStateUp           = 3
} dcgmNvLinkLinkState_t;

typedef enum dcgmNvLinkGpuP2PStatus_enum
{
    DcgmNvLinkP2pStatusOK                   = 0,
    DcgmNvLinkP2pStatusChipsetNotSupported  = 1,
    DcgmNvLinkP2pStatusGpuNotSupported      = 2,
    DcgmNvLinkP2pStatusTopologyNotSupported = 3,
    DcgmNvLinkP2pStatusDisabledByRegKey     = 4,
    DcgmNvLinkP2pStatusNotSupported         = 5,
    DcgmNvLinkP2pStatusUnknown              = 6
} dcgmNvLinkGpuP2PStatus_t;

typedef enum dcgmHealthSystems_enum
{
    DCGM_HEALTH_WATCH_PCIE              = 0x1,
    DCGM_HEALTH_WATCH_NVLINK            = 0x2,
    DCGM_HEALTH_WATCH_PMU               = 0x4,
    DCGM_HEALTH_WATCH_MCU               = 0x8,
    DCGM_HEALTH_WATCH_MEM               = 0x10,
    DCGM_HEALTH_WATCH_SM                = 0x20,
    DCGM_HEALTH_WATCH_INFOROM           = 0x40,
    DCGM_HEALTH_WATCH_THERMAL           = 0x80,
    DCGM_HEALTH_WATCH_POWER             = 0x100,
    DCGM_HEALTH_WATCH_DRIVER            = 0x200,
    DCGM_HEALTH_WATCH_NVSWITCH_NONFATAL = 0x400,
    DCGM_HEALTH_WATCH_NVSWITCH_FATAL    = 0x800,
    DCGM_HEALTH_WATCH_CONNECTX          = 0x1000,
    DCGM_HEALTH_WATCH_ALL               = 0xFFFFFFFF
} dcgmHealthSystems_t;

typedef enum dcgmHealthWatchResult_enum
{
    DCGM_HEALTH_RESULT_PASS = 0,
    DCGM_HEALTH_RESULT_WARN = 10,
    DCGM_HEALTH_RESULT_FAIL = 20
} dcgmHealthWatchResults_t;

typedef enum
{
    DcgmEntityStatusUnknown     = 0,
    DcgmEntityStatusOk          = 1,
    DcgmEntityStatusUnsupported = 2,
    DcgmEntityStatusInaccessible = 3,
    DcgmEntityStatusLost        = 4,
    DcgmEntityStatusFake        = 5,
    DcgmEntityStatusDisabled    = 6,
    DcgmEntityStatusDetached    = 7
} DcgmEntityStatus_t;

/* --------------------------------------------------------- field values */
typedef struct
{
    unsigned int version;
    unsigned short fieldId;
    unsigned short fieldType;
    int status;
    int64_t ts;
    union
    {
        int64_t i64;
        double dbl;
        char str[DCGM_MAX_STR_LENGTH];
        char blob[DCGM_MAX_BLOB_LENGTH];
    } value;
} dcgmFieldValue_v1;

typedef struct
{
    unsigned int version;
    dcgm_field_entity_group_t entityGroupId;
    dcgm_field_eid_t entityId;
    unsigned short fieldId;
    unsigned short fieldType;
    int status;
    unsigned int unused;
    int64_t ts;
    union
    {
        int64_t i64;
        double dbl;
        char str[DCGM_MAX_STR_LENGTH];
        char blob[DCGM_MAX_BLOB_LENGTH];
    } value;
} dcgmFieldValue_v2;

typedef int (*dcgmFieldValueEnumeration_f)(unsigned int gpuId,
                                           dcgmFieldValue_v1 *values,
                                           int numValues,
                                           void *userData);

typedef int (*dcgmFieldValueEntityEnumeration_f)(dcgm_field_entity_group_t entityGroupId,
                                                 dcgm_field_eid_t entityId,
                                                 dcgmFieldValue_v1 *values,
                                                 int numValues,
                                                 void *userData);

/* ------------------------------------------------------- connect / start */
typedef struct
{
    unsigned int version;
    unsigned int persistAfterDisconnect;
} dcgmConnectV2Params_v1;

typedef struct
{
    unsigned int version;
    unsigned int persistAfterDisconnect;
    unsigned int timeoutMs;
    unsigned int addressIsUnixSocket;
} dcgmConnectV2Params_v2;

typedef struct
{
    unsigned int version;
    unsigned int persistAfterDisconnect;
    unsigned int timeoutMs;
} dcgmConnectV3Params_v1;

typedef struct
{
    unsigned int version;
    dcgmOperationMode_t opMode;
    dcgmHandle_t dcgmHandle;
    const char *logFile;
    DcgmLoggingSeverity_t severity;
    unsigned int denyListCount;
    unsigned int denyList[10];
} dcgmStartEmbeddedV2Params_v1;

typedef struct
{
    unsigned int version;
    dcgmOperationMode_t opMode;
    dcgmHandle_t dcgmHandle;
    const char *logFile;
    DcgmLoggingSeverity_t severity;
    unsigned int denyListCount;
    const char *serviceAccount;
    unsigned int denyList[10];
} dcgmStartEmbeddedV2Params_v2;

typedef struct
{
    unsigned int version;
    dcgmOperationMode_t opMode;
    dcgmHandle_t dcgmHandle;
    const char *logFile;
    DcgmLoggingSeverity_t severity;
    unsigned int denyListCount;
    const char *serviceAccount;
    unsigned int denyList[16];
} dcgmStartEmbeddedV2Params_v3;

#define DCGM_MODULE_STATUSES_CAPACITY 16

typedef struct
{
    dcgmModuleId_t id;
    dcgmModuleStatus_t status;
} dcgmModuleGetStatusesModule_t;

typedef struct
{
    unsigned int version;
    unsigned int numStatuses;
    dcgmModuleGetStatusesModule_t statuses[DCGM_MODULE_STATUSES_CAPACITY];
} dcgmModuleGetStatuses_v1;

#define dcgmModuleGetStatuses_version1 MAKE_DCGM_VERSION(dcgmModuleGetStatuses_v1, 1)

/* ------------------------------------------------------ groups and MIG */
typedef struct
{
    dcgm_field_entity_group_t entityGroupId;
    dcgm_field_eid_t entityId;
} dcgmGroupEntityPair_t;

typedef struct
{
    unsigned int version;
    unsigned int count;
    char groupName[DCGM_MAX_STR_LENGTH];
    dcgmGroupEntityPair_t entityList[DCGM_GROUP_MAX_ENTITIES_V2];
} dcgmGroupInfo_v3;

typedef struct
{
    unsigned int version;
    unsigned int numFieldIds;
    dcgmFieldGrp_t fieldGroupId;
    char fieldGroupName[DCGM_MAX_STR_LENGTH];
    unsigned short fieldIds[DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP];
} dcgmFieldGroupInfo_v1;

typedef struct
{
    char gpuUuid[128];
    unsigned int nvmlGpuIndex;
    unsigned int nvmlInstanceId;
    unsigned int nvmlComputeInstanceId;
    unsigned int nvmlMigProfileId;
    unsigned int nvmlProfileSlices;
} dcgmMigEntityInfo_t;

typedef struct
{
    dcgmGroupEntityPair_t entity;
    dcgmGroupEntityPair_t parent;
    dcgmMigEntityInfo_t info;
} dcgmMigHierarchyInfo_v2;

typedef struct
{
    unsigned int version;
    unsigned int count;
    dcgmMigHierarchyInfo_v2 entityList[DCGM_MAX_HIERARCHY_INFO];
} dcgmMigHierarchy_v2;

/* ------------------------------------------------------ device attributes */
typedef struct
{
    int version;
    unsigned int memClock;
    unsigned int smClock;
} dcgmClockSet_v1;

typedef struct
{
    unsigned int version;
    unsigned int count;
    dcgmClockSet_v1 clockSet[DCGM_MAX_CLOCKS];
} dcgmDeviceSupportedClockSets_v1;

typedef struct
{
    unsigned int version;
    unsigned int slowdownTemp;
    unsigned int shutdownTemp;
} dcgmDeviceThermals_v1;

typedef struct
{
    unsigned int version;
    unsigned int curPowerLimit;
    unsigned int defaultPowerLimit;
    unsigned int enforcedPowerLimit;
    unsigned int minPowerLimit;
    unsigned int maxPowerLimit;
} dcgmDevicePowerLimits_v1;

typedef struct
{
    unsigned int version;
    char brandName[DCGM_MAX_STR_LENGTH];
    char deviceName[DCGM_MAX_STR_LENGTH];
    char pciBusId[DCGM_MAX_STR_LENGTH];
    char serial[DCGM_MAX_STR_LENGTH];
    char uuid[DCGM_MAX_STR_LENGTH];
    char vbios[DCGM_MAX_STR_LENGTH];
    char inforomImageVersion[DCGM_MAX_STR_LENGTH];
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char driverVersion[DCGM_MAX_STR_LENGTH];
    unsigned int virtualizationMode;
} dcgmDeviceIdentifiers_v1;

typedef struct
{
    unsigned int version;
    unsigned int bar1Total;
    unsigned int fbTotal;
    unsigned int fbUsed;
    unsigned int fbFree;
} dcgmDeviceMemoryUsage_v1;

typedef struct
{
    unsigned int version;
    unsigned int persistenceModeEnabled;
    unsigned int migModeEnabled;
    unsigned int confidentialComputeMode;
} dcgmDeviceSettings_v2;

typedef struct
{
    unsigned int version;
    dcgmDeviceSupportedClockSets_v1 clockSets;
    dcgmDeviceThermals_v1 thermalSettings;
    dcgmDevicePowerLimits_v1 powerLimits;
    dcgmDeviceIdentifiers_v1 identifiers;
    dcgmDeviceMemoryUsage_v1 memoryUsage;
    dcgmDeviceSettings_v2 settings;
} dcgmDeviceAttributes_v3;

/* ---------------------------------------------------------------- NVLink */
typedef struct
{
    dcgm_field_eid_t entityId;
    dcgmNvLinkLinkState_t linkState[DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3];
} dcgmNvLinkGpuLinkStatus_v3;

typedef struct
{
    dcgm_field_eid_t entityId;
    dcgmNvLinkLinkState_t linkState[DCGM_NVLINK_MAX_LINKS_PER_GPU];
} dcgmNvLinkGpuLinkStatus_v4;

typedef struct
{
    dcgm_field_eid_t entityId;
    dcgmNvLinkLinkState_t linkState[DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH];
} dcgmNvLinkNvSwitchLinkStatus_t;

typedef struct
{
    unsigned int version;
    unsigned int numGpus;
    dcgmNvLinkGpuLinkStatus_v3 gpus[DCGM_MAX_NUM_DEVICES];
    unsigned int numNvSwitches;
    dcgmNvLinkNvSwitchLinkStatus_t nvSwitches[DCGM_MAX_NUM_SWITCHES];
} dcgmNvLinkStatus_v4;

typedef struct
{
    unsigned int version;
    unsigned int numGpus;
    dcgmNvLinkGpuLinkStatus_v4 gpus[DCGM_MAX_NUM_DEVICES];
    unsigned int numNvSwitches;
    dcgmNvLinkNvSwitchLinkStatus_t nvSwitches[DCGM_MAX_NUM_SWITCHES];
} dcgmNvLinkStatus_v5;

typedef struct
{
    dcgm_field_eid_t entityId;
    dcgmNvLinkGpuP2PStatus_t linkStatus[DCGM_MAX_NUM_DEVICES];
} dcgmNvLinkGpuLinkP2PStatus_v1;

typedef struct
{
    unsigned int version;
    unsigned int numGpus;
    dcgmNvLinkGpuLinkP2PStatus_v1 gpus[DCGM_MAX_NUM_DEVICES];
} dcgmNvLinkP2PStatus_v1;

/* ------------------------------------------------------------------- CPUs */
typedef struct
{
    unsigned int version;
    uint64_t bitmask[DCGM_CPU_CORE_BITMASK_COUNT_V1];
} dcgmCpuHierarchyOwnedCores_v1;

typedef struct
{
    unsigned int cpuId;
    dcgmCpuHierarchyOwnedCores_v1 ownedCores;
} dcgmCpuHierarchyCpu_v1;

typedef struct
{
    unsigned int version;
    unsigned int numCpus;
    dcgmCpuHierarchyCpu_v1 cpus[DCGM_MAX_NUM_CPUS];
} dcgmCpuHierarchy_v1;

typedef struct
{
    unsigned int cpuId;
    dcgmCpuHierarchyOwnedCores_v1 ownedCores;
    char serial[DCGM_MAX_STR_LENGTH];
} dcgmCpuHierarchyCpu_v2;

typedef struct
{
    unsigned int version;
    unsigned int numCpus;
    dcgmCpuHierarchyCpu_v2 cpus[DCGM_MAX_NUM_CPUS];
} dcgmCpuHierarchy_v2;

/* -------------------------------------------------------------- profiling */
typedef struct
{
    unsigned short majorId;
    unsigned short minorId;
    unsigned int numFieldIds;
    unsigned short fieldIds[DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2];
} dcgmProfMetricGroupInfo_v2;

typedef struct
{
    unsigned int version;
    unsigned int unused;
    unsigned int gpuId;
    unsigned int numMetricGroups;
    dcgmProfMetricGroupInfo_v2 metricGroups[DCGM_PROF_MAX_NUM_GROUPS_V2];
} dcgmProfGetMetricGroups_v3;

/* ----------------------------------------------------------------- health */
typedef struct
{
    char msg[1024];
    unsigned int code;
} dcgmDiagErrorDetail_t;

typedef struct
{
    dcgmHealthSystems_t system;
    dcgmHealthWatchResults_t health;
    dcgmDiagErrorDetail_t error;
    dcgmGroupEntityPair_t entityInfo;
} dcgmIncidentInfo_t;

typedef struct
{
    unsigned int version;
    dcgmHealthWatchResults_t overallHealth;
    unsigned int incidentCount;
    dcgmIncidentInfo_t incidents[DCGM_GROUP_MAX_ENTITIES_V2];
} dcgmHealthResponse_v5;

/* --------------------------------------------------------- field metadata */
typedef struct
{
    char shortName[10];
    char unit[4];
    short width;
} dcgm_field_output_format_t;

typedef struct
{
    unsigned short fieldId;
    char fieldType;
    unsigned char size;
    char tag[48];
    int scope;
    int nvmlFieldId;
    dcgm_field_entity_group_t entityLevel;
    dcgm_field_output_format_t *valueFormat;
} dcgm_field_meta_t;

typedef const dcgm_field_meta_t *dcgm_field_meta_p;

/* Build information of the library (dcgm_structs.h). */
typedef struct
{
    unsigned int version;
    char rawBuildInfoString[DCGM_MAX_STR_LENGTH * 2];
} dcgmVersionInfo_v2;

#define dcgmVersionInfo_version2 MAKE_DCGM_VERSION(dcgmVersionInfo_v2, 2)

/* -------------------------------------------------------------- functions */
dcgmReturn_t dcgmInit(void);
dcgmReturn_t dcgmVersionInfo(dcgmVersionInfo_v2 *pVersionInfo);
dcgmReturn_t dcgmShutdown(void);
dcgmReturn_t dcgmStartEmbedded(dcgmOperationMode_t opMode, dcgmHandle_t *pDcgmHandle);
dcgmReturn_t dcgmStartEmbedded_v2(dcgmStartEmbeddedV2Params_v1 *params);
dcgmReturn_t dcgmStopEmbedded(dcgmHandle_t pDcgmHandle);
dcgmReturn_t dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_v2 *connectParams, dcgmHandle_t *pDcgmHandle);
dcgmReturn_t dcgmConnect_v3(const char *connectionString, dcgmConnectV3Params_v1 *connectParams, dcgmHandle_t *pDcgmHandle);
dcgmReturn_t dcgmDisconnect(dcgmHandle_t pDcgmHandle);
dcgmReturn_t dcgmHostengineVersionInfo(dcgmHandle_t pDcgmHandle, dcgmVersionInfo_v2 *pVersionInfo);
const char *errorString(dcgmReturn_t result);

dcgmReturn_t dcgmGetAllDevices(dcgmHandle_t pDcgmHandle, unsigned int gpuIdList[DCGM_MAX_NUM_DEVICES], int *count);
dcgmReturn_t dcgmGetAllSupportedDevices(dcgmHandle_t pDcgmHandle, unsigned int gpuIdList[DCGM_MAX_NUM_DEVICES], int *count);
dcgmReturn_t dcgmGetDeviceAttributes(dcgmHandle_t pDcgmHandle, unsigned int gpuId, dcgmDeviceAttributes_v3 *pDcgmAttr);
dcgmReturn_t dcgmGetGpuStatus(dcgmHandle_t pDcgmHandle, unsigned int gpuId, DcgmEntityStatus_t *status);
dcgmReturn_t dcgmGetEntityGroupEntities(dcgmHandle_t dcgmHandle,
                                        dcgm_field_entity_group_t entityGroup,
                                        dcgm_field_eid_t *entities,
                                        int *numEntities,
                                        unsigned int flags);
dcgmReturn_t dcgmGetGpuInstanceHierarchy(dcgmHandle_t dcgmHandle, dcgmMigHierarchy_v2 *hierarchy);
dcgmReturn_t dcgmGetNvLinkLinkStatus(dcgmHandle_t dcgmHandle, dcgmNvLinkStatus_v5 *linkStatus);
dcgmReturn_t dcgmGetNvLinkP2PStatus(dcgmHandle_t dcgmHandle, dcgmNvLinkP2PStatus_v1 *linkStatus);
dcgmReturn_t dcgmGetCpuHierarchy(dcgmHandle_t dcgmHandle, dcgmCpuHierarchy_v1 *cpuHierarchy);
dcgmReturn_t dcgmGetCpuHierarchy_v2(dcgmHandle_t dcgmHandle, dcgmCpuHierarchy_v2 *cpuHierarchy);
dcgmReturn_t dcgmProfGetSupportedMetricGroups(dcgmHandle_t pDcgmHandle, dcgmProfGetMetricGroups_v3 *metricGroups);
dcgmReturn_t dcgmModuleGetStatuses(dcgmHandle_t pDcgmHandle, dcgmModuleGetStatuses_v1 *moduleStatuses);

dcgmReturn_t dcgmGroupCreate(dcgmHandle_t pDcgmHandle, dcgmGroupType_t type, const char *groupName, dcgmGpuGrp_t *pDcgmGrpId);
dcgmReturn_t dcgmGroupDestroy(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId);
dcgmReturn_t dcgmGroupAddDevice(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, unsigned int gpuId);
dcgmReturn_t dcgmGroupAddEntity(dcgmHandle_t pDcgmHandle,
                                dcgmGpuGrp_t groupId,
                                dcgm_field_entity_group_t entityGroupId,
                                dcgm_field_eid_t entityId);
dcgmReturn_t dcgmGroupGetInfo(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, dcgmGroupInfo_v3 *pDcgmGroupInfo);
dcgmReturn_t dcgmFieldGroupCreate(dcgmHandle_t dcgmHandle,
                                  int numFieldIds,
                                  const unsigned short *fieldIds,
                                  const char *fieldGroupName,
                                  dcgmFieldGrp_t *dcgmFieldGroupId);
dcgmReturn_t dcgmFieldGroupDestroy(dcgmHandle_t dcgmHandle, dcgmFieldGrp_t dcgmFieldGroupId);

dcgmReturn_t dcgmWatchFields(dcgmHandle_t pDcgmHandle,
                             dcgmGpuGrp_t groupId,
                             dcgmFieldGrp_t fieldGroupId,
                             long long updateFreq,
                             double maxKeepAge,
                             int maxKeepSamples);
dcgmReturn_t dcgmUnwatchFields(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, dcgmFieldGrp_t fieldGroupId);
dcgmReturn_t dcgmUpdateAllFields(dcgmHandle_t pDcgmHandle, int waitForUpdate);
dcgmReturn_t dcgmGetValuesSince_v2(dcgmHandle_t pDcgmHandle,
                                   dcgmGpuGrp_t groupId,
                                   dcgmFieldGrp_t fieldGroupId,
                                   long long sinceTimestamp,
                                   long long *nextSinceTimestamp,
                                   dcgmFieldValueEntityEnumeration_f enumCB,
                                   void *userData);
dcgmReturn_t dcgmEntityGetLatestValues(dcgmHandle_t pDcgmHandle,
                                       dcgm_field_entity_group_t entityGroup,
                                       int entityId,
                                       unsigned short fields[],
                                       unsigned int count,
                                       dcgmFieldValue_v1 values[]);
dcgmReturn_t dcgmEntitiesGetLatestValues(dcgmHandle_t pDcgmHandle,
                                         dcgmGroupEntityPair_t entities[],
                                         unsigned int entityCount,
                                         unsigned short fields[],
                                         unsigned int fieldCount,
                                         unsigned int flags,
                                         dcgmFieldValue_v2 values[]);

dcgmReturn_t dcgmHealthSet(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, dcgmHealthSystems_t systems);
dcgmReturn_t dcgmHealthGet(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, dcgmHealthSystems_t *systems);
dcgmReturn_t dcgmHealthCheck(dcgmHandle_t pDcgmHandle, dcgmGpuGrp_t groupId, dcgmHealthResponse_v5 *results);

int DcgmFieldsInit(void);
int DcgmFieldsTerm(void);
dcgm_field_meta_p DcgmFieldGetById(unsigned short fieldId);
dcgm_field_meta_p DcgmFieldGetByTag(const char *tag);

#endif /* DCGM_SUBSET_H */
