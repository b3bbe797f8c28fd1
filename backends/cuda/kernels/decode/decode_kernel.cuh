/*
 * The decode kernel: a few query rows per sequence against a long K/V cache, which is bound by
 * the bandwidth of reading K and V once. Reading them once is the whole design:
 *
 *  - GQA packing. A block takes ROWS (query head of the group, query position) rows that share
 *    one kv head, so each key and value row is read once for all of them.
 *  - A cp.async ring. K and V tiles of TILE_KEYS rows stream into a STAGES-deep ring of shared
 *    memory in 16-byte copies, zero-filled past the block's keys, so loads for later tiles are in
 *    flight while this one is consumed. HIP has no asynchronous copy: there the copies are
 *    vector loads and stores (fp_decode_copy16) into a two-stage ring, which the loop's one
 *    barrier per tile orders the same way, and other blocks' waves overlap the loads.
 *  - Lane groups. LANES lanes hold one key row (one 16-byte vector each, VECS of them for wide
 *    rows), so a warp takes 32 / LANES keys at once; a score is the group's dot product reduced
 *    by shuffles. Each group keeps its own online softmax over KEYS_PER_GROUP keys per tile,
 *    with one rescale per tile, and the groups merge through shared memory at the end.
 *  - Splits. Blocks along the keys (splits of whole tiles of the rows' visible span) fill the
 *    GPU when B * Hkv is small; each writes its normalised partial and (m, l) to the workspace
 *    in the split_kv.h layout, and fp_split_kv_merge combines them. With one split the block
 *    writes O and LSE itself.
 *
 * Every API v2 feature goes through the shared headers: kv_addressing.cuh for dense, varlen and
 * paged K/V, score_mods.cuh for window, softcap, ALiBi, bias and sinks. FP8 descales multiply
 * the dot product (K) and the weight of a value row (V), as the reference does.
 */
#ifndef FP_DECODE_KERNEL_CUH
#define FP_DECODE_KERNEL_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/kv_addressing.cuh"
#include "../common/online_softmax.cuh"
#include "../common/score_mods.cuh"
#if FP_GPU_CUDA
#include "../common/ptx.cuh"
#endif
#include "../mma/fragment_layout.h"
#include "vector16.cuh"

#define FP_DECODE_THREADS     128
#define FP_DECODE_STAGE_BYTES 16384 /* K and V tiles of one stage */
#if FP_GPU_CUDA
#define FP_DECODE_STAGES 4
#else
/* Synchronous copies need no deeper ring, and 32 KB of it leaves AMD's 64 KB of LDS room. */
#define FP_DECODE_STAGES 2
#endif
/* A split of fewer keys than this many tiles spends more on its Q rows and merge than it saves. */
#define FP_DECODE_MIN_TILES_PER_SPLIT 2

/* The compile-time shape of one (storage type, head dim) instance. */
template <typename T, int D> struct fp_decode_shape {
    static constexpr int N = fp_vec16<T>::N;                    /* elements per 16-byte vector */
    static constexpr int ROW_VECS = D / N;                      /* vectors per K or V row */
    static constexpr int LANES = ROW_VECS < 32 ? ROW_VECS : 32; /* lanes per key row */
    static constexpr int VECS = ROW_VECS / LANES;               /* vectors per lane */
    static constexpr int ELEMS = VECS * N;                      /* row elements each lane holds */
    static constexpr int GROUPS = FP_DECODE_THREADS / LANES;
    static constexpr int ROW_BYTES = D * (int)sizeof(T);
    static constexpr int TILE_KEYS = FP_DECODE_STAGE_BYTES / 2 / ROW_BYTES;
    static constexpr int KEYS_PER_GROUP = TILE_KEYS / GROUPS;
    /* Query rows per block: Q and the accumulators take 2 * ROWS * ELEMS registers per lane. */
    static constexpr int MAX_ROWS = 64 / ELEMS < 8 ? 64 / ELEMS : 8;
    static_assert(ROW_VECS % LANES == 0 && KEYS_PER_GROUP >= 1, "decode tile shape");
    static_assert((FP_DECODE_THREADS * 16) % ROW_BYTES == 0, "copies cover whole rows");
};

template <typename T> struct fp_is_fp8 { static constexpr bool value = false; };
template <> struct fp_is_fp8<fp_e4m3> { static constexpr bool value = true; };
template <> struct fp_is_fp8<fp_e5m2> { static constexpr bool value = true; };

struct fp_decode_args {
    const void *q, *k, *v;
    void *o;
    float *lse; /* NULL: not requested */
    flashport_strides qs, ks, vs, os;
    flashport_dtype out_dtype;
    fp_seq_layout seq;
    fp_score_mods mods;
    /* FP8 descales: one factor each, or per (batch, head, block of positions) */
    flashport_descale descale;
    int descale_block, q_blocks, kv_blocks;
    const float *q_descale, *k_descale, *v_descale;
    int heads_kv, group;
    int row_chunks, splits;
    int tile_keys;           /* splits are whole tiles of this many keys */
    float *part_o, *part_ml; /* splits > 1: the split_kv.h workspace */
    int64_t part_rows;
};

/* Row r of a block's row chunk: (head of the group, query position) pairs, head-major, `rows`
 * to a chunk; on = false for rows past the group or past the sequence's queries. The row's
 * offsets are worked out here once, not by every thread that reads or writes it. */
struct fp_decode_row {
    int64_t q_at, o_at; /* offsets of its Q and O rows (0 when not on) */
    int64_t lse_at;     /* its LSE index, which also numbers its split partials */
    int h, i;           /* query head and position (0 when not on) */
    int lo, hi;         /* keys [lo, hi) it sees */
    bool on;
};

/* Shared memory of one block: the ring, reused for the groups' merge once the keys are done,
 * the groups' (m, l), and the block's rows (fp_decode_rows_find). */
template <typename T, int D, int ROWS> struct fp_decode_smem {
    using S = fp_decode_shape<T, D>;
    static constexpr int RING = FP_DECODE_STAGES * FP_DECODE_STAGE_BYTES;
    static constexpr int MERGE = S::GROUPS * ROWS * D * (int)sizeof(float);
    static constexpr int BODY = RING > MERGE ? RING : MERGE;
    static constexpr int STATS = 2 * S::GROUPS * ROWS * (int)sizeof(float);
    static constexpr int BYTES = BODY + STATS + ROWS * (int)sizeof(fp_decode_row);
};

__device__ __forceinline__ float fp_decode_descale(const fp_decode_args &a, const float *f, int b,
                                                   int heads, int h, int blocks, int pos) {
    if (a.descale == FLASHPORT_DESCALE_TENSOR) return f[0];
    return f[((int64_t)b * heads + h) * blocks + pos / a.descale_block];
}

__device__ __forceinline__ void fp_decode_store(void *o, flashport_dtype dt, int64_t i, float x) {
    switch (dt) {
    case FLASHPORT_F16: ((gpuHalf *)o)[i] = fp_from_f32<gpuHalf>(x); break;
    case FLASHPORT_BF16: ((gpuBFloat16 *)o)[i] = fp_from_f32<gpuBFloat16>(x); break;
    default: ((float *)o)[i] = x; break;
    }
}

__device__ __forceinline__ fp_decode_row fp_decode_row_at(const fp_decode_args &a, const fp_seq &s,
                                                          int hk, int chunk, int rows, int r) {
    fp_decode_row x;
    const int flat = chunk * rows + r;
    const int gh = flat / a.seq.seq_q, i = flat % a.seq.seq_q;
    x.on = gh < a.group && i < s.nq;
    x.h = hk * a.group + (x.on ? gh : 0);
    x.i = x.on ? i : 0;
    x.lo = x.hi = 0;
    if (x.on) fp_visible_keys(a.mods, i, s.nq, s.nkv, &x.lo, &x.hi);
    x.q_at = x.on ? fp_q_offset(a.qs, s, x.h, x.i) : 0;
    x.o_at = x.on ? fp_q_offset(a.os, s, x.h, x.i) : 0;
    x.lse_at = fp_lse_index(a.seq, s, x.h, x.i);
    return x;
}

/* What one block works on: its sequence, kv head, row chunk and split, and the split's share
 * [k0, k1) of the keys some row sees. */
struct fp_decode_block {
    fp_seq s;
    int hk, chunk, split;
    int k0, k1;
    int all_lo, all_hi; /* keys every row that is on sees */
};

/* The block's rows, found once: thread r < ROWS works out row r (an integer division and the
 * row's visible keys) into rows[r] in shared memory, and every later use reads it there. Each
 * thread working out every row cost thousands of instructions a block, more than a short
 * split's keys. Ends with a barrier. */
template <int ROWS>
__device__ __forceinline__ void fp_decode_rows_find(const fp_decode_args &a, const fp_seq &s,
                                                    int hk, int chunk, fp_decode_row *rows) {
    static_assert(ROWS <= FP_DECODE_THREADS, "a thread per row");
    if (threadIdx.x < ROWS) rows[threadIdx.x] = fp_decode_row_at(a, s, hk, chunk, ROWS, threadIdx.x);
    __syncthreads();
}

template <int ROWS>
__device__ __forceinline__ fp_decode_block fp_decode_block_setup(const fp_decode_args &a,
                                                                 fp_decode_row *rows) {
    fp_decode_block B;
    int rest = blockIdx.x;
    B.split = rest % a.splits;
    rest /= a.splits;
    B.chunk = rest % a.row_chunks;
    const int bh = rest / a.row_chunks;
    B.hk = bh % a.heads_kv;
    B.s = fp_sequence(a.seq, bh / a.heads_kv);
    fp_decode_rows_find<ROWS>(a, B.s, B.hk, B.chunk, rows);
    int span_lo = INT_MAX, span_hi = 0;
    B.all_lo = 0;
    B.all_hi = INT_MAX;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const fp_decode_row x = rows[r];
        if (!x.on) continue;
        if (x.lo < x.hi) {
            span_lo = min(span_lo, x.lo);
            span_hi = max(span_hi, x.hi);
        }
        B.all_lo = max(B.all_lo, x.lo);
        B.all_hi = min(B.all_hi, x.hi);
    }
    /* An equal share of the span in whole tiles. */
    B.k0 = B.k1 = 0;
    if (span_lo < span_hi) {
        const int span = span_hi - span_lo, tile = a.tile_keys;
        int per = (span + a.splits - 1) / a.splits;
        per = (per + tile - 1) / tile * tile;
        const int64_t first = (int64_t)span_lo + (int64_t)B.split * per;
        B.k0 = first < span_hi ? (int)first : span_hi;
        B.k1 = min(B.k0 + per, span_hi);
    }
    return B;
}

/* Whether keys [j0, j0 + n) lie where every row sees every key: no per-score mask there. */
__device__ __forceinline__ bool fp_decode_full(const fp_decode_block &B, int j0, int n) {
    return j0 >= B.all_lo && j0 + n <= min(B.all_hi, B.k1);
}

/* The end of a block: GROUPS partial results per row, each scaled to the block's maximum (the
 * groups' and, in split 0, the sink's) and stored at merge[(group * ROWS + row) * STRIDE + col],
 * with each group's (m, l) in stat_m, stat_l, are summed and written: as O and LSE with one
 * split, else as the split's partial. Split 0 also counts the sink, a key with a zero value.
 * The block's threads form teams of 32, a row to a team at a time and a column to a lane, so
 * the rows of a group are written side by side; rows past the group or the queries cost
 * nothing. */
template <int GROUPS, int ROWS, int D, int STRIDE = D>
__device__ __forceinline__ void fp_decode_write(const fp_decode_args &a, const fp_decode_block &B,
                                                const fp_decode_row *rows, const float *merge,
                                                const float *stat_m, const float *stat_l) {
    constexpr int TEAM = 32, TEAMS = FP_DECODE_THREADS / TEAM;
    const int team = threadIdx.x / TEAM, lane = threadIdx.x % TEAM;
    for (int r = team; r < ROWS; r += TEAMS) {
        const fp_decode_row x = rows[r];
        if (!x.on) continue;
        const float sink = B.split == 0 ? fp_sink_log2(a.mods, x.h) : -INFINITY;
        float m = sink;
#pragma unroll
        for (int g = 0; g < GROUPS; g++) m = fmaxf(m, stat_m[g * ROWS + r]);
        const float base = m == -INFINITY ? 0.0f : m;
        float l = exp2f(sink - base);
#pragma unroll
        for (int g = 0; g < GROUPS; g++) {
            const float gm = stat_m[g * ROWS + r];
            if (gm != -INFINITY) l += stat_l[g * ROWS + r] * exp2f(gm - base);
        }
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        const int64_t part = (int64_t)B.split * a.part_rows + x.lse_at;
        static_assert(D % TEAM == 0, "whole columns per lane");
#pragma unroll
        for (int c = 0; c < D / TEAM; c++) {
            const int col = c * TEAM + lane;
            float o = 0.0f;
#pragma unroll
            for (int g = 0; g < GROUPS; g++) o += merge[(g * ROWS + r) * STRIDE + col];
            /* A row that saw no key gives 0, even where a hidden value was not finite. */
            o = l == 0.0f ? 0.0f : o * inv;
            if (a.splits == 1)
                fp_decode_store(a.o, a.out_dtype, x.o_at + col, o);
            else
                a.part_o[part * D + col] = o;
        }
        if (lane == 0) {
            if (a.splits == 1) {
                if (a.lse) a.lse[x.lse_at] = l == 0.0f ? -INFINITY : (m + log2f(l)) * FP_LN2;
            } else {
                a.part_ml[2 * part] = l == 0.0f ? -INFINITY : m;
                a.part_ml[2 * part + 1] = l;
            }
        }
    }
}

/* The block's maximum of row r for scaling its groups: the groups' maxima and, in split 0,
 * the sink (fp_decode_write takes the same). */
template <int GROUPS, int ROWS>
__device__ __forceinline__ float fp_decode_block_max(const fp_decode_args &a,
                                                     const fp_decode_block &B, int h, int r,
                                                     const float *stat_m) {
    float m = B.split == 0 ? fp_sink_log2(a.mods, h) : -INFINITY;
    for (int g = 0; g < GROUPS; g++) m = fmaxf(m, stat_m[g * ROWS + r]);
    return m;
}

/* One 16-byte copy into the ring from global src, zeros when bytes is 0 (else 16). CUDA: a
 * cp.async, landed by fp_decode_wait; HIP: a load and a store, done when it returns. */
__device__ __forceinline__ void fp_decode_copy16(char *dst, const void *src, int bytes) {
#if FP_GPU_CUDA
    fp_cp_async_16(fp_smem_addr(dst), src, bytes);
#else
    *reinterpret_cast<uint4 *>(dst) =
        bytes ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0u, 0u, 0u, 0u);
#endif
}

/* The ring's copy groups: committed after each tile's copies, waited for until at most
 * `pending` groups are in flight (nothing to do where the copies are synchronous). */
__device__ __forceinline__ void fp_decode_commit() {
#if FP_GPU_CUDA
    fp_cp_async_commit();
#endif
}

template <int pending> __device__ __forceinline__ void fp_decode_wait() {
#if FP_GPU_CUDA
    fp_cp_async_wait<pending>();
#endif
}

/* 2^x for the softmax weights: one MUFU.EX2 on CUDA (fp_exp2_approx), exp2f on HIP, where it is
 * one v_exp_f32 already. */
__device__ __forceinline__ float fp_decode_exp2(float x) {
#if FP_GPU_CUDA
    return fp_exp2_approx(x);
#else
    return exp2f(x);
#endif
}

/* Starts the copies of keys j0 .. j0 + TILE_KEYS - 1 into k_tile and v_tile; rows at or past
 * k1 are zero-filled without reading. Thread t copies 16-byte vector t % ROW_VECS of every
 * (THREADS / ROW_VECS)-th row, stored in row order, or at the chunk position of
 * mma/fragment_layout.h's swizzle for the tensor-core kernel's ldmatrix reads.
 *
 * Dense and packed K/V rows lie a constant stride apart, so a thread locates its first row of
 * the tile once and steps by the stride from pass to pass; only a paged cache looks up each
 * row's page. Locating every row (64-bit stride products and the layout's tests per copy) was
 * nearly half of the instructions decode_mma executed. */
template <typename T, int D, int TILE_KEYS, bool SWIZZLED>
__device__ __forceinline__ void fp_decode_issue(const fp_decode_args &a, const fp_seq &s, int hk,
                                                int j0, int k1, char *k_tile, char *v_tile) {
    constexpr int N = fp_vec16<T>::N, ROW_VECS = D / N;
    constexpr int ROWS_PER_PASS = FP_DECODE_THREADS / ROW_VECS;
    static_assert(TILE_KEYS % ROWS_PER_PASS == 0, "whole passes");
    const int part = threadIdx.x % ROW_VECS, r0 = threadIdx.x / ROW_VECS;
    auto copy = [&](int pass, const T *k_src, const T *v_src, bool in) {
        const int r = r0 + pass * ROWS_PER_PASS;
        const int dst = SWIZZLED ? fp_mma_swizzle(r, part, ROW_VECS) * (int)sizeof(T)
                                 : (r * ROW_VECS + part) * 16;
        fp_decode_copy16(k_tile + dst, in ? k_src : a.k, in ? 16 : 0);
        fp_decode_copy16(v_tile + dst, in ? v_src : a.v, in ? 16 : 0);
    };
    if (fp_kv_strided(a.seq)) {
        const fp_kv_rows first = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, j0 + r0);
        const T *k_row = (const T *)a.k + first.k + part * N;
        const T *v_row = (const T *)a.v + first.v + part * N;
        const bool whole = j0 + TILE_KEYS <= k1;
#pragma unroll
        for (int pass = 0; pass < TILE_KEYS / ROWS_PER_PASS; pass++) {
            copy(pass, k_row, v_row, whole || j0 + r0 + pass * ROWS_PER_PASS < k1);
            k_row += ROWS_PER_PASS * a.ks.seq;
            v_row += ROWS_PER_PASS * a.vs.seq;
        }
    } else {
#pragma unroll
        for (int pass = 0; pass < TILE_KEYS / ROWS_PER_PASS; pass++) {
            const int j = j0 + r0 + pass * ROWS_PER_PASS;
            const bool in = j < k1;
            const fp_kv_rows at =
                in ? fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, j) : fp_kv_rows{0, 0};
            copy(pass, (const T *)a.k + at.k + part * N, (const T *)a.v + at.v + part * N, in);
        }
    }
}

template <typename T, int D, int ROWS>
__global__ void __launch_bounds__(FP_DECODE_THREADS) fp_decode_kernel(const fp_decode_args a) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(__HIP_DEVICE_COMPILE__)
    using S = fp_decode_shape<T, D>;
    extern __shared__ __align__(16) char smem[];
    using L = fp_decode_smem<T, D, ROWS>;
    float *stat_m = (float *)(smem + L::BODY);
    float *stat_l = stat_m + S::GROUPS * ROWS;
    fp_decode_row *rows = (fp_decode_row *)(smem + L::BODY + L::STATS);
    fp_grid_wait_prior(); /* Q, K, V and the tables may come from the kernel before this one */

    const fp_decode_block B = fp_decode_block_setup<ROWS>(a, rows);
    const int b = B.s.b, hk = B.hk, k0 = B.k0, k1 = B.k1;
    const fp_seq &s = B.s;
    const int group = threadIdx.x / S::LANES, lane = threadIdx.x % S::LANES;
    int row_h[ROWS], row_i[ROWS], row_lo[ROWS], row_hi[ROWS];
    bool row_on[ROWS];
    int64_t row_q[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const fp_decode_row x = rows[r];
        row_q[r] = x.q_at;
        row_h[r] = x.h;
        row_i[r] = x.i;
        row_lo[r] = x.lo;
        row_hi[r] = x.hi;
        row_on[r] = x.on;
    }

    /* Q rows, dequantised, the lane's columns: vector v of the lane is row vector
     * v * LANES + lane. */
    float q[ROWS][S::ELEMS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const T *qr = (const T *)a.q + row_q[r];
        float qd = 1.0f;
        if constexpr (fp_is_fp8<T>::value)
            if (row_on[r])
                qd = fp_decode_descale(a, a.q_descale, b, a.seq.heads_q, row_h[r], a.q_blocks,
                                       row_i[r]);
#pragma unroll
        for (int v = 0; v < S::VECS; v++)
#pragma unroll
            for (int n = 0; n < S::N; n++)
                q[r][v * S::N + n] =
                    row_on[r] ? fp_elem_f32(qr[(v * S::LANES + lane) * S::N + n]) * qd : 0.0f;
    }

    fp_softmax_row st[ROWS];
    float acc[ROWS][S::ELEMS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        st[r] = fp_softmax_start();
#pragma unroll
        for (int e = 0; e < S::ELEMS; e++) acc[r][e] = 0.0f;
    }

    const int tiles = (k1 - k0 + S::TILE_KEYS - 1) / S::TILE_KEYS;
    auto issue = [&](int tile, int slot) {
        char *k_tile = smem + slot * FP_DECODE_STAGE_BYTES;
        fp_decode_issue<T, D, S::TILE_KEYS, false>(a, s, hk, k0 + tile * S::TILE_KEYS, k1, k_tile,
                                                   k_tile + FP_DECODE_STAGE_BYTES / 2);
    };
    /* Not unrolled, as in decode_mma_kernel.cuh: one copy of the issue code to fetch. */
#pragma unroll 1
    for (int t = 0; t < FP_DECODE_STAGES - 1; t++) {
        if (t < tiles) issue(t, t);
        fp_decode_commit();
    }
    const bool plain = !fp_score_mods_any(a.mods);
    for (int t = 0; t < tiles; t++) {
        fp_decode_wait<FP_DECODE_STAGES - 2>();
        __syncthreads();
        const int next = t + FP_DECODE_STAGES - 1;
        if (next < tiles) issue(next, next % FP_DECODE_STAGES);
        fp_decode_commit();

        const char *k_tile = smem + (t % FP_DECODE_STAGES) * FP_DECODE_STAGE_BYTES;
        const char *v_tile = k_tile + FP_DECODE_STAGE_BYTES / 2;
        const int tile_j0 = k0 + t * S::TILE_KEYS;
        /* Most tiles lie where every row sees every key: no per-score mask there. */
        const bool full = fp_decode_full(B, tile_j0, S::TILE_KEYS);

        /* Scores of this group's keys c * GROUPS + group of the tile. */
        float sc[S::KEYS_PER_GROUP][ROWS];
#pragma unroll
        for (int c = 0; c < S::KEYS_PER_GROUP; c++) {
            const int key = c * S::GROUPS + group, j = tile_j0 + key;
            float kf[S::ELEMS];
#pragma unroll
            for (int v = 0; v < S::VECS; v++) {
                const uint4 raw =
                    *(const uint4 *)(k_tile + (key * S::ROW_VECS + v * S::LANES + lane) * 16);
                float part[S::N];
                fp_unpack<T>::run(raw, part);
#pragma unroll
                for (int n = 0; n < S::N; n++) kf[v * S::N + n] = part[n];
            }
            float kd = 1.0f;
            if constexpr (fp_is_fp8<T>::value)
                if (j < k1)
                    kd = fp_decode_descale(a, a.k_descale, b, a.heads_kv, hk, a.kv_blocks, j);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < S::ELEMS; e++) dot = fmaf(q[r][e], kf[e], dot);
#pragma unroll
                for (int off = S::LANES / 2; off > 0; off /= 2) dot += FP_SHFL_XOR(dot, off, 32);
                const bool seen = full || (j >= row_lo[r] && j < row_hi[r] && j < k1);
                float x = -INFINITY;
                if (seen)
                    x = plain ? dot * kd * a.mods.scale * FP_LOG2E
                              : fp_score_log2(a.mods, dot * kd, b, row_h[r], row_i[r], j, s.nq,
                                              s.nkv);
                sc[c][r] = x;
            }
        }

        /* One rescale per tile and row, then the weighted values. */
        float w[S::KEYS_PER_GROUP][ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int c = 0; c < S::KEYS_PER_GROUP; c++) tile_max = fmaxf(tile_max, sc[c][r]);
            const float alpha = fp_softmax_advance(st[r], tile_max);
            const float base = fp_softmax_base(st[r]);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < S::KEYS_PER_GROUP; c++) {
                w[c][r] = fp_decode_exp2(sc[c][r] - base);
                sum += w[c][r];
            }
            fp_softmax_add(st[r], sum);
#pragma unroll
            for (int e = 0; e < S::ELEMS; e++) acc[r][e] *= alpha;
        }
#pragma unroll
        for (int c = 0; c < S::KEYS_PER_GROUP; c++) {
            const int key = c * S::GROUPS + group, j = tile_j0 + key;
            float vd = 1.0f;
            if constexpr (fp_is_fp8<T>::value)
                if (j < k1)
                    vd = fp_decode_descale(a, a.v_descale, b, a.heads_kv, hk, a.kv_blocks, j);
#pragma unroll
            for (int v = 0; v < S::VECS; v++) {
                const uint4 raw =
                    *(const uint4 *)(v_tile + (key * S::ROW_VECS + v * S::LANES + lane) * 16);
                float vf[S::N];
                fp_unpack<T>::run(raw, vf);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    const float p = w[c][r] * vd;
#pragma unroll
                    for (int n = 0; n < S::N; n++)
                        acc[r][v * S::N + n] = fmaf(p, vf[n], acc[r][v * S::N + n]);
                }
            }
        }
    }
    fp_decode_wait<0>();
    fp_grid_release_next(); /* the next kernel (the split merge) may be scheduled */
    __syncthreads(); /* the ring becomes the merge buffer */

    /* Merge the groups: each scales its accumulators to the block's maximum, then the columns
     * are summed across groups. Split 0 also counts the sink, a key with a zero value. */
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            stat_m[group * ROWS + r] = st[r].m;
            stat_l[group * ROWS + r] = st[r].l;
        }
    __syncthreads();
    float *merge = (float *)smem;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const float m = fp_decode_block_max<S::GROUPS, ROWS>(a, B, row_h[r], r, stat_m);
        const float f = st[r].m == -INFINITY ? 0.0f : exp2f(st[r].m - m);
#pragma unroll
        for (int v = 0; v < S::VECS; v++)
#pragma unroll
            for (int n = 0; n < S::N; n++)
                merge[(group * ROWS + r) * D + (v * S::LANES + lane) * S::N + n] =
                    acc[r][v * S::N + n] * f;
    }
    __syncthreads();

    fp_decode_write<S::GROUPS, ROWS, D>(a, B, rows, merge, stat_m, stat_l);
#else
    (void)a; /* the host pass of a HIP build */
#endif
}

#endif /* FP_DECODE_KERNEL_CUH */
