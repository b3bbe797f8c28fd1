/* Cores and caches of the machine (hwloc when built with it, else Linux sysfs), the thread
 * count the backend uses, and thread binding. */
#ifndef CS_TOPOLOGY_H
#define CS_TOPOLOGY_H

#include <stddef.h>

typedef struct cs_topology {
    int packages, cores, pus;              /* cores: physical cores; pus: hardware threads */
    unsigned long long l2_bytes, l3_bytes; /* one cache instance; 0 when unknown */
    const char *source;                    /* "hwloc", "sysfs" or "cpu count" */
} cs_topology;

/* Read once; the same answer for the life of the process. */
const cs_topology *cs_topology_get(void);

/* "1 package, 2 cores, 2 PUs, L2 1 MiB, L3 32 MiB (hwloc)" into buf. */
void cs_topology_summary(const cs_topology *t, char *buf, size_t len);

/* Threads for attention: FLASHPORT_NUM_THREADS when set to a positive integer, else one per
 * physical core; 1 when built without OpenMP. *why says which (static string). */
int cs_threads_default(const char **why);

/* Binds the calling thread to physical core `index` (modulo the core count). Only with hwloc;
 * elsewhere the operating system places threads. */
void cs_bind_thread_to_core(int index);

/* In a parallel region: binds worker thread `me` (> 0) to core `me` the first time it runs; the
 * caller's own thread (0) is left where it is, so the library never changes the application's
 * affinity. */
void cs_bind_worker(int me);

#endif /* CS_TOPOLOGY_H */
