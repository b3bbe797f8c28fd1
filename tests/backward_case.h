/*
 * One backward-pass problem on host arrays, for the tests of every backend's backward: the
 * descriptor and the buffers of a shape and a set of features (GQA, causal, window, softcap,
 * ALiBi, additive bias, sinks, packed sequences), random inputs in the dtype, the forward's O
 * and LSE from a backend, a random dO, and dQ, dK, dV filled with a sentinel so that a test
 * sees what the call wrote. Packed cases keep one row past the last sequence, which no call may
 * write.
 */
#ifndef FP_TEST_BACKWARD_CASE_H
#define FP_TEST_BACKWARD_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flashport.h"
#include "fp_half.h"

enum { BWD_MAXB = 4, BWD_SENTINEL = 0x5c };

typedef struct bwd_spec {
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    flashport_layout layout;
    int causal;
    int64_t window_left, window_right;
    float scale, softcap;
    flashport_alibi alibi;
    int bias;   /* 1: an f32 bias over [B, Hq, Nq, Nkv] */
    int masked; /* with bias: some rows see only -inf scores */
    int sinks;
    int varlen; /* packed Q and K/V, sequences of random lengths up to seq_q and seq_kv */
    int deterministic;
} bwd_spec;

typedef struct bwd_case {
    flashport_attention_desc d;
    flashport_attention_host_args a;
    size_t esize;
    int64_t n_q, n_kv, n_lse; /* elements of Q (and O, dO, dQ), of K (V, dK, dV), of the LSE */
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
    float *lse, *sinks, *slopes, *bias;
    int32_t cu_q[BWD_MAXB + 1], cu_kv[BWD_MAXB + 1];
} bwd_case;

static uint64_t bwd_rng = 0x9e3779b97f4a7c15ull;
static double bwd_uniform(double lo, double hi) {
    bwd_rng = bwd_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * ((double)(bwd_rng >> 11) / 9007199254740992.0);
}
static int64_t bwd_pick(int64_t lo, int64_t hi) {
    return lo + (int64_t)bwd_uniform(0.0, (double)(hi - lo + 1));
}

static double bwd_get(const void *base, flashport_dtype dt, int64_t i) {
    if (dt == FLASHPORT_F16) return fp_f16_to_f32(((const uint16_t *)base)[i]);
    if (dt == FLASHPORT_BF16) return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}
static void bwd_set(void *base, flashport_dtype dt, int64_t i, double x) {
    if (dt == FLASHPORT_F16)
        ((uint16_t *)base)[i] = fp_f32_to_f16((float)x);
    else if (dt == FLASHPORT_BF16)
        ((uint16_t *)base)[i] = fp_f32_to_bf16((float)x);
    else
        ((float *)base)[i] = (float)x;
}

static void *bwd_random(int64_t n, flashport_dtype dt, size_t esize) {
    void *p = malloc((size_t)n * esize + 1);
    for (int64_t i = 0; i < n; i++) bwd_set(p, dt, i, bwd_uniform(-1.0, 1.0));
    return p;
}

/* Packed lengths: random, the first sequence the longest so that the maximum is met. */
static int64_t bwd_pack(int32_t *cu, int64_t batch, int64_t longest) {
    cu[0] = 0;
    for (int64_t b = 0; b < batch; b++)
        cu[b + 1] = cu[b] + (int32_t)(b == 0 ? longest : bwd_pick(0, longest));
    return cu[batch] + 1; /* one row no sequence owns */
}

static void bwd_case_make(bwd_case *c, const bwd_spec *s) {
    memset(c, 0, sizeof *c);
    flashport_attention_desc_init(&c->d, s->dtype, s->batch, s->heads_q, s->heads_kv, s->seq_q,
                                  s->seq_kv, s->head_dim, s->layout);
    c->a = (flashport_attention_host_args)FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    c->esize = flashport_dtype_size(s->dtype);
    int64_t rows_q = s->batch * s->seq_q, rows_kv = s->batch * s->seq_kv;
    if (s->varlen) {
        rows_q = bwd_pack(c->cu_q, s->batch, s->seq_q);
        rows_kv = bwd_pack(c->cu_kv, s->batch, s->seq_kv);
        flashport_attention_desc_set_varlen(&c->d, rows_q, s->seq_q, rows_kv, s->seq_kv);
        c->a.cu_seqlens_q = c->cu_q, c->a.cu_seqlens_kv = c->cu_kv;
    }
    c->n_q = rows_q * s->heads_q * s->head_dim;
    c->n_kv = rows_kv * s->heads_kv * s->head_dim;
    c->n_lse = rows_q * s->heads_q;
    c->d.scale = s->scale;
    c->d.causal = s->causal;
    c->d.window_left = s->window_left;
    c->d.window_right = s->window_right;
    c->d.softcap = s->softcap;
    c->d.alibi = s->alibi;
    c->d.sinks = s->sinks;
    c->d.deterministic = s->deterministic;
    c->q = bwd_random(c->n_q, s->dtype, c->esize);
    c->k = bwd_random(c->n_kv, s->dtype, c->esize);
    c->v = bwd_random(c->n_kv, s->dtype, c->esize);
    c->d_o = bwd_random(c->n_q, s->dtype, c->esize);
    c->o = calloc((size_t)c->n_q, c->esize);
    c->lse = calloc((size_t)c->n_lse, sizeof(float));
    c->dq = malloc((size_t)c->n_q * c->esize);
    c->dk = malloc((size_t)c->n_kv * c->esize);
    c->dv = malloc((size_t)c->n_kv * c->esize);
    if (s->sinks) {
        c->sinks = malloc(sizeof(float) * (size_t)s->heads_q);
        for (int64_t h = 0; h < s->heads_q; h++) c->sinks[h] = (float)bwd_uniform(-1.0, 1.5);
        c->a.sinks = c->sinks;
    }
    if (s->alibi != FLASHPORT_ALIBI_NONE) {
        const int64_t n = s->heads_q * (s->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? s->batch : 1);
        c->slopes = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) c->slopes[i] = (float)bwd_uniform(0.01, 0.3);
        c->a.alibi_slopes = c->slopes;
    }
    if (s->bias) {
        const int64_t n = s->batch * s->heads_q * s->seq_q * s->seq_kv;
        c->bias = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) c->bias[i] = (float)bwd_uniform(-1.0, 1.0);
        /* Row 0 of every head of batch 0 sees only -inf: no mass, dQ = 0, nothing to dK, dV. */
        if (s->masked)
            for (int64_t h = 0; h < s->heads_q; h++)
                for (int64_t j = 0; j < s->seq_kv; j++)
                    c->bias[h * s->seq_q * s->seq_kv + j] = -INFINITY;
        c->d.bias = (flashport_bias_desc){
            1, FLASHPORT_F32, s->heads_q * s->seq_q * s->seq_kv, s->seq_q * s->seq_kv, s->seq_kv,
            1};
        c->a.bias = c->bias;
    }
    c->a.q = c->q, c->a.k = c->k, c->a.v = c->v, c->a.o = c->o, c->a.lse = c->lse;
}

/* O and LSE from ctx's forward pass. */
static flashport_status bwd_case_forward(flashport_context *ctx, bwd_case *c) {
    flashport_attention_host_args a = c->a;
    a.d_o = a.d_q = a.d_k = a.d_v = NULL;
    return flashport_attention_run_host(ctx, &c->d, &a);
}

/* dQ, dK, dV (first filled with the sentinel) from ctx's backward pass, kernel forced or NULL. */
static flashport_status bwd_case_backward(flashport_context *ctx, bwd_case *c, const char *kernel) {
    memset(c->dq, BWD_SENTINEL, (size_t)c->n_q * c->esize);
    memset(c->dk, BWD_SENTINEL, (size_t)c->n_kv * c->esize);
    memset(c->dv, BWD_SENTINEL, (size_t)c->n_kv * c->esize);
    flashport_attention_desc d = c->d;
    d.kernel = kernel;
    flashport_attention_host_args a = c->a;
    a.d_o = c->d_o, a.d_q = c->dq, a.d_k = c->dk, a.d_v = c->dv;
    return flashport_attention_backward_host(ctx, &d, &a);
}

static void bwd_case_free(bwd_case *c) {
    void *all[] = {c->q,  c->k,  c->v,   c->o,     c->d_o,    c->dq,
                   c->dk, c->dv, c->lse, c->sinks, c->slopes, c->bias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Whether element i of a packed Q-shaped (kv = 0) or K-shaped tensor belongs to no sequence:
 * the call must leave it alone. Dense tensors have none. */
static int bwd_unowned(const bwd_case *c, int kv, int64_t i) {
    if (!c->d.q_varlen) return 0;
    const int64_t row = i / ((kv ? c->d.heads_kv : c->d.heads_q) * c->d.head_dim);
    return row >= (kv ? c->cu_kv : c->cu_q)[c->d.batch];
}

/* Relative L2 error of one gradient over the elements a sequence owns. */
static inline double bwd_rel_l2(const bwd_case *got, const bwd_case *want, const void *g,
                                const void *w, int64_t n, int kv) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (bwd_unowned(got, kv, i)) continue;
        const double a = bwd_get(g, got->d.dtype, i), b = bwd_get(w, want->d.dtype, i);
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Whether exactly the elements no sequence owns kept the sentinel. */
static inline int bwd_sentinels_right(const bwd_case *c) {
    const void *t[3] = {c->dq, c->dk, c->dv};
    const int64_t n[3] = {c->n_q, c->n_kv, c->n_kv};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < n[k]; i++) {
            const unsigned char *b = (const unsigned char *)t[k] + (size_t)i * c->esize;
            int sentinel = 1;
            for (size_t e = 0; e < c->esize; e++) sentinel &= b[e] == BWD_SENTINEL;
            if (sentinel != bwd_unowned(c, k > 0, i)) return 0;
        }
    return 1;
}

/* ctx's gradients (kernel forced, or NULL) against the reference backend's, both from the
 * reference's O and LSE: the relative L2 errors of dQ, dK and dV into err. Returns the first
 * status that is not OK (err then infinite), or BWD_SENTINELS_WRONG when ctx wrote a packed row
 * that no sequence owns. */
#define BWD_SENTINELS_WRONG ((flashport_status)-1000)
static inline flashport_status bwd_errors_vs_reference(flashport_context *ctx,
                                                       flashport_context *ref, const bwd_spec *s,
                                                       const char *kernel, double err[3]) {
    for (int k = 0; k < 3; k++) err[k] = INFINITY;
    bwd_case c;
    bwd_case_make(&c, s);
    flashport_status st = bwd_case_forward(ref, &c);
    if (st == FLASHPORT_OK) st = bwd_case_backward(ref, &c, NULL);
    const int64_t n[3] = {c.n_q, c.n_kv, c.n_kv};
    void *have[3] = {c.dq, c.dk, c.dv}, *want[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3 && st == FLASHPORT_OK; k++) {
        want[k] = malloc((size_t)n[k] * c.esize);
        memcpy(want[k], have[k], (size_t)n[k] * c.esize);
    }
    if (st == FLASHPORT_OK) st = bwd_case_backward(ctx, &c, kernel);
    if (st == FLASHPORT_OK && !bwd_sentinels_right(&c)) st = BWD_SENTINELS_WRONG;
    for (int k = 0; k < 3 && st == FLASHPORT_OK; k++)
        err[k] = bwd_rel_l2(&c, &c, have[k], want[k], n[k], k > 0);
    for (int k = 0; k < 3; k++) free(want[k]);
    bwd_case_free(&c);
    return st;
}

/* Whether two runs wrote the same bits. */
static inline int bwd_same_bits(const bwd_case *a, const bwd_case *b) {
    return !memcmp(a->dq, b->dq, (size_t)a->n_q * a->esize) &&
           !memcmp(a->dk, b->dk, (size_t)a->n_kv * a->esize) &&
           !memcmp(a->dv, b->dv, (size_t)a->n_kv * a->esize);
}

#endif /* FP_TEST_BACKWARD_CASE_H */
