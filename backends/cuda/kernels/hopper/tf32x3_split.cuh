/*
 * The split pass of the 3xTF32 Hopper forward: f32 rows read from global memory, each value
 * split into a big and a small tf32 (kernels/tf32x3/tf32_split.cuh), written to two tiles of
 * tf32_layout.h's swizzled K-major layout that wgmma reads as they are.
 *
 * The split needs every value in registers, so the rows come by plain 16-byte loads rather than
 * by TMA: a TMA copy would need a third (raw) tile per operand in shared memory and a second
 * pass through it, where shared memory is what bounds the ring's depth. Rows past the sequence's
 * end are written as zeros (masked keys then meet zero values, never a stray NaN, and padded
 * queries compute zeros that are never stored), so the kernel needs no zeroing pass of its own.
 *
 * Each function is run by THREADS cooperating threads (`thread` their index); the caller fences
 * the writes for the async proxy and signals them.
 */
#ifndef FP_HOPPER_TF32X3_SPLIT_CUH
#define FP_HOPPER_TF32X3_SPLIT_CUH

#include <stdint.h>

#include "../tf32x3/tf32_split.cuh"
#include "tf32_layout.h"

/* Writes the big halves of x at big and the small halves at small (16-byte aligned). */
static __device__ __forceinline__ void fp_hopper_split_store4(uint32_t big, uint32_t small,
                                                              const float4 &x) {
    const fp_tf32_pair a = fp_tf32_split(x.x), b = fp_tf32_split(x.y), c = fp_tf32_split(x.z),
                       d = fp_tf32_split(x.w);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(big), "r"(a.big), "r"(b.big),
                 "r"(c.big), "r"(d.big)
                 : "memory");
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(small), "r"(a.small),
                 "r"(b.small), "r"(c.small), "r"(d.small)
                 : "memory");
}

static __device__ __forceinline__ void fp_hopper_split_store1(uint32_t big, uint32_t small,
                                                              float x) {
    const fp_tf32_pair p = fp_tf32_split(x);
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(big), "r"(p.big) : "memory");
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(small), "r"(p.small) : "memory");
}

/* ROWS rows of D values -> split tiles of ROWS rows (Q or K: the head dim as columns). Row r is
 * read at row_at(r) (an element offset from src), or is zero where r >= valid. A warp covers
 * whole rows, so its loads are contiguous and its 16-byte stores fill distinct banks. All loads
 * of a thread are issued before its stores, to keep them in flight together. */
template <int D, int ROWS, int THREADS, typename RowAt>
static __device__ __forceinline__ void fp_hopper_split_rows(uint32_t big, uint32_t small,
                                                            const float *src, int valid,
                                                            RowAt row_at, int thread) {
    constexpr int CHUNKS = D / 4, PER_THREAD = ROWS * CHUNKS / THREADS;
    static_assert(ROWS * CHUNKS % THREADS == 0, "whole passes of the threads");
    float4 x[PER_THREAD];
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int e = thread + i * THREADS, r = e / CHUNKS, c = e % CHUNKS;
        x[i] = r < valid ? __ldg(reinterpret_cast<const float4 *>(src + row_at(r)) + c)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int e = thread + i * THREADS, r = e / CHUNKS, c = e % CHUNKS;
        const uint32_t at = fp_hopper_tf32_tile_offset(ROWS, r, 4 * c);
        fp_hopper_split_store4(big + at, small + at, x[i]);
    }
}

/* KEYS value rows of D values -> split V^T tiles (D rows, KEYS columns in tf32_layout.h's key
 * order). Each thread keeps one key and walks its 4-column chunks, so that its row is located
 * once; the lanes of a warp take 32 consecutive keys of one chunk, and each of their four
 * 4-byte stores fills one 128-byte row of V^T across all banks. */
template <int D, int KEYS, int THREADS, typename RowAt>
static __device__ __forceinline__ void fp_hopper_split_vt(uint32_t big, uint32_t small,
                                                          const float *src, int valid, RowAt row_at,
                                                          int thread) {
    constexpr int CHUNKS = D / 4, CHUNK_STEP = THREADS / KEYS, PER_THREAD = CHUNKS / CHUNK_STEP;
    static_assert(KEYS % 32 == 0 && THREADS % KEYS == 0 && CHUNKS % CHUNK_STEP == 0,
                  "whole warps of keys, whole passes of the threads");
    const int k = thread % KEYS, c0 = thread / KEYS;
    const float4 *row = k < valid ? reinterpret_cast<const float4 *>(src + row_at(k)) : NULL;
    float4 x[PER_THREAD];
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i)
        x[i] = row ? __ldg(row + c0 + i * CHUNK_STEP) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int col = fp_hopper_tf32_vt_col(k);
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int d0 = 4 * (c0 + i * CHUNK_STEP);
        const float v[4] = {x[i].x, x[i].y, x[i].z, x[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t at = fp_hopper_tf32_tile_offset(D, d0 + j, col);
            fp_hopper_split_store1(big + at, small + at, v[j]);
        }
    }
}

#endif /* FP_HOPPER_TF32X3_SPLIT_CUH */
