/*
 * AVX2 + FMA + F16C micro-kernels: the vector operations of simd_kernels.h on 8-float YMM
 * registers. This file alone is compiled with -mavx2 -mfma -mf16c; the planner only selects it
 * after cpuid said the CPU has those features.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define SIMD_NAME     avx2
#define SIMD_NAME_STR "avx2"
#define SIMD_LANES    8
/* 3 x 4 accumulators of the score tile: 12 of the 16 registers, the rest for Q and K. */
#define SIMD_SCORE_KEYS 4
/* 6 rows x 2 registers of columns in the O += P V tile: 12 accumulators. A call takes 32
 * columns, a 16 KB strip of V at 128 keys, for L1 caches of 32 KB. */
#define SIMD_PV_REGS 2
#define SIMD_PV_COLS 32

typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vmask; /* all-ones lanes where true */
typedef int vlanes;   /* how many of the first lanes */

static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_storeu(float *p, vf x) { _mm256_storeu_ps(p, x); }
static inline vf vf_broadcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_round(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n written straight into the exponent bits. */
static inline vf vf_scale2(vf p, vf n) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
static inline vf vf_abs(vf x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline float vf_first(vf x) { return _mm256_cvtss_f32(x); }
static inline float vf_sum(vf x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
/* Pairwise horizontal adds leave a's, b's, c's and d's sums split over the two halves. */
static inline void vf_sum4(vf a, vf b, vf c, vf d, float *out) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

static inline vf vf_from_f16(const uint16_t *s) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s));
}
static inline vf vf_from_bf16(const uint16_t *s) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline void vf_to_f16(uint16_t *o, vf x) {
    _mm_storeu_si128((__m128i *)o, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
/* E4M3 as fp_e4m3_to_f32 (fp_fp8.h) decodes it: normal values by rebiasing the exponent bits,
 * subnormals as m * 2^-9, NaN where the magnitude bits are all ones, then the sign. */
static inline vf vf_from_e4m3(const uint8_t *s) {
    const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s));
    const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
    const __m256 normal = _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    __m256 v = _mm256_blendv_ps(normal, subnormal,
                                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
    v = _mm256_blendv_ps(v, _mm256_set1_ps(NAN),
                         _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}
/* E5M2 is the upper byte of a binary16: F16C converts it. */
static inline vf vf_from_e5m2(const uint8_t *s) {
    return _mm256_cvtph_ps(
        _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)s)), 8));
}

/* AVX2 has no masked float load that is cheap and exact for every lane count, and O and V
 * columns come in whole registers here (CS_DIM_STEP is 8): only a row's remainder is partial,
 * and it goes through a copy. */
static inline vlanes vlanes_first(int64_t n) { return n < 8 ? (int)n : 8; }
static inline vf vf_load_lanes(const float *p, vlanes n) {
    if (n == 8) return _mm256_loadu_ps(p);
    float tmp[8] = {0};
    memcpy(tmp, p, (size_t)n * sizeof *p);
    return _mm256_loadu_ps(tmp);
}
static inline void vf_store_lanes(float *p, vf x, vlanes n) {
    if (n == 8) {
        _mm256_storeu_ps(p, x);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, x);
    memcpy(p, tmp, (size_t)n * sizeof *p);
}

static inline vi vi_loadu(const int *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline vmask vi_gt(vi a, int b) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(b)));
}
static inline vmask vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vmask vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline vmask vf_isnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vmask vmask_or(vmask a, vmask b) { return _mm256_or_ps(a, b); }
static inline vmask vmask_andnot(vmask a, vmask b) { return _mm256_andnot_ps(a, b); }
static inline vf vf_select(vmask m, vf if_true, vf if_false) {
    return _mm256_blendv_ps(if_false, if_true, m);
}
static inline vf vf_keep(vmask m, vf x) { return _mm256_and_ps(m, x); }
static inline vf vf_drop(vmask m, vf x) { return _mm256_andnot_ps(m, x); }

#include "simd_kernels.h"
