/*
 * The backward on the CUDA cores in f32 (variant backward_f32), for f32 problems and every
 * shape the tensor-core backward does not take. Plain FMA in f32 from inputs of any float type,
 * so f32 problems get f32 accuracy.
 *
 * Tiles of FP_BWD_F32_KEYS keys by FP_BWD_F32_ROWS query rows, every operand in shared memory
 * as f32 rows of DMAX + 1 floats (an odd stride: lanes reading one column of 32 rows hit 32
 * banks), columns past d zero-filled so that they add nothing. Per tile, each thread computes
 * 8 scores and 8 dP in registers (lane = key, warp + 4r = row), then P and dS go to shared
 * memory for the products that sum over rows or keys.
 *
 *   fp_bwd_f32_kv_kernel: one block per (key tile, batch, kv head); dK and dV of the tile in
 *     registers (lane = key, warp + 4k = column) over every query tile that sees the keys, of
 *     every query head of the group in order. DQ_ATOMIC (fast mode) also adds dS K into the f32
 *     dQ accumulator with atomics.
 *   fp_bwd_f32_q_kernel (deterministic mode): one block per (query tile, batch, query head),
 *     dQ in registers (warp + 4r = row, lane + 32m = column) over the key tiles its rows see,
 *     recomputing P and dS; every sum then runs in a fixed order.
 */
#ifndef FP_BACKWARD_F32_KERNELS_CUH
#define FP_BACKWARD_F32_KERNELS_CUH

#include <math.h>

#include "../common/dtype.cuh"
#include "params.h"
#include "score.cuh"

#define FP_BWD_F32_KEYS    32
#define FP_BWD_F32_ROWS    32
#define FP_BWD_F32_THREADS 128

template <int DMAX> struct fp_bwd_f32_tile {
    static constexpr int BC = FP_BWD_F32_KEYS, BR = FP_BWD_F32_ROWS;
    static constexpr int LD = DMAX + 1;    /* floats a row of Q, dO, K, V */
    static constexpr int LDP = BC + 1;     /* floats a row of P and dS */
    static constexpr int RPT = BR / 4;     /* rows a thread, 4 warps */
    static constexpr int CPT = DMAX / 4;   /* dK, dV columns a thread */
    static constexpr int QCPT = DMAX / 32; /* dQ columns a thread */
    static_assert(FP_BWD_F32_THREADS == 128 && BC == 32, "lane = key, 4 warps");
    static constexpr size_t FLOATS = (size_t)2 * BC * LD + 2 * BR * LD + 2 * BR * LDP + 2 * BR;
    static constexpr size_t SMEM_BYTES = FLOATS * sizeof(float);

    float *k, *v, *q, *d_o, *p, *ds, *lse, *delta;

    __device__ __forceinline__ explicit fp_bwd_f32_tile(float *smem) {
        k = smem;
        v = k + BC * LD;
        q = v + BC * LD;
        d_o = q + BR * LD;
        p = d_o + BR * LD;
        ds = p + BR * LDP;
        lse = ds + BR * LDP;
        delta = lse + BR;
    }
};

/* `rows` rows of `n` valid ones, `stride` elements apart from base, into dst as f32 with
 * zeros past n and past d. */
template <typename T, int DMAX>
__device__ __forceinline__ void fp_bwd_f32_load(float *dst, const T *base, int64_t stride, int rows,
                                                int n, int d) {
    for (int e = threadIdx.x; e < rows * DMAX; e += FP_BWD_F32_THREADS) {
        const int r = e / DMAX, c = e % DMAX;
        dst[r * (DMAX + 1) + c] = r < n && c < d ? fp_to_f32(base[r * stride + c]) : 0.0f;
    }
}

/* LSE (log2 domain) and D of query rows q0 .. q0 + BR - 1 of head h into the tile. */
__device__ __forceinline__ void fp_bwd_f32_load_rows(float *lse, float *delta,
                                                     const fp_bwd_params &a, const fp_seq &s, int h,
                                                     int q0) {
    const int i = q0 + (int)threadIdx.x;
    if (threadIdx.x < FP_BWD_F32_ROWS) {
        const bool in = i < s.nq;
        const int64_t row = in ? fp_lse_index(a.seq, s, h, i) : 0;
        lse[threadIdx.x] = in ? a.lse_log2[row] : INFINITY;
        delta[threadIdx.x] = in ? a.delta[row] : 0.0f;
    }
}

/* P and dS of the tile (queries q0.., keys k0..) into shared memory; 0 where the row does not
 * see the key, or either lies past its sequence. */
template <int DMAX>
__device__ __forceinline__ void fp_bwd_f32_scores(const fp_bwd_f32_tile<DMAX> &t,
                                                  const fp_bwd_params &a, const fp_seq &s, int h,
                                                  int q0, int k0) {
    using Tile = fp_bwd_f32_tile<DMAX>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float sc[Tile::RPT], dp[Tile::RPT];
#pragma unroll
    for (int r = 0; r < Tile::RPT; ++r) sc[r] = dp[r] = 0.0f;
    for (int c = 0; c < a.d; ++c) {
        const float kc = t.k[lane * Tile::LD + c], vc = t.v[lane * Tile::LD + c];
#pragma unroll
        for (int r = 0; r < Tile::RPT; ++r) {
            sc[r] = fmaf(t.q[(warp + 4 * r) * Tile::LD + c], kc, sc[r]);
            dp[r] = fmaf(t.d_o[(warp + 4 * r) * Tile::LD + c], vc, dp[r]);
        }
    }
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);
    const int j = k0 + lane;
#pragma unroll
    for (int r = 0; r < Tile::RPT; ++r) {
        const int il = warp + 4 * r, i = q0 + il;
        float p = 0.0f, ds = 0.0f;
        if (i < s.nq && j < s.nkv && fp_in_band(band, i, j)) {
            float grad;
            const float x = fp_bwd_score_log2(a.mods, sc[r], s.b, h, i, j, s.nq, s.nkv, &grad);
            p = exp2f(x - t.lse[il]);
            ds = p * (dp[r] - t.delta[il]) * grad;
        }
        t.p[il * Tile::LDP + lane] = p;
        t.ds[il * Tile::LDP + lane] = ds;
    }
}

/* acc[r][m] += sum over the tile's keys of dS[warp + 4r][key] K[key][lane + 32m]. */
template <int DMAX, int M>
__device__ __forceinline__ void fp_bwd_f32_ds_k(const fp_bwd_f32_tile<DMAX> &t,
                                                float (&acc)[FP_BWD_F32_ROWS / 4][M], int m0) {
    using Tile = fp_bwd_f32_tile<DMAX>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j = 0; j < Tile::BC; ++j) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const float kc = t.k[j * Tile::LD + lane + 32 * (m0 + m)];
#pragma unroll
            for (int r = 0; r < Tile::RPT; ++r)
                acc[r][m] = fmaf(t.ds[(warp + 4 * r) * Tile::LDP + j], kc, acc[r][m]);
        }
    }
}

template <typename T, int DMAX, bool DQ_ATOMIC>
__global__ void __launch_bounds__(FP_BWD_F32_THREADS) fp_bwd_f32_kv_kernel(const fp_bwd_params a) {
    using Tile = fp_bwd_f32_tile<DMAX>;
    extern __shared__ float fp_bwd_f32_smem[];
    const Tile t(fp_bwd_f32_smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int heads_kv = a.seq.heads_q / a.group;
    const int b = blockIdx.y / heads_kv, hk = blockIdx.y % heads_kv;
    const fp_seq s = fp_sequence(a.seq, b);
    const int k0 = blockIdx.x * Tile::BC;
    if (k0 >= s.nkv) return; /* the grid covers the longest sequence */
    const int n_keys = min(Tile::BC, s.nkv - k0);
    const fp_kv_rows kv = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0);
    fp_bwd_f32_load<T, DMAX>(t.k, static_cast<const T *>(a.k) + kv.k, a.ks.seq, Tile::BC, n_keys,
                             a.d);
    fp_bwd_f32_load<T, DMAX>(t.v, static_cast<const T *>(a.v) + kv.v, a.vs.seq, Tile::BC, n_keys,
                             a.d);
    const fp_bwd_rows rows = fp_bwd_rows_seeing(a.mods, k0, k0 + n_keys, s.nq, s.nkv);

    float dk[Tile::CPT], dv[Tile::CPT];
#pragma unroll
    for (int k = 0; k < Tile::CPT; ++k) dk[k] = dv[k] = 0.0f;
    for (int g = 0; g < a.group; ++g) {
        const int h = hk * a.group + g;
        for (int q0 = rows.lo; q0 < rows.hi; q0 += Tile::BR) {
            const int n_rows = min(Tile::BR, s.nq - q0);
            __syncthreads(); /* the previous tile's readers are done */
            fp_bwd_f32_load<T, DMAX>(t.q, static_cast<const T *>(a.q) + fp_q_offset(a.qs, s, h, q0),
                                     a.qs.seq, Tile::BR, n_rows, a.d);
            fp_bwd_f32_load<T, DMAX>(t.d_o,
                                     static_cast<const T *>(a.d_o) + fp_q_offset(a.os, s, h, q0),
                                     a.os.seq, Tile::BR, n_rows, a.d);
            fp_bwd_f32_load_rows(t.lse, t.delta, a, s, h, q0);
            __syncthreads();
            fp_bwd_f32_scores(t, a, s, h, q0, k0);
            __syncthreads();
            for (int il = 0; il < Tile::BR; ++il) {
                const float p = t.p[il * Tile::LDP + lane], ds = t.ds[il * Tile::LDP + lane];
#pragma unroll
                for (int k = 0; k < Tile::CPT; ++k) {
                    dv[k] = fmaf(p, t.d_o[il * Tile::LD + warp + 4 * k], dv[k]);
                    dk[k] = fmaf(ds, t.q[il * Tile::LD + warp + 4 * k], dk[k]);
                }
            }
            if (DQ_ATOMIC) {
                /* One 32-column slice at a time keeps 8 accumulators live beside dK and dV. */
#pragma unroll 1
                for (int m = 0; m < Tile::QCPT && 32 * m < a.d; ++m) {
                    float acc[Tile::RPT][1];
#pragma unroll
                    for (int r = 0; r < Tile::RPT; ++r) acc[r][0] = 0.0f;
                    fp_bwd_f32_ds_k<DMAX, 1>(t, acc, m);
                    const int c = lane + 32 * m;
#pragma unroll
                    for (int r = 0; r < Tile::RPT; ++r) {
                        const int i = q0 + warp + 4 * r;
                        if (i < s.nq && c < a.d)
                            atomicAdd(a.dq_acc + fp_lse_index(a.seq, s, h, i) * a.d + c, acc[r][0]);
                    }
                }
            }
        }
    }
    if (lane >= n_keys) return;
    const fp_kv_rows out = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0 + lane);
    T *gdk = static_cast<T *>(a.d_k) + out.k;
    T *gdv = static_cast<T *>(a.d_v) + out.v;
#pragma unroll
    for (int k = 0; k < Tile::CPT; ++k) {
        const int c = warp + 4 * k;
        if (c < a.d) {
            gdk[c] = fp_from_f32<T>(dk[k] * a.mods.scale);
            gdv[c] = fp_from_f32<T>(dv[k]);
        }
    }
}

template <typename T, int DMAX>
__global__ void __launch_bounds__(FP_BWD_F32_THREADS) fp_bwd_f32_q_kernel(const fp_bwd_params a) {
    using Tile = fp_bwd_f32_tile<DMAX>;
    extern __shared__ float fp_bwd_f32_smem[];
    const Tile t(fp_bwd_f32_smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(a.seq, b);
    const int q0 = blockIdx.x * Tile::BR;
    if (q0 >= s.nq) return;
    const int n_rows = min(Tile::BR, s.nq - q0);
    fp_bwd_f32_load<T, DMAX>(t.q, static_cast<const T *>(a.q) + fp_q_offset(a.qs, s, h, q0),
                             a.qs.seq, Tile::BR, n_rows, a.d);
    fp_bwd_f32_load<T, DMAX>(t.d_o, static_cast<const T *>(a.d_o) + fp_q_offset(a.os, s, h, q0),
                             a.os.seq, Tile::BR, n_rows, a.d);
    fp_bwd_f32_load_rows(t.lse, t.delta, a, s, h, q0);
    const fp_span_keys span = fp_visible_span(a.mods, q0, q0 + n_rows - 1, s.nq, s.nkv, s.nkv);

    float acc[Tile::RPT][Tile::QCPT];
#pragma unroll
    for (int r = 0; r < Tile::RPT; ++r)
#pragma unroll
        for (int m = 0; m < Tile::QCPT; ++m) acc[r][m] = 0.0f;
    for (int k0 = span.lo; k0 < span.hi; k0 += Tile::BC) {
        const int n_keys = min(Tile::BC, s.nkv - k0);
        const fp_kv_rows kv = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0);
        __syncthreads(); /* the previous tile's readers are done */
        fp_bwd_f32_load<T, DMAX>(t.k, static_cast<const T *>(a.k) + kv.k, a.ks.seq, Tile::BC,
                                 n_keys, a.d);
        fp_bwd_f32_load<T, DMAX>(t.v, static_cast<const T *>(a.v) + kv.v, a.vs.seq, Tile::BC,
                                 n_keys, a.d);
        __syncthreads();
        fp_bwd_f32_scores(t, a, s, h, q0, k0);
        __syncthreads();
        fp_bwd_f32_ds_k<DMAX, Tile::QCPT>(t, acc, 0);
    }
#pragma unroll
    for (int r = 0; r < Tile::RPT; ++r) {
        const int i = q0 + warp + 4 * r;
        if (i >= s.nq) continue;
        T *dq = static_cast<T *>(a.d_q) + fp_q_offset(a.qs, s, h, i);
#pragma unroll
        for (int m = 0; m < Tile::QCPT; ++m)
            if (lane + 32 * m < a.d) dq[lane + 32 * m] = fp_from_f32<T>(acc[r][m] * a.mods.scale);
    }
}

#endif /* FP_BACKWARD_F32_KERNELS_CUH */
