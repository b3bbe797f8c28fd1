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
 * Every API v2 layout and mask goes through the shared headers: Q, O and the LSE rows, and the
 * K/V rows of dense, packed (varlen) and paged caches through common/kv_addressing.cuh, the keys a
 * row sees and the score modifiers through common/score_mods.cuh. A paged tile's rows are resolved
 * once each into shared memory (common/tile_rows.cuh) a tile ahead of its load. The grid covers the
 * longest sequence and blocks past a sequence's end exit. A block visits only the key tiles some
 * row of it sees, so a sliding window costs its width, not Nkv, and each warp skips the tiles none
 * of its rows sees.
 *
 * The per-tile math of each warp lives in warp_rows.cuh. Tiles that every row of the warp sees
 * whole run its full instance, with no per-element work; tiles at the end of the keys or a
 * split, across the causal diagonal or at a window's edges run the masked one; with softcap,
 * ALiBi or bias every tile runs the modified one. Sinks start the rows' softmax state. A
 * negative scale flips the signs of Q in shared memory (exact in any 16-bit float), so that the
 * warps always see a positive one.
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

#include "../common/attention_args.cuh"
#include "../common/kv_addressing.cuh"
#include "../common/ptx.cuh"
#include "../common/score_mods.cuh"
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
    float *lse;    /* final pass only; NULL: not wanted */
    float *part_o; /* split pass only (NULL in the final pass) */
    float *part_ml;
    flashport_strides qs, ks, vs, os;
    fp_seq_layout seq;  /* dense, packed or paged Q and K/V (common/kv_addressing.cuh) */
    fp_score_mods mods; /* masks and modifiers (common/score_mods.cuh), with scale = |scale| */
    int64_t rows;       /* rows of one split's partials, numbered as the LSE */
    int group, d;
    int keys_per_split; /* keys of one blockIdx.z; >= seq_kv in the final pass */
    float scale_log2;   /* |scale| * log2(e) */
    int negate_q;       /* scale < 0: Q's signs are flipped in shared memory (exact) instead */
    int o_pairs;        /* O allows 4-byte stores of two adjacent columns */
};

/*
 * One compile-time config per entry of FP_TC_CONFIG_LIST (tile_configs.h, which says what each
 * field means and why): fp_tc_config<D, INDEX>.
 */
template <int D, int INDEX> struct fp_tc_config;
#define FP_TC_DEFINE_CONFIG(d, index, warps, m_tiles, bc, stages, q_in_regs, min_blocks)           \
    template <> struct fp_tc_config<d, index> {                                                    \
        static constexpr int D = d, WARPS = warps, M_TILES = m_tiles, BC = bc, STAGES = stages,    \
                             MIN_BLOCKS = min_blocks;                                              \
        static constexpr bool Q_IN_REGS = q_in_regs != 0;                                          \
        static constexpr size_t SMEM_BYTES =                                                       \
            (size_t)2 * D * (FP_TC_BLOCK_ROWS + (size_t)STAGES * 2 * BC);                          \
    };
FP_TC_CONFIG_LIST(FP_TC_DEFINE_CONFIG)
#undef FP_TC_DEFINE_CONFIG

/* ASYNC: Q, K and V allow 16-byte cp.async (tile_loader.cuh). A compile-time choice, because
 * keeping both load paths in one loop keeps both paths' addresses live across it, and those
 * registers are what the larger tiles lack.
 * FEATURES (fp_attn_instance, common/attention_args.cuh): FP_ATTN_DENSE folds every API v2
 * feature away, since the sequence lengths and the mask are known from the parameters alone
 * (dense, causal or not), and the kernel keeps the registers its tiles are sized for; sinks
 * ride in every instance, read once where the rows' softmax state starts.
 * FP_ATTN_PAGED is the dense instance reading K/V rows through a block table,
 * FP_ATTN_SOFTCAP_ALIBI the dense instance with softcap and ALiBi (every tile modified).
 * FP_ATTN_MASKED keeps the layouts and windows in registers and folds the score modifiers away;
 * FP_ATTN_MODIFIED keeps everything. Each step up costs the tile loop registers, which ptxas
 * takes back by spilling the accumulators' neighbours. Only ASYNC kernels take features (the
 * launcher checks the alignment). */
template <typename T, typename Cfg, bool ASYNC, int FEATURES>
__global__ void __launch_bounds__(Cfg::WARPS * 32, Cfg::MIN_BLOCKS)
    fp_tc_forward_kernel(const fp_tc_params a) {
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
    static_assert(THREADS >= BC, "a paged tile's rows are resolved one a thread");
    using QLoader = fp_tile_loader<T, BR, D, THREADS>;
    using KVLoader = fp_tile_loader<T, BC, D, THREADS>;

    extern __shared__ __align__(128) unsigned char fp_tc_smem[];
    T *const sQ = reinterpret_cast<T *>(fp_tc_smem);
    T *const sKV = sQ + BR * D;

    constexpr bool GENERAL = FEATURES == FP_ATTN_MASKED || FEATURES == FP_ATTN_MODIFIED;
    fp_score_mods mods = a.mods;
    fp_seq_layout seq = a.seq;
    if (FEATURES != FP_ATTN_MODIFIED) {
        if (FEATURES != FP_ATTN_SOFTCAP_ALIBI) {
            mods.softcap = 0.0f;
            mods.alibi = FLASHPORT_ALIBI_NONE;
        }
        mods.bias = NULL;
    }
    if (!GENERAL) {
        mods.window_left = mods.window_right = -1;
        seq.q_varlen = 0;
        seq.kv = FEATURES == FP_ATTN_PAGED ? FLASHPORT_KV_PAGED : FLASHPORT_KV_DENSE;
    }
    const int warp = threadIdx.x >> 5;
    const fp_grid_block gb = fp_grid_block_of(seq, mods.causal);
    const int m_block = gb.m, bh = gb.bh;
    const int b = bh / seq.heads_q, h = bh % seq.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(seq, b);
    const int q0 = m_block * BR;
    /* The grid covers the longest sequence; blocks past a shorter one's end have no rows. */
    if (q0 >= s.nq) return;

    /* The key tiles some row of the block sees, within the split. */
    const int split_lo = (int)blockIdx.z * a.keys_per_split;
    const int kv_end = min(s.nkv, split_lo + a.keys_per_split);
    const fp_span_keys span =
        fp_visible_span(mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, kv_end);
    const int k_begin = max(split_lo, span.lo);
    const int n_tiles = span.hi > k_begin ? (span.hi - k_begin + BC - 1) / BC : 0;

    const T *gQ = static_cast<const T *>(a.q) + fp_q_offset(a.qs, s, h, q0);
    QLoader::template load<ASYNC, 1>(sQ, fp_strided_rows<T, 1>{{gQ}, {a.qs.seq}}, s.nq - q0, a.d);
    const bool paged = seq.kv == FLASHPORT_KV_PAGED;
    /* Dense and packed K/V rows are a stride apart from key 0's; paged rows are looked up from
     * the cache's origin (an empty sequence's first table entry is not read). */
    const fp_kv_rows kv0 = paged ? fp_kv_rows{0, 0} : fp_kv_row_offsets(seq, s, a.ks, a.vs, hk, 0);
    const T *const gK = static_cast<const T *>(a.k) + kv0.k;
    const T *const gV = static_cast<const T *>(a.v) + kv0.v;
    /* A paged tile's row addresses, two slots: tile u's in slot u % 2, filled one barrier before
     * its load (the prologue's barriers, then each tile's), so that the fill of tile t + STAGES
     * in iteration t overwrites the slot that tile t + STAGES - 2 was loaded from before that
     * iteration's barrier. */
    constexpr bool PAGEABLE =
        FEATURES == FP_ATTN_PAGED || FEATURES == FP_ATTN_MASKED || FEATURES == FP_ATTN_MODIFIED;
    __shared__ __align__(16) uint64_t page_rows[PAGEABLE ? 2 * 2 * BC : 2];
    auto page_table = [&](int t) {
        return fp_paged_rows<T, BC>{gK, gV, page_rows + (t & 1) * 2 * BC};
    };
    auto fill_page_rows = [&](int t) {
        const int kb = k_begin + t * BC;
        if (t < n_tiles) page_table(t).fill(seq, s, a.ks, a.vs, hk, kb, kv_end - kb);
    };
    auto load_tile = [&](int t) {
        T *sK = sKV + (t % STAGES) * STAGE_ELEMS;
        const int kb = k_begin + t * BC;
        if (paged) {
            const fp_paged_rows<T, BC> rows = page_table(t);
            KVLoader::template load<ASYNC, 2>(sK, rows, kv_end - kb, a.d);
        } else {
            const fp_strided_rows<T, 2> rows = {
                {gK + (int64_t)kb * a.ks.seq, gV + (int64_t)kb * a.vs.seq}, {a.ks.seq, a.vs.seq}};
            KVLoader::template load<ASYNC, 2>(sK, rows, kv_end - kb, a.d);
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

    const int warp_row0 = q0 + warp * 16 * MT; /* first query row of the warp's slices */
    const bool warp_active = warp_row0 < s.nq;
    /* The warp computes the tiles its rows see, masking those not every row sees whole. */
    const fp_span_keys wk_here =
        fp_visible_span(mods, warp_row0, min(warp_row0 + 16 * MT, s.nq) - 1, s.nq, s.nkv, kv_end);
    /* Softcap, ALiBi and bias touch every score: every tile takes the modified instance. */
    const bool modified = fp_score_mods_any(mods);
    const float bias_inv_scale = fp_bias_in_accumulators(mods) ? 1.0f / mods.scale : 0.0f;
    const fp_tile_keys keys_here = {fp_visible_band(mods, s.nq, s.nkv), kv_end, b, h, s.nq, s.nkv};
    /* A general kernel keeps the tile classification's bounds in shared memory, read after each
     * tile's barrier, rather than in registers across the loop: with them there ptxas spilled
     * each row's running max and sum around every tile (ptxas -v: 252 bytes of spill stores,
     * 168 without). The dense kernel's are constants or cheap to recompute. */
    __shared__ fp_tile_keys keys_smem;
    __shared__ fp_span_keys wk_smem[GENERAL ? Cfg::WARPS : 1];
    if (GENERAL) {
        if (threadIdx.x == 0) keys_smem = keys_here;
        if ((threadIdx.x & 31) == 0) wk_smem[warp] = wk_here;
    }
    const fp_tile_keys &keys = GENERAL ? keys_smem : keys_here;
    const uint32_t sQ_addr = fp_smem_addr(sQ);
    fp_tc_warp_rows<T, Cfg> w;
    w.init(warp, q0);
    /* With split keys, split 0's rows start from the sink. */
    if (mods.sinks && blockIdx.z == 0)
        fp_mma_softmax_start_at_sink(w.m, w.l, fp_sink_log2(mods, h), w.lane);

    bool q_loaded = false; /* Q fragments are read at the warp's first computed tile */
    for (int t = 0; t < n_tiles; ++t) {
        fp_cp_async_wait<STAGES - 2>();
        if (t == 0 && a.negate_q)
            QLoader::negate_own_chunks(sQ); /* this thread's Q copies have landed */
        __syncthreads();
        if (t + STAGES - 1 < n_tiles) load_tile(t + STAGES - 1);
        fp_cp_async_commit();
        const int kb = k_begin + t * BC;
        const fp_span_keys wk = GENERAL ? wk_smem[warp] : wk_here;
        /* A tile no row of this warp sees would leave its state as it is (p = 0, alpha = 1):
         * skip it. */
        if (warp_active && kb < wk.hi && kb + BC > wk.lo) {
            if (Cfg::Q_IN_REGS && !q_loaded) {
                q_loaded = true;
                w.load_q(sQ_addr);
            }
            const uint32_t sK_addr = fp_smem_addr(sKV + (t % STAGES) * STAGE_ELEMS);
            const bool edge = kb < wk.full_lo || kb + BC > wk.full_hi;
            if (modified)
                w.template tile<FP_TILE_MODIFIED>(sQ_addr, sK_addr, kb, edge, mods, keys,
                                                  a.scale_log2, bias_inv_scale);
            else if (edge)
                w.template tile<FP_TILE_MASKED>(sQ_addr, sK_addr, kb, true, mods, keys,
                                                a.scale_log2, 0.0f);
            else
                w.template tile<FP_TILE_FULL>(sQ_addr, sK_addr, kb, false, mods, keys, a.scale_log2,
                                              0.0f);
        }
        /* After the math, so that the block-table reads' latency does not hold it up. */
        if (paged) fill_page_rows(t + STAGES);
    }
    fp_cp_async_wait<0>();
    if (!warp_active) return;

    const int col0 = fp_mma_acc_col(w.lane, 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float row_l = w.l[mt][i], row_m = w.m[mt][i];
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
            row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
            const int row = warp_row0 + 16 * mt + fp_mma_acc_row(w.lane, 2 * i);
            if (row >= s.nq) continue;
            /* l == 0 only when no key (and no sink) was visible; a NaN l must stay NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            const int64_t row_index = fp_lse_index(seq, s, h, row);
            if (a.part_o) {
                const int64_t part_row = (int64_t)blockIdx.z * a.rows + row_index;
                float *po = a.part_o + part_row * a.d;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    const int col = 8 * dt + col0;
                    if (col < a.d) po[col] = w.o[mt][dt][2 * i] * inv_l;
                    if (col + 1 < a.d) po[col + 1] = w.o[mt][dt][2 * i + 1] * inv_l;
                }
                if (col0 == 0) {
                    a.part_ml[2 * part_row] = row_m;
                    a.part_ml[2 * part_row + 1] = row_l;
                }
            } else {
                T *go = static_cast<T *>(a.o) + fp_q_offset(a.os, s, h, row);
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    const int col = 8 * dt + col0;
                    const float v0 = w.o[mt][dt][2 * i] * inv_l;
                    const float v1 = w.o[mt][dt][2 * i + 1] * inv_l;
                    if (a.o_pairs && col + 1 < a.d) {
                        *reinterpret_cast<uint32_t *>(go + col) = fp_mma_ops<T>::pack(v0, v1);
                    } else {
                        if (col < a.d) go[col] = fp_mma_ops<T>::from_float(v0);
                        if (col + 1 < a.d) go[col + 1] = fp_mma_ops<T>::from_float(v1);
                    }
                }
                if (a.lse && col0 == 0)
                    a.lse[row_index] =
                        row_l == 0.0f ? -INFINITY : (row_m + log2f(row_l)) * 0.693147180559945309f;
            }
        }
#endif
}

#endif /* FP_MMA_FLASH_FORWARD_KERNEL_CUH */
