/* cpu_simd's ceilings: the copy and the read-only stream run over twice the last-level cache
 * (the figure of memory, not of the cache), at least 64 MiB and at most a sixteenth of the
 * machine's memory, and both report a positive finite rate and how they measured it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* "L3 300 MiB" or "L3 1536 KiB" in the device details, in MiB (rounded down); 0 when unknown. */
static unsigned long long cache_mib(const char *details, const char *level) {
    const char *at = strstr(details, level);
    unsigned long long size = 0;
    char unit[4] = "";
    if (!at || sscanf(at + strlen(level), " %llu %3s", &size, unit) != 2) return 0;
    return strcmp(unit, "MiB") == 0 ? size : strcmp(unit, "KiB") == 0 ? size >> 10 : 0;
}

/* The size in "... of N MiB" or "... share of N MiB" in a method text; 0 when absent. */
static unsigned long long stream_mib(const char *method, const char *after) {
    const char *at = strstr(method, after);
    unsigned long long mib = 0;
    if (!at || sscanf(at + strlen(after), " %llu MiB", &mib) != 1) return 0;
    return mib;
}

int main(void) {
    flashport_context *ctx;
    if (flashport_context_create("cpu_simd", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "cannot open cpu_simd: %s\n", flashport_last_error());
        return 1;
    }
    flashport_device_info dev;
    CHECK(flashport_context_device_info(ctx, &dev) == FLASHPORT_OK);
    unsigned long long llc = cache_mib(dev.details, "L3");
    if (llc == 0) llc = cache_mib(dev.details, "L2");
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const unsigned long long cap =
        pages > 0 && page > 0 ? (unsigned long long)pages / 16 * (unsigned long long)page >> 20 : 0;
    /* Whole MiB of the rule: max(64, 2 LLC), cut to the cap when the cap is at least 64. */
    unsigned long long want = 2 * llc > 64 ? 2 * llc : 64;
    if (cap >= 64 && want > cap) want = cap;
    printf("last-level cache %llu MiB, memory cap %llu MiB: streams of %llu MiB expected\n", llc,
           cap, want);

    flashport_peaks peaks;
    CHECK(flashport_measure_peaks(ctx, &peaks) == FLASHPORT_OK);
    printf("copy %.1f GB/s: %s\n", peaks.copy_gbps, peaks.method);
    CHECK(isfinite(peaks.copy_gbps) && peaks.copy_gbps > 0.0);
    const unsigned long long copy_mib = stream_mib(peaks.method, "memcpy of");
    /* The cap and the cache are whole MiB here but bytes in the library: one MiB of slack. */
    CHECK(copy_mib + 1 >= want && copy_mib <= want + 1);

    double gbps = -1.0;
    char method[256] = "";
    CHECK(flashport_measure_read_bandwidth(ctx, &gbps, method, sizeof method) == FLASHPORT_OK);
    printf("read %.1f GB/s: %s\n", gbps, method);
    CHECK(isfinite(gbps) && gbps > 0.0);
    CHECK(strstr(method, "read-only stream") != NULL);
    CHECK(stream_mib(method, "share of") == copy_mib);

    /* A short method buffer gets a terminated prefix. */
    char shortm[8];
    memset(shortm, 'x', sizeof shortm);
    CHECK(flashport_measure_read_bandwidth(ctx, &gbps, shortm, sizeof shortm) == FLASHPORT_OK);
    CHECK(shortm[sizeof shortm - 1] == '\0' && strncmp(shortm, "read-on", 7) == 0);
    flashport_context_destroy(ctx);
    return check_report("test_cpu_simd_peaks");
}
