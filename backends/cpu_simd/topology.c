/* sysconf: POSIX beyond C11. */
#define _POSIX_C_SOURCE 200809L
#include "topology.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(CS_HAVE_HWLOC)
#include <hwloc.h>
static hwloc_topology_t g_hwloc;
static int g_hwloc_ok;
#endif

static cs_topology g_topo;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(CS_HAVE_HWLOC)
static unsigned long long cache_size(hwloc_obj_type_t type) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(g_hwloc, type, 0);
    return obj && obj->attr ? (unsigned long long)obj->attr->cache.size : 0;
}

static int read_hwloc(cs_topology *t) {
    if (hwloc_topology_init(&g_hwloc) != 0) return 0;
    if (hwloc_topology_load(g_hwloc) != 0) {
        hwloc_topology_destroy(g_hwloc);
        return 0;
    }
    g_hwloc_ok = 1;
    t->packages = hwloc_get_nbobjs_by_type(g_hwloc, HWLOC_OBJ_PACKAGE);
    t->cores = hwloc_get_nbobjs_by_type(g_hwloc, HWLOC_OBJ_CORE);
    t->pus = hwloc_get_nbobjs_by_type(g_hwloc, HWLOC_OBJ_PU);
    t->l2_bytes = cache_size(HWLOC_OBJ_L2CACHE);
    t->l3_bytes = cache_size(HWLOC_OBJ_L3CACHE);
    t->source = "hwloc";
    return t->cores > 0;
}
#endif

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* Sizes like "1024K" in /sys/devices/system/cpu/cpu0/cache/index<i>/size. */
static void read_sysfs_caches(cs_topology *t) {
    for (int i = 0; i < 8; ++i) {
        char path[128], text[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        long level = read_long(path);
        if (level < 0) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long long size = 0;
        if (fgets(text, sizeof text, f)) {
            char *end;
            size = strtoull(text, &end, 10);
            if (*end == 'K')
                size <<= 10;
            else if (*end == 'M')
                size <<= 20;
        }
        fclose(f);
        if (level == 2) t->l2_bytes = size;
        if (level == 3) t->l3_bytes = size;
    }
}

/* Physical cores = distinct (package, core id) pairs among the online CPUs. */
static int read_sysfs(cs_topology *t) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) return 0;
    long *keys = malloc(sizeof(long) * (size_t)n);
    if (!keys) return 0;
    int cores = 0, max_pkg = -1;
    for (long cpu = 0, found = 0; found < n && cpu < 4 * n + 64; ++cpu) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        long core = read_long(path);
        if (core < 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id",
                 cpu);
        long pkg = read_long(path);
        ++found;
        long key = (pkg < 0 ? 0 : pkg) * 1000000L + core;
        int seen = 0;
        for (int i = 0; i < cores; ++i) seen |= keys[i] == key;
        if (!seen) keys[cores++] = key;
        if (pkg > max_pkg) max_pkg = (int)pkg;
    }
    free(keys);
    if (cores == 0) return 0;
    t->cores = cores;
    t->pus = (int)n;
    t->packages = max_pkg + 1 > 0 ? max_pkg + 1 : 1;
    read_sysfs_caches(t);
    t->source = "sysfs";
    return 1;
}

static void read_topology(void) {
    memset(&g_topo, 0, sizeof g_topo);
#if defined(CS_HAVE_HWLOC)
    if (read_hwloc(&g_topo)) return;
    memset(&g_topo, 0, sizeof g_topo);
#endif
    if (read_sysfs(&g_topo)) return;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    g_topo.packages = 1;
    g_topo.cores = g_topo.pus = n > 0 ? (int)n : 1;
    g_topo.source = "cpu count";
}

const cs_topology *cs_topology_get(void) {
    pthread_once(&g_once, read_topology);
    return &g_topo;
}

static void size_text(unsigned long long bytes, char *buf, size_t len) {
    if (bytes == 0)
        snprintf(buf, len, "?");
    else if (bytes % (1ull << 20) == 0)
        snprintf(buf, len, "%llu MiB", bytes >> 20);
    else
        snprintf(buf, len, "%llu KiB", bytes >> 10);
}

void cs_topology_summary(const cs_topology *t, char *buf, size_t len) {
    char l2[32], l3[32];
    size_text(t->l2_bytes, l2, sizeof l2);
    size_text(t->l3_bytes, l3, sizeof l3);
    snprintf(buf, len, "%d package%s, %d cores, %d PUs, L2 %s, L3 %s (%s)", t->packages,
             t->packages == 1 ? "" : "s", t->cores, t->pus, l2, l3, t->source);
}

int cs_threads_default(const char **why) {
#if defined(_OPENMP)
    const char *env = getenv("FLASHPORT_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n > 0 && n <= 4096) {
            *why = "FLASHPORT_NUM_THREADS";
            return (int)n;
        }
        *why = "one per physical core (FLASHPORT_NUM_THREADS ignored: not an integer in 1..4096)";
        return cs_topology_get()->cores;
    }
    *why = "one per physical core";
    return cs_topology_get()->cores;
#else
    *why = "built without OpenMP";
    return 1;
#endif
}

void cs_bind_thread_to_core(int index) {
#if defined(CS_HAVE_HWLOC)
    const cs_topology *t = cs_topology_get();
    if (!g_hwloc_ok || t->cores <= 0) return;
    hwloc_obj_t core = hwloc_get_obj_by_type(g_hwloc, HWLOC_OBJ_CORE, (unsigned)(index % t->cores));
    /* Binding is a placement hint: when the OS refuses it the threads still run correctly. */
    if (core) (void)hwloc_set_cpubind(g_hwloc, core->cpuset, HWLOC_CPUBIND_THREAD);
#else
    (void)index;
#endif
}

void cs_bind_worker(int me) {
    static _Thread_local int bound_core = -1;
    if (me > 0 && bound_core != me) {
        cs_bind_thread_to_core(me);
        bound_core = me;
    }
}
