/*
 * FlashAttention-2 forward for f32 inputs on the tensor cores with the 3xTF32 split
 * (mma.sync m16n8k8 .tf32, tf32_split.cuh): every operand is split into two tf32 halves and each
 * product takes three mma, which keeps the result within f32 tolerances at tensor-core speed.
 *
 * One block = 16 x M_TILES x WARPS query rows of one (batch, query head); each warp owns
 * M_TILES slices of 16 of them for the whole pass, so a row's softmax statistics never leave
 * its four lanes, and every K and V fragment it loads and splits feeds M_TILES products. The
 * block walks its keys in tiles of BC through a STAGES-deep cp.async ring (K and V of a tile
 * share a stage); one __syncthreads per tile both publishes tile t and frees the stage of tile
 * t - 1, which is then refilled with tile t + STAGES - 1. Q stays in shared memory and is
 * re-read per tile (registers go to O, D/2 a lane); once it has landed, each warp rewrites its
 * rows in fragment order (fragment_layout.h), so that every A fragment is one 16-byte load
 * already in register order instead of two loads and four register moves.
 *
 * Per tile and warp: S = Q K^T, scores scaled by scale * log2(e), masked in the tile instance
 * compiled for tiles that cross the causal diagonal or the end of the keys (the other instance
 * has no per-element index arithmetic), online softmax with exp2 that rescales O only when a
 * row's max moved, O += P V with P taken straight from the S accumulators (fragment_layout.h
 * says why that needs no shuffle). Operands are split in registers right after their 16-byte
 * shared loads. O stays un-normalised until the end, where it is divided by the row sum once.
 * The steps themselves are shared with the wide-head kernel (warp_steps.cuh).
 *
 * Head dims: each config is compiled for one D; a smaller d runs on the next D with its shared
 * columns past d zero-filled (and multiplied through: a run-time exit inside the unrolled
 * loops would keep the compiler from overlapping loads with mma) and its columns past d never
 * stored.
 */
#ifndef FP_TF32X3_FLASH_FORWARD_KERNEL_CUH
#define FP_TF32X3_FLASH_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "../common/online_softmax_rows.cuh"
#include "../common/ptx.cuh"
#include "fragment_layout.h"
#include "params.h"
#include "tile_configs.h"
#include "tile_load.cuh"
#include "warp_steps.cuh"

template <int d_, int warps, int m_tiles, int bc, int stages, int min_blocks>
struct fp_tf32x3_config {
    static constexpr int D = d_, WARPS = warps, M_TILES = m_tiles, BC = bc, STAGES = stages,
                         MIN_BLOCKS = min_blocks, ROWS = 16 * warps * m_tiles;
    static constexpr size_t SMEM_BYTES = (size_t)4 * D * (ROWS + (size_t)STAGES * 2 * BC);
};

/* ASYNC: Q, K and V allow 16-byte cp.async (base and strides 16-byte aligned); a compile-time
 * choice so that only one load path's addresses stay live across the key loop. */
template <typename Cfg, bool ASYNC>
__global__ void __launch_bounds__(Cfg::WARPS * 32, Cfg::MIN_BLOCKS)
    fp_tf32x3_forward_kernel(const fp_tf32x3_params a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int D = Cfg::D;
    constexpr int BR = Cfg::ROWS;
    constexpr int THREADS = Cfg::WARPS * 32;
    constexpr int MT = Cfg::M_TILES;
    constexpr int BC = Cfg::BC;
    constexpr int STAGES = Cfg::STAGES;
    constexpr int GROUPS = D / 32;    /* 32-column groups of d */
    constexpr int KEY_TILES = BC / 8; /* n-tiles of S, k-steps of O += P V */
    constexpr int D_TILES = D / 8;    /* n-tiles of O */
    constexpr int STAGE_FLOATS = 2 * BC * D;
    static_assert(D % 32 == 0, "the swizzle and the column groups need D % 32 == 0");
    static_assert(BC % 8 == 0 && STAGES >= 2, "whole key tiles, a stage to fill");

    extern __shared__ __align__(128) unsigned char fp_tf32x3_smem[];
    float *const sQ = reinterpret_cast<float *>(fp_tf32x3_smem);
    float *const sKV = sQ + BR * D;

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    /* Causal blocks near the bottom do the most work: start them first. */
    const int m_block = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / a.heads_q, h = bh % a.heads_q, hk = h / a.group;
    const int q0 = m_block * BR;
    const int warp_row0 = q0 + 16 * MT * warp; /* first query row of the warp's slices */
    const int diag = a.seq_kv - a.seq_q;      /* key j visible to row i iff j <= i + diag */

    const int kv_end = a.seq_kv;
    int kv_hi = kv_end;
    if (a.causal)
        kv_hi = min(kv_hi, min(q0 + BR, a.seq_q) + diag); /* past the last row's last key */
    const int n_tiles = kv_hi > 0 ? (kv_hi + BC - 1) / BC : 0;
    /* Tiles reaching past this key need the mask: the end of the keys, or the first key the
     * block's first row cannot see. */
    const int mask_from = a.causal ? min(kv_end, q0 + diag + 1) : kv_end;

    const float *gQ = a.q + b * a.q_b + h * a.q_h + (int64_t)q0 * a.q_s;
    const float *gK = a.k + b * a.k_b + hk * a.k_h;
    const float *gV = a.v + b * a.v_b + hk * a.v_h;

    fp_tf32x3_load_tile<ASYNC, BR, D, THREADS>(sQ, gQ, a.q_s, a.seq_q - q0, a.d);
    auto load_tile = [&](int t) {
        float *sK = sKV + (t % STAGES) * STAGE_FLOATS;
        const int kb = t * BC;
        fp_tf32x3_load_tile<ASYNC, BC, D, THREADS>(sK, gK + (int64_t)kb * a.k_s, a.k_s,
                                                   kv_end - kb, a.d);
        fp_tf32x3_load_tile<ASYNC, BC, D, THREADS>(sK + BC * D, gV + (int64_t)kb * a.v_s,
                                                   a.v_s, kv_end - kb, a.d);
    };
    /* Group g holds tile g (group 0 also Q); empty groups keep the count uniform. */
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < n_tiles)
            load_tile(t);
        fp_cp_async_commit();
    }

    const bool warp_active = warp_row0 < a.seq_q;
    /* Q has landed (group 0): each warp puts its own rows in fragment order. */
    fp_cp_async_wait<STAGES - 2>();
    __syncthreads();
    fp_tf32x3_q_to_fragment_order<MT, GROUPS, D>(sQ + 16 * MT * warp * D, lane, 0);
    const float *const sQ_frag = sQ + 16 * MT * warp * D + fp_tf32_q_frag_lane(lane, D);

    /* Per slice, rows g and g + 8: running max (base-2, scaled) and this lane's share of the
     * row sum. */
    float o[MT][D_TILES][4], m[MT][2], l[MT][2];
    fp_mma_softmax_init(m, l, o);

    /* One key tile, K at sK and V right after it. Instantiated with and without the mask
     * (the end of the keys, the causal diagonal), so that the full tiles carry no per-element
     * index arithmetic; always inlined, so the accumulators stay in registers. */
    auto tile = [&](const float *sK, int kb, auto masked) __attribute__((always_inline)) {
        const float *const sV = sK + BC * D;
        float s[MT][KEY_TILES][4];
        fp_mma_zero(s);
#pragma unroll
        for (int u = 0; u < GROUPS; ++u)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                fp_tf32x3_qk_chunk<MT, KEY_TILES, D>(s, sQ_frag, sK, lane, u, half);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    s[mt][nt][r] = fp_tf32x3_scaled_score<decltype(masked)::value>(
                        s[mt][nt][r], a.scale_log2, kb + 8 * nt + fp_tf32_s_key(lane, r),
                        warp_row0 + 16 * mt + fp_tf32_acc_row(lane, r), kv_end, a.causal, diag);

        /* The scores are already scaled (by scale * log2(e), either sign), so the step's own
         * scale is 1. */
        fp_mma_softmax_step<MT, KEY_TILES, D_TILES>(s, m, l, o, 1.0f);

        /* O += P V, one 32-column group of d at a time. */
#pragma unroll
        for (int w = 0; w < GROUPS; ++w)
            fp_tf32x3_pv_group<MT, KEY_TILES, D_TILES, D>(o, w, s, sV, lane, w);
    };

    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (t + STAGES - 1 < n_tiles)
            load_tile(t + STAGES - 1);
        fp_cp_async_commit();
        const int kb = t * BC;
        /* A tile wholly above the diagonal for every row of this warp would leave its state as
         * it is (p = 0, alpha = 1): skip it. */
        if (!warp_active || (a.causal && kb > warp_row0 + 16 * MT - 1 + diag))
            continue;

        const float *const sK = sKV + (t % STAGES) * STAGE_FLOATS;
        if (kb + BC > mask_from)
            tile(sK, kb, std::true_type{});
        else
            tile(sK, kb, std::false_type{});
    }

    fp_cp_async_wait<0>();
    if (!warp_active)
        return;

#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = l[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = warp_row0 + 16 * mt + fp_tf32_acc_row(lane, 2 * i);
            if (row >= a.seq_q)
                continue;
            /* l == 0 only when no key was visible; a NaN l must stay NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            float *go = a.o + b * a.o_b + h * a.o_h + (int64_t)row * a.o_s;
#pragma unroll
            for (int w = 0; w < GROUPS; ++w)
                fp_tf32x3_store_group<D_TILES>(go, o[mt], w, i, fp_tf32_o_col(lane, 4 * w, 2 * i),
                                               inv_l, a.o_vec4 != 0, a.d);
            if (a.lse && (lane & 3) == 0)
                a.lse[(int64_t)bh * a.seq_q + row] =
                    row_l == 0.0f ? -INFINITY : (m[mt][i] + log2f(row_l)) * 0.693147180559945309f;
        }
#endif
}

#endif /* FP_TF32X3_FLASH_FORWARD_KERNEL_CUH */
