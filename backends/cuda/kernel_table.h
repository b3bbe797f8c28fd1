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

typedef struct fp_gpu_launch {
    fp_problem p;   /* validated, scale != 0 */
    const void *q, *k, *v; /* device pointers */
    void *o;
    float *lse;            /* NULL: no LSE */
    void *workspace;       /* plan.workspace_bytes bytes, or NULL when 0 */
    const int64_t *param;  /* the plan's param[8] */
    gpuStream_t stream;
    const fp_gpu_device_props *props;
} fp_gpu_launch;

typedef struct fp_gpu_kernel {
    fp_variant info;
    /* 1 when the variant computes p correctly; else 0 and a one-line reason in why. May fill
     * param[8] (tile choice, split count) for workspace() and launch() to read. */
    int (*supports)(const fp_problem *p, const fp_gpu_device_props *props, int64_t *param,
                    char *why, size_t why_len);
    size_t (*workspace)(const fp_problem *p, const int64_t *param); /* NULL: none */
    /* Enqueues the kernel(s) on L->stream and returns the first launch error (no sync). */
    gpuError_t (*launch)(const fp_gpu_launch *L);
} fp_gpu_kernel;

#endif /* FP_CUDA_KERNEL_TABLE_H */
