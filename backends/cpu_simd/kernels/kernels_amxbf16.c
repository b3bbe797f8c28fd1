/*
 * AMX-BF16 micro-kernels for bf16 inputs: S = Q K^T (amx_scores.h) and O += P V (amx_pv.h) on
 * AMX tiles, reading the bf16 path's Q, K and V layouts in place; the float32 softmax (P left
 * in float32, transposed, and rounded to bf16 pairs by the P V kernel as it takes each step), the
 * keys of P V outside the tiles' steps, and the rows' loads and stores stay on AVX512-BF16 and
 * AVX-512F (bf16_pair_kernels.h, simd_kernels.h). This file alone is compiled with
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
#define BF16_OWN_PV       1

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

/* The float32 probabilities of 16 rows (m of them real) at slots 2 i and 2 i + 1 (keys) rounded
 * to bf16 and paired into row r's word i: vcvtne2ps2bf16 rounds both slots into one register
 * (the first in its low half), vpermw interleaves the halves into pairs, and the 16 registers
 * are transposed. */
static inline void pair_p(uint32_t *dst, int64_t ldd, const float *src, int64_t ldp, int m) {
    static const uint16_t interleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                            21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                            11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i order = _mm512_loadu_si512(interleave);
    const __mmask16 rows = (__mmask16)((1u << m) - 1u);
    __m512i x[16];
    for (int i = 0; i < 16; ++i) {
        const __m512 first = _mm512_maskz_loadu_ps(rows, src + 2 * i * ldp);
        const __m512 second = _mm512_maskz_loadu_ps(rows, src + (2 * i + 1) * ldp);
        x[i] = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(second, first));
    }
    transpose_16x16_words(x);
    for (int r = 0; r < m; ++r) _mm512_storeu_si512(dst + r * ldd, x[r]);
}

#define PAIR_P(dst, ldd, src, ldp, m)          pair_p(dst, ldd, src, ldp, m)
#define PAIR_SLOTS(p, ldp, j0, j1, m)          pair_slots_bf16(p, ldp, j0, j1, (__mmask16)((1u << (m)) - 1u))
#define PV_ROW(p, ldp, v, dq, cols, j0, j1, o) pv_row_bf16(p, ldp, v, dq, cols, j0, j1, o)
#include "amx_pv.h"

static void scores_amx(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                       const int *lo, const int *hi, float *st, int64_t ldst) {
    SIMD_FN(amx_scores)(qp, k, d, dq, rows, lo, hi, st, ldst);
    _tile_release();
}

static void pv_block_amx(float *p, int64_t ldp, const float *v, int64_t d, int64_t dq, int real,
                         const int *lo, const int *hi, const float *alpha, float *o) {
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

/* As avx512bf16's table, with the scores and P V on tiles and P in float32 between them (no
 * pv_rows: P V is pv_block's alone). */
const cs_kernel_ops cs_kernels_amxbf16 = {
    .name = SIMD_NAME_STR,
    .load_row = SIMD_FN(load_row),
    .store_row = SIMD_FN(store_row),
    .pack_q = pack_q_bf16,
    .load_kv = load_kv_bf16,
    .scores = scores_amx,
    .decode_step = VL,
    .decode_scores = SIMD_FN(decode_scores),
    .decode_panel_rows = VL,
    .decode_scores_panel = SIMD_FN(decode_scores_panel),
    .decode_pv = SIMD_FN(decode_pv),
    .decode_softmax = SIMD_FN(softmax),
    .softmax = SIMD_FN(softmax),
    .pv_block = pv_block_amx,
    .pv_cols = SIMD_PV_COLS,
    .grads = SIMD_FN(grads),
    .pt_rows = SIMD_FN(pt_rows),
};
