/*
 * FlashAttention-2 backward on the tensor cores, query-tile kernel: dQ in deterministic mode
 * (variant backward_mma). One block per (query tile of FP_BWD_MMA_ROWS rows, batch, query head),
 * four warps of 16 rows each, as the forward lays out its warps: Q and dO of the tile stay in
 * shared memory, the key tiles the rows see stream through a two-stage cp.async ring, and per
 * key tile each warp computes
 *   S = Q K^T and dP = dO V^T           (A: Q, dO as the forward's Q; B: K, V as its K),
 *   P, dS elementwise (backward/tile_math.cuh), with the rows' LSE and D in registers,
 *   dQ += dS K                          (A: dS from the accumulators; B: K by ldmatrix.trans),
 * dQ staying in f32 registers until the block writes scale * dQ. No atomics: every sum runs in
 * the same order on every run. PAD as in mma_kv_kernel.cuh: a head dim below D.
 */
#ifndef FP_BACKWARD_MMA_Q_KERNEL_CUH
#define FP_BACKWARD_MMA_Q_KERNEL_CUH

#include <type_traits>

#include "../common/online_softmax_rows.cuh"
#include "../mma/fragment_layout.h"
#include "../mma/mma_ops.cuh"
#include "../mma/tile_loader.cuh"
#include "mma_common.cuh"

template <int D> struct fp_bwd_mma_q_smem {
    static constexpr int BR = FP_BWD_MMA_ROWS, BC = fp_bwd_mma_q_keys<D>();
    /* Q, dO; two stages of K, V. */
    static constexpr size_t BYTES = (size_t)2 * (2 * BR * D + 2 * 2 * BC * D);
};

template <typename T, int D, bool MODS, bool PAD>
__global__ void __launch_bounds__(FP_BWD_MMA_Q_THREADS, 2)
    fp_bwd_mma_q_kernel(const fp_bwd_params a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int BR = FP_BWD_MMA_ROWS, BC = fp_bwd_mma_q_keys<D>();
    constexpr int THREADS = FP_BWD_MMA_Q_THREADS;
    constexpr int CPR = D / 8;
    constexpr int KEY_TILES = BC / 8; /* n-tiles of S and dP */
    constexpr int QK_STEPS = D / 16;
    constexpr int D_TILES = D / 8;
    static_assert(BR == 16 * FP_BWD_MMA_Q_WARPS, "a warp owns 16 query rows");
    using Ops = fp_mma_ops<T>;
    using QLoader = fp_tile_loader<T, BR, D, THREADS>;
    using KVLoader = fp_tile_loader<T, BC, D, THREADS>;

    extern __shared__ __align__(128) unsigned char fp_bwd_mma_smem[];
    T *const sQ = reinterpret_cast<T *>(fp_bwd_mma_smem); /* dO after it */
    T *const sKV = sQ + 2 * BR * D;                       /* stage st: K, then V */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(a.seq, b);
    const int q0 = blockIdx.x * BR;
    if (q0 >= s.nq) return;
    QLoader::template load<true, 2>(
        sQ,
        fp_strided_rows<T, 2>{{static_cast<const T *>(a.q) + fp_q_offset(a.qs, s, h, q0),
                               static_cast<const T *>(a.d_o) + fp_q_offset(a.os, s, h, q0)},
                              {a.qs.seq, a.os.seq}},
        s.nq - q0, a.d);
    const fp_span_keys span =
        fp_visible_span(a.mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, s.nkv);
    const int n_tiles = span.hi > span.lo ? (span.hi - span.lo + BC - 1) / BC : 0;
    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, 0);
    const T *const gK = static_cast<const T *>(a.k) + kv0.k;
    const T *const gV = static_cast<const T *>(a.v) + kv0.v;
    auto load_tile = [&](int t) {
        const int kb = span.lo + t * BC;
        const fp_strided_rows<T, 2> kv_rows{
            {gK + (int64_t)kb * a.ks.seq, gV + (int64_t)kb * a.vs.seq}, {a.ks.seq, a.vs.seq}};
        /* Without PAD a tile is whole unless it runs past the sequence. */
        if (!PAD && kb + BC <= s.nkv)
            KVLoader::template load_async_whole<2>(sKV + (t & 1) * 2 * BC * D, kv_rows);
        else
            KVLoader::template load<true, 2>(sKV + (t & 1) * 2 * BC * D, kv_rows, s.nkv - kb, a.d);
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
    const int a_row = fp_mma_ldsm_rowmajor_row(lane), a_chunk = fp_mma_ldsm_rowmajor_chunk(lane);
    const int q_lane = fp_mma_swizzle(16 * warp + a_row, a_chunk, CPR);
    const int k_lane =
        fp_mma_swizzle(fp_mma_ldsm_keys_row(lane), fp_mma_ldsm_keys_chunk(lane), CPR);
    const int tr_lane = fp_mma_swizzle(a_row, a_chunk, CPR);
    const uint32_t sQ_addr = fp_smem_addr(sQ), sO_addr = sQ_addr + 2u * BR * D;
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);

    float dq[1][D_TILES][4];
    fp_mma_zero(dq);
    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<0>();
        __syncthreads(); /* tile t (and Q, dO) landed; every warp is done with tile t - 1 */
        if (t + 1 < n_tiles) load_tile(t + 1);
        fp_cp_async_commit();
        const int kb = span.lo + t * BC;
        const uint32_t sK_addr = fp_smem_addr(sKV + (t & 1) * 2 * BC * D);
        const uint32_t sV_addr = sK_addr + 2u * BC * D;

        float sc[1][KEY_TILES][4], dp[1][KEY_TILES][4];
        fp_mma_zero(sc);
        fp_mma_zero(dp);
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; ++kk) {
            uint32_t aq[4], ao[4];
            fp_ldmatrix_x4(aq, sQ_addr + 2u * fp_mma_swizzle_step(q_lane, 0, 2 * kk, CPR));
            fp_ldmatrix_x4(ao, sO_addr + 2u * fp_mma_swizzle_step(q_lane, 0, 2 * kk, CPR));
#pragma unroll
            for (int np = 0; np < KEY_TILES / 2; ++np) {
                uint32_t bk[4], bv[4];
                const int off = fp_mma_swizzle_step(k_lane, 16 * np, 2 * kk, CPR);
                fp_ldmatrix_x4(bk, sK_addr + 2u * off);
                fp_ldmatrix_x4(bv, sV_addr + 2u * off);
                Ops::mma(sc[0][2 * np], aq, bk[0], bk[1]);
                Ops::mma(sc[0][2 * np + 1], aq, bk[2], bk[3]);
                Ops::mma(dp[0][2 * np], ao, bv[0], bv[1]);
                Ops::mma(dp[0][2 * np + 1], ao, bv[2], bv[3]);
            }
        }

        /* Tiles every row sees whole take the copy without the per-element test, as in the
         * key-tile kernel. */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = row0 + 8 * (r >> 1), j = kb + 8 * nt + 2 * c + (r & 1);
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
        for (int ks = 0; ks < BC / 16; ++ks) {
            uint32_t ads[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int nt = 2 * ks + fp_mma_p_key_tile(r), e = fp_mma_p_acc_reg(r);
                ads[r] = Ops::pack(dp[0][nt][e], dp[0][nt][e + 1]);
            }
#pragma unroll
            for (int dt = 0; dt < D_TILES / 2; ++dt) {
                uint32_t bk[4];
                fp_ldmatrix_x4_trans(
                    bk, sK_addr + 2u * fp_mma_swizzle_step(tr_lane, 16 * ks, 2 * dt, CPR));
                Ops::mma(dq[0][2 * dt], ads, bk[0], bk[1]);
                Ops::mma(dq[0][2 * dt + 1], ads, bk[2], bk[3]);
            }
        }
    }
    fp_cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row0 + 8 * i >= s.nq) continue;
        T *const gdq = static_cast<T *>(a.d_q) + fp_q_offset(a.qs, s, h, row0 + 8 * i);
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt)
            if (!PAD || 8 * dt < a.d)
                *reinterpret_cast<uint32_t *>(gdq + 8 * dt + 2 * c) =
                    Ops::pack(dq[0][dt][2 * i] * a.mods.scale, dq[0][dt][2 * i + 1] * a.mods.scale);
    }
#endif
}

#endif /* FP_BACKWARD_MMA_Q_KERNEL_CUH */
