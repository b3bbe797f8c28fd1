/*
 * Global-to-shared loads of one tile of ROWS rows x D columns (16-bit elements) into the
 * swizzled layout of fragment_layout.h. Rows at or past n_rows and columns at or past d are
 * zero-filled and never read from global memory.
 *
 * Asynchronous form: cp.async, for tensors whose base pointers are 16-byte aligned and whose
 * strides are multiples of 8 elements (every 16-byte chunk of a row is then aligned). The
 * synchronous form reads element by element and serves every other layout; its stores are
 * visible after the caller's next __syncthreads, like a completed cp.async group.
 */
#ifndef FP_MMA_TILE_LOADER_CUH
#define FP_MMA_TILE_LOADER_CUH

#include <stdint.h>

#include "../common/ptx.cuh"
#include "fragment_layout.h"

template <typename T, int ROWS, int D, int THREADS>
struct fp_tile_loader {
    static constexpr int CHUNKS_PER_ROW = D / 8;
    static constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    static constexpr int PASSES = ROWS / ROWS_PER_PASS;
    static_assert(THREADS % CHUNKS_PER_ROW == 0, "a pass covers whole rows");
    static_assert(ROWS % ROWS_PER_PASS == 0, "the tile is whole passes");

    static __device__ __forceinline__ void load_async(T *smem, const T *src, int64_t row_stride,
                                                      int n_rows, int d)
    {
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
        const int valid_cols = d - chunk * 8;
        const int row_bytes = valid_cols <= 0 ? 0 : (valid_cols >= 8 ? 16 : valid_cols * 2);
        const int row0 = fp_mma_load_row(threadIdx.x, 0, CHUNKS_PER_ROW, THREADS);
        /* Passes step by a multiple of 8 rows, so the swizzle of every pass is the first
         * pass's plus a constant, and the source advances by one stride step a pass. */
        static_assert(ROWS_PER_PASS % 8 == 0, "passes keep the row's swizzle phase");
        const uint32_t dst = fp_smem_addr(smem) + 2u * fp_mma_swizzle(row0, chunk, CHUNKS_PER_ROW);
        const T *from = src + row0 * row_stride + chunk * 8;
        const int64_t step = ROWS_PER_PASS * row_stride;
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const bool in = row0 + k * ROWS_PER_PASS < n_rows && row_bytes > 0;
            /* A zero-size copy still names a source; the tile origin is always mapped. */
            fp_cp_async_16(dst + 2u * (k * ROWS_PER_PASS * D), in ? from : src,
                           in ? row_bytes : 0);
            from += step;
        }
    }

    static __device__ __forceinline__ void load_sync(T *smem, const T *src, int64_t row_stride,
                                                     int n_rows, int d)
    {
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
        const uint16_t *from16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = fp_mma_load_row(threadIdx.x, k, CHUNKS_PER_ROW, THREADS);
            uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = chunk * 8 + 2 * e;
                const uint32_t lo = (row < n_rows && col < d) ? from16[row * row_stride + col] : 0u;
                const uint32_t hi =
                    (row < n_rows && col + 1 < d) ? from16[row * row_stride + col + 1] : 0u;
                w[e] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4 *>(smem + fp_mma_swizzle(row, chunk, CHUNKS_PER_ROW)) =
                make_uint4(w[0], w[1], w[2], w[3]);
        }
    }

    /* Flips the sign of every element of the chunks this thread stores in a load (either
     * form), once they have landed; no other thread's chunks are touched, so no barrier is
     * needed before it. */
    static __device__ __forceinline__ void negate_own_chunks(T *smem)
    {
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = fp_mma_load_row(threadIdx.x, k, CHUNKS_PER_ROW, THREADS);
            uint4 *c = reinterpret_cast<uint4 *>(smem + fp_mma_swizzle(row, chunk, CHUNKS_PER_ROW));
            const uint4 v = *c;
            *c = make_uint4(v.x ^ 0x80008000u, v.y ^ 0x80008000u, v.z ^ 0x80008000u,
                            v.w ^ 0x80008000u);
        }
    }

    template <bool ASYNC>
    static __device__ __forceinline__ void load(T *smem, const T *src, int64_t row_stride,
                                                int n_rows, int d)
    {
        if (ASYNC)
            load_async(smem, src, row_stride, n_rows, d);
        else
            load_sync(smem, src, row_stride, n_rows, d);
    }
};

#endif /* FP_MMA_TILE_LOADER_CUH */
