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
 * Every API v2 layout and mask goes through the shared headers, as in the f16/bf16 forward
 * (mma/flash_forward_kernel.cuh): Q, O and LSE rows and dense, packed and paged K/V rows through
 * common/kv_addressing.cuh and common/tile_rows.cuh, the keys a row sees and the modifiers
 * through common/score_mods.cuh and common/score_tile.cuh. A block visits only the key tiles some
 * row of it sees, so a sliding window costs its width; sinks enter the final division.
 *
 * Per tile and warp: S = Q K^T, scores scaled by scale * log2(e), masked in the tile instance
 * compiled for tiles that cross the causal diagonal, a window's edges or the end of the keys
 * (the full instance has no per-element index arithmetic), or taken through the modifiers
 * (softcap, ALiBi, bias) on every tile when the problem has any, online softmax with exp2 that
 * rescales O only when a row's max moved, O += P V with P taken straight from the S accumulators
 * (fragment_layout.h says why that needs no shuffle). Operands are split in registers right after
 * their 16-byte shared loads. O stays un-normalised until the end, where it is divided by the row
 * sum once. The steps themselves are shared with the wide-head kernel (warp_steps.cuh).
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

#include "../common/kv_addressing.cuh"
#include "../common/online_softmax_rows.cuh"
#include "../common/ptx.cuh"
#include "../common/score_tile.cuh"
#include "../common/tile_rows.cuh"
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
 * choice so that only one load path's addresses stay live across the key loop.
 * GENERAL: the problem has API v2 features (FP_GPU_FEATURES_NO_FP8). Without them the lengths,
 * mask and modifiers are known from the parameters alone (dense, causal or not), the compiler
 * folds every feature away and the dense kernel keeps its registers; with them the same code
 * runs on values held in registers. Only ASYNC kernels are GENERAL (the launcher checks). */
template <typename Cfg, bool ASYNC, bool GENERAL>
__global__ void __launch_bounds__(Cfg::WARPS * 32, Cfg::MIN_BLOCKS)
    fp_tf32x3_forward_kernel(const fp_tf32x3_params a) {
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
    static_assert(THREADS >= BC, "a paged tile's rows are resolved one a thread");

    extern __shared__ __align__(128) unsigned char fp_tf32x3_smem[];
    float *const sQ = reinterpret_cast<float *>(fp_tf32x3_smem);
    float *const sKV = sQ + BR * D;

    fp_score_mods mods = a.mods;
    fp_seq_layout seq = a.seq;
    if (!GENERAL) {
        mods.window_left = mods.window_right = -1;
        mods.softcap = 0.0f;
        mods.alibi = FLASHPORT_ALIBI_NONE;
        mods.bias = NULL;
        mods.sinks = NULL;
        seq.q_varlen = 0;
        seq.kv = FLASHPORT_KV_DENSE;
    }
    const flashport_strides qs = {a.q_b, a.q_h, a.q_s}, ks = {a.k_b, a.k_h, a.k_s},
                            vs = {a.v_b, a.v_h, a.v_s}, os = {a.o_b, a.o_h, a.o_s};
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const fp_grid_block gb = fp_grid_block_of(seq, a.causal);
    const int m_block = gb.m, bh = gb.bh;
    const int b = bh / a.heads_q, h = bh % a.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(seq, b);
    const int q0 = m_block * BR;
    /* The grid covers the longest sequence; blocks past a shorter one's end have no rows. */
    if (q0 >= s.nq) return;
    const int warp_row0 = q0 + 16 * MT * warp; /* first query row of the warp's slices */

    /* The key tiles some row of the block sees. */
    const int kv_end = s.nkv;
    const fp_span_keys span =
        fp_visible_span(mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, kv_end);
    const int k_begin = span.lo;
    const int n_tiles = span.hi > k_begin ? (span.hi - k_begin + BC - 1) / BC : 0;

    const float *gQ = a.q + fp_q_offset(qs, s, h, q0);
    fp_tf32x3_load_tile<ASYNC, BR, D, THREADS>(sQ, gQ, a.q_s, s.nq - q0, a.d);
    const bool paged = seq.kv == FLASHPORT_KV_PAGED;
    /* Dense and packed K/V rows are a stride apart from key 0's; paged rows are looked up from
     * the cache's origin (an empty sequence's first table entry is not read). */
    const fp_kv_rows kv0 = paged ? fp_kv_rows{0, 0} : fp_kv_row_offsets(seq, s, ks, vs, hk, 0);
    const float *const gK = a.k + kv0.k, *const gV = a.v + kv0.v;
    /* A paged tile's row addresses, two slots, as in mma/flash_forward_kernel.cuh: tile u's in
     * slot u % 2, filled one barrier before its load. */
    __shared__ __align__(16) uint64_t page_rows[GENERAL ? 2 * 2 * BC : 2];
    auto page_table = [&](int t) {
        return fp_paged_rows<float, BC>{gK, gV, page_rows + (t & 1) * 2 * BC};
    };
    auto fill_page_rows = [&](int t) {
        const int kb = k_begin + t * BC;
        if (t < n_tiles) page_table(t).fill(seq, s, ks, vs, hk, kb, kv_end - kb);
    };
    auto load_tile = [&](int t) {
        float *sK = sKV + (t % STAGES) * STAGE_FLOATS;
        const int kb = k_begin + t * BC;
        if (paged) {
            const fp_paged_rows<float, BC> rows = page_table(t);
            fp_tf32x3_load_rows<ASYNC, BC, D, THREADS, 2>(sK, rows, kv_end - kb, a.d);
        } else {
            fp_tf32x3_load_tile<ASYNC, BC, D, THREADS>(sK, gK + (int64_t)kb * a.k_s, a.k_s,
                                                       kv_end - kb, a.d);
            fp_tf32x3_load_tile<ASYNC, BC, D, THREADS>(sK + BC * D, gV + (int64_t)kb * a.v_s, a.v_s,
                                                       kv_end - kb, a.d);
        }
    };
    /* Group g holds tile g (group 0 also Q); empty groups keep the count uniform. */
    if (paged) fill_page_rows(0);
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (paged) __syncthreads(); /* tile t's row addresses are published */
        if (t < n_tiles) load_tile(t);
        fp_cp_async_commit();
        if (paged) fill_page_rows(t + 1);
    }

    const bool warp_active = warp_row0 < s.nq;
    /* Q has landed (group 0): each warp puts its own rows in fragment order. */
    fp_cp_async_wait<STAGES - 2>();
    __syncthreads();
    fp_tf32x3_q_to_fragment_order<MT, GROUPS, D>(sQ + 16 * MT * warp * D, lane, 0);
    const float *const sQ_frag = sQ + 16 * MT * warp * D + fp_tf32_q_frag_lane(lane, D);

    /* Per slice, rows g and g + 8: running max (base-2, scaled) and this lane's share of the
     * row sum. */
    float o[MT][D_TILES][4], m[MT][2], l[MT][2];
    fp_mma_softmax_init(m, l, o);

    /* The warp computes the tiles its rows see, masking those not every row sees whole. */
    const fp_span_keys wk =
        fp_visible_span(mods, warp_row0, min(warp_row0 + 16 * MT, s.nq) - 1, s.nq, s.nkv, kv_end);
    /* Softcap, ALiBi and bias touch every score: every tile takes the modified instance. */
    const bool modified = fp_score_mods_any(mods);
    const fp_tile_keys keys = {fp_visible_band(mods, s.nq, s.nkv), kv_end, b, h, s.nq, s.nkv};

    /* One key tile, K at sK and V right after it, of a kind of common/score_tile.cuh, so that
     * the full tiles carry no per-element index arithmetic; always inlined, so the
     * accumulators stay in registers. */
    auto tile = [&](const float *sK, int kb, bool edge, auto kind) __attribute__((always_inline)) {
        constexpr fp_tile_kind KIND = decltype(kind)::value;
        const float *const sV = sK + BC * D;
        float s[MT][KEY_TILES][4];
        fp_mma_zero(s);
#pragma unroll
        for (int u = 0; u < GROUPS; ++u)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                fp_tf32x3_qk_chunk<MT, KEY_TILES, D>(s, sQ_frag, sK, lane, u, half);
        /* Scores to base 2 (scale * log2(e), either sign), so the step's own scale is 1, or
         * for a softcap the factor fp_tile_modify leaves to it. */
        float softmax_scale = 1.0f;
        if (KIND == FP_TILE_MODIFIED) {
            softmax_scale = fp_tile_modify<FP_SOFTCAP_EXACT, false>(s, warp_row0, lane, kb, edge,
                                                                    false, mods, keys);
        } else {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                    for (int r = 0; r < 4; ++r) s[mt][nt][r] *= a.scale_log2;
            if (KIND == FP_TILE_MASKED)
            /* fp_tile_mask, in place (common/score_tile.cuh says why). */
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
                        for (int r = 0; r < 4; ++r)
                            if (!fp_tile_seen(keys, warp_row0 + 16 * mt + fp_tf32_acc_row(lane, r),
                                              kb + 8 * nt + fp_tf32_s_key(lane, r)))
                                s[mt][nt][r] = -INFINITY;
        }
        fp_mma_softmax_step<MT, KEY_TILES, D_TILES>(s, m, l, o, softmax_scale);

        /* O += P V, one 32-column group of d at a time; masked tiles whose V is not all finite
         * exactly, so that a NaN or infinity reaches only the rows that see it. */
        if (KIND != FP_TILE_FULL && edge && fp_tf32x3_tile_nonfinite<BC, D>(sV, lane)) {
            auto seen = [&](int row, int key) {
                return fp_tile_seen(keys, warp_row0 + row, kb + key);
            };
            fp_tf32x3_pv_exact<MT, KEY_TILES, D_TILES, D>(o, s, sV, lane, seen);
        } else {
#pragma unroll
            for (int w = 0; w < GROUPS; ++w)
                fp_tf32x3_pv_group<MT, KEY_TILES, D_TILES, D>(o, w, s, sV, lane, w);
        }
    };

    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (t + STAGES - 1 < n_tiles) load_tile(t + STAGES - 1);
        fp_cp_async_commit();
        const int kb = k_begin + t * BC;
        /* A tile no row of this warp sees would leave its state as it is (p = 0, alpha = 1):
         * skip it. */
        if (warp_active && kb < wk.hi && kb + BC > wk.lo) {
            const float *const sK = sKV + (t % STAGES) * STAGE_FLOATS;
            const bool edge = kb < wk.full_lo || kb + BC > wk.full_hi;
            if (modified)
                tile(sK, kb, edge, std::integral_constant<fp_tile_kind, FP_TILE_MODIFIED>{});
            else if (edge)
                tile(sK, kb, true, std::integral_constant<fp_tile_kind, FP_TILE_MASKED>{});
            else
                tile(sK, kb, false, std::integral_constant<fp_tile_kind, FP_TILE_FULL>{});
        }
        /* After the math, so that the block-table reads' latency does not hold it up. */
        if (paged) fill_page_rows(t + STAGES);
    }

    fp_cp_async_wait<0>();
    if (!warp_active) return;

        /* The sink joins the denominator as a key with a zero value. */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = l[mt][i], row_m = m[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = warp_row0 + 16 * mt + fp_tf32_acc_row(lane, 2 * i);
            if (row >= s.nq) continue;
            const float keep = mods.sinks ? fp_sink_fold(mods, h, &row_m, &row_l) : 1.0f;
            /* l == 0 only when no key was visible; a NaN l must stay NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : keep / row_l;
            float *go = a.o + fp_q_offset(os, s, h, row);
#pragma unroll
            for (int w = 0; w < GROUPS; ++w)
                fp_tf32x3_store_group<D_TILES>(go, o[mt], w, i, fp_tf32_o_col(lane, 4 * w, 2 * i),
                                               inv_l, a.o_vec4 != 0, a.d);
            if (a.lse && (lane & 3) == 0)
                a.lse[fp_lse_index(seq, s, h, row)] =
                    row_l == 0.0f ? -INFINITY : (row_m + log2f(row_l)) * 0.693147180559945309f;
        }
#endif
}

#endif /* FP_TF32X3_FLASH_FORWARD_KERNEL_CUH */
