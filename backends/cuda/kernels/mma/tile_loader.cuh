/*
 * Global-to-shared loads of one tile of ROWS rows x D columns (16-bit elements) into the
 * swizzled layout of fragment_layout.h, for N tensors whose rows are found together (K and V of
 * a key tile share each row's look-up): tensor i's tile lands at smem + i * ROWS * D. Rows at or
 * past n_rows and columns at or past d are zero-filled and never read from global memory.
 *
 * Where rows live is the source's business (common/tile_rows.cuh): rows a fixed stride apart
 * (Q, dense and packed K/V), or K and V rows looked up in a paged cache's block table.
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
#include "../common/tile_rows.cuh"
#include "fragment_layout.h"

template <typename T, int ROWS, int D, int THREADS> struct fp_tile_loader {
    static constexpr int CHUNKS_PER_ROW = D / 8;
    static constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    static constexpr int PASSES = ROWS / ROWS_PER_PASS;
    static_assert(THREADS % CHUNKS_PER_ROW == 0, "a pass covers whole rows");
    static_assert(ROWS % ROWS_PER_PASS == 0, "the tile is whole passes");

    /* Element offset of this thread's chunk in pass k, from `first`, its offset in pass 0.
     * Passes that step by a multiple of 8 rows keep the row's swizzle phase, so every unrolled
     * pass adds a constant; fewer rows a pass (4 at d = 256 with 128 threads) swizzle their own. */
    static __device__ __forceinline__ int pass_offset(int first, int row0, int chunk, int k) {
        if constexpr (ROWS_PER_PASS % 8 == 0)
            return first + k * ROWS_PER_PASS * D;
        else
            return fp_mma_swizzle(row0 + k * ROWS_PER_PASS, chunk, CHUNKS_PER_ROW);
    }

    template <int N, typename Src>
    static __device__ __forceinline__ void load_async(T *smem, const Src &src, int n_rows, int d) {
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
        const int valid_cols = d - chunk * 8;
        const int row_bytes = valid_cols <= 0 ? 0 : (valid_cols >= 8 ? 16 : valid_cols * 2);
        const int row0 = fp_mma_load_row(threadIdx.x, 0, CHUNKS_PER_ROW, THREADS);
        const int first = fp_mma_swizzle(row0, chunk, CHUNKS_PER_ROW);
        const uint32_t base = fp_smem_addr(smem);
        const fp_tile_rows<T, N> origin = src.origin();
        /* A strided source's rows are walked a pass at a time by one add: asking at() for every
         * pass multiplied each row by its 64-bit stride, about 20 integer instructions a copy,
         * issued between the tile's barrier and the warp's first mma. */
        fp_tile_rows<T, N> walk = origin;
        if constexpr (Src::WALKS) walk = src.at(row0);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = row0 + k * ROWS_PER_PASS;
            const bool in = row < n_rows && row_bytes > 0;
            fp_tile_rows<T, N> from = origin;
            if constexpr (Src::WALKS) {
                from = walk;
                if (k + 1 < PASSES) walk = src.step(walk, ROWS_PER_PASS);
            } else if (in) {
                from = src.at(row);
            }
#pragma unroll
            for (int i = 0; i < N; ++i)
                /* A zero-size copy still names a source: the tensor's origin, always mapped. */
                fp_cp_async_16(base + 2u * (pass_offset(first, row0, chunk, k) + i * ROWS * D),
                               in ? from.p[i] + chunk * 8 : origin.p[i], in ? row_bytes : 0);
        }
    }

    /* load_async of a tile whose every row exists and is D elements wide (d == D), from a source
     * that walks, without the per-row and per-column tests: in a loop that loads such a tile
     * every step (the backward's query tiles), those tests cost about as many instructions as
     * the copies. */
    template <int N, typename Src>
    static __device__ __forceinline__ void load_async_whole(T *smem, const Src &src) {
        static_assert(Src::WALKS, "whole tiles are walked row by row");
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
        const int row0 = fp_mma_load_row(threadIdx.x, 0, CHUNKS_PER_ROW, THREADS);
        const int first = fp_mma_swizzle(row0, chunk, CHUNKS_PER_ROW);
        const uint32_t base = fp_smem_addr(smem);
        fp_tile_rows<T, N> walk = src.at(row0);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
#pragma unroll
            for (int i = 0; i < N; ++i)
                fp_cp_async_16(base + 2u * (pass_offset(first, row0, chunk, k) + i * ROWS * D),
                               walk.p[i] + chunk * 8, 16);
            if (k + 1 < PASSES) walk = src.step(walk, ROWS_PER_PASS);
        }
    }

    template <int N, typename Src>
    static __device__ __forceinline__ void load_sync(T *smem, const Src &src, int n_rows, int d) {
        const int chunk = fp_mma_load_chunk(threadIdx.x, CHUNKS_PER_ROW);
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int row = fp_mma_load_row(threadIdx.x, k, CHUNKS_PER_ROW, THREADS);
            const bool in = row < n_rows;
            fp_tile_rows<T, N> from = src.origin();
            if (in) from = src.at(row);
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const uint16_t *from16 = reinterpret_cast<const uint16_t *>(from.p[i]);
                uint32_t w[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = chunk * 8 + 2 * e;
                    const uint32_t lo = in && col < d ? from16[col] : 0u;
                    const uint32_t hi = in && col + 1 < d ? from16[col + 1] : 0u;
                    w[e] = lo | (hi << 16);
                }
                *reinterpret_cast<uint4 *>(smem + i * ROWS * D +
                                           fp_mma_swizzle(row, chunk, CHUNKS_PER_ROW)) =
                    make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }

    /* Flips the sign of every element of the chunks this thread stores in a load (either
     * form) of the first tensor, once they have landed; no other thread's chunks are touched,
     * so no barrier is needed before it. */
    static __device__ __forceinline__ void negate_own_chunks(T *smem) {
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

    template <bool ASYNC, int N, typename Src>
    static __device__ __forceinline__ void load(T *smem, const Src &src, int n_rows, int d) {
        if (ASYNC)
            load_async<N>(smem, src, n_rows, d);
        else
            load_sync<N>(smem, src, n_rows, d);
    }
};

#endif /* FP_MMA_TILE_LOADER_CUH */
