/*
 * Reduction of each row of a ROWS x COLS block of values through shared memory: a halving tree
 * with a barrier at every step, the way the ladder's first two kernels reduce a tile's maximum
 * and sum. Thread (r, c) contributes v and every thread of row r gets the row's result. The
 * whole block must make the call; buf is ROWS x (COLS + 1) floats and is free again on return.
 */
#ifndef FP_KERNELS_BLOCK_REDUCE_CUH
#define FP_KERNELS_BLOCK_REDUCE_CUH

#include "../../vendors/gpu.h"

enum fp_reduce_op { FP_REDUCE_MAX, FP_REDUCE_SUM };

template <int COLS, fp_reduce_op OP>
__device__ __forceinline__ float fp_block_row_reduce(float (*buf)[COLS + 1], int r, int c,
                                                     float v) {
    static_assert((COLS & (COLS - 1)) == 0, "row length must be a power of two");
    buf[r][c] = v;
    __syncthreads();
#pragma unroll
    for (int half = COLS / 2; half > 0; half >>= 1) {
        if (c < half) {
            float other = buf[r][c + half];
            buf[r][c] = OP == FP_REDUCE_MAX ? fmaxf(buf[r][c], other) : buf[r][c] + other;
        }
        __syncthreads();
    }
    float result = buf[r][0];
    __syncthreads(); /* every thread has its result before anyone writes buf again */
    return result;
}

#endif /* FP_KERNELS_BLOCK_REDUCE_CUH */
