/*
 * f32 FMA rate of one core: twelve independent 8-wide FMA chains, enough to cover the FMA
 * latency (4-5 cycles) times the FMA ports (2) of current x86 cores. Compiled with the AVX2
 * flags; only called when cpuid said the CPU has AVX2 and FMA.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernel_ops.h"

#define CHAINS 12

double cs_fma_peak_avx2(int64_t iterations) {
    __m256 acc[CHAINS];
    for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_set1_ps((float)i * 1e-3f);
    /* a*x + b with a just below one keeps every value finite however long the loop runs. */
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
    for (int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    /* Folding the chains into a volatile sink keeps the compiler from dropping the loop. */
    __m256 sum = acc[0];
    for (int i = 1; i < CHAINS; ++i) sum = _mm256_add_ps(sum, acc[i]);
    volatile float sink = _mm_cvtss_f32(_mm256_castps256_ps128(sum));
    (void)sink;
    return (double)iterations * CHAINS * 8 * 2;
}
