/*
 * FlashAttention-2 forward on the tensor cores (mma.sync m16n8k16, f16/bf16 in, f32 accumulate).
 *
 * One block = FP_TC_BLOCK_ROWS (128) query rows of one (batch, query head); each warp owns 16 or
 * 32 of them for the whole pass, so a row's softmax statistics never leave its four lanes.
 * Warps, key tile, ring depth and where Q lives are a compile-time config (tile_configs.h).
 * The block walks its keys in tiles of BC through a STAGES-deep cp.async ring in shared memory
 * (K and V of a tile share a stage); one __syncthreads per tile both publishes tile t and frees
 * the stage of tile t - 1, which is then refilled with tile t + STAGES - 1.
 *
 * The per-tile math of each warp lives in warp_rows.cuh. Tiles reaching past the end of the
 * keys or across the causal diagonal run its masked instance, every other tile the unmasked
 * one. A negative scale flips the signs of Q in shared memory (exact in any 16-bit float), so
 * that the warps always see a positive one.
 *
 * Head dims: each config is compiled for one D of 64, 128, 256; a smaller d runs on the next D
 * with its shared-memory columns past d zero-filled and its columns past d never stored. The
 * k-steps over the zero columns are computed rather than skipped: a run-time exit inside the
 * unrolled mma loops stops the compiler from issuing the next step's ldmatrix ahead of the
 * current step's mma, which costs every head dim more than the padding costs the odd ones.
 */
#ifndef FP_MMA_FLASH_FORWARD_KERNEL_CUH
#define FP_MMA_FLASH_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include "../common/ptx.cuh"
#include "flash_forward.h"
#include "fragment_layout.h"
#include "mma_ops.cuh"
#include "tile_configs.h"
#include "tile_loader.cuh"
#include "warp_rows.cuh"

/* Everything a block needs, by value. Strides are in elements. */
struct fp_tc_params {
    const void *q, *k, *v;
    void *o;
    float *lse;     /* final pass only; NULL: not wanted */
    float *part_o;  /* split pass only (NULL in the final pass) */
    float *part_ml;
    int64_t q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, o_b, o_h, o_s;
    int64_t rows; /* batch * heads_q * seq_q: rows of one split's partials */
    int heads_q, group, seq_q, seq_kv, d;
    int keys_per_split; /* keys of one blockIdx.z; >= seq_kv in the final pass */
    float scale_log2;   /* |scale| * log2(e) */
    int negate_q;       /* scale < 0: Q's signs are flipped in shared memory (exact) instead */
    int causal;
    int o_pairs;     /* O allows 4-byte stores of two adjacent columns */
};

/*
 * One compile-time config per entry of FP_TC_CONFIG_LIST (tile_configs.h, which says what each
 * field means and why): fp_tc_config<D, INDEX>.
 */
template <int D, int INDEX>
struct fp_tc_config;
#define FP_TC_DEFINE_CONFIG(d, index, warps, m_tiles, bc, stages, q_in_regs, min_blocks)      \
    template <>                                                                                \
    struct fp_tc_config<d, index> {                                                            \
        static constexpr int D = d, WARPS = warps, M_TILES = m_tiles, BC = bc, STAGES = stages, \
                             MIN_BLOCKS = min_blocks;                                          \
        static constexpr bool Q_IN_REGS = q_in_regs != 0;                                      \
        static constexpr size_t SMEM_BYTES =                                                   \
            (size_t)2 * D * (FP_TC_BLOCK_ROWS + (size_t)STAGES * 2 * BC);                      \
    };
FP_TC_CONFIG_LIST(FP_TC_DEFINE_CONFIG)
#undef FP_TC_DEFINE_CONFIG

/* ASYNC: Q, K and V allow 16-byte cp.async (tile_loader.cuh). A compile-time choice, because
 * keeping both load paths in one loop keeps both paths' addresses live across it, and those
 * registers are what the larger tiles lack. */
template <typename T, typename Cfg, bool ASYNC>
__global__ void __launch_bounds__(Cfg::WARPS * 32, Cfg::MIN_BLOCKS)
    fp_tc_forward_kernel(const fp_tc_params a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int D = Cfg::D;
    constexpr int BR = FP_TC_BLOCK_ROWS;
    constexpr int THREADS = Cfg::WARPS * 32;
    constexpr int MT = Cfg::M_TILES;
    constexpr int BC = Cfg::BC;
    constexpr int STAGES = Cfg::STAGES;
    constexpr int STAGE_ELEMS = 2 * BC * D;
    static_assert(Cfg::WARPS * MT * 16 == BR, "the warps' slices cover the block's rows");
    static_assert(STAGES >= 2, "the ring needs a stage to compute and one to fill");
    static_assert(BC % 16 == 0, "key tiles pair up for ldmatrix.x4 and the P V k-steps");
    using QLoader = fp_tile_loader<T, BR, D, THREADS>;
    using KVLoader = fp_tile_loader<T, BC, D, THREADS>;

    extern __shared__ __align__(128) unsigned char fp_tc_smem[];
    T *const sQ = reinterpret_cast<T *>(fp_tc_smem);
    T *const sKV = sQ + BR * D;

    const int warp = threadIdx.x >> 5;
    /* Causal blocks near the bottom do the most work: start them first. */
    const int m_block = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / a.heads_q, h = bh % a.heads_q, hk = h / a.group;
    const int q0 = m_block * BR;
    const int warp_row0 = q0 + warp * 16 * MT; /* first query row of the warp's slices */
    const int diag = a.seq_kv - a.seq_q;      /* key j visible to row i iff j <= i + diag */

    const int kv_lo = (int)blockIdx.z * a.keys_per_split;
    const int kv_end = min(a.seq_kv, kv_lo + a.keys_per_split);
    int kv_hi = kv_end;
    if (a.causal)
        kv_hi = min(kv_hi, min(q0 + BR, a.seq_q) + diag); /* past the last row's last key */
    const int n_tiles = kv_hi > kv_lo ? (kv_hi - kv_lo + BC - 1) / BC : 0;

    const T *gQ = static_cast<const T *>(a.q) + b * a.q_b + h * a.q_h + (int64_t)q0 * a.q_s;
    const T *gK = static_cast<const T *>(a.k) + b * a.k_b + hk * a.k_h;
    const T *gV = static_cast<const T *>(a.v) + b * a.v_b + hk * a.v_h;

    QLoader::template load<ASYNC>(sQ, gQ, a.q_s, a.seq_q - q0, a.d);
    auto load_tile = [&](int t) {
        T *sK = sKV + (t % STAGES) * STAGE_ELEMS;
        const int kb = kv_lo + t * BC;
        KVLoader::template load<ASYNC>(sK, gK + (int64_t)kb * a.k_s, a.k_s, kv_end - kb, a.d);
        KVLoader::template load<ASYNC>(sK + BC * D, gV + (int64_t)kb * a.v_s, a.v_s, kv_end - kb,
                                       a.d);
    };
    /* Group g holds tile g (group 0 also Q); empty groups keep the count uniform. */
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < n_tiles)
            load_tile(t);
        fp_cp_async_commit();
    }

    const bool warp_active = warp_row0 < a.seq_q;
    /* Tiles reaching past this key need the mask: the end of the keys, or the first key the
     * warp's first row cannot see. */
    const int mask_from = a.causal ? min(kv_end, warp_row0 + diag + 1) : kv_end;
    const uint32_t sQ_addr = fp_smem_addr(sQ);
    fp_tc_warp_rows<T, Cfg> w;
    w.init(warp, q0);

    bool q_loaded = false; /* Q fragments are read at the warp's first computed tile */
    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<STAGES - 2>();
        if (t == 0 && a.negate_q)
            QLoader::negate_own_chunks(sQ); /* this thread's Q copies have landed */
        __syncthreads();
        if (t + STAGES - 1 < n_tiles)
            load_tile(t + STAGES - 1);
        fp_cp_async_commit();
        const int kb = kv_lo + t * BC;
        /* A tile wholly above the diagonal for every row of this warp would leave its state as
         * it is (p = 0, alpha = 1): skip it. */
        if (!warp_active || (a.causal && kb > warp_row0 + 16 * MT - 1 + diag))
            continue;
        if (Cfg::Q_IN_REGS && !q_loaded) {
            q_loaded = true;
            w.load_q(sQ_addr);
        }
        const uint32_t sK_addr = fp_smem_addr(sKV + (t % STAGES) * STAGE_ELEMS);
        if (kb + BC > mask_from)
            w.template tile<true>(sQ_addr, sK_addr, kb, kv_end, a.causal, diag, a.scale_log2);
        else
            w.template tile<false>(sQ_addr, sK_addr, kb, kv_end, a.causal, diag, a.scale_log2);
    }
    fp_cp_async_wait<0>();
    if (!warp_active)
        return;

    const int col0 = fp_mma_acc_col(w.lane, 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = w.l[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = warp_row0 + 16 * mt + fp_mma_acc_row(w.lane, 2 * i);
            if (row >= a.seq_q)
                continue;
            const int64_t row_index = (int64_t)bh * a.seq_q + row;
            /* l == 0 only when no key was visible; a NaN l must stay NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            if (a.part_o) {
                const int64_t part_row = (int64_t)blockIdx.z * a.rows + row_index;
                float *po = a.part_o + part_row * a.d;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    const int col = 8 * dt + col0;
                    if (col < a.d)
                        po[col] = w.o[mt][dt][2 * i] * inv_l;
                    if (col + 1 < a.d)
                        po[col + 1] = w.o[mt][dt][2 * i + 1] * inv_l;
                }
                if (col0 == 0) {
                    a.part_ml[2 * part_row] = w.m[mt][i];
                    a.part_ml[2 * part_row + 1] = row_l;
                }
            } else {
                T *go = static_cast<T *>(a.o) + b * a.o_b + h * a.o_h + (int64_t)row * a.o_s;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    const int col = 8 * dt + col0;
                    const float v0 = w.o[mt][dt][2 * i] * inv_l;
                    const float v1 = w.o[mt][dt][2 * i + 1] * inv_l;
                    if (a.o_pairs && col + 1 < a.d) {
                        *reinterpret_cast<uint32_t *>(go + col) = fp_mma_ops<T>::pack(v0, v1);
                    } else {
                        if (col < a.d)
                            go[col] = fp_mma_ops<T>::from_float(v0);
                        if (col + 1 < a.d)
                            go[col + 1] = fp_mma_ops<T>::from_float(v1);
                    }
                }
                if (a.lse && col0 == 0)
                    a.lse[row_index] = row_l == 0.0f
                                           ? -INFINITY
                                           : (w.m[mt][i] + log2f(row_l)) * 0.693147180559945309f;
            }
        }
#endif
}

#endif /* FP_MMA_FLASH_FORWARD_KERNEL_CUH */
