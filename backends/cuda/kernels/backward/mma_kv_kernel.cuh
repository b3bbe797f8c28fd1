/*
 * FlashAttention-2 backward on the tensor cores, key-tile kernel (variant backward_mma): one
 * block per (key tile of fp_bwd_mma_kv_keys keys, batch, kv head), eight warps in four pairs of
 * 32 keys each (16 at d = 256). K and V of the tile stay in shared memory; the block walks every
 * query tile of BR rows (fp_bwd_mma_kv_rows) that sees one of its keys, for each query head of
 * the kv head's group in order, through a cp.async ring of fp_bwd_mma_kv_stages (Q, dO, and the
 * rows' LSE and D from the preprocessing). dK and dV stay in f32 registers for the whole walk
 * (each warp of a pair holds its keys' half of the head columns), so GQA sums its group's heads
 * in a fixed order.
 *
 * Per query tile, with keys as the rows (M) of mma.sync m16n8k16, each warp of a pair computes
 *   S^T = K Q^T and dP^T = V dO^T for its pair's keys and half of the queries
 *                                       (A: K, V by ldmatrix; B: Q, dO as in the forward's K),
 *   P^T, dS^T elementwise (backward/tile_math.cuh), stored to shared memory as [key][query]
 *                                       (rows padded by 16 bytes: the eight rows of an ldmatrix
 *                                       phase, and the lanes of a store, fall in distinct banks),
 * and after the block's barrier, for its pair's keys and half of the head columns,
 *   dV += P^T dO and dK += dS^T Q       (A: P^T, dS^T by ldmatrix; B: dO, Q by ldmatrix.trans).
 * Against a warp that owns 16 keys with every query and column, a warp loads half the B
 * fragments per MMA at the price of A fragments from shared memory: at d = 128 and 64 rows,
 * these four products load 112 ldmatrix.x4 a warp and step instead of 144 for the same 256 MMAs
 * (shared-memory reads are its busiest unit), and 16 more four-byte stores (P^T).
 * DQ_ATOMIC (fast mode): each warp then computes dQ = dS K over the tile's keys for a warp tile
 * of 16 or 32 queries by a share of the columns (A: dS by ldmatrix.trans of dS^T, which hands out
 * exactly the A fragment; B: K by ldmatrix.trans) and adds it to the f32 accumulator, one
 * 16-byte atomic a lane and accumulator tile (dq_tiles.cuh). Query tiles start on the
 * accumulator's row blocks: the first row that sees the key tile is rounded down to one.
 * Without it (deterministic mode) mma_q_kernel.cuh computes dQ.
 *
 * Every layout and mask goes through the forward's shared headers (kv_addressing.cuh,
 * score_mods.cuh); tiles that every row sees whole skip the mask.
 *
 * PAD: the head dim d is below D (a multiple of 8, run on this instance): every tile is loaded
 * with its columns past d zero, so they add nothing to S^T or dP^T, and nothing past d is stored.
 * The products still run over all D columns: breaking their unrolled loops at d measured slower
 * than the zeros they skip (bench/results/2026-12-06_h100_backward-mma-padded-head-dims.md). The
 * instances without PAD are the same code as before head dims below D were taken.
 */
#ifndef FP_BACKWARD_MMA_KV_KERNEL_CUH
#define FP_BACKWARD_MMA_KV_KERNEL_CUH

#include <type_traits>

#include "../common/online_softmax_rows.cuh"
#include "../mma/fragment_layout.h"
#include "../mma/mma_ops.cuh"
#include "../mma/tile_loader.cuh"
#include "dq_tiles.cuh"
#include "mma_common.cuh"

template <int D, int BR> struct fp_bwd_mma_kv_smem {
    static constexpr int BC = fp_bwd_mma_kv_keys<D>();
    static constexpr int DS_LD = BR + 8; /* elements a row of dS^T and of P^T */
    static constexpr int STAGES = fp_bwd_mma_kv_stages<D>();
    /* K, V; the stages of Q, dO; dS^T, P^T; the stages of LSE and D (f32). */
    static constexpr size_t BYTES =
        (size_t)2 * (2 * BC * D + STAGES * 2 * BR * D + 2 * BC * DS_LD) +
        (size_t)4 * STAGES * 2 * BR;
};

template <typename T, int D, int BR, bool MODS, bool DQ_ATOMIC, bool PAD>
__global__ void __launch_bounds__(FP_BWD_MMA_KV_THREADS, 1)
    fp_bwd_mma_kv_kernel(const fp_bwd_params a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int BC = fp_bwd_mma_kv_keys<D>();
    constexpr int THREADS = FP_BWD_MMA_KV_THREADS, WARPS = FP_BWD_MMA_KV_WARPS;
    constexpr int STAGES = fp_bwd_mma_kv_stages<D>();
    static_assert(STAGES >= 2, "the ring needs a stage to compute and one to fill");
    constexpr int CPR = D / 8; /* 16-byte chunks a row of K, V, Q, dO */
    constexpr int DS_LD = fp_bwd_mma_kv_smem<D, BR>::DS_LD;
    constexpr int PAIR_KEYS = 2 * BC / WARPS;     /* keys of a warp pair */
    constexpr int M_TILES = PAIR_KEYS / 16;       /* m-tiles of S^T, dP^T, dK, dV a warp */
    constexpr int QH = BR / 2, QH_TILES = QH / 8; /* queries (n-tiles) of S^T a warp */
    constexpr int DH = D / 2, DH_TILES = DH / 8;  /* head columns (n-tiles) of dK, dV a warp */
    constexpr int QK_STEPS = D / 16;              /* k-steps of S^T and dP^T */
    constexpr int ROW_STEPS = BR / 16;            /* k-steps of dV and dK */
    /* dQ: the query tile in warp tiles of DQ_MT m-tiles by DQ_COLS head columns
     * (fp_bwd_mma_dq_mtiles). */
    constexpr int DQ_MT = fp_bwd_mma_dq_mtiles<D>(), DQ_ROW_TILES = BR / (16 * DQ_MT);
    constexpr int DQ_COLS = D / (WARPS / DQ_ROW_TILES), DQ_TILES = DQ_COLS / 8;
    static_assert(WARPS % 2 == 0 && PAIR_KEYS % 16 == 0, "warp pairs own whole m-tiles of keys");
    static_assert(QH_TILES % 2 == 0 && DH_TILES % 2 == 0, "a warp's columns are whole x4 loads");
    static_assert(BR % (16 * DQ_MT) == 0 && WARPS % DQ_ROW_TILES == 0 && DQ_TILES % 2 == 0,
                  "dQ's warp tiles cover the query tile evenly, in whole x4 loads of K");
    static_assert(THREADS >= 2 * BR, "one thread copies each row's LSE or D");
    using Ops = fp_mma_ops<T>;
    using KVLoader = fp_tile_loader<T, BC, D, THREADS>;
    using QLoader = fp_tile_loader<T, BR, D, THREADS>;

    extern __shared__ __align__(128) unsigned char fp_bwd_mma_smem[];
    T *const sK = reinterpret_cast<T *>(fp_bwd_mma_smem);
    T *const sStages = sK + 2 * BC * D; /* stage st: Q at sStages + st * 2 BR D, dO after it */
    T *const sDS = sStages + STAGES * 2 * BR * D;
    T *const sP = sDS + BC * DS_LD;
    float *const sRows = reinterpret_cast<float *>(sP + BC * DS_LD); /* stage st: LSE, then D */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int heads_kv = a.seq.heads_q / a.group;
    const int b = blockIdx.y / heads_kv, hk = blockIdx.y % heads_kv;
    const fp_seq s = fp_sequence(a.seq, b);
    const int k0 = blockIdx.x * BC;
    if (k0 >= s.nkv) return; /* the grid covers the longest sequence */
    const int n_keys = min(BC, s.nkv - k0);

    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0);
    KVLoader::template load<true, 2>(sK,
                                     fp_strided_rows<T, 2>{{static_cast<const T *>(a.k) + kv0.k,
                                                            static_cast<const T *>(a.v) + kv0.v},
                                                           {a.ks.seq, a.vs.seq}},
                                     n_keys, a.d);
    fp_bwd_rows rows = fp_bwd_rows_seeing(a.mods, k0, k0 + n_keys, s.nq, s.nkv);
    rows.lo -= rows.lo % FP_BWD_DQ_TILE_ROWS; /* the rows added lie before the band: masked */
    const int q_tiles = (rows.hi - rows.lo + BR - 1) / BR;
    const int n_steps = a.group * q_tiles;
    /* Step n is query tile n % q_tiles of the group's head n / q_tiles. Both the loads and the
     * compute walk the steps in order, each with its own (head, first row) advanced by
     * fp_bwd_next_step, where the division would cost every step about 25 instructions. */
    const int q_end = rows.lo + q_tiles * BR;
    int load_h = hk * a.group, load_q0 = rows.lo;

    auto load_step = [&](int n) {
        const int h = load_h, q0 = load_q0;
        fp_bwd_next_step(load_h, load_q0, BR, rows.lo, q_end);
        T *const sQ = sStages + (n % STAGES) * 2 * BR * D;
        const fp_strided_rows<T, 2> q_rows{
            {static_cast<const T *>(a.q) + fp_q_offset(a.qs, s, h, q0),
             static_cast<const T *>(a.d_o) + fp_q_offset(a.os, s, h, q0)},
            {a.qs.seq, a.os.seq}};
        /* Without PAD a tile is whole unless it runs past the sequence. */
        if (!PAD && q0 + BR <= s.nq)
            QLoader::template load_async_whole<2>(sQ, q_rows);
        else
            QLoader::template load<true, 2>(sQ, q_rows, s.nq - q0, a.d);
        if (threadIdx.x < 2 * BR) {
            const int r = threadIdx.x % BR;
            const bool in = q0 + r < s.nq;
            const float *src = threadIdx.x < BR ? a.lse_log2 : a.delta;
            fp_cp_async_4(fp_smem_addr(sRows + (n % STAGES) * 2 * BR + threadIdx.x),
                          src + (in ? fp_lse_index(a.seq, s, h, q0 + r) : 0), in ? 4 : 0);
        }
    };
    /* Group t holds step t (group 0 also K and V); empty groups keep the count uniform. */
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < n_steps) load_step(t);
        fp_cp_async_commit();
    }

    /* Warps in pairs: pair kg owns keys [32 kg, 32 kg + 32) of the tile; for S^T and dP^T warp
     * `half` of the pair takes query columns [half QH, half QH + QH), for dK and dV head
     * columns [half DH, half DH + DH). Per-lane ldmatrix offsets (elements): K and V rows of the
     * pair as A (row-major order); Q and dO as B of S^T, dP^T (key order, as the forward's K);
     * P^T and dS^T as A of dV, dK (row-major order, padded rows); dO and Q as B of dV, dK and
     * K as B of dQ (row-major order, .trans); dS^T as A of dQ (key order, .trans). */
    const int kg = warp >> 1, half = warp & 1;
    const int a_row = fp_mma_ldsm_rowmajor_row(lane), a_chunk = fp_mma_ldsm_rowmajor_chunk(lane);
    const int k_row = fp_mma_ldsm_keys_row(lane), k_chunk = fp_mma_ldsm_keys_chunk(lane);
    const int kv_lane = fp_mma_swizzle(PAIR_KEYS * kg + a_row, a_chunk, CPR);
    const int qt_lane = fp_mma_swizzle(half * QH + k_row, k_chunk, CPR);
    const int p_lane = (PAIR_KEYS * kg + a_row) * DS_LD + 8 * a_chunk;
    const int tr_lane = fp_mma_swizzle(a_row, a_chunk, CPR);
    const int tr_lane_h = fp_mma_swizzle_step(tr_lane, 0, half * (DH / 8), CPR);
    const int ds_lane = k_row * DS_LD + 8 * k_chunk;
    const int dq_row0 = 16 * DQ_MT * (warp % DQ_ROW_TILES), dq_col0 = warp / DQ_ROW_TILES * DQ_COLS;
    const uint32_t sK_addr = fp_smem_addr(sK), sV_addr = sK_addr + 2u * BC * D;
    const uint32_t sDS_addr = fp_smem_addr(sDS), sP_addr = fp_smem_addr(sP);
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);
    const int key_lo = k0 + PAIR_KEYS * kg + g; /* key of accumulator row g of m-tile 0 */

    float dk[M_TILES][DH_TILES][4], dv[M_TILES][DH_TILES][4];
    fp_mma_zero(dk);
    fp_mma_zero(dv);
    int h = hk * a.group, q0 = rows.lo;
    for (int n = 0; n < n_steps; ++n, fp_bwd_next_step(h, q0, BR, rows.lo, q_end)) {
        fp_cp_async_wait<STAGES - 2>();
        __syncthreads(); /* step n has landed, and every warp is done with step n - 1 */
        if (n + STAGES - 1 < n_steps) load_step(n + STAGES - 1);
        fp_cp_async_commit();
        const uint32_t sQ_addr = fp_smem_addr(sStages + (n % STAGES) * 2 * BR * D);
        const uint32_t sO_addr = sQ_addr + 2u * BR * D;
        const float *const sLse = sRows + (n % STAGES) * 2 * BR, *const sDelta = sLse + BR;

        float st[M_TILES][QH_TILES][4], dpt[M_TILES][QH_TILES][4];
        fp_mma_zero(st);
        fp_mma_zero(dpt);
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; ++kk) {
            uint32_t ak[M_TILES][4], av[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt) {
                const int off = fp_mma_swizzle_step(kv_lane, 16 * mt, 2 * kk, CPR);
                fp_ldmatrix_x4(ak[mt], sK_addr + 2u * off);
                fp_ldmatrix_x4(av[mt], sV_addr + 2u * off);
            }
#pragma unroll
            for (int np = 0; np < QH_TILES / 2; ++np) {
                uint32_t bq[4], bo[4];
                const int off = fp_mma_swizzle_step(qt_lane, 16 * np, 2 * kk, CPR);
                fp_ldmatrix_x4(bq, sQ_addr + 2u * off);
                fp_ldmatrix_x4(bo, sO_addr + 2u * off);
#pragma unroll
                for (int mt = 0; mt < M_TILES; ++mt) {
                    Ops::mma(st[mt][2 * np], ak[mt], bq[0], bq[1]);
                    Ops::mma(st[mt][2 * np + 1], ak[mt], bq[2], bq[3]);
                    Ops::mma(dpt[mt][2 * np], av[mt], bo[0], bo[1]);
                    Ops::mma(dpt[mt][2 * np + 1], av[mt], bo[2], bo[3]);
                }
            }
        }

        /* Two copies of the pass: tiles every row sees whole take no per-element test (as a
         * run-time `full ||` in one loop, the test became a branch around every element). */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int nt = 0; nt < QH_TILES; ++nt) {
                const int ql = half * QH + 8 * nt + 2 * c;
                const float2 lse = *reinterpret_cast<const float2 *>(sLse + ql);
                const float2 delta = *reinterpret_cast<const float2 *>(sDelta + ql);
#pragma unroll
                for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int i = q0 + ql + (r & 1), j = key_lo + 16 * mt + 8 * (r >> 1);
                        const bool seen = !decltype(masked)::value ||
                                          (i < s.nq && j < s.nkv && fp_in_band(band, i, j));
                        fp_bwd_p_ds<MODS>(a, s.b, h, s.nq, s.nkv, i, j, seen,
                                          (r & 1) ? lse.y : lse.x, (r & 1) ? delta.y : delta.x,
                                          st[mt][nt][r], dpt[mt][nt][r]);
                    }
            }
        };
        if (fp_bwd_tile_full(band, q0, BR, k0, BC, s.nq, s.nkv)) {
            p_ds(std::false_type{});
        } else {
            p_ds(std::true_type{});
        }

        /* P^T and dS^T [key][query], rounded to T: registers 2i, 2i + 1 are the adjacent
         * queries 8nt + 2c, + 1 of key row 16mt + g + 8i, one 4-byte store. */
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
            for (int nt = 0; nt < QH_TILES; ++nt)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int at =
                        (PAIR_KEYS * kg + 16 * mt + g + 8 * i) * DS_LD + half * QH + 8 * nt + 2 * c;
                    *reinterpret_cast<uint32_t *>(sP + at) =
                        Ops::pack(st[mt][nt][2 * i], st[mt][nt][2 * i + 1]);
                    *reinterpret_cast<uint32_t *>(sDS + at) =
                        Ops::pack(dpt[mt][nt][2 * i], dpt[mt][nt][2 * i + 1]);
                }
        __syncthreads(); /* P^T and dS^T of every warp are in place */

#pragma unroll
        for (int ks = 0; ks < ROW_STEPS; ++ks) {
            uint32_t ap[M_TILES][4], ads[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt) {
                const int off = p_lane + 16 * mt * DS_LD + 16 * ks;
                fp_ldmatrix_x4(ap[mt], sP_addr + 2u * off);
                fp_ldmatrix_x4(ads[mt], sDS_addr + 2u * off);
            }
#pragma unroll
            for (int dp = 0; dp < DH_TILES / 2; ++dp) {
                uint32_t bo[4], bq[4];
                const int off = fp_mma_swizzle_step(tr_lane_h, 16 * ks, 2 * dp, CPR);
                fp_ldmatrix_x4_trans(bo, sO_addr + 2u * off);
                fp_ldmatrix_x4_trans(bq, sQ_addr + 2u * off);
#pragma unroll
                for (int mt = 0; mt < M_TILES; ++mt) {
                    Ops::mma(dv[mt][2 * dp], ap[mt], bo[0], bo[1]);
                    Ops::mma(dv[mt][2 * dp + 1], ap[mt], bo[2], bo[3]);
                    Ops::mma(dk[mt][2 * dp], ads[mt], bq[0], bq[1]);
                    Ops::mma(dk[mt][2 * dp + 1], ads[mt], bq[2], bq[3]);
                }
            }
        }

        if (DQ_ATOMIC) {
            /* The accumulator tile of the warp tile's m-tile mt and first columns, or NULL past
             * the sequence; the next columns' tiles follow FP_BWD_DQ_TILE floats apart. */
            float *acc_tile[DQ_MT];
#pragma unroll
            for (int mt = 0; mt < DQ_MT; ++mt) {
                const int row = q0 + dq_row0 + 16 * mt;
                acc_tile[mt] = row < s.nq ? fp_bwd_dq_tile(a, s, h, row / FP_BWD_DQ_TILE_ROWS,
                                                           dq_col0 / FP_BWD_DQ_TILE_COLS)
                                          : nullptr;
            }
            float dq[DQ_MT][DQ_TILES][4];
            fp_mma_zero(dq);
#pragma unroll
            for (int ks = 0; ks < BC / 16; ++ks) {
                uint32_t ads[DQ_MT][4];
#pragma unroll
                for (int mt = 0; mt < DQ_MT; ++mt)
                    fp_ldmatrix_x4_trans(
                        ads[mt], sDS_addr + 2u * (ds_lane + 16 * ks * DS_LD + dq_row0 + 16 * mt));
#pragma unroll
                for (int dp = 0; dp < DQ_TILES / 2; ++dp) {
                    uint32_t bk[4];
                    fp_ldmatrix_x4_trans(
                        bk, sK_addr + 2u * fp_mma_swizzle_step(tr_lane, 16 * ks,
                                                               dq_col0 / 8 + 2 * dp, CPR));
#pragma unroll
                    for (int mt = 0; mt < DQ_MT; ++mt) {
                        Ops::mma(dq[mt][2 * dp], ads[mt], bk[0], bk[1]);
                        Ops::mma(dq[mt][2 * dp + 1], ads[mt], bk[2], bk[3]);
                    }
                }
            }
            /* Rows of an m-tile past the sequence add their dS = 0 to padding rows; columns past
             * d have no tiles. */
#pragma unroll
            for (int mt = 0; mt < DQ_MT; ++mt)
                if (acc_tile[mt])
#pragma unroll
                    for (int dt = 0; dt < DQ_TILES; ++dt)
                        if (!PAD || dq_col0 + 8 * dt < a.d)
                            fp_bwd_dq_tile_add(acc_tile[mt] + FP_BWD_DQ_TILE * dt, lane,
                                               dq[mt][dt]);
        }
    }
    fp_cp_async_wait<0>();

    /* dK = scale dS^T Q and dV, two adjacent columns per 4-byte store (the strides and d are
     * multiples of 8 elements), columns past d left out. */
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int j = key_lo + 16 * mt + 8 * i;
            if (j >= s.nkv) continue;
            const fp_kv_rows out = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, j);
            T *const gdk = static_cast<T *>(a.d_k) + out.k + half * DH;
            T *const gdv = static_cast<T *>(a.d_v) + out.v + half * DH;
#pragma unroll
            for (int dt = 0; dt < DH_TILES; ++dt) {
                if (PAD && half * DH + 8 * dt >= a.d) break;
                const int col = 8 * dt + 2 * c;
                *reinterpret_cast<uint32_t *>(gdk + col) = Ops::pack(
                    dk[mt][dt][2 * i] * a.mods.scale, dk[mt][dt][2 * i + 1] * a.mods.scale);
                *reinterpret_cast<uint32_t *>(gdv + col) =
                    Ops::pack(dv[mt][dt][2 * i], dv[mt][dt][2 * i + 1]);
            }
        }
#endif
}

#endif /* FP_BACKWARD_MMA_KV_KERNEL_CUH */
