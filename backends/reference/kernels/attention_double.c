/*
 * Straightforward attention in double precision, one query row at a time: the scores of the
 * row's visible keys and their maximum (with the sink's logit, when there is one), then the
 * exponentials, their sum and the weighted sum of V. Two passes over the keys on purpose: the
 * oracle shares no trick with the kernels it checks. Every feature lives in addressing.h and
 * score.h; this loop is the same for all of them. Scratch is one row of Nkv scores plus two
 * vectors of d, never Nq x Nkv.
 *
 * Rows without a finite result follow flashport.h, by plain IEEE arithmetic on those sums and
 * one guard: a row whose denominator is 0 (no visible key, or every visible score -inf, and no
 * sink) gets LSE = -inf and O = 0 instead of 0/0; with a sink the denominator is exp(sink) and
 * the same row gets O = 0, LSE = sink. A NaN score or sink, or an undefined softmax (a +inf
 * score gives inf - inf), makes the row's denominator NaN and so its whole O and its LSE. A NaN
 * in a visible key's value vector reaches only the O elements it is summed into, whatever the
 * key's weight (0 * NaN is NaN, as in every kernel); the LSE does not depend on V. No row
 * reads another row's keys, so nothing spreads across rows.
 */
#include <math.h>
#include <stdlib.h>

#include "addressing.h"
#include "attention_double.h"
#include "score.h"

typedef struct row_scratch {
    double *q;      /* the query row, dequantised: d */
    double *acc;    /* sum of exp(s_j - m) v_j: d */
    double *scores; /* of the visible keys: up to Nkv */
} row_scratch;

static void attend_row(const fp_problem *p, const fp_args *a, const ref_seq *s, int64_t h,
                       int64_t i, const row_scratch *w) {
    const int64_t d = p->head_dim, hk = h / (p->heads_q / p->heads_kv);
    const int64_t q0 = ref_q_row(&p->q, s, h, i);
    const double q_scale = ref_descale(p, a->q_descale, p->heads_q, p->seq_q, s, h, i);
    for (int64_t c = 0; c < d; c++) w->q[c] = ref_load(a->q, p->dtype, q0 + c) * q_scale;

    int64_t lo, hi;
    ref_visible_keys(p, s, i, &lo, &hi);
    const double sink = p->sinks ? (double)((const float *)a->sinks)[h] : -INFINITY;
    double m = sink;
    for (int64_t j = lo; j <= hi; j++) {
        const int64_t k0 = ref_kv_row(p, a, &p->k, s, hk, j);
        const double k_scale = ref_descale(p, a->k_descale, p->heads_kv, p->seq_kv, s, hk, j);
        double dot = 0.0;
        for (int64_t c = 0; c < d; c++)
            dot += w->q[c] * (ref_load(a->k, p->dtype, k0 + c) * k_scale);
        const double score = ref_score(p, a, s, h, i, j, dot);
        w->scores[j - lo] = score;
        if (score > m) m = score;
    }

    /* With every term -inf the shift is 0, so that the sum is an honest 0 rather than a NaN
     * from -inf - -inf; NaN shifts (a NaN sink) pass through. */
    const double shift = m == -INFINITY ? 0.0 : m;
    double sum = exp(sink - shift);
    for (int64_t c = 0; c < d; c++) w->acc[c] = 0.0;
    for (int64_t j = lo; j <= hi; j++) {
        const double e = exp(w->scores[j - lo] - shift);
        const int64_t v0 = ref_kv_row(p, a, &p->v, s, hk, j);
        const double v_scale = ref_descale(p, a->v_descale, p->heads_kv, p->seq_kv, s, hk, j);
        sum += e;
        for (int64_t c = 0; c < d; c++)
            w->acc[c] += e * (ref_load(a->v, p->dtype, v0 + c) * v_scale);
    }

    /* With a denominator of 0 every weight is 0 and acc holds 0 (or NaN from a NaN value). */
    const double denom = sum == 0.0 ? 1.0 : sum;
    const int64_t o0 = ref_q_row(&p->o, s, h, i);
    for (int64_t c = 0; c < d; c++) ref_store(a->o, p->out_dtype, o0 + c, w->acc[c] / denom);
    const double lse = sum == 0.0 ? -INFINITY : shift + log(sum);
    if (a->lse) ((float *)a->lse)[ref_lse_index(p, s, h, i)] = (float)lse;
}

flashport_status fp_reference_attention(const fp_problem *p, const fp_args *a) {
    const size_t d = (size_t)p->head_dim;
    /* Scores of the longest sequence the tables give, not of seq_kv: with varlen and paged
     * K/V that is only a bound, which a caller may set far above any sequence (a bound of 2^31
     * once asked for 16 GiB here, found by fuzz_desc). */
    int64_t longest = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const int64_t n = ref_sequence(p, a, b).nkv;
        longest = n > longest ? n : longest;
    }
    double *scratch = malloc(sizeof(double) * (2 * d + (size_t)longest));
    if (!scratch) return FLASHPORT_ERROR_OUT_OF_MEMORY;
    const row_scratch w = {scratch, scratch + d, scratch + 2 * d};
    for (int64_t b = 0; b < p->batch; b++) {
        const ref_seq s = ref_sequence(p, a, b);
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < s.nq; i++) attend_row(p, a, &s, h, i, &w);
    }
    free(scratch);
    return FLASHPORT_OK;
}
