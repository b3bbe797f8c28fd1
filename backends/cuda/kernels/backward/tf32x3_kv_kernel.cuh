/*
 * FlashAttention-2 backward for f32 on the tensor cores with the 3xTF32 split, key-tile kernel
 * (variant backward_tf32x3): the walk of backward_mma's key-tile kernel (mma_kv_kernel.cuh) with
 * f32 tiles and every product on mma.sync m16n8k8 .tf32, each operand split into two tf32
 * halves and each product issued as three mma (tf32x3/tf32_split.cuh), small terms first.
 *
 * One block per (key tile of FP_BWD_TF32X3_KEYS keys, batch, kv head), eight warps in four
 * pairs of 16 keys. K and V stay in shared memory; the block walks every query tile of BR rows
 * (fp_bwd_tf32x3_kv_tile) that sees one of its keys, for each query head of the group in order,
 * through a two-stage cp.async ring (Q, dO, and the rows' LSE and D). Per query tile each warp of
 * a pair computes
 *   S^T = K Q^T and dP^T = V dO^T    for its pair's 16 keys and half of the queries, contracted
 *                                    over d in the forward's S = Q K^T order (16-byte loads of
 *                                    both operands' swizzled rows);
 *   P^T, dS^T elementwise (tile_math.cuh), stored to shared memory as f32 [key][query]
 *                                    (tf32x3_layout.h): P and dS are f32 values, split like any
 *                                    other operand when read back;
 *   dV += P^T dO and dK += dS^T Q    for its pair's keys and half of the head columns,
 *                                    contracted over the queries in the forward's O = P V order
 *                                    (A: 8-byte pairs of P^T, dS^T; B: 16-byte loads of dO, Q
 *                                    giving four n-tiles, whose columns are permuted as O's);
 * the last two summed in fresh accumulators over the tile and added to dK and dV in f32, as the
 * forward adds each key tile's P V to O (mma.sync's accumulation is not rounded as an f32 add,
 * so summing every query's products straight into dK and dV would let the error grow with the
 * queries). dK and dV stay in registers for the whole walk, so GQA sums its heads in a fixed
 * order.
 * DQ_ATOMIC (fast mode): each warp then computes dQ = dS K over the tile's keys for a warp tile
 * of 16 queries by 32 head columns (A: dS read one float a lane from dS^T; B: K one float a lane)
 * and adds it to the f32 accumulator in fragment tiles, one 16-byte atomic a lane and tile
 * (dq_tiles.cuh); query tiles start on its row blocks. Without it (deterministic mode)
 * tf32x3_q_kernel.cuh computes dQ.
 *
 * Every layout and mask goes through the shared headers (kv_addressing.cuh, score_mods.cuh,
 * score.cuh, tile_math.cuh); tiles that every row sees whole skip the mask.
 */
#ifndef FP_BACKWARD_TF32X3_KV_KERNEL_CUH
#define FP_BACKWARD_TF32X3_KV_KERNEL_CUH

#include <type_traits>

#include "../common/online_softmax_rows.cuh"
#include "../tf32x3/tf32_split.cuh"
#include "../tf32x3/tile_load.cuh"
#include "../tf32x3/warp_steps.cuh"
#include "dq_tiles.cuh"
#include "tf32x3_layout.h"
#include "tile_math.cuh"

#define FP_BWD_TF32X3_WARPS   8
#define FP_BWD_TF32X3_THREADS (32 * FP_BWD_TF32X3_WARPS)
#define FP_BWD_TF32X3_KEYS    (8 * FP_BWD_TF32X3_WARPS) /* four pairs of 16 keys */

/* The key-tile kernel's tiles for head dim D, and its shared memory: K, V (2 BC D floats), two
 * stages of Q and dO (4 BR D), P^T and dS^T (2 BC (BR + 8)), two stages of the rows' LSE and D
 * (4 BR). f32 doubles backward_mma's bytes a tile, so the keys are halved (64) and the query
 * rows a step sized to fit: 32 at d = 128 (152,064 bytes), 64 at d = 64 (136,192 bytes), both
 * within the 163 KB a block of sm_80 and the 227 KB of sm_90; a device with less declines
 * (backward_tf32x3.cu). Registers are not the limit here (dK and dV take D / 2 a thread, S^T and
 * dP^T BR / 4): shared memory is, and with it one block of eight warps an SM. */
template <int D> struct fp_bwd_tf32x3_kv_tile {
    static constexpr int BC = FP_BWD_TF32X3_KEYS;
    static constexpr int BR = D > 64 ? 32 : 64;
    static constexpr int LD = FP_BWD_TF32_PT_LD(BR);
    static constexpr int STAGES = 2;
    static constexpr size_t BYTES =
        (size_t)4 * (2 * BC * D + STAGES * 2 * BR * D + 2 * BC * LD + STAGES * 2 * BR);
};

template <int D, bool MODS, bool DQ_ATOMIC>
__global__ void __launch_bounds__(FP_BWD_TF32X3_THREADS, 1)
    fp_bwd_tf32x3_kv_kernel(const fp_bwd_params a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using Tile = fp_bwd_tf32x3_kv_tile<D>;
    constexpr int BC = Tile::BC, BR = Tile::BR, LD = Tile::LD, STAGES = Tile::STAGES;
    constexpr int THREADS = FP_BWD_TF32X3_THREADS, WARPS = FP_BWD_TF32X3_WARPS;
    constexpr int CPR = D / 4;                    /* 16-byte chunks a row of K, V, Q, dO */
    constexpr int QH = BR / 2, QH_TILES = QH / 8; /* queries (n-tiles) of S^T a warp */
    constexpr int DH = D / 2, DH_GROUPS = DH / 32, DH_TILES = DH / 8; /* dK, dV columns a warp */
    /* dQ: the query tile in warp tiles of 16 rows by DQ_COLS head columns. */
    constexpr int DQ_ROW_TILES = BR / 16, DQ_COLS = D / (WARPS / DQ_ROW_TILES);
    constexpr int DQ_TILES = DQ_COLS / 8;
    static_assert(BC == 16 * (WARPS / 2), "pairs of warps own 16 keys each");
    static_assert(BR % 32 == 0 && D % 64 == 0, "whole column groups a warp, conflict-free P^T");
    static_assert(WARPS % DQ_ROW_TILES == 0 && DQ_COLS % 8 == 0, "dQ's warp tiles cover the tile");
    static_assert(THREADS >= 2 * BR, "one thread copies each row's LSE or D");

    extern __shared__ __align__(16) float fp_bwd_tf32x3_smem[];
    float *const sK = fp_bwd_tf32x3_smem, *const sV = sK + BC * D;
    float *const sStages = sV + BC * D; /* stage st: Q at sStages + st * 2 BR D, dO after it */
    float *const sP = sStages + STAGES * 2 * BR * D;
    float *const sDS = sP + BC * LD;
    float *const sRows = sDS + BC * LD; /* stage st: LSE at sRows + st * 2 BR, then D */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int heads_kv = a.seq.heads_q / a.group;
    const int b = blockIdx.y / heads_kv, hk = blockIdx.y % heads_kv;
    const fp_seq s = fp_sequence(a.seq, b);
    const int k0 = blockIdx.x * BC;
    if (k0 >= s.nkv) return; /* the grid covers the longest sequence */
    const int n_keys = min(BC, s.nkv - k0);

    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0);
    fp_tf32x3_load_rows<true, BC, D, THREADS, 2>(
        sK,
        fp_strided_rows<float, 2>{
            {static_cast<const float *>(a.k) + kv0.k, static_cast<const float *>(a.v) + kv0.v},
            {a.ks.seq, a.vs.seq}},
        n_keys, a.d);
    fp_bwd_rows rows = fp_bwd_rows_seeing(a.mods, k0, k0 + n_keys, s.nq, s.nkv);
    rows.lo -= rows.lo % FP_BWD_DQ_TILE_ROWS; /* the rows added lie before the band: masked */
    const int q_tiles = (rows.hi - rows.lo + BR - 1) / BR;
    const int n_steps = a.group * q_tiles;
    /* Step n is query tile n % q_tiles of the group's head n / q_tiles, walked by
     * fp_bwd_next_step for the loads and the compute alike. */
    const int q_end = rows.lo + q_tiles * BR;
    int load_h = hk * a.group, load_q0 = rows.lo;

    auto load_step = [&](int n) {
        const int h = load_h, q0 = load_q0;
        fp_bwd_next_step(load_h, load_q0, BR, rows.lo, q_end);
        /* Rows past the sequence are zero-filled; p_ds masks them (fp_bwd_tile_full). */
        fp_tf32x3_load_rows<true, BR, D, THREADS, 2>(
            sStages + (n % STAGES) * 2 * BR * D,
            fp_strided_rows<float, 2>{
                {static_cast<const float *>(a.q) + fp_q_offset(a.qs, s, h, q0),
                 static_cast<const float *>(a.d_o) + fp_q_offset(a.os, s, h, q0)},
                {a.qs.seq, a.os.seq}},
            s.nq - q0, a.d);
        if (threadIdx.x < 2 * BR) {
            const int r = threadIdx.x % BR;
            const bool in = q0 + r < s.nq;
            const float *src = threadIdx.x < BR ? a.lse_log2 : a.delta;
            fp_cp_async_4(fp_smem_addr(sRows + (n % STAGES) * 2 * BR + threadIdx.x),
                          src + (in ? fp_lse_index(a.seq, s, h, q0 + r) : 0), in ? 4 : 0);
        }
    };
    /* Group 0 holds step 0 and K, V; an empty group keeps the count uniform. */
    if (n_steps > 0) load_step(0);
    fp_cp_async_commit();

    /* Pair kg owns keys [16 kg, 16 kg + 16) of the tile; for S^T and dP^T warp `half` of the
     * pair takes queries [half QH, half QH + QH), for dK and dV head columns
     * [half DH, half DH + DH) (column groups half DH_GROUPS ..). */
    const int kg = warp >> 1, half = warp & 1;
    const int key_row = 16 * kg + g; /* tile row of accumulator row g */
    const int dq_row0 = 16 * (warp % DQ_ROW_TILES), dq_col0 = warp / DQ_ROW_TILES * DQ_COLS;
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);
    const int key_lo = k0 + key_row;

    float dk[DH_TILES][4], dv[DH_TILES][4];
    fp_mma_zero(dk);
    fp_mma_zero(dv);
    int h = hk * a.group, q0 = rows.lo;
    for (int n = 0; n < n_steps; ++n, fp_bwd_next_step(h, q0, BR, rows.lo, q_end)) {
        fp_cp_async_wait<0>();
        __syncthreads(); /* step n has landed, and every warp is done with step n - 1 */
        if (n + 1 < n_steps) load_step(n + 1);
        fp_cp_async_commit();
        const float *const sQ = sStages + (n % STAGES) * 2 * BR * D, *const sO = sQ + BR * D;
        const float *const sLse = sRows + (n % STAGES) * 2 * BR, *const sDelta = sLse + BR;

        /* S^T and dP^T over d, 32 columns (four k-steps) at a time: chunk `hf` of a lane's
         * 8 columns is k-steps 2 hf, 2 hf + 1 (fp_tf32_qk_chunk). */
        float st[QH_TILES][4], dpt[QH_TILES][4];
        fp_mma_zero(st);
        fp_mma_zero(dpt);
#pragma unroll
        for (int u = 0; u < D / 32; ++u)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int chunk = fp_tf32_qk_chunk(lane, u, hf);
                float4 x[2][2]; /* [K, V][rows g, g + 8] */
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int at = fp_tf32_swizzle(key_row + 8 * r, chunk, CPR);
                    x[0][r] = fp_tf32x3_lds(sK + at);
                    x[1][r] = fp_tf32x3_lds(sV + at);
                }
                fp_tf32_pair ak[2][2][4]; /* [K, V][k-step][register] */
#pragma unroll
                for (int m = 0; m < 2; ++m) {
                    ak[m][0][0] = fp_tf32_split(x[m][0].x);
                    ak[m][0][1] = fp_tf32_split(x[m][1].x);
                    ak[m][0][2] = fp_tf32_split(x[m][0].y);
                    ak[m][0][3] = fp_tf32_split(x[m][1].y);
                    ak[m][1][0] = fp_tf32_split(x[m][0].z);
                    ak[m][1][1] = fp_tf32_split(x[m][1].z);
                    ak[m][1][2] = fp_tf32_split(x[m][0].w);
                    ak[m][1][3] = fp_tf32_split(x[m][1].w);
                }
                fp_tf32_pair bq[QH_TILES][4], bo[QH_TILES][4];
#pragma unroll
                for (int nt = 0; nt < QH_TILES; ++nt) {
                    const int at = fp_tf32_swizzle(half * QH + 8 * nt + g, chunk, CPR);
                    const float4 q = fp_tf32x3_lds(sQ + at), o = fp_tf32x3_lds(sO + at);
                    bq[nt][0] = fp_tf32_split(q.x);
                    bq[nt][1] = fp_tf32_split(q.y);
                    bq[nt][2] = fp_tf32_split(q.z);
                    bq[nt][3] = fp_tf32_split(q.w);
                    bo[nt][0] = fp_tf32_split(o.x);
                    bo[nt][1] = fp_tf32_split(o.y);
                    bo[nt][2] = fp_tf32_split(o.z);
                    bo[nt][3] = fp_tf32_split(o.w);
                }
#pragma unroll
                for (int step = 0; step < 2; ++step)
#pragma unroll
                    for (int term = 0; term < 3; ++term)
#pragma unroll
                        for (int nt = 0; nt < QH_TILES; ++nt) {
                            fp_mma_3xtf32_term(st[nt], ak[0][step], bq[nt][2 * step],
                                               bq[nt][2 * step + 1], term);
                            fp_mma_3xtf32_term(dpt[nt], ak[1][step], bo[nt][2 * step],
                                               bo[nt][2 * step + 1], term);
                        }
            }

        /* Two copies of the pass: tiles every row sees whole take no per-element test. */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int nt = 0; nt < QH_TILES; ++nt) {
                const int ql = half * QH + 8 * nt + 2 * c;
                const float2 lse = *reinterpret_cast<const float2 *>(sLse + ql);
                const float2 delta = *reinterpret_cast<const float2 *>(sDelta + ql);
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = q0 + ql + (r & 1), j = key_lo + 8 * (r >> 1);
                    const bool seen = !decltype(masked)::value ||
                                      (i < s.nq && j < s.nkv && fp_in_band(band, i, j));
                    fp_bwd_p_ds<MODS>(a, s.b, h, s.nq, s.nkv, i, j, seen, (r & 1) ? lse.y : lse.x,
                                      (r & 1) ? delta.y : delta.x, st[nt][r], dpt[nt][r]);
                }
            }
        };
        if (fp_bwd_tile_full(band, q0, BR, k0, BC, s.nq, s.nkv)) {
            p_ds(std::false_type{});
        } else {
            p_ds(std::true_type{});
        }

        /* P^T and dS^T in f32: registers 2i, 2i + 1 are queries 8 nt + 2c, + 1 of key row
         * g + 8i, one 8-byte store each. */
#pragma unroll
        for (int nt = 0; nt < QH_TILES; ++nt)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int at = fp_bwd_tf32_pt_at(key_row + 8 * i, half * QH + 8 * nt + 2 * c, LD);
                *reinterpret_cast<float2 *>(sP + at) =
                    make_float2(st[nt][2 * i], st[nt][2 * i + 1]);
                *reinterpret_cast<float2 *>(sDS + at) =
                    make_float2(dpt[nt][2 * i], dpt[nt][2 * i + 1]);
            }
        __syncthreads(); /* P^T and dS^T of every warp are in place */

        /* dV and dK of the tile over its queries, k-step t = queries 8t .. 8t + 7 (k = c:
         * 8t + 2c, k = c + 4: 8t + 2c + 1, fp_tf32_pv_key), in fresh accumulators. */
        float dvt[DH_TILES][4], dkt[DH_TILES][4];
        fp_mma_zero(dvt);
        fp_mma_zero(dkt);
#pragma unroll
        for (int t = 0; t < BR / 8; ++t) {
            const int qk = 8 * t + fp_tf32_pv_key(lane, 0);
            fp_tf32_pair ap[4], ads[4];
            {
                const float2 p0 =
                    *reinterpret_cast<const float2 *>(sP + fp_bwd_tf32_pt_at(key_row, qk, LD));
                const float2 p1 =
                    *reinterpret_cast<const float2 *>(sP + fp_bwd_tf32_pt_at(key_row + 8, qk, LD));
                const float2 d0 =
                    *reinterpret_cast<const float2 *>(sDS + fp_bwd_tf32_pt_at(key_row, qk, LD));
                const float2 d1 =
                    *reinterpret_cast<const float2 *>(sDS + fp_bwd_tf32_pt_at(key_row + 8, qk, LD));
                ap[0] = fp_tf32_split(p0.x);
                ap[1] = fp_tf32_split(p1.x);
                ap[2] = fp_tf32_split(p0.y);
                ap[3] = fp_tf32_split(p1.y);
                ads[0] = fp_tf32_split(d0.x);
                ads[1] = fp_tf32_split(d1.x);
                ads[2] = fp_tf32_split(d0.y);
                ads[3] = fp_tf32_split(d1.y);
            }
#pragma unroll
            for (int wl = 0; wl < DH_GROUPS; ++wl) {
                /* Float e of the chunks of rows qk, qk + 1 is b0, b1 of n-tile 4 wl + e. */
                const int chunk = fp_tf32_v_chunk(lane, half * DH_GROUPS + wl);
                const int at0 = fp_tf32_swizzle(qk, chunk, CPR);
                const int at1 = fp_tf32_swizzle(qk + 1, chunk, CPR);
                const float4 o0 = fp_tf32x3_lds(sO + at0), o1 = fp_tf32x3_lds(sO + at1);
                const float4 q0v = fp_tf32x3_lds(sQ + at0), q1v = fp_tf32x3_lds(sQ + at1);
                const fp_tf32_pair bo0[4] = {fp_tf32_split(o0.x), fp_tf32_split(o0.y),
                                             fp_tf32_split(o0.z), fp_tf32_split(o0.w)};
                const fp_tf32_pair bo1[4] = {fp_tf32_split(o1.x), fp_tf32_split(o1.y),
                                             fp_tf32_split(o1.z), fp_tf32_split(o1.w)};
                const fp_tf32_pair bq0[4] = {fp_tf32_split(q0v.x), fp_tf32_split(q0v.y),
                                             fp_tf32_split(q0v.z), fp_tf32_split(q0v.w)};
                const fp_tf32_pair bq1[4] = {fp_tf32_split(q1v.x), fp_tf32_split(q1v.y),
                                             fp_tf32_split(q1v.z), fp_tf32_split(q1v.w)};
#pragma unroll
                for (int term = 0; term < 3; ++term)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        fp_mma_3xtf32_term(dvt[4 * wl + e], ap, bo0[e], bo1[e], term);
                        fp_mma_3xtf32_term(dkt[4 * wl + e], ads, bq0[e], bq1[e], term);
                    }
            }
        }
#pragma unroll
        for (int dt = 0; dt < DH_TILES; ++dt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                dv[dt][r] += dvt[dt][r];
                dk[dt][r] += dkt[dt][r];
            }

        if (DQ_ATOMIC) {
            /* dQ = dS K over the tile's keys, k-step t = keys 8t .. 8t + 7 in the same order:
             * A from dS^T one float a lane (query rows g, g + 8 of the warp tile), B from K. */
            float dq[DQ_TILES][4];
            fp_mma_zero(dq);
#pragma unroll
            for (int t = 0; t < BC / 8; ++t) {
                const int kk = 8 * t + fp_tf32_pv_key(lane, 0);
                const int qr = dq_row0 + g;
                const fp_tf32_pair ads[4] = {
                    fp_tf32_split(sDS[fp_bwd_tf32_pt_at(kk, qr, LD)]),
                    fp_tf32_split(sDS[fp_bwd_tf32_pt_at(kk, qr + 8, LD)]),
                    fp_tf32_split(sDS[fp_bwd_tf32_pt_at(kk + 1, qr, LD)]),
                    fp_tf32_split(sDS[fp_bwd_tf32_pt_at(kk + 1, qr + 8, LD)])};
                fp_tf32_pair bk[DQ_TILES][2];
#pragma unroll
                for (int nt = 0; nt < DQ_TILES; ++nt) {
                    const int col = dq_col0 + 8 * nt + g;
                    bk[nt][0] = fp_tf32_split(sK[fp_bwd_tf32_elem(kk, col, CPR)]);
                    bk[nt][1] = fp_tf32_split(sK[fp_bwd_tf32_elem(kk + 1, col, CPR)]);
                }
#pragma unroll
                for (int term = 0; term < 3; ++term)
#pragma unroll
                    for (int nt = 0; nt < DQ_TILES; ++nt)
                        fp_mma_3xtf32_term(dq[nt], ads, bk[nt][0], bk[nt][1], term);
            }
            /* Rows past the sequence add their dS = 0 to padding rows of their row block. */
            const int row = q0 + dq_row0;
            if (row < s.nq) {
                float *const tile = fp_bwd_dq_tile(a, s, h, row / FP_BWD_DQ_TILE_ROWS,
                                                   dq_col0 / FP_BWD_DQ_TILE_COLS);
#pragma unroll
                for (int nt = 0; nt < DQ_TILES; ++nt)
                    fp_bwd_dq_tile_add(tile + FP_BWD_DQ_TILE * nt, lane, dq[nt]);
            }
        }
    }
    fp_cp_async_wait<0>();

    /* dK = scale dS^T Q and dV: registers 2i + e of the n-tiles 4 wl .. 4 wl + 3 are four
     * consecutive columns (fp_tf32_o_col), one 16-byte store (the strides are multiples of 4
     * floats and d = D). */
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int j = key_lo + 8 * i;
        if (j >= s.nkv) continue;
        const fp_kv_rows out = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, j);
        float *const gdk = static_cast<float *>(a.d_k) + out.k + half * DH;
        float *const gdv = static_cast<float *>(a.d_v) + out.v + half * DH;
#pragma unroll
        for (int wl = 0; wl < DH_GROUPS; ++wl) {
            const int col0 = fp_tf32_o_col(lane, 4 * wl, 2 * i);
            fp_tf32x3_store_group<DH_TILES>(gdk, dk, wl, i, col0, a.mods.scale, true, DH);
            fp_tf32x3_store_group<DH_TILES>(gdv, dv, wl, i, col0, 1.0f, true, DH);
        }
    }
#endif
}

#endif /* FP_BACKWARD_TF32X3_KV_KERNEL_CUH */
