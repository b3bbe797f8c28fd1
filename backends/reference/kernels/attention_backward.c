/*
 * The backward pass in double precision, one query row at a time, from the formulas:
 *
 *   P_ij  = exp(s_ij - LSE_i)          recomputed from the forward's LSE (which holds the sink)
 *   D_i   = sum_c dO_ic O_ic
 *   dP_ij = dO_i . v_j
 *   dS_ij = P_ij (dP_ij - D_i)         the gradient of the final score s_ij
 *   dQ_i  = sum_j scale g_ij dS_ij k_j,  dK_j = sum_i scale g_ij dS_ij q_i,  dV_j = sum_i P_ij dO_i
 *
 * with g_ij the derivative of the final score by the scaled product x = scale q_i . k_j: 1, or
 * 1 - tanh^2(x / softcap) with a softcap (ALiBi and the bias add terms that do not depend on
 * q or k). A sink changes only the denominator, which the LSE carries, and takes no gradient;
 * neither do the bias and the slopes. The keys a row does not see get nothing from it. A row
 * whose LSE is -inf has no mass on any key: its dQ is 0 and it adds nothing to dK and dV.
 *
 * dK and dV of one KV head of one sequence sum over every query row of every query head of its
 * group, so they are accumulated in double over the whole sequence (2 * Nkv * d doubles) and
 * stored once; the score row is recomputed rather than kept. No Nq x Nkv array.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "addressing.h"
#include "attention_backward.h"
#include "score.h"

typedef struct bwd_scratch {
    double *q, *d_o, *d_q, *k, *v; /* d each: the query row, its dO and dQ, a key's K and V */
    double *d_k, *d_v;             /* Nkv x d each: the sequence's KV head */
} bwd_scratch;

static void load_row(const void *base, flashport_dtype dt, int64_t at, int64_t d, double *out) {
    for (int64_t c = 0; c < d; c++) out[c] = ref_load(base, dt, at + c);
}

static double dot(const double *x, const double *y, int64_t d) {
    double s = 0.0;
    for (int64_t c = 0; c < d; c++) s += x[c] * y[c];
    return s;
}

/* d score / d (scale q . k) at the scaled product x. */
static double score_slope(const fp_problem *p, double x) {
    if (!(p->softcap > 0.0f)) return 1.0;
    const double t = tanh(x / (double)p->softcap);
    return 1.0 - t * t;
}

/* Row i of query head h: writes its dQ and adds its terms to the group's dK and dV. */
static void backward_row(const fp_problem *p, const fp_args *a, const ref_seq *s, int64_t h,
                         int64_t i, const bwd_scratch *w) {
    const int64_t d = p->head_dim, hk = h / (p->heads_q / p->heads_kv);
    const int64_t q0 = ref_q_row(&p->q, s, h, i), o0 = ref_q_row(&p->o, s, h, i);
    load_row(a->q, p->dtype, q0, d, w->q);
    load_row(a->d_o, p->out_dtype, o0, d, w->d_o);
    double big_d = 0.0;
    for (int64_t c = 0; c < d; c++) big_d += w->d_o[c] * ref_load(a->o, p->out_dtype, o0 + c);
    for (int64_t c = 0; c < d; c++) w->d_q[c] = 0.0;

    const double lse = ((const float *)a->lse)[ref_lse_index(p, s, h, i)];
    int64_t lo, hi;
    ref_visible_keys(p, s, i, &lo, &hi);
    if (lse == -INFINITY) hi = lo - 1; /* no mass anywhere: every P_ij is 0 */
    const double scale = (double)p->scale;
    for (int64_t j = lo; j <= hi; j++) {
        load_row(a->k, p->dtype, ref_kv_row(p, a, &p->k, s, hk, j), d, w->k);
        load_row(a->v, p->dtype, ref_kv_row(p, a, &p->v, s, hk, j), d, w->v);
        const double qk = dot(w->q, w->k, d);
        const double prob = exp(ref_score(p, a, s, h, i, j, qk) - lse);
        /* The gradient of q . k, shared by dQ and dK. */
        const double grad =
            prob * (dot(w->d_o, w->v, d) - big_d) * score_slope(p, scale * qk) * scale;
        double *dk = w->d_k + j * d, *dv = w->d_v + j * d;
        for (int64_t c = 0; c < d; c++) {
            w->d_q[c] += grad * w->k[c];
            dk[c] += grad * w->q[c];
            dv[c] += prob * w->d_o[c];
        }
    }
    for (int64_t c = 0; c < d; c++) ref_store(a->d_q, p->out_dtype, q0 + c, w->d_q[c]);
}
flashport_status fp_reference_attention_backward(const fp_problem *p, const fp_args *a) {
    const int64_t d = p->head_dim, group = p->heads_q / p->heads_kv;
    int64_t longest = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const int64_t n = ref_sequence(p, a, b).nkv;
        longest = n > longest ? n : longest;
    }
    double *scratch = malloc(sizeof(double) * (size_t)(5 * d + 2 * longest * d));
    if (!scratch) return FLASHPORT_ERROR_OUT_OF_MEMORY;
    const bwd_scratch w = {scratch,
                           scratch + d,
                           scratch + 2 * d,
                           scratch + 3 * d,
                           scratch + 4 * d,
                           scratch + 5 * d,
                           scratch + 5 * d + longest * d};
    for (int64_t b = 0; b < p->batch; b++) {
        const ref_seq s = ref_sequence(p, a, b);
        for (int64_t hk = 0; hk < p->heads_kv; hk++) {
            memset(w.d_k, 0, sizeof(double) * (size_t)(2 * longest * d));
            for (int64_t h = hk * group; h < (hk + 1) * group; h++)
                for (int64_t i = 0; i < s.nq; i++) backward_row(p, a, &s, h, i, &w);
            for (int64_t j = 0; j < s.nkv; j++) {
                const int64_t k0 = ref_kv_row(p, a, &p->k, &s, hk, j);
                const int64_t v0 = ref_kv_row(p, a, &p->v, &s, hk, j);
                for (int64_t c = 0; c < d; c++) {
                    ref_store(a->d_k, p->out_dtype, k0 + c, w.d_k[j * d + c]);
                    ref_store(a->d_v, p->out_dtype, v0 + c, w.d_v[j * d + c]);
                }
            }
        }
    }
    free(scratch);
    return FLASHPORT_OK;
}
