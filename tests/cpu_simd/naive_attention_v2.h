/*
 * The formulas of flashport.h's "Attention, API v2" section, computed straight from a
 * descriptor and host arrays in double precision: one query row at a time, every score, a
 * two-pass softmax, no blocking and nothing shared with the backends (FP8 is decoded here by
 * its definition, not by the library's helpers). The cpu_simd feature tests compare against it.
 */
#ifndef NAIVE_ATTENTION_V2_H
#define NAIVE_ATTENTION_V2_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "flashport.h"
#include "fp_half.h"

/* OCP FP8 by sign, exponent and mantissa fields. */
static double naive_fp8(uint8_t x, int e4m3) {
    const int sign = x >> 7;
    const int exp = e4m3 ? (x >> 3) & 15 : (x >> 2) & 31;
    const int man = e4m3 ? x & 7 : x & 3;
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    double v;
    if (e4m3 && exp == 15 && man == 7) return NAN;
    if (!e4m3 && exp == 31) v = man ? NAN : INFINITY;
    else if (exp == 0) v = ldexp((double)man, 1 - bias - mbits);
    else v = ldexp(1.0 + (double)man / (1 << mbits), exp - bias);
    return sign ? -v : v;
}

static double naive_v2_load(const void *base, flashport_dtype dt, int64_t i) {
    switch (dt) {
    case FLASHPORT_F32: return ((const float *)base)[i];
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_FP8_E4M3: return naive_fp8(((const uint8_t *)base)[i], 1);
    case FLASHPORT_FP8_E5M2: return naive_fp8(((const uint8_t *)base)[i], 0);
    }
    return NAN;
}

/* One sequence's query and key counts and the rows they start at. */
typedef struct naive_seq {
    int64_t nq, nkv, q0, k0;
} naive_seq;

static naive_seq naive_seq_of(const flashport_attention_desc *d,
                              const flashport_attention_host_args *a, int64_t b) {
    naive_seq s = {d->seq_q, d->seq_kv, 0, 0};
    if (d->q_varlen) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_q;
        s.q0 = cu[b];
        s.nq = cu[b + 1] - cu[b];
    }
    if (d->kv_layout == FLASHPORT_KV_VARLEN) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_kv;
        s.k0 = cu[b];
        s.nkv = cu[b + 1] - cu[b];
    } else if (d->kv_layout == FLASHPORT_KV_PAGED) {
        s.nkv = ((const int32_t *)a->seqlens_kv)[b];
    }
    return s;
}

/* Element index of query (or output) row i of head h of sequence b. */
static int64_t naive_q_index(const flashport_strides *st, const naive_seq *s, int64_t b, int64_t h,
                             int64_t i) {
    return b * st->batch + h * st->head + (s->q0 + i) * st->seq;
}

/* Element index of key (or value) j of KV head h of sequence b. */
static int64_t naive_kv_index(const flashport_attention_desc *d,
                              const flashport_attention_host_args *a, const flashport_strides *st,
                              const naive_seq *s, int64_t b, int64_t h, int64_t j) {
    if (d->kv_layout == FLASHPORT_KV_PAGED) {
        const int32_t page = ((const int32_t *)a->block_table)[b * d->max_pages_per_seq + j / d->page_size];
        return page * st->batch + h * st->head + (j % d->page_size) * st->seq;
    }
    return b * st->batch + h * st->head + (s->k0 + j) * st->seq;
}

static double naive_descale(const flashport_attention_desc *d, const void *f, int64_t heads,
                            int64_t len, int64_t b, int64_t h, int64_t pos) {
    if (d->descale == FLASHPORT_DESCALE_TENSOR) return ((const float *)f)[0];
    if (d->descale == FLASHPORT_DESCALE_BLOCK) {
        const int64_t blocks = (len + d->descale_block - 1) / d->descale_block;
        return ((const float *)f)[(b * heads + h) * blocks + pos / d->descale_block];
    }
    return 1.0;
}

/* Calls row(user, b, h, i, o, lse) for every query row of the problem, with o the row's
 * head_dim doubles and lse its log-sum-exp. scale 0 means 1/sqrt(head_dim). */
typedef void (*naive_row_fn)(void *user, int64_t b, int64_t h, int64_t i, const double *o,
                             double lse);

static void naive_attention_v2(const flashport_attention_desc *d,
                               const flashport_attention_host_args *a, naive_row_fn row,
                               void *user) {
    const int64_t dim = d->head_dim, group = d->heads_q / d->heads_kv;
    const double scale = d->scale != 0.0f ? d->scale : 1.0 / sqrt((double)dim);
    const int64_t right = d->causal ? 0 : d->window_right;
    double *s = malloc(sizeof(double) * (size_t)(d->seq_kv > 0 ? d->seq_kv : 1));
    double *q = malloc(sizeof(double) * (size_t)dim), *o = malloc(sizeof(double) * (size_t)dim);
    for (int64_t b = 0; b < d->batch; ++b) {
        const naive_seq sq = naive_seq_of(d, a, b);
        for (int64_t h = 0; h < d->heads_q; ++h)
            for (int64_t i = 0; i < sq.nq; ++i) {
                const int64_t hk = h / group, diag = i + sq.nkv - sq.nq;
                const int64_t q_at = naive_q_index(&d->q, &sq, b, h, i);
                const double qd = naive_descale(d, a->q_descale, d->heads_q, d->seq_q, b, h, i);
                for (int64_t c = 0; c < dim; ++c) q[c] = naive_v2_load(a->q, d->dtype, q_at + c) * qd;
                double m = -INFINITY;
                int nan = 0;
                for (int64_t j = 0; j < sq.nkv; ++j) {
                    const int visible = (d->window_left < 0 || j >= diag - d->window_left) &&
                                        (right < 0 || j <= diag + right);
                    s[j] = NAN;
                    if (!visible) continue;
                    const int64_t k_at = naive_kv_index(d, a, &d->k, &sq, b, hk, j);
                    const double kd = naive_descale(d, a->k_descale, d->heads_kv, d->seq_kv, b, hk, j);
                    double dot = 0.0;
                    for (int64_t c = 0; c < dim; ++c) dot += q[c] * naive_v2_load(a->k, d->dtype, k_at + c) * kd;
                    double x = scale * dot;
                    if (d->softcap > 0.0f) x = d->softcap * tanh(x / d->softcap);
                    if (d->alibi != FLASHPORT_ALIBI_NONE) {
                        const int64_t at = d->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? b * d->heads_q + h : h;
                        x -= ((const float *)a->alibi_slopes)[at] * fabs((double)(diag - j));
                    }
                    if (d->bias.enabled)
                        x += naive_v2_load(a->bias, d->bias.dtype,
                                           b * d->bias.batch + h * d->bias.head + i * d->bias.query +
                                               j * d->bias.key);
                    s[j] = x;
                    nan |= isnan(x);
                    if (x > m) m = x;
                }
                const double sink = d->sinks ? ((const float *)a->sinks)[h] : -INFINITY;
                for (int64_t c = 0; c < dim; ++c) o[c] = 0.0;
                double lse = sink;
                if (nan) {
                    for (int64_t c = 0; c < dim; ++c) o[c] = NAN;
                    lse = NAN;
                } else if (m > -INFINITY) {
                    const double top = sink > m ? sink : m;
                    double sum = exp(sink - top);
                    for (int64_t j = 0; j < sq.nkv; ++j) {
                        if (isnan(s[j])) continue; /* not visible */
                        const double p = exp(s[j] - top);
                        sum += p;
                        const int64_t v_at = naive_kv_index(d, a, &d->v, &sq, b, hk, j);
                        const double vd = naive_descale(d, a->v_descale, d->heads_kv, d->seq_kv, b, hk, j);
                        for (int64_t c = 0; c < dim; ++c) o[c] += p * naive_v2_load(a->v, d->dtype, v_at + c) * vd;
                    }
                    for (int64_t c = 0; c < dim; ++c) o[c] /= sum;
                    lse = top + log(sum);
                }
                row(user, b, h, i, o, lse);
            }
    }
    free(s);
    free(q);
    free(o);
}

#endif /* NAIVE_ATTENTION_V2_H */
