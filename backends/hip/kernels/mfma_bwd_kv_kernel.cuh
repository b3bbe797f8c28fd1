/*
 * FlashAttention-2 backward on CDNA matrix cores, key-tile kernel (variant backward_mfma): one
 * block per (key tile of FP_MFMA_BWD_KEYS keys, batch, kv head), four 64-lane waves of 32 keys
 * each. K and V of a wave's keys stay in registers as B operands; the block walks every query
 * tile of BR rows (FP_MFMA_BWD_ROWS) that sees one of its keys, for each query head of the kv
 * head's group in order, so GQA sums its group's heads in a fixed order. Per step the block
 * stages Q and dO transposed in LDS, with the rows' LSE and D, and each wave computes, for its
 * 32 keys and the BR rows (mfma_bwd_layout.h for why these orientations):
 *   S = Q K^T, dP = dO V^T      (A: Q, dO from LDS; B: K, V from registers), queries as rows;
 *   P, dS elementwise           (backward/tile_math.cuh, shared with the CUDA kernels);
 *   dV += P^T dO, dK += dS^T Q  (A: P^T, dS^T straight from the accumulators, rounded to the
 *                                operand type; B: dO, Q from LDS), dK and dV in f32 registers
 *                                for the whole walk.
 * DQ_ATOMIC (fast mode): the waves also write dS to LDS, and after a barrier wave w computes
 * 32x32 tile w of the step's dQ = dS K over the block's 128 keys (A: dS; B: K^T, staged once)
 * and adds it to the f32 accumulator (dq_tiles.h) by one atomic a value. Without it
 * (deterministic mode) mfma_bwd_q_kernel.cuh computes dQ.
 *
 * Masks and layouts go through the shared headers (score.cuh, score_mods.cuh,
 * kv_addressing.cuh); tiles that every row sees whole skip the mask. Targets without MFMA get an
 * empty body (supports() declines them), so every target's code object has the same kernels.
 */
#ifndef FP_HIP_MFMA_BWD_KV_KERNEL_CUH
#define FP_HIP_MFMA_BWD_KV_KERNEL_CUH

#include <type_traits>

#include "../../cuda/kernels/backward/dq_tiles.cuh"
#include "../../cuda/kernels/backward/tile_math.cuh"
#include "../mfma_bwd_layout.h"
#include "mfma_operand.cuh"

namespace mfma_bwd {

using mfma_flash::acc16;
using mfma_flash::operand;

constexpr int WAVES = FP_MFMA_BWD_WAVES, THREADS = WAVES * FP_MFMA_WAVE;
constexpr int BC = FP_MFMA_BWD_KEYS;
static_assert(BC == WAVES * FP_MFMA_N, "a wave owns 32 keys of the key tile");

/* LDS of the key-tile kernel, in 16-bit elements: Q^T and dO^T [D][BR]; in fast mode also K^T
 * [D][BC] and dS [BR][BC]. Then 2 BR floats of LSE and D. */
template <int D, bool DQ_ATOMIC> struct kv_lds {
    static constexpr int BR = FP_MFMA_BWD_ROWS(D);
    static constexpr int QTS = FP_MFMA_BWD_STRIDE(BR), KTS = FP_MFMA_BWD_STRIDE(BC);
    static constexpr int DSS = FP_MFMA_BWD_STRIDE(BC);
    static constexpr int QT = D * QTS, KT = DQ_ATOMIC ? D * KTS : 0;
    static constexpr int ELEMS = 2 * QT + KT + (DQ_ATOMIC ? BR * DSS : 0);
    static constexpr size_t BYTES = 2 * ELEMS + 8 * BR;
    static_assert(BYTES <= 65536, "the tiles fit the 64 KiB of LDS a CDNA CU has");
    static_assert(BR * D == WAVES * FP_MFMA_M * FP_MFMA_N, "dQ of a step is one 32x32 tile a wave");
};

/* A 16-bit value of global memory as an operand element. */
template <typename T>
__device__ __forceinline__ typename operand<T>::elem load_elem(const T *p, int64_t at, bool in) {
    return operand<T>::from_f32(in ? fp_to_f32(p[at]) : 0.0f);
}

/* Four consecutive operand values of an LDS tile as one 8-byte read (mfma_bwd_layout.h keeps
 * them aligned). */
template <typename T>
__device__ __forceinline__ typename operand<T>::vec4 lds_vec4(const typename operand<T>::elem *p,
                                                              int at) {
    return *reinterpret_cast<const typename operand<T>::vec4 *>(p + at);
}

template <typename T, int D, bool MODS, bool DQ_ATOMIC>
__global__ void __launch_bounds__(THREADS, 1) kv_kernel(const fp_bwd_params a) {
#ifdef FP_MFMA_DEVICE
    typedef operand<T> OP;
    typedef typename OP::elem E;
    typedef typename OP::vec4 V4;
    typedef kv_lds<D, DQ_ATOMIC> L;
    constexpr int BR = L::BR, MT = BR / FP_MFMA_M; /* query m-tiles of S and dP */
    constexpr int DT = D / FP_MFMA_K;              /* K-steps of S and dP */
    constexpr int NT = D / FP_MFMA_N;              /* column tiles of dK and dV */
    constexpr int RT = FP_MFMA_M / FP_MFMA_K;      /* K-steps of dK and dV per m-tile */
    __shared__ E lds[L::ELEMS];
    __shared__ float rows_s[2 * BR]; /* the step's LSE (log2 domain), then D */
    E *const qt_s = lds, *const ot_s = lds + L::QT, *const kt_s = lds + 2 * L::QT;
    E *const ds_s = kt_s + L::KT;

    const int lane = threadIdx.x % FP_MFMA_WAVE, wave = threadIdx.x / FP_MFMA_WAVE;
    const int heads_kv = a.seq.heads_q / a.group;
    const int b = blockIdx.y / heads_kv, hk = blockIdx.y % heads_kv;
    const fp_seq s = fp_sequence(a.seq, b);
    const int k0 = blockIdx.x * BC;
    if (k0 >= s.nkv) return; /* the grid covers the longest sequence */
    const int n_keys = min(BC, s.nkv - k0);
    const T *const gk = static_cast<const T *>(a.k), *const gv = static_cast<const T *>(a.v);
    const T *const gq = static_cast<const T *>(a.q), *const go = static_cast<const T *>(a.d_o);
    /* K/V rows lie a constant stride apart: supports() admits no paged cache. */
    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, k0);

    /* The wave's keys as B operands: lane l holds key 32 w + l % 32. */
    const int wkey = FP_MFMA_N * wave + fp_mfma_b_col(lane);
    V4 kb[DT], vb[DT];
#pragma unroll
    for (int t = 0; t < DT; t++)
#pragma unroll
        for (int j = 0; j < FP_MFMA_OPERAND; j++) {
            const int c = FP_MFMA_K * t + fp_mfma_b_k(lane, j);
            kb[t][j] = load_elem(gk, kv0.k + (int64_t)wkey * a.ks.seq + c, wkey < n_keys);
            vb[t][j] = load_elem(gv, kv0.v + (int64_t)wkey * a.vs.seq + c, wkey < n_keys);
        }
    if (DQ_ATOMIC)
        for (int idx = threadIdx.x; idx < BC * D; idx += THREADS) {
            const int key = idx / D, c = idx % D;
            kt_s[c * L::KTS + key] =
                load_elem(gk, kv0.k + (int64_t)key * a.ks.seq + c, key < n_keys);
        }

    const fp_bwd_rows rows = fp_bwd_rows_seeing(a.mods, k0, k0 + n_keys, s.nq, s.nkv);
    const int q_tiles = (rows.hi - rows.lo + BR - 1) / BR;
    const int n_steps = a.group * q_tiles, q_end = rows.lo + q_tiles * BR;
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);
    const int key = k0 + wkey; /* the key of accumulator column l % 32 */
    /* dQ: wave w's 32x32 tile of the step's BR x D. */
    const int dq_m = wave / NT, dq_n = wave % NT;

    acc16 dk[NT], dv[NT];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) dk[n][r] = dv[n][r] = 0.0f;

    int h = hk * a.group, q0 = rows.lo;
    for (int step = 0; step < n_steps; ++step, fp_bwd_next_step(h, q0, BR, rows.lo, q_end)) {
        __syncthreads(); /* every wave is done with the previous step's tiles */
        for (int idx = threadIdx.x; idx < BR * D; idx += THREADS) {
            const int r = idx / D, c = idx % D;
            const bool in = q0 + r < s.nq;
            qt_s[c * L::QTS + r] = load_elem(gq, in ? fp_q_offset(a.qs, s, h, q0 + r) + c : 0, in);
            ot_s[c * L::QTS + r] = load_elem(go, in ? fp_q_offset(a.os, s, h, q0 + r) + c : 0, in);
        }
        if (threadIdx.x < BR) {
            const int i = q0 + threadIdx.x;
            const bool in = i < s.nq;
            const int64_t at = in ? fp_lse_index(a.seq, s, h, i) : 0;
            rows_s[threadIdx.x] = in ? a.lse_log2[at] : INFINITY;
            rows_s[BR + threadIdx.x] = in ? a.delta[at] : 0.0f;
        }
        __syncthreads();

        acc16 sc[MT], dp[MT];
#pragma unroll
        for (int m = 0; m < MT; m++) {
#pragma unroll
            for (int r = 0; r < FP_MFMA_ACC; r++) sc[m][r] = dp[m][r] = 0.0f;
#pragma unroll
            for (int t = 0; t < DT; t++) {
                V4 aq, ao;
#pragma unroll
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int at = fp_mfma_bwd_a_from_t(L::QTS, lane, m, t, j);
                    aq[j] = qt_s[at];
                    ao[j] = ot_s[at];
                }
                sc[m] = OP::mma(aq, kb[t], sc[m]);
                dp[m] = OP::mma(ao, vb[t], dp[m]);
            }
        }

        /* P into sc, dS into dp. Two copies: tiles every row sees whole take no per-element
         * test. */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int r = 0; r < FP_MFMA_ACC; r++) {
                    const int qi = FP_MFMA_M * m + fp_mfma_d_row(lane, r), i = q0 + qi;
                    const bool seen = !decltype(masked)::value ||
                                      (i < s.nq && key < s.nkv && fp_in_band(band, i, key));
                    float p = sc[m][r], ds = dp[m][r]; /* vector elements bind no reference */
                    fp_bwd_p_ds<MODS>(a, s.b, h, s.nq, s.nkv, i, key, seen, rows_s[qi],
                                      rows_s[BR + qi], p, ds);
                    sc[m][r] = p;
                    dp[m][r] = ds;
                }
        };
        if (fp_bwd_tile_full(band, q0, BR, k0 + FP_MFMA_N * wave, FP_MFMA_N, s.nq, s.nkv))
            p_ds(std::false_type{});
        else
            p_ds(std::true_type{});

            /* dV += P^T dO and dK += dS^T Q over the step's queries, the accumulators as A. */
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                V4 ap, ads;
#pragma unroll
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int r = FP_MFMA_OPERAND * rt + j;
                    ap[fp_mfma_acc_a_slot(r)] = OP::from_f32(sc[m][r]);
                    ads[fp_mfma_acc_a_slot(r)] = OP::from_f32(dp[m][r]);
                }
                const int t = RT * m + rt; /* fp_mfma_acc_a_step of register 4 rt, m-tile m */
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const int at = fp_mfma_bwd_b_from_t(L::QTS, lane, n, t, 0);
                    dv[n] = OP::mma(ap, lds_vec4<T>(ot_s, at), dv[n]);
                    dk[n] = OP::mma(ads, lds_vec4<T>(qt_s, at), dk[n]);
                }
            }

        if (DQ_ATOMIC) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int r = 0; r < FP_MFMA_ACC; r++)
                    ds_s[fp_mfma_bwd_acc_to_rows(L::DSS, lane, m, wave, r)] =
                        OP::from_f32(dp[m][r]);
            __syncthreads(); /* every wave's dS is in place */
            acc16 dq;
#pragma unroll
            for (int r = 0; r < FP_MFMA_ACC; r++) dq[r] = 0.0f;
#pragma unroll
            for (int t = 0; t < BC / FP_MFMA_K; t++)
                dq = OP::mma(lds_vec4<T>(ds_s, fp_mfma_bwd_a_from_rows(L::DSS, lane, dq_m, t, 0)),
                             lds_vec4<T>(kt_s, fp_mfma_bwd_b_from_t(L::KTS, lane, dq_n, t, 0)), dq);
            /* Rows past the sequence hold dS = 0 and are left out. */
            float *const acc = fp_bwd_dq_tile(a, s, h, 0, 0);
            const int col = FP_MFMA_N * dq_n + fp_mfma_d_col(lane);
#pragma unroll
            for (int r = 0; r < FP_MFMA_ACC; r++) {
                const int i = q0 + FP_MFMA_M * dq_m + fp_mfma_d_row(lane, r);
                /* The workspace is device memory, where the hardware's f32 atomic add is
                 * exact; atomicAdd would compile to a compare-and-swap loop. */
                if (i < s.nq) unsafeAtomicAdd(acc + fp_mfma_bwd_dq_offset(D, i, col), dq[r]);
            }
        }
    }

    /* dK = scale dS^T Q and dV: register r of lane l is key 8 (r / 4) + 4 (l / 32) + r % 4 of
     * the wave's, column 32 n + l % 32. */
#pragma unroll
    for (int r = 0; r < FP_MFMA_ACC; r++) {
        const int j = k0 + FP_MFMA_N * wave + fp_mfma_d_row(lane, r);
        if (j >= s.nkv) continue;
        const fp_kv_rows out = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, j);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int c = FP_MFMA_N * n + fp_mfma_d_col(lane);
            static_cast<T *>(a.d_k)[out.k + c] = fp_from_f32<T>(dk[n][r] * a.mods.scale);
            static_cast<T *>(a.d_v)[out.v + c] = fp_from_f32<T>(dv[n][r]);
        }
    }
#else
    (void)a;
#endif
}

} // namespace mfma_bwd

#endif /* FP_HIP_MFMA_BWD_KV_KERNEL_CUH */
