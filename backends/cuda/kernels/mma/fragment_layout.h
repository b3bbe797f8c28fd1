/*
 * Index maps of the tensor-core forward kernel: which element of a tile each lane holds in the
 * fragments of mma.sync.m16n8k16 and ldmatrix, and where a tile element lives in shared memory.
 * They are plain integer functions, compiled for the device by the kernel and for the host by
 * tests/cuda_mma_layout, which checks them against a model of the PTX instructions.
 *
 * Notation: lane 0..31; g = lane / 4 ("group"), c = lane % 4 ("thread in group"). Every
 * fragment register holds two 16-bit elements, the lower one in the low half.
 *
 * m16n8k16, row.col, f16/bf16 inputs, f32 accumulators (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"):
 *   A (16x16, row major), 4 registers: reg r holds A[row][col], A[row][col + 1] with
 *       row = g + 8 * (r % 2), col = 2c + 8 * (r / 2).
 *   B (16x8, K x N), 2 registers: reg r holds B[k][n], B[k + 1][n] with
 *       k = 2c + 8 * r, n = g.
 *   C/D (16x8 f32), 4 registers: reg r holds C[g + 8 * (r / 2)][2c + r % 2].
 *
 * ldmatrix.x4: lanes 8m..8m+7 give the addresses of rows 0..7 of matrix m (8x8, 16 bytes a row).
 * Register m of lane t receives row t / 4, columns 2(t % 4) and 2(t % 4) + 1 of matrix m; with
 * .trans it receives rows 2(t % 4) and 2(t % 4) + 1 of column t / 4 instead.
 *
 * How the kernel uses them (all three loads are ldmatrix.x4):
 *   Q as A of S = Q K^T: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7,
 *       cols 8-15), (rows 8-15, cols 8-15) of the warp's 16 x 16 slice give regs a0..a3.
 *   K as B of S = Q K^T (B[k][n] = K[n][k], so the rows of K are the columns of B and no
 *       transpose is needed): matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15,
 *       d 0-7), (keys 8-15, d 8-15) give b0, b1 of key tile 0 and b0, b1 of key tile 1.
 *   V as B of O = P V (B[k][n] = V[key][d]: consecutive k are different rows of V, hence
 *       .trans): matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15),
 *       (keys 8-15, d 8-15) give b0, b1 of d tile 0 and b0, b1 of d tile 1.
 *   P as A of O = P V comes from the S accumulators without shuffles: for the 16 keys of
 *       k-step s, A reg r is C regs (2(r % 2), 2(r % 2) + 1) of key tile 2s + r / 2.
 *
 * Shared memory: a tile of rows of `chunks_per_row` 16-byte chunks (8 elements each). Chunk ch
 * of row r is stored at chunk position ch ^ (r % 8) of its row. The eight rows one ldmatrix
 * phase reads (same logical chunk, eight consecutive rows) then land in eight different 16-byte
 * bank groups, and so do the chunks a warp writes with cp.async. Needs chunks_per_row to be a
 * multiple of 8 (head dims 64, 128, 256).
 */
#ifndef FP_MMA_FRAGMENT_LAYOUT_H
#define FP_MMA_FRAGMENT_LAYOUT_H

#if defined(__CUDACC__) || defined(__HIP__)
#define FP_MMA_INDEX static inline __host__ __device__
#else
#define FP_MMA_INDEX static inline
#endif

/* Element offset of element 0 of chunk `chunk` of row `row` in a swizzled tile. */
FP_MMA_INDEX int fp_mma_swizzle(int row, int chunk, int chunks_per_row) {
    return (row * chunks_per_row + (chunk ^ (row & 7))) * 8;
}

/* Offset of (row + row_step, chunk + chunk_step) from the offset `base` of (row, chunk), where
 * chunk < 2, row_step is a multiple of 8 and chunk_step is even. The swizzle then only flips
 * chunk bits below 8, so every unrolled step is one XOR and one add of constants on a single
 * per-lane base instead of a full swizzle per step (which costs a register per step). */
FP_MMA_INDEX int fp_mma_swizzle_step(int base, int row_step, int chunk_step, int chunks_per_row) {
    return (base ^ ((chunk_step & 7) * 8)) + ((chunk_step & ~7) + row_step * chunks_per_row) * 8;
}

/* Row (within 16) and chunk (within 2) whose address a lane gives to ldmatrix.x4 when the four
 * matrices are ordered (rows 0-7, chunk 0), (rows 8-15, chunk 0), (rows 0-7, chunk 1),
 * (rows 8-15, chunk 1): Q as the A operand, and V (with .trans) as the B operand. */
FP_MMA_INDEX int fp_mma_ldsm_rowmajor_row(int lane) { return (lane & 7) + (lane & 8); }
FP_MMA_INDEX int fp_mma_ldsm_rowmajor_chunk(int lane) { return lane >> 4; }

/* The same when the matrices are ordered (rows 0-7, chunk 0), (rows 0-7, chunk 1),
 * (rows 8-15, chunk 0), (rows 8-15, chunk 1): K as the B operand of two key tiles. */
FP_MMA_INDEX int fp_mma_ldsm_keys_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
FP_MMA_INDEX int fp_mma_ldsm_keys_chunk(int lane) { return (lane >> 3) & 1; }

/* Row and first column of accumulator register r (0..3) of a lane; r and r + 1 (r even) are
 * adjacent columns of one row. */
FP_MMA_INDEX int fp_mma_acc_row(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
FP_MMA_INDEX int fp_mma_acc_col(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

/* P reuse: A register r of k-step s is made of accumulator registers fp_mma_p_acc_reg(r) and
 * fp_mma_p_acc_reg(r) + 1 of key tile 2s + fp_mma_p_key_tile(r). */
FP_MMA_INDEX int fp_mma_p_key_tile(int r) { return r >> 1; }
FP_MMA_INDEX int fp_mma_p_acc_reg(int r) { return 2 * (r & 1); }

/* Tile loads: thread `tid` of `threads` copies chunk fp_mma_load_chunk of rows
 * fp_mma_load_row(tid, 0), fp_mma_load_row(tid, 1), ... Eight consecutive threads (one phase
 * of a 16-byte store) write the eight chunks of one 128-byte row segment. */
FP_MMA_INDEX int fp_mma_load_chunk(int tid, int chunks_per_row) { return tid % chunks_per_row; }
FP_MMA_INDEX int fp_mma_load_row(int tid, int pass, int chunks_per_row, int threads) {
    return tid / chunks_per_row + pass * (threads / chunks_per_row);
}

#endif /* FP_MMA_FRAGMENT_LAYOUT_H */
