/*
 * Portable C micro-kernels: the same blocking as the SIMD paths, written with fixed-width inner
 * loops over independent lanes (rows of a Q panel, columns of O) so that any compiler can
 * vectorise them without reassociating sums (no fast-math). Builds on every architecture.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp2_poly.h"
#include "fp_fp8.h"
#include "fp_half.h"
#include "kernel_ops.h"
#include "tanh_rational.h"

#define SCORE_KEYS 4                /* keys of the S = Q K^T tile */
#define SCORE_ROWS (CS_Q_PANEL / 2) /* rows of the S = Q K^T tile */

static void load_row_portable(const void *src, flashport_dtype dtype, int64_t d, int64_t dq,
                              float mul, float *dst) {
    if (dtype == FLASHPORT_F32) {
        const float *s = (const float *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = s[c] * mul;
    } else if (dtype == FLASHPORT_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_f16_to_f32(s[c]) * mul;
    } else if (dtype == FLASHPORT_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_bf16_to_f32(s[c]) * mul;
    } else if (dtype == FLASHPORT_FP8_E4M3) {
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_e4m3_to_f32(s[c]) * mul;
    } else {
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_e5m2_to_f32(s[c]) * mul;
    }
    for (int64_t c = d; c < dq; ++c) dst[c] = 0.0f;
}

static void store_row_portable(const float *src, int64_t d, float mul, flashport_dtype dtype,
                               void *dst) {
    if (dtype == FLASHPORT_F32) {
        float *o = (float *)dst;
        for (int64_t c = 0; c < d; ++c) o[c] = src[c] * mul;
    } else if (dtype == FLASHPORT_F16) {
        uint16_t *o = (uint16_t *)dst;
        for (int64_t c = 0; c < d; ++c) o[c] = fp_f32_to_f16(src[c] * mul);
    } else {
        uint16_t *o = (uint16_t *)dst;
        for (int64_t c = 0; c < d; ++c) o[c] = fp_f32_to_bf16(src[c] * mul);
    }
}

/* Union of the key ranges of rows [0, n): [*j0, *j1), or j1 = 0 when no row sees a key. */
static void rows_keys(const int *lo, const int *hi, int n, int *j0, int *j1) {
    *j0 = INT32_MAX;
    *j1 = 0;
    for (int i = 0; i < n; ++i)
        if (lo[i] < hi[i]) {
            *j0 = lo[i] < *j0 ? lo[i] : *j0;
            *j1 = hi[i] > *j1 ? hi[i] : *j1;
        }
}

/* Half a Q panel (up to SCORE_ROWS rows) x SCORE_KEYS keys, over the keys its rows see: the
 * lane loops are what the compiler turns into vector FMAs, the accumulators live in a small
 * local array (half a panel keeps it as small as the SIMD paths' register tiles). */
static void scores_portable(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                            const int *lo, const int *hi, float *st, int64_t ldst) {
    for (int r = 0; r < rows; r += SCORE_ROWS) {
        const float *panel = qp + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        const int width = rows - r < SCORE_ROWS ? rows - r : SCORE_ROWS;
        int j0, j1;
        rows_keys(lo + r, hi + r, width, &j0, &j1);
        for (int j = j1 ? j0 / SCORE_KEYS * SCORE_KEYS : 0; j < j1; j += SCORE_KEYS) {
            float total[SCORE_KEYS][SCORE_ROWS] = {{0}};
            for (int64_t c0 = 0; c0 < d; c0 += CS_SCORE_CHUNK) {
                const int64_t c1 = c0 + CS_SCORE_CHUNK < d ? c0 + CS_SCORE_CHUNK : d;
                float acc[SCORE_KEYS][SCORE_ROWS] = {{0}};
                for (int64_t c = c0; c < c1; ++c) {
                    const float *x = panel + c * CS_Q_PANEL;
                    for (int jj = 0; jj < SCORE_KEYS; ++jj) {
                        const float y = k[(int64_t)(j + jj) * dq + c];
                        for (int i = 0; i < SCORE_ROWS; ++i) acc[jj][i] += x[i] * y;
                    }
                }
                for (int jj = 0; jj < SCORE_KEYS; ++jj)
                    for (int i = 0; i < SCORE_ROWS; ++i) total[jj][i] += acc[jj][i];
            }
            for (int jj = 0; jj < SCORE_KEYS; ++jj)
                for (int i = 0; i < width; ++i) st[(int64_t)(j + jj) * ldst + r + i] = total[jj][i];
        }
    }
}

/* Element c of a K or V row of dtype dt (f32, f16 or bf16). */
static inline float row_at(const void *row, flashport_dtype dt, int64_t c) {
    if (dt == FLASHPORT_F32) return ((const float *)row)[c];
    const uint16_t h = ((const uint16_t *)row)[c];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(h) : fp_bf16_to_f32(h);
}

/* Eight lanes along the head dimension per score, summed at the end, as the SIMD paths'
 * registers do. */
static void decode_scores_portable(const float *q, int64_t dq, int rows, const void *const *k,
                                   flashport_dtype dt, int64_t d, int keys, float *st,
                                   int64_t ldst) {
    enum { LANES = CS_DIM_STEP };
    for (int j = 0; j < keys; ++j)
        for (int r = 0; r < rows; ++r) {
            float acc[LANES] = {0};
            for (int64_t c = 0; c < d; ++c) acc[c % LANES] += q[r * dq + c] * row_at(k[j], dt, c);
            float sum = 0.0f;
            for (int i = 0; i < LANES; ++i) sum += acc[i];
            st[(int64_t)j * ldst + r] = sum;
        }
}

static void decode_pv_portable(const float *p, int64_t ldp, const void *const *v,
                               flashport_dtype dt, int64_t d, int keys, int rows,
                               const float *alpha, float *o, int64_t ldo) {
    for (int r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) o[r * ldo + c] *= alpha[r];
    for (int j = 0; j < keys; ++j)
        for (int r = 0; r < rows; ++r) {
            const float pr = p[(int64_t)j * ldp + r];
            for (int64_t c = 0; c < d; ++c) o[r * ldo + c] += pr * row_at(v[j], dt, c);
        }
}

/* 2^x for x <= 0 (NaN stays NaN). Adding 1.5 * 2^23 rounds x to an integer n in the float's
 * low mantissa bits (round to nearest even, as the FPU does); those bits give 2^n directly. */
static inline float exp2_portable(float x) {
    const float shifter = 12582912.0f;
    const float t = x + shifter;
    const float n = t - shifter;
    const float f = x - n;
    float p = CS_EXP2_C7;
    p = p * f + CS_EXP2_C6;
    p = p * f + CS_EXP2_C5;
    p = p * f + CS_EXP2_C4;
    p = p * f + CS_EXP2_C3;
    p = p * f + CS_EXP2_C2;
    p = p * f + CS_EXP2_C1;
    p = p * f + 1.0f;
    const uint32_t bits = (fp_f32_bits(t) - 0x4b400000u + 127u) << 23;
    return x < CS_EXP2_MIN ? 0.0f : p * fp_bits_f32(bits);
}

/* The SIMD paths' tanh (tanh_rational.h), one value at a time. */
static inline float tanh_portable(float y) {
    const float x = y > CS_TANH_CLAMP ? CS_TANH_CLAMP : y < -CS_TANH_CLAMP ? -CS_TANH_CLAMP : y;
    const float x2 = x * x;
    const float p =
        (((CS_TANH_P4 * x2 + CS_TANH_P3) * x2 + CS_TANH_P2) * x2 + CS_TANH_P1) * x2 + CS_TANH_P0;
    const float q =
        (((CS_TANH_Q4 * x2 + CS_TANH_Q3) * x2 + CS_TANH_Q2) * x2 + CS_TANH_Q1) * x2 + CS_TANH_Q0;
    return x * p / q;
}

/* The base-2 logit of one score (cs_score_mods) of row r at key j. */
static inline float logit_portable(float s, const cs_score_mods *mods, int64_t ldst, int r, int j) {
    float t =
        mods->cap_out != 0.0f ? mods->cap_out * tanh_portable(s * mods->cap_in) : s * mods->scale2;
    if (mods->slope) t += -mods->slope[r] * fabsf(mods->diag[r] - (float)j);
    if (mods->bias) t += mods->bias[j * ldst + r];
    return t;
}

/* CS_ROW_STEP rows at a time, lanes innermost, as the SIMD paths do it with registers; the
 * first pass writes the logits back for the second. */
static void softmax_portable(float *st, int64_t ldst, int rows, const int *lo, const int *hi,
                             const cs_score_mods *mods, float *m, float *l, float *alpha) {
    for (int r = 0; r < rows; r += CS_ROW_STEP) {
        int j0, j1;
        rows_keys(lo + r, hi + r, CS_ROW_STEP, &j0, &j1);
        float block_max[CS_ROW_STEP], sum[CS_ROW_STEP], m_new[CS_ROW_STEP], m_sub[CS_ROW_STEP];
        int nan[CS_ROW_STEP];
        for (int i = 0; i < CS_ROW_STEP; ++i) {
            block_max[i] = -INFINITY;
            sum[i] = 0.0f;
            nan[i] = m[r + i] != m[r + i];
        }
        for (int j = j0; j < j1; ++j)
            for (int i = 0; i < CS_ROW_STEP; ++i) {
                float *sj = st + j * ldst + r + i;
                *sj = logit_portable(*sj, mods, ldst, r + i, j);
                const float t = j >= lo[r + i] && j < hi[r + i] ? *sj : -INFINITY;
                nan[i] |= t != t;
                block_max[i] = t > block_max[i] ? t : block_max[i];
            }
        for (int i = 0; i < CS_ROW_STEP; ++i) {
            const float mo = m[r + i];
            m_new[i] = nan[i] ? NAN : (block_max[i] > mo ? block_max[i] : mo);
            /* Scores that are all -inf so far give probabilities 2^(-inf - 0) = 0. */
            m_sub[i] = m_new[i] == -INFINITY ? 0.0f : m_new[i];
            /* A row that saw nothing in this block keeps its accumulator as it is. */
            alpha[r + i] = lo[r + i] >= hi[r + i] ? 1.0f
                           : mo == -INFINITY      ? 0.0f
                                                  : exp2_portable(mo - m_new[i]);
        }
        for (int j = j0; j < j1; ++j)
            for (int i = 0; i < CS_ROW_STEP; ++i) {
                float *sj = st + j * ldst + r + i;
                const float p =
                    j >= lo[r + i] && j < hi[r + i] ? exp2_portable(*sj - m_sub[i]) : 0.0f;
                *sj = p;
                sum[i] += p;
            }
        for (int i = 0; i < CS_ROW_STEP; ++i) {
            if (lo[r + i] >= hi[r + i]) continue;
            m[r + i] = m_new[i];
            l[r + i] = l[r + i] * alpha[r + i] + sum[i];
        }
    }
}

static void pv_rows_portable(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                             int keys, const float *alpha, float *o) {
    for (int r = 0; r < CS_PV_ROWS; ++r) {
        float *orow = o + (int64_t)r * dq;
        for (int64_t c = 0; c < cols; ++c) orow[c] *= alpha[r];
    }
    for (int j = 0; j < keys; ++j) {
        const float *vrow = v + (int64_t)j * dq;
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const float pr = p[(int64_t)j * ldp + r];
            float *orow = o + (int64_t)r * dq;
            for (int64_t c = 0; c < cols; ++c) orow[c] += pr * vrow[c];
        }
    }
}

static void pv_rows_ranged_portable(const float *p, int64_t ldp, const float *v, int64_t dq,
                                    int64_t cols, int a, int e, int n, const int *lo, const int *hi,
                                    const float *alpha, float *o) {
    pv_rows_portable(p + (int64_t)a * ldp, ldp, v + (int64_t)a * dq, dq, cols, e - a, alpha, o);
    for (int r = 0; r < n; ++r)
        for (int j = lo[r]; j < hi[r]; ++j) {
            if (j >= a && j < e) continue;
            const float *vrow = v + (int64_t)j * dq;
            const float pj = p[(int64_t)j * ldp + r];
            float *orow = o + (int64_t)r * dq;
            for (int64_t c = 0; c < cols; ++c) orow[c] += pj * vrow[c];
        }
}

/* The SIMD paths' gradient step, CS_ROW_STEP rows at a time with the lanes innermost. */
static void grads_portable(float *st, float *dp, int64_t ld, int rows, int keys, const int *lo,
                           const int *hi, const cs_score_mods *mods, const float *lse2,
                           const float *dsum, float gscale) {
    for (int r = 0; r < rows; r += CS_ROW_STEP)
        for (int j = 0; j < keys; ++j)
            for (int i = 0; i < CS_ROW_STEP; ++i) {
                float *sj = st + j * ld + r + i, *dj = dp + j * ld + r + i;
                if (j < lo[r + i] || j >= hi[r + i]) {
                    *sj = *dj = 0.0f;
                    continue;
                }
                float g = gscale;
                if (mods->cap_out != 0.0f) {
                    const float y = tanh_portable(*sj * mods->cap_in);
                    g *= 1.0f - y * y;
                }
                const float prob =
                    exp2_portable(logit_portable(*sj, mods, ld, r + i, j) - lse2[r + i]);
                *sj = prob;
                *dj = prob * (*dj - dsum[r + i]) * g;
            }
}

static void pt_rows_portable(const float *a, int64_t lda, const float *x, int64_t dq, int64_t cols,
                             int n, float *o) {
    for (int r = 0; r < n; ++r) {
        const float *xrow = x + (int64_t)r * dq;
        for (int j = 0; j < CS_PV_ROWS; ++j) {
            const float aj = a[j * lda + r];
            float *orow = o + (int64_t)j * dq;
            for (int64_t c = 0; c < cols; ++c) orow[c] += aj * xrow[c];
        }
    }
}

const cs_kernel_ops cs_kernels_portable = {
    .name = "portable",
    .load_row = load_row_portable,
    .store_row = store_row_portable,
    .scores = scores_portable,
    .decode_step = 1,
    .decode_scores = decode_scores_portable,
    .decode_pv = decode_pv_portable,
    .decode_softmax = softmax_portable,
    .softmax = softmax_portable,
    .pv_rows = pv_rows_portable,
    .pv_rows_ranged = pv_rows_ranged_portable,
    .pv_cols = 32,
    .grads = grads_portable,
    .pt_rows = pt_rows_portable,
};
