/*
 * The FlashAttention-2 tensor-core forward shared by the variants tensor_core_mma (one pass over
 * all keys) and tensor_core_mma_split_kv (keys split across blocks, partials merged after).
 * Both go through fp_tc_forward_support and fp_tc_forward_launch; the kernels themselves are
 * instantiated once, in tensor_core_mma.cu.
 */
#ifndef FP_MMA_FLASH_FORWARD_H
#define FP_MMA_FLASH_FORWARD_H

#include <stddef.h>

#include "../../kernel_table.h"

/* Query rows of one block, the same for every head dimension (the split-KV planner needs it). */
#define FP_TC_BLOCK_ROWS 128

/* Environment variable that picks the tile configuration by its index within the padded head
 * dim (mma/tile_configs.h), for tuning; unset or empty: each head dim's default. */
#define FP_TC_CONFIG_ENV "FLASHPORT_CUDA_TC_CONFIG"

/* 1 when the tensor-core forward can run p on this device (any split count), with the tile
 * configuration it will use in *config (FP_TC_CONFIG_ENV, else the default); else 0 and the
 * reason in why, which also covers a FP_TC_CONFIG_ENV that names no config of p's head dim. */
int fp_tc_forward_support(const fp_problem *p, const fp_gpu_device_props *props, int *config,
                          char *why, size_t why_len);

/* Keys of one tile of config `config` for p's padded head dim; split boundaries are multiples. */
int fp_tc_block_keys(int64_t head_dim, int config);

/* Enqueues the forward with tile configuration `config` (from fp_tc_forward_support).
 * splits == 0: one pass, writes O and LSE. splits >= 1: block z covers keys
 * [z * keys_per_split, (z + 1) * keys_per_split) and writes the split-KV partials (part_o,
 * part_ml, layout of split_kv.h) instead; keys_per_split is a multiple of fp_tc_block_keys. */
gpuError_t fp_tc_forward_launch(const fp_gpu_launch *L, int config, int splits, int keys_per_split,
                                float *part_o, float *part_ml);

#endif /* FP_MMA_FLASH_FORWARD_H */
