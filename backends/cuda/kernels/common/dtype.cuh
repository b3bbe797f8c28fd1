/*
 * Loads and stores of the problem's storage types. Kernels keep every value in float32 on chip
 * and convert at the global-memory boundary, so one kernel template serves f32, f16 and bf16.
 */
#ifndef FP_KERNELS_DTYPE_CUH
#define FP_KERNELS_DTYPE_CUH

#include "../../vendors/gpu.h"

__device__ __forceinline__ float fp_to_f32(float x) { return x; }
__device__ __forceinline__ float fp_to_f32(gpuHalf x) { return gpuHalfToFloat(x); }
__device__ __forceinline__ float fp_to_f32(gpuBFloat16 x) { return gpuBFloat16ToFloat(x); }

template <typename T> __device__ __forceinline__ T fp_from_f32(float x);
template <> __device__ __forceinline__ float fp_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ gpuHalf fp_from_f32<gpuHalf>(float x) {
    return gpuFloatToHalf(x);
}
template <> __device__ __forceinline__ gpuBFloat16 fp_from_f32<gpuBFloat16>(float x) {
    return gpuFloatToBFloat16(x);
}

/* x[i] as float when i < n, else 0: tiles that run past the end of a tensor read nothing there. */
template <typename T>
__device__ __forceinline__ float fp_load_or_zero(const T *x, int64_t i, int64_t n) {
    return i < n ? fp_to_f32(x[i]) : 0.0f;
}

/*
 * Host side: runs the statement after T with T bound to the storage type of `dtype`, e.g.
 *   FP_DISPATCH_DTYPE(p->dtype, T, kernel<T> FP_GPU_LAUNCH(grid, block, 0, stream)(args));
 * Any other dtype runs nothing: the core validated the dtype, and FP8 and f64 problems reach
 * only variants that declare FP_FEATURE_FP8 and FP_FEATURE_F64.
 */
#define FP_DISPATCH_DTYPE(dtype, T, ...)                                                           \
    do {                                                                                           \
        switch (dtype) {                                                                           \
        case FLASHPORT_F32: {                                                                      \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case FLASHPORT_F16: {                                                                      \
            typedef gpuHalf T;                                                                     \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case FLASHPORT_BF16: {                                                                     \
            typedef gpuBFloat16 T;                                                                 \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

#endif /* FP_KERNELS_DTYPE_CUH */
