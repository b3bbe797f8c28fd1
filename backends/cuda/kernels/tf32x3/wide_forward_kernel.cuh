/*
 * The 3xTF32 tensor-core forward for wide heads (256 < d <= 1024), where one warp's rows and
 * the whole of d no longer fit in its registers: O alone would take d/2 registers a lane.
 *
 * One block = ROWS = 16 M_TILES query rows of one (batch, query head) and one range of keys
 * (split-KV), eight warps that split the head dimension: warp w owns the DW = D/8 columns
 * [w DW, (w + 1) DW) of O and reads only those columns of Q, K and V. Per key tile of BC keys:
 *   1. each warp computes the partial scores of all rows x BC keys over its own columns
 *      (S_w = Q[:, cols_w] K[:, cols_w]^T) and writes them to shared memory;
 *   2. after one barrier every warp sums the eight partials itself, in the same order, so that
 *      all warps hold bit-identical scores and so take identical softmax steps without any
 *      further exchange (a reduce-then-broadcast would cost a third barrier a tile);
 *   3. each warp runs the online softmax on those scores and adds P V[:, cols_w] to its slice
 *      of O, in a fresh accumulator added to O in f32 (flash_forward_kernel.cuh says why).
 * Every key byte a block brings in from L2 serves ROWS rows; Q sits in shared memory, raw,
 * leaving the registers to O, and is split into tf32 halves per tile (each warp first rewrites
 * its own column groups of it in fragment order, fragment_layout.h). K and V stream through a
 * ring of RING half-tile slots of BC x D floats (half-tile 2t is K of tile t, 2t + 1 its V);
 * the two barriers a tile needs anyway (scores complete, then tile consumed) are the points
 * where a slot is free and its next half-tile is issued. The fragment layouts, the swizzle and
 * the column permutation are those of fragment_layout.h, applied to a warp's own column groups,
 * and the per-warp steps those of warp_steps.cuh.
 *
 * Split-KV: blockIdx.z picks a range of keys_per_split keys (a multiple of BC); the block then
 * writes its normalised partial O and (m, l) to the workspace as split_kv.h lays it out, and the
 * merge kernel combines them. Unsplit, it writes O and LSE itself.
 */
#ifndef FP_TF32X3_WIDE_FORWARD_KERNEL_CUH
#define FP_TF32X3_WIDE_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "../common/online_softmax_rows.cuh"
#include "../common/ptx.cuh"
#include "fragment_layout.h"
#include "params.h"
#include "tile_load.cuh"
#include "warp_steps.cuh"

/* Where a split block puts its partial result; part_o == NULL: not split. */
struct fp_tf32x3_split {
    float *part_o;  /* [splits][rows][d] */
    float2 *part_ml; /* [splits][rows] */
    int keys_per_split;
    int64_t rows; /* B * Hq * Nq */
};

template <int d_, int m_tiles, int bc, int ring>
struct fp_tf32x3_wide_config {
    static constexpr int D = d_, M_TILES = m_tiles, BC = bc, RING = ring, WARPS = 8;
    static constexpr int ROWS = 16 * M_TILES;
    static constexpr int DW = D / WARPS; /* columns of d a warp owns */
    static constexpr size_t SLOT_FLOATS = (size_t)BC * D;
    static constexpr size_t PARTIAL_FLOATS = (size_t)WARPS * ROWS * BC;
    static constexpr size_t SMEM_BYTES =
        4 * ((size_t)ROWS * D + RING * SLOT_FLOATS + PARTIAL_FLOATS);
    static_assert(DW % 32 == 0, "a warp owns whole 32-column groups");
    static_assert(RING >= 2, "a slot for K and one for V");
};

template <typename Cfg, bool ASYNC>
__global__ void __launch_bounds__(Cfg::WARPS * 32, 1)
    fp_tf32x3_wide_forward_kernel(const fp_tf32x3_params a, const fp_tf32x3_split sp)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int D = Cfg::D;
    constexpr int BC = Cfg::BC;
    constexpr int MT = Cfg::M_TILES;
    constexpr int RING = Cfg::RING;
    constexpr int THREADS = Cfg::WARPS * 32;
    constexpr int UW = Cfg::DW / 32;  /* 32-column groups a warp owns */
    constexpr int KEY_TILES = BC / 8; /* n-tiles of S, k-steps of P V */
    constexpr int DT = Cfg::DW / 8;   /* n-tiles of the warp's O */
    constexpr int SLOT = (int)Cfg::SLOT_FLOATS;
    static_assert(BC % 8 == 0, "whole key tiles");

    extern __shared__ __align__(128) unsigned char fp_tf32x3_wide_smem[];
    float *const sQ = reinterpret_cast<float *>(fp_tf32x3_wide_smem);
    float *const ring = sQ + Cfg::ROWS * D;
    float4 *const partial = reinterpret_cast<float4 *>(ring + RING * SLOT);

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int m_block = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / a.heads_q, h = bh % a.heads_q, hk = h / a.group;
    const int q0 = m_block * Cfg::ROWS;
    const int diag = a.seq_kv - a.seq_q;

    int kv_begin = 0, kv_end = a.seq_kv;
    if (sp.part_o) {
        kv_begin = (int)blockIdx.z * sp.keys_per_split;
        kv_end = min(kv_end, kv_begin + sp.keys_per_split);
    }
    int kv_hi = kv_end;
    if (a.causal)
        kv_hi = min(kv_hi, min(q0 + Cfg::ROWS, a.seq_q) + diag);
    const int n_tiles = kv_hi > kv_begin ? (kv_hi - kv_begin + BC - 1) / BC : 0;
    /* Tiles reaching past this key need the mask: the end of the keys (split ranges end on a
     * tile boundary, so only the last one), or the first key row q0 cannot see. */
    const int mask_from = a.causal ? min(kv_end, q0 + diag + 1) : kv_end;

    const float *gK = a.k + b * a.k_b + hk * a.k_h;
    const float *gV = a.v + b * a.v_b + hk * a.v_h;
    const int n_halves = 2 * n_tiles;
    /* Half-tile hf (K of tile hf / 2 when even, V when odd) into slot hf % RING, as one cp.async
     * group, empty past the last tile so that the group count stays uniform. */
    auto issue_half = [&](int hf) {
        if (hf < n_halves) {
            const int kb = kv_begin + (hf >> 1) * BC;
            const float *src = (hf & 1) ? gV + (int64_t)kb * a.v_s : gK + (int64_t)kb * a.k_s;
            fp_tf32x3_load_tile<ASYNC, BC, D, THREADS>(ring + (hf % RING) * SLOT, src,
                                                       (hf & 1) ? a.v_s : a.k_s, a.seq_kv - kb,
                                                       a.d);
        }
        fp_cp_async_commit();
    };
    fp_tf32x3_load_tile<ASYNC, Cfg::ROWS, D, THREADS>(
        sQ, a.q + b * a.q_b + h * a.q_h + (int64_t)q0 * a.q_s, a.q_s, a.seq_q - q0, a.d);
    fp_cp_async_commit();
    /* Before tile t starts, half-tiles up to 2t + RING - 2 are issued; each barrier frees the
     * slot of the half-tile just consumed, RING half-tiles back from the one it then issues.
     * So waiting until at most RING - 2 groups are pending always lands the next half-tile. */
#pragma unroll
    for (int hf = 0; hf < RING - 1; ++hf)
        issue_half(hf);

    /* Q has landed (the first group): each warp puts its own column groups in fragment order. */
    fp_cp_async_wait<RING - 2>();
    __syncthreads();
    fp_tf32x3_q_to_fragment_order<MT, UW, D>(sQ, lane, warp * UW);
    const float *const sQ_frag = sQ + fp_tf32_q_frag_lane(lane, D);

    float o[MT][DT][4], m[MT][2], l[MT][2];
    fp_mma_softmax_init(m, l, o);

    auto tile = [&](int t, auto masked) __attribute__((always_inline)) {
        const float *const sK = ring + ((2 * t) % RING) * SLOT;
        const float *const sV = ring + ((2 * t + 1) % RING) * SLOT;
        const int kb = kv_begin + t * BC;

        /* 1. Partial scores over the warp's columns, in two accumulator sets (by chunk half)
         * so that consecutive mma do not wait on each other. */
        float acc_s[2][MT][KEY_TILES][4];
#pragma unroll
        for (int half = 0; half < 2; ++half)
            fp_mma_zero(acc_s[half]);
#pragma unroll
        for (int u = 0; u < UW; ++u)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                fp_tf32x3_qk_chunk<MT, KEY_TILES, D>(acc_s[half], sQ_frag, sK, lane, warp * UW + u,
                                                     half);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt) {
                const float(&x)[4] = acc_s[0][mt][nt];
                const float(&y)[4] = acc_s[1][mt][nt];
                partial[((warp * MT + mt) * KEY_TILES + nt) * 32 + lane] =
                    make_float4(x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]);
            }

        /* V_t has landed; every warp's partial is written and K_t is consumed, so its slot
         * takes half-tile 2t + RING. */
        fp_cp_async_wait<RING - 2>();
        __syncthreads();
        issue_half(2 * t + RING);

        /* 2. The full scores, summed in warp order by every warp alike, scaled and masked. */
        float s[MT][KEY_TILES][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt) {
                float4 sum = partial[(mt * KEY_TILES + nt) * 32 + lane];
#pragma unroll
                for (int w = 1; w < Cfg::WARPS; ++w) {
                    const float4 x = partial[((w * MT + mt) * KEY_TILES + nt) * 32 + lane];
                    sum.x += x.x;
                    sum.y += x.y;
                    sum.z += x.z;
                    sum.w += x.w;
                }
                const float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    s[mt][nt][r] = fp_tf32x3_scaled_score<decltype(masked)::value>(
                        v[r], a.scale_log2, kb + 8 * nt + fp_tf32_s_key(lane, r),
                        q0 + 16 * mt + fp_tf32_acc_row(lane, r), kv_end, a.causal, diag);
            }

        /* 3. Softmax step (scores already scaled), then the warp's columns of P V. */
        fp_mma_softmax_step<MT, KEY_TILES, DT>(s, m, l, o, 1.0f);
#pragma unroll
        for (int wl = 0; wl < UW; ++wl)
            fp_tf32x3_pv_group<MT, KEY_TILES, DT, D>(o, wl, s, sV, lane, warp * UW + wl);
    };

    for (int t = 0; t < n_tiles; ++t) {
        /* K_t (and Q, before tile 0) has landed. After the barrier every warp is done with
         * tile t - 1, so V_t-1's slot takes half-tile 2t - 1 + RING and the partials may be
         * overwritten. */
        fp_cp_async_wait<RING - 2>();
        __syncthreads();
        issue_half(2 * t - 1 + RING);
        if (kv_begin + (t + 1) * BC > mask_from)
            tile(t, std::true_type{});
        else
            tile(t, std::false_type{});
    }
    fp_cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = l[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = q0 + 16 * mt + fp_tf32_acc_row(lane, 2 * i);
            if (row >= a.seq_q)
                continue;
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            const int64_t part_row =
                sp.part_o ? (int64_t)blockIdx.z * sp.rows + (int64_t)bh * a.seq_q + row : 0;
            float *go = sp.part_o ? sp.part_o + part_row * a.d
                                  : a.o + b * a.o_b + h * a.o_h + (int64_t)row * a.o_s;
            const bool vec = sp.part_o ? a.d % 4 == 0 : a.o_vec4 != 0;
#pragma unroll
            for (int wl = 0; wl < UW; ++wl)
                fp_tf32x3_store_group<DT>(go, o[mt], wl, i,
                                          fp_tf32_o_col(lane, 4 * (warp * UW + wl), 2 * i), inv_l,
                                          vec, a.d);
            if (warp == 0 && (lane & 3) == 0) {
                if (sp.part_o)
                    sp.part_ml[part_row] = make_float2(m[mt][i], row_l);
                else if (a.lse)
                    a.lse[(int64_t)bh * a.seq_q + row] =
                        row_l == 0.0f ? -INFINITY
                                      : (m[mt][i] + log2f(row_l)) * 0.693147180559945309f;
            }
        }
#endif
}

#endif /* FP_TF32X3_WIDE_FORWARD_KERNEL_CUH */
