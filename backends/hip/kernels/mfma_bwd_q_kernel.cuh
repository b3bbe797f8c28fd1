/*
 * FlashAttention-2 backward on CDNA matrix cores, query-tile kernel: dQ in deterministic mode
 * (variant backward_mfma). One block per (query tile of Q_ROWS rows, batch, query head), four
 * 64-lane waves of 32 rows each, as the forward (mfma_flash) lays out its waves: Q and dO of a
 * wave's rows stay in registers as A operands, the rows' LSE and D in registers too. Per tile of
 * 32 keys the block stages K and V as [key][dim] (B operands of S and dP) and K^T as [dim][key]
 * (B of dQ), and each wave computes
 *   S = Q K^T, dP = dO V^T, then P and dS elementwise (backward/tile_math.cuh);
 *   dS -> LDS in the accumulator's layout, read back as A operands (the forward's P path);
 *   dQ += dS K in f32 registers, written as scale * dQ at the end.
 * No atomics: every sum runs in the same order on every run.
 */
#ifndef FP_HIP_MFMA_BWD_Q_KERNEL_CUH
#define FP_HIP_MFMA_BWD_Q_KERNEL_CUH

#include "mfma_bwd_kv_kernel.cuh"

namespace mfma_bwd {

constexpr int Q_ROWS = WAVES * FP_MFMA_M; /* query rows of a block */
constexpr int Q_KEYS = FP_MFMA_N;         /* keys of a tile */

/* LDS of the query-tile kernel, in 16-bit elements: K, V [Q_KEYS][D]; K^T [D][Q_KEYS]; each
 * wave's dS [32][Q_KEYS]. */
template <int D> struct q_lds {
    static constexpr int KS = FP_MFMA_BWD_STRIDE(D), KTS = FP_MFMA_BWD_STRIDE(Q_KEYS);
    static constexpr int DSS = FP_MFMA_BWD_STRIDE(Q_KEYS);
    static constexpr int K = Q_KEYS * KS, KT = D * KTS, DS = FP_MFMA_M * DSS;
    static constexpr int ELEMS = 2 * K + KT + WAVES * DS;
    static constexpr size_t BYTES = 2 * ELEMS;
};

template <typename T, int D, bool MODS>
__global__ void __launch_bounds__(THREADS, 1) q_kernel(const fp_bwd_params a) {
#ifdef FP_MFMA_DEVICE
    typedef operand<T> OP;
    typedef typename OP::elem E;
    typedef typename OP::vec4 V4;
    typedef q_lds<D> L;
    constexpr int DT = D / FP_MFMA_K, NT = D / FP_MFMA_N, KT_STEPS = Q_KEYS / FP_MFMA_K;
    __shared__ E lds[L::ELEMS];
    E *const k_s = lds, *const v_s = lds + L::K, *const kt_s = lds + 2 * L::K;

    const int lane = threadIdx.x % FP_MFMA_WAVE, wave = threadIdx.x / FP_MFMA_WAVE;
    E *const ds_s = kt_s + L::KT + wave * L::DS;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(a.seq, b);
    const int q0 = blockIdx.x * Q_ROWS, wrow0 = q0 + FP_MFMA_M * wave;
    if (q0 >= s.nq) return;
    const T *const gk = static_cast<const T *>(a.k), *const gv = static_cast<const T *>(a.v);

    V4 aq[DT], ao[DT];
    {
        const int i = wrow0 + fp_mfma_a_row(lane);
        const bool in = i < s.nq;
        const int64_t qa = in ? fp_q_offset(a.qs, s, h, i) : 0;
        const int64_t oa = in ? fp_q_offset(a.os, s, h, i) : 0;
#pragma unroll
        for (int t = 0; t < DT; t++)
#pragma unroll
            for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                const int c = FP_MFMA_K * t + fp_mfma_a_k(lane, j);
                aq[t][j] = load_elem(static_cast<const T *>(a.q), qa + c, in);
                ao[t][j] = load_elem(static_cast<const T *>(a.d_o), oa + c, in);
            }
    }
    float lse[FP_MFMA_ACC], delta[FP_MFMA_ACC];
#pragma unroll
    for (int r = 0; r < FP_MFMA_ACC; r++) {
        const int i = wrow0 + fp_mfma_d_row(lane, r);
        const bool in = i < s.nq;
        const int64_t at = in ? fp_lse_index(a.seq, s, h, i) : 0;
        lse[r] = in ? a.lse_log2[at] : INFINITY;
        delta[r] = in ? a.delta[at] : 0.0f;
    }

    const fp_span_keys span =
        fp_visible_span(a.mods, q0, min(q0 + Q_ROWS, s.nq) - 1, s.nq, s.nkv, s.nkv);
    const int n_tiles = span.hi > span.lo ? (span.hi - span.lo + Q_KEYS - 1) / Q_KEYS : 0;
    /* K/V rows lie a constant stride apart: supports() admits no paged cache. */
    const fp_kv_rows kv0 = fp_kv_row_offsets(a.seq, s, a.ks, a.vs, hk, 0);
    const fp_key_band band = fp_visible_band(a.mods, s.nq, s.nkv);

    acc16 dq[NT];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) dq[n][r] = 0.0f;

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int kb = span.lo + tile * Q_KEYS;
        __syncthreads(); /* every wave is done with the previous tile */
        for (int idx = threadIdx.x; idx < Q_KEYS * D; idx += THREADS) {
            const int key = idx / D, c = idx % D;
            const bool in = kb + key < s.nkv;
            const E k = load_elem(gk, kv0.k + (int64_t)(kb + key) * a.ks.seq + c, in);
            k_s[key * L::KS + c] = k;
            kt_s[c * L::KTS + key] = k;
            v_s[key * L::KS + c] = load_elem(gv, kv0.v + (int64_t)(kb + key) * a.vs.seq + c, in);
        }
        __syncthreads();

        acc16 sc, dp;
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) sc[r] = dp[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < DT; t++) {
            const int at = fp_mfma_bwd_b_from_t(L::KS, lane, 0, t, 0);
            sc = OP::mma(aq[t], lds_vec4<T>(k_s, at), sc);
            dp = OP::mma(ao[t], lds_vec4<T>(v_s, at), dp);
        }

        const int j = kb + fp_mfma_d_col(lane);
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int r = 0; r < FP_MFMA_ACC; r++) {
                const int i = wrow0 + fp_mfma_d_row(lane, r);
                const bool seen =
                    !decltype(masked)::value || (i < s.nq && j < s.nkv && fp_in_band(band, i, j));
                float p = sc[r], ds = dp[r]; /* vector elements bind no reference */
                fp_bwd_p_ds<MODS>(a, s.b, h, s.nq, s.nkv, i, j, seen, lse[r], delta[r], p, ds);
                sc[r] = p;
                dp[r] = ds;
            }
        };
        if (fp_bwd_tile_full(band, wrow0, FP_MFMA_M, kb, Q_KEYS, s.nq, s.nkv))
            p_ds(std::false_type{});
        else
            p_ds(std::true_type{});

            /* dS through the wave's own LDS tile, written in the accumulator's layout and read
             * back in A's (mfma_bwd_layout.h). */
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++)
            ds_s[fp_mfma_bwd_acc_to_rows(L::DSS, lane, 0, 0, r)] = OP::from_f32(dp[r]);
        __syncthreads();
#pragma unroll
        for (int t = 0; t < KT_STEPS; t++) {
            const V4 ads = lds_vec4<T>(ds_s, fp_mfma_bwd_a_from_rows(L::DSS, lane, 0, t, 0));
#pragma unroll
            for (int n = 0; n < NT; n++)
                dq[n] = OP::mma(ads, lds_vec4<T>(kt_s, fp_mfma_bwd_b_from_t(L::KTS, lane, n, t, 0)),
                                dq[n]);
        }
    }

#pragma unroll
    for (int r = 0; r < FP_MFMA_ACC; r++) {
        const int i = wrow0 + fp_mfma_d_row(lane, r);
        if (i >= s.nq) continue;
        T *const gdq = static_cast<T *>(a.d_q) + fp_q_offset(a.qs, s, h, i);
#pragma unroll
        for (int n = 0; n < NT; n++)
            gdq[FP_MFMA_N * n + fp_mfma_d_col(lane)] = fp_from_f32<T>(dq[n][r] * a.mods.scale);
    }
#else
    (void)a;
#endif
}

} // namespace mfma_bwd

#endif /* FP_HIP_MFMA_BWD_Q_KERNEL_CUH */
