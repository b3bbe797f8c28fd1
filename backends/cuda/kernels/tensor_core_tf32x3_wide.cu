/*
 * Variant tensor_core_tf32x3_wide: the 3xTF32 tensor-core forward for f32 heads wider than 256
 * (d <= 1024, padded to 512 or 1024), with the head dimension split across the eight warps of a
 * block (tf32x3/wide_forward_kernel.cuh). Blocks hold 16 query rows, so a single head of 1024
 * rows makes only 64 of them; where B*Hq*ceil(Nq/16) blocks cannot fill the GPU the keys are
 * split across blocks and the partials merged (split_kv.h).
 *
 * param[0] = keys per split (0: not split), param[1] = splits.
 */
#include <stdio.h>

#include "../kernel_list.h"
#include "common/smem_limit.cuh"
#include "split_kv.h"
#include "tf32x3/wide_forward_kernel.cuh"

namespace {

constexpr int MAX_SEQ = 1 << 30;
constexpr int MAX_GRID_YZ = 65535;
/* A split shorter than this spends more on its fixed costs (loading Q, the epilogue, the merge)
 * than the parallelism returns. */
constexpr int MIN_KEYS_PER_SPLIT = 128;

/* Tile widths: three half-tile slots of BC x D floats fill about 192 KiB either way. */
typedef fp_tf32x3_wide_config<512, 32> cfg_d512;
typedef fp_tf32x3_wide_config<1024, 16> cfg_d1024;

template <typename F> auto with_config(int64_t d, F &&f)
{
    if (d <= 512)
        return f(cfg_d512());
    return f(cfg_d1024());
}

int supports(const flashport_problem *p, const fp_gpu_device_props *props, int64_t *param,
             char *why, size_t why_len)
{
    if (props->cc_major < 8) {
        snprintf(why, why_len,
                 "needs compute capability 8.0+ (mma.sync .tf32, cp.async), device is %d.%d",
                 props->cc_major, props->cc_minor);
        return 0;
    }
    if (p->dtype != FLASHPORT_F32) {
        snprintf(why, why_len, "3xTF32 path takes f32 inputs only");
        return 0;
    }
    if (p->head_dim <= 256 || p->head_dim > 1024) {
        snprintf(why, why_len, "head_dim %lld outside (256, 1024]", (long long)p->head_dim);
        return 0;
    }
    if (p->seq_q > MAX_SEQ || p->seq_kv > MAX_SEQ) {
        snprintf(why, why_len, "sequence lengths above 2^30 are not supported");
        return 0;
    }
    if (p->batch * p->heads_q > MAX_GRID_YZ) {
        snprintf(why, why_len, "batch*heads_q = %lld exceeds the grid's y limit %d",
                 (long long)(p->batch * p->heads_q), MAX_GRID_YZ);
        return 0;
    }
    const size_t smem = with_config(p->head_dim, [](auto cfg) { return decltype(cfg)::SMEM_BYTES; });
    if (smem > props->smem_per_block_optin) {
        snprintf(why, why_len, "needs %zu bytes of shared memory a block, device allows %zu",
                 smem, props->smem_per_block_optin);
        return 0;
    }
    const int bc = with_config(p->head_dim, [](auto cfg) { return decltype(cfg)::BC; });
    const int rows = with_config(p->head_dim, [](auto cfg) { return decltype(cfg)::ROWS; });
    const int splits = fp_split_kv_choose(p, props, rows, MIN_KEYS_PER_SPLIT);
    param[0] = 0;
    param[1] = 1;
    if (splits > 1) {
        /* Whole tiles a split, so that only the last split's last tile meets the end of keys. */
        const int64_t per = (p->seq_kv + splits - 1) / splits;
        param[0] = (per + bc - 1) / bc * bc;
        param[1] = (p->seq_kv + param[0] - 1) / param[0];
    }
    return 1;
}

size_t workspace(const flashport_problem *p, const int64_t *param)
{
    return fp_split_kv_workspace(p, (int)param[1]);
}

int aligned16(const void *ptr) { return ((uintptr_t)ptr % 16) == 0; }

/* 16-byte vectors of floats: the base and every stride keep row starts 16-byte aligned. */
int vec4_aligned(const void *base, const flashport_strides *s)
{
    return aligned16(base) && s->batch % 4 == 0 && s->head % 4 == 0 && s->seq % 4 == 0;
}

template <typename Cfg, bool ASYNC>
gpuError_t launch_config(const fp_tf32x3_params &prm, const fp_tf32x3_split &sp, dim3 grid,
                         gpuStream_t stream)
{
    gpuError_t err =
        fp_raise_smem_limit<fp_tf32x3_wide_forward_kernel<Cfg, ASYNC>, Cfg::SMEM_BYTES>();
    if (err != gpuSuccess)
        return err;
    fp_tf32x3_wide_forward_kernel<Cfg, ASYNC>
        FP_GPU_LAUNCH(grid, Cfg::WARPS * 32, Cfg::SMEM_BYTES, stream)(prm, sp);
    return gpuGetLastError();
}

gpuError_t launch(const fp_gpu_launch *L)
{
    const flashport_problem *p = &L->p;
    const int splits = (int)L->param[1];
    fp_tf32x3_params prm;
    prm.q = static_cast<const float *>(L->q);
    prm.k = static_cast<const float *>(L->k);
    prm.v = static_cast<const float *>(L->v);
    prm.o = static_cast<float *>(L->o);
    prm.lse = L->lse;
    prm.q_b = p->q.batch, prm.q_h = p->q.head, prm.q_s = p->q.seq;
    prm.k_b = p->k.batch, prm.k_h = p->k.head, prm.k_s = p->k.seq;
    prm.v_b = p->v.batch, prm.v_h = p->v.head, prm.v_s = p->v.seq;
    prm.o_b = p->o.batch, prm.o_h = p->o.head, prm.o_s = p->o.seq;
    prm.heads_q = (int)p->heads_q;
    prm.group = (int)(p->heads_q / p->heads_kv);
    prm.seq_q = (int)p->seq_q;
    prm.seq_kv = (int)p->seq_kv;
    prm.d = (int)p->head_dim;
    prm.scale_log2 = p->scale * 1.44269504088896340736f;
    prm.causal = p->causal != 0;
    prm.o_vec4 = vec4_aligned(L->o, &p->o);
    fp_tf32x3_split sp = {NULL, NULL, 0, p->batch * p->heads_q * p->seq_q};
    if (splits > 1) {
        sp.part_o = static_cast<float *>(L->workspace);
        sp.part_ml = reinterpret_cast<float2 *>(static_cast<char *>(L->workspace) +
                                                fp_split_kv_ml_offset(p, splits));
        sp.keys_per_split = (int)L->param[0];
    }
    const bool async =
        vec4_aligned(L->q, &p->q) && vec4_aligned(L->k, &p->k) && vec4_aligned(L->v, &p->v);
    gpuError_t err = with_config(p->head_dim, [&](auto cfg) {
        typedef decltype(cfg) Cfg;
        const dim3 grid((unsigned)((p->seq_q + Cfg::ROWS - 1) / Cfg::ROWS),
                        (unsigned)(p->batch * p->heads_q), (unsigned)splits);
        return async ? launch_config<Cfg, true>(prm, sp, grid, L->stream)
                     : launch_config<Cfg, false>(prm, sp, grid, L->stream);
    });
    if (err != gpuSuccess || splits < 2)
        return err;
    return fp_split_kv_merge(L, splits);
}

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_tensor_core_tf32x3_wide = {
    {"tensor_core_tf32x3_wide",
     "3xTF32 tensor-core forward for f32 heads of 257-1024 columns, d split across 8 warps, "
     "split-KV when the grid is small",
     FP_PRECISION_NATIVE},
    supports,
    workspace,
    launch,
};
