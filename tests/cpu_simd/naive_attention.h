/*
 * The straightforward attention in double precision that the cpu_simd tests compare against:
 * every score, a full softmax per row, no blocking. Inputs are read in their own dtype, so the
 * reference sees exactly the rounded values the backend sees.
 */
#ifndef NAIVE_ATTENTION_H
#define NAIVE_ATTENTION_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "flashport.h"
#include "fp_half.h"

static double naive_load(const void *base, flashport_dtype dt, int64_t index) {
    if (dt == FLASHPORT_F32) return ((const float *)base)[index];
    const uint16_t h = ((const uint16_t *)base)[index];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(h) : fp_bf16_to_f32(h);
}

static int64_t naive_index(const flashport_strides *s, int64_t b, int64_t h, int64_t n) {
    return b * s->batch + h * s->head + n * s->seq;
}

/* o: [B, Hq, Nq, d] doubles; lse: [B, Hq, Nq]. Rows with no visible key: O = 0, LSE = -inf. */
static void naive_attention(const flashport_problem *p, const void *q, const void *k, const void *v,
                            double *o, double *lse) {
    const int64_t d = p->head_dim, group = p->heads_q / p->heads_kv;
    const double scale = p->scale != 0.0f ? p->scale : 1.0 / sqrt((double)d);
    double *s = malloc(sizeof(double) * (size_t)p->seq_kv);
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < p->seq_q; ++i) {
                const int64_t row = (b * p->heads_q + h) * p->seq_q + i;
                double *orow = o + row * d;
                int64_t visible = p->seq_kv;
                if (p->causal) {
                    visible = i + p->seq_kv - p->seq_q + 1;
                    visible = visible < 0 ? 0 : visible > p->seq_kv ? p->seq_kv : visible;
                }
                for (int64_t c = 0; c < d; ++c) orow[c] = 0.0;
                if (visible == 0) {
                    lse[row] = -INFINITY;
                    continue;
                }
                double m = -INFINITY;
                int nan = 0;
                for (int64_t j = 0; j < visible; ++j) {
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; ++c)
                        dot += naive_load(q, p->dtype, naive_index(&p->q, b, h, i) + c) *
                               naive_load(k, p->dtype, naive_index(&p->k, b, h / group, j) + c);
                    s[j] = dot * scale;
                    nan |= isnan(s[j]);
                    if (s[j] > m) m = s[j];
                }
                if (nan) m = NAN;
                double sum = 0.0;
                for (int64_t j = 0; j < visible; ++j) {
                    const double e = exp(s[j] - m);
                    sum += e;
                    for (int64_t c = 0; c < d; ++c)
                        orow[c] +=
                            e * naive_load(v, p->dtype, naive_index(&p->v, b, h / group, j) + c);
                }
                for (int64_t c = 0; c < d; ++c) orow[c] /= sum;
                lse[row] = m + log(sum);
            }
    free(s);
}

#endif /* NAIVE_ATTENTION_H */
