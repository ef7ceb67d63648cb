/*
 * Makes a host engine lose a GPU, or find it again, the way a GPU falls off the bus: through
 * DCGM's NVML-injection API (dcgmRemoveNvmlInjectedGpu / dcgmRestoreNvmlInjectedGpu, exported
 * by a libdcgm.so.4 built with the injection library, as the kit's is). The injected NVML then
 * stops listing the GPU; DCGM's event thread sees it missing (UpdateLostGpus) and marks it
 * Lost, and Ok again once it is listed. Nothing like a driver unbind event is sent, so DCGM
 * does not detach it.
 *
 * usage: inject_gpu HOST:PORT remove|restore GPU-UUID
 * Prints "ok" or "failed: <status>", exits 0 or 1 (2 for a usage or loading error).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "dcgm_subset.h"

#define MAKE_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned long)(ver) << 24U)))

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
    if (argc != 4 || (strcmp(argv[2], "remove") != 0 && strcmp(argv[2], "restore") != 0))
    {
        fprintf(stderr, "usage: %s HOST:PORT remove|restore GPU-UUID\n", argv[0]);
        return 2;
    }
    lib = dlopen("libdcgm.so.4", RTLD_LAZY | RTLD_GLOBAL);
    if (!lib)
    {
        fprintf(stderr, "libdcgm.so.4 not found: %s\n", dlerror());
        return 2;
    }
    dcgmReturn_t (*init)(void)                                                     = sym("dcgmInit");
    dcgmReturn_t (*shutdown)(void)                                                 = sym("dcgmShutdown");
    dcgmReturn_t (*connect)(const char *, dcgmConnectV2Params_v2 *, dcgmHandle_t *) = sym("dcgmConnect_v2");
    dcgmReturn_t (*disconnect)(dcgmHandle_t)                                       = sym("dcgmDisconnect");
    int remove = strcmp(argv[2], "remove") == 0;
    dcgmReturn_t (*change)(dcgmHandle_t, const char *)
        = sym(remove ? "dcgmRemoveNvmlInjectedGpu" : "dcgmRestoreNvmlInjectedGpu");
    if (!init || !shutdown || !connect || !disconnect || !change)
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
