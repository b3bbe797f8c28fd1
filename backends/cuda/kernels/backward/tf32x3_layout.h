/*
 * Index maps of the 3xTF32 backward's key-tile kernel (tf32x3_kv_kernel.cuh) beyond those of the
 * 3xTF32 forward (tf32x3/fragment_layout.h, whose notation this follows: lane = 4 g + c, and
 * whose swizzled f32 tiles hold K, V, Q and dO here). Plain integer functions, compiled for the
 * device by the kernel and for the host by tests/cuda_tf32x3_layout, which replays the kernel's
 * five products through a model of mma.sync m16n8k8 .tf32 and checks every shared access for
 * bank conflicts.
 *
 * P^T and dS^T [key][query], f32, rows of FP_BWD_TF32_PT_LD floats (8 more than the queries, so
 * that rows 1, 2, 3 start 8, 16, 24 banks on), query q of key row k stored at column
 * q ^ (8 if k % 8 >= 4). Three accesses touch them, all without bank conflicts:
 *   - the S^T accumulators stored, and the A fragments of dV += P^T dO and dK += dS^T Q read, as
 *     8-byte pairs (key g or g + 8, queries 8t + 2c, + 1): in each half warp the rows g = 0..3
 *     start 8 banks apart and the four c fill them; the XOR moves rows 4..7 as a block and keeps
 *     the pairs whole;
 *   - the A fragments of dQ = dS K read one float a lane (keys 8t + 2c and 8t + 2c + 1 as
 *     k = c and c + 4, query g or g + 8 as M): rows 2c alone would start 0, 16, 0, 16 banks on;
 *     the XOR, set for c = 2 and 3, makes that 0, 16, 8, 24, and the eight g fill the rest.
 * K as B of dQ is read one float a lane from its swizzled tile, (key 8t + 2c (+1), column
 * 8 nt + g): the swizzle's XOR with the row (2c, or 2c + 1) spreads the four c over distinct
 * 16-byte chunks for either half of g, so this too is free of conflicts.
 */
#ifndef FP_BACKWARD_TF32X3_LAYOUT_H
#define FP_BACKWARD_TF32X3_LAYOUT_H

#if defined(__CUDACC__)
#define FP_BWD_TF32_INDEX static inline __host__ __device__
#else
#define FP_BWD_TF32_INDEX static inline
#endif

#include "../tf32x3/fragment_layout.h"

/* Floats a row of P^T and dS^T, for query tiles of `rows` (a multiple of 32) queries. */
#define FP_BWD_TF32_PT_LD(rows) ((rows) + 8)

/* Float offset of (key row k, query q) in P^T or dS^T; q and q + 1 (q even) stay adjacent. */
FP_BWD_TF32_INDEX int fp_bwd_tf32_pt_at(int k, int q, int ld) {
    return k * ld + (q ^ ((k & 4) << 1));
}

/* Float offset of element (row, col) in a swizzled tile of rows of `chunks_per_row` chunks. */
FP_BWD_TF32_INDEX int fp_bwd_tf32_elem(int row, int col, int chunks_per_row) {
    return fp_tf32_swizzle(row, col >> 2, chunks_per_row) + (col & 3);
}

#endif /* FP_BACKWARD_TF32X3_LAYOUT_H */
