/*
 * The score policy of the cpu_simd paths (the tile path, attention.c, and the decode path,
 * decode.c): which keys each query row sees under the window (causal is one), and how a row's
 * running max and sum become its normaliser and LSE, sinks included. The modifiers (softcap,
 * ALiBi, bias) are applied by the softmax kernel under cs_score_mods (kernels/kernel_ops.h).
 */
#ifndef CS_SCORE_POLICY_H
#define CS_SCORE_POLICY_H

#include <math.h>
#include <stdint.h>

#include "fp_backend.h"
#include "kv_addressing.h"

#define CS_LOG2E 1.44269504088896340736
#define CS_LN2   0.69314718055994530942

/* Keys [*lo, *hi) of sequence s that its query i sees: the window (causal is one) around the
 * sequence's own bottom-right diagonal; [0, 0) when none. */
static inline void cs_row_keys(const fp_problem *p, const cs_seq *s, int64_t i, int64_t *lo,
                               int64_t *hi) {
    const int64_t diag = i + s->nkv - s->nq;
    /* A side longer than the sequence's queries and keys together reaches past every key from
     * every row: clamped to that, it adds to the diagonal without overflow. */
    const int64_t span = s->nq + s->nkv;
    const int64_t left = p->window_left < span ? p->window_left : span;
    const int64_t right_side = p->causal ? 0 : p->window_right;
    const int64_t right = right_side < span ? right_side : span;
    const int64_t a = left < 0 ? 0 : (diag - left > 0 ? diag - left : 0);
    const int64_t e = right < 0 ? s->nkv : (diag + right + 1 < s->nkv ? diag + right + 1 : s->nkv);
    *lo = e > a ? a : 0;
    *hi = e > a ? e : 0;
}

/* A row's output factor and LSE from its running max m and sum l (base 2, as the softmax keeps
 * them) and its sink (natural log; -inf without one). The normaliser is the sum plus, with a
 * sink, exp(sink), both taken relative to the larger of the max and the sink, in double so
 * that a sink far above every score neither overflows nor loses the sum. A NaN max or sink
 * makes the row NaN; with no mass at all (no visible key, or only -inf scores, and no sink) the
 * factor is 0 (O is 0 times the accumulator) and LSE is -inf. */
static inline void cs_row_normaliser(double m, double l, double sink_ln, float *mul, float *lse) {
    const double sink = CS_LOG2E * sink_ln;
    const double top = sink > m || isnan(sink) ? sink : m;
    const double denom = top == -INFINITY ? 0.0 : l * exp2(m - top) + exp2(sink - top);
    *mul = denom == 0.0 ? 0.0f : (float)(exp2(m - top) / denom);
    *lse = denom == 0.0 ? -INFINITY : (float)((top + log2(denom)) * CS_LN2);
}

#endif /* CS_SCORE_POLICY_H */
