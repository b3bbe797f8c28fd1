/* The model of mma.sync m16n8k8 with .tf32 operands (PTX ISA, 32-bit fragments) that the host
 * tests of the 3xTF32 index maps replay the kernels through: test_tf32x3_layout.c (forward) and
 * test_bwd_tf32x3_layout.c (backward). Operands are exact values here; the arithmetic is
 * modelled separately (test_tf32x3_layout.c). */
#ifndef FP_TEST_MMA_TF32_MODEL_H
#define FP_TEST_MMA_TF32_MODEL_H

#include "layout_model.h"

/* a[lane][0..3], b[lane][0..1]: a0 = A[g][c], a1 = A[g+8][c], a2 = A[g][c+4], a3 = A[g+8][c+4];
 * b0 = B[c][g], b1 = B[c+4][g]; c[lane][i] = C[g + 8 (i >= 2)][2c + i % 2]. */
static void model_mma(double c[LANES][4], const double a[LANES][4], const double b[LANES][2]) {
    double A[16][8], B[8][8];
    for (int lane = 0; lane < LANES; ++lane) {
        const int group = lane >> 2, tig = lane & 3;
        for (int i = 0; i < 4; ++i) A[group + (i & 1 ? 8 : 0)][tig + (i >= 2 ? 4 : 0)] = a[lane][i];
        for (int i = 0; i < 2; ++i) B[tig + 4 * i][group] = b[lane][i];
    }
    for (int lane = 0; lane < LANES; ++lane) {
        const int group = lane >> 2, tig = lane & 3;
        for (int i = 0; i < 4; ++i) {
            const int row = group + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
            double sum = 0.0;
            for (int k = 0; k < 8; ++k) sum += A[row][k] * B[k][col];
            c[lane][i] += sum;
        }
    }
}

#endif /* FP_TEST_MMA_TF32_MODEL_H */
