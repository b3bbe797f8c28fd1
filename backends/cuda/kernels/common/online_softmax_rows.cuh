/*
 * One online-softmax step on a warp's rows held in mma accumulators, shared by the f16/bf16
 * forward (mma/warp_rows.cuh) and the 3xTF32 forward (tf32x3/). Both keep S and O in the C/D
 * layout that mma.sync m16n8k16 and m16n8k8 share: of the four registers a lane holds for an
 * 8-column tile, 2i and 2i + 1 are two adjacent columns of row g + 8i (mma/fragment_layout.h),
 * so a row's max and sum need only the shuffles among the four lanes of its group.
 *
 * In: s[MT][KEY_TILES][4], one key tile's scores (masked ones -inf), to be multiplied by
 * scale_log2 > 0 (a kernel that has already scaled them passes 1). Out: s holds P = exp2(scaled
 * score - running max), rounded nowhere; m is the new running max (base 2, scaled), l and O are
 * rescaled to it. The max is taken over the raw scores and scaled once, and each P is one FFMA
 * and one ex2.approx. A row whose keys are all masked so far keeps m = -inf; exp2 is then taken
 * against 0, so that it yields 0 rather than NaN. A NaN score is skipped by fmaxf but reaches l
 * and O through the exp2, as it must. O and l are rescaled only when some row of the warp has a
 * new max: alpha is exactly 1 otherwise, and after the first tiles most tiles raise no max.
 */
#ifndef FP_KERNELS_ONLINE_SOFTMAX_ROWS_CUH
#define FP_KERNELS_ONLINE_SOFTMAX_ROWS_CUH

#include <math.h>

#include "ptx.cuh"

/* Zeroes accumulators (any [A][B] of 4-register tiles). */
template <int A, int B> static __device__ __forceinline__ void fp_mma_zero(float (&x)[A][B][4]) {
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < B; ++b)
#pragma unroll
            for (int r = 0; r < 4; ++r) x[a][b][r] = 0.0f;
}

/* The same for one row of tiles. */
template <int B> static __device__ __forceinline__ void fp_mma_zero(float (&x)[B][4]) {
#pragma unroll
    for (int b = 0; b < B; ++b)
#pragma unroll
        for (int r = 0; r < 4; ++r) x[b][r] = 0.0f;
}

/* The state before the first key: O = 0, and for rows g and g + 8 of each slice, running max
 * -inf and this lane's share of the row sum 0. */
template <int MT, int D_TILES>
static __device__ __forceinline__ void fp_mma_softmax_init(float (&m)[MT][2], float (&l)[MT][2],
                                                           float (&o)[MT][D_TILES][4]) {
    fp_mma_zero(o);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            m[mt][i] = -INFINITY;
            l[mt][i] = 0.0f;
        }
}

/* The state before the first key of a head with a sink (score_mods.cuh), sink_log2 its logit in
 * the log2 domain: the sink is a key with a zero value that every row sees, so the rows start
 * as if they had seen it, at running max sink_log2 with sum 1 (in the first lane of each quad,
 * whose four lanes' shares are summed at the end) and O = 0. It then costs nothing per tile and
 * nothing in the registers the tile loop keeps, where a fold at the end kept the sinks' pointer
 * live across the loop. The same results as fp_sink_fold: a row that sees no key ends at
 * l = 1, m = sink (O = 0, LSE = sink); a -inf sink contributes exp2(-inf) = 0 at the first new
 * max; a NaN sink makes the sum NaN from the start. */
template <int MT>
static __device__ __forceinline__ void fp_mma_softmax_start_at_sink(float (&m)[MT][2],
                                                                    float (&l)[MT][2],
                                                                    float sink_log2, int lane) {
    const float one = isnan(sink_log2) ? sink_log2 : 1.0f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            m[mt][i] = sink_log2;
            l[mt][i] = lane % 4 == 0 ? one : 0.0f;
        }
}

template <int MT, int KEY_TILES, int D_TILES>
static __device__ __forceinline__ void
fp_mma_softmax_step(float (&s)[MT][KEY_TILES][4], float (&m)[MT][2], float (&l)[MT][2],
                    float (&o)[MT][D_TILES][4], float scale_log2) {
    float m_new[MT][2], m_ref[MT][2];
    bool new_max = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; ++nt)
                mx = fmaxf(mx, fmaxf(s[mt][nt][2 * i], s[mt][nt][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            m_new[mt][i] = fmaxf(m[mt][i], mx * scale_log2);
            m_ref[mt][i] = m_new[mt][i] == -INFINITY ? 0.0f : m_new[mt][i];
            new_max |= m_new[mt][i] != m[mt][i];
        }
    if (__any_sync(0xffffffffu, new_max)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float alpha = fp_exp2_approx(m[mt][i] - m_ref[mt][i]);
                l[mt][i] *= alpha;
#pragma unroll
                for (int dt = 0; dt < D_TILES; ++dt) {
                    o[mt][dt][2 * i] *= alpha;
                    o[mt][dt][2 * i + 1] *= alpha;
                }
            }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) m[mt][i] = m_new[mt][i];
#pragma unroll
        for (int nt = 0; nt < KEY_TILES; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float p = fp_exp2_approx(fmaf(s[mt][nt][r], scale_log2, -m_ref[mt][r >> 1]));
                s[mt][nt][r] = p;
                l[mt][r >> 1] += p;
            }
    }
}

#endif /* FP_KERNELS_ONLINE_SOFTMAX_ROWS_CUH */
