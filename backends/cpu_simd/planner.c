/* Which path runs a problem, with which tiles and threads, and why. */
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "backward.h"
#include "backend.h"
#include "cpu_features.h"
#include "decode.h"
#include "scratch.h"
#include "topology.h"

int cs_avx2_usable(int f16, const char **why) {
#if defined(CS_HAVE_AVX2_KERNELS)
    const cs_cpu *cpu = cs_cpu_get();
    if (!cpu->avx2)
        *why = "the CPU has no AVX2 (cpuid)";
    else if (!cpu->fma)
        *why = "the CPU has no FMA (cpuid)";
    else if (f16 && !cpu->f16c)
        *why = "the CPU has no F16C for binary16 conversions (f16 data, FP8 E5M2 input) (cpuid)";
    else {
        *why = f16 ? "cpuid: AVX2, FMA and F16C present" : "cpuid: AVX2 and FMA present";
        return 1;
    }
#else
    (void)f16;
    *why = "this build has no AVX2 kernels (not an x86-64 compiler with -mavx2 -mfma -mf16c)";
#endif
    return 0;
}

int cs_avx512_usable(const char **why) {
#if defined(CS_HAVE_AVX512_KERNELS)
    if (!cs_cpu_get()->avx512f) {
        *why = "no AVX-512F, or the OS does not save ZMM state (cpuid, XCR0)";
        return 0;
    }
    *why = "cpuid: AVX-512F present, ZMM state enabled";
    return 1;
#else
    *why = "this build has no AVX-512 kernels (not an x86-64 compiler with -mavx512f)";
    return 0;
#endif
}

int cs_avx512bf16_usable(const char **why) {
#if defined(CS_HAVE_AVX512BF16_KERNELS)
    if (!cs_cpu_get()->avx512_bf16) {
        *why = "no AVX512-BF16 (vdpbf16ps) with AVX512BW, or the OS does not save ZMM state "
               "(cpuid, XCR0)";
        return 0;
    }
    *why = "cpuid: AVX512-BF16 and AVX512BW present, ZMM state enabled";
    return 1;
#else
    *why = "this build has no AVX512-BF16 kernels (not an x86-64 compiler with -mavx512bf16)";
    return 0;
#endif
}

int cs_amxbf16_usable(const char **why) {
#if defined(CS_HAVE_AMXBF16_KERNELS)
    if (!cs_cpu_get()->avx512_bf16) {
        *why = "no AVX512-BF16 beside the tiles (its P V and softmax run there) (cpuid)";
        return 0;
    }
    return cs_amx_permitted(why);
#else
    *why = "this build has no AMX kernels (not an x86-64 compiler with -mamx-tile -mamx-bf16)";
    return 0;
#endif
}

const cs_kernel_ops *cs_variant_ops(int variant) {
#if defined(CS_HAVE_AMXBF16_KERNELS)
    if (variant == CS_VARIANT_AMXBF16) return &cs_kernels_amxbf16;
#endif
#if defined(CS_HAVE_AVX512BF16_KERNELS)
    if (variant == CS_VARIANT_AVX512BF16) return &cs_kernels_avx512bf16;
#endif
#if defined(CS_HAVE_AVX512_KERNELS)
    if (variant == CS_VARIANT_AVX512) return &cs_kernels_avx512;
#endif
#if defined(CS_HAVE_AVX2_KERNELS)
    if (variant == CS_VARIANT_AVX2) return &cs_kernels_avx2;
#endif
    return variant == CS_VARIANT_PORTABLE ? &cs_kernels_portable : NULL;
}

int cs_usable(int variant, int f16, const char **why) {
    if (variant == CS_VARIANT_AVX512) return cs_avx512_usable(why);
    if (variant == CS_VARIANT_AVX512BF16) return cs_avx512bf16_usable(why);
    if (variant == CS_VARIANT_AMXBF16) return cs_amxbf16_usable(why);
    if (variant == CS_VARIANT_AVX2) return cs_avx2_usable(f16, why);
    *why = "plain C, runs on any CPU";
    return 1;
}

/* AVX-512 is taken wherever it can run. On the Zen 4 development machine, whose cores split
 * each 512-bit FMA into two 256-bit halves (the same FMA peak as AVX2: 117 GFLOP/s per core
 * either way), it measured level with AVX2 on one thread (CPU time on the cpu preset: from
 * 1.4% slower to 2.4% faster, about 1% faster on the typical shape), so it costs nothing
 * there; it needs half the loads and instructions per FMA, and on cores with full-width
 * 512-bit FMA units its peak is twice AVX2's. */
int cs_auto_variant(int f16, char *why, unsigned long len) {
    const char *why_512, *why_2;
    if (cs_avx512_usable(&why_512)) {
        snprintf(why, len, "%s", why_512);
        return CS_VARIANT_AVX512;
    }
    if (cs_avx2_usable(f16, &why_2)) {
        snprintf(why, len, "%s; avx512: %s", why_2, why_512);
        return CS_VARIANT_AVX2;
    }
    snprintf(why, len, "avx512: %s; avx2: %s", why_512, why_2);
    return CS_VARIANT_PORTABLE;
}

/* The backward pass's tiles, and why: paged K/V and FP8 inputs are declined by name (their
 * gradients would land in a page pool or in FP8 tensors, which no training step asks for). */
static flashport_status plan_backward(const fp_problem *p, const char *why, int threads,
                                      const char *why_threads, fp_plan *out) {
    const int paged = p->kv_layout == FLASHPORT_KV_PAGED;
    const int fp8 = p->dtype == FLASHPORT_FP8_E4M3 || p->dtype == FLASHPORT_FP8_E5M2;
    if (paged || fp8) {
        snprintf(out->reason, sizeof out->reason,
                 "the %s of %s%s%s is not implemented (only the forward pass reads them)",
                 fp_feature_name(FP_FEATURE_BACKWARD),
                 paged ? fp_feature_name(FP_FEATURE_PAGED) : "", paged && fp8 ? " + " : "",
                 fp8 ? fp_feature_name(FP_FEATURE_FP8) : "");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    cs_bwd_tiling t;
    cs_bwd_tiling_choose(p, threads, &t);
    snprintf(out->reason, sizeof out->reason,
             "%s (%s); backward: key tiles of %d x blocks of %d query rows, dQ %s; %d thread%s "
             "(%s)",
             cs_variant_name(out->variant), why, t.keys, t.rows,
             t.deterministic ? "in a second pass over query blocks (deterministic)"
                             : "accumulated under locks",
             t.threads, t.threads == 1 ? "" : "s", why_threads);
    out->workspace_bytes = cs_bwd_scratch_bytes(&t);
    cs_bwd_tiling_to_plan(&t, out);
    cs_host->log(FP_LOG_DEBUG, CS_NAME, "plan: %s", out->reason);
    return FLASHPORT_OK;
}

/* bf16 products pay on the tile path only where the dot product outruns the FMA by this much
 * FLOP for FLOP: the pairs' packing and P's rounding cost about a tenth of the path's time
 * (at 1.83x the FMA's rate the path ran 1.43-1.76x the float32 products' speed; at 0.48x,
 * 0.58-0.82x). */
#define CS_BF16_DOT_MIN_SPEEDUP 1.25

int cs_bf16_tile_variant(char *why, size_t len) {
    const char *why_bf16, *why_amx;
    if (!cs_avx512bf16_usable(&why_bf16)) {
        snprintf(why, len, "float32 products: %s", why_bf16);
        return -1;
    }
    if (cs_amxbf16_usable(&why_amx)) {
        snprintf(why, len, "Q K^T and P V on AMX tiles; %s", why_amx);
        return CS_VARIANT_AMXBF16;
    }
    const double speedup = cs_bf16_dot_vs_fma();
    if (speedup < CS_BF16_DOT_MIN_SPEEDUP) {
        snprintf(why, len,
                 "float32 products: vdpbf16ps measured at %.2fx the FMA's FLOP rate, under the "
                 "%.2fx at which pairs pay; %s",
                 speedup, CS_BF16_DOT_MIN_SPEEDUP, why_amx);
        return -1;
    }
    snprintf(why, len, "vdpbf16ps measured at %.2fx the FMA's FLOP rate; %s", speedup, why_amx);
    return CS_VARIANT_AVX512BF16;
}

/* The variant of bf16 products for p, or -1 (p stays on the float32 products of the variant
 * cs_auto_variant chose, and why says so where the CPU has bf16 products). A decode of at
 * least CS_AMX_DECODE_MIN_ROWS rows a KV head takes amxbf16 (on the tile path) where the tiles
 * are granted; other decodes take the decode path of avx512bf16 where the CPU has it: the
 * scores on its dot products, half the instructions per key of widening K (where the dot
 * product runs at half the FMA's rate that is the same time: memory bounds a decode). Other
 * problems take cs_bf16_tile_variant's.
 * Forced, avx512bf16 or amxbf16 runs every bf16 forward problem on the tile path. */
static int pick_bf16(const fp_problem *p, int decode, char *why, size_t len) {
    const char *why_bf16, *why_amx;
    if (p->dtype != FLASHPORT_BF16 || !cs_avx512bf16_usable(&why_bf16)) return -1;
    const int64_t rows = p->heads_q / p->heads_kv * p->seq_q;
    if (decode && rows >= CS_AMX_DECODE_MIN_ROWS && cs_amxbf16_usable(&why_amx)) {
        snprintf(why, len,
                 "bf16 inputs, Q K^T and P V on AMX tiles: %lld query rows a KV head (at "
                 "least %d) fill them; %s",
                 (long long)rows, CS_AMX_DECODE_MIN_ROWS, why_amx);
        return CS_VARIANT_AMXBF16;
    }
    if (decode) {
        snprintf(why, len, "bf16 inputs, %s; decode scores on its dot products", why_bf16);
        return CS_VARIANT_AVX512BF16;
    }
    char why_tiles[224];
    const int variant = cs_bf16_tile_variant(why_tiles, sizeof why_tiles);
    if (variant < 0) {
        const size_t used = strlen(why);
        snprintf(why + used, len - used, "; bf16 inputs on %s", why_tiles);
        return -1;
    }
    snprintf(why, len, "bf16 inputs, %s", why_tiles);
    return variant;
}

flashport_status cs_plan(const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    /* binary16 conversions: f16 in or out, and E5M2 (the upper byte of a binary16). */
    const int f16 = p->dtype == FLASHPORT_F16 || p->out_dtype == FLASHPORT_F16 ||
                    p->dtype == FLASHPORT_FP8_E5M2;
    if (forced >= CS_VARIANT_COUNT) {
        snprintf(out->reason, sizeof out->reason, "no variant %d", forced);
        return cs_host->error(FLASHPORT_ERROR_UNKNOWN_KERNEL, CS_NAME, "plan: %s", out->reason);
    }
    char why[256] = "forced";
    if (forced >= 0) {
        const char *why_not;
        if (!cs_usable(forced, f16, &why_not) || !cs_variant_ops(forced)) {
            snprintf(out->reason, sizeof out->reason, "%s cannot run here: %s",
                     cs_variant_name(forced), why_not);
            return cs_host->error(FLASHPORT_ERROR_UNSUPPORTED, CS_NAME, "plan: %s", out->reason);
        }
        out->variant = forced;
    } else {
        out->variant = cs_auto_variant(f16, why, sizeof why);
    }
    const char *why_threads;
    const int threads = cs_threads_default(&why_threads);
    if (op == FP_OP_BACKWARD) return plan_backward(p, why, threads, why_threads, out);
    const char *why_path;
    const int decode = cs_decode_takes(p, &why_path);
    const int bf16 = forced < 0 ? pick_bf16(p, decode, why, sizeof why) : -1;
    if (bf16 >= 0) out->variant = bf16;
    const int pairs = out->variant == CS_VARIANT_AVX512BF16 || out->variant == CS_VARIANT_AMXBF16;
    if (pairs && p->dtype != FLASHPORT_BF16) {
        snprintf(out->reason, sizeof out->reason,
                 "%s multiplies pairs of bf16 values: Q, K and V must be bf16 (these are %s); "
                 "the avx512 path takes every dtype",
                 cs_variant_name(out->variant), flashport_dtype_name(p->dtype));
        return cs_host->error(FLASHPORT_ERROR_UNSUPPORTED, CS_NAME, "plan: %s", out->reason);
    }
    cs_tiling t;
    /* A decode runs on the decode path, but on a path of bf16 pairs forced (the tile path's
     * kernels, checked on decode shapes too) or amxbf16 (chosen for its tiles). */
    if (decode && out->variant != CS_VARIANT_AMXBF16 && (!pairs || forced < 0)) {
        cs_decode_choose(p, threads, &t);
        snprintf(out->reason, sizeof out->reason,
                 "%s (%s); decode (%s): %d query rows per KV head, blocks of %d keys, splits of "
                 "%d keys; %d thread%s (%s)",
                 cs_variant_name(out->variant), why, why_path, t.heads * t.queries, t.keys, t.split,
                 t.threads, t.threads == 1 ? "" : "s", why_threads);
        out->workspace_bytes = cs_decode_scratch_bytes(p, &t);
    } else {
        cs_tiling_choose(p, threads, cs_variant_ops(out->variant), &t);
        char shares[64] = "";
        if (t.share < p->seq_q)
            snprintf(shares, sizeof shares, ", cut from shares of %d queries", t.share);
        snprintf(out->reason, sizeof out->reason,
                 "%s (%s); tiles of %d rows (heads x queries = %d x %d) x %d keys%s (%s: %s); "
                 "%d thread%s (%s)",
                 cs_variant_name(out->variant), why, t.rows, t.heads, t.queries, t.keys, shares,
                 decode ? "decode shape, on the tile path" : "not decode", why_path, t.threads,
                 t.threads == 1 ? "" : "s", why_threads);
        out->workspace_bytes = cs_scratch_bytes(&t);
    }
    cs_tiling_to_plan(&t, out);
    cs_host->log(FP_LOG_DEBUG, CS_NAME, "plan: %s", out->reason);
    return FLASHPORT_OK;
}
