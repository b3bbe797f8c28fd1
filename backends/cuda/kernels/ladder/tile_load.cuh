/*
 * Staging of a ROWS x COLS tile of a row-major tensor into shared memory as float32, by a block
 * of THREADS threads. Consecutive threads take consecutive columns so the global reads
 * coalesce. Elements outside [0, rows_valid) x [0, cols_valid) are written as 0 and never read,
 * which is how partial tiles at the end of Nq, Nkv and d stay inside the tensors.
 */
#ifndef FP_KERNELS_TILE_LOAD_CUH
#define FP_KERNELS_TILE_LOAD_CUH

#include <stdint.h>

#include "../common/dtype.cuh"

template <typename T, int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void fp_stage_tile(float *dst, int dst_stride, const T *src,
                                              int64_t src_stride, int rows_valid,
                                              int cols_valid, int tid) {
    constexpr int ELEMS = ROWS * COLS;
#pragma unroll 4
    for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; i++) {
        int idx = tid + i * THREADS;
        if (ELEMS % THREADS == 0 || idx < ELEMS) {
            int r = idx / COLS, c = idx % COLS;
            dst[r * dst_stride + c] =
                (r < rows_valid && c < cols_valid) ? fp_to_f32(src[r * src_stride + c]) : 0.0f;
        }
    }
}

#endif /* FP_KERNELS_TILE_LOAD_CUH */
