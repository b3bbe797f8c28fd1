/*
 * The masks and score modifiers of common/score_mods.cuh applied to a warp's tile of scores held
 * in mma accumulators, for the tensor-core forwards (mma/ for f16 and bf16, tf32x3/ for f32).
 * Both keep S in the C/D layout that mma.sync m16n8k16 and m16n8k8 share
 * (common/online_softmax_rows.cuh): s[mt][nt][r] is query row row0 + 16 mt + fp_mma_acc_row(lane,
 * r) and key kb + 8 nt + fp_mma_acc_col(lane, r), rows and keys numbered within the sequence.
 *
 * A kernel sorts its tiles into three kinds: full tiles, which every row sees whole and no
 * modifier touches, need nothing here; masked tiles (the end of the keys or of a split, the
 * causal diagonal, a window's edges) take fp_tile_mask; with softcap, ALiBi or bias every tile
 * takes fp_tile_modify, which turns raw dot products into log2-domain scores one modifier at a
 * time, each pass behind one uniform branch, so that a tile pays only for the modifiers the
 * problem has. Where it can, a kernel starts the dot products from the bias instead
 * (fp_tile_bias_start; score_mods.cuh says when and why) and fp_tile_modify skips it.
 */
#ifndef FP_KERNELS_SCORE_TILE_CUH
#define FP_KERNELS_SCORE_TILE_CUH

#include <math.h>
#include <stdint.h>

#include "../mma/fragment_layout.h"
#include "score_mods.cuh"

enum fp_tile_kind { FP_TILE_FULL, FP_TILE_MASKED, FP_TILE_MODIFIED };

/* What masked and modified tiles need to know of the rows and keys: the keys each row sees, the
 * end of the keys the block covers (the sequence's, or its split's), and for the modifiers the
 * batch and query head and the sequence's lengths. */
struct fp_tile_keys {
    fp_key_band band;
    int kv_end;
    int b, h, nq, nkv;
};

/* Whether the row sees the key: within its band and the block's keys. */
__device__ __forceinline__ bool fp_tile_seen(const fp_tile_keys &c, int row, int key) {
    return fp_in_band(c.band, row, key) && key < c.kv_end;
}

/* Sets the scores of keys a row does not see to -inf. A kernel at the edge of its registers may
 * write this loop in place around fp_tile_seen instead: the f16/bf16 forward does, because
 * ptxas gave its dense instances about 90 more bytes of spills with the call inlined. */
template <int MT, int KT>
__device__ __forceinline__ void fp_tile_mask(float (&s)[MT][KT][4], int row0, int lane, int kb,
                                             const fp_tile_keys &c) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < KT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                if (!fp_tile_seen(c, row0 + 16 * mt + fp_mma_acc_row(lane, r),
                                  kb + 8 * nt + fp_mma_acc_col(lane, r)))
                    s[mt][nt][r] = -INFINITY;
}

/* Visits a tile's bias, of element type B, on a tile off the edges (every key within the block's
 * keys): f(s[mt][nt][r], bias) for every accumulator, each row's pairs of keys read in the form
 * PAIRS names (fp_bias_row), rows past the sequence's end reading its last row's. Register r of
 * (mt, nt) holds row row0 + 16 mt + fp_mma_acc_row(lane, 0) + 8 (r >> 1) and key
 * kb + fp_mma_acc_col(lane, 0) + 8 nt + (r & 1). */
template <bool PAIRS, typename B, int MT, int KT, typename F>
__device__ __forceinline__ void fp_tile_bias_rows(float (&s)[MT][KT][4], int row, int key,
                                                  int64_t head, const fp_score_mods &mods,
                                                  const fp_tile_keys &c, F f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            fp_bias_row<B> br;
            br.init(mods, head, fp_bias_row_clamped(row + 16 * mt + 8 * half, c.nq), key);
#pragma unroll
            for (int nt = 0; nt < KT; ++nt) {
                float b0, b1;
                br.template pair<PAIRS>(nt, &b0, &b1);
                f(s[mt][nt][2 * half], b0);
                f(s[mt][nt][2 * half + 1], b1);
            }
        }
}

/* fp_tile_bias_rows in the form the tile's bias allows, tested once (fp_bias_pairs). */
template <typename B, int MT, int KT, typename F>
__device__ __forceinline__ void fp_tile_bias_pairs(float (&s)[MT][KT][4], int row0, int lane,
                                                   int kb, int64_t head, const fp_score_mods &mods,
                                                   const fp_tile_keys &c, F f) {
    const int row = row0 + fp_mma_acc_row(lane, 0), key = kb + fp_mma_acc_col(lane, 0);
    if (fp_bias_pairs<B>(mods, head, key))
        fp_tile_bias_rows<true, B>(s, row, key, head, mods, c, f);
    else
        fp_tile_bias_rows<false, B>(s, row, key, head, mods, c, f);
}

/* The bias, of element type B, added where a real row sees the key: masked scores are -inf
 * already (an infinite bias must not turn them into NaN), and rows past the sequence's end have
 * no bias to read. Tiles off the edges (no score masked) read it by pairs of keys
 * (fp_tile_bias_pairs). */
template <typename B, int MT, int KT>
__device__ __forceinline__ void fp_tile_add_bias(float (&s)[MT][KT][4], int row0, int lane, int kb,
                                                 bool edge, const fp_score_mods &mods,
                                                 const fp_tile_keys &c) {
    const int64_t head = fp_bias_head_offset(mods, c.b, c.h);
    if (!edge) {
        fp_tile_bias_pairs<B>(s, row0, lane, kb, head, mods, c,
                              [](float &x, float bias) { x += FP_LOG2E * bias; });
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < KT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = row0 + 16 * mt + fp_mma_acc_row(lane, r);
                if (s[mt][nt][r] != -INFINITY && row < c.nq)
                    s[mt][nt][r] +=
                        fp_bias_log2_as<B>(mods, head, row, kb + 8 * nt + fp_mma_acc_col(lane, r));
            }
}

/* The start of a tile's scores from a bias that does not vary with the query (a key-padding
 * bias): each pair of keys read once for all of a lane's rows, in the form PAIRS names
 * (fp_bias_pairs). */
template <bool PAIRS, typename B, int MT, int KT>
__device__ __forceinline__ void fp_tile_bias_start_keys(float (&s)[MT][KT][4],
                                                        const fp_bias_row<B> &br, float inv_scale) {
#pragma unroll
    for (int nt = 0; nt < KT; ++nt) {
        float b0, b1;
        br.template pair<PAIRS>(nt, &b0, &b1);
        b0 *= inv_scale;
        b1 *= inv_scale;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r) s[mt][nt][r] = r & 1 ? b1 : b0;
    }
}

/* The start of S = Q K^T for a tile whose bias rides in the accumulators (score_mods.cuh,
 * fp_bias_in_accumulators): bias / scale, of element type B. On edge tiles each entry is read
 * on its own and keys past the block's end start at 0 (nothing there to read; the mask sets
 * them to -inf, as it does the keys a row does not see, whatever their bias). On other tiles
 * each row's pairs of keys come a load at a time (fp_bias_row), and a bias that does not vary
 * with the query (a key-padding bias) is read once for all of a lane's rows
 * (fp_tile_bias_start_keys). Rows past the sequence's end read its last row's. */
template <typename B, int MT, int KT>
__device__ __forceinline__ void
fp_tile_bias_start_as(float (&s)[MT][KT][4], int row0, int lane, int kb, bool edge, float inv_scale,
                      const fp_score_mods &mods, const fp_tile_keys &c) {
    const int64_t head = fp_bias_head_offset(mods, c.b, c.h);
    /* Register r of (mt, nt) holds row row0 + 16 mt + fp_mma_acc_row(lane, 0) + 8 (r >> 1) and
     * key kb + fp_mma_acc_col(lane, 0) + 8 nt + (r & 1). */
    const int row = row0 + fp_mma_acc_row(lane, 0), key = kb + fp_mma_acc_col(lane, 0);
    if (edge) {
        const B *const bias = static_cast<const B *>(mods.bias) + head;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KT; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = fp_bias_row_clamped(row + 16 * mt + 8 * (r >> 1), c.nq);
                    const int j = key + 8 * nt + (r & 1);
                    s[mt][nt][r] = j < c.kv_end
                                       ? inv_scale * fp_to_f32(bias[(int64_t)i * mods.bias_query +
                                                                    (int64_t)j * mods.bias_key])
                                       : 0.0f;
                }
        return;
    }
    if (mods.bias_query == 0) {
        fp_bias_row<B> br;
        br.init(mods, head, 0, key);
        if (fp_bias_pairs<B>(mods, head, key))
            fp_tile_bias_start_keys<true>(s, br, inv_scale);
        else
            fp_tile_bias_start_keys<false>(s, br, inv_scale);
        return;
    }
    fp_tile_bias_pairs<B>(s, row0, lane, kb, head, mods, c,
                          [inv_scale](float &x, float bias) { x = bias * inv_scale; });
}

template <int MT, int KT>
__device__ __forceinline__ void
fp_tile_bias_start(float (&s)[MT][KT][4], int row0, int lane, int kb, bool edge, float inv_scale,
                   const fp_score_mods &mods, const fp_tile_keys &c) {
    switch (mods.bias_dtype) {
    case FLASHPORT_F16:
        fp_tile_bias_start_as<gpuHalf>(s, row0, lane, kb, edge, inv_scale, mods, c);
        break;
    case FLASHPORT_BF16:
        fp_tile_bias_start_as<gpuBFloat16>(s, row0, lane, kb, edge, inv_scale, mods, c);
        break;
    default: fp_tile_bias_start_as<float>(s, row0, lane, kb, edge, inv_scale, mods, c); break;
    }
}

/* s = s * mul - slope * |i + nkv - nq - j| (ALiBi in the log2 domain; mul = scale * log2(e) for
 * raw dot products, 1 for scores already scaled), at one FMA a score. The distance of a lane's
 * element (mt, nt, r) is R + 8 nt + (r & 1) - 8 (r >> 1) - 16 mt, where R (the lane's and the
 * tile's part) is converted once a tile: the lane's elements have only 2 (4 MT + KT - 1)
 * distinct distances, each one's bias built once (one add, one multiply). The per-score form
 * (fp_tile_add_alibi) spends a multiply by the scale a score besides its FMA, and an integer
 * add and a conversion per distinct distance. Distances below 2^24 are exact floats in both. */
template <int MT, int KT>
__device__ __forceinline__ void fp_tile_alibi(float (&s)[MT][KT][4], int row0, int lane, int kb,
                                              float mul, const fp_score_mods &mods,
                                              const fp_tile_keys &c) {
    const float slope = fp_alibi_slope_log2(mods, c.b, c.h);
    const float lane_dist =
        (float)(kb + fp_mma_acc_col(lane, 0) - (row0 + fp_mma_acc_row(lane, 0) + c.nkv - c.nq));
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < KT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float dist = lane_dist + (float)(8 * nt + (r & 1) - 8 * (r >> 1) - 16 * mt);
                s[mt][nt][r] = fmaf(s[mt][nt][r], mul, -slope * fabsf(dist));
            }
}

/* ALiBi added to scores already in the log2 domain, one conversion and FMA a score: for kernels
 * whose registers cannot hold fp_tile_alibi's distances (the 3xTF32 forward: ptxas -v, 116 bytes
 * of spill loads with this form and 380 with that one, most of them outside the ALiBi tiles). */
template <int MT, int KT>
__device__ __forceinline__ void fp_tile_add_alibi(float (&s)[MT][KT][4], int row0, int lane, int kb,
                                                  const fp_score_mods &mods,
                                                  const fp_tile_keys &c) {
    const float slope = fp_alibi_slope_log2(mods, c.b, c.h);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < KT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                s[mt][nt][r] += fp_alibi_log2(slope, row0 + 16 * mt + fp_mma_acc_row(lane, r),
                                              kb + 8 * nt + fp_mma_acc_col(lane, r), c.nq, c.nkv);
}

/* Raw dot products to log2-domain scores: scale and softcap (MATH as fp_softcap_math says),
 * ALiBi, then the mask where `edge`, then the bias unless `bias_started` (the tile's dot products
 * started from it, fp_tile_bias_start). With FOLD_ALIBI, ALiBi takes fp_tile_alibi, whose FMA
 * applies the scale, or the softcap's factor, too; without, fp_tile_add_alibi. Returns the
 * factor the softmax step still applies to the scores (its scale_log2): softcap * log2(e) when
 * the scores are left as tanh(scale * dot / softcap), which they are unless a log2-domain term
 * is added after them (a bias not started from, or ALiBi not folded); the step's FMA then takes
 * the factor at no cost, one multiplication a score fewer (a positive factor keeps the max).
 * Likewise scale * log2(e) for a lone bias started from, and 1 otherwise. */
template <fp_softcap_math MATH, bool FOLD_ALIBI, int MT, int KT>
__device__ __forceinline__ float fp_tile_modify(float (&s)[MT][KT][4], int row0, int lane, int kb,
                                                bool edge, bool bias_started,
                                                const fp_score_mods &mods, const fp_tile_keys &c) {
    const bool alibi = mods.alibi != FLASHPORT_ALIBI_NONE;
    const bool bias_after = mods.bias && !bias_started;
    float softmax_factor = 1.0f;
    if (mods.softcap > 0.0f) {
        const float log2_factor = mods.softcap * FP_LOG2E;
        const bool tanh_left = !bias_after && (!alibi || FOLD_ALIBI);
        const float out = tanh_left ? 1.0f : log2_factor;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KT; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    s[mt][nt][r] = fp_softcap_times<MATH>(mods, s[mt][nt][r], out);
        if (alibi && FOLD_ALIBI)
            fp_tile_alibi(s, row0, lane, kb, tanh_left ? log2_factor : 1.0f, mods, c);
        else if (alibi)
            fp_tile_add_alibi(s, row0, lane, kb, mods, c);
        else if (tanh_left)
            softmax_factor = log2_factor;
    } else if (alibi && FOLD_ALIBI) {
        fp_tile_alibi(s, row0, lane, kb, mods.scale * FP_LOG2E, mods, c);
    } else if (!alibi && !bias_after) {
        /* A bias the dot products started from is scaled with them: the step's FMA takes the
         * scale, as it does for tiles with no modifier (the scale is positive). */
        softmax_factor = mods.scale * FP_LOG2E;
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KT; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) s[mt][nt][r] *= mods.scale * FP_LOG2E;
        if (alibi) fp_tile_add_alibi(s, row0, lane, kb, mods, c);
    }
    if (edge) fp_tile_mask(s, row0, lane, kb, c);
    if (bias_after) {
        switch (mods.bias_dtype) {
        case FLASHPORT_F16: fp_tile_add_bias<gpuHalf>(s, row0, lane, kb, edge, mods, c); break;
        case FLASHPORT_BF16: fp_tile_add_bias<gpuBFloat16>(s, row0, lane, kb, edge, mods, c); break;
        default: fp_tile_add_bias<float>(s, row0, lane, kb, edge, mods, c); break;
        }
    }
    return softmax_factor;
}

#endif /* FP_KERNELS_SCORE_TILE_CUH */
