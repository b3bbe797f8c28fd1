/*
 * Variant hopper_wgmma_tf32x3: f32 forward on compute capability 9.0 with every product on .tf32
 * wgmma as the 3xTF32 split (tf32x3_forward_kernel.cuh), the accuracy of tensor_core_tf32x3 at
 * Hopper's warpgroup rates. Head dims 64 and 128; causal and sliding windows, sinks, GQA,
 * Nq != Nkv, LSE, packed batches (varlen) and paged K/V (any page size: the split pass locates
 * each key row on its own). Softcap, ALiBi and bias are not implemented (the planner declines
 * them by name from the feature list below).
 *
 * Compiled for sm_90a only (FLASHPORT_CUDA_HOPPER_ARCHITECTURES), like hopper_wgmma.cu, whose
 * device check (device_check.h) it shares; it needs no TMA. Q, K and V are read by 16-byte loads,
 * so their strides must be whole multiples of 4 elements (checked here) and their bases 16-byte
 * aligned (checked at launch).
 */
#include <math.h>
#include <stdio.h>

#include "../common/attention_args.cuh"
#include "../common/smem_limit.cuh"
#include "device_check.h"
#include "tf32x3_forward_kernel.cuh"

template <int D>
static cudaError_t launch_instance(const fp_hopper_tf32x3_params &prm, dim3 grid,
                                   cudaStream_t stream) {
    constexpr size_t smem = fp_hopper_tf32x3_smem<D>::BYTES;
    cudaError_t err = fp_raise_smem_limit<fp_hopper_tf32x3_forward_kernel<D>, smem>();
    if (err != cudaSuccess) return err;
    fp_hopper_tf32x3_forward_kernel<D><<<grid, fp_hopper_block<2>::THREADS, smem, stream>>>(prm);
    return cudaGetLastError();
}

template <int D> static const void *kernel_of() {
    return reinterpret_cast<const void *>(fp_hopper_tf32x3_forward_kernel<D>);
}

/* One built head dim: its shared memory and entry points. */
struct tf32x3_instance {
    int d;
    size_t smem;
    const void *(*kernel)();
    cudaError_t (*launch)(const fp_hopper_tf32x3_params &, dim3, cudaStream_t);
};
static const tf32x3_instance instances[] = {
    {64, fp_hopper_tf32x3_smem<64>::BYTES, kernel_of<64>, launch_instance<64>},
    {128, fp_hopper_tf32x3_smem<128>::BYTES, kernel_of<128>, launch_instance<128>},
};

static const tf32x3_instance *find_instance(int64_t d) {
    for (const tf32x3_instance &in : instances)
        if (in.d == d) return &in;
    return NULL;
}

/* 1 when every stride of a tensor that is stepped (its dimension longer than 1) is a whole
 * number of 16-byte chunks, as the split pass's loads need; else 0 and the reason. */
static int strides_fit(const char *tensor, const flashport_strides *st, int64_t batches,
                       int64_t heads, int64_t rows, char *why, size_t why_len) {
    const struct {
        const char *name;
        int64_t len, stride;
    } dims[3] = {
        {"sequence", rows, st->seq}, {"head", heads, st->head}, {"batch", batches, st->batch}};
    for (const auto &d : dims)
        if (d.len > 1 && (d.stride <= 0 || d.stride % 4 != 0)) {
            snprintf(why, why_len,
                     "16-byte loads need %s's %s stride to be a positive multiple of 4 elements, "
                     "got %lld",
                     tensor, d.name, (long long)d.stride);
            return 0;
        }
    return 1;
}

/* The batches and rows of K/V's strided dimensions: the problem's, one batch of the packed rows,
 * or a paged cache's pages. */
static int64_t kv_batches(const fp_problem *p) {
    switch (p->kv_layout) {
    case FLASHPORT_KV_VARLEN: return 1;
    case FLASHPORT_KV_PAGED: return p->num_pages;
    default: return p->batch;
    }
}
static int64_t kv_rows(const fp_problem *p) {
    switch (p->kv_layout) {
    case FLASHPORT_KV_VARLEN: return p->total_kv;
    case FLASHPORT_KV_PAGED: return p->page_size;
    default: return p->seq_kv;
    }
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    if (p->dtype != FLASHPORT_F32) {
        snprintf(why, why_len, "takes f32 inputs only");
        return 0;
    }
    const tf32x3_instance *in = find_instance(p->head_dim);
    if (!in) {
        /* d = 256 would need 256 KB of shared memory for the split Q alone. */
        snprintf(why, why_len, "head_dim %lld: only 64 and 128 are built", (long long)p->head_dim);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    const int64_t q_rows = p->q_varlen ? p->total_q : p->seq_q;
    const int64_t q_batches = p->q_varlen ? 1 : p->batch;
    if (!strides_fit("Q", &p->q, q_batches, p->heads_q, q_rows, why, why_len) ||
        !strides_fit("K", &p->k, kv_batches(p), p->heads_kv, kv_rows(p), why, why_len) ||
        !strides_fit("V", &p->v, kv_batches(p), p->heads_kv, kv_rows(p), why, why_len))
        return 0;
    return fp_hopper_device_loads(props, in->smem, in->kernel(), why, why_len);
}

static cudaError_t launch(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    const tf32x3_instance *in = find_instance(p->head_dim);
    if (!in) return cudaErrorInvalidValue;
    if ((uintptr_t)L->q % 16 != 0 || (uintptr_t)L->k % 16 != 0 || (uintptr_t)L->v % 16 != 0)
        return cudaErrorMisalignedAddress;
    fp_hopper_tf32x3_params prm;
    prm.q = static_cast<const float *>(L->q);
    prm.k = static_cast<const float *>(L->k);
    prm.v = static_cast<const float *>(L->v);
    prm.o = static_cast<float *>(L->o);
    prm.lse = L->lse;
    prm.qs = p->q;
    prm.ks = p->k;
    prm.vs = p->v;
    prm.os = p->o;
    prm.seq = fp_seq_layout_make(p, L->args);
    prm.mods = fp_score_mods_make(p, L->args);
    prm.group = (int)(p->heads_q / p->heads_kv);
    const dim3 grid((unsigned)((p->seq_q + fp_hopper_block<2>::BR - 1) / fp_hopper_block<2>::BR),
                    (unsigned)(p->batch * p->heads_q));
    return in->launch(prm, grid, L->stream);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_hopper_wgmma_tf32x3;
const fp_gpu_kernel fp_kernel_hopper_wgmma_tf32x3 = {
    {"hopper_wgmma_tf32x3",
     "f32 forward on Hopper with the 3xTF32 split on wgmma (split K/V ring, warp "
     "specialisation, setmaxnreg), d = 64 and 128; windows, sinks, packed batches, paged K/V",
     FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW | FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED},
    supports,
    NULL,
    launch,
};
