/*
 * The SIMD micro-kernels of cpu_simd, written once for every vector width. A path's file
 * (kernels_avx2.c, kernels_avx512.c) is compiled with its ISA's flags, defines the vector
 * operations below and then includes this file, which builds its kernel table
 * `cs_kernels_<SIMD_NAME>` and its FMA rate loop `cs_fma_peak_<SIMD_NAME>`.
 *
 * What the including file provides:
 *   SIMD_NAME, SIMD_NAME_STR    suffix of the symbols, and the path's name as a string
 *   SIMD_LANES                  floats per register (divides CS_ROW_STEP; three registers of
 *                               rows divide CS_Q_PANEL)
 *   SIMD_SCORE_KEYS             keys of the S = Q K^T register tile (divides CS_KEY_STEP)
 *   vf, vi, vmask, vlanes       float and int registers, a per-lane predicate, and a "first n
 *                               lanes" selector for row remainders
 *   vf_zero vf_set1 vf_loadu vf_storeu vf_broadcast vf_add vf_sub vf_mul vf_max vf_fmadd
 *   vf_round (to nearest even) vf_scale2 (p * 2^n, n integral) vf_first
 *   vf_from_f16 vf_from_bf16 vf_to_f16 (SIMD_LANES 16-bit values)
 *   vlanes_first vf_load_lanes vf_store_lanes (the other lanes read as 0, are not written)
 *   vi_loadu vi_gt vf_lt vf_eq vf_isnan vmask_or vf_select vf_keep (x where m, else 0)
 *   vf_drop (0 where m, else x)
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp2_poly.h"
#include "fp_half.h"
#include "kernel_ops.h"

#define SIMD_CAT2(a, b) a##_##b
#define SIMD_CAT(a, b) SIMD_CAT2(a, b)
#define SIMD_FN(name) SIMD_CAT(name, SIMD_NAME)
#define VL SIMD_LANES
#define SCORE_RV 3 /* registers of rows in the S = Q K^T tile */

_Static_assert(CS_ROW_STEP % VL == 0, "the softmax takes whole registers of rows");
_Static_assert(CS_Q_PANEL % (SCORE_RV * VL) == 0, "a score tile never straddles two Q panels");
_Static_assert(CS_KEY_STEP % SIMD_SCORE_KEYS == 0, "key blocks hold whole score tiles");
_Static_assert(CS_DIM_STEP % 8 == 0, "O and V rows hold whole half-registers of AVX-512");

/* SIMD_LANES 16-bit values widened to float32: f16 through the ISA's conversion, bf16 (the top
 * half of a float32) by a shift. */
static inline vf SIMD_FN(widen16)(const uint16_t *s, int f16) {
    return f16 ? vf_from_f16(s) : vf_from_bf16(s);
}

static void SIMD_FN(load_row)(const void *src, flashport_dtype dtype, int64_t d, int64_t dq,
                              float mul, float *dst) {
    const vf vmul = vf_set1(mul);
    int64_t c = 0;
    if (dtype == FLASHPORT_F32) {
        const float *s = (const float *)src;
        for (; c + VL <= d; c += VL) vf_storeu(dst + c, vf_mul(vf_loadu(s + c), vmul));
        if (c < d) {
            const vlanes n = vlanes_first(d - c);
            vf_store_lanes(dst + c, vf_mul(vf_load_lanes(s + c, n), vmul), n);
        }
    } else {
        const uint16_t *s = (const uint16_t *)src;
        const int f16 = dtype == FLASHPORT_F16;
        for (; c + VL <= d; c += VL) vf_storeu(dst + c, vf_mul(SIMD_FN(widen16)(s + c, f16), vmul));
        if (c < d) {
            /* A masked load of 16-bit lanes needs AVX512BW: the remainder is widened from a
             * copy instead, so reads never pass the row's end. */
            uint16_t tail[VL] = {0};
            memcpy(tail, s + c, (size_t)(d - c) * sizeof *s);
            const vlanes n = vlanes_first(d - c);
            vf_store_lanes(dst + c, vf_mul(SIMD_FN(widen16)(tail, f16), vmul), n);
        }
    }
    for (c = d; c < dq; ++c) dst[c] = 0.0f;
}

static void SIMD_FN(store_row)(const float *src, int64_t d, float mul, flashport_dtype dtype,
                               void *dst) {
    const vf vmul = vf_set1(mul);
    int64_t c = 0;
    if (dtype == FLASHPORT_F32) {
        float *o = (float *)dst;
        for (; c + VL <= d; c += VL) vf_storeu(o + c, vf_mul(vf_loadu(src + c), vmul));
        if (c < d) {
            const vlanes n = vlanes_first(d - c);
            vf_store_lanes(o + c, vf_mul(vf_load_lanes(src + c, n), vmul), n);
        }
    } else if (dtype == FLASHPORT_F16) {
        uint16_t *o = (uint16_t *)dst;
        for (; c + VL <= d; c += VL) vf_to_f16(o + c, vf_mul(vf_loadu(src + c), vmul));
        if (c < d) {
            uint16_t tail[VL];
            vf_to_f16(tail, vf_mul(vf_load_lanes(src + c, vlanes_first(d - c)), vmul));
            memcpy(o + c, tail, (size_t)(d - c) * sizeof *o);
        }
    } else {
        /* One row per tile is stored; the scalar rounding is not on the hot path. */
        uint16_t *o = (uint16_t *)dst;
        for (; c < d; ++c) o[c] = fp_f32_to_bf16(src[c] * mul);
    }
}

/* RV registers of rows (VL * RV rows of one Q panel) x SIMD_SCORE_KEYS keys: the accumulators
 * stay in registers across a chunk of the head dimension; per column, RV loads of Q and one
 * broadcast of K per key feed RV * SIMD_SCORE_KEYS FMAs. Called with a constant RV so that the
 * compiler unrolls it. */
static inline __attribute__((always_inline)) void SIMD_FN(scores_tile)(
    const float *qp, const float *k, int64_t d, int64_t dq, int keys, float *st, int64_t ldst,
    const int RV) {
    for (int j = 0; j < keys; j += SIMD_SCORE_KEYS) {
        const float *kj = k + (int64_t)j * dq;
        for (int64_t c0 = 0; c0 < d; c0 += CS_SCORE_CHUNK) {
            const int64_t c1 = c0 + CS_SCORE_CHUNK < d ? c0 + CS_SCORE_CHUNK : d;
            vf acc[SIMD_SCORE_KEYS][SCORE_RV];
            for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj)
                for (int rv = 0; rv < RV; ++rv) acc[jj][rv] = vf_zero();
            for (int64_t c = c0; c < c1; ++c) {
                vf x[SCORE_RV];
                for (int rv = 0; rv < RV; ++rv) x[rv] = vf_loadu(qp + c * CS_Q_PANEL + VL * rv);
                for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj) {
                    const vf y = vf_broadcast(kj + jj * dq + c);
                    for (int rv = 0; rv < RV; ++rv) acc[jj][rv] = vf_fmadd(x[rv], y, acc[jj][rv]);
                }
            }
            for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj)
                for (int rv = 0; rv < RV; ++rv) {
                    float *out = st + (int64_t)(j + jj) * ldst + VL * rv;
                    vf_storeu(out, c0 == 0 ? acc[jj][rv] : vf_add(vf_loadu(out), acc[jj][rv]));
                }
        }
    }
}

static void SIMD_FN(scores)(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                            int keys, float *st, int64_t ldst) {
    for (int r = 0; r < rows; r += SCORE_RV * VL) {
        const float *tile = qp + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        const int left = rows - r; /* a multiple of VL */
        if (left >= 3 * VL) SIMD_FN(scores_tile)(tile, k, d, dq, keys, st + r, ldst, 3);
        else if (left >= 2 * VL) SIMD_FN(scores_tile)(tile, k, d, dq, keys, st + r, ldst, 2);
        else SIMD_FN(scores_tile)(tile, k, d, dq, keys, st + r, ldst, 1);
    }
}

/* 2^x for x <= 0 (or NaN, which stays NaN): x = n + f with n an integer and |f| <= 1/2,
 * 2^f by the polynomial, times 2^n. */
static inline vf SIMD_FN(exp2)(vf x) {
    const vmask underflow = vf_lt(x, vf_set1(CS_EXP2_MIN));
    const vf n = vf_round(x);
    const vf f = vf_sub(x, n);
    vf p = vf_set1(CS_EXP2_C7);
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C6));
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C5));
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C4));
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C3));
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C2));
    p = vf_fmadd(p, f, vf_set1(CS_EXP2_C1));
    p = vf_fmadd(p, f, vf_set1(1.0f));
    return vf_drop(underflow, vf_scale2(p, n));
}

/* A register of rows at a time, straight down the keys: no horizontal work. */
static void SIMD_FN(softmax)(float *st, int64_t ldst, int rows, const int *visible, float scale2,
                             float *m, float *l, float *alpha) {
    const vf neg_inf = vf_set1(-INFINITY), vscale = vf_set1(scale2);
    for (int r = 0; r < rows; r += VL) {
        const vi vis = vi_loadu(visible + r);
        int keys = 0;
        for (int i = 0; i < VL; ++i) keys = visible[r + i] > keys ? visible[r + i] : keys;
        if (keys == 0) {
            vf_storeu(alpha + r, vf_set1(1.0f));
            continue;
        }
        const vf m_old = vf_loadu(m + r);
        vf block_max = neg_inf;
        vmask nan = vf_isnan(m_old);
        /* The logits are written back and the weights taken from them, so that no weight
         * exceeds 2^(m - m) = 1: a fused st * scale2 - m is the product's rounding error,
         * which for logits past 2^31 is past 2^7 and made 2^x infinite. */
        for (int j = 0; j < keys; ++j) {
            const vf t = vf_mul(vf_loadu(st + j * ldst + r), vscale);
            vf_storeu(st + j * ldst + r, t);
            const vf s = vf_select(vi_gt(vis, j), t, neg_inf);
            block_max = vf_max(block_max, s);
            nan = vmask_or(nan, vf_isnan(s));
        }
        /* max drops NaN, so a row that saw one is set to NaN explicitly. */
        const vf m_new = vf_select(nan, vf_set1(NAN), vf_max(m_old, block_max));
        const vf a = vf_drop(vf_eq(m_old, neg_inf), SIMD_FN(exp2)(vf_sub(m_old, m_new)));
        /* Every score so far -inf: 2^(-inf - 0) = 0 for each, where -inf - -inf is NaN. */
        const vf m_sub = vf_drop(vf_eq(m_new, neg_inf), m_new);
        vf sum = vf_zero();
        for (int j = 0; j < keys; ++j) {
            float *sj = st + j * ldst + r;
            const vf p = vf_keep(vi_gt(vis, j), SIMD_FN(exp2)(vf_sub(vf_loadu(sj), m_sub)));
            vf_storeu(sj, p);
            sum = vf_add(sum, p);
        }
        vf_storeu(m + r, m_new);
        vf_storeu(alpha + r, a);
        vf_storeu(l + r, vf_fmadd(vf_loadu(l + r), a, sum));
    }
}

/* CS_PV_ROWS rows x 2 registers of columns of O, in registers for the whole key block: per key,
 * two loads of V and CS_PV_ROWS broadcasts of P feed 2 * CS_PV_ROWS FMAs. The strip's last
 * columns (cols is a multiple of CS_DIM_STEP, not of two registers) take one register at a
 * time, the last one masked where it is half a register. */
static void SIMD_FN(pv_rows)(const float *p, int64_t ldp, const float *v, int64_t dq,
                             int64_t cols, int keys, const float *alpha, float *o) {
    int64_t c = 0;
    for (; c + 2 * VL <= cols; c += 2 * VL) {
        vf acc[CS_PV_ROWS][2];
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const vf a = vf_broadcast(alpha + r);
            acc[r][0] = vf_mul(a, vf_loadu(o + r * dq + c));
            acc[r][1] = vf_mul(a, vf_loadu(o + r * dq + c + VL));
        }
        for (int j = 0; j < keys; ++j) {
            const vf v0 = vf_loadu(v + (int64_t)j * dq + c);
            const vf v1 = vf_loadu(v + (int64_t)j * dq + c + VL);
            const float *pj = p + (int64_t)j * ldp;
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const vf pr = vf_broadcast(pj + r);
                acc[r][0] = vf_fmadd(pr, v0, acc[r][0]);
                acc[r][1] = vf_fmadd(pr, v1, acc[r][1]);
            }
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            vf_storeu(o + r * dq + c, acc[r][0]);
            vf_storeu(o + r * dq + c + VL, acc[r][1]);
        }
    }
    for (; c < cols; c += VL) {
        const vlanes n = vlanes_first(cols - c);
        vf acc[CS_PV_ROWS];
        for (int r = 0; r < CS_PV_ROWS; ++r)
            acc[r] = vf_mul(vf_broadcast(alpha + r), vf_load_lanes(o + r * dq + c, n));
        for (int j = 0; j < keys; ++j) {
            const vf v0 = vf_load_lanes(v + (int64_t)j * dq + c, n);
            for (int r = 0; r < CS_PV_ROWS; ++r)
                acc[r] = vf_fmadd(vf_broadcast(p + (int64_t)j * ldp + r), v0, acc[r]);
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) vf_store_lanes(o + r * dq + c, acc[r], n);
    }
}

static void SIMD_FN(pv_row)(const float *p, int64_t ldp, const float *v, int64_t dq, int j0,
                            int j1, float *o) {
    for (int64_t c = 0; c < dq; c += VL) {
        const vlanes n = vlanes_first(dq - c);
        vf acc = vf_load_lanes(o + c, n);
        for (int j = j0; j < j1; ++j)
            acc = vf_fmadd(vf_broadcast(p + (int64_t)j * ldp), vf_load_lanes(v + (int64_t)j * dq + c, n), acc);
        vf_store_lanes(o + c, acc, n);
    }
}

const cs_kernel_ops SIMD_FN(cs_kernels) = {
    .name = SIMD_NAME_STR,
    .load_row = SIMD_FN(load_row),
    .store_row = SIMD_FN(store_row),
    .scores = SIMD_FN(scores),
    .softmax = SIMD_FN(softmax),
    .pv_rows = SIMD_FN(pv_rows),
    .pv_row = SIMD_FN(pv_row),
};

/* f32 FMA rate of one core: twelve independent FMA chains, enough to cover the FMA latency
 * (4-5 cycles) times the FMA ports (2) of current x86 cores. */
#define FMA_CHAINS 12

double SIMD_FN(cs_fma_peak)(int64_t iterations) {
    vf acc[FMA_CHAINS];
    for (int i = 0; i < FMA_CHAINS; ++i) acc[i] = vf_set1((float)i * 1e-3f);
    /* a*x + b with a just below one keeps every value finite however long the loop runs. */
    const vf a = vf_set1(0.999999f), b = vf_set1(1e-6f);
    for (int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < FMA_CHAINS; ++i) acc[i] = vf_fmadd(acc[i], a, b);
    /* Folding the chains into a volatile sink keeps the compiler from dropping the loop. */
    vf sum = acc[0];
    for (int i = 1; i < FMA_CHAINS; ++i) sum = vf_add(sum, acc[i]);
    volatile float sink = vf_first(sum);
    (void)sink;
    return (double)iterations * FMA_CHAINS * VL * 2;
}
