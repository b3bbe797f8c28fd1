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

/* RV registers of rows (8 * RV rows of one Q panel) x 4 keys: the 4 * RV accumulators stay in
 * registers across the head dimension; per column, RV loads of Q and 4 broadcasts of K feed
 * 4 * RV FMAs. Called with a constant RV so that the compiler unrolls it. */
static inline __attribute__((always_inline)) void scores_panel_avx2(
    const float *qp, const float *k, int64_t d, int64_t dq, int keys, float *st, int64_t ldst,
    const int RV) {
    for (int j = 0; j < keys; j += CS_SCORE_KEYS) {
        const float *k0 = k + (int64_t)j * dq, *k1 = k0 + dq, *k2 = k1 + dq, *k3 = k2 + dq;
        for (int64_t c0 = 0; c0 < d; c0 += CS_SCORE_CHUNK) {
            const int64_t c1 = c0 + CS_SCORE_CHUNK < d ? c0 + CS_SCORE_CHUNK : d;
            __m256 acc[CS_SCORE_KEYS][3];
            for (int jj = 0; jj < CS_SCORE_KEYS; ++jj)
                for (int rv = 0; rv < RV; ++rv) acc[jj][rv] = _mm256_setzero_ps();
            for (int64_t c = c0; c < c1; ++c) {
                __m256 x[3];
                for (int rv = 0; rv < RV; ++rv) x[rv] = _mm256_load_ps(qp + c * CS_Q_PANEL + 8 * rv);
                __m256 y = _mm256_broadcast_ss(k0 + c);
                for (int rv = 0; rv < RV; ++rv) acc[0][rv] = _mm256_fmadd_ps(x[rv], y, acc[0][rv]);
                y = _mm256_broadcast_ss(k1 + c);
                for (int rv = 0; rv < RV; ++rv) acc[1][rv] = _mm256_fmadd_ps(x[rv], y, acc[1][rv]);
                y = _mm256_broadcast_ss(k2 + c);
                for (int rv = 0; rv < RV; ++rv) acc[2][rv] = _mm256_fmadd_ps(x[rv], y, acc[2][rv]);
                y = _mm256_broadcast_ss(k3 + c);
                for (int rv = 0; rv < RV; ++rv) acc[3][rv] = _mm256_fmadd_ps(x[rv], y, acc[3][rv]);
            }
            for (int jj = 0; jj < CS_SCORE_KEYS; ++jj)
                for (int rv = 0; rv < RV; ++rv) {
                    float *out = st + (int64_t)(j + jj) * ldst + 8 * rv;
                    _mm256_storeu_ps(out, c0 == 0 ? acc[jj][rv] : _mm256_add_ps(_mm256_loadu_ps(out), acc[jj][rv]));
                }
        }
    }
}

static void scores_avx2(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                        int keys, float *st, int64_t ldst) {
    for (int r = 0; r < rows; r += CS_Q_PANEL) {
        const float *panel = qp + (int64_t)r * dq;
        const int left = rows - r;
        if (left >= 24) scores_panel_avx2(panel, k, d, dq, keys, st + r, ldst, 3);
        else if (left >= 16) scores_panel_avx2(panel, k, d, dq, keys, st + r, ldst, 2);
        else scores_panel_avx2(panel, k, d, dq, keys, st + r, ldst, 1);
    }
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

/* Eight rows per register, straight down the keys: no horizontal work. */
static void softmax_avx2(float *st, int64_t ldst, int rows, const int *visible, float scale2,
                         float *m, float *l, float *alpha) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY), vscale = _mm256_set1_ps(scale2);
    for (int r = 0; r < rows; r += CS_ROW_STEP) {
        const __m256i vis = _mm256_loadu_si256((const __m256i *)(visible + r));
        int keys = 0;
        for (int i = 0; i < CS_ROW_STEP; ++i) keys = visible[r + i] > keys ? visible[r + i] : keys;
        if (keys == 0) {
            _mm256_storeu_ps(alpha + r, _mm256_set1_ps(1.0f));
            continue;
        }
        const __m256 m_old = _mm256_loadu_ps(m + r);
        __m256 block_max = neg_inf, nan = _mm256_cmp_ps(m_old, m_old, _CMP_UNORD_Q);
        for (int j = 0; j < keys; ++j) {
            const __m256 seen = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vis, _mm256_set1_epi32(j)));
            const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(st + j * ldst + r), vscale);
            const __m256 s = _mm256_blendv_ps(neg_inf, t, seen);
            block_max = _mm256_max_ps(block_max, s);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(s, s, _CMP_UNORD_Q));
        }
        /* max_ps drops NaN, so a row that saw one is set to NaN explicitly. */
        const __m256 m_new = _mm256_blendv_ps(_mm256_max_ps(m_old, block_max), _mm256_set1_ps(NAN), nan);
        const __m256 fresh = _mm256_cmp_ps(m_old, neg_inf, _CMP_EQ_OQ);
        const __m256 a = _mm256_andnot_ps(fresh, exp2_avx2(_mm256_sub_ps(m_old, m_new)));
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < keys; ++j) {
            const __m256 seen = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vis, _mm256_set1_epi32(j)));
            float *sj = st + j * ldst + r;
            const __m256 t = _mm256_fmsub_ps(_mm256_loadu_ps(sj), vscale, m_new);
            const __m256 p = _mm256_and_ps(seen, exp2_avx2(t));
            _mm256_storeu_ps(sj, p);
            sum = _mm256_add_ps(sum, p);
        }
        _mm256_storeu_ps(m + r, m_new);
        _mm256_storeu_ps(alpha + r, a);
        _mm256_storeu_ps(l + r, _mm256_fmadd_ps(_mm256_loadu_ps(l + r), a, sum));
    }
}

/* 6 rows x 16 columns of O in 12 registers for the whole key block: per key, two loads of V
 * and six broadcasts of P feed twelve FMAs. */
static void pv_rows_avx2(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                         int keys, const float *alpha, float *o) {
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m256 acc[CS_PV_ROWS][2];
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const __m256 a = _mm256_broadcast_ss(alpha + r);
            acc[r][0] = _mm256_mul_ps(a, _mm256_load_ps(o + r * dq + c));
            acc[r][1] = _mm256_mul_ps(a, _mm256_load_ps(o + r * dq + c + 8));
        }
        for (int j = 0; j < keys; ++j) {
            const __m256 v0 = _mm256_load_ps(v + (int64_t)j * dq + c);
            const __m256 v1 = _mm256_load_ps(v + (int64_t)j * dq + c + 8);
            const float *pj = p + (int64_t)j * ldp;
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const __m256 pr = _mm256_broadcast_ss(pj + r);
                acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
            }
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            _mm256_store_ps(o + r * dq + c, acc[r][0]);
            _mm256_store_ps(o + r * dq + c + 8, acc[r][1]);
        }
    }
    if (c < cols) { /* cols is a multiple of 8: one 8-column strip is left */
        __m256 acc[CS_PV_ROWS];
        for (int r = 0; r < CS_PV_ROWS; ++r)
            acc[r] = _mm256_mul_ps(_mm256_broadcast_ss(alpha + r), _mm256_load_ps(o + r * dq + c));
        for (int j = 0; j < keys; ++j) {
            const __m256 v0 = _mm256_load_ps(v + (int64_t)j * dq + c);
            for (int r = 0; r < CS_PV_ROWS; ++r)
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (int64_t)j * ldp + r), v0, acc[r]);
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) _mm256_store_ps(o + r * dq + c, acc[r]);
    }
}

static void pv_row_avx2(const float *p, int64_t ldp, const float *v, int64_t dq, int j0, int j1,
                        float *o) {
    for (int64_t c = 0; c < dq; c += 8) {
        __m256 acc = _mm256_load_ps(o + c);
        for (int j = j0; j < j1; ++j)
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (int64_t)j * ldp),
                                  _mm256_load_ps(v + (int64_t)j * dq + c), acc);
        _mm256_store_ps(o + c, acc);
    }
}

const cs_kernel_ops cs_kernels_avx2 = {
    .name = "avx2",
    .load_row = load_row_avx2,
    .store_row = store_row_avx2,
    .scores = scores_avx2,
    .softmax = softmax_avx2,
    .pv_rows = pv_rows_avx2,
    .pv_row = pv_row_avx2,
};
