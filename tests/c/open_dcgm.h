/*
 * Loads libdcgm.so.4 (from LD_LIBRARY_PATH) for the test clients to dlsym their calls from;
 * exits 2, saying why, where it cannot.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *open_dcgm(void)
{
    void *handle = dlopen("libdcgm.so.4", RTLD_LAZY | RTLD_GLOBAL);
    if (!handle)
    {
        fprintf(stderr, "libdcgm.so.4 not found: %s\n", dlerror());
        exit(2);
    }
    return handle;
}
