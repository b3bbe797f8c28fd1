/*
 * Index maps of the 3xTF32 tensor-core forward (f32 in, mma.sync m16n8k8 .tf32): which element
 * each lane holds in every fragment, and where a tile element lives in shared memory. Plain
 * integer functions, compiled for the device by the kernel and for the host by
 * tests/cuda_tf32x3_layout, which checks them against a model of the PTX instruction.
 *
 * Notation: lane 0..31; g = lane / 4 ("group"), c = lane % 4 ("thread in group"). Every
 * fragment register holds one 32-bit element.
 *
 * m16n8k8, row.col, .tf32 inputs, f32 accumulators (PTX ISA, "Matrix Fragments for
 * mma.m16n8k8", 32-bit types):
 *   A (16x8, row major), 4 registers: a0 = A[g][c], a1 = A[g + 8][c], a2 = A[g][c + 4],
 *       a3 = A[g + 8][c + 4].
 *   B (8x8, K x N), 2 registers: b0 = B[c][g], b1 = B[c + 4][g].
 *   C/D (16x8 f32), 4 registers: reg r holds C[g + 8 * (r / 2)][2c + r % 2].
 *
 * A dot product does not care in which order its terms are summed, so each k-step may take any
 * 8 of the contracted columns in any order, as long as A and B agree. The kernel uses that to
 * make every shared-memory read a 16-byte vector and to feed P to the second product without a
 * shuffle:
 *
 *   S = Q K^T (contracted over d): in each group of 32 columns u, lane c owns the 8 columns
 *     32u + 8c .. 32u + 8c + 7 and reads them as two 16-byte chunks (rows g and g + 8 of Q,
 *     row g of the key tile of K). k-step 4u + s gives k = c the column 32u + 8c + 2s and
 *     k = c + 4 the column 32u + 8c + 2s + 1.
 *   O = P V (contracted over keys): k-step t is key tile t; k = c is key 8t + 2c, k = c + 4 is
 *     key 8t + 2c + 1. Those are exactly the columns of S accumulator registers 0 and 1 (rows
 *     g) and 2 and 3 (rows g + 8): A register r of P is S accumulator register
 *     fp_tf32_p_acc_reg(r) of key tile t.
 *   O's columns are permuted the same way, by the n index: n-tile dt, n = j holds column
 *     32 (dt / 4) + 4j + dt % 4. A lane's b0 (b1) of the four n-tiles 4w .. 4w + 3 is then one
 *     16-byte chunk of V, row 8t + 2c (+ 1), columns 32w + 4g .. 32w + 4g + 3; and its
 *     accumulators of those four n-tiles are the 8 consecutive columns 32w + 8c .. + 7 of rows
 *     g and g + 8, stored as two 16-byte vectors.
 *
 * Shared memory: a tile of rows of `chunks_per_row` 16-byte chunks (4 floats each); chunk ch of
 * row r is stored at chunk position ch ^ (r % 8) of its row. A 16-byte shared load is served a
 * quarter warp (8 lanes) at a time; with this swizzle the 8 chunks each quarter of the three
 * reads above asks for fall into the 8 different 16-byte bank groups of a 128-byte line, and so
 * do the chunks 8 consecutive threads write when loading a tile. Needs chunks_per_row to be a
 * multiple of 8 (head dims that are multiples of 32).
 */
#ifndef FP_TF32X3_FRAGMENT_LAYOUT_H
#define FP_TF32X3_FRAGMENT_LAYOUT_H

#if defined(__CUDACC__)
#define FP_TF32_INDEX static inline __host__ __device__
#else
#define FP_TF32_INDEX static inline
#endif

/* Float offset of float 0 of chunk `chunk` of row `row` in a swizzled tile. */
FP_TF32_INDEX int fp_tf32_swizzle(int row, int chunk, int chunks_per_row) {
    return (row * chunks_per_row + (chunk ^ (row & 7))) * 4;
}

/* S = Q K^T: the chunk (of 2, half = 0 or 1) lane reads in column group u; the row is g for K
 * and g, g + 8 for Q. Float e (0..3) of chunk `half` is column 8c + 4 half + e of the group,
 * i.e. operand k-register (e % 2) of k-step 4u + 2 half + e / 2. */
FP_TF32_INDEX int fp_tf32_qk_chunk(int lane, int u, int half) {
    return 8 * u + 2 * (lane & 3) + half;
}

/* Q in fragment order. Each warp rewrites the rows and column groups of Q it reads, once,
 * so that the A fragment of k-step 4u + j (j = 2 half + step, in the column order above) of
 * slice mt is one 16-byte chunk a lane, {a0, a1, a2, a3} in register order; read from the
 * swizzled rows, a fragment would take two chunks and four register moves into place. The 128
 * chunks of (mt, u) stay within the rows 16 mt .. 16 mt + 15 and columns 32u .. 32u + 31 they
 * came from, in the order (j, lane): row 16 mt + 4j + lane / 8, chunk lane % 8 of the group.
 * Offsets in floats from the warp's first row, split into a per-lane part and a compile-time
 * part. */
FP_TF32_INDEX int fp_tf32_q_frag_lane(int lane, int d) { return (lane >> 3) * d + 4 * (lane & 7); }
FP_TF32_INDEX int fp_tf32_q_frag_offset(int mt, int u, int j, int d) {
    return (16 * mt + 4 * j) * d + 32 * u;
}

/* The column of d that k-register kreg (0: k = c, 1: k = c + 4) of k-step ks stands for. */
FP_TF32_INDEX int fp_tf32_qk_col(int lane, int ks, int kreg) {
    return 32 * (ks / 4) + 8 * (lane & 3) + 2 * (ks % 4) + kreg;
}

/* O = P V: the key (within key tile t) that k-register kreg of lane stands for. */
FP_TF32_INDEX int fp_tf32_pv_key(int lane, int kreg) { return 2 * (lane & 3) + kreg; }

/* A register r of P is this S accumulator register of the same key tile. */
FP_TF32_INDEX int fp_tf32_p_acc_reg(int r) { return ((r & 1) << 1) | (r >> 1); }

/* The chunk of V's row lane reads for the n-tiles 4w .. 4w + 3; float e is n-tile 4w + e. */
FP_TF32_INDEX int fp_tf32_v_chunk(int lane, int w) { return 8 * w + (lane >> 2); }

/* Row (within 16) and column of d of O accumulator register r of n-tile dt. */
FP_TF32_INDEX int fp_tf32_acc_row(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
FP_TF32_INDEX int fp_tf32_o_col(int lane, int dt, int r) {
    return 32 * (dt / 4) + 4 * (2 * (lane & 3) + (r & 1)) + dt % 4;
}

/* Key (within its key tile) of S accumulator register r. */
FP_TF32_INDEX int fp_tf32_s_key(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

/* Tile loads: thread `tid` of `threads` copies chunk fp_tf32_load_chunk of rows
 * fp_tf32_load_row(tid, 0), fp_tf32_load_row(tid, 1), ... */
FP_TF32_INDEX int fp_tf32_load_chunk(int tid, int chunks_per_row) { return tid % chunks_per_row; }
FP_TF32_INDEX int fp_tf32_load_row(int tid, int pass, int chunks_per_row, int threads) {
    return tid / chunks_per_row + pass * (threads / chunks_per_row);
}

#endif /* FP_TF32X3_FRAGMENT_LAYOUT_H */
