/*
 * 16 bytes of a storage type as floats: what a decode lane reads from shared memory at once.
 * fp_vec16<T>::N elements per vector (4 f32, 8 f16 or bf16, 16 FP8), converted with the
 * hardware's paired conversions. FP8 storage types are tags over a byte, since only these loads
 * ever see them; their conversions are cuda_fp8.h's, so a HIP build has none (and its decode
 * declines FP8).
 */
#ifndef FP_DECODE_VECTOR16_CUH
#define FP_DECODE_VECTOR16_CUH

#include <stdint.h>

#include "../../vendors/gpu.h"
#if FP_GPU_CUDA
#include <cuda_fp8.h>
#endif

struct fp_e4m3 {
    uint8_t bits;
};
struct fp_e5m2 {
    uint8_t bits;
};

template <typename T> struct fp_vec16 { static constexpr int N = 16 / (int)sizeof(T); };

/* One element as float (for Q, read once per block). */
__device__ __forceinline__ float fp_elem_f32(float x) { return x; }
__device__ __forceinline__ float fp_elem_f32(gpuHalf x) { return __half2float(x); }
__device__ __forceinline__ float fp_elem_f32(gpuBFloat16 x) { return gpuBFloat16ToFloat(x); }
#if FP_GPU_CUDA
__device__ __forceinline__ float fp_elem_f32(fp_e4m3 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3)));
}
__device__ __forceinline__ float fp_elem_f32(fp_e5m2 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E5M2)));
}
#endif

/* The vector of T in r, as fp_vec16<T>::N floats. */
template <typename T> struct fp_unpack;

template <> struct fp_unpack<float> {
    static __device__ __forceinline__ void run(const uint4 &r, float (&f)[4]) {
        f[0] = __uint_as_float(r.x);
        f[1] = __uint_as_float(r.y);
        f[2] = __uint_as_float(r.z);
        f[3] = __uint_as_float(r.w);
    }
};

template <> struct fp_unpack<gpuHalf> {
    static __device__ __forceinline__ void run(const uint4 &r, float (&f)[8]) {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 t = __half22float2(*reinterpret_cast<const __half2 *>(&w[k]));
            f[2 * k] = t.x;
            f[2 * k + 1] = t.y;
        }
    }
};

/* bf16 is the high half of an f32: a shift or a mask per element. */
template <> struct fp_unpack<gpuBFloat16> {
    static __device__ __forceinline__ void run(const uint4 &r, float (&f)[8]) {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = __uint_as_float(w[k] << 16);
            f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    }
};

#if FP_GPU_CUDA
template <__nv_fp8_interpretation_t KIND> struct fp_unpack_fp8 {
    static __device__ __forceinline__ void run(const uint4 &r, float (&f)[16]) {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const __half2 lo(
                __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[k] & 0xffff), KIND));
            const __half2 hi(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[k] >> 16), KIND));
            const float2 a = __half22float2(lo), b = __half22float2(hi);
            f[4 * k] = a.x;
            f[4 * k + 1] = a.y;
            f[4 * k + 2] = b.x;
            f[4 * k + 3] = b.y;
        }
    }
};
template <> struct fp_unpack<fp_e4m3> : fp_unpack_fp8<__NV_E4M3> {};
template <> struct fp_unpack<fp_e5m2> : fp_unpack_fp8<__NV_E5M2> {};
#endif

#endif /* FP_DECODE_VECTOR16_CUH */
