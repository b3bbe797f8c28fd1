/*
 * Straightforward attention in double precision, one query row at a time: scores of the visible
 * keys, their maximum, the exponentials and their sum, then the weighted sum of V. Two passes
 * over the keys on purpose: the oracle should share no trick with the kernels it checks.
 * Scratch is one row of Nkv scores, never Nq x Nkv.
 */
#include <math.h>
#include <stdlib.h>

#include "attention_double.h"
#include "fp_half.h"

static double load(const void *base, flashport_dtype dt, int64_t i) {
    switch (dt) {
    case FLASHPORT_F32: return ((const float *)base)[i];
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    }
    return NAN;
}

static void store(void *base, flashport_dtype dt, int64_t i, double v) {
    switch (dt) {
    case FLASHPORT_F32: ((float *)base)[i] = (float)v; break;
    case FLASHPORT_F16: ((uint16_t *)base)[i] = fp_f32_to_f16((float)v); break;
    case FLASHPORT_BF16: ((uint16_t *)base)[i] = fp_f32_to_bf16((float)v); break;
    }
}

/* Number of keys query row i sees: all of them, or, when causal (bottom-right aligned), keys
 * j <= i + (Nkv - Nq), which is none for the first Nq - Nkv rows when Nq > Nkv. */
static int64_t visible_keys(const fp_problem *p, int64_t i) {
    if (!p->causal) return p->seq_kv;
    int64_t last = i + (p->seq_kv - p->seq_q);
    if (last < 0) return 0;
    return last + 1 < p->seq_kv ? last + 1 : p->seq_kv;
}

flashport_status fp_reference_attention(const fp_problem *p, const fp_args *a) {
    const int64_t d = p->head_dim, group = p->heads_q / p->heads_kv;
    double *s = malloc(sizeof(double) * (size_t)p->seq_kv);
    double *acc = malloc(sizeof(double) * (size_t)d);
    if (!s || !acc) {
        free(s);
        free(acc);
        return FLASHPORT_ERROR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < p->seq_q; i++) {
                const int64_t q0 = b * p->q.batch + h * p->q.head + i * p->q.seq;
                const int64_t o0 = b * p->o.batch + h * p->o.head + i * p->o.seq;
                const int64_t n = visible_keys(p, i);
                double m = -INFINITY;
                int nan_score = 0;
                for (int64_t j = 0; j < n; j++) {
                    const int64_t k0 = b * p->k.batch + hk * p->k.head + j * p->k.seq;
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++)
                        dot += load(a->q, p->dtype, q0 + c) * load(a->k, p->dtype, k0 + c);
                    s[j] = dot * (double)p->scale;
                    if (isnan(s[j])) nan_score = 1;
                    else if (s[j] > m) m = s[j];
                }
                double lse;
                for (int64_t c = 0; c < d; c++) acc[c] = 0.0;
                if (n == 0) {
                    lse = -INFINITY; /* no visible key: O = 0 by definition */
                } else if (nan_score) {
                    lse = NAN;
                    for (int64_t c = 0; c < d; c++) acc[c] = NAN;
                } else {
                    double sum = 0.0;
                    for (int64_t j = 0; j < n; j++) {
                        s[j] = exp(s[j] - m);
                        sum += s[j];
                    }
                    for (int64_t j = 0; j < n; j++) {
                        const int64_t v0 = b * p->v.batch + hk * p->v.head + j * p->v.seq;
                        for (int64_t c = 0; c < d; c++) acc[c] += s[j] * load(a->v, p->dtype, v0 + c);
                    }
                    for (int64_t c = 0; c < d; c++) acc[c] /= sum;
                    lse = m + log(sum);
                }
                for (int64_t c = 0; c < d; c++) store(a->o, p->dtype, o0 + c, acc[c]);
                if (a->lse) ((float *)a->lse)[(b * p->heads_q + h) * p->seq_q + i] = (float)lse;
            }
        }
    free(s);
    free(acc);
    return FLASHPORT_OK;
}
