/*
 * The CUDA backend's kernel variants as an X-macro list, FP_GPU_KERNELS(X): the ladder (the
 * write-up's eight steps, kernels/ladder/) in its order, then the production kernels
 * (kernels/; hopper_wgmma, hopper_wgmma_fp8 and hopper_wgmma_tf32x3 are kernels/hopper/, built for
 * sm_90a alone; the
 * mfma_* entries are the HIP build's matrix-core kernels, backends/hip/kernels/), then the backward
 * variants (backward_mfma is the HIP build's, beside them). The build defines
 * FP_HAVE_KERNEL_<name> for each <name>.cu it compiles, so the list holds exactly the variants
 * that are linked; the planner builds its table from it.
 */
#ifndef FP_CUDA_KERNEL_LIST_H
#define FP_CUDA_KERNEL_LIST_H

#include "kernel_table.h"

#ifdef FP_HAVE_KERNEL_naive_tiled
#define FP_KERNEL_IF_naive_tiled(X) X(naive_tiled)
#else
#define FP_KERNEL_IF_naive_tiled(X)
#endif
#ifdef FP_HAVE_KERNEL_smem_tiled
#define FP_KERNEL_IF_smem_tiled(X) X(smem_tiled)
#else
#define FP_KERNEL_IF_smem_tiled(X)
#endif
#ifdef FP_HAVE_KERNEL_register_tiled
#define FP_KERNEL_IF_register_tiled(X) X(register_tiled)
#else
#define FP_KERNEL_IF_register_tiled(X)
#endif
#ifdef FP_HAVE_KERNEL_wide_register_tile
#define FP_KERNEL_IF_wide_register_tile(X) X(wide_register_tile)
#else
#define FP_KERNEL_IF_wide_register_tile(X)
#endif
#ifdef FP_HAVE_KERNEL_float4_loads
#define FP_KERNEL_IF_float4_loads(X) X(float4_loads)
#else
#define FP_KERNEL_IF_float4_loads(X)
#endif
#ifdef FP_HAVE_KERNEL_transposed_smem
#define FP_KERNEL_IF_transposed_smem(X) X(transposed_smem)
#else
#define FP_KERNEL_IF_transposed_smem(X)
#endif
#ifdef FP_HAVE_KERNEL_double_buffered
#define FP_KERNEL_IF_double_buffered(X) X(double_buffered)
#else
#define FP_KERNEL_IF_double_buffered(X)
#endif
#ifdef FP_HAVE_KERNEL_wmma_f16
#define FP_KERNEL_IF_wmma_f16(X) X(wmma_f16)
#else
#define FP_KERNEL_IF_wmma_f16(X)
#endif
#ifdef FP_HAVE_KERNEL_decode
#define FP_KERNEL_IF_decode(X) X(decode)
#else
#define FP_KERNEL_IF_decode(X)
#endif
#ifdef FP_HAVE_KERNEL_decode_mma
#define FP_KERNEL_IF_decode_mma(X) X(decode_mma)
#else
#define FP_KERNEL_IF_decode_mma(X)
#endif
#ifdef FP_HAVE_KERNEL_hopper_wgmma
#define FP_KERNEL_IF_hopper_wgmma(X) X(hopper_wgmma)
#else
#define FP_KERNEL_IF_hopper_wgmma(X)
#endif
#ifdef FP_HAVE_KERNEL_hopper_wgmma_fp8
#define FP_KERNEL_IF_hopper_wgmma_fp8(X) X(hopper_wgmma_fp8)
#else
#define FP_KERNEL_IF_hopper_wgmma_fp8(X)
#endif
#ifdef FP_HAVE_KERNEL_hopper_wgmma_tf32x3
#define FP_KERNEL_IF_hopper_wgmma_tf32x3(X) X(hopper_wgmma_tf32x3)
#else
#define FP_KERNEL_IF_hopper_wgmma_tf32x3(X)
#endif
#ifdef FP_HAVE_KERNEL_tensor_core_mma
#define FP_KERNEL_IF_tensor_core_mma(X) X(tensor_core_mma)
#else
#define FP_KERNEL_IF_tensor_core_mma(X)
#endif
#ifdef FP_HAVE_KERNEL_tensor_core_mma_split_kv
#define FP_KERNEL_IF_tensor_core_mma_split_kv(X) X(tensor_core_mma_split_kv)
#else
#define FP_KERNEL_IF_tensor_core_mma_split_kv(X)
#endif
#ifdef FP_HAVE_KERNEL_tensor_core_tf32x3
#define FP_KERNEL_IF_tensor_core_tf32x3(X) X(tensor_core_tf32x3)
#else
#define FP_KERNEL_IF_tensor_core_tf32x3(X)
#endif
#ifdef FP_HAVE_KERNEL_tensor_core_tf32x3_wide
#define FP_KERNEL_IF_tensor_core_tf32x3_wide(X) X(tensor_core_tf32x3_wide)
#else
#define FP_KERNEL_IF_tensor_core_tf32x3_wide(X)
#endif
#ifdef FP_HAVE_KERNEL_fa2_f32
#define FP_KERNEL_IF_fa2_f32(X) X(fa2_f32)
#else
#define FP_KERNEL_IF_fa2_f32(X)
#endif
#ifdef FP_HAVE_KERNEL_fa2_f32_split_kv
#define FP_KERNEL_IF_fa2_f32_split_kv(X) X(fa2_f32_split_kv)
#else
#define FP_KERNEL_IF_fa2_f32_split_kv(X)
#endif
#ifdef FP_HAVE_KERNEL_mfma_flash
#define FP_KERNEL_IF_mfma_flash(X) X(mfma_flash)
#else
#define FP_KERNEL_IF_mfma_flash(X)
#endif
#ifdef FP_HAVE_KERNEL_mfma_flash_split_kv
#define FP_KERNEL_IF_mfma_flash_split_kv(X) X(mfma_flash_split_kv)
#else
#define FP_KERNEL_IF_mfma_flash_split_kv(X)
#endif
#ifdef FP_HAVE_KERNEL_backward_mma
#define FP_KERNEL_IF_backward_mma(X) X(backward_mma)
#else
#define FP_KERNEL_IF_backward_mma(X)
#endif
#ifdef FP_HAVE_KERNEL_backward_mfma
#define FP_KERNEL_IF_backward_mfma(X) X(backward_mfma)
#else
#define FP_KERNEL_IF_backward_mfma(X)
#endif
#ifdef FP_HAVE_KERNEL_backward_tf32x3
#define FP_KERNEL_IF_backward_tf32x3(X) X(backward_tf32x3)
#else
#define FP_KERNEL_IF_backward_tf32x3(X)
#endif
#ifdef FP_HAVE_KERNEL_backward_f32
#define FP_KERNEL_IF_backward_f32(X) X(backward_f32)
#else
#define FP_KERNEL_IF_backward_f32(X)
#endif

#define FP_GPU_LADDER_KERNELS(X)                                                                   \
    FP_KERNEL_IF_naive_tiled(X) FP_KERNEL_IF_smem_tiled(X) FP_KERNEL_IF_register_tiled(X)          \
        FP_KERNEL_IF_wide_register_tile(X) FP_KERNEL_IF_float4_loads(X)                            \
            FP_KERNEL_IF_transposed_smem(X) FP_KERNEL_IF_double_buffered(X)                        \
                FP_KERNEL_IF_wmma_f16(X)
#define FP_GPU_PRODUCTION_KERNELS(X)                                                               \
    FP_KERNEL_IF_decode_mma(X) FP_KERNEL_IF_decode(X) FP_KERNEL_IF_hopper_wgmma(X)                 \
        FP_KERNEL_IF_hopper_wgmma_fp8(X) FP_KERNEL_IF_tensor_core_mma(X)                           \
            FP_KERNEL_IF_tensor_core_mma_split_kv(X) FP_KERNEL_IF_fa2_f32(X)                       \
                FP_KERNEL_IF_fa2_f32_split_kv(X) FP_KERNEL_IF_mfma_flash(X)                        \
                    FP_KERNEL_IF_mfma_flash_split_kv(X) FP_KERNEL_IF_tensor_core_tf32x3(X)         \
                        FP_KERNEL_IF_tensor_core_tf32x3_wide(X)                                    \
                            FP_KERNEL_IF_hopper_wgmma_tf32x3(X)
/* The backward pass (FP_OP_BACKWARD): these variants compute nothing else. */
#define FP_GPU_BACKWARD_KERNELS(X)                                                                 \
    FP_KERNEL_IF_backward_mma(X) FP_KERNEL_IF_backward_mfma(X) FP_KERNEL_IF_backward_tf32x3(X)     \
        FP_KERNEL_IF_backward_f32(X)
#define FP_GPU_KERNELS(X)                                                                          \
    FP_GPU_LADDER_KERNELS(X) FP_GPU_PRODUCTION_KERNELS(X) FP_GPU_BACKWARD_KERNELS(X)

#define FP_DECLARE_GPU_KERNEL(name) extern FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_##name;
FP_GPU_KERNELS(FP_DECLARE_GPU_KERNEL)
#undef FP_DECLARE_GPU_KERNEL

#endif /* FP_CUDA_KERNEL_LIST_H */
