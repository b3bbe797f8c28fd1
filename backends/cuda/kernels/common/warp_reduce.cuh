/*
 * Reductions across a group of WIDTH consecutive lanes with butterfly shuffles: every lane of
 * the group ends with the result, with no shared memory and no barrier. WIDTH is a power of two
 * no wider than the target's warp (FP_WARP_SIZE: 32 on NVIDIA, 64 on CDNA), and every lane of
 * the warp must make the call.
 */
#ifndef FP_KERNELS_WARP_REDUCE_CUH
#define FP_KERNELS_WARP_REDUCE_CUH

#include "../../vendors/gpu.h"

template <int WIDTH> __device__ __forceinline__ float fp_group_max(float v) {
    static_assert(WIDTH > 0 && (WIDTH & (WIDTH - 1)) == 0 && WIDTH <= FP_WARP_SIZE,
                  "group width must be a power of two within one warp");
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, FP_SHFL_XOR(v, offset, WIDTH)); /* fmaxf drops NaN, so all lanes agree */
    return v;
}

template <int WIDTH> __device__ __forceinline__ float fp_group_sum(float v) {
    static_assert(WIDTH > 0 && (WIDTH & (WIDTH - 1)) == 0 && WIDTH <= FP_WARP_SIZE,
                  "group width must be a power of two within one warp");
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v += FP_SHFL_XOR(v, offset, WIDTH);
    return v;
}

#endif /* FP_KERNELS_WARP_REDUCE_CUH */
