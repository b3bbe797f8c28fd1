/*
 * AMX-BF16 micro-kernels for bf16 inputs: S = Q K^T on AMX tiles (amx_scores.h), reading the
 * bf16 path's layouts in place; P V stays on AVX512-BF16 (bf16_pair_kernels.h), whose
 * transposed P the softmax leaves, and so do the softmax and the rows' loads and stores
 * (simd_kernels.h on AVX-512F). This file alone is compiled with -mamx-tile -mamx-bf16 (and
 * the AVX512-BF16 path's flags). It runs (planned for bf16 problems of the tile path, or
 * forced) only after cpuid said the CPU has AMX-BF16 and AVX512-BF16, XCR0 that the OS saves
 * the tile state, and Linux granted this process the tile data (cs_amx_permitted).
 *
 * Each call of the scores kernel loads its tile configuration and releases the tiles at the
 * end, so that a thread holds AMX state only inside it.
 */
#define SIMD_NAME         amxbf16
#define SIMD_NAME_STR     "amxbf16"
#define SIMD_OWN_PRODUCTS 1
#define BF16_OWN_SCORES   1

#include "simd_avx512.h"

#include "simd_kernels.h"

#include "bf16_pair_kernels.h"

#define TILE_CONFIG(cfg)            _tile_loadconfig(cfg)
#define TILE_ZERO(t)                _tile_zero(t)
#define TILE_LOAD(t, base, stride)  _tile_loadd(t, base, stride)
#define TILE_DP(c, a, b)            _tile_dpbf16ps(c, a, b)
#define TILE_STORE(t, base, stride) _tile_stored(t, base, stride)
#include "amx_scores.h"

static void scores_amx(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                       const int *lo, const int *hi, float *st, int64_t ldst) {
    SIMD_FN(amx_scores)(qp, k, d, dq, rows, lo, hi, st, ldst);
    _tile_release();
}

/* As avx512bf16's table, with the scores on tiles. */
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
    .grads = SIMD_FN(grads),
    .pt_rows = SIMD_FN(pt_rows),
};
