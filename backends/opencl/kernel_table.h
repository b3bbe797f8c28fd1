/*
 * The contract between the OpenCL backend's planner and its kernels, as backends/cuda/
 * kernel_table.h is for CUDA. Every kernel variant is one fp_cl_kernel: its name and precision
 * class, its program, a plan function that says whether it takes a problem on a device and with
 * which parameters, and what a launch needs of those parameters (build options, work-group
 * shape). The planner picks among them; every kernel takes the same arguments (backend.c),
 * and a kernel that implements features (info.features not 0) the API v2 ones after them
 * (feature_args.h).
 */
#ifndef FP_OPENCL_KERNEL_TABLE_H
#define FP_OPENCL_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "device_context.h"
#include "devices.h"
#include "fp_backend.h"

/* Tile shape of the tiled kernel (the keys of FLASHPORT_OPENCL_TILE, in this order). */
enum {
    FP_CL_P_BR = 0,  /* query rows per work-group */
    FP_CL_P_BC = 1,  /* keys per block streamed through local memory */
    FP_CL_P_TM = 2,  /* query rows of the score tile per work-item */
    FP_CL_P_TN = 3,  /* keys of the score tile per work-item */
    FP_CL_P_KC = 4,  /* head-dim columns of Q and K staged per step */
    FP_CL_P_VC = 5,  /* rows of V staged per step */
    FP_CL_P_DV = 6,  /* output columns per work-group (d wider than this is split) */
    FP_CL_P_OM = 7,  /* output rows per work-item */
    FP_CL_P_QR = 8,  /* 1: Q resident in local memory */
    FP_CL_P_PF = 9,  /* 1: next K/Q chunk prefetched into registers */
    FP_CL_P_RG = 10, /* NVIDIA register cap per work-item, 0: none */
    FP_CL_P_UR = 11, /* 1: loops over register tiles unrolled fully */
    FP_CL_TILE_KEYS = 12
};

/* The tiled kernel's parameters: its tile shape, the value of each key in FP_CL_P_* order. */
typedef struct fp_cl_tiled_params {
    int32_t tile[FP_CL_TILE_KEYS];
} fp_cl_tiled_params;

/* A configuration of the NVIDIA tensor-core kernel (nv_tf32x3.c says what each field does). */
typedef struct fp_cl_nv_tf32x3_config {
    int d, warps, m_tiles, bc;
} fp_cl_nv_tf32x3_config;

/* The nv_tf32x3 kernel's parameters: its configuration, and 1 when the warp operations are
 * emulated (FLASHPORT_OPENCL_NV_EMULATE). */
typedef struct fp_cl_nv_tf32x3_params {
    fp_cl_nv_tf32x3_config config;
    int emulate;
} fp_cl_nv_tf32x3_params;

/* The backward pass's tile shape (kernels/attention_backward.cl says what each key does). */
typedef struct fp_cl_backward_params {
    int32_t br, bc, tm, kc, vc, dv, om;
} fp_cl_backward_params;

/* What a kernel's plan() chooses for its options() and shape(), by kernel; the plan carries it
 * (fp_plan's kernel_params). */
typedef union fp_cl_kernel_params {
    fp_cl_tiled_params tiled;
    fp_cl_nv_tf32x3_params nv_tf32x3;
    fp_cl_backward_params backward;
} fp_cl_kernel_params;
_Static_assert(sizeof(fp_cl_kernel_params) <= FP_PLAN_KERNEL_PARAMS_BYTES,
               "a plan holds the kernel parameters");

/* The NDRange of a launch: groups of `threads` work-items, each group taking `rows` query rows
 * of one (batch, head) and one of `slices` column slices of the output. */
typedef struct fp_cl_launch_shape {
    size_t threads, rows;
    int slices;
} fp_cl_launch_shape;

typedef struct fp_cl_kernel {
    fp_variant info;
    const char *source;      /* the program's source (kernel_sources.h) */
    const char *entry_point; /* the kernel function in it */
    /* FLASHPORT_OK when the variant takes p on dev, with its parameters in *params and why it
     * chose them in reason; else FLASHPORT_ERROR_UNSUPPORTED, or FLASHPORT_ERROR_INVALID_ARGUMENT
     * for a malformed tuning variable, with the reason. Records no error itself. */
    flashport_status (*plan)(fp_cl_dev *dev, const fp_problem *p, fp_cl_kernel_params *params,
                             char *reason, size_t reason_len);
    /* The program's build options for these parameters and p. */
    void (*options)(const fp_cl_device_desc *dev, const fp_cl_kernel_params *params,
                    const fp_problem *p, char *buf, size_t len);
    fp_cl_launch_shape (*shape)(const fp_cl_kernel_params *params, const fp_problem *p);
} fp_cl_kernel;

#endif /* FP_OPENCL_KERNEL_TABLE_H */
