/*
 * The per-warp steps both 3xTF32 forward kernels are built from (flash_forward_kernel.cuh for
 * d <= 256, wide_forward_kernel.cuh for wider heads, whose warps each own some of the 32-column
 * groups of d): the scores of one chunk of a column group, O += P V over one column group, the
 * scaling and masking of a score, and the store of a row's columns of one group. The index maps
 * are those of fragment_layout.h. Always inlined, so that the fragments and accumulators the
 * caller passes stay in registers. Callers compile these only for __CUDA_ARCH__ >= 800.
 */
#ifndef FP_TF32X3_WARP_STEPS_CUH
#define FP_TF32X3_WARP_STEPS_CUH

#include <math.h>

#include "../common/online_softmax_rows.cuh"
#include "fragment_layout.h"
#include "tf32_split.cuh"
#include "tile_load.cuh"

/* acc[mt][nt] += Q K^T over chunk `half` of column group u: MT 16-row slices of Q, read in
 * fragment order from sq_frag (the warp's slice 0 at this lane, fp_tf32_q_frag_lane), and the
 * KEY_TILES 8-key n-tiles of the swizzled key tile sk. Each operand is split once and feeds
 * every product it takes part in; one term is issued for all accumulators before the next,
 * so that consecutive mma do not wait on each other. */
template <int MT, int KEY_TILES, int D>
static __device__ __forceinline__ void fp_tf32x3_qk_chunk(float (&acc)[MT][KEY_TILES][4],
                                                          const float *sq_frag, const float *sk,
                                                          int lane, int u, int half)
{
    constexpr int CPR = D / 4;
    fp_tf32_pair qa[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int step = 0; step < 2; ++step) {
            const float4 f =
                fp_tf32x3_lds(sq_frag + fp_tf32_q_frag_offset(mt, u, 2 * half + step, D));
            qa[mt][step][0] = fp_tf32_split(f.x);
            qa[mt][step][1] = fp_tf32_split(f.y);
            qa[mt][step][2] = fp_tf32_split(f.z);
            qa[mt][step][3] = fp_tf32_split(f.w);
        }
    /* Float e of the chunk is k-register e % 2 of k-step 2 half + e / 2. */
    const int chunk = fp_tf32_qk_chunk(lane, u, half);
    fp_tf32_pair kf[KEY_TILES][4];
#pragma unroll
    for (int nt = 0; nt < KEY_TILES; ++nt) {
        const float4 kv = fp_tf32x3_lds(sk + fp_tf32_swizzle(8 * nt + (lane >> 2), chunk, CPR));
        kf[nt][0] = fp_tf32_split(kv.x);
        kf[nt][1] = fp_tf32_split(kv.y);
        kf[nt][2] = fp_tf32_split(kv.z);
        kf[nt][3] = fp_tf32_split(kv.w);
    }
#pragma unroll
    for (int step = 0; step < 2; ++step)
#pragma unroll
        for (int term = 0; term < 3; ++term)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < KEY_TILES; ++nt)
                    fp_mma_3xtf32_term(acc[mt][nt], qa[mt][step], kf[nt][2 * step],
                                       kf[nt][2 * step + 1], term);
}

/* A raw score (an S accumulator register, key `key` and query row `row`) scaled to base 2, or
 * -inf where MASKED and the key is past kv_end or above the causal diagonal. */
template <bool MASKED>
static __device__ __forceinline__ float fp_tf32x3_scaled_score(float x, float scale_log2,
                                                               int key, int row, int kv_end,
                                                               bool causal, int diag)
{
    x *= scale_log2;
    if (MASKED && (key >= kv_end || (causal && key > row + diag)))
        x = -INFINITY;
    return x;
}

/* o[mt][4 wl + e] += P V over the key tile for the four n-tiles of column group w (the
 * caller's wl-th), P taken from the scores s of the same tile (fragment_layout.h). The tile's
 * products are summed in a fresh accumulator and added to O once, in f32: mma.sync's f32
 * accumulation is not rounded like an f32 add, and with every key's products added straight
 * into O the error grew with the number of keys (rel L2 3e-5 at 4096 keys on the H200); this
 * way it grows with the keys of one tile only. */
template <int MT, int KEY_TILES, int DT, int D>
static __device__ __forceinline__ void fp_tf32x3_pv_group(float (&o)[MT][DT][4], int wl,
                                                          const float (&s)[MT][KEY_TILES][4],
                                                          const float *sv, int lane, int w)
{
    constexpr int CPR = D / 4;
    float acc[MT][4][4];
    fp_mma_zero(acc);
#pragma unroll
    for (int t8 = 0; t8 < KEY_TILES; ++t8) {
        fp_tf32_pair ap[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                ap[mt][r] = fp_tf32_split(s[mt][t8][fp_tf32_p_acc_reg(r)]);
        const int row0 = 8 * t8 + fp_tf32_pv_key(lane, 0);
        const int off = fp_tf32_swizzle(row0, fp_tf32_v_chunk(lane, w), CPR) - row0 * D;
        /* Rows row0 and row0 + 1 differ in bit 0 of the swizzle only. */
        const float4 x0 = fp_tf32x3_lds(sv + row0 * D + off);
        const float4 x1 = fp_tf32x3_lds(sv + (row0 + 1) * D + (off ^ 4));
        const fp_tf32_pair b0[4] = {fp_tf32_split(x0.x), fp_tf32_split(x0.y),
                                    fp_tf32_split(x0.z), fp_tf32_split(x0.w)};
        const fp_tf32_pair b1[4] = {fp_tf32_split(x1.x), fp_tf32_split(x1.y),
                                    fp_tf32_split(x1.z), fp_tf32_split(x1.w)};
#pragma unroll
        for (int term = 0; term < 3; ++term)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    fp_mma_3xtf32_term(acc[mt][e], ap[mt], b0[e], b1[e], term);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                o[mt][4 * wl + e][r] += acc[mt][e][r];
}

/* Stores row half i (0: rows g, 1: rows g + 8) of the caller's wl-th column group of one slice
 * of O, times inv_l, to the row at go: registers 2i + e of n-tiles 4 wl .. 4 wl + 3 are the
 * four consecutive columns col0 + 4e .. col0 + 4e + 3 (col0 = fp_tf32_o_col of n-tile 4w,
 * register 2i). vec: go allows 16-byte stores. Columns at or past d are not written. */
template <int DT>
static __device__ __forceinline__ void fp_tf32x3_store_group(float *go, const float (&o)[DT][4],
                                                             int wl, int i, int col0,
                                                             float inv_l, bool vec, int d)
{
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int col = col0 + 4 * e;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            v[j] = o[4 * wl + j][2 * i + e] * inv_l;
        if (vec && col + 4 <= d) {
            *reinterpret_cast<float4 *>(go + col) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (col + j < d)
                    go[col + j] = v[j];
        }
    }
}

#endif /* FP_TF32X3_WARP_STEPS_CUH */
