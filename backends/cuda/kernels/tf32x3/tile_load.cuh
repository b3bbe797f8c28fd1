/*
 * Shared-memory staging of f32 tiles for the 3xTF32 forward kernels: a global-to-shared copy
 * into the swizzled layout of fragment_layout.h, and the 16-byte shared read every fragment
 * load goes through. Callers compile these only for __CUDA_ARCH__ >= 800.
 */
#ifndef FP_TF32X3_TILE_LOAD_CUH
#define FP_TF32X3_TILE_LOAD_CUH

#include <stdint.h>

#include "../common/ptx.cuh"
#include "fragment_layout.h"

/* Global-to-shared copy of a ROWS x D f32 tile into the swizzled layout; rows at or past
 * n_rows and columns at or past d are zero-filled and never read. Asynchronous form: cp.async
 * of whole 16-byte chunks (the caller checked alignment); synchronous form: element by
 * element, visible after the caller's next __syncthreads like a completed cp.async group. */
template <bool ASYNC, int ROWS, int D, int THREADS>
static __device__ __forceinline__ void fp_tf32x3_load_tile(float *smem,
                                                           const float *src, int64_t row_stride,
                                                           int n_rows, int d)
{
    constexpr int CPR = D / 4;
    constexpr int PASSES = ROWS * CPR / THREADS;
    static_assert(THREADS % CPR == 0 && (ROWS * CPR) % THREADS == 0, "whole rows a pass");
    const int chunk = fp_tf32_load_chunk(threadIdx.x, CPR);
    const int valid = d - 4 * chunk;
    if (ASYNC) {
        const int bytes = valid <= 0 ? 0 : (valid >= 4 ? 16 : 4 * valid);
        const uint32_t base = fp_smem_addr(smem);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = fp_tf32_load_row(threadIdx.x, k, CPR, THREADS);
            const bool in = row < n_rows && bytes > 0;
            /* A zero-size copy still names a source; the tile origin is always mapped. */
            const float *from = in ? src + row * row_stride + 4 * chunk : src;
            fp_cp_async_16(base + 4u * fp_tf32_swizzle(row, chunk, CPR), from, in ? bytes : 0);
        }
    } else {
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = fp_tf32_load_row(threadIdx.x, k, CPR, THREADS);
            float w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                w[e] = (row < n_rows && e < valid) ? src[row * row_stride + 4 * chunk + e] : 0.0f;
            *reinterpret_cast<float4 *>(smem + fp_tf32_swizzle(row, chunk, CPR)) =
                make_float4(w[0], w[1], w[2], w[3]);
        }
    }
}

/* Rewrites column groups u0 .. u0 + GROUPS - 1 of the MT slices of Q at sq (swizzled, as
 * loaded) into fragment order (fragment_layout.h), one group of one slice at a time: each
 * (slice, group) is read whole before it is written, and they do not overlap. The calling warp
 * must be the only one that reads those groups; it may read them once this returns. */
template <int MT, int GROUPS, int D>
static __device__ __forceinline__ void fp_tf32x3_q_to_fragment_order(float *sq, int lane, int u0)
{
    constexpr int CPR = D / 4;
    const int g = lane >> 2;
    float *const to = sq + fp_tf32_q_frag_lane(lane, D);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < GROUPS; ++i) {
            const int u = u0 + i;
            float4 rows[2][2]; /* [half][rows g, g + 8] */
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int chunk = fp_tf32_qk_chunk(lane, u, half);
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    rows[half][r] = *reinterpret_cast<const float4 *>(
                        sq + fp_tf32_swizzle(16 * mt + g + 8 * r, chunk, CPR));
            }
            __syncwarp();
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float4 &lo = rows[half][0], &hi = rows[half][1];
                *reinterpret_cast<float4 *>(to + fp_tf32_q_frag_offset(mt, u, 2 * half, D)) =
                    make_float4(lo.x, hi.x, lo.y, hi.y);
                *reinterpret_cast<float4 *>(to + fp_tf32_q_frag_offset(mt, u, 2 * half + 1, D)) =
                    make_float4(lo.z, hi.z, lo.w, hi.w);
            }
        }
    __syncwarp();
}

static __device__ __forceinline__ float4 fp_tf32x3_lds(const float *p)
{
    return *reinterpret_cast<const float4 *>(p);
}

#endif /* FP_TF32X3_TILE_LOAD_CUH */
