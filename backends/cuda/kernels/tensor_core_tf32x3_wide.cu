/*
 * Variant tensor_core_tf32x3_wide: the 3xTF32 tensor-core forward for f32 heads wider than 256
 * (d <= 1024, padded to 512 or 1024), with the head dimension split across the eight warps of a
 * block (tf32x3/wide_forward_kernel.cuh). Blocks hold 16 or 32 query rows, so a single head of
 * 1024 rows makes only 32 to 64 of them; where the blocks cannot fill the GPU the keys are
 * split across blocks and the partials merged (split_kv.h).
 *
 * Each padded head dim has a few compiled tile configurations (tf32x3/wide_tile_configs.h) and
 * runs its default one; FLASHPORT_CUDA_TF32X3_WIDE_CONFIG=<index> runs candidate <index>
 * instead, for tuning (an index the head dim lacks makes the variant decline, with that reason).
 * The plan's fp_split_kv_params hold the configuration (tile) and the split (splits = 1: none).
 */
#include <stdio.h>

#include "../kernel_list.h"
#include "common/config_env.h"
#include "common/smem_limit.cuh"
#include "split_kv.h"
#include "tf32x3/host_params.h"
#include "tf32x3/wide_forward_kernel.cuh"
#include "tf32x3/wide_tile_configs.h"

namespace {

/* A split shorter than this spends more on its fixed costs (loading Q, the epilogue, the merge)
 * than the parallelism returns. */
constexpr int MIN_KEYS_PER_SPLIT = 128;
/* Environment variable that picks the tile configuration by its index within the padded head
 * dim, for tuning; unset or empty: each head dim's default. */
constexpr const char *CONFIG_ENV = "FLASHPORT_CUDA_TF32X3_WIDE_CONFIG";

int padded_head_dim(int64_t d) { return d <= 512 ? 512 : 1024; }

typedef gpuError_t (*instance_launcher)(const fp_tf32x3_params &prm, const fp_tf32x3_split &sp,
                                        dim3 grid, gpuStream_t stream);

/* One compiled configuration: what the host needs to know of it, and its launchers by load
 * path (0 element by element, 1 cp.async). */
struct wide_instance {
    int d, index, rows, block_keys;
    size_t smem;
    instance_launcher launch[2];
};

template <typename Cfg, bool ASYNC>
gpuError_t launch_instance(const fp_tf32x3_params &prm, const fp_tf32x3_split &sp, dim3 grid,
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

#define FP_WIDE_CFG(d, m_tiles, bc, ring) fp_tf32x3_wide_config<d, m_tiles, bc, ring>
#define FP_WIDE_INSTANCE(d, index, m_tiles, bc, ring)                                          \
    {d,                                                                                        \
     index,                                                                                    \
     FP_WIDE_CFG(d, m_tiles, bc, ring)::ROWS,                                                  \
     bc,                                                                                       \
     FP_WIDE_CFG(d, m_tiles, bc, ring)::SMEM_BYTES,                                            \
     {launch_instance<FP_WIDE_CFG(d, m_tiles, bc, ring), false>,                               \
      launch_instance<FP_WIDE_CFG(d, m_tiles, bc, ring), true>}},
const wide_instance instances[] = {FP_TF32X3_WIDE_CONFIG_LIST(FP_WIDE_INSTANCE)};
#undef FP_WIDE_INSTANCE
#undef FP_WIDE_CFG

const wide_instance *find_instance(int padded_d, int index)
{
    for (const wide_instance &in : instances)
        if (in.d == padded_d && in.index == index)
            return &in;
    return NULL;
}

int config_count(int padded_d)
{
    int n = 0;
    while (find_instance(padded_d, n))
        ++n;
    return n;
}

/* CONFIG_ENV when set and not empty, else the default; NULL and the reason in why when the
 * variable names no config of padded_d. */
const wide_instance *choose_instance(int padded_d, char *why, size_t why_len)
{
    const int index =
        fp_config_from_env(CONFIG_ENV, padded_d, config_count(padded_d), why, why_len);
    if (index == -1)
        return NULL;
    if (index != FP_CONFIG_ENV_UNSET)
        return find_instance(padded_d, index);
    return find_instance(padded_d, padded_d == 512 ? FP_TF32X3_WIDE_DEFAULT_CONFIG_D512
                                                   : FP_TF32X3_WIDE_DEFAULT_CONFIG_D1024);
}

int supports(const fp_problem *p, const fp_gpu_device_props *props,
             fp_gpu_kernel_params *params, char *why, size_t why_len)
{
    if (!fp_tf32x3_supports_problem(p, props, why, why_len))
        return 0;
    if (p->head_dim <= 256 || p->head_dim > 1024) {
        snprintf(why, why_len, "head_dim %lld outside (256, 1024]", (long long)p->head_dim);
        return 0;
    }
    const wide_instance *in = choose_instance(padded_head_dim(p->head_dim), why, why_len);
    if (!in)
        return 0;
    if (in->smem > props->smem_per_block_optin) {
        snprintf(why, why_len,
                 "tile config %d of d=%d needs %zu bytes of shared memory a block, device "
                 "allows %zu",
                 in->index, in->d, in->smem, props->smem_per_block_optin);
        return 0;
    }
    const int splits = fp_split_kv_choose(p, props, in->rows, MIN_KEYS_PER_SPLIT);
    /* Whole tiles a split, so that only the last split's last tile meets the end of keys. */
    if (splits > 1)
        params->split_kv = fp_split_kv_share(p, splits, in->block_keys);
    else
        params->split_kv.splits = 1;
    params->split_kv.tile.config = in->index;
    return 1;
}

gpuError_t launch(const fp_gpu_launch *L)
{
    const fp_problem *p = &L->p;
    const fp_split_kv_params &split = L->params->split_kv;
    const wide_instance *in = find_instance(padded_head_dim(p->head_dim), split.tile.config);
    if (!in)
        return cudaErrorInvalidValue;
    const int splits = split.splits;
    fp_tf32x3_params prm;
    const bool async = fp_tf32x3_fill_params(&prm, L);
    fp_tf32x3_split sp = {NULL, NULL, 0, p->batch * p->heads_q * p->seq_q};
    if (splits > 1) {
        sp.part_o = static_cast<float *>(L->workspace);
        sp.part_ml = reinterpret_cast<float2 *>(static_cast<char *>(L->workspace) +
                                                fp_split_kv_ml_offset(p, splits));
        sp.keys_per_split = split.keys_per_split;
    }
    const dim3 grid((unsigned)((p->seq_q + in->rows - 1) / in->rows),
                    (unsigned)(p->batch * p->heads_q), (unsigned)splits);
    const gpuError_t err = in->launch[async](prm, sp, grid, L->stream);
    if (err != gpuSuccess || splits < 2)
        return err;
    return fp_split_kv_merge(L, splits);
}

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_tensor_core_tf32x3_wide = {
    {"tensor_core_tf32x3_wide",
     "3xTF32 tensor-core forward for f32 heads of 257-1024 columns, d split across 8 warps, "
     "split-KV when the grid is small",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    supports,
    fp_split_kv_kernel_workspace,
    launch,
};
