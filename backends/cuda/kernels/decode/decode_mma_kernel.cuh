/*
 * The decode kernel on the tensor cores, for f16 and bf16: the same block, ring and splits as
 * decode_kernel.cuh, with the products done by mma.sync m16n8k16. A block's 16 rows (the query
 * heads of a kv head times the query positions, zero-padded) are the M of every product, so a
 * GQA group costs one K and V read and a handful of MMAs per 16 keys, where the CUDA-core kernel
 * spends tens of FMAs per key and row and is bound by issue, not memory.
 *
 * Each of the 4 warps takes 16 keys of every 64-key tile: S = Q K^T (Q fragments held in
 * registers, K through ldmatrix), the scores through score_mods.cuh where a mask or modifier
 * applies, the online-softmax step of online_softmax_rows.cuh, and O += P V with P taken from
 * the S accumulators (V through ldmatrix.trans). The warps merge through shared memory at the
 * end, as the CUDA-core kernel's lane groups do. Tiles use mma/fragment_layout.h's swizzle.
 */
#ifndef FP_DECODE_MMA_KERNEL_CUH
#define FP_DECODE_MMA_KERNEL_CUH

#include "../common/online_softmax_rows.cuh"
#include "../mma/fragment_layout.h"
#include "../mma/mma_ops.cuh"
#include "decode_kernel.cuh"

#define FP_DECODE_MMA_WARPS     4
#define FP_DECODE_MMA_ROWS      16 /* the M of m16n8k16 */
#define FP_DECODE_MMA_WARP_KEYS 16 /* one k-step of O += P V */
#define FP_DECODE_MMA_TILE_KEYS (FP_DECODE_MMA_WARPS * FP_DECODE_MMA_WARP_KEYS)

template <int D> struct fp_decode_mma_smem {
    static constexpr int STAGE = 2 * FP_DECODE_MMA_TILE_KEYS * D * 2; /* K then V */
    static constexpr int STAGES = D <= 128 ? 3 : 2;
    static constexpr int RING = STAGES * STAGE;
    /* The warps' partial O rows, MERGE_STRIDE floats apart: a warp stores 8 rows at once, and
     * rows D floats apart would fall in the same banks. */
    static constexpr int MERGE_STRIDE = D + 8;
    static constexpr int MERGE = FP_DECODE_MMA_WARPS * FP_DECODE_MMA_ROWS * MERGE_STRIDE * 4;
    static constexpr int BODY = RING > MERGE ? RING : MERGE;
    static constexpr int Q = FP_DECODE_MMA_ROWS * D * 2;
    static constexpr int STATS = 2 * FP_DECODE_MMA_WARPS * FP_DECODE_MMA_ROWS * 4;
    static constexpr int ROW_INFO = FP_DECODE_MMA_ROWS * (int)sizeof(fp_decode_row);
    static constexpr int BYTES = BODY + Q + STATS + ROW_INFO;
};

template <typename T, int D>
__global__ void __launch_bounds__(FP_DECODE_THREADS) fp_decode_mma_kernel(const fp_decode_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using Ops = fp_mma_ops<T>;
    using M = fp_decode_mma_smem<D>;
    constexpr int ROWS = FP_DECODE_MMA_ROWS, CPR = D / 8, QK_STEPS = D / 16, D_TILES = D / 8;
    constexpr int TILE = FP_DECODE_MMA_TILE_KEYS;
    static_assert(FP_DECODE_THREADS == 32 * FP_DECODE_MMA_WARPS, "one warp per 16 keys");
    extern __shared__ __align__(16) char smem[];
    T *sQ = (T *)(smem + M::BODY);
    float *stat_m = (float *)(smem + M::BODY + M::Q), *stat_l = stat_m + FP_DECODE_MMA_WARPS * ROWS;
    fp_decode_row *rows = (fp_decode_row *)(smem + M::BODY + M::Q + M::STATS);
    fp_grid_wait_prior(); /* Q, K, V and the tables may come from the kernel before this one */

    const fp_decode_block B = fp_decode_block_setup<ROWS>(a, rows);
    const int b = B.s.b, k0 = B.k0, k1 = B.k1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    /* Q, swizzled, rows that are off zero (Q's strides need no alignment: element loads). All
     * of a thread's loads are issued before its first store: a loop that stored each element
     * as it arrived waited a memory latency per element. And they are issued before the ring's
     * first tiles: behind them they waited for every block's first tiles (17 MB at GQA
     * Nkv = 32768), and the blocks' next copies waited for Q. */
    constexpr int Q_PER_THREAD = ROWS * D / FP_DECODE_THREADS;
    static_assert(ROWS * D % FP_DECODE_THREADS == 0, "whole Q elements per thread");
    T q_elems[Q_PER_THREAD];
#pragma unroll
    for (int k = 0; k < Q_PER_THREAD; k++) {
        const int e = threadIdx.x + k * FP_DECODE_THREADS;
        const fp_decode_row x = rows[e / D];
        q_elems[k] = x.on ? ((const T *)a.q)[x.q_at + e % D] : Ops::from_float(0.0f);
    }
    /* The ring's first tiles are in flight while Q lands (the ring and Q do not overlap). */
    const int tiles = (k1 - k0 + TILE - 1) / TILE;
    auto issue = [&](int tile, int slot) {
        char *k_tile = smem + slot * M::STAGE;
        fp_decode_issue<T, D, TILE, true>(a, B.s, B.hk, k0 + tile * TILE, k1, k_tile,
                                          k_tile + M::STAGE / 2);
    };
    /* Not unrolled: one copy of the issue code (a few KB of instructions, fetched by every
     * block) serves all the first tiles. */
#pragma unroll 1
    for (int t = 0; t < M::STAGES - 1; t++) {
        if (t < tiles) issue(t, t);
        fp_cp_async_commit();
    }

#pragma unroll
    for (int k = 0; k < Q_PER_THREAD; k++) {
        const int e = threadIdx.x + k * FP_DECODE_THREADS, r = e / D, c = e % D;
        sQ[fp_mma_swizzle(r, c / 8, CPR) + c % 8] = q_elems[k];
    }
    /* This lane's accumulator rows, g and g + 8. */
    fp_decode_row mine[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        mine[i] = rows[fp_mma_acc_row(lane, 2 * i)];
    __syncthreads();

    uint32_t qf[QK_STEPS][4];
    const int a_lane =
        fp_mma_swizzle(fp_mma_ldsm_rowmajor_row(lane), fp_mma_ldsm_rowmajor_chunk(lane), CPR);
    const int k_lane =
        fp_mma_swizzle(fp_mma_ldsm_keys_row(lane), fp_mma_ldsm_keys_chunk(lane), CPR);
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; kk++)
        fp_ldmatrix_x4(qf[kk], fp_smem_addr(sQ) + 2u * fp_mma_swizzle_step(a_lane, 0, 2 * kk, CPR));

    float o[1][D_TILES][4], m[1][2], l[1][2];
    fp_mma_softmax_init(m, l, o);

    const bool plain = !fp_score_mods_any(a.mods);
    const float scale_log2 = a.mods.scale * FP_LOG2E;
    for (int t = 0; t < tiles; t++) {
        fp_cp_async_wait<M::STAGES - 2>();
        __syncthreads();
        if (t + M::STAGES - 1 < tiles) issue(t + M::STAGES - 1, (t + M::STAGES - 1) % M::STAGES);
        fp_cp_async_commit();

        const uint32_t sK = fp_smem_addr(smem + (t % M::STAGES) * M::STAGE);
        const uint32_t sV = sK + M::STAGE / 2;
        const int j0 = k0 + t * TILE + warp * FP_DECODE_MMA_WARP_KEYS;

        float s[1][2][4];
        fp_mma_zero(s);
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; kk++) {
            uint32_t bk[4];
            fp_ldmatrix_x4(bk, sK + 2u * fp_mma_swizzle_step(k_lane, warp * 16, 2 * kk, CPR));
            Ops::mma(s[0][0], qf[kk], bk[0], bk[1]);
            Ops::mma(s[0][1], qf[kk], bk[2], bk[3]);
        }
        if (plain && fp_decode_full(B, j0, FP_DECODE_MMA_WARP_KEYS)) {
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int r = 0; r < 4; r++) s[0][nt][r] *= scale_log2;
        } else {
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const fp_decode_row &x = mine[r / 2];
                    const int j = j0 + 8 * nt + fp_mma_acc_col(lane, r);
                    const bool seen = x.on && j >= x.lo && j < x.hi && j < k1;
                    s[0][nt][r] = !seen   ? -INFINITY
                                  : plain ? s[0][nt][r] * scale_log2
                                          : fp_score_log2(a.mods, s[0][nt][r], b, x.h, x.i, j,
                                                          B.s.nq, B.s.nkv);
                }
        }
        fp_mma_softmax_step<1, 2, D_TILES>(s, m, l, o, 1.0f);

        uint32_t ap[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float *acc = s[0][fp_mma_p_key_tile(r)];
            ap[r] = Ops::pack(acc[fp_mma_p_acc_reg(r)], acc[fp_mma_p_acc_reg(r) + 1]);
        }
#pragma unroll
        for (int dp = 0; dp < D_TILES / 2; dp++) {
            uint32_t bv[4];
            fp_ldmatrix_x4_trans(bv, sV + 2u * fp_mma_swizzle_step(a_lane, warp * 16, 2 * dp, CPR));
            Ops::mma(o[0][2 * dp], ap, bv[0], bv[1]);
            Ops::mma(o[0][2 * dp + 1], ap, bv[2], bv[3]);
        }
    }
    fp_cp_async_wait<0>();
    fp_grid_release_next(); /* the next kernel (the split merge) may be scheduled */
    __syncthreads(); /* the ring becomes the merge buffer */

    /* The four lanes of a row each hold part of its sum. */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[0][i] += __shfl_xor_sync(0xffffffffu, l[0][i], 1);
        l[0][i] += __shfl_xor_sync(0xffffffffu, l[0][i], 2);
        if (lane % 4 == 0) {
            stat_m[warp * ROWS + fp_mma_acc_row(lane, 2 * i)] = m[0][i];
            stat_l[warp * ROWS + fp_mma_acc_row(lane, 2 * i)] = l[0][i];
        }
    }
    __syncthreads();
    float *merge = (float *)smem;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = fp_mma_acc_row(lane, 2 * i);
        const float top =
            fp_decode_block_max<FP_DECODE_MMA_WARPS, ROWS>(a, B, mine[i].h, row, stat_m);
        const float f = m[0][i] == -INFINITY ? 0.0f : exp2f(m[0][i] - top);
#pragma unroll
        for (int dt = 0; dt < D_TILES; dt++)
#pragma unroll
            for (int r = 2 * i; r < 2 * i + 2; r++)
                merge[(warp * ROWS + row) * M::MERGE_STRIDE + 8 * dt + fp_mma_acc_col(lane, r)] =
                    o[0][dt][r] * f;
    }
    __syncthreads();
    fp_decode_write<FP_DECODE_MMA_WARPS, ROWS, D, M::MERGE_STRIDE>(a, B, rows, merge, stat_m,
                                                                 stat_l);
#endif
}

#endif /* FP_DECODE_MMA_KERNEL_CUH */
