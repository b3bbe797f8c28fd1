/*
 * Variant backward_mma: FlashAttention-2 backward for f16 and bf16 on the tensor cores
 * (mma.sync m16n8k16, ldmatrix, cp.async), with every feature of the forward but paged K/V and
 * FP8. Head dims are multiples of 8 up to 256 (rows of whole 16-byte chunks): the instances are
 * built for 64, 128 and 256, and a head dim between runs on the next one up in instances of
 * their own (PAD), its columns past d zero in shared memory (so they add nothing to S or dP) and
 * never stored.
 *
 * Launches: preprocessing (backward/workspace.cuh: D, the LSE in the log2 domain, the f32 dQ
 * accumulator zeroed), then the key-tile kernel (backward/mma_kv_kernel.cuh: dK and dV, and in
 * fast mode dQ by f32 atomics) and the dQ conversion; in deterministic mode the key-tile kernel
 * leaves dQ to the query-tile kernel (backward/mma_q_kernel.cuh), which recomputes P and dS.
 *
 * Instances per input type and head dim (and for head dims below it): with or without score
 * modifiers (softcap, ALiBi, bias: exact per-element scores), and for the key-tile kernel with or
 * without the dQ atomics and with the query rows a step that fit the device
 * (backward/mma_common.cuh). Masks, windows, varlen and GQA are run-time values of every instance.
 * Rows move by cp.async only, so Q, K, V, O and the gradients need strides in whole 16-byte chunks.
 */
#include <stdio.h>

#include "backward/mma_kv_kernel.cuh"
#include "backward/mma_q_kernel.cuh"
#include "backward/workspace.cuh"
#include "common/attention_args.cuh"
#include "common/instance_head_dim.h"
#include "common/smem_fits.h"

static int chunk_strides(const flashport_strides *s) {
    return s->batch % 8 == 0 && s->head % 8 == 0 && s->seq % 8 == 0;
}

static int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* Query rows of p's key-tile step on this device (head dim D): its instance's
 * (fp_bwd_mma_kv_rows), or the fewer rows of the score modifiers' instance where those rows'
 * shared memory exceeds the device's. */
template <int D> static int kv_rows(const fp_problem *p, const fp_gpu_device_props *props) {
    constexpr int rows = fp_bwd_mma_kv_rows<D, false>(), fewer = fp_bwd_mma_kv_rows<D, true>();
    if (fp_bwd_has_score_mods(p)) return fewer;
    return fp_bwd_mma_kv_smem<D, rows>::BYTES <= props->smem_per_block_optin ? rows : fewer;
}

/* Shared memory a block of p's largest kernel takes on this device: the key-tile kernel's, or
 * in deterministic mode the query-tile kernel's where that is more. */
template <int D> static size_t smem_bytes(const fp_problem *p, const fp_gpu_device_props *props) {
    constexpr int fewer = fp_bwd_mma_kv_rows<D, true>();
    const size_t kv = kv_rows<D>(p, props) == fewer
                          ? fp_bwd_mma_kv_smem<D, fewer>::BYTES
                          : fp_bwd_mma_kv_smem<D, fp_bwd_mma_kv_rows<D, false>()>::BYTES;
    constexpr size_t q = fp_bwd_mma_q_smem<D>::BYTES;
    return p->deterministic && q > kv ? q : kv;
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    if (props->cc_major < 8) {
        snprintf(why, why_len,
                 "needs compute capability 8.0+ (mma.sync, cp.async), device is %d.%d",
                 props->cc_major, props->cc_minor);
        return 0;
    }
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "tensor-core path takes f16 or bf16 inputs, not f32");
        return 0;
    }
    if (p->head_dim % 8 != 0 || p->head_dim > 256) {
        snprintf(why, why_len,
                 "head_dim %lld: takes multiples of 8 up to 256 (rows of whole 16-byte chunks)",
                 (long long)p->head_dim);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if (!chunk_strides(&p->q) || !chunk_strides(&p->k) || !chunk_strides(&p->v) ||
        !chunk_strides(&p->o)) {
        snprintf(why, why_len,
                 "Q, K, V and O strides must be multiples of 8 elements (16-byte rows for "
                 "cp.async)");
        return 0;
    }
    const int d = fp_instance_head_dim(p->head_dim);
    const size_t smem = d == 64    ? smem_bytes<64>(p, props)
                        : d == 128 ? smem_bytes<128>(p, props)
                                   : smem_bytes<256>(p, props);
    return fp_smem_fits(smem, props, why, why_len);
}

template <typename T, int D, int ROWS, bool MODS, bool PAD>
static gpuError_t launch_instances(const fp_gpu_launch *L, const fp_bwd_params &a) {
    const fp_problem *p = &L->p;
    constexpr int keys = fp_bwd_mma_kv_keys<D>();
    const dim3 kv_grid((unsigned)((p->seq_kv + keys - 1) / keys),
                       (unsigned)(p->batch * p->heads_kv));
    const dim3 q_grid((unsigned)((p->seq_q + FP_BWD_MMA_ROWS - 1) / FP_BWD_MMA_ROWS),
                      (unsigned)(p->batch * p->heads_q));
    constexpr size_t kv_smem = fp_bwd_mma_kv_smem<D, ROWS>::BYTES;
    constexpr size_t q_smem = fp_bwd_mma_q_smem<D>::BYTES;
    gpuError_t e = fp_bwd_rows_launch<fp_bwd_preprocess_chunks_kernel<T, D>>(L, a);
    if (e != gpuSuccess) return e;
    if (!p->deterministic) {
        e = fp_bwd_launch<fp_bwd_mma_kv_kernel<T, D, ROWS, MODS, true, PAD>, kv_smem>(
            kv_grid, FP_BWD_MMA_KV_THREADS, L->stream, a);
        return e != gpuSuccess ? e
                               : fp_bwd_rows_launch<fp_bwd_convert_dq_chunks_kernel<T, D>>(L, a);
    }
    e = fp_bwd_launch<fp_bwd_mma_kv_kernel<T, D, ROWS, MODS, false, PAD>, kv_smem>(
        kv_grid, FP_BWD_MMA_KV_THREADS, L->stream, a);
    if (e != gpuSuccess) return e;
    return fp_bwd_launch<fp_bwd_mma_q_kernel<T, D, MODS, PAD>, q_smem>(q_grid, FP_BWD_MMA_Q_THREADS,
                                                                       L->stream, a);
}

template <typename T, int D, bool PAD> static gpuError_t launch_dim(const fp_gpu_launch *L) {
    const fp_bwd_params a = fp_bwd_params_make(L);
    constexpr int rows = fp_bwd_mma_kv_rows<D, false>(), fewer = fp_bwd_mma_kv_rows<D, true>();
    if (fp_bwd_has_score_mods(&L->p)) return launch_instances<T, D, fewer, true, PAD>(L, a);
    return kv_rows<D>(&L->p, L->props) == fewer ? launch_instances<T, D, fewer, false, PAD>(L, a)
                                                : launch_instances<T, D, rows, false, PAD>(L, a);
}

/* The instances of head dim D, or of a head dim below it (PAD). */
template <typename T, int D> static gpuError_t launch_padded(const fp_gpu_launch *L) {
    return L->p.head_dim == D ? launch_dim<T, D, false>(L) : launch_dim<T, D, true>(L);
}

template <typename T> static gpuError_t launch_type(const fp_gpu_launch *L) {
    switch (fp_instance_head_dim(L->p.head_dim)) {
    case 64: return launch_padded<T, 64>(L);
    case 128: return launch_padded<T, 128>(L);
    default: return launch_padded<T, 256>(L);
    }
}

static gpuError_t launch(const fp_gpu_launch *L) {
    const fp_args *g = L->args;
    /* supports() checked the strides; only the pointers can be checked here. */
    if (!aligned16(L->q) || !aligned16(L->k) || !aligned16(L->v) || !aligned16(L->o) ||
        !aligned16(g->d_o) || !aligned16(g->d_q) || !aligned16(g->d_k) || !aligned16(g->d_v))
        return gpuErrorMisalignedAddress;
    return L->p.dtype == FLASHPORT_BF16 ? launch_type<__nv_bfloat16>(L) : launch_type<__half>(L);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_backward_mma;
const fp_gpu_kernel fp_kernel_backward_mma = {
    {"backward_mma",
     "FlashAttention-2 backward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async), "
     "f16/bf16, d <= 256 in multiples of 8; varlen K/V, windows, softcap, ALiBi, bias, sinks; fast "
     "(dQ by "
     "f32 atomics) or deterministic",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_BACKWARD},
    supports,
    fp_bwd_workspace_bytes,
    launch,
};
