/*
 * AMX-BF16 micro-kernels for bf16 inputs: S = Q K^T (amx_scores.h) and O += P V (amx_pv.h) on
 * AMX tiles, reading the bf16 path's layouts in place; the softmax, which leaves P paired and
 * transposed, the keys of P V outside the tiles' pairs, and the rows' loads and stores stay on
 * AVX512-BF16 and AVX-512F (bf16_pair_kernels.h, simd_kernels.h). This file alone is compiled with
 * -mamx-tile -mamx-bf16 (and the AVX512-BF16 path's flags). It runs (planned for bf16 problems of
 * the tile path, or forced) only after cpuid said the CPU has AMX-BF16 and AVX512-BF16, XCR0 that
 * the OS saves the tile state, and Linux granted this process the tile data (cs_amx_permitted).
 *
 * Each call of the scores and P V kernels loads its tile configuration and releases the tiles
 * at the end, so that a thread holds AMX state only inside them.
 */
#define SIMD_NAME         amxbf16
#define SIMD_NAME_STR     "amxbf16"
#define SIMD_OWN_PRODUCTS 1
#define BF16_OWN_SCORES   1

#include "simd_avx512.h"

#include "simd_kernels.h"

#include "bf16_pair_kernels.h"

/* LDTILECFG with the whole 64-byte configuration as its operand: GCC 12's _tile_loadconfig names
 * only a pointer's worth of it, so the compiler may drop the stores to the rest as dead (the
 * peak loop's configuration reached the instruction all zero past its first bytes). */
static inline void tile_config(const void *cfg) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const unsigned char(*)[64])cfg));
}

#define TILE_CONFIG(cfg)            tile_config(cfg)
#define TILE_ZERO(t)                _tile_zero(t)
#define TILE_LOAD(t, base, stride)  _tile_loadd(t, base, stride)
#define TILE_DP(c, a, b)            _tile_dpbf16ps(c, a, b)
#define TILE_STORE(t, base, stride) _tile_stored(t, base, stride)
#include "amx_scores.h"

/* 16 x 16 words transposed in registers: two rounds of unpacks within 128-bit lanes, then two of
 * 128-bit lane shuffles. Slot i (a register of 16 rows' pairs) becomes word i of each row. */
static inline void transpose_p(uint32_t *dst, int64_t ldd, const float *src, int64_t ldp, int m) {
    const __mmask16 rows = (__mmask16)((1u << m) - 1u);
    __m512i x[16], t[16];
    for (int i = 0; i < 16; ++i) x[i] = _mm512_maskz_loadu_epi32(rows, src + 2 * i * ldp);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* x[i + k]: 128-bit lane L holds words i..i+3 of row 4 L + k. */
    for (int i = 0; i < 16; i += 4) {
        x[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        x[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        x[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        x[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* Row 4 L + k gathers lane L of x[k], x[4 + k], x[8 + k] and x[12 + k]. */
    for (int k = 0; k < 4; ++k) {
        const __m512i v0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0x88);
        const __m512i w0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0xdd);
        const __m512i v1 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0xdd);
        t[k] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        t[8 + k] = _mm512_shuffle_i32x4(v0, v1, 0xdd);
        t[4 + k] = _mm512_shuffle_i32x4(w0, w1, 0x88);
        t[12 + k] = _mm512_shuffle_i32x4(w0, w1, 0xdd);
    }
    for (int r = 0; r < m; ++r) _mm512_storeu_si512(dst + r * ldd, t[r]);
}

#define TRANSPOSE_P(dst, ldd, src, ldp, m)     transpose_p(dst, ldd, src, ldp, m)
#define PV_ROW(p, ldp, v, dq, cols, j0, j1, o) pv_row_bf16(p, ldp, v, dq, cols, j0, j1, o)
#include "amx_pv.h"

static void scores_amx(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                       const int *lo, const int *hi, float *st, int64_t ldst) {
    SIMD_FN(amx_scores)(qp, k, d, dq, rows, lo, hi, st, ldst);
    _tile_release();
}

static void pv_block_amx(const float *p, int64_t ldp, const float *v, int64_t d, int64_t dq,
                         int real, const int *lo, const int *hi, const float *alpha, float *o) {
    SIMD_FN(amx_pv)(p, ldp, v, d, dq, real, lo, hi, alpha, o);
    _tile_release();
}

/* The tile-product rate loop: four independent C tiles, A and B loaded once, four TDPBF16PS an
 * iteration (each 16 x 16 x 32 multiply-adds). Products of 2^-20 keep every sum finite. */
double cs_amx_bf16_peak(int64_t iterations) {
    static uint16_t operand[CS_AMX_ROWS * 32];
    for (int i = 0; i < CS_AMX_ROWS * 32; ++i) operand[i] = 0x3a80; /* 2^-10 */
    cs_amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    tile_config(&cfg);
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t it = 0; it < iterations; ++it) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 5);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 5);
    }
    _tile_release();
    return (double)iterations * 4 * (16 * 16 * 32) * 2;
}

/* As avx512bf16's table, with the scores and P V on tiles. */
const cs_kernel_ops cs_kernels_amxbf16 = {
    .name = SIMD_NAME_STR,
    .load_row = SIMD_FN(load_row),
    .store_row = SIMD_FN(store_row),
    .pack_q = pack_q_bf16,
    .load_kv = load_kv_bf16,
    .scores = scores_amx,
    .decode_step = VL,
    .decode_scores = SIMD_FN(decode_scores),
    .decode_pv = SIMD_FN(decode_pv),
    .decode_softmax = SIMD_FN(softmax),
    .softmax = softmax_bf16,
    .pv_rows = pv_rows_bf16,
    .pv_rows_ranged = pv_rows_ranged_bf16,
    .pv_block = pv_block_amx,
    .grads = SIMD_FN(grads),
    .pt_rows = SIMD_FN(pt_rows),
};
