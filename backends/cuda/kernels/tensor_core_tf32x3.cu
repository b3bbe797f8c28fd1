/*
 * Variant tensor_core_tf32x3: FlashAttention-2 forward for f32 inputs on the tensor cores with
 * the 3xTF32 error-compensated split (tf32x3/flash_forward_kernel.cuh), one pass over the keys.
 * Each product costs three tf32 mma, so the ceiling is a third of the tf32 rate, still well
 * above the f32 CUDA-core rate; the result stays within the f32 tolerances, hence precision
 * class native.
 *
 * Head dims up to 256, padded to 64, 128 or 256; no workspace. Each padded head dim has a few
 * compiled tile configurations (tf32x3/tile_configs.h) and runs its default one; for tuning,
 * FLASHPORT_CUDA_TF32X3_CONFIG=<index> runs candidate <index> instead (an index the head dim
 * does not have makes the variant decline the problem, with that reason). The configuration
 * chosen is the plan's fp_gpu_tile_params.
 *
 * Instances: dense problems run one with every API v2 feature folded away (element loads or
 * cp.async); problems with features (windows, modifiers, sinks, varlen, paged K/V) a general
 * one, cp.async only, so supports() asks for strides in whole 16-byte chunks.
 */
#include <stdio.h>

#include "../kernel_table.h"
#include "common/config_env.h"
#include "common/instance_head_dim.h"
#include "common/smem_limit.cuh"
#include "tf32x3/flash_forward_kernel.cuh"
#include "tf32x3/host_params.h"

/* Environment variable that picks the tile configuration by its index within the padded head
 * dim, for tuning; unset or empty: each head dim's default. */
#define FP_TF32X3_CONFIG_ENV "FLASHPORT_CUDA_TF32X3_CONFIG"

typedef gpuError_t (*instance_launcher)(const fp_tf32x3_params &prm, unsigned row_blocks,
                                        unsigned heads, gpuStream_t stream);

/* The kernel instances of one configuration: dense problems by element loads or by cp.async,
 * and problems with API v2 features (by cp.async only). */
enum { TF32X3_DENSE_SYNC, TF32X3_DENSE_ASYNC, TF32X3_GENERAL, TF32X3_PATHS };

/* One compiled configuration: what the host needs to know of it, and its launchers by path. */
struct tf32x3_instance {
    int d, index, rows;
    size_t smem;
    instance_launcher launch[TF32X3_PATHS];
};

template <typename Cfg, bool ASYNC, bool GENERAL>
static gpuError_t launch_instance(const fp_tf32x3_params &prm, unsigned row_blocks, unsigned heads,
                                  gpuStream_t stream) {
    gpuError_t err =
        fp_raise_smem_limit<fp_tf32x3_forward_kernel<Cfg, ASYNC, GENERAL>, Cfg::SMEM_BYTES>();
    if (err != gpuSuccess) return err;
    fp_tf32x3_forward_kernel<Cfg, ASYNC, GENERAL> FP_GPU_LAUNCH(
        dim3(row_blocks, heads, 1), Cfg::WARPS * 32, Cfg::SMEM_BYTES, stream)(prm);
    return gpuGetLastError();
}

#define FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks)                                   \
    fp_tf32x3_config<d, warps, m_tiles, bc, stages, min_blocks>
#define FP_TF32X3_INSTANCE(d, index, warps, m_tiles, bc, stages, min_blocks)                       \
    {d,                                                                                            \
     index,                                                                                        \
     FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks)::ROWS,                               \
     FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks)::SMEM_BYTES,                         \
     {launch_instance<FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks), false, false>,     \
      launch_instance<FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks), true, false>,      \
      launch_instance<FP_TF32X3_CFG(d, warps, m_tiles, bc, stages, min_blocks), true, true>}},
static const tf32x3_instance instances[] = {FP_TF32X3_CONFIG_LIST(FP_TF32X3_INSTANCE)};
#undef FP_TF32X3_INSTANCE
#undef FP_TF32X3_CFG

/* Configuration `index` of a padded head dim; NULL when it has none of that number. */
static const tf32x3_instance *find_instance(int padded_d, int index) {
    for (const tf32x3_instance &in : instances)
        if (in.d == padded_d && in.index == index) return &in;
    return NULL;
}

static int default_config(int padded_d) {
    switch (padded_d) {
    case 64: return FP_TF32X3_DEFAULT_CONFIG_D64;
    case 128: return FP_TF32X3_DEFAULT_CONFIG_D128;
    default: return FP_TF32X3_DEFAULT_CONFIG_D256;
    }
}

static int config_count(int padded_d) {
    int n = 0;
    while (find_instance(padded_d, n)) ++n;
    return n;
}

/* FP_TF32X3_CONFIG_ENV when set and not empty, else the default; -1 and the reason in why when
 * the variable names no config of padded_d. */
static int choose_config(int padded_d, char *why, size_t why_len) {
    const int index =
        fp_config_from_env(FP_TF32X3_CONFIG_ENV, padded_d, config_count(padded_d), why, why_len);
    return index == FP_CONFIG_ENV_UNSET ? default_config(padded_d) : index;
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    if (!fp_tf32x3_supports_problem(p, props, why, why_len)) return 0;
    if (p->head_dim > 256) {
        snprintf(why, why_len, "head_dim %lld > 256", (long long)p->head_dim);
        return 0;
    }
    if (!fp_attn_general_strides_fit(p, 4, why, why_len)) return 0;
    const int padded_d = fp_instance_head_dim(p->head_dim);
    const int config = choose_config(padded_d, why, why_len);
    if (config < 0) return 0;
    const tf32x3_instance *in = find_instance(padded_d, config);
    if (!in) {
        snprintf(why, why_len, "no tile config %d for padded head dim %d", config, padded_d);
        return 0;
    }
    if (in->smem > props->smem_per_block_optin) {
        snprintf(why, why_len,
                 "tile config %d of d=%d needs %zu bytes of shared memory a block, device "
                 "allows %zu",
                 config, in->d, in->smem, props->smem_per_block_optin);
        return 0;
    }
    params->tile.config = config;
    return 1;
}

static gpuError_t launch(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    const tf32x3_instance *in =
        find_instance(fp_instance_head_dim(p->head_dim), L->params->tile.config);
    if (!in) return cudaErrorInvalidValue;
    fp_tf32x3_params prm;
    const int async = fp_tf32x3_fill_params(&prm, L);
    /* supports() checked the strides of a general problem; only the pointers can be checked
     * here. */
    if (fp_attn_general(p) && !async) return gpuErrorMisalignedAddress;
    const int path = fp_attn_general(p) ? TF32X3_GENERAL
                     : async            ? TF32X3_DENSE_ASYNC
                                        : TF32X3_DENSE_SYNC;
    const unsigned row_blocks = (unsigned)((p->seq_q + in->rows - 1) / in->rows);
    return in->launch[path](prm, row_blocks, (unsigned)(p->batch * p->heads_q), L->stream);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_tensor_core_tf32x3;
const fp_gpu_kernel fp_kernel_tensor_core_tf32x3 = {
    {"tensor_core_tf32x3",
     "FlashAttention-2 forward on tensor cores for f32, 3xTF32 split (mma.sync m16n8k8 .tf32, "
     "cp.async), d <= 256; varlen and paged K/V, windows, softcap, ALiBi, bias, sinks",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_NO_FP8},
    supports,
    NULL,
    launch,
};
