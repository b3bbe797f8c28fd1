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
 * Per tile and warp: S = Q K^T into registers (Q either held in registers for the whole pass or
 * re-read from shared memory, per config), scores scaled by scale * log2(e), masked only on
 * tiles that cross the causal diagonal or the end of the keys, online softmax with exp2
 * (ex2.approx), P rounded to the input type straight from the accumulators into A fragments,
 * O += P V. O stays un-normalised until the end, where it is divided by the row sum once.
 *
 * Head dims: each config is compiled for one D of 64, 128, 256; a smaller d runs on the next D
 * with its shared-memory columns past d zero-filled, its k-steps past d skipped and its columns
 * past d never stored.
 */
#ifndef FP_MMA_FLASH_FORWARD_KERNEL_CUH
#define FP_MMA_FLASH_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include "flash_forward.h"
#include "fragment_layout.h"
#include "ptx.cuh"
#include "tile_configs.h"
#include "tile_loader.cuh"

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
    float scale_log2;   /* scale * log2(e) */
    int causal;
    int async_loads; /* Q, K, V allow 16-byte cp.async (see tile_loader.cuh) */
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

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::WARPS * 32, Cfg::MIN_BLOCKS)
    fp_tc_forward_kernel(const fp_tc_params a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int D = Cfg::D;
    using Ops = fp_mma_ops<T>;
    constexpr int BR = FP_TC_BLOCK_ROWS;
    constexpr int THREADS = Cfg::WARPS * 32;
    constexpr int MT = Cfg::M_TILES;
    constexpr int BC = Cfg::BC;
    constexpr int STAGES = Cfg::STAGES;
    constexpr int CPR = D / 8;        /* 16-byte chunks a row */
    constexpr int QK_STEPS = D / 16;  /* k-steps of S = Q K^T */
    constexpr int KEY_TILES = BC / 8; /* n-tiles of S */
    constexpr int PV_STEPS = BC / 16; /* k-steps of O += P V */
    constexpr int D_TILES = D / 8;    /* n-tiles of O */
    constexpr int STAGE_ELEMS = 2 * BC * D;
    static_assert(Cfg::WARPS * MT * 16 == BR, "the warps' slices cover the block's rows");
    static_assert(STAGES >= 2, "the ring needs a stage to compute and one to fill");
    static_assert(BC % 16 == 0, "key tiles pair up for ldmatrix.x4 and the P V k-steps");
    using QLoader = fp_tile_loader<T, BR, D, THREADS>;
    using KVLoader = fp_tile_loader<T, BC, D, THREADS>;

    extern __shared__ __align__(128) unsigned char fp_tc_smem[];
    T *const sQ = reinterpret_cast<T *>(fp_tc_smem);
    T *const sKV = sQ + BR * D;

    const int lane = threadIdx.x & 31;
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
    /* Tiles reaching past this key need the mask: the end of the keys, or the first key the
     * block's first row cannot see. */
    const int mask_from = a.causal ? min(kv_end, q0 + diag + 1) : kv_end;

    const T *gQ = static_cast<const T *>(a.q) + b * a.q_b + h * a.q_h + (int64_t)q0 * a.q_s;
    const T *gK = static_cast<const T *>(a.k) + b * a.k_b + hk * a.k_h;
    const T *gV = static_cast<const T *>(a.v) + b * a.v_b + hk * a.v_h;
    const bool async = a.async_loads != 0;

    QLoader::load(async, sQ, gQ, a.q_s, a.seq_q - q0, a.d);
    auto load_tile = [&](int t) {
        T *sK = sKV + (t % STAGES) * STAGE_ELEMS;
        const int kb = kv_lo + t * BC;
        KVLoader::load(async, sK, gK + (int64_t)kb * a.k_s, a.k_s, kv_end - kb, a.d);
        KVLoader::load(async, sK + BC * D, gV + (int64_t)kb * a.v_s, a.v_s, kv_end - kb, a.d);
    };
    /* Group g holds tile g (group 0 also Q); empty groups keep the count uniform. */
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < n_tiles)
            load_tile(t);
        fp_cp_async_commit();
    }

    const bool warp_active = warp_row0 < a.seq_q;
    const int qk_steps = (a.d + 15) / 16; /* k-steps that hold real columns */
    const uint32_t sQ_addr = fp_smem_addr(sQ);
    /* Per-lane ldmatrix offsets (elements) of the first 16x16 slice of Q, K and V; the other
     * slices are fp_mma_swizzle_step away. Q and V use the same matrix order. */
    const int a_row = fp_mma_ldsm_rowmajor_row(lane), a_chunk = fp_mma_ldsm_rowmajor_chunk(lane);
    const int q_lane = fp_mma_swizzle(warp * 16 * MT + a_row, a_chunk, CPR);
    const int v_lane = fp_mma_swizzle(a_row, a_chunk, CPR);
    const int k_lane =
        fp_mma_swizzle(fp_mma_ldsm_keys_row(lane), fp_mma_ldsm_keys_chunk(lane), CPR);

    uint32_t qf[MT][Cfg::Q_IN_REGS ? QK_STEPS : 1][4];
    float o[MT][D_TILES][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                o[mt][dt][r] = 0.0f;
    /* Per slice, rows g and g + 8 of its 16 (fp_mma_acc_row): running max (base-2, scaled)
     * and this lane's share of the running sum. */
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            m[mt][i] = -INFINITY;
            l[mt][i] = 0.0f;
        }

    bool q_loaded = false; /* Q fragments are read at the warp's first computed tile */
    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<STAGES - 2>();
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
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < (Cfg::Q_IN_REGS ? QK_STEPS : 0); ++kk)
                    if (kk < qk_steps)
                        fp_ldmatrix_x4(qf[mt][kk],
                                       sQ_addr + 2u * fp_mma_swizzle_step(q_lane, 16 * mt, 2 * kk,
                                                                          CPR));
        }

        const uint32_t sK_addr = fp_smem_addr(sKV + (t % STAGES) * STAGE_ELEMS);
        const uint32_t sV_addr = sK_addr + 2u * BC * D;

        float s[MT][KEY_TILES][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    s[mt][nt][r] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; ++kk) {
            if (kk >= qk_steps)
                break;
            uint32_t aq[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (Cfg::Q_IN_REGS) {
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        aq[mt][r] = qf[mt][Cfg::Q_IN_REGS ? kk : 0][r];
                } else {
                    fp_ldmatrix_x4(aq[mt], sQ_addr + 2u * fp_mma_swizzle_step(q_lane, 16 * mt,
                                                                              2 * kk, CPR));
                }
            }
#pragma unroll
            for (int np = 0; np < KEY_TILES / 2; ++np) {
                uint32_t bk[4];
                fp_ldmatrix_x4(bk,
                               sK_addr + 2u * fp_mma_swizzle_step(k_lane, 16 * np, 2 * kk, CPR));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Ops::mma(s[mt][2 * np], aq[mt], bk[0], bk[1]);
                    Ops::mma(s[mt][2 * np + 1], aq[mt], bk[2], bk[3]);
                }
            }
        }

        const bool masked = kb + BC > mask_from;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    float x = s[mt][nt][r] * a.scale_log2;
                    if (masked) {
                        const int key = kb + 8 * nt + fp_mma_acc_col(lane, r);
                        const int row = warp_row0 + 16 * mt + fp_mma_acc_row(lane, r);
                        if (key >= kv_end || (a.causal && key > row + diag))
                            x = -INFINITY;
                    }
                    s[mt][nt][r] = x;
                }

        /* Online softmax. A row whose keys are all masked so far keeps m = -inf; exp2 is then
         * taken against 0 so that it yields 0 rather than NaN. A NaN score is skipped by
         * fmaxf but reaches l and O through the exp2, as it must. */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float m_ref[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                float mx = m[mt][i];
#pragma unroll
                for (int nt = 0; nt < KEY_TILES; ++nt)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * i], s[mt][nt][2 * i + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                m_ref[i] = mx == -INFINITY ? 0.0f : mx;
                const float alpha = fp_exp2_approx(m[mt][i] - m_ref[i]);
                m[mt][i] = mx;
                l[mt][i] *= alpha;
#pragma unroll
                for (int dt = 0; dt < D_TILES; ++dt) {
                    o[mt][dt][2 * i] *= alpha;
                    o[mt][dt][2 * i + 1] *= alpha;
                }
            }
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float p = fp_exp2_approx(s[mt][nt][r] - m_ref[r >> 1]);
                    s[mt][nt][r] = p;
                    l[mt][r >> 1] += p;
                }
        }

#pragma unroll
        for (int ps = 0; ps < PV_STEPS; ++ps) {
            uint32_t ap[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float *acc = s[mt][2 * ps + fp_mma_p_key_tile(r)];
                    ap[mt][r] = Ops::pack(acc[fp_mma_p_acc_reg(r)], acc[fp_mma_p_acc_reg(r) + 1]);
                }
#pragma unroll
            for (int dp = 0; dp < D_TILES / 2; ++dp) {
                if (16 * dp >= a.d)
                    break;
                uint32_t bv[4];
                fp_ldmatrix_x4_trans(
                    bv, sV_addr + 2u * fp_mma_swizzle_step(v_lane, 16 * ps, 2 * dp, CPR));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Ops::mma(o[mt][2 * dp], ap[mt], bv[0], bv[1]);
                    Ops::mma(o[mt][2 * dp + 1], ap[mt], bv[2], bv[3]);
                }
            }
        }
    }
    fp_cp_async_wait<0>();
    if (!warp_active)
        return;

    const int col0 = fp_mma_acc_col(lane, 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = l[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = warp_row0 + 16 * mt + fp_mma_acc_row(lane, 2 * i);
            if (row >= a.seq_q)
                continue;
            const int64_t row_index = (int64_t)bh * a.seq_q + row;
            /* l == 0 only when no key was visible; a NaN l must stay NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            if (a.part_o) {
                const int64_t part_row = (int64_t)blockIdx.z * a.rows + row_index;
                float *po = a.part_o + part_row * a.d;
#pragma unroll
                for (int dt = 0; dt < D_TILES; ++dt) {
                    const int col = 8 * dt + col0;
                    if (col < a.d)
                        po[col] = o[mt][dt][2 * i] * inv_l;
                    if (col + 1 < a.d)
                        po[col + 1] = o[mt][dt][2 * i + 1] * inv_l;
                }
                if (col0 == 0) {
                    a.part_ml[2 * part_row] = m[mt][i];
                    a.part_ml[2 * part_row + 1] = row_l;
                }
            } else {
                T *go = static_cast<T *>(a.o) + b * a.o_b + h * a.o_h + (int64_t)row * a.o_s;
#pragma unroll
                for (int dt = 0; dt < D_TILES; ++dt) {
                    const int col = 8 * dt + col0;
                    const float v0 = o[mt][dt][2 * i] * inv_l, v1 = o[mt][dt][2 * i + 1] * inv_l;
                    if (a.o_pairs && col + 1 < a.d) {
                        *reinterpret_cast<uint32_t *>(go + col) = Ops::pack(v0, v1);
                    } else {
                        if (col < a.d)
                            go[col] = Ops::from_float(v0);
                        if (col + 1 < a.d)
                            go[col + 1] = Ops::from_float(v1);
                    }
                }
                if (a.lse && col0 == 0)
                    a.lse[row_index] = row_l == 0.0f
                                           ? -INFINITY
                                           : (m[mt][i] + log2f(row_l)) * 0.693147180559945309f;
            }
        }
#endif
}

#endif /* FP_MMA_FLASH_FORWARD_KERNEL_CUH */
