/*
 * Portable C micro-kernels: the same blocking as the AVX2 path, written with fixed-width inner
 * loops over 8 independent lanes so that any compiler can vectorise them without reassociating
 * sums (no fast-math). Builds on every architecture.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp2_poly.h"
#include "fp_half.h"
#include "kernel_ops.h"

#define LANES CS_DIM_STEP

static void load_row_portable(const void *src, flashport_dtype dtype, int64_t d, int64_t dq,
                              float mul, float *dst) {
    if (dtype == FLASHPORT_F32) {
        const float *s = (const float *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = s[c] * mul;
    } else if (dtype == FLASHPORT_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_f16_to_f32(s[c]) * mul;
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t c = 0; c < d; ++c) dst[c] = fp_bf16_to_f32(s[c]) * mul;
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

static float lane_sum(const float a[LANES]) {
    /* Pairwise, in the same order as the AVX2 horizontal sum of one register. */
    float s0 = (a[0] + a[1]) + (a[2] + a[3]);
    float s1 = (a[4] + a[5]) + (a[6] + a[7]);
    return s0 + s1;
}

static void scores_portable(const float *q, const float *k, int64_t dq, int rows, int keys,
                            float *s, int64_t lds) {
    for (int r = 0; r < rows; r += CS_SCORE_ROWS) {
        for (int j = 0; j < keys; j += CS_SCORE_KEYS) {
            float acc[CS_SCORE_ROWS][CS_SCORE_KEYS][LANES];
            memset(acc, 0, sizeof acc);
            for (int64_t c = 0; c < dq; c += LANES)
                for (int rr = 0; rr < CS_SCORE_ROWS; ++rr)
                    for (int jj = 0; jj < CS_SCORE_KEYS; ++jj) {
                        const float *x = q + (int64_t)(r + rr) * dq + c;
                        const float *y = k + (int64_t)(j + jj) * dq + c;
                        for (int l = 0; l < LANES; ++l) acc[rr][jj][l] += x[l] * y[l];
                    }
            for (int rr = 0; rr < CS_SCORE_ROWS; ++rr)
                for (int jj = 0; jj < CS_SCORE_KEYS; ++jj)
                    s[(int64_t)(r + rr) * lds + j + jj] = lane_sum(acc[rr][jj]);
        }
    }
}

static float row_max_portable(const float *s, int n) {
    float m = -INFINITY;
    int nan = 0;
    for (int j = 0; j < n; ++j) {
        nan |= s[j] != s[j];
        m = s[j] > m ? s[j] : m;
    }
    return nan ? NAN : m;
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

static float exp2_row_portable(float *s, int n, float m) {
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; ++l) {
            s[j + l] = exp2_portable(s[j + l] - m);
            acc[l] += s[j + l];
        }
    for (int l = 0; j + l < n; ++l) {
        s[j + l] = exp2_portable(s[j + l] - m);
        acc[l] += s[j + l];
    }
    return lane_sum(acc);
}

static void pv_rows_portable(const float *p, int64_t ldp, const float *v, int64_t dq, int keys,
                             const float *alpha, float *o) {
    for (int r = 0; r < CS_PV_ROWS; ++r) {
        float *orow = o + (int64_t)r * dq;
        for (int64_t c = 0; c < dq; ++c) orow[c] *= alpha[r];
    }
    for (int64_t c = 0; c < dq; c += 2 * LANES) {
        const int64_t w = dq - c < 2 * LANES ? dq - c : 2 * LANES;
        for (int j = 0; j < keys; ++j) {
            const float *vrow = v + (int64_t)j * dq + c;
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const float pr = p[(int64_t)r * ldp + j];
                float *orow = o + (int64_t)r * dq + c;
                for (int64_t l = 0; l < w; ++l) orow[l] += pr * vrow[l];
            }
        }
    }
}

static void pv_row_portable(const float *p, const float *v, int64_t dq, int j0, int j1, float *o) {
    for (int j = j0; j < j1; ++j) {
        const float *vrow = v + (int64_t)j * dq;
        for (int64_t c = 0; c < dq; ++c) o[c] += p[j] * vrow[c];
    }
}

const cs_kernel_ops cs_kernels_portable = {
    .name = "portable",
    .load_row = load_row_portable,
    .store_row = store_row_portable,
    .scores = scores_portable,
    .row_max = row_max_portable,
    .exp2_row = exp2_row_portable,
    .pv_rows = pv_rows_portable,
    .pv_row = pv_row_portable,
};
