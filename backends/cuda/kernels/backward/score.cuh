/*
 * The backward's view of the score modifiers (common/score_mods.cuh): the log2-domain score of
 * one (query, key) pair together with the derivative of the score through the softcap, and
 * which query rows see any key of a block's key range, so that a key block visits only those.
 */
#ifndef FP_BACKWARD_SCORE_CUH
#define FP_BACKWARD_SCORE_CUH

#include <limits.h>
#include <math.h>

#include "../common/score_mods.cuh"

/* The score of query i and key j in the log2 domain from their raw dot product, and in *grad
 * the factor dS takes for the chain rule through the softcap: s = c tanh(scale x / c) has
 * ds/dx = scale (1 - tanh^2); the scale itself is applied to dQ and dK at the end. Exact tanhf:
 * the backward's tolerances are those of f32 too. ALiBi and the bias are additive. */
__device__ __forceinline__ float fp_bwd_score_log2(const fp_score_mods &m, float dot, int b, int h,
                                                   int i, int j, int nq, int nkv, float *grad) {
    float s;
    if (m.softcap > 0.0f) {
        const float t = tanhf(m.scale * dot / m.softcap);
        s = m.softcap * FP_LOG2E * t;
        *grad = 1.0f - t * t;
    } else {
        s = m.scale * FP_LOG2E * dot;
        *grad = 1.0f;
    }
    if (m.alibi != FLASHPORT_ALIBI_NONE)
        s += fp_alibi_log2(fp_alibi_slope_log2(m, b, h), i, j, nq, nkv);
    if (m.bias) s += fp_bias_log2(m, b, h, i, j);
    return s;
}

/* Query rows [lo, hi) of a sequence that see some key of [k0, k1): query i sees key j when
 * dmin <= j - i <= dmax (fp_visible_band), so exactly the rows k0 - dmax <= i <= k1 - 1 - dmin. */
struct fp_bwd_rows {
    int lo, hi;
};

__device__ __forceinline__ fp_bwd_rows fp_bwd_rows_seeing(const fp_score_mods &m, int k0, int k1,
                                                          int nq, int nkv) {
    const fp_key_band band = fp_visible_band(m, nq, nkv);
    const long long lo = band.dmax == INT_MAX ? 0 : (long long)k0 - band.dmax;
    const long long hi = band.dmin == INT_MIN ? nq : (long long)k1 - band.dmin;
    fp_bwd_rows r;
    r.lo = (int)(lo < 0 ? 0 : (lo > nq ? nq : lo));
    r.hi = (int)(hi < r.lo ? r.lo : (hi > nq ? nq : hi));
    return r;
}

#endif /* FP_BACKWARD_SCORE_CUH */
