/*
 * mfma_flash: FlashAttention-2 forward on CDNA matrix cores, f16/bf16 operands with f32
 * accumulation (the design is described in mfma_flash.cuh). One pass over the keys per 128-row
 * query tile. This file also holds the kernel and launcher that mfma_flash_split_kv uses.
 */
#include "kernel_list.h"
#include "mfma_flash.cuh"

#include "mfma_operand.cuh"

namespace mfma_flash {

struct split_args {
    float *part_o; /* NULL: not split, the block writes O and LSE itself */
    float2 *part_ml;
    int64_t rows; /* B * Hq * Nq */
    int keys_per_split;
};

/* Stages rows [k0, k0 + BC) of K as [key][dim] and of V as [dim][key], zero past key_end and d. */
template <typename T, int D>
__device__ __forceinline__ void stage_kv(typename operand<T>::elem *k_s,
                                         typename operand<T>::elem *vt_s, const fp_attn_head<T> &H,
                                         const fp_attn_args &a, int k0, int key_end) {
    typedef operand<T> OP;
    for (int idx = threadIdx.x; idx < BC * D; idx += THREADS) {
        const int key = idx / D, c = idx % D;
        const bool in = k0 + key < key_end && c < a.d;
        const int64_t row = (int64_t)(k0 + key);
        k_s[key * fp_mfma_k_stride(D) + c] =
            OP::from_f32(in ? fp_to_f32(H.k[row * a.ks.seq + c]) : 0.0f);
        vt_s[c * fp_mfma_vt_stride() + key] =
            OP::from_f32(in ? fp_to_f32(H.v[row * a.vs.seq + c]) : 0.0f);
    }
}

/* The second bound asks for two waves per SIMD (HIP's meaning of it) up to d = 128, which caps
 * the kernel at 256 registers per lane; without it the compiler hoists operand loads until one
 * wave fills the register file. At d = 256 the accumulators alone need that room. */
template <typename T, int D>
__global__ void __launch_bounds__(THREADS, D <= 128 ? 2 : 1)
    mfma_flash_kernel(fp_attn_args a, split_args sp) {
#ifdef FP_MFMA_DEVICE
    typedef operand<T> OP;
    typedef typename OP::elem E;
    typedef typename OP::vec4 V4;
    constexpr int DT = D / FP_MFMA_K;  /* K-steps of S = Q K^T */
    constexpr int NT = D / FP_MFMA_N;  /* 32-column tiles of O */
    constexpr int KS = BC / FP_MFMA_K; /* K-steps of O += P V */
    __shared__ E k_s[BC * (D + FP_MFMA_PAD)];
    __shared__ E vt_s[D * (BC + FP_MFMA_PAD)];
    __shared__ E p_s[WAVES][FP_MFMA_M * (BC + FP_MFMA_PAD)];

    const int lane = threadIdx.x % FP_MFMA_WAVE, wave = threadIdx.x / FP_MFMA_WAVE;
    const int row0 = blockIdx.x * BR, wrow0 = row0 + wave * FP_MFMA_M;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    E *const p_w = p_s[wave];

    V4 q[DT];
    {
        const int r = wrow0 + fp_mfma_a_row(lane);
#pragma unroll
        for (int t = 0; t < DT; t++)
#pragma unroll
            for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                const int c = FP_MFMA_K * t + fp_mfma_a_k(lane, j);
                q[t][j] = OP::from_f32(
                    r < a.nq && c < a.d ? fp_to_f32(H.q[(int64_t)r * a.qs.seq + c]) : 0.0f);
            }
    }

    int key_begin = 0, key_end = fp_block_key_end(a, row0, BR);
    if (sp.part_o) {
        key_begin = blockIdx.y * sp.keys_per_split;
        key_end = min(key_end, key_begin + sp.keys_per_split);
    }
    int row_keys[FP_MFMA_ACC];
    fp_softmax_row st[FP_MFMA_ACC];
    acc16 o[NT];
#pragma unroll
    for (int r = 0; r < FP_MFMA_ACC; r++) {
        row_keys[r] = min(fp_visible_keys(a, wrow0 + fp_mfma_d_row(lane, r)), key_end);
        st[r] = fp_softmax_start();
    }
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) o[n][r] = 0.0f;

    for (int k0 = key_begin; k0 < key_end; k0 += BC) {
        __syncthreads(); /* the previous tile's reads of k_s and vt_s are done */
        stage_kv<T, D>(k_s, vt_s, H, a, k0, key_end);
        __syncthreads();

        acc16 s;
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) s[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < DT; t++) {
            V4 b;
#pragma unroll
            for (int j = 0; j < FP_MFMA_OPERAND; j++) b[j] = k_s[fp_mfma_k_offset(D, lane, t, j)];
            s = OP::mma(q[t], b, s);
        }

        const int key = k0 + fp_mfma_d_col(lane);
#pragma unroll
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            const float x = key < row_keys[r] ? s[r] * a.scale_log2 : -INFINITY;
            float m = x;
#pragma unroll
            for (int step = 0; step < FP_MFMA_ROW_REDUCE_STEPS; step++)
                m = fmaxf(m, FP_SHFL_XOR(m, fp_mfma_row_reduce_mask(step), FP_MFMA_ROW_LANES));
            const float alpha = fp_softmax_advance(st[r], m);
            const E p = OP::from_f32(exp2f(x - fp_softmax_base(st[r])));
            float sum = OP::to_f32(p); /* the sum of the P that multiplies V */
#pragma unroll
            for (int step = 0; step < FP_MFMA_ROW_REDUCE_STEPS; step++)
                sum += FP_SHFL_XOR(sum, fp_mfma_row_reduce_mask(step), FP_MFMA_ROW_LANES);
            fp_softmax_add(st[r], sum);
#pragma unroll
            for (int n = 0; n < NT; n++) o[n][r] *= alpha;
            p_w[fp_mfma_p_store_offset(lane, r)] = p;
        }
        __syncthreads(); /* P is written before the wave reads it back in A's layout */

#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            V4 pa;
#pragma unroll
            for (int j = 0; j < FP_MFMA_OPERAND; j++)
                pa[j] = p_w[fp_mfma_p_load_offset(lane, ks, j)];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                V4 b;
#pragma unroll
                for (int j = 0; j < FP_MFMA_OPERAND; j++)
                    b[j] = vt_s[fp_mfma_vt_offset(lane, n, ks, j)];
                o[n] = OP::mma(pa, b, o[n]);
            }
        }
    }

    const int col_in_tile = fp_mfma_d_col(lane);
#pragma unroll
    for (int r = 0; r < FP_MFMA_ACC; r++) {
        const int row = wrow0 + fp_mfma_d_row(lane, r);
        if (row >= a.nq) continue;
        const float inv = fp_softmax_inv_sum(st[r]);
        if (sp.part_o) {
            const int64_t prow = (int64_t)blockIdx.y * sp.rows + (int64_t)blockIdx.z * a.nq + row;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int col = FP_MFMA_N * n + col_in_tile;
                if (col < a.d) sp.part_o[prow * a.d + col] = o[n][r] * inv;
            }
            if (col_in_tile == 0) sp.part_ml[prow] = make_float2(st[r].m, st[r].l);
        } else {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int col = FP_MFMA_N * n + col_in_tile;
                if (col < a.d) H.o[(int64_t)row * a.os.seq + col] = fp_from_f32<T>(o[n][r] * inv);
            }
            if (H.lse && col_in_tile == 0) H.lse[row] = fp_softmax_lse(st[r]);
        }
    }
#else
    (void)a;
    (void)sp;
#endif
}

template <typename T, int D>
gpuError_t launch_typed(const fp_gpu_launch *L, const split_args &sp, int splits) {
    const fp_problem *p = &L->p;
    const dim3 grid((unsigned)((p->seq_q + BR - 1) / BR), (unsigned)splits,
                    (unsigned)(p->batch * p->heads_q));
    mfma_flash_kernel<T, D> FP_GPU_LAUNCH(grid, THREADS, 0, L->stream)(fp_attn_args_make(L), sp);
    return gpuGetLastError();
}

template <typename T>
gpuError_t launch_dtype(const fp_gpu_launch *L, const split_args &sp, int splits) {
    const int64_t d = L->p.head_dim;
    if (d <= 64) return launch_typed<T, 64>(L, sp, splits);
    if (d <= 128) return launch_typed<T, 128>(L, sp, splits);
    return launch_typed<T, 256>(L, sp, splits);
}

gpuError_t launch(const fp_gpu_launch *L, const fp_split_kv_params *split) {
    const fp_problem *p = &L->p;
    split_args sp = {0, 0, 0, 0};
    const int splits = split ? split->splits : 1;
    if (splits > 1) {
        sp.part_o = (float *)L->workspace;
        sp.part_ml = (float2 *)((char *)L->workspace + fp_split_kv_ml_offset(p, splits));
        sp.keys_per_split = split->keys_per_split;
        sp.rows = p->batch * p->heads_q * p->seq_q;
    }
    gpuError_t err = p->dtype == FLASHPORT_BF16 ? launch_dtype<gpuBFloat16>(L, sp, splits)
                                                : launch_dtype<gpuHalf>(L, sp, splits);
    if (err != gpuSuccess || splits < 2) return err;
    return fp_split_kv_merge(L, splits);
}

} // namespace mfma_flash

namespace {

int supports(const fp_problem *p, const fp_gpu_device_props *props, fp_gpu_kernel_params *params,
             char *why, size_t why_len) {
    (void)params;
    return mfma_flash::supports_common(p, props, why, why_len);
}

gpuError_t launch(const fp_gpu_launch *L) { return mfma_flash::launch(L, NULL); }

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_mfma_flash = {
    {"mfma_flash",
     "FlashAttention-2 forward on MFMA matrix cores (32x32x8), f16/bf16 with f32 accumulation, "
     "d <= 256, gfx90a/gfx940",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    supports,
    NULL,
    launch,
};
