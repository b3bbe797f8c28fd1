/*
 * What the matrix-core backward kernels of both vendors share per element and per tile (the
 * tensor-core kernels, backward/mma_*_kernel.cuh and tf32x3_*_kernel.cuh, and the HIP backend's
 * MFMA kernels): P and dS of one (query, key) from its dot product and dP, the key-tile kernels'
 * walk over the query tiles of a kv head's group, the test for tiles that need no mask, and on the
 * host whether a problem takes the exact per-element score.
 */
#ifndef FP_BACKWARD_TILE_MATH_CUH
#define FP_BACKWARD_TILE_MATH_CUH

#include <math.h>

#include "params.h"
#include "score.cuh"
#if !defined(FLASHPORT_HIP_BUILD) && !defined(__HIP_PLATFORM_AMD__)
#include "../common/ptx.cuh"
#endif

/* Whether p has a score modifier (softcap, ALiBi, bias): the kernels' MODS instances, which
 * take the exact per-element score of fp_bwd_score_log2. */
static inline bool fp_bwd_has_score_mods(const fp_problem *p) {
    return p->softcap > 0.0f || p->alibi != FLASHPORT_ALIBI_NONE || p->bias.enabled;
}

/* 2^x for P: one MUFU.EX2 on NVIDIA (ex2.approx, as the forward); exp2f on AMD, whose
 * v_exp_f32 is the hardware's own and needs no PTX. */
__device__ __forceinline__ float fp_bwd_exp2(float x) {
#if defined(FLASHPORT_HIP_BUILD) || defined(__HIP_PLATFORM_AMD__)
    return exp2f(x);
#else
    return fp_exp2_approx(x);
#endif
}

/* P and dS of one (query i, key j) from the raw dot product x = q_i . k_j and dP, with the row's
 * LSE (log2 domain) and D. MODS: softcap, ALiBi or bias through fp_bwd_score_log2 (exact);
 * otherwise scale_log2 * x in one FMA and fp_bwd_exp2, as the forward takes it. `seen`: the row
 * sees the key and both lie within their sequences. */
template <bool MODS>
__device__ __forceinline__ void fp_bwd_p_ds(const fp_bwd_params &a, int b, int h, int nq, int nkv,
                                            int i, int j, bool seen, float lse_log2, float delta,
                                            float &x_to_p, float &dp_to_ds) {
    float p = 0.0f, grad = 1.0f;
    if (MODS) {
        if (seen)
            p = exp2f(fp_bwd_score_log2(a.mods, x_to_p, b, h, i, j, nq, nkv, &grad) - lse_log2);
    } else {
        p = fp_bwd_exp2(seen ? fmaf(x_to_p, a.scale_log2, -lse_log2) : -INFINITY);
    }
    x_to_p = p;
    dp_to_ds = p * (dp_to_ds - delta) * grad;
}

/* The key-tile kernel's next step after (head h, first row q0): the next query tile of the
 * head, or the first tile [lo, ...) of the next head once q0 reaches end. */
__device__ __forceinline__ void fp_bwd_next_step(int &h, int &q0, int rows, int lo, int end) {
    q0 += rows;
    if (q0 >= end) {
        q0 = lo;
        ++h;
    }
}

/* Whether every query of [q0, q0 + rows) sees every key of [k0, k0 + keys), all within their
 * sequences: such tiles skip the per-element mask. */
__device__ __forceinline__ bool fp_bwd_tile_full(const fp_key_band &band, int q0, int rows, int k0,
                                                 int keys, int nq, int nkv) {
    return q0 + rows <= nq && k0 + keys <= nkv &&
           (long long)k0 - (q0 + rows - 1) >= (long long)band.dmin &&
           (long long)k0 + keys - 1 - q0 <= (long long)band.dmax;
}

#endif /* FP_BACKWARD_TILE_MATH_CUH */
