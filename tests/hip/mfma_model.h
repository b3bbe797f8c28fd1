/*
 * The 32x32x8 MFMA on the host, for the tests of the MFMA kernels' index math: one instruction
 * as the ISA defines it, on per-lane registers, gathering A and B from the lanes through the
 * operand layouts of mfma_layout.h and scattering D through the accumulator layout.
 */
#ifndef FP_TESTS_HIP_MFMA_MODEL_H
#define FP_TESTS_HIP_MFMA_MODEL_H

#include "mfma_layout.h"

#define W FP_MFMA_WAVE

/* One MFMA as the ISA defines it, on per-lane registers: D += A B with A, B gathered from the
 * lanes through the operand layouts and D scattered through the accumulator layout. */
static inline void mfma(float d[W][FP_MFMA_ACC], const float a[W][FP_MFMA_OPERAND],
                        const float b[W][FP_MFMA_OPERAND]) {
    float A[FP_MFMA_M][FP_MFMA_K], B[FP_MFMA_K][FP_MFMA_N];
    for (int l = 0; l < W; l++)
        for (int j = 0; j < FP_MFMA_OPERAND; j++) {
            A[fp_mfma_a_row(l)][fp_mfma_a_k(l, j)] = a[l][j];
            B[fp_mfma_b_k(l, j)][fp_mfma_b_col(l)] = b[l][j];
        }
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            const int i = fp_mfma_d_row(l, r), n = fp_mfma_d_col(l);
            for (int k = 0; k < FP_MFMA_K; k++) d[l][r] += A[i][k] * B[k][n];
        }
}

#endif /* FP_TESTS_HIP_MFMA_MODEL_H */
