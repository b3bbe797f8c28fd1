/*
 * Multiply-add rate of one core for CPUs without AVX2: independent chains over an 8-lane array
 * that the compiler vectorises with whatever the baseline ISA offers. Counts a multiply and an
 * add as 2 operations, like one FMA.
 */
#include <stdint.h>

#include "kernel_ops.h"

#define CHAINS 12
#define LANES  8

double cs_fma_peak_portable(int64_t iterations) {
    float acc[CHAINS][LANES];
    for (int i = 0; i < CHAINS; ++i)
        for (int l = 0; l < LANES; ++l) acc[i][l] = (float)(i * LANES + l) * 1e-3f;
    for (int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < CHAINS; ++i)
            for (int l = 0; l < LANES; ++l) acc[i][l] = acc[i][l] * 0.999999f + 1e-6f;
    float sum = 0.0f;
    for (int i = 0; i < CHAINS; ++i)
        for (int l = 0; l < LANES; ++l) sum += acc[i][l];
    volatile float sink = sum;
    (void)sink;
    return (double)iterations * CHAINS * LANES * 2;
}
