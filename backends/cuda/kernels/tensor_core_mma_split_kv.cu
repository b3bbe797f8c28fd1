/*
 * Variant tensor_core_mma_split_kv ("flash-decoding" on the tensor cores): when
 * B*Hq*ceil(Nq/128) blocks cannot fill the GPU (decode with Nq = 1, or B = H = 1), the keys are
 * cut into splits of whole key tiles, blockIdx.z taking one split, and each block writes its
 * partial (O / l, m, l) to the workspace (split_kv.h); fp_split_kv_merge then combines them.
 * The forward itself is tensor_core_mma's (mma/flash_forward.h), with its tile configuration in
 * the plan's fp_split_kv_params.tile (FLASHPORT_CUDA_TC_CONFIG, see tensor_core_mma.cu).
 */
#include <stdio.h>

#include "common/attention_args.cuh"
#include "mma/flash_forward.h"
#include "split_kv.h"

/* Fewer keys than this per split would spend more on the Q tile and the merge than it saves. */
#define FP_TC_MIN_KEY_TILES_PER_SPLIT 2

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    int config = 0;
    if (!fp_tc_forward_support(p, props, &config, why, why_len)) return 0;
    if (!fp_split_kv_takes(p, why, why_len)) return 0;
    const int tile = fp_tc_block_keys(p->head_dim, config);
    const int chosen =
        fp_split_kv_choose(p, props, FP_TC_BLOCK_ROWS, FP_TC_MIN_KEY_TILES_PER_SPLIT * tile);
    if (chosen > 1) params->split_kv = fp_split_kv_share(p, chosen, tile);
    if (params->split_kv.splits < 2) {
        /* Problems with features run a tile configuration of their own, whose key tile can
         * leave too few keys to split where the dense one would not: name them first, so that
         * the reason keeps them whatever its length. */
        char features[96];
        const int named = fp_attn_feature_names(p, features, sizeof features) > 0;
        snprintf(why, why_len,
                 "no split needed%s%s: %lld blocks of %d query rows fill %d SMs, or %lld keys "
                 "are too few to share out in %d-key tiles",
                 named ? " with the tile configuration for " : "", named ? features : "",
                 (long long)(p->batch * p->heads_q *
                             ((p->seq_q + FP_TC_BLOCK_ROWS - 1) / FP_TC_BLOCK_ROWS)),
                 FP_TC_BLOCK_ROWS, props->sm_count, (long long)p->seq_kv, tile);
        return 0;
    }
    params->split_kv.tile.config = config;
    return 1;
}

static gpuError_t launch(const fp_gpu_launch *L) {
    const fp_split_kv_params &split = L->params->split_kv;
    const int splits = split.splits;
    float *part_o = static_cast<float *>(L->workspace);
    float *part_ml = reinterpret_cast<float *>(static_cast<char *>(L->workspace) +
                                               fp_split_kv_ml_offset(&L->p, splits));
    gpuError_t err =
        fp_tc_forward_launch(L, split.tile.config, splits, split.keys_per_split, part_o, part_ml);
    if (err != gpuSuccess) return err;
    return fp_split_kv_merge(L, splits);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_tensor_core_mma_split_kv;
const fp_gpu_kernel fp_kernel_tensor_core_mma_split_kv = {
    {"tensor_core_mma_split_kv",
     "tensor_core_mma with the keys split across blocks and the partials merged (decode, small "
     "grids), f16/bf16",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_NO_FP8},
    supports,
    fp_split_kv_kernel_workspace,
    launch,
};
