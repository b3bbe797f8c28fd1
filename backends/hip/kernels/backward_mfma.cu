/*
 * Variant backward_mfma: FlashAttention-2 backward for f16 and bf16 on CDNA matrix cores (MFMA
 * 32x32x8, f32 accumulation), head dims 64 and 128, with every feature of the forward but paged
 * K/V and FP8, as backward_mma takes them on CUDA.
 *
 * Launches: preprocessing (backward/workspace.cuh, shared with backward_mma: D, the LSE in the
 * log2 domain, the f32 dQ accumulator zeroed in its fragment tiles), then the key-tile kernel
 * (mfma_bwd_kv_kernel.cuh: dK and dV, and in fast mode dQ by f32 atomics) and the shared dQ
 * conversion; in deterministic mode the key-tile kernel leaves dQ to the query-tile kernel
 * (mfma_bwd_q_kernel.cuh), which recomputes P and dS.
 *
 * Instances per input type and head dim: with or without score modifiers (softcap, ALiBi, bias:
 * exact per-element scores), and for the key-tile kernel with or without the dQ atomics. Masks,
 * windows, varlen and GQA are run-time values of every instance. The main kernels read any
 * strides; the shared preprocessing and conversion move O, dO and dQ rows by 16-byte accesses.
 */
#include <stdio.h>

#include "kernel_list.h"
#include "mfma_bwd_q_kernel.cuh"
#include "mfma_flash.cuh"
/* After the kernels, as backward_mma.cu has it: its fp_bwd_rows() hides score.cuh's struct. */
#include "../../cuda/kernels/backward/workspace.cuh"

namespace {

int chunk_strides(const flashport_strides *s) {
    return s->batch % 8 == 0 && s->head % 8 == 0 && s->seq % 8 == 0;
}

int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* LDS a block of p's kernels takes: the key-tile kernel's, and in deterministic mode the larger
 * of it (without the dQ tiles) and the query-tile kernel's. */
template <int D> size_t lds_bytes(const fp_problem *p) {
    if (!p->deterministic) return mfma_bwd::kv_lds<D, true>::BYTES;
    const size_t kv = mfma_bwd::kv_lds<D, false>::BYTES, q = mfma_bwd::q_lds<D>::BYTES;
    return kv > q ? kv : q;
}

int supports(const fp_problem *p, const fp_gpu_device_props *props, fp_gpu_kernel_params *params,
             char *why, size_t why_len) {
    (void)params;
    if (!mfma_flash::device_has_mfma(props)) {
        snprintf(why, why_len, "MFMA backward needs a gfx90a or gfx940 device, this is %s",
                 props->arch[0] ? props->arch : "unknown");
        return 0;
    }
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "MFMA backward takes f16 or bf16 inputs");
        return 0;
    }
    if (p->head_dim != 64 && p->head_dim != 128) {
        snprintf(why, why_len, "head_dim %lld: built for head dims 64 and 128 only",
                 (long long)p->head_dim);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if (!chunk_strides(&p->q) || !chunk_strides(&p->o)) {
        snprintf(why, why_len,
                 "Q and O strides must be multiples of 8 elements (the preprocessing and dQ "
                 "conversion move 16-byte rows of O, dO and dQ)");
        return 0;
    }
    const size_t lds = p->head_dim == 64 ? lds_bytes<64>(p) : lds_bytes<128>(p);
    if (lds > props->smem_per_block_optin) {
        snprintf(why, why_len, "needs %zu bytes of LDS a block, device allows %zu", lds,
                 props->smem_per_block_optin);
        return 0;
    }
    return 1;
}

/* Enqueues one of the main kernels (static LDS); an empty grid launches nothing. */
template <auto KERNEL>
gpuError_t launch_main(dim3 grid, gpuStream_t stream, const fp_bwd_params &a) {
    if (grid.x == 0) return gpuSuccess;
    KERNEL FP_GPU_LAUNCH(grid, mfma_bwd::THREADS, 0, stream)(a);
    return gpuGetLastError();
}

template <typename T, int D, bool MODS> gpuError_t launch_instances(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    const fp_bwd_params a = fp_bwd_params_make(L);
    const dim3 kv_grid((unsigned)((p->seq_kv + mfma_bwd::BC - 1) / mfma_bwd::BC),
                       (unsigned)(p->batch * p->heads_kv));
    const dim3 q_grid((unsigned)((p->seq_q + mfma_bwd::Q_ROWS - 1) / mfma_bwd::Q_ROWS),
                      (unsigned)(p->batch * p->heads_q));
    gpuError_t e = fp_bwd_rows_launch<fp_bwd_preprocess_chunks_kernel<T, D>>(L, a);
    if (e != gpuSuccess) return e;
    if (!p->deterministic) {
        e = launch_main<mfma_bwd::kv_kernel<T, D, MODS, true>>(kv_grid, L->stream, a);
        return e != gpuSuccess ? e
                               : fp_bwd_rows_launch<fp_bwd_convert_dq_chunks_kernel<T, D>>(L, a);
    }
    e = launch_main<mfma_bwd::kv_kernel<T, D, MODS, false>>(kv_grid, L->stream, a);
    if (e != gpuSuccess) return e;
    return launch_main<mfma_bwd::q_kernel<T, D, MODS>>(q_grid, L->stream, a);
}

template <typename T, int D> gpuError_t launch_dim(const fp_gpu_launch *L) {
    return fp_bwd_has_score_mods(&L->p) ? launch_instances<T, D, true>(L)
                                        : launch_instances<T, D, false>(L);
}

template <typename T> gpuError_t launch_type(const fp_gpu_launch *L) {
    return L->p.head_dim == 64 ? launch_dim<T, 64>(L) : launch_dim<T, 128>(L);
}

gpuError_t launch(const fp_gpu_launch *L) {
    /* supports() checked the strides; only the pointers can be checked here. */
    if (!aligned16(L->o) || !aligned16(L->args->d_o) || !aligned16(L->args->d_q))
        return gpuErrorMisalignedAddress;
    return L->p.dtype == FLASHPORT_BF16 ? launch_type<gpuBFloat16>(L) : launch_type<gpuHalf>(L);
}

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_backward_mfma = {
    {"backward_mfma",
     "FlashAttention-2 backward on MFMA matrix cores (32x32x8), f16/bf16, d = 64 or 128, "
     "gfx90a/gfx940; varlen K/V, windows, softcap, ALiBi, bias, sinks; fast (dQ by f32 atomics) "
     "or deterministic",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_BACKWARD},
    supports,
    fp_bwd_workspace_bytes,
    launch,
};
