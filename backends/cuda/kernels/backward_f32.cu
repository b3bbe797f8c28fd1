/*
 * Variant backward_f32: the backward pass on the CUDA cores in f32 (backward/f32_kernels.cuh),
 * for f32, f16 and bf16 inputs and head dims up to 256, with every feature of the forward but
 * paged K/V and FP8. The planner's choice for f32 problems, and for the f16/bf16 shapes the
 * tensor-core backward does not take.
 *
 * Launches: preprocessing (D, LSE, dQ accumulator zeroed), the key-tile kernel (dK, dV; in fast
 * mode dQ by atomics), then the dQ conversion (fast) or the query-tile dQ kernel
 * (deterministic).
 */
#include <stdio.h>

#include "../kernel_list.h"
#include "backward/f32_kernels.cuh"
#include "backward/workspace.cuh"
#include "common/attention_args.cuh"
#include "common/instance_head_dim.h"
#include "common/smem_fits.h"

#define FP_BWD_F32_MAX_D 256

template <int DMAX> static size_t smem_bytes() { return fp_bwd_f32_tile<DMAX>::SMEM_BYTES; }

static size_t smem_for(int64_t d) {
    switch (fp_instance_head_dim(d)) {
    case 64: return smem_bytes<64>();
    case 128: return smem_bytes<128>();
    default: return smem_bytes<256>();
    }
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    if (p->head_dim > FP_BWD_F32_MAX_D) {
        snprintf(why, why_len, "head_dim %lld > %d", (long long)p->head_dim, FP_BWD_F32_MAX_D);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    const size_t smem = smem_for(p->head_dim);
    return fp_smem_fits(smem, props, why, why_len);
}

template <typename T, int DMAX>
static gpuError_t launch_dim(const fp_gpu_launch *L, const fp_bwd_params &a) {
    const fp_problem *p = &L->p;
    constexpr size_t smem = fp_bwd_f32_tile<DMAX>::SMEM_BYTES;
    const dim3 kv_grid((unsigned)((p->seq_kv + FP_BWD_F32_KEYS - 1) / FP_BWD_F32_KEYS),
                       (unsigned)(p->batch * p->heads_kv));
    const dim3 q_grid((unsigned)((p->seq_q + FP_BWD_F32_ROWS - 1) / FP_BWD_F32_ROWS),
                      (unsigned)(p->batch * p->heads_q));
    gpuError_t e = fp_bwd_rows_launch<fp_bwd_preprocess_kernel<T>>(L, a);
    if (e != gpuSuccess) return e;
    if (!p->deterministic) {
        e = fp_bwd_launch<fp_bwd_f32_kv_kernel<T, DMAX, true>, smem>(kv_grid, FP_BWD_F32_THREADS,
                                                                     L->stream, a);
        return e != gpuSuccess ? e : fp_bwd_rows_launch<fp_bwd_convert_dq_kernel<T>>(L, a);
    }
    e = fp_bwd_launch<fp_bwd_f32_kv_kernel<T, DMAX, false>, smem>(kv_grid, FP_BWD_F32_THREADS,
                                                                  L->stream, a);
    if (e != gpuSuccess) return e;
    return fp_bwd_launch<fp_bwd_f32_q_kernel<T, DMAX>, smem>(q_grid, FP_BWD_F32_THREADS, L->stream,
                                                             a);
}

template <typename T> static gpuError_t launch_type(const fp_gpu_launch *L) {
    const fp_bwd_params a = fp_bwd_params_make(L);
    switch (fp_instance_head_dim(L->p.head_dim)) {
    case 64: return launch_dim<T, 64>(L, a);
    case 128: return launch_dim<T, 128>(L, a);
    default: return launch_dim<T, 256>(L, a);
    }
}

static gpuError_t launch(const fp_gpu_launch *L) {
    switch (L->p.dtype) {
    case FLASHPORT_F16: return launch_type<gpuHalf>(L);
    case FLASHPORT_BF16: return launch_type<gpuBFloat16>(L);
    default: return launch_type<float>(L);
    }
}

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_backward_f32 = {
    {"backward_f32",
     "FlashAttention-2 backward on CUDA cores in f32 (f32/f16/bf16 in, d <= 256); varlen K/V, "
     "windows, softcap, ALiBi, bias, sinks; fast (dQ by atomics) or deterministic",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_BACKWARD},
    supports,
    fp_bwd_workspace_bytes,
    launch,
};
