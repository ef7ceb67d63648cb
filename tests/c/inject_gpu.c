/*
 * Makes a host engine lose a GPU, or find it again, the way a GPU falls off the bus: through
 * DCGM's NVML-injection API (dcgmRemoveNvmlInjectedGpu / dcgmRestoreNvmlInjectedGpu, exported
 * by a libdcgm.so.4 built with the injection library, as the kit's is). The injected NVML then
 * stops listing the GPU; DCGM's event thread sees it missing (UpdateLostGpus) and marks it
 * Lost, and Ok again once it is listed. Nothing like a driver unbind event is sent, so DCGM
 * does not detach it.
 *
 * With `add-instance GPU-ID` it adds a GPU instance (and one compute instance in it) to GPU
 * GPU-ID of the engine's MIG hierarchy while the engine runs (dcgmCreateFakeEntities, DCGM's own
 * way of testing MIG without MIG hardware): what a client sees of a MIG re-partition.
 *
 * usage: inject_gpu HOST:PORT remove|restore GPU-UUID
 *        inject_gpu HOST:PORT add-instance GPU-ID
 * Prints "ok" or "failed: <status>", exits 0 or 1 (2 for a usage or loading error).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcgm_subset.h"
#include "open_dcgm.h"

#define MAKE_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned long)(ver) << 24U)))

/* dcgm_structs_internal.h's dcgmCreateFakeEntities_v2 over dcgm_structs.h's (v1)
 * dcgmMigHierarchyInfo_t: neither is in our subset (a test API). */
typedef struct
{
    dcgmGroupEntityPair_t entity;
    dcgmGroupEntityPair_t parent;
    unsigned int sliceProfile; /* dcgmMigProfile_t, an enum */
} mig_hierarchy_info_v1;

typedef struct
{
    unsigned int version;
    unsigned int numToCreate;
    mig_hierarchy_info_v1 entityList[DCGM_MAX_HIERARCHY_INFO];
} fake_entities_v2;

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "libdcgm.so.4 has no %s\n", name);
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 4
        || (strcmp(argv[2], "remove") != 0 && strcmp(argv[2], "restore") != 0
            && strcmp(argv[2], "add-instance") != 0))
    {
        fprintf(stderr, "usage: %s HOST:PORT remove|restore GPU-UUID | add-instance GPU-ID\n", argv[0]);
        return 2;
    }
    lib = open_dcgm();
    dcgmReturn_t (*init)(void)                                                     = sym("dcgmInit");
    dcgmReturn_t (*shutdown)(void)                                                 = sym("dcgmShutdown");
    dcgmReturn_t (*connect)(const char *, dcgmConnectV2Params_v2 *, dcgmHandle_t *) = sym("dcgmConnect_v2");
    dcgmReturn_t (*disconnect)(dcgmHandle_t)                                       = sym("dcgmDisconnect");
    int remove = strcmp(argv[2], "remove") == 0;
    int add    = strcmp(argv[2], "add-instance") == 0;
    dcgmReturn_t (*change)(dcgmHandle_t, const char *)
        = add ? NULL : sym(remove ? "dcgmRemoveNvmlInjectedGpu" : "dcgmRestoreNvmlInjectedGpu");
    dcgmReturn_t (*fake)(dcgmHandle_t, fake_entities_v2 *) = add ? sym("dcgmCreateFakeEntities") : NULL;
    if (!init || !shutdown || !connect || !disconnect || (!change && !fake))
        return 2;

    dcgmReturn_t rc = init();
    if (rc != DCGM_ST_OK)
    {
        printf("failed: dcgmInit %d\n", (int)rc);
        return 1;
    }
    dcgmConnectV2Params_v2 p;
    memset(&p, 0, sizeof(p));
    p.version   = MAKE_VERSION(dcgmConnectV2Params_v2, 2);
    p.timeoutMs = 5000;
    dcgmHandle_t h;
    rc = connect(argv[1], &p, &h);
    if (rc != DCGM_ST_OK)
    {
        printf("failed: dcgmConnect_v2 %d\n", (int)rc);
        shutdown();
        return 1;
    }
    if (add)
    {
        static fake_entities_v2 fe;
        memset(&fe, 0, sizeof(fe));
        fe.version                             = MAKE_VERSION(fake_entities_v2, 2);
        fe.numToCreate                         = 1;
        fe.entityList[0].parent.entityGroupId  = DCGM_FE_GPU;
        fe.entityList[0].parent.entityId       = (unsigned int)atoi(argv[3]);
        fe.entityList[0].entity.entityGroupId  = DCGM_FE_GPU_I;
        rc                                     = fake(h, &fe);
        if (rc == DCGM_ST_OK)
        {
            unsigned int gi = fe.entityList[0].entity.entityId;
            memset(&fe, 0, sizeof(fe));
            fe.version                            = MAKE_VERSION(fake_entities_v2, 2);
            fe.numToCreate                        = 1;
            fe.entityList[0].parent.entityGroupId = DCGM_FE_GPU_I;
            fe.entityList[0].parent.entityId      = gi;
            fe.entityList[0].entity.entityGroupId = DCGM_FE_GPU_CI;
            rc                                    = fake(h, &fe);
        }
    }
    else
        rc = change(h, argv[3]);
    disconnect(h);
    shutdown();
    if (rc != DCGM_ST_OK)
    {
        printf("failed: %d\n", (int)rc);
        return 1;
    }
    printf("ok\n");
    return 0;
}
