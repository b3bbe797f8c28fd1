/*
 * The contract between the CUDA backend's planner and its kernels. Every kernel variant is one
 * fp_gpu_kernel: its name and precision class, a support check that gives the reason when it
 * cannot take a problem, its workspace size, and its launcher. The planner walks the table;
 * nothing else decides what runs.
 *
 * The same header serves the HIP build of these sources (see vendors/).
 */
#ifndef FP_CUDA_KERNEL_TABLE_H
#define FP_CUDA_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "vendors/gpu.h"

/* What a launcher gets: the validated problem (scale resolved), device pointers, the workspace
 * the planner sized, the stream, and the device properties the planner read at open time. */
typedef struct fp_gpu_device_props {
    int cc_major, cc_minor;
    int sm_count;
    int warp_size;
    size_t smem_per_block_optin; /* bytes a block may use after raising its dynamic limit */
    size_t smem_per_sm;
    int regs_per_sm;
    int max_threads_per_sm;
    size_t l2_bytes;
    char arch[64]; /* the target as the runtime names it: "sm_90", "gfx90a:sramecc+:xnack-" */
} fp_gpu_device_props;

/* A tensor-core kernel's tile configuration: its index among the configurations compiled for
 * the problem's padded head dim (mma/tile_configs.h, tf32x3/tile_configs.h and
 * tf32x3/wide_tile_configs.h), or among hopper_wgmma's instances. */
typedef struct fp_gpu_tile_params {
    int config;
} fp_gpu_tile_params;

/* How a split-KV kernel shares out the keys (kernels/split_kv.h): `splits` ranges of
 * keys_per_split keys, a whole number of the forward's key tiles, the last range taking what is
 * left; splits = 1: not split. tile: the forward's tile configuration, where it has a choice. */
typedef struct fp_split_kv_params {
    int splits;
    int keys_per_split;
    fp_gpu_tile_params tile;
} fp_split_kv_params;

/* How the decode kernel (kernels/decode.cu) shares out a problem: blocks of `rows` query rows
 * of one kv head (row_chunks of them cover a group's heads times Nq), each over one of `splits`
 * shares of the keys. */
typedef struct fp_decode_params {
    int rows, row_chunks, splits;
} fp_decode_params;

/* What a kernel's supports() chooses for its workspace() and launch(), in the member of its
 * family; supports() gets it zeroed. The plan carries it (fp_plan's kernel_params). */
typedef union fp_gpu_kernel_params {
    fp_gpu_tile_params tile;     /* tensor_core_mma, tensor_core_tf32x3, hopper_wgmma */
    fp_split_kv_params split_kv; /* the *_split_kv kernels and tensor_core_tf32x3_wide */
    fp_decode_params decode;     /* decode */
} fp_gpu_kernel_params;
static_assert(sizeof(fp_gpu_kernel_params) <= FP_PLAN_KERNEL_PARAMS_BYTES,
              "a plan holds the kernel parameters");

typedef struct fp_gpu_launch {
    fp_problem p;          /* validated, scale != 0 */
    const void *q, *k, *v; /* device pointers */
    void *o;
    float *lse;                         /* NULL: no LSE */
    void *workspace;                    /* plan.workspace_bytes bytes, or NULL when 0 */
    const fp_gpu_kernel_params *params; /* what the variant's supports() chose */
    const fp_args *args; /* every buffer of the call (tables, slopes, bias, descales, ...) */
    gpuStream_t stream;
    const fp_gpu_device_props *props;
} fp_gpu_launch;

/* Every API v2 forward feature but FP8 inputs: what the prefill kernels that take their layouts
 * and masks through kernels/common/kv_addressing.cuh and kernels/common/score_mods.cuh
 * declare. */
#define FP_GPU_FEATURES_NO_FP8                                                                     \
    (FP_FEATURE_WINDOW | FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS |                 \
     FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED)

/* What the backward variants (kernels/backward_*.cu) declare: the backward pass, which they
 * alone compute, with every forward feature but paged K/V and FP8 inputs (no training step
 * differentiates a page pool or FP8 tensors). The sink needs nothing of its own: it is in the
 * LSE, and gets no gradient. */
#define FP_GPU_FEATURES_BACKWARD                                                                   \
    (FP_FEATURE_BACKWARD | FP_FEATURE_WINDOW | FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI |             \
     FP_FEATURE_BIAS | FP_FEATURE_SINKS | FP_FEATURE_VARLEN)

typedef struct fp_gpu_kernel {
    fp_variant info;
    /* 1 when the variant computes p correctly, with its parameters in *params; else 0 and a
     * one-line reason in why. */
    int (*supports)(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len);
    /* Bytes of workspace launch() needs; NULL: none. */
    size_t (*workspace)(const fp_problem *p, const fp_gpu_kernel_params *params);
    /* Enqueues the kernel(s) on L->stream and returns the first launch error (no sync). */
    gpuError_t (*launch)(const fp_gpu_launch *L);
} fp_gpu_kernel;

#endif /* FP_CUDA_KERNEL_TABLE_H */
