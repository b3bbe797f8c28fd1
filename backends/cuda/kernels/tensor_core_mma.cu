/*
 * Variant tensor_core_mma: FlashAttention-2 forward for f16 and bf16 on the tensor cores
 * (mma/flash_forward_kernel.cuh), one pass over the keys. This file also holds the host side
 * the split-KV variant shares: the support check and the launcher of every kernel instance.
 */
#include <atomic>
#include <stdio.h>

#include "mma/flash_forward.h"
#include "mma/flash_forward_kernel.cuh"

/* Largest sizes the kernel's 32-bit row and key indices take with room to spare. */
#define FP_TC_MAX_SEQ (1 << 30)
#define FP_TC_MAX_GRID_Y 65535

static int padded_head_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

int fp_tc_block_keys(int64_t head_dim)
{
    switch (padded_head_dim(head_dim)) {
    case 64: return fp_tc_config<64>::BC;
    case 128: return fp_tc_config<128>::BC;
    default: return fp_tc_config<256>::BC;
    }
}

static size_t smem_bytes(int padded_d)
{
    switch (padded_d) {
    case 64: return fp_tc_smem_bytes<64>();
    case 128: return fp_tc_smem_bytes<128>();
    default: return fp_tc_smem_bytes<256>();
    }
}

int fp_tc_forward_support(const flashport_problem *p, const fp_gpu_device_props *props, char *why,
                          size_t why_len)
{
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
    if (p->head_dim > 256) {
        snprintf(why, why_len, "head_dim %lld > 256", (long long)p->head_dim);
        return 0;
    }
    if (p->seq_q > FP_TC_MAX_SEQ || p->seq_kv > FP_TC_MAX_SEQ) {
        snprintf(why, why_len, "sequence lengths above 2^30 are not supported");
        return 0;
    }
    if (p->batch * p->heads_q > FP_TC_MAX_GRID_Y) {
        snprintf(why, why_len, "batch*heads_q = %lld exceeds the grid's y limit %d",
                 (long long)(p->batch * p->heads_q), FP_TC_MAX_GRID_Y);
        return 0;
    }
    const size_t smem = smem_bytes(padded_head_dim(p->head_dim));
    if (smem > props->smem_per_block_optin) {
        snprintf(why, why_len, "needs %zu bytes of shared memory a block, device allows %zu", smem,
                 props->smem_per_block_optin);
        return 0;
    }
    return 1;
}

/* Raises the dynamic shared-memory limit of one kernel instance, once per device. */
template <typename T, int D>
static gpuError_t raise_smem_limit()
{
    static std::atomic<unsigned long long> raised_on{0};
    int device = 0;
    gpuError_t err = cudaGetDevice(&device);
    if (err != gpuSuccess)
        return err;
    const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
    if (bit && (raised_on.load(std::memory_order_acquire) & bit))
        return gpuSuccess;
    err = gpuFuncSetAttribute(reinterpret_cast<const void *>(&fp_tc_forward_kernel<T, D>),
                              gpuFuncAttributeMaxDynamicSharedMemorySize,
                              (int)fp_tc_smem_bytes<D>());
    if (err == gpuSuccess && bit)
        raised_on.fetch_or(bit, std::memory_order_release);
    return err;
}

template <typename T, int D>
static gpuError_t launch_instance(const fp_tc_params &prm, dim3 grid, gpuStream_t stream)
{
    gpuError_t err = raise_smem_limit<T, D>();
    if (err != gpuSuccess)
        return err;
    constexpr int threads = fp_tc_config<D>::WARPS * 32;
    fp_tc_forward_kernel<T, D><<<grid, threads, fp_tc_smem_bytes<D>(), stream>>>(prm);
    return gpuGetLastError();
}

template <typename T>
static gpuError_t launch_head_dim(const fp_tc_params &prm, dim3 grid, gpuStream_t stream)
{
    switch (padded_head_dim(prm.d)) {
    case 64: return launch_instance<T, 64>(prm, grid, stream);
    case 128: return launch_instance<T, 128>(prm, grid, stream);
    default: return launch_instance<T, 256>(prm, grid, stream);
    }
}

static int aligned(const void *ptr, unsigned bytes) { return ((uintptr_t)ptr % bytes) == 0; }

/* cp.async moves whole 16-byte chunks: every row start must be 16-byte aligned. */
static int chunk_aligned(const void *base, const flashport_strides *s)
{
    return aligned(base, 16) && s->batch % 8 == 0 && s->head % 8 == 0 && s->seq % 8 == 0;
}

gpuError_t fp_tc_forward_launch(const fp_gpu_launch *L, int splits, int keys_per_split,
                                float *part_o, float *part_ml)
{
    const flashport_problem *p = &L->p;
    fp_tc_params prm;
    prm.q = L->q;
    prm.k = L->k;
    prm.v = L->v;
    prm.o = L->o;
    prm.lse = splits ? NULL : L->lse;
    prm.part_o = splits ? part_o : NULL;
    prm.part_ml = splits ? part_ml : NULL;
    prm.q_b = p->q.batch, prm.q_h = p->q.head, prm.q_s = p->q.seq;
    prm.k_b = p->k.batch, prm.k_h = p->k.head, prm.k_s = p->k.seq;
    prm.v_b = p->v.batch, prm.v_h = p->v.head, prm.v_s = p->v.seq;
    prm.o_b = p->o.batch, prm.o_h = p->o.head, prm.o_s = p->o.seq;
    prm.rows = p->batch * p->heads_q * p->seq_q;
    prm.heads_q = (int)p->heads_q;
    prm.group = (int)(p->heads_q / p->heads_kv);
    prm.seq_q = (int)p->seq_q;
    prm.seq_kv = (int)p->seq_kv;
    prm.d = (int)p->head_dim;
    prm.keys_per_split = splits ? keys_per_split : (int)p->seq_kv;
    prm.scale_log2 = p->scale * 1.44269504088896340736f;
    prm.causal = p->causal != 0;
    prm.async_loads = chunk_aligned(L->q, &p->q) && chunk_aligned(L->k, &p->k) &&
                      chunk_aligned(L->v, &p->v);
    prm.o_pairs = aligned(L->o, 4) && p->o.batch % 2 == 0 && p->o.head % 2 == 0 &&
                  p->o.seq % 2 == 0;

    const dim3 grid((unsigned)((p->seq_q + FP_TC_BLOCK_ROWS - 1) / FP_TC_BLOCK_ROWS),
                    (unsigned)(p->batch * p->heads_q), (unsigned)(splits ? splits : 1));
    if (p->dtype == FLASHPORT_F16)
        return launch_head_dim<__half>(prm, grid, L->stream);
    return launch_head_dim<__nv_bfloat16>(prm, grid, L->stream);
}

static int supports(const flashport_problem *p, const fp_gpu_device_props *props, int64_t *param,
                    char *why, size_t why_len)
{
    (void)param;
    return fp_tc_forward_support(p, props, why, why_len);
}

static gpuError_t launch(const fp_gpu_launch *L)
{
    return fp_tc_forward_launch(L, 0, 0, NULL, NULL);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_tensor_core_mma;
const fp_gpu_kernel fp_kernel_tensor_core_mma = {
    {"tensor_core_mma",
     "FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async), f16/bf16",
     FP_PRECISION_NATIVE},
    supports,
    NULL,
    launch,
};
