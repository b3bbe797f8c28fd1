/*
 * The per-feature math of one (query, key) pair, in the order flashport.h defines it: which keys
 * a query sees (window, causal, bottom-right aligned per sequence), then the score: scale times
 * the dot product, softcap, ALiBi, additive bias. Each feature is one line the row loop never
 * needs to know about.
 */
#ifndef FP_REFERENCE_SCORE_H
#define FP_REFERENCE_SCORE_H

#include <math.h>
#include <stdint.h>

#include "addressing.h"

/* Keys lo..hi (inclusive; none when hi < lo) that query i of sequence s sees: those with
 * i + a - window_left <= j <= i + a + window_right, a = Nkv - Nq of the sequence, -1 meaning
 * unbounded; causal arrives as causal = 1 with both bounds -1 (fp_backend.h). */
static inline void ref_visible_keys(const fp_problem *p, const ref_seq *s, int64_t i, int64_t *lo,
                                    int64_t *hi) {
    const int64_t diag = i + s->nkv - s->nq;
    const int64_t right = p->causal ? 0 : p->window_right, left = p->window_left;
    /* Clamped before the sums: a window may be as wide as INT64_MAX (UBSan, found by
     * fuzz_desc); s->nkv - 1 - diag = Nq - 1 - i is never negative. */
    *lo = left < 0 || left >= diag ? 0 : diag - left;
    *hi = right < 0 || right > s->nkv - 1 - diag ? s->nkv - 1 : diag + right;
}

/* The score of query i, head h against key j, given the dot product of their dequantised
 * vectors. */
static inline double ref_score(const fp_problem *p, const fp_args *a, const ref_seq *s, int64_t h,
                               int64_t i, int64_t j, double dot) {
    double score = (double)p->scale * dot;
    if (p->softcap > 0.0f) score = (double)p->softcap * tanh(score / (double)p->softcap);
    if (p->alibi != FLASHPORT_ALIBI_NONE) {
        const float *slopes = a->alibi_slopes;
        const int64_t idx = p->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? s->b * p->heads_q + h : h;
        score -= (double)slopes[idx] * fabs((double)(i + s->nkv - s->nq - j));
    }
    if (p->bias.enabled) {
        const flashport_bias_desc *bd = &p->bias;
        score += ref_load(a->bias, bd->dtype,
                          s->b * bd->batch + h * bd->head + i * bd->query + j * bd->key);
    }
    return score;
}

#endif /* FP_REFERENCE_SCORE_H */
