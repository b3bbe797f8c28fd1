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
 *   SIMD_PV_REGS, SIMD_PV_COLS  registers of columns in the O += P V tile (2 or more), and the
 *                               columns of O a call takes (the kernel table's pv_cols)
 *   vf, vi, vmask, vlanes       float and int registers, a per-lane predicate, and a "first n
 *                               lanes" selector for row remainders
 *   vf_zero vf_set1 vf_loadu vf_storeu vf_broadcast vf_add vf_sub vf_mul vf_div vf_max vf_min
 *   (max(a, b) and min(a, b) are b when either is NaN, as on x86) vf_fmadd vf_round
 *   (to nearest even) vf_scale2 (p * 2^n, n integral) vf_abs vf_first
 *   vf_sum (the sum of the lanes) vf_sum4 (the sums of four registers' lanes, stored)
 *   vf_from_f16 vf_from_bf16 vf_to_f16 (SIMD_LANES 16-bit values)
 *   vf_from_e4m3 vf_from_e5m2 (SIMD_LANES FP8 values)
 *   vlanes_first vf_load_lanes vf_store_lanes (the other lanes read as 0, are not written)
 *   vi_loadu vi_gt vf_lt vf_eq vf_isnan vmask_or vmask_andnot (b and not a) vf_select vf_keep
 *   (x where m, else 0) vf_drop (0 where m, else x)
 *
 * A file whose products take other operand layouts (kernels_avx512bf16.c: 16-bit pairs)
 * defines SIMD_OWN_PRODUCTS: the float32 scores, pv_rows and pv_rows_ranged, the table and the FMA
 * rate loop are then left out, and it builds its own table from its products and the rest.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp2_poly.h"
#include "fp_half.h"
#include "kernel_ops.h"
#include "tanh_rational.h"

#define SIMD_CAT2(a, b) a##_##b
#define SIMD_CAT(a, b)  SIMD_CAT2(a, b)
#define SIMD_FN(name)   SIMD_CAT(name, SIMD_NAME)
#define VL              SIMD_LANES
#define SCORE_RV        3 /* registers of rows in the S = Q K^T tile */

_Static_assert(CS_ROW_STEP % VL == 0, "the softmax takes whole registers of rows");
_Static_assert(CS_Q_PANEL % (SCORE_RV * VL) == 0, "a score tile never straddles two Q panels");
_Static_assert(CS_KEY_STEP % SIMD_SCORE_KEYS == 0, "key blocks hold whole score tiles");
_Static_assert(CS_DIM_STEP % 8 == 0, "O and V rows hold whole half-registers of AVX-512");

/* SIMD_LANES 16-bit values widened to float32: f16 through the ISA's conversion, bf16 (the top
 * half of a float32) by a shift. */
static inline vf SIMD_FN(widen16)(const uint16_t *s, int f16) {
    return f16 ? vf_from_f16(s) : vf_from_bf16(s);
}

/* SIMD_LANES FP8 values widened to float32. */
static inline vf SIMD_FN(widen8)(const uint8_t *s, int e4m3) {
    return e4m3 ? vf_from_e4m3(s) : vf_from_e5m2(s);
}

static void SIMD_FN(load_row)(const void *src, flashport_dtype dtype, int64_t d, int64_t dq,
                              float mul, float *dst) {
    const vf vmul = vf_set1(mul);
    int64_t c = 0;
    if (dtype == FLASHPORT_FP8_E4M3 || dtype == FLASHPORT_FP8_E5M2) {
        const uint8_t *s = (const uint8_t *)src;
        const int e4m3 = dtype == FLASHPORT_FP8_E4M3;
        for (; c + VL <= d; c += VL) vf_storeu(dst + c, vf_mul(SIMD_FN(widen8)(s + c, e4m3), vmul));
        if (c < d) {
            uint8_t tail[VL] = {0}; /* as for 16-bit values below: no read past the row */
            memcpy(tail, s + c, (size_t)(d - c));
            const vlanes n = vlanes_first(d - c);
            vf_store_lanes(dst + c, vf_mul(SIMD_FN(widen8)(tail, e4m3), vmul), n);
        }
    } else if (dtype == FLASHPORT_F32) {
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

#if !defined(SIMD_OWN_PRODUCTS)
/* RV registers of rows (VL * RV rows of one Q panel) x SIMD_SCORE_KEYS keys: the accumulators
 * stay in registers across a chunk of the head dimension; per column, RV loads of Q and one
 * broadcast of K per key feed RV * SIMD_SCORE_KEYS FMAs. Called with a constant RV so that the
 * compiler unrolls it. */
static inline __attribute__((always_inline)) void
SIMD_FN(scores_tile)(const float *qp, const float *k, int64_t d, int64_t dq, int keys, float *st,
                     int64_t ldst, const int RV) {
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
#endif

/* Union of the key ranges of rows [0, n): [*j0, *j1), or j1 = 0 when no row sees a key. */
static inline void SIMD_FN(rows_keys)(const int *lo, const int *hi, int n, int *j0, int *j1) {
    *j0 = INT32_MAX;
    *j1 = 0;
    for (int i = 0; i < n; ++i)
        if (lo[i] < hi[i]) {
            *j0 = lo[i] < *j0 ? lo[i] : *j0;
            *j1 = hi[i] > *j1 ? hi[i] : *j1;
        }
}

#if !defined(SIMD_OWN_PRODUCTS)
/* Register tiles of up to SCORE_RV registers of rows. For each step of SIMD_SCORE_KEYS keys
 * only the registers from the first to the last whose rows see one of the step's keys take
 * part: a tile's rows are positions in order, so along a window's edges the rows of a panel
 * need keys the panel's other rows do not. */
static void SIMD_FN(scores)(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                            const int *lo, const int *hi, float *st, int64_t ldst) {
    for (int r = 0; r < rows; r += SCORE_RV * VL) {
        const float *tile = qp + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        const int regs = (rows - r) / VL < SCORE_RV ? (rows - r) / VL : SCORE_RV;
        int a[SCORE_RV], e[SCORE_RV], j0 = INT32_MAX, j1 = 0;
        for (int g = 0; g < regs; ++g) {
            SIMD_FN(rows_keys)(lo + r + g * VL, hi + r + g * VL, VL, &a[g], &e[g]);
            j0 = a[g] < j0 ? a[g] : j0;
            j1 = e[g] > j1 ? e[g] : j1;
        }
        for (int j = j1 ? j0 / SIMD_SCORE_KEYS * SIMD_SCORE_KEYS : 0; j < j1;
             j += SIMD_SCORE_KEYS) {
            int g0 = 0, g1 = regs;
            while (g0 < g1 && (a[g0] >= j + SIMD_SCORE_KEYS || e[g0] <= j)) ++g0;
            while (g1 > g0 && (a[g1 - 1] >= j + SIMD_SCORE_KEYS || e[g1 - 1] <= j)) --g1;
            const float *q = tile + g0 * VL, *kj = k + (int64_t)j * dq;
            float *out = st + (int64_t)j * ldst + r + g0 * VL;
            if (g1 - g0 == 3)
                SIMD_FN(scores_tile)(q, kj, d, dq, SIMD_SCORE_KEYS, out, ldst, 3);
            else if (g1 - g0 == 2)
                SIMD_FN(scores_tile)(q, kj, d, dq, SIMD_SCORE_KEYS, out, ldst, 2);
            else if (g1 - g0 == 1)
                SIMD_FN(scores_tile)(q, kj, d, dq, SIMD_SCORE_KEYS, out, ldst, 1);
        }
    }
}
#endif

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

/* The softcap's rational tanh with cap_out folded into its numerator (tanh_rational.h). */
typedef struct softcap_poly {
    vf clamp, neg_clamp, p0, p1, p2, p3, p4;
} softcap_poly;

/* The base-2 logit of the score at sj (key j of the block, rows r.. of a register): scale times
 * the score, through the modifiers with `modified` (written back for the second pass), -inf
 * where a row does not see key j with `masked`. */
static inline __attribute__((always_inline)) vf
SIMD_FN(logit)(float *sj, int64_t off, int j, vf scale, const softcap_poly *cap, vf neg_slope,
               vf diag, const cs_score_mods *mods, int c0, int c1, vi vlo, vi vhi, const int masked,
               const int modified) {
    vf t = vf_mul(vf_loadu(sj), scale);
    if (modified) {
        if (mods->cap_out != 0.0f) {
            /* min and max return their second operand for NaN: a NaN score stays NaN. */
            const vf x = vf_max(cap->neg_clamp, vf_min(cap->clamp, t));
            const vf x2 = vf_mul(x, x);
            vf p = vf_fmadd(cap->p4, x2, cap->p3);
            p = vf_fmadd(p, x2, cap->p2);
            p = vf_fmadd(p, x2, cap->p1);
            p = vf_fmadd(p, x2, cap->p0);
            vf q = vf_fmadd(vf_set1(CS_TANH_Q4), x2, vf_set1(CS_TANH_Q3));
            q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q2));
            q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q1));
            q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q0));
            t = vf_div(vf_mul(x, p), q);
        }
        if (mods->slope) t = vf_fmadd(neg_slope, vf_abs(vf_sub(diag, vf_set1((float)j))), t);
        if (mods->bias) t = vf_add(t, vf_loadu(mods->bias + off));
        vf_storeu(sj, t);
    }
    if (masked && (j < c0 || j >= c1))
        t = vf_select(vmask_andnot(vi_gt(vlo, j), vi_gt(vhi, j)), t, vf_set1(-INFINITY));
    return t;
}

/* One register of rows over keys [j0, j1) of the block. Rows see keys lo <= j < hi, so only
 * keys outside [c0, c1), those some row does not see, need a mask; with `masked` 0 every row
 * sees all of [j0, j1) (the inside of a window, every dense block) and none does. With
 * `modified` the first pass turns each score into the base-2 logit of cs_score_mods and writes
 * it back for the second; the softcap's tanh is tanh_rational.h with cap_out folded into P.
 * Both flags are constants at each call, so that the plain problem's loops carry none of the
 * modifiers' work; which modifiers are on is fixed for the call, so their branches are always
 * predicted. The first pass keeps four running maxima, so that its keys are not one chain of
 * vmaxps at 4 cycles a link. */
static inline __attribute__((always_inline)) void
SIMD_FN(softmax_rows)(float *st, int64_t ldst, int r, int j0, int j1, int c0, int c1, vi vlo,
                      vi vhi, const cs_score_mods *mods, float *m, float *l, float *alpha,
                      const int masked, const int modified) {
    const vf neg_inf = vf_set1(-INFINITY);
    const vf scale = vf_set1(mods->cap_out != 0.0f ? mods->cap_in : mods->scale2);
    const softcap_poly cap = {vf_set1(CS_TANH_CLAMP),
                              vf_set1(-CS_TANH_CLAMP),
                              vf_set1(CS_TANH_P0 * mods->cap_out),
                              vf_set1(CS_TANH_P1 * mods->cap_out),
                              vf_set1(CS_TANH_P2 * mods->cap_out),
                              vf_set1(CS_TANH_P3 * mods->cap_out),
                              vf_set1(CS_TANH_P4 * mods->cap_out)};
    const int alibi = mods->slope != NULL;
    const vf neg_slope = alibi ? vf_sub(vf_zero(), vf_loadu(mods->slope + r)) : vf_zero();
    const vf diag = alibi ? vf_loadu(mods->diag + r) : vf_zero();
    const vf m_old = vf_loadu(m + r);
    vf max0 = neg_inf, max1 = neg_inf, max2 = neg_inf, max3 = neg_inf;
    vmask nan = vf_isnan(m_old);
#define CS_LOGIT(jj)                                                                               \
    SIMD_FN(logit)                                                                                 \
    (st + (jj)*ldst + r, (jj)*ldst + r, jj, scale, &cap, neg_slope, diag, mods, c0, c1, vlo, vhi,  \
     masked, modified)
    int j = j0;
    for (; j + 4 <= j1; j += 4) {
        const vf t0 = CS_LOGIT(j), t1 = CS_LOGIT(j + 1), t2 = CS_LOGIT(j + 2), t3 = CS_LOGIT(j + 3);
        max0 = vf_max(max0, t0);
        max1 = vf_max(max1, t1);
        max2 = vf_max(max2, t2);
        max3 = vf_max(max3, t3);
        nan = vmask_or(nan, vmask_or(vmask_or(vf_isnan(t0), vf_isnan(t1)),
                                     vmask_or(vf_isnan(t2), vf_isnan(t3))));
    }
    for (; j < j1; ++j) {
        const vf t = CS_LOGIT(j);
        max0 = vf_max(max0, t);
        nan = vmask_or(nan, vf_isnan(t));
    }
#undef CS_LOGIT
    const vf block_max = vf_max(vf_max(max0, max1), vf_max(max2, max3));
    /* max drops NaN, so a row that saw one is set to NaN explicitly. */
    const vf m_new = vf_select(nan, vf_set1(NAN), vf_max(m_old, block_max));
    const vf a = vf_drop(vf_eq(m_old, neg_inf), SIMD_FN(exp2)(vf_sub(m_old, m_new)));
    /* While every score a row saw is -inf (masked by the bias), its probabilities are
     * 2^(-inf - 0) = 0 rather than 2^(-inf + inf) = NaN. */
    const vf m_sub = vf_drop(vf_eq(m_new, neg_inf), m_new);
    vf sum = vf_zero();
    for (int j = j0; j < j1; ++j) {
        float *sj = st + j * ldst + r;
        /* The plain path rounds the product as the first pass did, so that no weight exceeds
         * 2^(m - m) = 1: a fused st * scale - m is the product's rounding error, which for
         * logits past 2^31 exceeds 2^7 and made 2^x infinite (found by fuzz_cpu_simd). */
        vf p = SIMD_FN(exp2)(modified ? vf_sub(vf_loadu(sj), m_sub)
                                      : vf_sub(vf_mul(vf_loadu(sj), scale), m_sub));
        if (masked && (j < c0 || j >= c1))
            p = vf_keep(vmask_andnot(vi_gt(vlo, j), vi_gt(vhi, j)), p);
        vf_storeu(sj, p);
        sum = vf_add(sum, p);
    }
    vf_storeu(m + r, m_new);
    vf_storeu(alpha + r, a);
    vf_storeu(l + r, vf_fmadd(vf_loadu(l + r), a, sum));
}

/* A register of rows at a time, straight down the keys the register's rows see: no horizontal
 * work. */
static void SIMD_FN(softmax)(float *st, int64_t ldst, int rows, const int *lo, const int *hi,
                             const cs_score_mods *mods, float *m, float *l, float *alpha) {
    const int modified = mods->cap_out != 0.0f || mods->slope || mods->bias;
    for (int r = 0; r < rows; r += VL) {
        int j0, j1, c0 = 0, c1 = INT32_MAX;
        SIMD_FN(rows_keys)(lo + r, hi + r, VL, &j0, &j1);
        if (j1 == 0) {
            vf_storeu(alpha + r, vf_set1(1.0f));
            continue;
        }
        for (int i = 0; i < VL; ++i) {
            c0 = lo[r + i] > c0 ? lo[r + i] : c0;
            c1 = hi[r + i] < c1 ? hi[r + i] : c1;
        }
        const int ragged = c0 != j0 || c1 != j1;
        const vi vlo = vi_loadu(lo + r), vhi = vi_loadu(hi + r);
        if (ragged && modified)
            SIMD_FN(softmax_rows)(st, ldst, r, j0, j1, c0, c1, vlo, vhi, mods, m, l, alpha, 1, 1);
        else if (ragged)
            SIMD_FN(softmax_rows)(st, ldst, r, j0, j1, c0, c1, vlo, vhi, mods, m, l, alpha, 1, 0);
        else if (modified)
            SIMD_FN(softmax_rows)(st, ldst, r, j0, j1, c0, c1, vlo, vhi, mods, m, l, alpha, 0, 1);
        else
            SIMD_FN(softmax_rows)(st, ldst, r, j0, j1, c0, c1, vlo, vhi, mods, m, l, alpha, 0, 0);
    }
}

#if !defined(SIMD_OWN_PRODUCTS)
/* CS_PV_ROWS rows x NR registers of columns of O from column c, in registers for the whole key
 * range: per key, NR loads of V and CS_PV_ROWS broadcasts of P feed NR * CS_PV_ROWS FMAs. With
 * `partial` (NR = 1) only the first lanes m are loaded and stored. Keys [a, e) go to every row;
 * with `ranged` each row r also takes its keys rlo[r] <= j < rhi[r] in [ua, a) and [e, ue), in
 * the same registers: a key a row does not see is never multiplied in, so a hidden V row that
 * holds inf or NaN cannot reach it. NR, partial and ranged are constants at each call. */
static inline __attribute__((always_inline)) void
SIMD_FN(pv_regs)(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t c, int a, int e,
                 int ua, int ue, const int *rlo, const int *rhi, const float *alpha, float *o,
                 vlanes m, const int NR, const int partial, const int ranged) {
#define CS_PV_LOAD(ptr)     (partial ? vf_load_lanes(ptr, m) : vf_loadu(ptr))
#define CS_PV_STORE(ptr, x) (partial ? vf_store_lanes(ptr, x, m) : vf_storeu(ptr, x))
    vf acc[CS_PV_ROWS][SIMD_PV_REGS];
    for (int r = 0; r < CS_PV_ROWS; ++r) {
        const vf s = vf_broadcast(alpha + r);
        for (int i = 0; i < NR; ++i) acc[r][i] = vf_mul(s, CS_PV_LOAD(o + r * dq + c + i * VL));
    }
    for (int j = a; j < e; ++j) {
        vf x[SIMD_PV_REGS];
        for (int i = 0; i < NR; ++i) x[i] = CS_PV_LOAD(v + (int64_t)j * dq + c + i * VL);
        const float *pj = p + (int64_t)j * ldp;
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const vf pr = vf_broadcast(pj + r);
            for (int i = 0; i < NR; ++i) acc[r][i] = vf_fmadd(pr, x[i], acc[r][i]);
        }
    }
    if (ranged)
        for (int side = 0; side < 2; ++side)
            for (int j = side ? e : ua; j < (side ? ue : a); ++j) {
                vf x[SIMD_PV_REGS];
                for (int i = 0; i < NR; ++i) x[i] = CS_PV_LOAD(v + (int64_t)j * dq + c + i * VL);
                const float *pj = p + (int64_t)j * ldp;
                for (int r = 0; r < CS_PV_ROWS; ++r)
                    if (rlo[r] <= j && j < rhi[r]) {
                        const vf pr = vf_broadcast(pj + r);
                        for (int i = 0; i < NR; ++i) acc[r][i] = vf_fmadd(pr, x[i], acc[r][i]);
                    }
            }
    for (int r = 0; r < CS_PV_ROWS; ++r)
        for (int i = 0; i < NR; ++i) CS_PV_STORE(o + r * dq + c + i * VL, acc[r][i]);
#undef CS_PV_LOAD
#undef CS_PV_STORE
}

/* Columns [0, cols) of O (cols a multiple of CS_DIM_STEP) in tiles of SIMD_PV_REGS registers,
 * then of two, then one register at a time, the last masked where it is half a register. */
static inline __attribute__((always_inline)) void
SIMD_FN(pv_strip)(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols, int a,
                  int e, int n, const int *lo, const int *hi, const float *alpha, float *o,
                  const int ranged) {
    /* The rows' own ranges (empty for rows past n) and the keys outside [a, e) any row sees. */
    int rlo[CS_PV_ROWS], rhi[CS_PV_ROWS], ua = a, ue = e;
    if (ranged)
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const int seen = r < n && lo[r] < hi[r];
            rlo[r] = seen ? lo[r] : 0;
            rhi[r] = seen ? hi[r] : 0;
            ua = seen && lo[r] < ua ? lo[r] : ua;
            ue = seen && hi[r] > ue ? hi[r] : ue;
        }
    const vlanes all = vlanes_first(VL);
#define CS_PV_TILE(NR, m, partial)                                                                 \
    SIMD_FN(pv_regs)(p, ldp, v, dq, c, a, e, ua, ue, rlo, rhi, alpha, o, m, NR, partial, ranged)
    int64_t c = 0;
    for (; c + SIMD_PV_REGS * VL <= cols; c += SIMD_PV_REGS * VL) CS_PV_TILE(SIMD_PV_REGS, all, 0);
    if (SIMD_PV_REGS > 2)
        for (; c + 2 * VL <= cols; c += 2 * VL) CS_PV_TILE(2, all, 0);
    for (; c < cols; c += VL) CS_PV_TILE(1, vlanes_first(cols - c), 1);
#undef CS_PV_TILE
}

static void SIMD_FN(pv_rows)(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                             int keys, const float *alpha, float *o) {
    SIMD_FN(pv_strip)(p, ldp, v, dq, cols, 0, keys, 0, NULL, NULL, alpha, o, 0);
}

static void SIMD_FN(pv_rows_ranged)(const float *p, int64_t ldp, const float *v, int64_t dq,
                                    int64_t cols, int a, int e, int n, const int *lo, const int *hi,
                                    const float *alpha, float *o) {
    SIMD_FN(pv_strip)(p, ldp, v, dq, cols, a, e, n, lo, hi, alpha, o, 1);
}
#endif

/* One register of rows, every key of the block: the logits as the softmax forms them, P from
 * the row's LSE, and dS; entries of keys a row does not see are zeroed by mask, so that stale
 * scratch (even NaN) never reaches the products. */
static void SIMD_FN(grads)(float *st, float *dp, int64_t ld, int rows, int keys, const int *lo,
                           const int *hi, const cs_score_mods *mods, const float *lse2,
                           const float *dsum, float gscale) {
    const int softcap = mods->cap_out != 0.0f, alibi = mods->slope != NULL;
    const vf scale = vf_set1(softcap ? mods->cap_in : mods->scale2);
    const vf cap_out = vf_set1(mods->cap_out), one = vf_set1(1.0f), g0 = vf_set1(gscale);
    const vf clamp = vf_set1(CS_TANH_CLAMP), neg_clamp = vf_set1(-CS_TANH_CLAMP);
    for (int r = 0; r < rows; r += VL) {
        const vi vlo = vi_loadu(lo + r), vhi = vi_loadu(hi + r);
        const vf l2 = vf_loadu(lse2 + r), ds = vf_loadu(dsum + r);
        const vf neg_slope = alibi ? vf_sub(vf_zero(), vf_loadu(mods->slope + r)) : vf_zero();
        const vf diag = alibi ? vf_loadu(mods->diag + r) : vf_zero();
        for (int j = 0; j < keys; ++j) {
            float *sj = st + j * ld + r, *dj = dp + j * ld + r;
            const vmask seen = vmask_andnot(vi_gt(vlo, j), vi_gt(vhi, j));
            vf t = vf_mul(vf_loadu(sj), scale), g = g0;
            if (softcap) {
                const vf x = vf_max(neg_clamp, vf_min(clamp, t));
                const vf x2 = vf_mul(x, x);
                vf p = vf_fmadd(vf_set1(CS_TANH_P4), x2, vf_set1(CS_TANH_P3));
                p = vf_fmadd(p, x2, vf_set1(CS_TANH_P2));
                p = vf_fmadd(p, x2, vf_set1(CS_TANH_P1));
                p = vf_fmadd(p, x2, vf_set1(CS_TANH_P0));
                vf q = vf_fmadd(vf_set1(CS_TANH_Q4), x2, vf_set1(CS_TANH_Q3));
                q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q2));
                q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q1));
                q = vf_fmadd(q, x2, vf_set1(CS_TANH_Q0));
                const vf y = vf_div(vf_mul(x, p), q);
                t = vf_mul(y, cap_out);
                g = vf_mul(g0, vf_sub(one, vf_mul(y, y)));
            }
            if (alibi) t = vf_fmadd(neg_slope, vf_abs(vf_sub(diag, vf_set1((float)j))), t);
            if (mods->bias) t = vf_add(t, vf_loadu(mods->bias + j * ld + r));
            const vf prob = vf_keep(seen, SIMD_FN(exp2)(vf_sub(t, l2)));
            vf_storeu(sj, prob);
            vf_storeu(dj, vf_keep(seen, vf_mul(vf_mul(prob, vf_sub(vf_loadu(dj), ds)), g)));
        }
    }
}

/* pv_rows transposed: CS_PV_ROWS output rows x NR registers of columns from column c in
 * registers over the whole reduction; per row r of x, NR loads and CS_PV_ROWS broadcasts feed
 * NR * CS_PV_ROWS FMAs. With `partial` (NR = 1) only the first lanes m are loaded and stored. */
static inline __attribute__((always_inline)) void
SIMD_FN(pt_regs)(const float *a, int64_t lda, const float *x, int64_t dq, int64_t c, int n,
                 float *o, vlanes m, const int NR, const int partial) {
#define CS_PT_LOAD(ptr)     (partial ? vf_load_lanes(ptr, m) : vf_loadu(ptr))
#define CS_PT_STORE(ptr, y) (partial ? vf_store_lanes(ptr, y, m) : vf_storeu(ptr, y))
    vf acc[CS_PV_ROWS][SIMD_PV_REGS];
    for (int j = 0; j < CS_PV_ROWS; ++j)
        for (int i = 0; i < NR; ++i) acc[j][i] = CS_PT_LOAD(o + j * dq + c + i * VL);
    for (int r = 0; r < n; ++r) {
        vf y[SIMD_PV_REGS];
        for (int i = 0; i < NR; ++i) y[i] = CS_PT_LOAD(x + (int64_t)r * dq + c + i * VL);
        for (int j = 0; j < CS_PV_ROWS; ++j) {
            const vf aj = vf_broadcast(a + j * lda + r);
            for (int i = 0; i < NR; ++i) acc[j][i] = vf_fmadd(aj, y[i], acc[j][i]);
        }
    }
    for (int j = 0; j < CS_PV_ROWS; ++j)
        for (int i = 0; i < NR; ++i) CS_PT_STORE(o + j * dq + c + i * VL, acc[j][i]);
#undef CS_PT_LOAD
#undef CS_PT_STORE
}

static void SIMD_FN(pt_rows)(const float *a, int64_t lda, const float *x, int64_t dq, int64_t cols,
                             int n, float *o) {
    const vlanes all = vlanes_first(VL);
    int64_t c = 0;
    for (; c + SIMD_PV_REGS * VL <= cols; c += SIMD_PV_REGS * VL)
        SIMD_FN(pt_regs)(a, lda, x, dq, c, n, o, all, SIMD_PV_REGS, 0);
    if (SIMD_PV_REGS > 2)
        for (; c + 2 * VL <= cols; c += 2 * VL) SIMD_FN(pt_regs)(a, lda, x, dq, c, n, o, all, 2, 0);
    for (; c < cols; c += VL)
        SIMD_FN(pt_regs)(a, lda, x, dq, c, n, o, vlanes_first(cols - c), 1, 1);
}

#include "decode_kernels.h"

#if !defined(SIMD_OWN_PRODUCTS)
const cs_kernel_ops SIMD_FN(cs_kernels) = {
    .name = SIMD_NAME_STR,
    .load_row = SIMD_FN(load_row),
    .store_row = SIMD_FN(store_row),
    .scores = SIMD_FN(scores),
    .decode_step = VL,
    .decode_scores = SIMD_FN(decode_scores),
#if defined(SIMD_DECODE_PANELS)
    .decode_panel_rows = VL,
    .decode_scores_panel = SIMD_FN(decode_scores_panel),
#endif
    .decode_pv = SIMD_FN(decode_pv),
    .decode_softmax = SIMD_FN(softmax),
    .softmax = SIMD_FN(softmax),
    .pv_rows = SIMD_FN(pv_rows),
    .pv_rows_ranged = SIMD_FN(pv_rows_ranged),
    .pv_cols = SIMD_PV_COLS,
    .grads = SIMD_FN(grads),
    .pt_rows = SIMD_FN(pt_rows),
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

/* A read-only stream: four independent sums of whole registers, so that the loads, not the
 * adds, set the pace and as many lines are in flight as the core allows. */
float SIMD_FN(cs_read_stream)(const float *p, size_t n) {
    vf acc[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    for (size_t i = 0; i < n; i += 4 * VL)
        for (int k = 0; k < 4; ++k) acc[k] = vf_add(acc[k], vf_loadu(p + i + (size_t)k * VL));
    return vf_sum(vf_add(vf_add(acc[0], acc[1]), vf_add(acc[2], acc[3])));
}
#endif
