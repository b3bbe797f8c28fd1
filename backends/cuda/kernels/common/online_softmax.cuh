/*
 * The running state of one query row in the online softmax, in the log2 domain: scores arrive
 * already multiplied by scale*log2(e) so that every exponential is one exp2f.
 *
 * Per key tile a kernel finds the tile's maximum score m_t (masked keys at -inf), then
 *   alpha = fp_softmax_advance(row, m_t)     rescales l and tells the caller to rescale its
 *                                            output accumulators by alpha;
 *   p_j   = exp2f(s_j - fp_softmax_base(row)) for every key of the tile (0 for masked keys);
 *   fp_softmax_add(row, sum_j p_j).
 * At the end O = acc * fp_softmax_inv_sum(row) and LSE = fp_softmax_lse(row).
 *
 * Edge cases are handled here, once: a row with no visible key (l = 0) gives O = 0 and
 * LSE = -inf; a NaN score never becomes the maximum (fmaxf drops it) but reaches p and the sum,
 * so the row's output is NaN and no other row is touched.
 */
#ifndef FP_KERNELS_ONLINE_SOFTMAX_CUH
#define FP_KERNELS_ONLINE_SOFTMAX_CUH

#include <math.h>

#include "../../vendors/gpu.h"

#define FP_LOG2E 1.4426950408889634f
#define FP_LN2   0.6931471805599453f

struct fp_softmax_row {
    float m; /* running maximum of the scaled log2 scores; -inf until a visible key is seen */
    float l; /* running sum of exp2(s - m) */
};

__device__ __forceinline__ fp_softmax_row fp_softmax_start() {
    fp_softmax_row r;
    r.m = -INFINITY;
    r.l = 0.0f;
    return r;
}

/* The reference point p is taken against. While no finite maximum exists it is 0, so that
 * exp2f(-inf - base) = 0 instead of the NaN that -inf - (-inf) would give. */
__device__ __forceinline__ float fp_softmax_base(const fp_softmax_row &r) {
    return r.m == -INFINITY ? 0.0f : r.m;
}

/* Folds a tile's maximum into the row; returns the factor that old accumulators take. */
__device__ __forceinline__ float fp_softmax_advance(fp_softmax_row &r, float tile_max) {
    float m_new = fmaxf(r.m, tile_max);
    float alpha = exp2f(r.m - (m_new == -INFINITY ? 0.0f : m_new));
    r.m = m_new;
    r.l *= alpha;
    return alpha;
}

__device__ __forceinline__ void fp_softmax_add(fp_softmax_row &r, float tile_sum) {
    r.l += tile_sum;
}

/* 1/l, or 0 for a row that saw no key (its accumulators are 0, so O = 0). */
__device__ __forceinline__ float fp_softmax_inv_sum(const fp_softmax_row &r) {
    return r.l == 0.0f ? 0.0f : 1.0f / r.l;
}

/* Natural-log log-sum-exp of the scaled scores; -inf for a row that saw no key. */
__device__ __forceinline__ float fp_softmax_lse(const fp_softmax_row &r) {
    return r.l == 0.0f ? -INFINITY : (r.m + log2f(r.l)) * FP_LN2;
}

#endif /* FP_KERNELS_ONLINE_SOFTMAX_CUH */
