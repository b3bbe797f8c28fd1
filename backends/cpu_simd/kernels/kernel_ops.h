/*
 * The micro-kernels of the cpu_simd backend, as a table so that one tile algorithm
 * (attention.c) drives both the AVX2 path and the portable path.
 *
 * Shapes the tile algorithm guarantees to every kernel:
 *   - rows are packed float32, dq floats apart, dq = head_dim rounded up to CS_DIM_STEP and
 *     zero beyond head_dim, 32-byte aligned;
 *   - a tile has a multiple of CS_PV_ROWS rows (and so of CS_SCORE_ROWS);
 *   - a key block holds a multiple of CS_KEY_STEP keys; keys past the end are zero rows.
 */
#ifndef CS_KERNEL_OPS_H
#define CS_KERNEL_OPS_H

#include <stdint.h>

#include "flashport.h"

#define CS_DIM_STEP 8    /* one AVX register of float32 */
#define CS_SCORE_ROWS 3  /* query rows of the S = Q K^T micro-kernel */
#define CS_SCORE_KEYS 4  /* keys of the S = Q K^T micro-kernel */
#define CS_PV_ROWS 6     /* rows of the O += P V micro-kernel */
#define CS_KEY_STEP 16   /* key blocks are multiples of this */

typedef struct cs_kernel_ops {
    const char *name;
    /* dst[0..d) = mul * src[0..d) converted from dtype; dst[d..dq) = 0. */
    void (*load_row)(const void *src, flashport_dtype dtype, int64_t d, int64_t dq, float mul,
                     float *dst);
    /* dst[0..d) = mul * src[0..d) converted to dtype (round to nearest even). */
    void (*store_row)(const float *src, int64_t d, float mul, flashport_dtype dtype, void *dst);
    /* s[r*lds + j] = q_r . k_j for r < rows, j < keys (rows, keys multiples of the micro-tile). */
    void (*scores)(const float *q, const float *k, int64_t dq, int rows, int keys, float *s,
                   int64_t lds);
    /* Largest of s[0..n); NaN when any is NaN. */
    float (*row_max)(const float *s, int n);
    /* s[j] = 2^(s[j] - m) for j < n (exactly 0 below 2^-126); returns the sum of the new s. */
    float (*exp2_row)(float *s, int n, float m);
    /* For CS_PV_ROWS rows r: o_r = alpha[r] * o_r + sum_{j < keys} p[r*ldp + j] * v_j. */
    void (*pv_rows)(const float *p, int64_t ldp, const float *v, int64_t dq, int keys,
                    const float *alpha, float *o);
    /* One row: o += sum_{j0 <= j < j1} p[j] * v_j (keys of a row past its group's common part). */
    void (*pv_row)(const float *p, const float *v, int64_t dq, int j0, int j1, float *o);
} cs_kernel_ops;

extern const cs_kernel_ops cs_kernels_portable;
#if defined(CS_HAVE_AVX2_KERNELS)
extern const cs_kernel_ops cs_kernels_avx2;
/* f32 FMA rate micro-benchmark: runs `iterations` rounds of independent FMA chains and returns
 * the number of floating-point operations done (one FMA = 2). */
double cs_fma_peak_avx2(int64_t iterations);
#endif
double cs_fma_peak_portable(int64_t iterations);

#endif /* CS_KERNEL_OPS_H */
