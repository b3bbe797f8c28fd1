/*
 * FlashAttention-3 style forward for f16 and bf16 on sm_90a: warp-specialised, TMA-fed,
 * wgmma-computed.
 *
 * One block = BR = 64 x CONSUMERS query rows of one (batch, query head), CONSUMERS + 1
 * warpgroups (fp_hopper_block; two consumers, or three in the d = 64 instance of long queries):
 *   - warpgroup 0, the producer: gives its registers back (setmaxnreg) and one thread (a
 *     warp for a paged cache) issues every TMA copy: the Q tile once, then K and V tiles of
 *     BC keys into a ring of STAGES stages, each stage with a "K full", a "V full" and an
 *     "empty" mbarrier; with a bias that does not vary with the query, its other three warps
 *     write each tile's bias row into the stage beside it (fp_hopper_stage_bias);
 *   - warpgroups 1 to CONSUMERS, the consumers: take the registers, own 64 query rows each and walk
 *     the block's key tiles: S = Q K^T by wgmma from shared memory, online softmax on the S
 *     accumulators, P converted in registers to wgmma's A operand, O += P V by wgmma with P from
 *     registers and V read transposed, then release the stage.
 *
 * Overlap, as FlashAttention-3 does it:
 *   - within a warpgroup, S of tile t is issued together with P V of tile t - 1, in one turn;
 *     O is rescaled for tile t only after the P V of tile t - 1 has landed. ptxas hoists a
 *     wgmma wait to the earliest point of its basic block, so a wait written after the
 *     softmax of tile t runs before it. Where the policy takes the overlap (OVERLAP_PV), the
 *     loop is rotated: the wait for the P V of tile t - 1 opens the next turn, across the
 *     loop's back edge from the softmax, and the two overlap in the compiled code;
 *   - between the consumers (ping-pong for two, round robin for three), named barriers 1 to
 *     CONSUMERS hand the right to issue GEMMs from one to the next, so that the others'
 *     softmaxes run while one warpgroup's GEMMs do. All consumers walk the same tiles (a tile
 *     one of them does not see is fully masked for it), so their turns pair up exactly; the last
 *     consumer opens with a hand-over to the first and skips its last one, which leaves every
 *     barrier balanced at exit.
 *
 * Every tile copy lands in the 128-byte swizzled panels of fragment_layout.h; only TMA writes
 * shared memory and only wgmma reads it (both in the async proxy), and every read waits on the
 * barrier that the copy completes, so no other fence is needed.
 *
 * Masks and modifiers come from common/score_mods.cuh. The keys rows see (causal, bottom-right
 * aligned, and sliding windows): the block visits only the tiles some row sees, and tiles that
 * not all of the block's rows see whole get a per-score test. Softcap, ALiBi and bias run in a
 * separate instance, every score through them; sinks enter the final division. Rows past Nq and
 * keys past Nkv arrive as zeros from TMA; the latter are masked, the former computed but never
 * stored.
 *
 * Packed batches (varlen): the maps span the packed rows as one batch, and a block starts its
 * copies at its sequence's first rows. A tile that runs past the sequence's end holds rows of the
 * next sequence (or packed rows no sequence owns): its queries are computed and never stored,
 * its keys are masked, and before the last tile's P V the consumers zero its V rows past the
 * end, so that a value outside the sequence never meets a zero weight (0 * inf is NaN).
 *
 * Paged K/V: the K and V maps see the cache as [pages][page rows][heads][d], and a tile is
 * copied in boxes of kv_box rows (a page, or a tile when pages hold whole tiles), each box from
 * the page the block table names. Tiles start on multiples of BC, so no box straddles a page;
 * boxes wholly past the sequence's end are not copied (their table entries may be unset), and
 * the last tile's V rows past the end are zeroed as for packed K/V.
 *
 * FP8 instances (T = e4m3 or e5m2, hopper_wgmma_fp8.cu) run the same pipeline on 8-bit tiles
 * with k32 wgmma (fp_hopper_input): V comes as V^T from a pre-pass, P is rounded to e4m3, and the
 * descales scale the f32 scores and O (dense K/V, no modifiers).
 *
 * Stage ordering of the ring: a consumer releases stage s for tile t only after it has waited
 * on the "full" barriers of tile t, which the producer signals only after all consumers
 * released tile t - STAGES; so no consumer's release can count towards an earlier phase of the
 * "empty" barrier.
 */
#ifndef FP_HOPPER_FORWARD_KERNEL_CUH
#define FP_HOPPER_FORWARD_KERNEL_CUH

#include <math.h>
#include <stdint.h>

#include "../common/kv_addressing.cuh"
#include "../common/ptx.cuh"
#include "../common/score_mods.cuh"
#include "fragment_layout.h"
#include "tma_mbarrier.cuh"
#include "wgmma_ops.cuh"

/* A block of CONSUMERS consumer warpgroups of 64 query rows each beside the producer. The
 * consumers take the registers the producer's 24 leave of the 64K register file (setmaxnreg
 * counts in multiples of 8): 240 each for two, 160 for three. */
template <int CONSUMERS> struct fp_hopper_block {
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "two or three consumer warpgroups");
    static constexpr int BR = 64 * CONSUMERS; /* query rows */
    static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
    static constexpr int THREADS = 128 + CONSUMER_THREADS;
    static constexpr int PRODUCER_REGS = 24;
    static constexpr int CONSUMER_REGS = (65536 / 128 - PRODUCER_REGS) / CONSUMERS / 8 * 8;
};

/* FP8 descale factors (flashport_descale): per tensor (block = 0, one factor each) or per
 * (batch, head, block of `block` positions), q_blocks and kv_blocks of them per (batch, head).
 * Per block, K's and V's factors are taken once per key tile, which the variant's support
 * check guarantees lies in one block. */
struct fp_hopper_descale {
    const float *q, *k, *v;
    int block;
    int q_blocks, kv_blocks;
};

/* What the kernel gets besides its three tensor maps, by value. */
struct fp_hopper_params {
    void *o;
    float *lse; /* NULL: not wanted */
    flashport_strides os;
    fp_seq_layout seq;         /* dense, packed (varlen) or paged */
    fp_score_mods mods;        /* causal, windows, softcap, ALiBi, bias, sinks */
    int group;                 /* query heads per kv head */
    int kv_box;                /* rows of a K/V copy: BC, or a page's rows when they divide BC */
    int o_pairs;               /* O allows 4-byte stores of two adjacent columns */
    flashport_dtype o_dtype;   /* of O: the input type, or f16, bf16 or f32 for FP8 inputs */
    fp_hopper_descale descale; /* FP8 only */
};

/* The parameters every instance takes from a launch; the FP8 variant adds its descales. */
static inline fp_hopper_params fp_hopper_params_make(const fp_gpu_launch *L, int kv_box) {
    const fp_problem *p = &L->p;
    fp_hopper_params prm;
    prm.o = L->o;
    prm.lse = L->lse;
    prm.os = p->o;
    prm.seq = fp_seq_layout_make(p, L->args);
    prm.mods = fp_score_mods_make(p, L->args);
    prm.group = (int)(p->heads_q / p->heads_kv);
    prm.kv_box = kv_box;
    prm.o_pairs = fp_dtype_size(p->out_dtype) == 2 && (uintptr_t)L->o % 4 == 0 &&
                  p->o.batch % 2 == 0 && p->o.head % 2 == 0 && p->o.seq % 2 == 0;
    prm.o_dtype = p->out_dtype;
    prm.descale = fp_hopper_descale{};
    return prm;
}

/* The score modifiers an instance computes: none (the dense instances); SCORES, those formed
 * from each dot product and its position alone (softcap, ALiBi); BIAS, those and an additive
 * bias tensor. A problem runs on an instance of its own kind where one fits it, else on one of a
 * wider kind. The bias's code (its staged rows, their barriers, the global reads that start S)
 * stays out of the SCORES instances: ptxas schedules their tile loop differently with it, and
 * softcap at d = 128 ran 6.5% slower in the instance that held the staged bias too
 * (bench/results/2026-12-07_h100_hopper-d64-modifiers-three-consumers.md). */
enum fp_hopper_mods { FP_HOPPER_MODS_NONE, FP_HOPPER_MODS_SCORES, FP_HOPPER_MODS_BIAS };

/* Per head dim: the key tiles (BC) that instances are built with, each fitting beside Q and a
 * ring of two stages or more in the 227 KB a block may use, and beside O's accumulators in a
 * consumer's 240 registers (ptxas: no spills in the dense instances).
 *   BC: problems without softcap, ALiBi or bias. At d = 64 the 128-key tile (a 192-key one
 *     ran slower on short sequences and level on long ones). At d = 128 the 128-key tile, whose
 *     ring has three stages: the widest that fits (176 keys) has room for two only, and the
 *     third stage gains more than the wider tile's smaller per-key share of the softmax,
 *     barrier and rescale work. At d = 256 the widest that fits (80 keys): a
 *     wider S product against the shared-memory reads of Q that every tile repeats;
 *   BC_MODS: with those modifiers;
 *   BC_POW2: a power of two, for paged caches whose pages neither divide BC nor are a multiple
 *     of it (a tile is copied a page at a time, and no copy may straddle a page).
 *   CONSUMERS_LONG: the consumer warpgroups of further instances (BC and BC_MODS) that long
 *     queries take (hopper_wgmma.cu chooses), where it differs from two. At d = 64 three: a
 *     warpgroup's GEMMs are short beside its softmax, and with three in turn two softmaxes run
 *     under each one's GEMMs; its 192-row blocks fill fewer waves on short grids, which is why
 *     short queries keep two. The modifier instances gain too, though ptxas spills the BIAS
 *     one in 160 registers. At d = 128 and 256 O alone takes D / 2 registers, and three
 *     would leave each 160.
 * The measurements behind the choice are in bench/results (2026-12-03_h200_hopper-key-tiles,
 * 2026-12-06_h100_hopper-d128-tile). */
template <int D> struct fp_hopper_tile;
template <> struct fp_hopper_tile<64> {
    static constexpr int BC = 128, BC_MODS = 128, BC_POW2 = 128, CONSUMERS_LONG = 3;
};
template <> struct fp_hopper_tile<128> {
    static constexpr int BC = 128, BC_MODS = 128, BC_POW2 = 128, CONSUMERS_LONG = 2;
};
template <> struct fp_hopper_tile<256> {
    static constexpr int BC = 80, BC_MODS = 80, BC_POW2 = 64, CONSUMERS_LONG = 2;
};

/* What the element type T changes. 16-bit: 64 columns a 128-byte panel, k-steps of 16. FP8
 * (e4m3, e5m2): 128 columns a panel, k-steps of 32; P is rounded to e4m3 for P V, scaled by
 * 2^P_LOG2_OFFSET so that its largest value (256) uses the format's range (small
 * probabilities would otherwise fall below e4m3's subnormals, 2^-9); V arrives as V^T (keys
 * contiguous, renumbered as fragment_layout.h says) from a pre-pass, because 8-bit wgmma reads
 * its B operand K-major only; the K/V ring has four stages (a tile is half the bytes). */
template <typename T> struct fp_hopper_input {
    static constexpr int BYTES = 2, K_STEP = 16, P_LOG2_OFFSET = 0;
    static constexpr bool FP8 = false;
};
template <typename T> struct fp_hopper_input_fp8 {
    static constexpr int BYTES = 1, K_STEP = 32, P_LOG2_OFFSET = 8;
    static constexpr int BC = 128; /* one 128-key V^T panel a tile */
    static constexpr bool FP8 = true;
};
template <> struct fp_hopper_input<__nv_fp8_e4m3> : fp_hopper_input_fp8<__nv_fp8_e4m3> {};
template <> struct fp_hopper_input<__nv_fp8_e5m2> : fp_hopper_input_fp8<__nv_fp8_e5m2> {};

/* Two shortcuts of the softmax whose worth depends on the instance, since they change how
 * ptxas schedules the exponentials around the wgmmas in flight (measured per instance with
 * flashport-bench on the H200: bench/results/2026-12-03_h200_hopper-softmax-policy.md):
 * FUSED_SCALE: with no modifiers and a positive scale, the scale joins the FMA that subtracts
 *   the row maximum (one multiplication a score fewer); taken at d = 64 in 16 bits, where it
 *   gains; at d = 128 and 256 it lost.
 * SKIP_UNIT_RESCALE: a warp whose rows' maxima did not move (alpha exactly 1, the common case
 *   once a row has seen its largest scores) skips O's rescale; taken for FP8, where the
 *   softmax is the bottleneck, and at d = 256, where O is largest; at d = 64 it lost.
 * OVERLAP_PV: the loop is rotated so that the softmax of tile t runs while the P V of tile
 *   t - 1 does (see the head); taken at d = 128 in 16 bits, where it gains. At d = 64 and
 *   for FP8, where a tile's GEMMs are shorter beside its softmax, the P V held in flight
 *   lengthens the warpgroup's turn and the other warpgroup waits for it; at d = 256 and in
 *   the BIAS instances ptxas spills (bench/results/2026-12-06_h100_hopper-pv-overlap); the
 *   SCORES instances fit it and ran 1-1.5% slower with it
 *   (bench/results/2026-12-07_h100_hopper-scores-instances). */
template <typename T, int D> struct fp_hopper_softmax_policy {
    static constexpr bool FUSED_SCALE = !fp_hopper_input<T>::FP8 && D == 64;
    static constexpr bool SKIP_UNIT_RESCALE = fp_hopper_input<T>::FP8 || D == 256;
    static constexpr bool OVERLAP_PV = !fp_hopper_input<T>::FP8 && D == 128;
};

/* Shared-memory plan of one instance (key tiles of BC keys, blocks of BR query rows): Q, the K
 * and V rings, with BIAS (the instances that take a bias tensor) a ring of one f32 row of BC bias
 * values a stage (fp_hopper_stage_bias), the barriers, and the slack that lets the kernel align the
 * tiles to 1024 bytes itself (the dynamic window's base is only guaranteed 16-byte aligned). */
template <typename T, int D, int BC, int BR, bool BIAS = false> struct fp_hopper_smem {
    static constexpr int ELEM = fp_hopper_input<T>::BYTES;
    static constexpr uint32_t Q_BYTES = BR * D * ELEM;
    static constexpr uint32_t KV_BYTES = BC * D * ELEM; /* one K or V tile */
    /* The ring's depth: FP8 four stages (a tile is half the bytes); 16 bits as many as fit,
     * up to three. Two stages leave the producer's latency from a released stage to the next
     * copy on the consumers' critical path, a third hides it (at d = 256 no tile has room for
     * it); a fourth, where it fits, ran slower. FIXED: Q, the bias rows and barriers of a
     * three-stage ring and the alignment slack. */
    static constexpr uint32_t BIAS_BYTES = BIAS ? BC * 4 : 0; /* one stage's bias row */
    static constexpr int BARS_A_STAGE = BIAS ? 4 : 3;
    static constexpr size_t LIMIT = 227 * 1024;
    static constexpr size_t FIXED =
        Q_BYTES + 3 * BIAS_BYTES + 8 * (1 + BARS_A_STAGE * 3) + FP_HOPPER_ATOM_BYTES;
    static constexpr int FIT = (int)((LIMIT - FIXED) / (2 * KV_BYTES));
    static constexpr int STAGES = fp_hopper_input<T>::FP8 ? 4 : FIT < 3 ? FIT : 3;
    static constexpr uint32_t K_OFF = Q_BYTES;
    static constexpr uint32_t V_OFF = K_OFF + STAGES * KV_BYTES;
    static constexpr uint32_t BIAS_OFF = V_OFF + STAGES * KV_BYTES;
    static constexpr uint32_t BAR_OFF = BIAS_OFF + STAGES * BIAS_BYTES;
    /* q_full, then k_full, v_full, empty and with BIAS bias_full per stage */
    static constexpr uint32_t BARS = 1 + BARS_A_STAGE * STAGES;
    static constexpr size_t BYTES = (size_t)BAR_OFF + 8 * BARS + FP_HOPPER_ATOM_BYTES;
    static_assert(STAGES >= 2 && BYTES <= LIMIT, "a ring of two stages or more beside Q");
    static_assert(Q_BYTES % FP_HOPPER_ATOM_BYTES == 0 && KV_BYTES % FP_HOPPER_ATOM_BYTES == 0,
                  "every panel starts on a swizzle atom");
};

/* One consumer warpgroup's running state: the O accumulators and, for its two rows per
 * thread, the running maximum (log2 domain) and this thread's share of the row sum. */
template <int D> struct fp_hopper_rows {
    float o[D / 2];
    float m[2], l[2];
};

/* The maximum of a row's values over the four lanes of its quad, from this lane's maximum. */
static __device__ __forceinline__ float fp_hopper_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* This lane's maxima of the thread's two rows over a tile's values. */
template <int BC>
static __device__ __forceinline__ void fp_hopper_lane_max(float (&mx)[2],
                                                          const float (&s)[BC / 2]) {
    mx[0] = mx[1] = -INFINITY;
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
}

/* The online-softmax step of row h (of the thread's two) for a tile whose largest exponent is
 * at most top (log2 domain): the running maximum moves up to it, the row sum and alpha[h], O's
 * factor, follow; returns what the tile's exponents subtract, with the 2^P_OFFSET scaling. */
template <int D, int P_OFFSET>
static __device__ __forceinline__ float fp_hopper_row_step(fp_hopper_rows<D> &r, float (&alpha)[2],
                                                           int h, float top) {
    const float m_new = fmaxf(r.m[h], top);
    /* A row that has seen no key yet keeps m = -inf: subtract 0 so that exp2 gives 0, not NaN. */
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = fp_exp2_approx(r.m[h] - base);
    r.m[h] = m_new;
    r.l[h] *= alpha[h];
    return base - (float)P_OFFSET;
}

/* The scores of one tile (BC keys), `c` times them in the log2 domain, -> P in place, times
 * 2^P_OFFSET, with the online-softmax update of m and l (log2 domain; l sums the scaled P);
 * alpha gets the factor by which O must be rescaled for each of the thread's two rows. c is 1
 * for scores already in the log2 domain, or the positive factor that takes them there: scale *
 * log2(e) of raw dot products, or softcap * log2(e) of softcapped scores left as tanh values
 * (fp_hopper_scores); it joins the subtraction's FMA at no cost (a positive factor keeps the
 * maximum where it was, and -inf, a masked key, at -inf). */
template <int D, int BC, int P_OFFSET>
static __device__ __forceinline__ void fp_hopper_softmax(float (&alpha)[2], float (&s)[BC / 2],
                                                         fp_hopper_rows<D> &r, float c) {
    float mx[2], base[2];
    fp_hopper_lane_max<BC>(mx, s);
#pragma unroll
    for (int h = 0; h < 2; ++h)
        base[h] = fp_hopper_row_step<D, P_OFFSET>(r, alpha, h, c * fp_hopper_quad_max(mx[h]));
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
        const float p = fp_exp2_approx(fmaf(s[i], c, -base[(i / 2) % 2]));
        s[i] = p;
        r.l[(i / 2) % 2] += p;
    }
}

/* fp_hopper_softmax for ALiBi alone on a tile that lies on one side of every row's diagonal,
 * where a score's bias is linear in its distance from the diagonal: ss * dist, with ss the slope
 * (log2 domain) signed for the side, and dist = first_dist (the thread's first row, the tile's
 * first key) plus the element's key offset less its row offset (fragment_layout.h). f is the
 * scale in the log2 domain; s holds the raw dot products. The maximum is taken over them and
 * bounded above by f * max + the row's largest bias (at one end of the tile), and each exponent
 * is formed in two FMAs, against the general path's four operations a score (fp_hopper_scores'
 * distance, product and FMA, and the softmax's subtraction). Any upper bound serves the online
 * softmax; this one lies at most |ss| * (BC - 1) above the true maximum, which the caller keeps
 * small enough that no weight that matters flushes to 0. */
template <int D, int BC, int P_OFFSET>
static __device__ __forceinline__ void
fp_hopper_softmax_alibi(float (&alpha)[2], float (&s)[BC / 2], fp_hopper_rows<D> &r, float f,
                        float ss, int tid, int first_dist) {
    float mx[2], off[2];
    fp_hopper_lane_max<BC>(mx, s);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mx[h] = fp_hopper_quad_max(mx[h]);
        /* The row's distances in the tile: from its first key's to BC - 1 more. */
        const float row_dist = (float)(first_dist - 8 * h);
        const float top = fmaxf(ss * row_dist, ss * (row_dist + (float)(BC - 1)));
        const float base = fp_hopper_row_step<D, P_OFFSET>(r, alpha, h, fmaf(f, mx[h], top));
        off[h] = fmaf(ss, row_dist + (float)fp_hopper_acc_col(tid, 0), -base);
    }
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
        const float key = (float)(8 * (i / 4) + i % 2);
        const float p = fp_exp2_approx(fmaf(s[i], f, fmaf(ss, key, off[(i / 2) % 2])));
        s[i] = p;
        r.l[(i / 2) % 2] += p;
    }
}

/* Whether the row sees the key: a real row (below Nq), a real key, within the row's band. */
static __device__ __forceinline__ bool fp_hopper_seen(const fp_key_band &band, int nq, int nkv,
                                                      int row, int key) {
    return row < nq && key < nkv && fp_in_band(band, row, key);
}

/* Adds the bias, read as B, where the row sees the key (no bias is read elsewhere). */
template <typename B, int BC>
static __device__ __forceinline__ void
fp_hopper_add_bias(float (&s)[BC / 2], const fp_score_mods &m, int b, int h, int nq, int nkv,
                   int tid, int row0, int kb, const fp_key_band &band) {
    const int64_t at = fp_bias_head_offset(m, b, h);
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
        const int row = row0 + fp_hopper_acc_row(tid, i);
        const int key = kb + fp_hopper_acc_col(tid, i);
        if (fp_hopper_seen(band, nq, nkv, row, key)) s[i] += fp_bias_log2_as<B>(m, at, row, key);
    }
}

/* A tile's bias off the edges, each row's pairs of keys read in the form PAIRS names
 * (fp_bias_row; the caller tests fp_bias_pairs once): a bias that does not vary with the query
 * read once for both of a thread's rows. */
template <bool PAIRS, typename B, int BC>
static __device__ __forceinline__ void fp_hopper_bias_rows(float (&s)[BC / 2],
                                                           const fp_score_mods &m, float inv_scale,
                                                           int64_t at, int nq, int row, int key) {
    fp_bias_row<B> r0;
    r0.init(m, at, fp_bias_row_clamped(row, nq), key);
    if (m.bias_query == 0) {
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) {
            float b0, b1;
            r0.template pair<PAIRS>(n, &b0, &b1);
            s[4 * n] = s[4 * n + 2] = fp_bias_over_scale(b0, inv_scale);
            s[4 * n + 1] = s[4 * n + 3] = fp_bias_over_scale(b1, inv_scale);
        }
        return;
    }
    fp_bias_row<B> r1;
    r1.init(m, at, fp_bias_row_clamped(row + 8, nq), key);
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
        float b0, b1;
        r0.template pair<PAIRS>(n, &b0, &b1);
        s[4 * n] = fp_bias_over_scale(b0, inv_scale);
        s[4 * n + 1] = fp_bias_over_scale(b1, inv_scale);
        r1.template pair<PAIRS>(n, &b0, &b1);
        s[4 * n + 2] = fp_bias_over_scale(b0, inv_scale);
        s[4 * n + 3] = fp_bias_over_scale(b1, inv_scale);
    }
}

/* The start of a tile's S for a bias that rides in the accumulators (score_mods.cuh,
 * fp_bias_in_accumulators): bias / scale read as B. Edge tiles read each entry on its own and
 * start keys past Nkv at 0 (the mask sets them, and the keys a row does not see, to -inf);
 * other tiles take fp_hopper_bias_rows in the form fp_bias_pairs allows. Rows past Nq read the
 * last row's.
 * Register i holds row fp_hopper_acc_row(tid, 0) + 8 ((i / 2) % 2) and key
 * fp_hopper_acc_col(tid, 0) + 8 (i / 4) + i % 2. A bias that varies with the query is read
 * from global memory just before the tile's GEMMs: staging it a tile ahead in shared memory by
 * the consumers' cp.async was measured slower, and so was dropping fp_bias_over_scale's clamp
 * (ptxas then spilled the modifier instance, 124 bytes at d = 128, and ALiBi and softcap ran
 * about 20% slower; bench/results). One that does not is staged by the producer
 * (fp_hopper_stage_bias). */
template <typename B, int BC>
static __device__ __forceinline__ void
fp_hopper_bias_start_as(float (&s)[BC / 2], const fp_score_mods &m, float inv_scale, int b, int h,
                        int nq, int nkv, int tid, int row0, int kb, bool edge) {
    const int64_t at = fp_bias_head_offset(m, b, h);
    const int row = row0 + fp_hopper_acc_row(tid, 0), key = kb + fp_hopper_acc_col(tid, 0);
    if (edge) {
        const B *const bias = static_cast<const B *>(m.bias) + at;
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) {
            const int r = fp_bias_row_clamped(row + 8 * ((i / 2) % 2), nq);
            const int k = key + 8 * (i / 4) + i % 2;
            s[i] = k < nkv
                       ? fp_bias_over_scale(
                             fp_to_f32(bias[(int64_t)r * m.bias_query + (int64_t)k * m.bias_key]),
                             inv_scale)
                       : 0.0f;
        }
        return;
    }
    if (fp_bias_pairs<B>(m, at, key))
        fp_hopper_bias_rows<true, B, BC>(s, m, inv_scale, at, nq, row, key);
    else
        fp_hopper_bias_rows<false, B, BC>(s, m, inv_scale, at, nq, row, key);
}

template <int BC>
static __device__ __forceinline__ void
fp_hopper_bias_start(float (&s)[BC / 2], const fp_score_mods &m, float inv_scale, int b, int h,
                     int nq, int nkv, int tid, int row0, int kb, bool edge) {
    switch (m.bias_dtype) {
    case FLASHPORT_F16:
        fp_hopper_bias_start_as<__half, BC>(s, m, inv_scale, b, h, nq, nkv, tid, row0, kb, edge);
        break;
    case FLASHPORT_BF16:
        fp_hopper_bias_start_as<__nv_bfloat16, BC>(s, m, inv_scale, b, h, nq, nkv, tid, row0, kb,
                                                   edge);
        break;
    default:
        fp_hopper_bias_start_as<float, BC>(s, m, inv_scale, b, h, nq, nkv, tid, row0, kb, edge);
    }
}

/* The producer threads that stage a bias: warps 1 to 3 of its warpgroup (warp 0 copies). The
 * stages' "bias full" barriers count their arrivals. */
static constexpr int FP_HOPPER_BIAS_STAGERS = 96;

/* A bias that does not vary with the query (bias_query = 0: a key-padding mask), staged: the
 * producer's three spare warps (the FP_HOPPER_BIAS_STAGERS threads `worker` counts) write tile
 * [key0, key0 + BC)'s row as bias / scale in f32 (fp_bias_over_scale; 0 past Nkv, where the mask
 * sets -inf) into the stage's bias row, and the consumers start each tile's S from it with one
 * shared-memory load a pair of keys (fp_hopper_bias_staged). Read by the consumers themselves, each
 * of the 32 pairs of a thread's tile took a global load, the conversion and its clamp on their
 * critical path (bench/results). */
template <typename B, int BC>
static __device__ __forceinline__ void fp_hopper_stage_bias_as(uint32_t row, const fp_score_mods &m,
                                                               float inv_scale, int64_t at,
                                                               int key0, int nkv, int worker) {
    const B *const bias = static_cast<const B *>(m.bias) + at;
    for (int k = worker; k < BC; k += FP_HOPPER_BIAS_STAGERS) {
        const int key = key0 + k;
        fp_st_shared_f32(
            row + 4u * k,
            key < nkv ? fp_bias_over_scale(fp_to_f32(bias[(int64_t)key * m.bias_key]), inv_scale)
                      : 0.0f);
    }
}

template <int BC>
static __device__ __forceinline__ void fp_hopper_stage_bias(uint32_t row, const fp_score_mods &m,
                                                            float inv_scale, int64_t at, int key0,
                                                            int nkv, int worker) {
    switch (m.bias_dtype) {
    case FLASHPORT_F16:
        fp_hopper_stage_bias_as<__half, BC>(row, m, inv_scale, at, key0, nkv, worker);
        break;
    case FLASHPORT_BF16:
        fp_hopper_stage_bias_as<__nv_bfloat16, BC>(row, m, inv_scale, at, key0, nkv, worker);
        break;
    default: fp_hopper_stage_bias_as<float, BC>(row, m, inv_scale, at, key0, nkv, worker);
    }
}

/* A tile's S started from its staged bias row: both of the thread's rows take the same keys. */
template <int BC>
static __device__ __forceinline__ void fp_hopper_bias_staged(float (&s)[BC / 2], uint32_t row,
                                                             int tid) {
    const uint32_t at = row + 4u * fp_hopper_acc_col(tid, 0);
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
        fp_ld_shared_f32x2(at + 32u * n, &s[4 * n], &s[4 * n + 1]);
        s[4 * n + 2] = s[4 * n];
        s[4 * n + 3] = s[4 * n + 1];
    }
}

/* -inf for the keys a row does not see (past Nkv, or outside its band): the per-score test of
 * edge tiles. */
template <int BC>
static __device__ __forceinline__ void fp_hopper_mask(float (&s)[BC / 2], int nkv, int tid,
                                                      int row0, int kb, const fp_key_band &band) {
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
        const int key = kb + fp_hopper_acc_col(tid, i);
        if (key >= nkv || !fp_in_band(band, row0 + fp_hopper_acc_row(tid, i), key))
            s[i] = -INFINITY;
    }
}

/* The raw dot products of a tile -> log2-domain scores, one pass per step behind one uniform
 * branch: scale and softcap (MATH as fp_softcap_math says), ALiBi, then on edge tiles the mask
 * of the keys each row sees, then the bias where the row sees the key unless the dot products
 * started from it (bias_started, fp_hopper_bias_start). The dense instance
 * folds the modifiers away and keeps the scale and the mask. ALiBi takes one FMA a score: a
 * thread's distance from the diagonal is a per-thread part plus a constant of the register
 * (fragment_layout.h), and the FMA applies the scale, or the softcap's factor, too. Returns the
 * factor the softmax still has to apply (fp_hopper_softmax's c): softcap * log2(e) when the
 * softcap is the only modifier, whose scores stay tanh(scale * dot / softcap) so that the
 * softmax's subtraction applies it (one multiplication a score fewer); otherwise 1. */
template <fp_softcap_math MATH, int BC>
static __device__ __forceinline__ float
fp_hopper_scores(float (&s)[BC / 2], const fp_score_mods &m, int b, int h, int nq, int nkv, int tid,
                 int row0, int kb, bool edge, bool bias_started, const fp_key_band &band) {
    const bool alibi = m.alibi != FLASHPORT_ALIBI_NONE;
    const bool softcap = m.softcap > 0.0f;
    const bool bias_after = m.bias && !bias_started;
    const float log2_factor = softcap ? m.softcap * FP_LOG2E : m.scale * FP_LOG2E;
    float softmax_factor = 1.0f;
    if (softcap) {
        const float out = bias_after && !alibi ? log2_factor : 1.0f;
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) s[i] = fp_softcap_times<MATH>(m, s[i], out);
        if (!alibi && !bias_after) softmax_factor = log2_factor;
    } else if (!alibi) {
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) s[i] = fp_scaled_log2<MATH>(m, s[i]);
    }
    if (alibi) {
        const float slope = fp_alibi_slope_log2(m, b, h);
        const float thread_dist =
            (float)(kb + fp_hopper_acc_col(tid, 0) - (row0 + fp_hopper_acc_row(tid, 0) + nkv - nq));
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) {
            const float dist = thread_dist + (float)(8 * (i / 4) + i % 2 - 8 * ((i / 2) % 2));
            s[i] = fmaf(s[i], log2_factor, -slope * fabsf(dist));
        }
    }
    if (edge) fp_hopper_mask<BC>(s, nkv, tid, row0, kb, band);
    if (m.bias && !bias_started) switch (m.bias_dtype) {
        case FLASHPORT_F16:
            fp_hopper_add_bias<__half, BC>(s, m, b, h, nq, nkv, tid, row0, kb, band);
            break;
        case FLASHPORT_BF16:
            fp_hopper_add_bias<__nv_bfloat16, BC>(s, m, b, h, nq, nkv, tid, row0, kb, band);
            break;
        default: fp_hopper_add_bias<float, BC>(s, m, b, h, nq, nkv, tid, row0, kb, band);
        }
    return softmax_factor;
}

/* Zeroes rows [from, BC) of a K or V tile in every panel (a row's 128 bytes of a panel stay
 * together under the swizzle, fragment_layout.h), the `thread`-th share of it of THREADS
 * threads, and fences the writes for wgmma. Run by all consumer threads after the tile's copy
 * has landed. */
template <int D, int BC, int THREADS>
static __device__ __forceinline__ void fp_hopper_zero_rows(uint32_t tile, int from, int thread) {
    constexpr int PANELS = D / FP_HOPPER_PANEL_COLS, CHUNKS = 128 / 16;
    const int per_panel = (BC - from) * CHUNKS;
    for (int c = thread; c < PANELS * per_panel; c += THREADS)
        fp_st_shared_zero16(tile + (c / per_panel) * BC * 128 + from * 128 + (c % per_panel) * 16);
    fp_fence_proxy_async_shared();
}

/* Keeps the P operand registers live and in place up to this point: a register-sourced wgmma
 * reads them until the wait that retires it, which the compiler cannot see. */
template <int N> static __device__ __forceinline__ void fp_hopper_fence_words(uint32_t (&w)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(w[i][j])::"memory");
}

template <typename T> static __device__ __forceinline__ uint32_t fp_hopper_pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t fp_hopper_pack<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t fp_hopper_pack<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* The softcap form of the instance (score_mods.cuh); FP8 instances take no modifiers, so the
 * value is never used there. */
template <typename T> __host__ __device__ constexpr fp_softcap_math fp_hopper_softcap_math() {
    if constexpr (fp_hopper_input<T>::FP8)
        return FP_SOFTCAP_TANH_APPROX;
    else
        return fp_softcap_math_of<T>::value;
}

/* S (+)= Q K^T over one k-step, N = BC: the 16-bit or the FP8 instruction. */
template <typename T, int BC>
static __device__ __forceinline__ void fp_hopper_mma_s(float (&d)[BC / 2], uint64_t a, uint64_t b,
                                                       int accumulate) {
    if constexpr (fp_hopper_input<T>::FP8)
        fp_wgmma_fp8<T>::ss(d, a, b, accumulate);
    else
        fp_wgmma<T, BC>::ss(d, a, b, accumulate);
}

/* Two adjacent output columns, as OT: one 4-byte store where `pairs` allows (16-bit OT). */
template <typename OT>
static __device__ __forceinline__ void fp_hopper_store2(OT *at, float v0, float v1, int pairs) {
    if constexpr (sizeof(OT) == 2) {
        if (pairs) {
            *reinterpret_cast<uint32_t *>(at) = fp_hopper_pack<OT>(v0, v1);
            return;
        }
    }
    at[0] = OT(v0);
    at[1] = OT(v1);
}

/* BC: keys of a tile (fp_hopper_tile). MODS: the modifiers the instance computes
 * (fp_hopper_mods); the fields of the others are folded away, so that the dense instance keeps
 * its registers for the dense path, and every tile of the others takes the modifiers' passes of
 * fp_hopper_scores. Sinks join the final division in all. CONSUMERS: consumer warpgroups
 * (fp_hopper_block). */
template <typename T, int D, int BC, fp_hopper_mods MODS, int CONSUMERS>
__global__ void __launch_bounds__(fp_hopper_block<CONSUMERS>::THREADS, 1)
    fp_hopper_forward_kernel(const __grid_constant__ CUtensorMap q_map,
                             const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map, const fp_hopper_params a) {
    /* wgmma and setmaxnreg exist only in sm_90a code. The build compiles this file for sm_90a
     * alone; a pass for any other target (nvcc -arch=sm_90a also emits compute_90 PTX) gets a
     * body that traps instead of computing garbage. */
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#elif defined(__CUDA_ARCH__)
    using Block = fp_hopper_block<CONSUMERS>;
    constexpr int BR = Block::BR;
    constexpr bool BIAS = MODS == FP_HOPPER_MODS_BIAS;
    using Smem = fp_hopper_smem<T, D, BC, BR, BIAS>;
    using In = fp_hopper_input<T>;
    constexpr int STAGES = Smem::STAGES;
    constexpr int PANEL_COLS = 128 / In::BYTES, PANELS = D / PANEL_COLS;
    static_assert(D % PANEL_COLS == 0, "head dim in whole 128-byte panels");
    static_assert(!In::FP8 || (BC == 128 && D == 128 && MODS == FP_HOPPER_MODS_NONE),
                  "FP8: one 128-key V^T panel a tile, the k32 shapes of N = 128, no modifiers");

    extern __shared__ unsigned char fp_hopper_smem_raw[];
    const uint32_t raw = fp_smem_addr(fp_hopper_smem_raw);
    const uint32_t base = (raw + FP_HOPPER_ATOM_BYTES - 1) & ~(uint32_t)(FP_HOPPER_ATOM_BYTES - 1);
    const uint32_t sQ = base, sK = base + Smem::K_OFF, sV = base + Smem::V_OFF;
    const uint32_t q_full = base + Smem::BAR_OFF;
    auto k_full = [&](int s) { return q_full + 8u * (1 + s); };
    auto v_full = [&](int s) { return q_full + 8u * (1 + STAGES + s); };
    auto empty = [&](int s) { return q_full + 8u * (1 + 2 * STAGES + s); };
    auto bias_full = [&](int s) { return q_full + 8u * (1 + 3 * STAGES + s); };
    auto bias_row = [&](int s) { return base + Smem::BIAS_OFF + s * Smem::BIAS_BYTES; };

    const int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        fp_mbarrier_init(q_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            fp_mbarrier_init(k_full(s), 1);
            fp_mbarrier_init(v_full(s), 1);
            fp_mbarrier_init(empty(s), Block::CONSUMER_THREADS);
            if (BIAS) fp_mbarrier_init(bias_full(s), FP_HOPPER_BIAS_STAGERS);
        }
        fp_mbarrier_init_fence();
    }
    __syncthreads();

    fp_score_mods mods = a.mods;
    if (MODS == FP_HOPPER_MODS_NONE) {
        mods.softcap = 0.0f;
        mods.alibi = FLASHPORT_ALIBI_NONE;
    }
    if (!BIAS) mods.bias = NULL;
    /* A (batch, head)'s query blocks run together, causal ones heaviest first, packed batches
     * included: at this kernel's rate a block streams K/V near the memory's bandwidth, and
     * blocks of one head share them in L2. fp_grid_block_of's longest-first walk across all
     * pairs, which the mma.sync kernels take for packed batches, ran 3-21% slower here
     * (bench/results). */
    const fp_grid_block g = {mods.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x,
                             (int)blockIdx.y};
    const fp_seq s = fp_sequence(a.seq, g.bh / a.seq.heads_q);
    const int h = g.bh % a.seq.heads_q, hk = h / a.group;
    const int q0 = g.m * BR;
    /* A packed batch's grid covers its longest sequence; this one may end before the block. */
    if (q0 >= s.nq) return;
    /* The maps' batch coordinate: a packed batch is one batch of packed rows. */
    const int map_b = a.seq.q_varlen ? 0 : s.b;
    /* The key tiles some row of the block sees. */
    const fp_span_keys span = fp_visible_span(mods, q0, min(q0 + BR, s.nq) - 1, s.nq, s.nkv, s.nkv);
    const bool paged = !In::FP8 && a.seq.kv == FLASHPORT_KV_PAGED; /* FP8: dense K/V only */
    /* A page holds whole boxes; an FP8 tile takes its K and V descales whole (and V^T's
     * columns are renumbered within aligned groups of 16). */
    const int k_begin = paged || In::FP8 ? span.lo - span.lo % BC : span.lo;
    const int n_tiles = span.hi > k_begin ? (span.hi - k_begin + BC - 1) / BC : 0;
    /* 1 / scale when each tile's S starts from its bias (score_mods.cuh), else 0; the bias is
     * staged (fp_hopper_stage_bias) when it does not vary with the query. */
    const float bias_inv_scale = fp_bias_in_accumulators(mods) ? 1.0f / mods.scale : 0.0f;
    const bool bias_started = bias_inv_scale != 0.0f;
    const bool bias_staged = BIAS && bias_started && mods.bias_query == 0;

    if (warpgroup == 0) {
        fp_setmaxnreg_dec<Block::PRODUCER_REGS>();
        /* One thread issues the copies, or for a paged cache the first warp: lane j copies the
         * j-th box (page) of each tile, so that a tile's table reads and copies are in flight
         * together. Dense and packed tiles keep the single thread's short path: with two ring
         * stages its latency from a released stage to the next copy is on the consumers'
         * critical path (bench/results). */
        if (threadIdx.x < (paged ? 32 : 1)) {
            const int lane = threadIdx.x;
            if (lane == 0) {
                fp_tma_prefetch_map(&q_map);
                fp_tma_prefetch_map(&k_map);
                fp_tma_prefetch_map(&v_map);
                fp_mbarrier_arrive_expect_tx(q_full, Smem::Q_BYTES);
                for (int p = 0; p < PANELS; ++p)
                    fp_tma_load_4d(sQ + p * BR * 128, &q_map, q_full, p * PANEL_COLS, s.q_row0 + q0,
                                   h, map_b);
            }
            for (int t = 0; t < n_tiles; ++t) {
                const int st = t % STAGES;
                /* Stage st last held tile t - STAGES: wait until every consumer lets it go. */
                if (t >= STAGES) fp_mbarrier_wait(empty(st), ((t / STAGES) - 1) & 1);
                const int key0 = k_begin + t * BC;
                const uint32_t sk = sK + st * Smem::KV_BYTES, sv = sV + st * Smem::KV_BYTES;
                if (!paged) {
                    const int row = s.kv_row0 + key0;
                    fp_mbarrier_arrive_expect_tx(k_full(st), Smem::KV_BYTES);
                    for (int p = 0; p < PANELS; ++p)
                        fp_tma_load_4d(sk + p * BC * 128, &k_map, k_full(st), p * PANEL_COLS, row,
                                       hk, map_b);
                    fp_mbarrier_arrive_expect_tx(v_full(st), Smem::KV_BYTES);
                    if constexpr (In::FP8) /* V^T: D rows of the tile's BC keys */
                        fp_tma_load_4d(sv, &v_map, v_full(st), key0, 0, hk, map_b);
                    else
                        for (int p = 0; p < PANELS; ++p)
                            fp_tma_load_4d(sv + p * BC * 128, &v_map, v_full(st), p * PANEL_COLS,
                                           row, hk, map_b);
                    continue;
                }
                /* The tile's boxes that hold keys of the sequence; the table entries past its
                 * last page may be unset. */
                const int box = a.kv_box;
                const int boxes = min(BC / box, (s.nkv - key0 + box - 1) / box);
                if (lane == 0) {
                    const uint32_t bytes = (uint32_t)(boxes * box) * D * In::BYTES;
                    fp_mbarrier_arrive_expect_tx(k_full(st), bytes);
                    fp_mbarrier_arrive_expect_tx(v_full(st), bytes);
                }
                __syncwarp();
                if (lane < boxes) {
                    const fp_kv_place at = fp_kv_locate(a.seq, s, key0 + lane * box);
                    const uint32_t off = lane * box * 128;
                    for (int p = 0; p < PANELS; ++p)
                        fp_tma_load_4d(sk + off + p * BC * 128, &k_map, k_full(st), p * PANEL_COLS,
                                       at.row, hk, (int)at.outer);
                    for (int p = 0; p < PANELS; ++p)
                        fp_tma_load_4d(sv + off + p * BC * 128, &v_map, v_full(st), p * PANEL_COLS,
                                       at.row, hk, (int)at.outer);
                }
            }
        } else if (bias_staged && threadIdx.x >= 32) {
            /* The other three warps stage the bias row of each tile in its stage, under the
             * same "empty" barrier as the copies. */
            const int64_t at = fp_bias_head_offset(mods, s.b, h);
            for (int t = 0; t < n_tiles; ++t) {
                const int st = t % STAGES;
                if (t >= STAGES) fp_mbarrier_wait(empty(st), ((t / STAGES) - 1) & 1);
                fp_hopper_stage_bias<BC>(bias_row(st), mods, bias_inv_scale, at, k_begin + t * BC,
                                         s.nkv, threadIdx.x - 32);
                fp_mbarrier_arrive(bias_full(st));
            }
        }
        return;
    }

    fp_setmaxnreg_inc<Block::CONSUMER_REGS>();
    constexpr int LAST = CONSUMERS - 1;
    const int wg = warpgroup - 1;                  /* consumer 0 .. LAST */
    const int tid = threadIdx.x - 128 * warpgroup; /* thread within the warpgroup */
    const int row0 = q0 + 64 * wg;                 /* first query row of the warpgroup */
    const fp_key_band band = fp_visible_band(mods, s.nq, s.nkv);
    const uint32_t sQ_wg = sQ + wg * 64 * 128; /* this warpgroup's 64 rows */
    /* Turns, round robin: wait for this warpgroup's turn to issue GEMMs (named barrier 1 + wg,
     * met by this warpgroup and the one before it), hand it to the next (when `pass` holds;
     * predicated rather than branched on, for the same reason as above). Rows past Nq (zeros
     * from TMA) still run every tile, so that the turns pair up. The next warpgroup's barrier
     * is formed at each hand-over and without a remainder: ptxas then schedules the
     * two-consumer instances as it did before the third existed. */
    auto take_turn = [&] { fp_named_barrier_sync(1 + wg, 256); };
    auto pass_turn = [&](bool pass) {
        fp_named_barrier_arrive_if(pass, CONSUMERS == 2 ? 2 - wg : (wg == LAST ? 1 : wg + 2), 256);
    };

    fp_hopper_rows<D> r;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) r.o[i] = 0.0f;
    r.m[0] = r.m[1] = -INFINITY;
    r.l[0] = r.l[1] = 0.0f;

    /* FP8 descales. Per tensor: Q's and K's join the scale, V's the final division. Per block:
     * each row's Q factor here, each tile's K factor multiplies its raw scores, and O is kept
     * in units of the newest tile's V factor (v_unit), rescaled with alpha when it changes; a
     * tile whose V factor is 0 adds P x 0 (a zero P operand) and leaves the unit alone. */
    const fp_hopper_descale &ds = a.descale;
    float q_factor[2] = {1.0f, 1.0f}, v_unit = 1.0f;
    bool p_keep = true;
    const int64_t kv_factors = ((int64_t)s.b * (a.seq.heads_q / a.group) + hk) * ds.kv_blocks;
    if constexpr (In::FP8) {
        if (ds.block == 0) {
            mods.scale *= ds.q[0] * ds.k[0];
            v_unit = ds.v[0];
        } else {
            const int64_t q_factors = ((int64_t)s.b * a.seq.heads_q + h) * ds.q_blocks;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int row = min(row0 + fp_hopper_acc_row(tid, 2 * hh), max(s.nq, 1) - 1);
                q_factor[hh] = ds.q[q_factors + row / ds.block];
            }
        }
    }
    float sacc[BC / 2];              /* S of the newest tile, then its P in f32 */
    uint32_t pa[BC / In::K_STEP][4]; /* P of the previous tile as wgmma A operands */
    /* FP8 per block: tile t's K factor on its raw scores, its V factor on O's unit; returns the
     * factor O's rescale before the tile's P V takes beside alpha. */
    auto descale_tile = [&](int kb) {
        const int64_t at = kv_factors + kb / ds.block;
        const float fk = ds.k[at], fv = ds.v[at];
        const float f0 = q_factor[0] * fk, f1 = q_factor[1] * fk;
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) sacc[i] *= (i / 2) % 2 ? f1 : f0;
        p_keep = fv != 0.0f;
        if (!p_keep) return 1.0f;
        const float ratio = v_unit / fv;
        v_unit = fv;
        return ratio;
    };
    /* Each tile's descriptors are built once and stepped by compile-time offsets. */
    const uint64_t q_desc = fp_hopper_desc_k_major(sQ_wg);
    auto issue_s = [&](int t) {
        const uint64_t k_desc = fp_hopper_desc_k_major(sK + (t % STAGES) * Smem::KV_BYTES);
#pragma unroll
        for (int kk = 0; kk < D / In::K_STEP; ++kk)
            fp_hopper_mma_s<T, BC>(sacc,
                                   fp_hopper_desc_step(q_desc, fp_hopper_k_major_step(BR, kk)),
                                   fp_hopper_desc_step(k_desc, fp_hopper_k_major_step(BC, kk)),
                                   kk > 0 || bias_started);
        fp_wgmma_commit();
    };
    auto issue_pv = [&](int t) {
        const uint32_t sv = sV + (t % STAGES) * Smem::KV_BYTES;
        if constexpr (In::FP8) { /* V^T: K-major, D rows */
            const uint64_t v_desc = fp_hopper_desc_k_major(sv);
#pragma unroll
            for (int kk = 0; kk < BC / 32; ++kk)
                fp_wgmma_fp8<T>::rs(r.o, pa[kk],
                                    fp_hopper_desc_step(v_desc, fp_hopper_k_major_step(D, kk)), 1);
        } else {
            const uint64_t v_desc = fp_hopper_desc_n_major(sv, BC);
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk)
                fp_wgmma<T, D>::rs(r.o, pa[kk],
                                   fp_hopper_desc_step(v_desc, fp_hopper_n_major_step(kk)), 1);
        }
        fp_wgmma_commit();
    };
    /* The softmax of tile t, on sacc once its S has landed. Which tiles need the per-score
     * test is decided for the whole block: a branch that differs between warpgroups while a
     * wgmma is in flight makes ptxas serialise them. */
    auto edge_tile = [&](int kb) { return kb < span.full_lo || kb + BC > span.full_hi; };
    /* Where the policy fuses it, without modifiers and with a positive scale (and FP8 descales
     * per tensor, folded into it), the scale joins the softmax's subtraction
     * (fp_hopper_softmax); otherwise the scores are formed first. */
    using Policy = fp_hopper_softmax_policy<T, D>;
    const float fused_scale = Policy::FUSED_SCALE && MODS == FP_HOPPER_MODS_NONE &&
                                      (!In::FP8 || ds.block == 0) && mods.scale > 0.0f
                                  ? mods.scale * FP_LOG2E
                                  : 0.0f;
    /* ALiBi alone, on tiles that lie on one side of every row's diagonal in the block, takes
     * fp_hopper_softmax_alibi: alibi_ss is the slope in the log2 domain where that applies (the
     * scale positive, and the slope's spread over a tile small enough for its bound), else 0. */
    const int diagonal_lo = q0 + s.nkv - s.nq, diagonal_hi = q0 + BR - 1 + s.nkv - s.nq;
    float alibi_ss = 0.0f;
    if (MODS == FP_HOPPER_MODS_SCORES && mods.alibi != FLASHPORT_ALIBI_NONE &&
        !(mods.softcap > 0.0f) && !mods.bias && mods.scale > 0.0f) {
        const float slope = fp_alibi_slope_log2(mods, s.b, h);
        if (fabsf(slope) * (BC - 1) <= 64.0f) alibi_ss = slope;
    }
    auto softmax = [&](int t, float(&alpha)[2]) {
        const int kb = k_begin + t * BC;
        float v_ratio = 1.0f;
        if (In::FP8 && ds.block != 0) v_ratio = descale_tile(kb);
        if (fused_scale > 0.0f) {
            if (edge_tile(kb)) fp_hopper_mask<BC>(sacc, s.nkv, tid, row0, kb, band);
            fp_hopper_softmax<D, BC, In::P_LOG2_OFFSET>(alpha, sacc, r, fused_scale);
        } else if (alibi_ss != 0.0f && !edge_tile(kb) &&
                   (kb + BC - 1 <= diagonal_lo || kb >= diagonal_hi)) {
            const float ss = kb >= diagonal_hi ? -alibi_ss : alibi_ss;
            fp_hopper_softmax_alibi<D, BC, In::P_LOG2_OFFSET>(
                alpha, sacc, r, mods.scale * FP_LOG2E, ss, tid,
                kb - (row0 + fp_hopper_acc_row(tid, 0) + s.nkv - s.nq));
        } else {
            const float c = fp_hopper_scores<fp_hopper_softcap_math<T>(), BC>(
                sacc, mods, s.b, h, s.nq, s.nkv, tid, row0, kb, edge_tile(kb), bias_started, band);
            fp_hopper_softmax<D, BC, In::P_LOG2_OFFSET>(alpha, sacc, r, c);
        }
        alpha[0] *= v_ratio;
        alpha[1] *= v_ratio;
    };
    /* Tile t's S starts from its bias: loaded once sacc is free (its P is in pa), while the
     * warpgroup waits for the tile and for its turn. */
    auto start_s = [&](int t) {
        if (!bias_started) return;
        if (bias_staged) {
            fp_mbarrier_wait(bias_full(t % STAGES), (t / STAGES) & 1);
            fp_hopper_bias_staged<BC>(sacc, bias_row(t % STAGES), tid);
            return;
        }
        const int kb = k_begin + t * BC;
        fp_hopper_bias_start<BC>(sacc, mods, bias_inv_scale, s.b, h, s.nq, s.nkv, tid, row0, kb,
                                 edge_tile(kb));
    };
    auto to_operand = [&] {
        if constexpr (In::FP8) {
            const uint32_t keep = p_keep ? 0xffffffffu : 0u;
#pragma unroll
            for (int kk = 0; kk < BC / 32; ++kk)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    pa[kk][j] = keep & fp_pack_e4m3x4(sacc[fp_hopper_p8_source(kk, j, 0)],
                                                      sacc[fp_hopper_p8_source(kk, j, 1)],
                                                      sacc[fp_hopper_p8_source(kk, j, 2)],
                                                      sacc[fp_hopper_p8_source(kk, j, 3)]);
        } else {
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    pa[kk][j] = fp_hopper_pack<T>(sacc[fp_hopper_p_source(kk, j, 0)],
                                                  sacc[fp_hopper_p_source(kk, j, 1)]);
        }
    };
    /* Tile t's copy into its stage has landed (bar: that stage's "full" barrier). */
    auto wait_full = [&](uint32_t bar, int t) { fp_mbarrier_wait(bar, (t / STAGES) & 1); };

    fp_mbarrier_wait(q_full, 0);
    if (n_tiles > 0) {
        pass_turn(wg == LAST); /* consumer 0 issues first */
        float alpha[2];
        /* Tile 0: S alone. */
        start_s(0);
        wait_full(k_full(0), 0);
        take_turn();
        fp_wgmma_fence_operand(sacc);
        fp_wgmma_fence();
        issue_s(0);
        pass_turn(true);
        fp_wgmma_wait<0>();
        fp_wgmma_fence_operand(sacc);
        softmax(0, alpha); /* O is still zero: no rescale */
        /* S of tile t and P V of tile t - 1 in one turn, then the softmax of tile t. */
        auto step = [&](int t) {
            to_operand();
            start_s(t);
            /* Both waits come before the fence: a wait loop between the fence and a wgmma
             * reading registers makes ptxas insert another fence there. */
            wait_full(k_full(t % STAGES), t);
            wait_full(v_full((t - 1) % STAGES), t - 1);
            take_turn();
            fp_wgmma_fence_operand(sacc);
            fp_wgmma_fence_operand(r.o);
            fp_wgmma_fence();
            issue_s(t);
            issue_pv(t - 1);
            pass_turn(true);
            fp_wgmma_wait<1>();
            fp_wgmma_fence_operand(sacc);
            softmax(t, alpha);
        };
        /* Waits for the P V of tile t, releases its stage and rescales O for the next tile. */
        auto retire = [&](int t) {
            fp_wgmma_wait<0>();
            fp_wgmma_fence_operand(r.o);
            fp_hopper_fence_words(pa); /* the P V read pa until here */
            fp_mbarrier_arrive(empty(t % STAGES));
            if (!Policy::SKIP_UNIT_RESCALE ||
                __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
                for (int i = 0; i < D / 2; ++i) r.o[i] *= alpha[(i / 2) % 2];
            }
        };
        /* The loop, rotated where the instance overlaps the softmax with the P V (see the
         * head): the P V of tile t - 1 is retired at the top of the next turn. */
        constexpr bool OVERLAP = Policy::OVERLAP_PV && MODS == FP_HOPPER_MODS_NONE;
        if (OVERLAP && n_tiles > 1) step(1);
        for (int t = OVERLAP ? 2 : 1; t < n_tiles; ++t) {
            if (OVERLAP) retire(t - 2);
            step(t);
            if (!OVERLAP) retire(t - 1);
        }
        if (OVERLAP && n_tiles > 1) retire(n_tiles - 2);
        /* P V of the last tile; the last consumer keeps its last hand-over (see above). */
        to_operand();
        wait_full(v_full((n_tiles - 1) % STAGES), n_tiles - 1);
        /* The last tile's rows that lie in the sequence. */
        const int v_end = s.nkv - (k_begin + (n_tiles - 1) * BC);
        if (!In::FP8 && a.seq.kv != FLASHPORT_KV_DENSE && v_end < BC) {
            fp_hopper_zero_rows<D, BC, Block::CONSUMER_THREADS>(
                sV + ((n_tiles - 1) % STAGES) * Smem::KV_BYTES, v_end, threadIdx.x - 128);
            /* Every warpgroup's zeros are written (and fenced) before any's P V reads them. */
            fp_named_barrier_sync(1 + CONSUMERS, Block::CONSUMER_THREADS);
        }
        take_turn();
        fp_wgmma_fence_operand(r.o);
        fp_wgmma_fence();
        issue_pv(n_tiles - 1);
        pass_turn(CONSUMERS == 2 ? wg == 0 : wg != LAST);
        fp_wgmma_wait<0>();
        fp_wgmma_fence_operand(r.o);
        fp_hopper_fence_words(pa);
        fp_mbarrier_arrive(empty((n_tiles - 1) % STAGES));
    }
    if (row0 >= s.nq) return;

#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float row_l = r.l[hh];
        row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
        row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
        const int row = row0 + fp_hopper_acc_row(tid, 2 * hh);
        if (row >= s.nq) continue;
        /* l summed P times 2^P_LOG2_OFFSET (exact: a power of two), and so did O. */
        constexpr float p_unscale = 1.0f / (float)(1 << In::P_LOG2_OFFSET);
        if constexpr (In::FP8) row_l *= p_unscale;
        /* The sink joins the denominator as a key with a zero value. */
        float row_m = r.m[hh];
        const float keep = mods.sinks ? fp_sink_fold(mods, h, &row_m, &row_l) : 1.0f;
        /* l == 0 only when no key was visible; a NaN l must stay NaN. */
        float inv_l = row_l == 0.0f ? 0.0f : keep / row_l;
        if constexpr (In::FP8) inv_l *= p_unscale * v_unit;
        auto store_row = [&](auto *o) {
            auto *go = o + fp_q_offset(a.os, s, h, row);
#pragma unroll
            for (int i = 2 * hh; i < D / 2; i += 4)
                fp_hopper_store2(go + fp_hopper_acc_col(tid, i), r.o[i] * inv_l, r.o[i + 1] * inv_l,
                                 a.o_pairs);
        };
        if constexpr (In::FP8) {
            switch (a.o_dtype) {
            case FLASHPORT_F16: store_row(static_cast<__half *>(a.o)); break;
            case FLASHPORT_BF16: store_row(static_cast<__nv_bfloat16 *>(a.o)); break;
            default: store_row(static_cast<float *>(a.o));
            }
        } else {
            store_row(static_cast<T *>(a.o));
        }
        if (a.lse && tid % 4 == 0)
            a.lse[fp_lse_index(a.seq, s, h, row)] =
                row_l == 0.0f ? -INFINITY : (row_m + log2f(row_l)) * 0.693147180559945309f;
    }
#endif
}

#endif /* FP_HOPPER_FORWARD_KERNEL_CUH */
