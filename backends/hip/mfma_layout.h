/*
 * Index math of the MFMA attention kernel, callable from device code and from plain C on the host
 * (tests/hip checks it on the CPU against a direct model of the tile products).
 *
 * The kernel's matrix instruction is the 32x32x8 MFMA (v_mfma_f32_32x32x8f16 and its bf16_1k
 * twin): D(32x32, f32) += A(32x8) * B(8x32) over one 64-lane wave. Which lane holds what:
 *   A: lane l holds A[l % 32][4*(l / 32) + j], j = 0..3 (four 16-bit values, one register pair);
 *   B: lane l holds B[4*(l / 32) + j][l % 32];
 *   D: lane l, accumulator register r = 0..15, holds D[8*(r / 4) + 4*(l / 32) + r % 4][l % 32].
 * So a row of D lives in one register index across the 32 lanes of one half-wave, and a row
 * reduction is a butterfly over lane bits 0..4 (xor masks 16, 8, 4, 2, 1, width 32).
 *
 * Shared-memory (LDS) tiles, in 16-bit elements, rows padded by FP_MFMA_PAD elements so that the
 * 32 lanes of a half-wave reading one column of consecutive rows fall into different banks:
 *   K tile  [32 keys][d_tile + PAD]   read as B of S = Q K^T;
 *   V^T tile [d_tile][32 keys + PAD]  read as B of O += P V;
 *   P tile  [32 rows][32 keys + PAD]  written from D's layout, read back in A's layout.
 */
#ifndef FP_HIP_MFMA_LAYOUT_H
#define FP_HIP_MFMA_LAYOUT_H

#if defined(__HIPCC__) || defined(__CUDACC__)
#define FP_HD __host__ __device__ inline
#else
#define FP_HD static inline
#endif

#define FP_MFMA_WAVE      64 /* lanes of the wave an MFMA runs on (CDNA) */
#define FP_MFMA_M         32 /* rows of A and D */
#define FP_MFMA_N         32 /* columns of B and D */
#define FP_MFMA_K         8  /* columns of A, rows of B */
#define FP_MFMA_OPERAND   4  /* 16-bit values of A and of B per lane */
#define FP_MFMA_ACC       16 /* f32 values of D per lane */
#define FP_MFMA_PAD       8  /* 16-bit elements of padding per LDS row (16 bytes) */
#define FP_MFMA_ROW_LANES 32 /* lanes sharing one row of D: the width of row reductions */

/* A operand: row and reduction index of value j of lane l. */
FP_HD int fp_mfma_a_row(int lane) { return lane % 32; }
FP_HD int fp_mfma_a_k(int lane, int j) { return 4 * (lane / 32) + j; }

/* B operand: reduction index of value j of lane l, and its column. */
FP_HD int fp_mfma_b_k(int lane, int j) { return 4 * (lane / 32) + j; }
FP_HD int fp_mfma_b_col(int lane) { return lane % 32; }

/* D (accumulator): row and column of register r of lane l. */
FP_HD int fp_mfma_d_row(int lane, int r) { return 8 * (r / 4) + 4 * (lane / 32) + r % 4; }
FP_HD int fp_mfma_d_col(int lane) { return lane % 32; }

/* Xor mask of step s (0..4) of a row reduction of D: 16, 8, 4, 2, 1. */
FP_HD int fp_mfma_row_reduce_mask(int step) { return (FP_MFMA_ROW_LANES / 2) >> step; }
#define FP_MFMA_ROW_REDUCE_STEPS 5

/* Row strides of the LDS tiles, in 16-bit elements. */
FP_HD int fp_mfma_k_stride(int d_tile) { return d_tile + FP_MFMA_PAD; }
FP_HD int fp_mfma_vt_stride(void) { return FP_MFMA_N + FP_MFMA_PAD; }
FP_HD int fp_mfma_p_stride(void) { return FP_MFMA_N + FP_MFMA_PAD; }

/* LDS offset of value j of lane l for the B operand of S = Q K^T at d chunk t (keys are the
 * columns of S, head dims its reduction index): K[key = lane % 32][dim = 8t + 4*(lane/32) + j]. */
FP_HD int fp_mfma_k_offset(int d_tile, int lane, int t, int j) {
    return fp_mfma_b_col(lane) * fp_mfma_k_stride(d_tile) + FP_MFMA_K * t + fp_mfma_b_k(lane, j);
}

/* LDS offset of value j of lane l for the B operand of O += P V at output tile n, key step ks:
 * V^T[col = 32n + lane % 32][key = 8ks + 4*(lane/32) + j]. */
FP_HD int fp_mfma_vt_offset(int lane, int n, int ks, int j) {
    return (FP_MFMA_N * n + fp_mfma_b_col(lane)) * fp_mfma_vt_stride() + FP_MFMA_K * ks +
           fp_mfma_b_k(lane, j);
}

/* LDS offsets of P: where register r of lane l is written (D layout), and where value j of
 * lane l is read back as the A operand at key step ks. */
FP_HD int fp_mfma_p_store_offset(int lane, int r) {
    return fp_mfma_d_row(lane, r) * fp_mfma_p_stride() + fp_mfma_d_col(lane);
}
FP_HD int fp_mfma_p_load_offset(int lane, int ks, int j) {
    return fp_mfma_a_row(lane) * fp_mfma_p_stride() + FP_MFMA_K * ks + fp_mfma_a_k(lane, j);
}

/* Butterfly reductions over a group of `width` lanes on a wave of `wave` lanes, for any
 * power-of-two width up to the wave: the xor mask of step s, and the number of steps. */
FP_HD int fp_wave_reduce_mask(int width, int step) { return (width / 2) >> step; }
FP_HD int fp_wave_reduce_steps(int width) {
    int steps = 0;
    while ((1 << steps) < width) steps++;
    return steps;
}

#endif /* FP_HIP_MFMA_LAYOUT_H */
