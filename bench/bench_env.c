/* What flashport-bench learns once per run about its device: name, ceilings, cache size, the
 * thread count behind a CPU ceiling, and the date. */
#define _GNU_SOURCE /* sysconf cache sizes, gmtime_r */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Looks for "<key>=<integer>" in the device's "key=value; ..." details. */
static int details_bytes(const char *details, const char *key, size_t *out) {
    size_t klen = strlen(key);
    for (const char *s = details; (s = strstr(s, key)) != NULL; s += klen) {
        int starts_entry = s == details || s[-1] == ' ' || s[-1] == ';';
        if (!starts_entry || s[klen] != '=') continue;
        char *end;
        unsigned long long v = strtoull(s + klen + 1, &end, 10);
        if (end != s + klen + 1 && v > 0) {
            *out = (size_t)v;
            return 1;
        }
    }
    return 0;
}

static void find_cache(bench_env *env) {
    static const char *const keys[] = {"l2_bytes", "llc_bytes", "l3_bytes", "cache_bytes"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i)
        if (details_bytes(env->device.details, keys[i], &env->cache_bytes)) {
            snprintf(env->cache_source, sizeof env->cache_source, "device %s", keys[i]);
            return;
        }
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    if (env->device.kind == FLASHPORT_DEVICE_CPU) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (l3 > 0 || l2 > 0) {
            env->cache_bytes = (size_t)(l3 > 0 ? l3 : l2);
            snprintf(env->cache_source, sizeof env->cache_source, "sysconf %s",
                     l3 > 0 ? "L3" : "L2");
            return;
        }
    }
#endif
    env->cache_bytes = (size_t)64 << 20;
    snprintf(env->cache_source, sizeof env->cache_source, "assumed 64 MiB");
}

static int cpu_threads(const bench_env *env, const bench_options *opt) {
    if (opt->threads > 0) return opt->threads;
    const char *s = getenv("FLASHPORT_NUM_THREADS");
    if (s && atoi(s) > 0) return atoi(s);
    return env->device.compute_units > 0 ? env->device.compute_units : 1;
}

int bench_env_init(flashport_context *ctx, const bench_options *opt, bench_env *env) {
    memset(env, 0, sizeof *env);
    env->backend = flashport_context_backend(ctx);
    if (flashport_context_device_info(ctx, &env->device) != FLASHPORT_OK)
        fprintf(stderr, "flashport-bench: warning: no device info: %s\n", flashport_last_error());
    find_cache(env);
    env->cpu_threads = cpu_threads(env, opt);
    if (opt->measure_peaks) {
        fprintf(stderr, "flashport-bench: measuring the device's ceilings...\n");
        if (flashport_measure_peaks(ctx, &env->peaks) == FLASHPORT_OK)
            env->have_peaks = 1;
        else
            fprintf(stderr, "flashport-bench: warning: no ceilings (%% of ceiling left out): %s\n",
                    flashport_last_error());
        /* Optional: a backend without the micro-benchmark reports no read figure. */
        if (env->have_peaks &&
            flashport_measure_read_bandwidth(ctx, &env->read_gbps, env->read_method,
                                             sizeof env->read_method) != FLASHPORT_OK)
            env->read_gbps = 0.0;
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(env->date, sizeof env->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return 0;
}

void bench_print_env(FILE *out, const bench_env *env) {
    fprintf(out, "backend %s, device %s (%s), %s\n", env->backend, env->device.name,
            env->device.vendor, env->date);
    if (!env->have_peaks) return;
    const flashport_peaks *p = &env->peaks;
    fprintf(out,
            "ceilings (TFLOP/s): f32_fma %.3f (per core %.3f), f16_mma %.1f, bf16_mma %.1f, "
            "tf32_mma %.1f; copy %.1f GB/s\n",
            p->f32_fma_tflops, p->f32_fma_tflops_per_core, p->f16_mma_tflops, p->bf16_mma_tflops,
            p->tf32_mma_tflops, p->copy_gbps);
    if (p->method[0]) fprintf(out, "  measured by: %s\n", p->method);
    if (env->read_gbps > 0)
        fprintf(out, "  read-only bandwidth %.1f GB/s (%s)\n", env->read_gbps, env->read_method);
    if (env->device.kind == FLASHPORT_DEVICE_CPU)
        fprintf(out, "  %% of ceiling uses f32_fma per core x %d threads\n", env->cpu_threads);
    else
        fprintf(out, "  %% of ceiling uses f32_fma for f32 kernels, tf32_mma/f16_mma for kernels "
                     "of that precision class, f16_mma/bf16_mma for f16/bf16\n");
}
