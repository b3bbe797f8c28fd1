/*
 * f32 forward on sm_90a with the 3xTF32 split (variant hopper_wgmma_tf32x3): the warpgroup
 * layout, masks and softmax of forward_kernel.cuh, with every product on .tf32 wgmma as three
 * (small*big, big*small, big*big, small terms first into the same f32 accumulators; the
 * small*small term, below 2^-20 of the product, is dropped as in kernels/tf32x3/). S starts
 * fresh each tile; a tile's P V too, added to O in f32 registers (see o_tile below).
 *
 * One block = 128 query rows of one (batch, query head), 3 warpgroups (fp_hopper_block<2>):
 *   - warpgroup 0, the producer: all 128 threads load each K and V tile of BC keys from global
 *     memory, split it (tf32x3_split.cuh) into the big and small tiles of a ring stage, fence
 *     the writes for the async proxy and arrive on the stage's "full" barrier. K and V have
 *     rings of their own (K_STAGES, V_STAGES deep), so that a K stage refills as soon as both
 *     consumers' S products have read it, while they still work on that tile's P V;
 *   - warpgroups 1 and 2, the consumers: split their 64 query rows once into Q tiles of their
 *     own, then per key tile: S = Q K^T as three ss products, the online softmax on the S
 *     accumulators (forward_kernel.cuh), P split in registers into big and small A operands,
 *     O += P V as three rs products (V read as V^T), releasing each stage once its products have
 *     landed.
 *
 * Every operand wgmma reads lies K-major (tf32 allows nothing else), V as V^T with its keys in
 * the order of tf32_layout.h, so that P's A registers come from the S accumulators of the same
 * thread. A consumer's two warpgroups overlap each other's softmax with their GEMMs only as the
 * warp schedulers interleave them; the explicit overlap of forward_kernel.cuh (S of tile t with
 * P V of tile t - 1, ping-pong between warpgroups) is not built here.
 *
 * Masks: the block visits only the key tiles some row sees; edge tiles get the per-score test.
 * Rows past Nq and keys past Nkv are zeros from the split pass (keys masked, rows not stored).
 * Sinks enter the final division; LSE is written as forward_kernel.cuh writes it.
 */
#ifndef FP_HOPPER_TF32X3_FORWARD_KERNEL_CUH
#define FP_HOPPER_TF32X3_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include "forward_kernel.cuh"
#include "tf32_layout.h"
#include "tf32x3_split.cuh"
#include "wgmma_tf32.cuh"

#define FP_HOPPER_TF32X3_PRODUCER_REGS 128
#define FP_HOPPER_TF32X3_CONSUMER_REGS 184 /* 128 * 128 + 184 * 256 <= 168 * 384 */

/* What the kernel takes, by value: the tensors, their strides, the sequences and modifiers. */
struct fp_hopper_tf32x3_params {
    const float *q, *k, *v;
    float *o;
    float *lse; /* NULL: not wanted */
    flashport_strides qs, ks, vs, os;
    fp_seq_layout seq;  /* dense, packed (varlen) or paged */
    fp_score_mods mods; /* causal, windows, sinks (no softcap, ALiBi or bias) */
    int group;          /* query heads per kv head */
};

/* Per head dim: the key tile and the depths of the two rings. A stage of a ring holds a big and
 * a small tile of BC x D f32 (8 BC D bytes); the consumers' split Q holds 2 x 128 x D f32
 * (1 KB per head-dim column), which is what decides the tile:
 *   d = 64:  Q 64 KB, BC = 64: a K or V stage 32 KB, 2 + 2 stages: 192 KB;
 *   d = 128: Q 128 KB, BC = 32: a K or V stage 32 KB, 2 K + 1 V stages: 224 KB (BC = 64 would
 *     leave room for one 64 KB stage of K alone).
 * Both within the 227 KB a block may use. d = 256 would need 256 KB for the split Q alone. */
template <int D> struct fp_hopper_tf32x3_tile;
template <> struct fp_hopper_tf32x3_tile<64> {
    static constexpr int BC = 64, K_STAGES = 2, V_STAGES = 2;
};
template <> struct fp_hopper_tf32x3_tile<128> {
    static constexpr int BC = 32, K_STAGES = 2, V_STAGES = 1;
};

/* Shared-memory plan: the split Q of both consumers, the K and V rings, their barriers, and the
 * slack that lets the kernel align the tiles to 1024 bytes itself. */
template <int D> struct fp_hopper_tf32x3_smem {
    using Tile = fp_hopper_tf32x3_tile<D>;
    static constexpr int BC = Tile::BC, K_STAGES = Tile::K_STAGES, V_STAGES = Tile::V_STAGES;
    static constexpr uint32_t Q_WG_BYTES = 64 * D * 4; /* one consumer's 64 rows, one half */
    static constexpr uint32_t TILE_BYTES = BC * D * 4; /* one half of a K or V^T stage */
    static constexpr uint32_t K_OFF = 4 * Q_WG_BYTES;
    static constexpr uint32_t V_OFF = K_OFF + K_STAGES * 2 * TILE_BYTES;
    static constexpr uint32_t BAR_OFF = V_OFF + V_STAGES * 2 * TILE_BYTES;
    /* k_full, k_empty per K stage, then v_full, v_empty per V stage */
    static constexpr uint32_t BARS = 2 * (K_STAGES + V_STAGES);
    static constexpr size_t BYTES = (size_t)BAR_OFF + 8 * BARS + FP_HOPPER_ATOM_BYTES;
    static_assert(Q_WG_BYTES % FP_HOPPER_ATOM_BYTES == 0 && TILE_BYTES % FP_HOPPER_ATOM_BYTES == 0,
                  "every tile starts on a swizzle atom");
    static_assert(BYTES <= 227 * 1024, "within a block's shared memory");
};

/* One product of the 3xTF32 split, d (+)= A B over K = `steps` k8-steps: term 0 small*big, 1
 * big*small, 2 big*big (A's half first). The ss form, from the split tiles' descriptors: a_big,
 * a_small of `a_rows` rows and b_big, b_small of `b_rows` rows. */
template <int N, int STEPS>
static __device__ __forceinline__ void
fp_hopper_tf32x3_ss(float (&d)[N / 2], int term, uint64_t a_big, uint64_t a_small, int a_rows,
                    uint64_t b_big, uint64_t b_small, int b_rows) {
    const uint64_t a = term == 0 ? a_small : a_big, b = term == 1 ? b_small : b_big;
#pragma unroll
    for (int kk = 0; kk < STEPS; ++kk)
        fp_wgmma_tf32<N>::ss(d, fp_hopper_desc_step(a, fp_hopper_k_major_step(a_rows, kk)),
                             fp_hopper_desc_step(b, fp_hopper_k_major_step(b_rows, kk)),
                             term > 0 || kk > 0);
}

template <int D>
__global__ void __launch_bounds__(fp_hopper_block<2>::THREADS, 1)
    fp_hopper_tf32x3_forward_kernel(const fp_hopper_tf32x3_params a) {
    /* As forward_kernel.cuh: wgmma and setmaxnreg exist only in sm_90a code. */
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#elif defined(__CUDA_ARCH__)
    using Smem = fp_hopper_tf32x3_smem<D>;
    constexpr int BR = fp_hopper_block<2>::BR, BC = Smem::BC;
    constexpr int K_STAGES = Smem::K_STAGES, V_STAGES = Smem::V_STAGES;

    extern __shared__ unsigned char fp_hopper_tf32x3_smem_raw[];
    const uint32_t raw = fp_smem_addr(fp_hopper_tf32x3_smem_raw);
    const uint32_t base = (raw + FP_HOPPER_ATOM_BYTES - 1) & ~(uint32_t)(FP_HOPPER_ATOM_BYTES - 1);
    /* Stage st of a ring: its big tile, then its small one. */
    auto k_tile = [&](int st, int half) {
        return base + Smem::K_OFF + (2 * st + half) * Smem::TILE_BYTES;
    };
    auto v_tile = [&](int st, int half) {
        return base + Smem::V_OFF + (2 * st + half) * Smem::TILE_BYTES;
    };
    const uint32_t bars = base + Smem::BAR_OFF;
    auto k_full = [&](int st) { return bars + 8u * st; };
    auto k_empty = [&](int st) { return bars + 8u * (K_STAGES + st); };
    auto v_full = [&](int st) { return bars + 8u * (2 * K_STAGES + st); };
    auto v_empty = [&](int st) { return bars + 8u * (2 * K_STAGES + V_STAGES + st); };

    const int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int st = 0; st < K_STAGES; ++st) {
            fp_mbarrier_init(k_full(st), 128);
            fp_mbarrier_init(k_empty(st), fp_hopper_block<2>::CONSUMER_THREADS);
        }
        for (int st = 0; st < V_STAGES; ++st) {
            fp_mbarrier_init(v_full(st), 128);
            fp_mbarrier_init(v_empty(st), fp_hopper_block<2>::CONSUMER_THREADS);
        }
        fp_mbarrier_init_fence();
    }
    __syncthreads();

    /* The variant takes no softcap, ALiBi or bias: folding them away leaves fp_hopper_scores the
     * scale and the mask. */
    fp_score_mods mods = a.mods;
    mods.softcap = 0.0f;
    mods.alibi = FLASHPORT_ALIBI_NONE;
    mods.bias = NULL;
    const fp_grid_block g = {mods.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x,
                             (int)blockIdx.y};
    const fp_seq s = fp_sequence(a.seq, g.bh / a.seq.heads_q);
    const int h = g.bh % a.seq.heads_q, hk = h / a.group;
    const int q0 = g.m * BR;
    if (q0 >= s.nq) return;
    const fp_span_keys span = fp_visible_span(mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, s.nkv);
    const int k_begin = span.lo;
    const int n_tiles = span.hi > k_begin ? (span.hi - k_begin + BC - 1) / BC : 0;

    if (warpgroup == 0) {
        fp_setmaxnreg_dec<FP_HOPPER_TF32X3_PRODUCER_REGS>();
        const int thread = threadIdx.x;
        for (int t = 0; t < n_tiles; ++t) {
            const int key0 = k_begin + t * BC, valid = s.nkv - key0;
            auto k_row = [&](int j) {
                return fp_kv_offset(a.ks, fp_kv_locate(a.seq, s, key0 + j), hk);
            };
            auto v_row = [&](int j) {
                return fp_kv_offset(a.vs, fp_kv_locate(a.seq, s, key0 + j), hk);
            };
            const int ks = t % K_STAGES, vs = t % V_STAGES;
            /* The stage last held tile t - STAGES: wait until both consumers let it go. */
            if (t >= K_STAGES) fp_mbarrier_wait(k_empty(ks), ((t / K_STAGES) - 1) & 1);
            fp_hopper_split_rows<D, BC, 128>(k_tile(ks, 0), k_tile(ks, 1), a.k, valid, k_row,
                                             thread);
            fp_fence_proxy_async_shared();
            fp_mbarrier_arrive(k_full(ks));
            if (t >= V_STAGES) fp_mbarrier_wait(v_empty(vs), ((t / V_STAGES) - 1) & 1);
            fp_hopper_split_vt<D, BC, 128>(v_tile(vs, 0), v_tile(vs, 1), a.v, valid, v_row, thread);
            fp_fence_proxy_async_shared();
            fp_mbarrier_arrive(v_full(vs));
        }
        return;
    }

    fp_setmaxnreg_inc<FP_HOPPER_TF32X3_CONSUMER_REGS>();
    const int wg = warpgroup - 1;
    const int tid = threadIdx.x - 128 * warpgroup;
    const int row0 = q0 + 64 * wg;
    const fp_key_band band = fp_visible_band(mods, s.nq, s.nkv);

    /* This warpgroup's 64 query rows, split once; the named barrier (1 + wg, this warpgroup
     * alone) orders every thread's writes before the first wgmma reads them. */
    const uint32_t q_big = base + 2 * wg * Smem::Q_WG_BYTES, q_small = q_big + Smem::Q_WG_BYTES;
    fp_hopper_split_rows<D, 64, 128>(
        q_big, q_small, a.q, s.nq - row0, [&](int r) { return fp_q_offset(a.qs, s, h, row0 + r); },
        tid);
    fp_fence_proxy_async_shared();
    fp_named_barrier_sync(1 + wg, 128);

    fp_hopper_rows<D> r;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) r.o[i] = 0.0f;
    r.m[0] = r.m[1] = -INFINITY;
    r.l[0] = r.l[1] = 0.0f;

    const uint64_t qb_desc = fp_hopper_desc_k_major(q_big),
                   qs_desc = fp_hopper_desc_k_major(q_small);
    float sacc[BC / 2];
    uint32_t p_big[BC / 8][4], p_small[BC / 8][4];
    /* A tile's P V, summed apart and added to O in f32: the tensor cores' f32 accumulation is
     * not rounded like an f32 add, and with every tile's products accumulated into O inside
     * wgmma the error of O grew with the keys (relative L2 5.8e-5 on long_keys, H100, as
     * tensor_core_tf32x3 had met on mma.sync; tf32x3/warp_steps.cuh). */
    float o_tile[D / 2];
    for (int t = 0; t < n_tiles; ++t) {
        const int kb = k_begin + t * BC;
        const int ks = t % K_STAGES, vs = t % V_STAGES;
        /* S = Q K^T: three products, one commit group each. */
        fp_mbarrier_wait(k_full(ks), (t / K_STAGES) & 1);
        fp_wgmma_fence_operand(sacc);
        fp_wgmma_fence();
        const uint64_t kb_desc = fp_hopper_desc_k_major(k_tile(ks, 0));
        const uint64_t ks_desc = fp_hopper_desc_k_major(k_tile(ks, 1));
#pragma unroll
        for (int term = 0; term < 3; ++term) {
            fp_hopper_tf32x3_ss<BC, D / 8>(sacc, term, qb_desc, qs_desc, 64, kb_desc, ks_desc, BC);
            fp_wgmma_commit();
        }
        fp_wgmma_wait<0>();
        fp_wgmma_fence_operand(sacc);
        fp_mbarrier_arrive(k_empty(ks));

        /* Softmax; the scores leave as P in sacc. */
        float alpha[2];
        const bool edge = kb < span.full_lo || kb + BC > span.full_hi;
        const float c = fp_hopper_scores<FP_SOFTCAP_EXACT, BC>(sacc, mods, s.b, h, s.nq, s.nkv, tid,
                                                               row0, kb, edge, false, band);
        fp_hopper_softmax<D, BC, 0>(alpha, sacc, r, c);
#pragma unroll
        for (int kk = 0; kk < BC / 8; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const fp_tf32_pair p = fp_tf32_split(sacc[fp_hopper_tf32_p_source(kk, j)]);
                p_big[kk][j] = p.big;
                p_small[kk][j] = p.small;
            }

        /* O += P V: three products, one commit group each. */
        fp_mbarrier_wait(v_full(vs), (t / V_STAGES) & 1);
        fp_wgmma_fence_operand(o_tile);
        fp_wgmma_fence();
        const uint64_t vb_desc = fp_hopper_desc_k_major(v_tile(vs, 0));
        const uint64_t vs_desc = fp_hopper_desc_k_major(v_tile(vs, 1));
#pragma unroll
        for (int term = 0; term < 3; ++term) {
            const uint64_t v_desc = term == 1 ? vs_desc : vb_desc;
#pragma unroll
            for (int kk = 0; kk < BC / 8; ++kk)
                fp_wgmma_tf32<D>::rs(o_tile, term == 0 ? p_small[kk] : p_big[kk],
                                     fp_hopper_desc_step(v_desc, fp_hopper_k_major_step(D, kk)),
                                     term > 0 || kk > 0);
            fp_wgmma_commit();
        }
        fp_wgmma_wait<0>();
        fp_wgmma_fence_operand(o_tile);
#pragma unroll
        for (int i = 0; i < D / 2; ++i) r.o[i] = fmaf(r.o[i], alpha[(i / 2) % 2], o_tile[i]);
        fp_hopper_fence_words(p_big); /* the P V read them until here */
        fp_hopper_fence_words(p_small);
        fp_mbarrier_arrive(v_empty(vs));
    }
    if (row0 >= s.nq) return;

#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float row_l = r.l[hh];
        row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
        row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
        const int row = row0 + fp_hopper_acc_row(tid, 2 * hh);
        if (row >= s.nq) continue;
        /* The sink joins the denominator as a key with a zero value. */
        float row_m = r.m[hh];
        const float keep = mods.sinks ? fp_sink_fold(mods, h, &row_m, &row_l) : 1.0f;
        /* l == 0 only when no key was visible; a NaN l must stay NaN. */
        const float inv_l = row_l == 0.0f ? 0.0f : keep / row_l;
        float *go = a.o + fp_q_offset(a.os, s, h, row);
#pragma unroll
        for (int i = 2 * hh; i < D / 2; i += 4) {
            const int col = fp_hopper_acc_col(tid, i);
            go[col] = r.o[i] * inv_l;
            go[col + 1] = r.o[i + 1] * inv_l;
        }
        if (a.lse && tid % 4 == 0)
            a.lse[fp_lse_index(a.seq, s, h, row)] =
                row_l == 0.0f ? -INFINITY : (row_m + log2f(row_l)) * 0.693147180559945309f;
    }
#endif
}

#endif /* FP_HOPPER_TF32X3_FORWARD_KERNEL_CUH */
