/*
 * FlashAttention-2 backward for f32 on the tensor cores with the 3xTF32 split, query-tile
 * kernel: dQ in deterministic mode (variant backward_tf32x3). One block per (query tile of
 * FP_BWD_TF32X3_Q_ROWS rows, batch, query head), four warps of 16 rows each, laid out as the
 * 3xTF32 forward's warps and built from its warp steps (tf32x3/warp_steps.cuh): Q and dO stay in
 * shared memory, each warp's rows rewritten once in fragment order; the key tiles the rows see
 * stream through a two-stage cp.async ring, and per key tile each warp computes
 *   S = Q K^T and dP = dO V^T      (fp_tf32x3_qk_chunk, as the forward's S),
 *   P, dS elementwise (tile_math.cuh), with the rows' LSE and D in registers,
 *   dQ += dS K                     (fp_tf32x3_pv_group, as the forward's O += P V: dS taken from
 *                                   the accumulators, dQ's columns permuted as O's),
 * dQ staying in f32 registers until the block writes scale * dQ. No atomics: every sum runs in
 * the same order on every run.
 */
#ifndef FP_BACKWARD_TF32X3_Q_KERNEL_CUH
#define FP_BACKWARD_TF32X3_Q_KERNEL_CUH

#include <type_traits>

#include "../tf32x3/tile_load.cuh"
#include "../tf32x3/warp_steps.cuh"
#include "tile_math.cuh"

#define FP_BWD_TF32X3_Q_WARPS   4
#define FP_BWD_TF32X3_Q_THREADS (32 * FP_BWD_TF32X3_Q_WARPS)
#define FP_BWD_TF32X3_Q_ROWS    (16 * FP_BWD_TF32X3_Q_WARPS)

/* Key tiles of 32 keys at d = 128 and 64 at d = 64; shared memory: Q, dO (2 ROWS D floats) and
 * two stages of K, V (4 BC D): 131,072 bytes at d = 128, 98,304 at d = 64, within sm_80's
 * 163 KB (and two blocks an SM of sm_90's 227 KB at d = 64). */
template <int D> struct fp_bwd_tf32x3_q_tile {
    static constexpr int BR = FP_BWD_TF32X3_Q_ROWS;
    static constexpr int BC = D > 64 ? 32 : 64;
    static constexpr size_t BYTES = (size_t)4 * (2 * BR * D + 2 * 2 * BC * D);
};

template <int D, bool MODS>
__global__ void __launch_bounds__(FP_BWD_TF32X3_Q_THREADS, 2)
    fp_bwd_tf32x3_q_kernel(const fp_bwd_params a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using Tile = fp_bwd_tf32x3_q_tile<D>;
    constexpr int BR = Tile::BR, BC = Tile::BC, THREADS = FP_BWD_TF32X3_Q_THREADS;
    constexpr int KEY_TILES = BC / 8, D_TILES = D / 8, GROUPS = D / 32;

    extern __shared__ __align__(16) float fp_bwd_tf32x3_smem[];
    float *const sQ = fp_bwd_tf32x3_smem; /* dO at sQ + BR D */
    float *const sKV = sQ + 2 * BR * D;   /* stage st: K at sKV + st * 2 BC D, then V */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(a.seq, b);
    const int q0 = blockIdx.x * BR;
    if (q0 >= s.nq) return;
    fp_tf32x3_load_rows<true, BR, D, THREADS, 2>(
        sQ,
        fp_strided_rows<float, 2>{{static_cast<const float *>(a.q) + fp_q_offset(a.qs, s, h, q0),
                                   static_cast<const float *>(a.d_o) + fp_q_offset(a.os, s, h, q0)},
                                  {a.qs.seq, a.os.seq}},
        s.nq - q0, a.d);
    const fp_span_keys span =
        fp_visible_span(a.mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, s.nkv);
    const int n_tiles = span.hi > span.lo ? (span.hi - span.lo + BC - 1) / BC : 0;
    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, 0);
    const float *const gK = static_cast<const float *>(a.k) + kv0.k;
    const float *const gV = static_cast<const float *>(a.v) + kv0.v;
    auto load_tile = [&](int t) {
        const int kb = span.lo + t * BC;
        fp_tf32x3_load_rows<true, BC, D, THREADS, 2>(
            sKV + (t & 1) * 2 * BC * D,
            fp_strided_rows<float, 2>{{gK + (int64_t)kb * a.ks.seq, gV + (int64_t)kb * a.vs.seq},
                                      {a.ks.seq, a.vs.seq}},
            s.nkv - kb, a.d);
    };
    if (n_tiles > 0) load_tile(0);
    fp_cp_async_commit();

    /* Rows g and g + 8 of the warp's slice: their LSE (log2 domain) and D. */
    const int row0 = q0 + 16 * warp + g;
    float lse[2], delta[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const bool in = row0 + 8 * i < s.nq;
        const int64_t at = in ? fp_lse_index(a.seq, s, h, row0 + 8 * i) : 0;
        lse[i] = in ? a.lse_log2[at] : INFINITY;
        delta[i] = in ? a.delta[at] : 0.0f;
    }
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);

    /* Once Q and dO have landed, each warp rewrites its own 16 rows of both in fragment order. */
    fp_cp_async_wait<0>();
    __syncthreads();
    fp_tf32x3_q_to_fragment_order<1, GROUPS, D>(sQ + 16 * warp * D, lane, 0);
    fp_tf32x3_q_to_fragment_order<1, GROUPS, D>(sQ + (BR + 16 * warp) * D, lane, 0);
    const float *const sQ_frag = sQ + 16 * warp * D + fp_tf32_q_frag_lane(lane, D);
    const float *const sO_frag = sQ_frag + BR * D;

    float dq[1][D_TILES][4];
    fp_mma_zero(dq);
    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<0>();
        __syncthreads(); /* tile t landed; every warp is done with tile t - 1 */
        if (t + 1 < n_tiles) load_tile(t + 1);
        fp_cp_async_commit();
        const int kb = span.lo + t * BC;
        const float *const sK = sKV + (t & 1) * 2 * BC * D, *const sV = sK + BC * D;

        float sc[1][KEY_TILES][4], dp[1][KEY_TILES][4];
        fp_mma_zero(sc);
        fp_mma_zero(dp);
#pragma unroll
        for (int u = 0; u < GROUPS; ++u)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                fp_tf32x3_qk_chunk<1, KEY_TILES, D>(sc, sQ_frag, sK, lane, u, hf);
                fp_tf32x3_qk_chunk<1, KEY_TILES, D>(dp, sO_frag, sV, lane, u, hf);
            }

        /* Tiles every row sees whole take the copy without the per-element test. */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = row0 + 8 * (r >> 1), j = kb + 8 * nt + fp_tf32_s_key(lane, r);
                    const bool seen = !decltype(masked)::value ||
                                      (i < s.nq && j < s.nkv && fp_in_band(band, i, j));
                    fp_bwd_p_ds<MODS>(a, s.b, h, s.nq, s.nkv, i, j, seen, lse[r >> 1],
                                      delta[r >> 1], sc[0][nt][r], dp[0][nt][r]);
                }
        };
        if (fp_bwd_tile_full(band, q0, BR, kb, BC, s.nq, s.nkv)) {
            p_ds(std::false_type{});
        } else {
            p_ds(std::true_type{});
        }

#pragma unroll
        for (int w = 0; w < GROUPS; ++w)
            fp_tf32x3_pv_group<1, KEY_TILES, D_TILES, D>(dq, w, dp, sK, lane, w);
    }
    fp_cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row0 + 8 * i >= s.nq) continue;
        float *const gdq = static_cast<float *>(a.d_q) + fp_q_offset(a.qs, s, h, row0 + 8 * i);
#pragma unroll
        for (int w = 0; w < GROUPS; ++w)
            fp_tf32x3_store_group<D_TILES>(gdq, dq[0], w, i, fp_tf32_o_col(lane, 4 * w, 2 * i),
                                           a.mods.scale, true, D);
    }
#endif
}

#endif /* FP_BACKWARD_TF32X3_Q_KERNEL_CUH */
