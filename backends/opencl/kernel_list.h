/*
 * The OpenCL backend's kernel variants as an X-macro list, FP_CL_KERNELS(X), in variant order:
 * tiled (kernels/attention_tiled.cl, tiled.c), portable OpenCL C, and nv_tf32x3
 * (kernels/attention_nv_tf32x3.cl, nv_tf32x3.c), NVIDIA tensor cores through inline PTX. The
 * planner builds its table from it.
 */
#ifndef FP_OPENCL_KERNEL_LIST_H
#define FP_OPENCL_KERNEL_LIST_H

#include "kernel_table.h"

#define FP_CL_KERNELS(X) X(tiled) X(nv_tf32x3)

#define FP_CL_DECLARE_KERNEL(name) extern const fp_cl_kernel fp_cl_kernel_##name;
FP_CL_KERNELS(FP_CL_DECLARE_KERNEL)
#undef FP_CL_DECLARE_KERNEL

#endif /* FP_OPENCL_KERNEL_LIST_H */
