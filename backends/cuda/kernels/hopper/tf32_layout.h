/*
 * Where the 3xTF32 Hopper forward (hopper_wgmma_tf32x3) keeps each element: its split tiles in
 * shared memory, and which registers of a warpgroup hold which element of wgmma's m64nNk8 .tf32
 * fragments (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts"). Plain host and
 * device functions, so that tests/cuda_hopper_layout checks them on the CPU against a model of
 * the product.
 *
 * Shared-memory tile: R rows of C 32-bit columns (C a multiple of 32), stored as C / 32 column
 * panels of R rows x 128 bytes, panel p holding columns [32p, 32p + 32), the 16-byte unit u of
 * row r at unit u ^ (r % 8): the 128-byte swizzle of fragment_layout.h with four columns a unit
 * instead of eight. A k8-step is 32 bytes of a row, as a k16-step of 16-bit elements is, so
 * fragment_layout.h's K-major descriptor and its k-step offsets read these tiles unchanged.
 * .tf32 wgmma reads both shared operands K-major only (the ISA allows no transpose for it), so
 * every tile here is K-major: Q and K with the head dim as columns, V as V^T (rows: the head dim,
 * columns: the keys).
 *
 * Accumulators (f32, N / 2 registers a thread): as fragment_layout.h's fp_hopper_acc_row/col.
 * A operand from registers (4 registers of one tf32 each): register j of thread t (warp w, lane
 * l) holds row 16w + l / 4 + 8 (j % 2) and column l % 4 + 4 (j / 2) of the 64 x 8 k-step. A
 * thread's S accumulators hold keys 2 (l % 4) + {0, 1} of each 8-key block, not l % 4 and
 * l % 4 + 4; rather than move P between threads, column c of P V's k-step stands for key
 * fp_hopper_tf32_vt_key(c) of its 8-key block, and the split pass writes V^T's columns in that
 * order, so that the product sums the same (P, V) pairs.
 */
#ifndef FP_HOPPER_TF32_LAYOUT_H
#define FP_HOPPER_TF32_LAYOUT_H

#include <stdint.h>

#include "fragment_layout.h"

#define FP_HOPPER_TF32_PANEL_COLS 32 /* 32-bit columns of one 128-byte swizzled row */

/* Byte offset of element (row, col) in a split tile of `rows` rows. */
FP_HOPPER_HD uint32_t fp_hopper_tf32_tile_offset(int rows, int row, int col) {
    const uint32_t panel = (uint32_t)(col / FP_HOPPER_TF32_PANEL_COLS);
    const uint32_t unit = (uint32_t)((col % FP_HOPPER_TF32_PANEL_COLS) / 4) ^ (uint32_t)(row % 8);
    return panel * (uint32_t)rows * 128u + (uint32_t)row * 128u + unit * 16u +
           (uint32_t)(col % 4) * 4u;
}

/* A-operand register j (0..3) of warpgroup thread t: row and column within the 64 x 8 k-step. */
FP_HOPPER_HD int fp_hopper_tf32_a_row(int t, int j) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
}
FP_HOPPER_HD int fp_hopper_tf32_a_col(int t, int j) { return t % 4 + 4 * (j / 2); }

/* The key (within its 8-key block) that column c of P V's k-step stands for. */
FP_HOPPER_HD int fp_hopper_tf32_vt_key(int c) { return (c & ~7) + 2 * (c % 4) + (c % 8) / 4; }

/* The column of P V's k-step that stands for key k of the tile: fp_hopper_tf32_vt_key's
 * inverse. */
FP_HOPPER_HD int fp_hopper_tf32_vt_col(int k) { return (k & ~7) + 4 * (k % 2) + (k % 8) / 2; }

/* The S accumulator register that becomes A register j of P's k-step kk. */
FP_HOPPER_HD int fp_hopper_tf32_p_source(int kk, int j) { return 4 * kk + 2 * (j % 2) + j / 2; }

#endif /* FP_HOPPER_TF32_LAYOUT_H */
