/*
 * One warp's share of the tensor-core forward (flash_forward_kernel.cuh): its M_TILES 16-row
 * slices of the block's query rows, with their O accumulators, running max and running sum in
 * registers for the whole pass, and the per-tile math on them.
 *
 * Per key tile: S = Q K^T into registers (Q either held in registers, loaded at the warp's first
 * tile, or re-read from shared memory, per config); then the scores in one of three instances
 * (fp_tile_kind, common/score_tile.cuh): full tiles carry no per-element work at all, masked
 * tiles set the keys a row does not see to -inf, modified tiles (softcap, ALiBi, bias) take
 * every score through the modifiers, mask included (a bias, where it can, enters as the start of
 * the dot products' accumulators instead, score_mods.cuh says why). Then the online-softmax
 * step of common/online_softmax_rows.cuh, with the scale folded into its FFMA for the first two
 * (it takes the max over raw scores, which needs a positive scale: the kernel flips the signs of
 * Q for a negative one), while modified scores arrive in the log2 domain or as softcapped tanh
 * values whose factor the FFMA applies (fp_tile_modify). P is rounded to the input type
 * straight from the accumulators into A fragments (no shuffles), and
 * O += P V. O stays un-normalised until the kernel stores it, dividing by the row sum once.
 */
#ifndef FP_MMA_WARP_ROWS_CUH
#define FP_MMA_WARP_ROWS_CUH

#include <math.h>
#include <stdint.h>

#include "../common/online_softmax_rows.cuh"
#include "../common/ptx.cuh"
#include "../common/score_tile.cuh"
#include "fragment_layout.h"
#include "mma_ops.cuh"

template <typename T, typename Cfg> struct fp_tc_warp_rows {
    using Ops = fp_mma_ops<T>;
    static constexpr int D = Cfg::D;
    static constexpr int MT = Cfg::M_TILES;
    static constexpr int BC = Cfg::BC;
    static constexpr int CPR = D / 8;        /* 16-byte chunks a row */
    static constexpr int QK_STEPS = D / 16;  /* k-steps of S = Q K^T */
    static constexpr int KEY_TILES = BC / 8; /* n-tiles of S */
    static constexpr int PV_STEPS = BC / 16; /* k-steps of O += P V */
    static constexpr int D_TILES = D / 8;    /* n-tiles of O */

    int lane;
    int row0; /* the first query row of the warp's slices */
    /* Per-lane ldmatrix offsets (elements) of the first 16x16 slice of Q, K and V; the other
     * slices are fp_mma_swizzle_step away. Q and V use the same matrix order. */
    int q_lane, k_lane, v_lane;
    uint32_t qf[MT][Cfg::Q_IN_REGS ? QK_STEPS : 1][4];
    float o[MT][D_TILES][4];
    /* Per slice, rows g and g + 8 of its 16 (fp_mma_acc_row): running max (base 2, scaled)
     * and this lane's share of the running sum. */
    float m[MT][2], l[MT][2];

    __device__ __forceinline__ void init(int warp, int block_row0) {
        lane = threadIdx.x & 31;
        row0 = block_row0 + warp * 16 * MT;
        const int a_row = fp_mma_ldsm_rowmajor_row(lane);
        const int a_chunk = fp_mma_ldsm_rowmajor_chunk(lane);
        q_lane = fp_mma_swizzle(warp * 16 * MT + a_row, a_chunk, CPR);
        v_lane = fp_mma_swizzle(a_row, a_chunk, CPR);
        k_lane = fp_mma_swizzle(fp_mma_ldsm_keys_row(lane), fp_mma_ldsm_keys_chunk(lane), CPR);
        fp_mma_softmax_init(m, l, o);
    }

    __device__ __forceinline__ void q_fragment(uint32_t (&aq)[4], uint32_t sQ_addr, int mt,
                                               int kk) const {
        fp_ldmatrix_x4(aq, sQ_addr + 2u * fp_mma_swizzle_step(q_lane, 16 * mt, 2 * kk, CPR));
    }

    /* Q_IN_REGS configs: the fragments of every k-step, read once. */
    __device__ __forceinline__ void load_q(uint32_t sQ_addr) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < (Cfg::Q_IN_REGS ? QK_STEPS : 0); ++kk)
                q_fragment(qf[mt][kk], sQ_addr, mt, kk);
    }

    /* One key tile: keys kb .. kb + BC - 1, K at sK_addr and V right after it. Full tiles take
     * no mask, masked ones do, modified ones when `edge`. bias_inv_scale: 1 / scale when a
     * modified tile's dot products start from its bias (fp_tile_bias_start), else 0. */
    template <fp_tile_kind KIND>
    __device__ __forceinline__ void tile(uint32_t sQ_addr, uint32_t sK_addr, int kb, bool edge,
                                         const fp_score_mods &mods, const fp_tile_keys &c,
                                         float scale_log2, float bias_inv_scale) {
        const uint32_t sV_addr = sK_addr + 2u * BC * D;
        float s[MT][KEY_TILES][4];
        const bool bias_started = KIND == FP_TILE_MODIFIED && bias_inv_scale != 0.0f;
        if (bias_started)
            fp_tile_bias_start(s, row0, lane, kb, edge, bias_inv_scale, mods, c);
        else
            fp_mma_zero(s);
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; ++kk) {
            uint32_t aq[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (Cfg::Q_IN_REGS) {
#pragma unroll
                    for (int r = 0; r < 4; ++r) aq[mt][r] = qf[mt][Cfg::Q_IN_REGS ? kk : 0][r];
                } else {
                    q_fragment(aq[mt], sQ_addr, mt, kk);
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

        float softmax_scale = scale_log2;
        if (KIND == FP_TILE_MODIFIED)
            softmax_scale = fp_tile_modify<Ops::SOFTCAP_MATH, true>(s, row0, lane, kb, edge,
                                                                    bias_started, mods, c);
        else if (KIND == FP_TILE_MASKED)
        /* fp_tile_mask, in place (score_tile.cuh says why). */
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        if (!fp_tile_seen(c, row0 + 16 * mt + fp_mma_acc_row(lane, r),
                                          kb + 8 * nt + fp_mma_acc_col(lane, r)))
                            s[mt][nt][r] = -INFINITY;

        fp_mma_softmax_step<MT, KEY_TILES, D_TILES>(s, m, l, o, softmax_scale);

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
};

#endif /* FP_MMA_WARP_ROWS_CUH */
