/*
 * A plain C DCGM client, written the way go-dcgm and NVIDIA's stub loader work: it only
 * knows the header, finds the library with dlopen("libdcgm.so.4") (LD_LIBRARY_PATH picks
 * the simulator) and resolves every function with dlsym. Built and run by tests/abi.rs.
 *
 * Prints "ok" and exits 0 when every check passes; otherwise names the failed check.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcgm_subset.h"

#define MAKE_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned long)(ver) << 24U)))

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
    {
        fprintf(stderr, "missing symbol %s\n", name);
        exit(1);
    }
    return p;
}

#define CHECK(cond)                                                  \
    do                                                               \
    {                                                                \
        if (!(cond))                                                 \
        {                                                            \
            fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #cond); \
            return 1;                                                \
        }                                                            \
    } while (0)

int main(void)
{
    lib = dlopen("libdcgm.so.4", RTLD_LAZY | RTLD_GLOBAL);
    if (!lib)
    {
        fprintf(stderr, "libdcgm.so.4 not found: %s\n", dlerror());
        return 1;
    }

    dcgmReturn_t (*init)(void)                                     = sym("dcgmInit");
    dcgmReturn_t (*shutdown)(void)                                 = sym("dcgmShutdown");
    dcgmReturn_t (*start)(dcgmOperationMode_t, dcgmHandle_t *)     = sym("dcgmStartEmbedded");
    dcgmReturn_t (*stop)(dcgmHandle_t)                             = sym("dcgmStopEmbedded");
    const char *(*errstr)(dcgmReturn_t)                            = sym("errorString");
    dcgmReturn_t (*all_devices)(dcgmHandle_t, unsigned int *, int *) = sym("dcgmGetAllDevices");
    dcgmReturn_t (*attributes)(dcgmHandle_t, unsigned int, dcgmDeviceAttributes_v3 *) = sym("dcgmGetDeviceAttributes");
    dcgmReturn_t (*group_create)(dcgmHandle_t, dcgmGroupType_t, const char *, dcgmGpuGrp_t *) = sym("dcgmGroupCreate");
    dcgmReturn_t (*fg_create)(dcgmHandle_t, int, const unsigned short *, const char *, dcgmFieldGrp_t *)
        = sym("dcgmFieldGroupCreate");
    dcgmReturn_t (*watch)(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t, long long, double, int) = sym("dcgmWatchFields");
    dcgmReturn_t (*update)(dcgmHandle_t, int)                      = sym("dcgmUpdateAllFields");
    dcgmReturn_t (*entity_latest)(dcgmHandle_t, dcgm_field_entity_group_t, int, unsigned short *, unsigned int,
                                  dcgmFieldValue_v1 *)            = sym("dcgmEntityGetLatestValues");
    dcgm_field_meta_p (*field_by_id)(unsigned short)               = sym("DcgmFieldGetById");

    dcgmHandle_t h = 0;
    CHECK(init() == DCGM_ST_OK);
    CHECK(start(DCGM_OPERATION_MODE_AUTO, &h) == DCGM_ST_OK);
    CHECK(h == DCGM_EMBEDDED_HANDLE);
    CHECK(strcmp(errstr(DCGM_ST_CONNECTION_NOT_VALID), "Host engine connection invalid/disconnected") == 0);
    CHECK(errstr(-2) == NULL);

    unsigned int gpus[DCGM_MAX_NUM_DEVICES];
    int count = 0;
    CHECK(all_devices(h, gpus, &count) == DCGM_ST_OK);
    CHECK(count > 0);

    /* Big structs go on the heap, as the API documentation advises. */
    dcgmDeviceAttributes_v3 *attr = calloc(1, sizeof(*attr));
    CHECK(attr != NULL);
    attr->version = MAKE_VERSION(dcgmDeviceAttributes_v3, 3);
    CHECK(attr->version == 0x03001464);
    CHECK(attributes(h, gpus[0], attr) == DCGM_ST_OK);
    CHECK(strncmp(attr->identifiers.uuid, "GPU-", 4) == 0);
    free(attr);

    dcgm_field_meta_p meta = field_by_id(150);
    CHECK(meta != NULL && meta->fieldType == DCGM_FT_INT64 && strcmp(meta->tag, "gpu_temp") == 0);
    CHECK(meta->valueFormat != NULL);

    dcgmGpuGrp_t group;
    dcgmFieldGrp_t fields;
    unsigned short ids[] = { 150, 155 };
    CHECK(group_create(h, DCGM_GROUP_DEFAULT, "c-client", &group) == DCGM_ST_OK);
    CHECK(fg_create(h, 2, ids, "c-client", &fields) == DCGM_ST_OK);
    CHECK(watch(h, group, fields, 1000000, 60.0, 0) == DCGM_ST_OK);
    CHECK(update(h, 1) == DCGM_ST_OK);

    dcgmFieldValue_v1 values[2];
    memset(values, 0, sizeof(values));
    CHECK(entity_latest(h, DCGM_FE_GPU, (int)gpus[0], ids, 2, values) == DCGM_ST_OK);
    CHECK(values[0].version == MAKE_VERSION(dcgmFieldValue_v1, 1));
    CHECK(values[0].fieldId == 150 && values[0].status == DCGM_ST_OK && values[0].ts > 0);
    CHECK(values[1].fieldType == DCGM_FT_DOUBLE && values[1].value.dbl > 0.0);

    CHECK(stop(h) == DCGM_ST_OK);
    CHECK(shutdown() == DCGM_ST_OK);
    dlclose(lib);
    printf("ok\n");
    return 0;
}
