/*
 * Index math of the MFMA backward (backward_mfma), on top of the 32x32x8 lane layouts of
 * mfma_layout.h; callable from device code and from plain C (tests/hip checks it on the CPU).
 *
 * The backward takes S = Q K^T and dP = dO V^T with queries as the rows of the accumulator. That
 * accumulator, transposed, is already an A operand: register r of lane l holds row
 * 8 (r / 4) + 4 (l / 32) + r % 4, column l % 32 (mfma_layout.h), which is exactly value j = r % 4
 * of lane l of the A operand of the transpose at K-step r / 4. So P^T and dS^T feed
 * dV += P^T dO and dK += dS^T Q straight from registers (keys as rows), and only dQ = dS K needs
 * dS through LDS, written in the accumulator's layout and read back in A's.
 *
 * LDS tiles, in 16-bit elements, rows padded by FP_MFMA_BWD_PAD:
 *   transposed tiles [n][k + PAD] read as B operands B[k][n] (Q^T, dO^T, K^T) and, one value a
 *   read, as A operands A[row][k] of the matrix they transpose (Q and dO of S and dP);
 *   row tiles [row][k + PAD] read as A operands (dS) or as B operands of the transpose (K, V in
 *   the query-tile kernel), written from the accumulator (dS).
 * Every operand read of four values is one aligned 8-byte access. A padding of 4 elements makes
 * each row stride 2 modulo 4 in 4-byte words, so that the 16 lanes an 8-byte LDS access serves
 * at once, one row each, cover the 32 banks once (tests/hip checks both).
 */
#ifndef FP_HIP_MFMA_BWD_LAYOUT_H
#define FP_HIP_MFMA_BWD_LAYOUT_H

#include "../cuda/kernels/backward/dq_tiles.h"
#include "mfma_layout.h"

#define FP_MFMA_BWD_PAD   4   /* 16-bit elements of padding per LDS row */
#define FP_MFMA_BWD_WAVES 4   /* waves of a block in both kernels */
#define FP_MFMA_BWD_KEYS  128 /* keys of a key-tile block: 32 a wave */

/* Query rows a key-tile step covers: 64 at d = 64, 32 at d = 128, so that the block's dQ tile
 * (rows x d) is four 32x32 accumulator tiles, one a wave, and LDS stays within 64 KiB. Macros,
 * so that the kernels size their tiles with them at compile time. */
#define FP_MFMA_BWD_ROWS(d) ((d) > 64 ? 32 : 64)

/* Row stride of a tile whose rows hold n 16-bit values. */
#define FP_MFMA_BWD_STRIDE(n) ((n) + FP_MFMA_BWD_PAD)

/* A operand at m-tile m, K-step t, from a transposed tile [k][row] of row stride `stride`:
 * A[32 m + a_row][8 t + a_k(j)] lies at (8 t + a_k(j)) stride + 32 m + a_row. */
FP_HD int fp_mfma_bwd_a_from_t(int stride, int lane, int m, int t, int j) {
    return (FP_MFMA_K * t + fp_mfma_a_k(lane, j)) * stride + FP_MFMA_M * m + fp_mfma_a_row(lane);
}

/* A operand at m-tile m, K-step t, from a row tile [row][k]. */
FP_HD int fp_mfma_bwd_a_from_rows(int stride, int lane, int m, int t, int j) {
    return (FP_MFMA_M * m + fp_mfma_a_row(lane)) * stride + FP_MFMA_K * t + fp_mfma_a_k(lane, j);
}

/* B operand at n-tile n, K-step t, from a transposed tile [n][k]: B[8 t + b_k(j)][32 n + b_col]. */
FP_HD int fp_mfma_bwd_b_from_t(int stride, int lane, int n, int t, int j) {
    return (FP_MFMA_N * n + fp_mfma_b_col(lane)) * stride + FP_MFMA_K * t + fp_mfma_b_k(lane, j);
}

/* Where register r of lane l of the accumulator tile (m, n) goes in a row tile [row][col]. */
FP_HD int fp_mfma_bwd_acc_to_rows(int stride, int lane, int m, int n, int r) {
    return (FP_MFMA_M * m + fp_mfma_d_row(lane, r)) * stride + FP_MFMA_N * n + fp_mfma_d_col(lane);
}

/* The accumulator as the A operand of its transpose: register r is value fp_mfma_acc_a_slot(r)
 * of K-step fp_mfma_acc_a_step(r). */
FP_HD int fp_mfma_acc_a_step(int r) { return r / FP_MFMA_OPERAND; }
FP_HD int fp_mfma_acc_a_slot(int r) { return r % FP_MFMA_OPERAND; }

/* Float offset, from the first accumulator tile of a head (backward/dq_tiles.h, d columns a row),
 * of dQ element (row, col): its fragment tile of 16 x 8, then its place in the tile. The key-tile
 * kernel adds each accumulator register there; the shared conversion kernel reads it back. */
FP_HD int64_t fp_mfma_bwd_dq_offset(int d, int row, int col) {
    return (int64_t)(row / FP_BWD_DQ_TILE_ROWS) * FP_BWD_DQ_TILE_ROWS * d +
           (int64_t)FP_BWD_DQ_TILE * (col / FP_BWD_DQ_TILE_COLS) +
           fp_bwd_dq_in_tile(row % FP_BWD_DQ_TILE_ROWS, col % FP_BWD_DQ_TILE_COLS);
}

#endif /* FP_HIP_MFMA_BWD_LAYOUT_H */
