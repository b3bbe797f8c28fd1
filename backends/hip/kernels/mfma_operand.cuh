/*
 * The MFMA kernels' operand types: per storage type (f16, bf16) the 16-bit element and the
 * four-element vector of an A or B operand, the conversions from and to f32, and the 32x32x8
 * MFMA itself (mfma_layout.h says which lane holds what). FP_MFMA_DEVICE is defined while
 * compiling for a target with MFMA (gfx90a, gfx940); the kernels compile an empty body elsewhere.
 */
#ifndef FP_HIP_MFMA_OPERAND_CUH
#define FP_HIP_MFMA_OPERAND_CUH

#include <string.h>

#include "../../cuda/kernels/common/dtype.cuh"

#if defined(__gfx90a__) || defined(__gfx940__)
#define FP_MFMA_DEVICE 1
#endif

namespace mfma_flash {

typedef float acc16 __attribute__((ext_vector_type(16)));

/* The operand type of each storage type and its MFMA. */
template <typename T> struct operand;
template <> struct operand<gpuHalf> {
    typedef _Float16 elem;
    typedef _Float16 vec4 __attribute__((ext_vector_type(4)));
    __device__ static elem from_f32(float x) { return (_Float16)x; }
    __device__ static float to_f32(elem e) { return (float)e; }
#ifdef FP_MFMA_DEVICE
    __device__ static acc16 mma(vec4 a, vec4 b, acc16 c) {
        return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
    }
#endif
};
template <> struct operand<gpuBFloat16> {
    typedef short elem;
    typedef short vec4 __attribute__((ext_vector_type(4)));
    __device__ static elem from_f32(float x) { return (short)gpuFloatToBFloat16(x).data; }
    __device__ static float to_f32(elem e) {
        const unsigned bits = (unsigned)(unsigned short)e << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
#ifdef FP_MFMA_DEVICE
    __device__ static acc16 mma(vec4 a, vec4 b, acc16 c) {
        return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
    }
#endif
};

} // namespace mfma_flash

#endif /* FP_HIP_MFMA_OPERAND_CUH */
