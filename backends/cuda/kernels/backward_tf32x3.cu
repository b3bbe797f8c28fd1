/*
 * Variant backward_tf32x3: FlashAttention-2 backward for f32 on the tensor cores with the
 * 3xTF32 split (mma.sync m16n8k8 .tf32, three mma a product, f32 accumulation), head dims 64
 * and 128, with every feature of backward_mma (and so of the forward) but paged K/V and FP8.
 * Every product, P and dS included, takes both tf32 halves of its operands, so the gradients
 * keep about f32 accuracy, as tensor_core_tf32x3 does for the forward.
 *
 * Launches, as backward_mma's: preprocessing (backward/workspace.cuh: D, the LSE in the log2
 * domain, the f32 dQ accumulator in fragment tiles zeroed), then the key-tile kernel
 * (backward/tf32x3_kv_kernel.cuh: dK and dV, and in fast mode dQ by f32 atomics) and the dQ
 * conversion; in deterministic mode the key-tile kernel leaves dQ to the query-tile kernel
 * (backward/tf32x3_q_kernel.cuh), which recomputes P and dS.
 *
 * Instances per head dim: with or without score modifiers (softcap, ALiBi, bias: exact
 * per-element scores), and for the key-tile kernel with or without the dQ atomics. Masks,
 * windows, varlen and GQA are run-time values of every instance. Rows move by cp.async only, so
 * Q, K, V, O and the gradients need strides in whole 16-byte chunks (multiples of 4 floats).
 */
#include <stdio.h>

#include "backward/tf32x3_kv_kernel.cuh"
#include "backward/tf32x3_q_kernel.cuh"
#include "backward/workspace.cuh"
#include "common/smem_fits.h"
#include "tf32x3/host_params.h"

static int chunk_strides(const flashport_strides *s) {
    return s->batch % 4 == 0 && s->head % 4 == 0 && s->seq % 4 == 0;
}

static int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* Shared memory of the larger of p's two kernels (both per block). */
template <int D> static size_t smem_bytes(const fp_problem *p) {
    const size_t kv = fp_bwd_tf32x3_kv_tile<D>::BYTES, q = fp_bwd_tf32x3_q_tile<D>::BYTES;
    return p->deterministic && q > kv ? q : kv;
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    /* Compute capability 8.0+, f32 inputs, sizes within int. */
    if (!fp_tf32x3_supports_problem(p, props, why, why_len)) return 0;
    if (p->head_dim != 64 && p->head_dim != 128) {
        snprintf(why, why_len, "head_dim %lld: built for head dims 64 and 128 only",
                 (long long)p->head_dim);
        return 0;
    }
    if (!chunk_strides(&p->q) || !chunk_strides(&p->k) || !chunk_strides(&p->v) ||
        !chunk_strides(&p->o)) {
        snprintf(why, why_len,
                 "Q, K, V and O strides must be multiples of 4 elements (16-byte rows for "
                 "cp.async)");
        return 0;
    }
    const size_t smem = p->head_dim == 64 ? smem_bytes<64>(p) : smem_bytes<128>(p);
    return fp_smem_fits(smem, props, why, why_len);
}

template <int D, bool MODS> static gpuError_t launch_instances(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    const fp_bwd_params a = fp_bwd_params_make(L);
    const dim3 kv_grid((unsigned)((p->seq_kv + FP_BWD_TF32X3_KEYS - 1) / FP_BWD_TF32X3_KEYS),
                       (unsigned)(p->batch * p->heads_kv));
    const dim3 q_grid((unsigned)((p->seq_q + FP_BWD_TF32X3_Q_ROWS - 1) / FP_BWD_TF32X3_Q_ROWS),
                      (unsigned)(p->batch * p->heads_q));
    constexpr size_t kv_smem = fp_bwd_tf32x3_kv_tile<D>::BYTES;
    constexpr size_t q_smem = fp_bwd_tf32x3_q_tile<D>::BYTES;
    gpuError_t e = fp_bwd_rows_launch<fp_bwd_preprocess_chunks_kernel<float, D>>(L, a);
    if (e != gpuSuccess) return e;
    if (!p->deterministic) {
        e = fp_bwd_launch<fp_bwd_tf32x3_kv_kernel<D, MODS, true>, kv_smem>(
            kv_grid, FP_BWD_TF32X3_THREADS, L->stream, a);
        return e != gpuSuccess
                   ? e
                   : fp_bwd_rows_launch<fp_bwd_convert_dq_chunks_kernel<float, D>>(L, a);
    }
    e = fp_bwd_launch<fp_bwd_tf32x3_kv_kernel<D, MODS, false>, kv_smem>(
        kv_grid, FP_BWD_TF32X3_THREADS, L->stream, a);
    if (e != gpuSuccess) return e;
    return fp_bwd_launch<fp_bwd_tf32x3_q_kernel<D, MODS>, q_smem>(q_grid, FP_BWD_TF32X3_Q_THREADS,
                                                                  L->stream, a);
}

template <int D> static gpuError_t launch_dim(const fp_gpu_launch *L) {
    return fp_bwd_has_score_mods(&L->p) ? launch_instances<D, true>(L)
                                        : launch_instances<D, false>(L);
}

static gpuError_t launch(const fp_gpu_launch *L) {
    const fp_args *g = L->args;
    /* supports() checked the strides; only the pointers can be checked here. */
    if (!aligned16(L->q) || !aligned16(L->k) || !aligned16(L->v) || !aligned16(L->o) ||
        !aligned16(g->d_o) || !aligned16(g->d_q) || !aligned16(g->d_k) || !aligned16(g->d_v))
        return gpuErrorMisalignedAddress;
    return L->p.head_dim == 64 ? launch_dim<64>(L) : launch_dim<128>(L);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_backward_tf32x3;
const fp_gpu_kernel fp_kernel_backward_tf32x3 = {
    {"backward_tf32x3",
     "FlashAttention-2 backward on tensor cores for f32, 3xTF32 split (mma.sync m16n8k8 .tf32, "
     "cp.async), d = 64 or 128; varlen K/V, windows, softcap, ALiBi, bias, sinks; fast (dQ by "
     "f32 atomics) or deterministic",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_BACKWARD},
    supports,
    fp_bwd_workspace_bytes,
    launch,
};
