/*
 * The f16/bf16 tensor-core forward's operations by input type: one m16n8k16 product, packing
 * two floats into an operand register, converting one output element, and the softcap
 * arithmetic its accuracy allows (common/score_mods.cuh).
 */
#ifndef FP_MMA_OPS_CUH
#define FP_MMA_OPS_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/ptx.cuh"
#include "../common/score_mods.cuh"

/* Per input type: d += a * b on one m16n8k16 tile, and packing two floats into a register. */
template <typename T> struct fp_mma_ops;

template <> struct fp_mma_ops<__half> {
    static constexpr fp_softcap_math SOFTCAP_MATH = fp_softcap_math_of<__half>::value;
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        fp_mma_m16n8k16_f16(d, a, b0, b1);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

template <> struct fp_mma_ops<__nv_bfloat16> {
    static constexpr fp_softcap_math SOFTCAP_MATH = fp_softcap_math_of<__nv_bfloat16>::value;
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        fp_mma_m16n8k16_bf16(d, a, b0, b1);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) {
        return __float2bfloat16_rn(x);
    }
};

#endif /* FP_MMA_OPS_CUH */
