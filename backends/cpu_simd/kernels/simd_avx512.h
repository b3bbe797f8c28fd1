/*
 * The vector operations of simd_kernels.h on AVX-512F: 16-float ZMM registers, with mask
 * registers for predicates and for the half-register remainders of rows. Only AVX-512F is used
 * (no BW, DQ or VL), so every AVX-512 CPU runs them. Included by the files compiled with
 * -mavx512f (kernels_avx512.c, and kernels_avx512bf16.c, which adds its 16-bit products), each
 * of which defines SIMD_NAME first.
 */
#ifndef CS_SIMD_AVX512_H
#define CS_SIMD_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define SIMD_LANES 16
/* 3 x 8 accumulators of the score tile: 24 of the 32 registers, the rest for Q and K. Twice
 * the keys of the AVX2 tile, so each Q load feeds twice the FMAs. */
#define SIMD_SCORE_KEYS 8
/* 6 rows x 4 registers of columns in the O += P V tile: 24 accumulators, so that per key 10
 * loads feed 24 FMAs (6 x 2 registers: 8 loads for 12). A call takes 64 columns: the strip of
 * V a block walks is 32 KB at 128 keys. */
#define SIMD_PV_REGS 4
#define SIMD_PV_COLS 64
/* The decode path's float32 scores of whole registers of rows on panels (decode_kernels.h):
 * 512-bit FMAs share a port with the shuffles of the dot products' sums across lanes, which
 * the panels do without. AVX2's FMAs have ports of their own, and there the panels, with a
 * broadcast beside each FMA, measured level with the dot products. */
#define SIMD_DECODE_PANELS 1

typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;
typedef __mmask16 vlanes;

static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_storeu(float *p, vf x) { _mm512_storeu_ps(p, x); }
static inline vf vf_broadcast(const float *p) { return _mm512_set1_ps(*p); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_round(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* vscalefps: p * 2^n in one instruction. */
static inline vf vf_scale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
static inline vf vf_abs(vf x) { return _mm512_abs_ps(x); }
static inline float vf_first(vf x) { return _mm512_cvtss_f32(x); }
static inline float vf_sum(vf x) { return _mm512_reduce_add_ps(x); }
/* Each register folded to 8 lanes, then pairwise horizontal adds (AVX), which leave a's, b's,
 * c's and d's sums split over the two 128-bit halves. */
static inline __m256 vf_fold(vf x) {
    return _mm256_add_ps(_mm512_castps512_ps256(x),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
static inline void vf_sum4(vf a, vf b, vf c, vf d, float *out) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(vf_fold(a), vf_fold(b)),
                                    _mm256_hadd_ps(vf_fold(c), vf_fold(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

static inline vf vf_from_f16(const uint16_t *s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)s));
}
static inline vf vf_from_bf16(const uint16_t *s) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline void vf_to_f16(uint16_t *o, vf x) {
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
/* E4M3 as fp_e4m3_to_f32 (fp_fp8.h) decodes it: normal values by rebiasing the exponent bits,
 * subnormals as m * 2^-9, NaN where the magnitude bits are all ones, then the sign. */
static inline vf vf_from_e4m3(const uint8_t *s) {
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s));
    const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
    const __m512 normal = _mm512_castsi512_ps(
        _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    __m512 v =
        _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), normal, subnormal);
    v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), v,
                             _mm512_set1_ps(NAN));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}
/* E5M2 is the upper byte of a binary16: vcvtph2ps converts it. */
static inline vf vf_from_e5m2(const uint8_t *s) {
    const __m512i w =
        _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s)), 8);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
}

/* Masked loads and stores neither read nor write the lanes past n (no fault either). */
static inline vlanes vlanes_first(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}
static inline vf vf_load_lanes(const float *p, vlanes n) { return _mm512_maskz_loadu_ps(n, p); }
static inline void vf_store_lanes(float *p, vf x, vlanes n) { _mm512_mask_storeu_ps(p, n, x); }

static inline vi vi_loadu(const int *p) { return _mm512_loadu_si512(p); }
static inline vmask vi_gt(vi a, int b) { return _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(b)); }
static inline vmask vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vmask vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline vmask vf_isnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vmask vmask_or(vmask a, vmask b) { return _mm512_kor(a, b); }
static inline vmask vmask_andnot(vmask a, vmask b) { return _mm512_kandn(a, b); }
static inline vf vf_select(vmask m, vf if_true, vf if_false) {
    return _mm512_mask_blend_ps(m, if_false, if_true);
}
static inline vf vf_keep(vmask m, vf x) { return _mm512_maskz_mov_ps(m, x); }
static inline vf vf_drop(vmask m, vf x) { return _mm512_maskz_mov_ps(_mm512_knot(m), x); }

#endif /* CS_SIMD_AVX512_H */
