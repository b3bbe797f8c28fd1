/*
 * AVX2 + FMA + F16C micro-kernels. This file alone is compiled with -mavx2 -mfma -mf16c; the
 * planner only selects it after cpuid said the CPU has those features.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "exp2_poly.h"
#include "fp_half.h"
#include "kernel_ops.h"

static void load_row_avx2(const void *src, flashport_dtype dtype, int64_t d, int64_t dq,
                          float mul, float *dst) {
    const __m256 vmul = _mm256_set1_ps(mul);
    int64_t c = 0;
    if (dtype == FLASHPORT_F32) {
        const float *s = (const float *)src;
        for (; c + 8 <= d; c += 8) _mm256_storeu_ps(dst + c, _mm256_mul_ps(_mm256_loadu_ps(s + c), vmul));
        for (; c < d; ++c) dst[c] = s[c] * mul;
    } else if (dtype == FLASHPORT_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (; c + 8 <= d; c += 8) {
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + c)));
            _mm256_storeu_ps(dst + c, _mm256_mul_ps(x, vmul));
        }
        for (; c < d; ++c) dst[c] = fp_f16_to_f32(s[c]) * mul;
    } else {
        /* bfloat16 is the top half of a float32: widen and shift. */
        const uint16_t *s = (const uint16_t *)src;
        for (; c + 8 <= d; c += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + c)));
            __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            _mm256_storeu_ps(dst + c, _mm256_mul_ps(x, vmul));
        }
        for (; c < d; ++c) dst[c] = fp_bf16_to_f32(s[c]) * mul;
    }
    for (c = d; c < dq; ++c) dst[c] = 0.0f;
}

static void store_row_avx2(const float *src, int64_t d, float mul, flashport_dtype dtype,
                           void *dst) {
    const __m256 vmul = _mm256_set1_ps(mul);
    int64_t c = 0;
    if (dtype == FLASHPORT_F32) {
        float *o = (float *)dst;
        for (; c + 8 <= d; c += 8) _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(src + c), vmul));
        for (; c < d; ++c) o[c] = src[c] * mul;
    } else if (dtype == FLASHPORT_F16) {
        uint16_t *o = (uint16_t *)dst;
        for (; c + 8 <= d; c += 8) {
            __m256 x = _mm256_mul_ps(_mm256_loadu_ps(src + c), vmul);
            _mm_storeu_si128((__m128i *)(o + c), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        }
        for (; c < d; ++c) o[c] = fp_f32_to_f16(src[c] * mul);
    } else {
        /* One row per tile is stored; the scalar rounding is not on the hot path. */
        uint16_t *o = (uint16_t *)dst;
        for (; c < d; ++c) o[c] = fp_f32_to_bf16(src[c] * mul);
    }
}

/* Horizontal sums of four vectors, as one 4-float vector {sum a, sum b, sum c, sum d}. */
static inline __m128 sum4_avx2(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b);
    __m256 cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* 3 query rows x 4 keys per step: 12 accumulators stay in registers across the whole head
 * dimension, each loaded vector feeds 3 or 4 FMAs. */
static void scores_avx2(const float *q, const float *k, int64_t dq, int rows, int keys, float *s,
                        int64_t lds) {
    for (int r = 0; r < rows; r += CS_SCORE_ROWS) {
        const float *q0 = q + (int64_t)r * dq, *q1 = q0 + dq, *q2 = q1 + dq;
        for (int j = 0; j < keys; j += CS_SCORE_KEYS) {
            const float *k0 = k + (int64_t)j * dq, *k1 = k0 + dq, *k2 = k1 + dq, *k3 = k2 + dq;
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
            __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
            __m256 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
            for (int64_t c = 0; c < dq; c += 8) {
                const __m256 x0 = _mm256_load_ps(q0 + c), x1 = _mm256_load_ps(q1 + c),
                             x2 = _mm256_load_ps(q2 + c);
                __m256 y = _mm256_load_ps(k0 + c);
                a00 = _mm256_fmadd_ps(x0, y, a00);
                a10 = _mm256_fmadd_ps(x1, y, a10);
                a20 = _mm256_fmadd_ps(x2, y, a20);
                y = _mm256_load_ps(k1 + c);
                a01 = _mm256_fmadd_ps(x0, y, a01);
                a11 = _mm256_fmadd_ps(x1, y, a11);
                a21 = _mm256_fmadd_ps(x2, y, a21);
                y = _mm256_load_ps(k2 + c);
                a02 = _mm256_fmadd_ps(x0, y, a02);
                a12 = _mm256_fmadd_ps(x1, y, a12);
                a22 = _mm256_fmadd_ps(x2, y, a22);
                y = _mm256_load_ps(k3 + c);
                a03 = _mm256_fmadd_ps(x0, y, a03);
                a13 = _mm256_fmadd_ps(x1, y, a13);
                a23 = _mm256_fmadd_ps(x2, y, a23);
            }
            float *srow = s + (int64_t)r * lds + j;
            _mm_storeu_ps(srow, sum4_avx2(a00, a01, a02, a03));
            _mm_storeu_ps(srow + lds, sum4_avx2(a10, a11, a12, a13));
            _mm_storeu_ps(srow + 2 * lds, sum4_avx2(a20, a21, a22, a23));
        }
    }
}

static float row_max_avx2(const float *s, int n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    __m256 vnan = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_loadu_ps(s + j);
        vmax = _mm256_max_ps(vmax, x);
        vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(vnan)) return NAN;
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float m = lanes[0];
    for (int i = 1; i < 8; ++i) m = lanes[i] > m ? lanes[i] : m;
    for (; j < n; ++j) {
        if (s[j] != s[j]) return NAN;
        m = s[j] > m ? s[j] : m;
    }
    return m;
}

/* 2^x for x <= 0 (or NaN, which stays NaN): x = n + f with n an integer and |f| <= 1/2,
 * 2^f by the polynomial, 2^n written straight into the exponent bits. */
static inline __m256 exp2_avx2(__m256 x) {
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(CS_EXP2_MIN), _CMP_LT_OQ);
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(CS_EXP2_C7);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CS_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

static float exp2_row_avx2(float *s, int n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 vsum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 p = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    if (j < n) {
        /* Tail through the same polynomial: lanes past n read as -inf and give 0. */
        float tail[8];
        for (int i = 0; i < 8; ++i) tail[i] = j + i < n ? s[j + i] : -INFINITY;
        __m256 p = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail), vm));
        _mm256_storeu_ps(tail, p);
        for (int i = 0; j + i < n; ++i) s[j + i] = tail[i];
        vsum = _mm256_add_ps(vsum, p);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(vsum), _mm256_extractf128_ps(vsum, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 6 rows x 16 columns of O in 12 registers for the whole key block: per key, two loads of V
 * and six broadcasts of P feed twelve FMAs. */
static void pv_rows_avx2(const float *p, int64_t ldp, const float *v, int64_t dq, int keys,
                         const float *alpha, float *o) {
    int64_t c = 0;
    for (; c + 16 <= dq; c += 16) {
        __m256 acc[CS_PV_ROWS][2];
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const __m256 a = _mm256_broadcast_ss(alpha + r);
            acc[r][0] = _mm256_mul_ps(a, _mm256_load_ps(o + r * dq + c));
            acc[r][1] = _mm256_mul_ps(a, _mm256_load_ps(o + r * dq + c + 8));
        }
        for (int j = 0; j < keys; ++j) {
            const __m256 v0 = _mm256_load_ps(v + (int64_t)j * dq + c);
            const __m256 v1 = _mm256_load_ps(v + (int64_t)j * dq + c + 8);
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const __m256 pr = _mm256_broadcast_ss(p + r * ldp + j);
                acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
            }
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            _mm256_store_ps(o + r * dq + c, acc[r][0]);
            _mm256_store_ps(o + r * dq + c + 8, acc[r][1]);
        }
    }
    if (c < dq) { /* dq is a multiple of 8: one 8-column strip is left */
        __m256 acc[CS_PV_ROWS];
        for (int r = 0; r < CS_PV_ROWS; ++r)
            acc[r] = _mm256_mul_ps(_mm256_broadcast_ss(alpha + r), _mm256_load_ps(o + r * dq + c));
        for (int j = 0; j < keys; ++j) {
            const __m256 v0 = _mm256_load_ps(v + (int64_t)j * dq + c);
            for (int r = 0; r < CS_PV_ROWS; ++r)
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * ldp + j), v0, acc[r]);
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) _mm256_store_ps(o + r * dq + c, acc[r]);
    }
}

static void pv_row_avx2(const float *p, const float *v, int64_t dq, int j0, int j1, float *o) {
    for (int64_t c = 0; c < dq; c += 8) {
        __m256 acc = _mm256_load_ps(o + c);
        for (int j = j0; j < j1; ++j)
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_load_ps(v + (int64_t)j * dq + c), acc);
        _mm256_store_ps(o + c, acc);
    }
}

const cs_kernel_ops cs_kernels_avx2 = {
    .name = "avx2",
    .load_row = load_row_avx2,
    .store_row = store_row_avx2,
    .scores = scores_avx2,
    .row_max = row_max_avx2,
    .exp2_row = exp2_row_avx2,
    .pv_rows = pv_rows_avx2,
    .pv_row = pv_row_avx2,
};
