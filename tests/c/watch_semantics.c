/*
 * The differential client of tests/it/conformance.rs: the same DCGM calls against any
 * libdcgm.so.4 (dcgm-sim's or NVIDIA's real one), printing what it observes as
 * "name: value" lines, so that the two libraries' answers can be compared line by line.
 *
 *   watch_semantics embedded|HOST:PORT [unbind]
 *
 * The observations are about DCGM's watch model (issue 28): a watch is one watcher per
 * (entity, field, connection); a second watch from the same connection updates it; any
 * unwatch holding the pair removes it; destroying a group or field group unwatches nothing;
 * a failed watch unwatches its pairs; an unwatched pair keeps answering its last sample;
 * dcgmGetValuesSince fails on a pair that is not watched. With "unbind", the client prints
 * "UNBIND GPU 1" and waits (up to 30 s) for GPU 1 to be Detached, which the test brings
 * about (the simulator's control file, or the real NVML injection's system-event file), then
 * observes what DCGM does with a Detached GPU.
 *
 * Timing is kept out of the observations: a field is "advancing" when its newest sample's
 * timestamp moved within 800 ms of a 100 ms watch, "frozen" when it did not.
 */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dcgm_subset.h"
#include "open_dcgm.h"

#define MAKE_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned long)(ver) << 24U)))
#define FREQ_US 100000LL

static void *lib;
static dcgmHandle_t h;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
    {
        fprintf(stderr, "missing symbol %s\n", name);
        exit(2);
    }
    return p;
}

static dcgmReturn_t (*group_create)(dcgmHandle_t, dcgmGroupType_t, const char *, dcgmGpuGrp_t *);
static dcgmReturn_t (*group_destroy)(dcgmHandle_t, dcgmGpuGrp_t);
static dcgmReturn_t (*group_add)(dcgmHandle_t, dcgmGpuGrp_t, dcgm_field_entity_group_t, dcgm_field_eid_t);
static dcgmReturn_t (*group_info)(dcgmHandle_t, dcgmGpuGrp_t, dcgmGroupInfo_v3 *);
static dcgmReturn_t (*fg_create)(dcgmHandle_t, int, const unsigned short *, const char *, dcgmFieldGrp_t *);
static dcgmReturn_t (*fg_destroy)(dcgmHandle_t, dcgmFieldGrp_t);
static dcgmReturn_t (*watch)(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t, long long, double, int);
static dcgmReturn_t (*unwatch)(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t);
static dcgmReturn_t (*values_since)(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t, long long, long long *,
                                    dcgmFieldValueEntityEnumeration_f, void *);
static dcgmReturn_t (*latest_values)(dcgmHandle_t, dcgmGroupEntityPair_t[], unsigned int, unsigned short[],
                                     unsigned int, unsigned int, dcgmFieldValue_v2[]);
static dcgmReturn_t (*all_devices)(dcgmHandle_t, unsigned int *, int *);
static dcgmReturn_t (*supported_devices)(dcgmHandle_t, unsigned int *, int *);
static dcgmReturn_t (*gpu_status)(dcgmHandle_t, unsigned int, DcgmEntityStatus_t *);
static dcgmReturn_t (*entities)(dcgmHandle_t, dcgm_field_entity_group_t, dcgm_field_eid_t *, int *, unsigned int);

static void observe(const char *name, const char *value)
{
    printf("%s: %s\n", name, value);
    fflush(stdout);
}

static void observe_rc(const char *name, dcgmReturn_t rc)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%d", (int)rc);
    observe(name, buf);
}

static void msleep(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void fail(const char *what, dcgmReturn_t rc)
{
    fprintf(stderr, "%s failed: %d\n", what, (int)rc);
    exit(1);
}

/* A group of the given GPUs (a failure to add one is an observation, not an error). */
static dcgmGpuGrp_t gpus_group(const char *name, const unsigned int *ids, int n)
{
    dcgmGpuGrp_t g;
    dcgmReturn_t rc = group_create(h, DCGM_GROUP_EMPTY, name, &g);
    if (rc != DCGM_ST_OK)
        fail("dcgmGroupCreate", rc);
    for (int i = 0; i < n; i++)
    {
        rc = group_add(h, g, DCGM_FE_GPU, ids[i]);
        if (rc != DCGM_ST_OK)
            fail("dcgmGroupAddEntity", rc);
    }
    return g;
}

static dcgmFieldGrp_t fields_group(const char *name, const unsigned short *ids, int n)
{
    dcgmFieldGrp_t f;
    dcgmReturn_t rc = fg_create(h, n, ids, name, &f);
    if (rc != DCGM_ST_OK)
        fail("dcgmFieldGroupCreate", rc);
    return f;
}

static void watch_ok(dcgmGpuGrp_t g, dcgmFieldGrp_t f, long long freq_us)
{
    dcgmReturn_t rc = watch(h, g, f, freq_us, 60.0, 0);
    if (rc != DCGM_ST_OK)
        fail("dcgmWatchFields", rc);
}

/* The newest cached sample of one GPU field: its status, and its timestamp in *ts. */
static int latest(unsigned int gpu, unsigned short field, long long *ts)
{
    dcgmGroupEntityPair_t e = { DCGM_FE_GPU, gpu };
    dcgmFieldValue_v2 v;
    memset(&v, 0, sizeof(v));
    dcgmReturn_t rc = latest_values(h, &e, 1, &field, 1, 0, &v);
    if (rc != DCGM_ST_OK)
        fail("dcgmEntitiesGetLatestValues", rc);
    *ts = v.ts;
    return v.status;
}

/* Whether a field is still being sampled: "advancing", "frozen" (status OK, the same
   timestamp) or "status N". */
static void observe_motion(const char *name, unsigned int gpu, unsigned short field)
{
    long long t1 = 0, t2 = 0;
    int s1 = latest(gpu, field, &t1);
    msleep(800);
    int s2 = latest(gpu, field, &t2);
    char buf[48];
    if (s2 != DCGM_ST_OK)
        snprintf(buf, sizeof(buf), "status %d", s2);
    else if (s1 == DCGM_ST_OK && t2 > t1)
        snprintf(buf, sizeof(buf), "advancing");
    else if (s1 == DCGM_ST_OK && t2 == t1 && t2 > 0)
        snprintf(buf, sizeof(buf), "frozen");
    else
        snprintf(buf, sizeof(buf), "status %d then %d", s1, s2);
    observe(name, buf);
}

struct tally
{
    int values;
    long long newest;
};

static int count_cb(dcgm_field_entity_group_t eg, dcgm_field_eid_t eid, dcgmFieldValue_v1 *v, int n, void *user)
{
    (void)eg;
    (void)eid;
    struct tally *t = user;
    for (int i = 0; i < n; i++)
    {
        t->values++;
        if (v[i].ts > t->newest)
            t->newest = v[i].ts;
    }
    return 0;
}

/* One watch per (entity, field, connection): A {150, 155} and B {155} from the same
   connection share 155's watcher; unwatching A removes it, though B still holds 155. */
static void watch_identity(void)
{
    unsigned int gpu0 = 0;
    unsigned short a_ids[] = { 150, 155 }, b_ids[] = { 155 };
    dcgmGpuGrp_t g      = gpus_group("ws-identity", &gpu0, 1);
    dcgmFieldGrp_t a    = fields_group("ws-identity-a", a_ids, 2);
    dcgmFieldGrp_t b    = fields_group("ws-identity-b", b_ids, 1);
    watch_ok(g, a, FREQ_US);
    watch_ok(g, b, FREQ_US);
    msleep(300);
    observe_motion("identity: 155 watched by A and B", 0, 155);
    observe_rc("identity: unwatch A", unwatch(h, g, a));
    msleep(300);
    observe_motion("identity: 155 after unwatching A (B still holds it)", 0, 155);
    observe_motion("identity: 150 after unwatching A (its last watch)", 0, 150);
    observe_rc("identity: unwatch B", unwatch(h, g, b));
    observe_motion("identity: 155 after unwatching B too", 0, 155);
}

/* A second watch of a pair from the same connection updates its frequency: 140 at 100 ms,
   then through another field group at 5 s, samples every 5 s, not every 100 ms. */
static void watch_update(void)
{
    unsigned int gpu0 = 0;
    unsigned short ids[] = { 140 };
    dcgmGpuGrp_t g    = gpus_group("ws-update", &gpu0, 1);
    dcgmFieldGrp_t c  = fields_group("ws-update-c", ids, 1);
    dcgmFieldGrp_t d  = fields_group("ws-update-d", ids, 1);
    watch_ok(g, c, FREQ_US);
    msleep(300);
    watch_ok(g, d, 5000000LL);
    msleep(300);
    long long t0 = 0;
    (void)latest(0, 140, &t0);
    msleep(1500);
    struct tally t = { 0, 0 };
    long long next = 0;
    dcgmReturn_t rc = values_since(h, g, c, t0 + 1, &next, count_cb, &t);
    char buf[64];
    snprintf(buf, sizeof(buf), "%d, %s", (int)rc, t.values >= 5 ? "many samples" : "few samples");
    observe("update: 140 in 1.5 s after a second watch at 5 s", buf);
}

/* Destroying a field group or a group leaves the watches set through them. */
static void destroy_keeps_watches(void)
{
    unsigned int gpu0 = 0, gpu1 = 1;
    unsigned short e_ids[] = { 100 }, f_ids[] = { 101 };
    dcgmGpuGrp_t g   = gpus_group("ws-destroy-g", &gpu0, 1);
    dcgmFieldGrp_t e = fields_group("ws-destroy-e", e_ids, 1);
    watch_ok(g, e, FREQ_US);
    observe_rc("destroy: field group", fg_destroy(h, e));
    msleep(300);
    observe_motion("destroy: 100 after its field group was destroyed", 0, 100);
    dcgmGpuGrp_t g1  = gpus_group("ws-destroy-g1", &gpu1, 1);
    dcgmFieldGrp_t f = fields_group("ws-destroy-f", f_ids, 1);
    watch_ok(g1, f, FREQ_US);
    observe_rc("destroy: group", group_destroy(h, g1));
    msleep(300);
    observe_motion("destroy: 101 on GPU 1 after its group was destroyed", 1, 101);
    observe_rc("destroy: unwatch through the destroyed group", unwatch(h, g1, f));
}

/* A watch that fails (a profiling field without the profiling module) unwatches every pair
   of its group and field group for this connection, also 252, which another field group of
   this connection had watched. */
static void failed_watch(void)
{
    unsigned int gpu0 = 0;
    unsigned short h_ids[] = { 252 }, i_ids[] = { 252, 1002 };
    dcgmGpuGrp_t g    = gpus_group("ws-failed", &gpu0, 1);
    dcgmFieldGrp_t hf = fields_group("ws-failed-h", h_ids, 1);
    dcgmFieldGrp_t i  = fields_group("ws-failed-i", i_ids, 2);
    watch_ok(g, hf, FREQ_US);
    msleep(300);
    observe_rc("failed: watch holding a profiling field", watch(h, g, i, FREQ_US, 60.0, 0));
    msleep(300);
    observe_motion("failed: 252, watched before through another field group", 0, 252);
}

/* dcgmGetValuesSince: a pair never watched (250) fails the call; a pair that is not
   watched any more but has samples (150, from watch_identity) does not. */
static void values_since_statuses(void)
{
    unsigned int gpu0 = 0;
    unsigned short frozen_ids[] = { 150 }, mixed_ids[] = { 150, 250 };
    dcgmGpuGrp_t g           = gpus_group("ws-since", &gpu0, 1);
    dcgmFieldGrp_t frozen    = fields_group("ws-since-frozen", frozen_ids, 1);
    dcgmFieldGrp_t mixed     = fields_group("ws-since-mixed", mixed_ids, 2);
    struct tally t           = { 0, 0 };
    long long next           = 7;
    dcgmReturn_t rc          = values_since(h, g, frozen, 0, &next, count_cb, &t);
    char buf[96];
    snprintf(buf, sizeof(buf), "%d, values %s, next %s", (int)rc, t.values > 0 ? "yes" : "no",
             next > 7 ? "advanced" : "kept");
    observe("since: only an unwatched pair with samples", buf);
    t    = (struct tally) { 0, 0 };
    next = 7;
    rc   = values_since(h, g, mixed, 0, &next, count_cb, &t);
    snprintf(buf, sizeof(buf), "%d, values %s, next %s", (int)rc, t.values > 0 ? "yes" : "no",
             next > 7 ? "advanced" : "kept");
    observe("since: then a pair never watched", buf);
    /* dcgmUnwatchFields of pairs of which one was never watched by anyone. */
    observe_rc("unwatch: a field group holding a pair never watched", unwatch(h, g, mixed));
}

static void observe_ids(const char *name, const unsigned int *ids, int n)
{
    char buf[256] = "";
    for (int i = 0; i < n; i++)
    {
        char one[16];
        snprintf(one, sizeof(one), "%s%u", i ? "," : "", ids[i]);
        strncat(buf, one, sizeof(buf) - strlen(buf) - 1);
    }
    observe(name, buf);
}

static void observe_lists(const char *when)
{
    unsigned int ids[DCGM_MAX_NUM_DEVICES];
    int n = 0;
    char name[128];
    snprintf(name, sizeof(name), "%s: dcgmGetAllDevices", when);
    if (all_devices(h, ids, &n) != DCGM_ST_OK)
        n = 0;
    observe_ids(name, ids, n);
    snprintf(name, sizeof(name), "%s: dcgmGetAllSupportedDevices", when);
    n = 0;
    if (supported_devices(h, ids, &n) != DCGM_ST_OK)
        n = 0;
    observe_ids(name, ids, n);
    dcgm_field_eid_t eids[DCGM_MAX_NUM_DEVICES];
    n = DCGM_MAX_NUM_DEVICES;
    snprintf(name, sizeof(name), "%s: GPU entities", when);
    if (entities(h, DCGM_FE_GPU, eids, &n, 0) != DCGM_ST_OK)
        n = 0;
    observe_ids(name, eids, n);
    n = DCGM_MAX_NUM_DEVICES;
    snprintf(name, sizeof(name), "%s: supported GPU entities", when);
    if (entities(h, DCGM_FE_GPU, eids, &n, DCGM_GEGE_FLAG_ONLY_SUPPORTED) != DCGM_ST_OK)
        n = 0;
    observe_ids(name, eids, n);
}

/* GPU 1 unbound: DCGM keeps it listed as Detached, refuses it in groups, takes it out of the
   groups it was in and drops its watches; the other GPUs keep being sampled. */
static void unbind(void)
{
    unsigned int both[] = { 0, 1 };
    unsigned short ids[] = { 204 };
    dcgmGpuGrp_t g   = gpus_group("ws-unbind", both, 2);
    dcgmFieldGrp_t f = fields_group("ws-unbind-f", ids, 1);
    watch_ok(g, f, FREQ_US);
    msleep(300);
    observe_lists("before unbind");
    observe("unbind", "requested");
    printf("UNBIND GPU 1\n");
    fflush(stdout);
    DcgmEntityStatus_t st = DcgmEntityStatusUnknown;
    for (int i = 0; i < 300 && st != DcgmEntityStatusDetached; i++)
    {
        msleep(100);
        if (gpu_status(h, 1, &st) != DCGM_ST_OK)
            st = DcgmEntityStatusUnknown;
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "%d", (int)st);
    observe("after unbind: status of GPU 1", buf);
    /* Let the re-attach finish (the bind/unbind event reads 2 once it has). */
    long long ts = 0;
    msleep(2000);
    observe_lists("after unbind");
    DcgmEntityStatus_t st0 = DcgmEntityStatusUnknown;
    gpu_status(h, 0, &st0);
    snprintf(buf, sizeof(buf), "%d", (int)st0);
    observe("after unbind: status of GPU 0", buf);
    dcgmGpuGrp_t fresh;
    if (group_create(h, DCGM_GROUP_EMPTY, "ws-unbind-fresh", &fresh) != DCGM_ST_OK)
        fail("dcgmGroupCreate", DCGM_ST_GENERIC_ERROR);
    observe_rc("after unbind: adding GPU 1 to a group", group_add(h, fresh, DCGM_FE_GPU, 1));
    observe_rc("after unbind: adding GPU 0 to a group", group_add(h, fresh, DCGM_FE_GPU, 0));
    dcgmGroupInfo_v3 *info = calloc(1, sizeof(*info));
    info->version          = MAKE_VERSION(dcgmGroupInfo_v3, 3);
    dcgmReturn_t rc        = group_info(h, g, info);
    unsigned int members[DCGM_GROUP_MAX_ENTITIES_V2];
    for (unsigned int i = 0; rc == DCGM_ST_OK && i < info->count; i++)
        members[i] = info->entityList[i].entityId;
    observe_ids("after unbind: the group of GPUs 0 and 1 holds", members, rc == DCGM_ST_OK ? (int)info->count : 0);
    free(info);
    int s1 = latest(1, 204, &ts);
    snprintf(buf, sizeof(buf), "%d", s1);
    observe("after unbind: 204 on GPU 1 reads status", buf);
    observe_motion("after unbind: 204 on GPU 0", 0, 204);
}

int main(int argc, char **argv)
{
    if (argc < 2)
    {
        fprintf(stderr, "usage: %s embedded|HOST:PORT [unbind]\n", argv[0]);
        return 2;
    }
    lib = open_dcgm();
    dcgmReturn_t (*init)(void)                                                     = sym("dcgmInit");
    dcgmReturn_t (*shutdown)(void)                                                 = sym("dcgmShutdown");
    dcgmReturn_t (*start)(dcgmOperationMode_t, dcgmHandle_t *)                     = sym("dcgmStartEmbedded");
    dcgmReturn_t (*stop)(dcgmHandle_t)                                             = sym("dcgmStopEmbedded");
    dcgmReturn_t (*connect)(const char *, dcgmConnectV2Params_v2 *, dcgmHandle_t *) = sym("dcgmConnect_v2");
    dcgmReturn_t (*disconnect)(dcgmHandle_t)                                       = sym("dcgmDisconnect");
    group_create      = sym("dcgmGroupCreate");
    group_destroy     = sym("dcgmGroupDestroy");
    group_add         = sym("dcgmGroupAddEntity");
    group_info        = sym("dcgmGroupGetInfo");
    fg_create         = sym("dcgmFieldGroupCreate");
    fg_destroy        = sym("dcgmFieldGroupDestroy");
    watch             = sym("dcgmWatchFields");
    unwatch           = sym("dcgmUnwatchFields");
    values_since      = sym("dcgmGetValuesSince_v2");
    latest_values     = sym("dcgmEntitiesGetLatestValues");
    all_devices       = sym("dcgmGetAllDevices");
    supported_devices = sym("dcgmGetAllSupportedDevices");
    gpu_status        = sym("dcgmGetGpuStatus");
    entities          = sym("dcgmGetEntityGroupEntities");

    dcgmReturn_t rc = init();
    if (rc != DCGM_ST_OK)
        fail("dcgmInit", rc);
    int embedded = strcmp(argv[1], "embedded") == 0;
    if (embedded)
        rc = start(DCGM_OPERATION_MODE_AUTO, &h);
    else
    {
        dcgmConnectV2Params_v2 p;
        memset(&p, 0, sizeof(p));
        p.version   = MAKE_VERSION(dcgmConnectV2Params_v2, 2);
        p.timeoutMs = 5000;
        rc          = connect(argv[1], &p, &h);
    }
    if (rc != DCGM_ST_OK)
        fail(embedded ? "dcgmStartEmbedded" : "dcgmConnect_v2", rc);

    if (argc > 2 && strcmp(argv[2], "unbind") == 0)
        unbind();
    else
    {
        watch_identity();
        watch_update();
        destroy_keeps_watches();
        failed_watch();
        values_since_statuses();
    }

    if (embedded)
        stop(h);
    else
        disconnect(h);
    shutdown();
    observe("done", "yes");
    return 0;
}
