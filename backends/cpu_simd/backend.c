/*
 * cpu_simd: the fast CPU path. Buffers are host memory, runs are synchronous (the "queue" is
 * the calling thread), and the planner picks the widest kernels cpuid allows: AVX-512F, AVX2,
 * else portable C.
 */
/* sysconf: POSIX beyond C11. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention.h"
#include "backward.h"
#include "backend.h"
#include "cpu_features.h"
#include "decode.h"
#include "fp_host_memory.h"
#include "topology.h"

const fp_host *cs_host;

/* One per opened context: the core runs its calls one at a time (fp_backend.h), which lets
 * them share one scratch area that grows to the largest plan seen. */
typedef struct cs_device {
    void *scratch;
    size_t scratch_bytes;
} cs_device;

static int probe(char *reason, size_t reason_len) {
    /* The portable path runs on any CPU: there is always exactly one device. */
    (void)reason;
    (void)reason_len;
    return 1;
}

static void chosen_path(char *buf, size_t len) {
    char why[160], why_tiles[224];
    const int variant = cs_auto_variant(0, why, sizeof why);
    const int tiles = cs_bf16_tile_variant(why_tiles, sizeof why_tiles);
    const char *why_bf16;
    const int bf16 = cs_avx512bf16_usable(&why_bf16);
    char amx_decodes[64] = "";
    if (tiles == CS_VARIANT_AMXBF16)
        snprintf(amx_decodes, sizeof amx_decodes, " (amxbf16 from %d query rows a KV head)",
                 CS_AMX_DECODE_MIN_ROWS);
    snprintf(buf, len, "%s (%s); bf16 inputs: %s (%s), decodes on %s%s", cs_variant_name(variant),
             why, cs_variant_name(tiles >= 0 ? tiles : variant), why_tiles,
             cs_variant_name(bf16 ? CS_VARIANT_AVX512BF16 : variant), amx_decodes);
}

static flashport_status device_info(int device, flashport_device_info *out) {
    if (device != 0)
        return cs_host->error(FLASHPORT_ERROR_NO_DEVICE, CS_NAME,
                              "device_info: no device %d (only 0)", device);
    const cs_cpu *cpu = cs_cpu_get();
    const cs_topology *topo = cs_topology_get();
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", cpu->model);
    snprintf(out->vendor, sizeof out->vendor, "%s", cpu->vendor);
    out->kind = FLASHPORT_DEVICE_CPU;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    out->compute_units = topo->cores;

    char features[128], half[96], path[512], topology[160];
    cs_cpu_feature_list(cpu, features, sizeof features);
    cs_cpu_half_products(cpu, half, sizeof half);
    chosen_path(path, sizeof path);
    cs_topology_summary(topo, topology, sizeof topology);
    const char *why_threads;
    const int threads = cs_threads_default(&why_threads);
    snprintf(out->details, sizeof out->details,
             "features=%s; 16-bit products: %s; path=%s; threads=%d (%s); openmp=%s; "
             "topology=%s",
             features, half, path, threads, why_threads,
#if defined(_OPENMP)
             "yes",
#else
             "no (single thread)",
#endif
             topology);
    return FLASHPORT_OK;
}

static void dev_close(void *dev) {
    cs_device *d = dev;
    free(d->scratch);
    free(d);
}

static flashport_status plan(void *dev, const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    (void)dev;
    return cs_plan(p, op, forced, out);
}

static flashport_status run(void *dev, const fp_plan *pl, const fp_problem *p,
                            const fp_args *args) {
    cs_device *d = dev;
    const cs_kernel_ops *ops = cs_variant_ops(pl->variant);
    if (!ops)
        return cs_host->error(FLASHPORT_ERROR_INTERNAL, CS_NAME,
                              "run: plan names variant %d, which this build lacks", pl->variant);
    cs_tiling t;
    cs_bwd_tiling bt;
    int threads;
    size_t need;
    if (pl->op == FP_OP_BACKWARD) {
        cs_bwd_tiling_from_plan(pl, &bt);
        need = cs_bwd_scratch_bytes(&bt);
        threads = bt.threads;
    } else {
        cs_tiling_from_plan(pl, &t);
        need = t.split ? cs_decode_scratch_bytes(p, &t) : cs_scratch_bytes(&t);
        threads = t.threads;
    }
    if (need > d->scratch_bytes) {
        void *grown = aligned_alloc(64, (need + 63) / 64 * 64);
        if (!grown) {
            return cs_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, CS_NAME,
                                  "run: out of host memory for %zu bytes of scratch (%d threads)",
                                  need, threads);
        }
        free(d->scratch);
        d->scratch = grown;
        d->scratch_bytes = need;
    }
    if (pl->op == FP_OP_BACKWARD)
        cs_attention_backward(ops, &bt, p, args, d->scratch);
    else if (t.split)
        cs_decode(ops, &t, p, args, d->scratch);
    else
        cs_attention(ops, &t, p, args, d->scratch);
    return FLASHPORT_OK;
}

static flashport_status synchronize(void *dev) {
    (void)dev; /* runs finish before they return */
    return FLASHPORT_OK;
}

static flashport_status measure_peaks(void *dev, flashport_peaks *out) {
    (void)dev;
    return cs_measure_peaks(out);
}

static flashport_status measure_read_bandwidth(void *dev, double *gbps, char *method,
                                               size_t method_size) {
    (void)dev;
    return cs_measure_read_bandwidth(gbps, method, method_size);
}

static const fp_device_ops device_ops = {
    .close = dev_close,
    .buffer_alloc = fp_host_buffer_alloc,
    .buffer_free = fp_host_buffer_free,
    .buffer_upload = fp_host_buffer_upload,
    .buffer_download = fp_host_buffer_download,
    .plan = plan,
    .run = run,
    .synchronize = synchronize,
    .measure_peaks = measure_peaks,
    .measure_read_bandwidth = measure_read_bandwidth,
};

static flashport_status open_device(int device, const fp_device_ops **ops, void **dev) {
    if (device != 0)
        return cs_host->error(FLASHPORT_ERROR_NO_DEVICE, CS_NAME, "open: no device %d (only 0)",
                              device);
    cs_device *d = calloc(1, sizeof *d);
    if (!d)
        return cs_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, CS_NAME, "open: out of host memory");
    char path[512];
    chosen_path(path, sizeof path);
    const char *why_threads;
    const int threads = cs_threads_default(&why_threads);
    cs_host->log(FP_LOG_INFO, CS_NAME, "%s: path %s, %d thread%s (%s)", cs_cpu_get()->model, path,
                 threads, threads == 1 ? "" : "s", why_threads);
    *ops = &device_ops;
    *dev = d;
    return FLASHPORT_OK;
}

/* Every feature but f64 inputs (the reference backend's), in every path: the tile algorithms
 * are shared (attention.c, backward.c); the planner declines the backward pass of paged K/V and
 * FP8 inputs by name. */
#define CS_FEATURES (FP_FEATURES_ALL & ~FP_FEATURE_F64)

static const fp_variant variants[CS_VARIANT_COUNT] = {
    [CS_VARIANT_AVX2] =
        {"avx2", "AVX2+FMA register-blocked tiles, F16C for f16 and E5M2; needs those CPU features",
         FP_PRECISION_NATIVE, CS_FEATURES},
    [CS_VARIANT_PORTABLE] = {"portable",
                             "plain C tiles written for the compiler to vectorise; runs on any CPU",
                             FP_PRECISION_NATIVE, CS_FEATURES},
    [CS_VARIANT_AVX512] =
        {"avx512", "AVX-512F 16-wide tiles on 32 registers, masked remainders; needs AVX-512F",
         FP_PRECISION_NATIVE, CS_FEATURES},
    /* bf16 products: the forward tile path only. FP8 inputs are not bf16, and the backward
     * pass keeps its float32 products (avx512). */
    [CS_VARIANT_AVX512BF16] = {"avx512bf16",
                               "AVX512-BF16 tiles for bf16 inputs: Q K^T and P V (P rounded to "
                               "bf16) by vdpbf16ps, f32 sums; needs AVX512-BF16 and AVX512BW",
                               FP_PRECISION_NATIVE,
                               CS_FEATURES & ~(FP_FEATURE_FP8 | FP_FEATURE_BACKWARD)},
    [CS_VARIANT_AMXBF16] = {"amxbf16",
                            "AMX-BF16 tiles for bf16 inputs: Q K^T and P V (P rounded to bf16) on "
                            "tiles, f32 sums; needs AMX-BF16, AVX512-BF16 and Linux's tile "
                            "permission",
                            FP_PRECISION_NATIVE,
                            CS_FEATURES & ~(FP_FEATURE_FP8 | FP_FEATURE_BACKWARD)},
};

const char *cs_variant_name(int variant) {
    return variant >= 0 && variant < CS_VARIANT_COUNT ? variants[variant].name : "?";
}

static const fp_backend backend = {
    .abi = FP_BACKEND_ABI,
    .name = CS_NAME,
    .kind = FLASHPORT_DEVICE_CPU,
    .host_memory = 1,
    .variants = variants,
    .n_variants = CS_VARIANT_COUNT,
    .probe = probe,
    .device_info = device_info,
    .find_device = NULL,
    .open = open_device,
};

const fp_backend *fp_cpu_simd_entry(const fp_host *host) {
    cs_host = host;
    return &backend;
}
