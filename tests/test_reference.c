/*
 * The reference backend against attention written out directly here, on small problems that
 * exercise every field of the descriptor: GQA, Nq != Nkv, bottom-right causal with fully masked
 * rows, both layouts, custom strides, scale, LSE, the 16-bit dtypes and NaN confinement.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "fp_half.h"

static double uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct {
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
    float scale;
    flashport_layout layout;
    flashport_dtype dtype;
} shape;

static int64_t at(const flashport_strides *s, int64_t b, int64_t h, int64_t n) {
    return b * s->batch + h * s->head + n * s->seq;
}

static double get(const void *base, flashport_dtype dt, int64_t i) {
    if (dt == FLASHPORT_F32) return ((const float *)base)[i];
    uint16_t u = ((const uint16_t *)base)[i];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(u) : fp_bf16_to_f32(u);
}

static void put(void *base, flashport_dtype dt, int64_t i, double v) {
    if (dt == FLASHPORT_F32)
        ((float *)base)[i] = (float)v;
    else if (dt == FLASHPORT_F16)
        ((uint16_t *)base)[i] = fp_f32_to_f16((float)v);
    else
        ((uint16_t *)base)[i] = fp_f32_to_bf16((float)v);
}

/* Direct softmax(scale q.k) v for one row, masking by index, using expl for independence. */
static void expected_row(const flashport_problem *p, const void *q, const void *k, const void *v,
                         int64_t b, int64_t h, int64_t i, double *o, double *lse) {
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const double scale = p->scale != 0.0f ? p->scale : 1.0 / sqrt((double)p->head_dim);
    long double m = -INFINITY, sum = 0;
    long double *w = calloc((size_t)p->seq_kv, sizeof *w);
    for (int64_t j = 0; j < p->seq_kv; j++) {
        if (p->causal && j > i + (p->seq_kv - p->seq_q)) continue;
        long double dot = 0;
        for (int64_t c = 0; c < p->head_dim; c++)
            dot += get(q, p->dtype, at(&p->q, b, h, i) + c) *
                   get(k, p->dtype, at(&p->k, b, hk, j) + c);
        w[j] = dot * scale;
        if (w[j] > m) m = w[j];
    }
    for (int64_t c = 0; c < p->head_dim; c++) o[c] = 0;
    if (m == -INFINITY) {
        *lse = -INFINITY;
        free(w);
        return;
    }
    for (int64_t j = 0; j < p->seq_kv; j++) {
        if (p->causal && j > i + (p->seq_kv - p->seq_q)) continue;
        w[j] = expl(w[j] - m);
        sum += w[j];
    }
    for (int64_t j = 0; j < p->seq_kv; j++) {
        if (p->causal && j > i + (p->seq_kv - p->seq_q)) continue;
        for (int64_t c = 0; c < p->head_dim; c++)
            o[c] += (double)(w[j] / sum) * get(v, p->dtype, at(&p->v, b, hk, j) + c);
    }
    *lse = (double)(m + logl(sum));
    free(w);
}

static void run_case(flashport_context *ctx, shape s, uint64_t seed) {
    flashport_problem p;
    flashport_problem_init(&p, s.dtype, s.b, s.hq, s.hkv, s.nq, s.nkv, s.d, s.layout);
    p.causal = s.causal;
    p.scale = s.scale;
    const size_t es = flashport_dtype_size(s.dtype);
    int64_t n[4] = {flashport_problem_extent(&p, 'q'), flashport_problem_extent(&p, 'k'),
                    flashport_problem_extent(&p, 'v'), flashport_problem_extent(&p, 'o')};
    void *t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = malloc((size_t)n[i] * es);
        for (int64_t e = 0; e < n[i]; e++) put(t[i], s.dtype, e, uniform(&seed) * 2.0);
    }
    float *lse = malloc(sizeof(float) * (size_t)(s.b * s.hq * s.nq));
    CHECK(flashport_attention_host(ctx, &p, t[0], t[1], t[2], t[3], lse) == FLASHPORT_OK);
    double *o = malloc(sizeof(double) * (size_t)s.d), l;
    const double tol = s.dtype == FLASHPORT_F32 ? 1e-6 : s.dtype == FLASHPORT_F16 ? 2e-3 : 1.6e-2;
    int bad = 0;
    for (int64_t b = 0; b < s.b; b++)
        for (int64_t h = 0; h < s.hq; h++)
            for (int64_t i = 0; i < s.nq; i++) {
                expected_row(&p, t[0], t[1], t[2], b, h, i, o, &l);
                for (int64_t c = 0; c < s.d; c++) {
                    double got = get(t[3], s.dtype, at(&p.o, b, h, i) + c);
                    if (fabs(got - o[c]) > tol * (1.0 + fabs(o[c]))) bad++;
                }
                float gl = lse[(b * s.hq + h) * s.nq + i];
                if (isinf(l))
                    bad += !(isinf(gl) && gl < 0);
                else
                    bad += fabs(gl - l) > 1e-5 * (1.0 + fabs(l));
            }
    if (bad)
        fprintf(stderr,
                "case b=%lld hq=%lld hkv=%lld nq=%lld nkv=%lld d=%lld causal=%d %s: %d bad\n",
                (long long)s.b, (long long)s.hq, (long long)s.hkv, (long long)s.nq,
                (long long)s.nkv, (long long)s.d, s.causal, flashport_dtype_name(s.dtype), bad);
    CHECK(bad == 0);
    for (int i = 0; i < 4; i++) free(t[i]);
    free(lse);
    free(o);
}

/* One NaN in K at key j poisons exactly the rows that see key j. */
static void nan_confinement(flashport_context *ctx) {
    enum { NQ = 6, NKV = 6, D = 3 };
    float q[NQ * D], k[NKV * D], v[NKV * D], o[NQ * D], lse[NQ];
    for (int i = 0; i < NQ * D; i++) q[i] = k[i] = v[i] = 0.1f * (float)(i % 5);
    k[4 * D + 1] = NAN;
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
    p.causal = 1;
    CHECK(flashport_attention_host(ctx, &p, q, k, v, o, lse) == FLASHPORT_OK);
    for (int i = 0; i < NQ; i++) {
        int sees = i >= 4;
        for (int c = 0; c < D; c++) CHECK(isnan(o[i * D + c]) == sees);
        CHECK(isnan(lse[i]) == sees);
    }
}

int main(void) {
    flashport_context *ctx;
    if (flashport_context_create("reference", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    const shape cases[] = {
        {1, 1, 1, 7, 7, 5, 0, 0, FLASHPORT_LAYOUT_BHND, FLASHPORT_F32},
        {2, 4, 1, 5, 9, 8, 0, 0.3f, FLASHPORT_LAYOUT_BNHD, FLASHPORT_F32}, /* MQA, scale */
        {1, 8, 2, 9, 4, 3, 1, 0, FLASHPORT_LAYOUT_BHND, FLASHPORT_F32},    /* Nq > Nkv causal */
        {1, 2, 2, 3, 11, 16, 1, 0, FLASHPORT_LAYOUT_BNHD, FLASHPORT_F32},  /* Nq < Nkv causal */
        {1, 2, 1, 1, 13, 4, 1, 0, FLASHPORT_LAYOUT_BHND, FLASHPORT_F32},   /* decode */
        {2, 2, 2, 6, 6, 8, 1, 0, FLASHPORT_LAYOUT_BHND, FLASHPORT_F16},
        {1, 4, 2, 6, 10, 8, 0, 0, FLASHPORT_LAYOUT_BNHD, FLASHPORT_BF16},
    };
    uint64_t seed = 7;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ctx, cases[i], seed++);

    /* Strides with gaps: O rows padded to 10 elements, and the padding must stay untouched. */
    {
        enum { N = 4, D = 6, PAD = 10 };
        float q[N * D], k[N * D], v[N * D], o[N * PAD];
        for (int i = 0; i < N * D; i++) q[i] = k[i] = v[i] = 0.05f * (float)(i % 11) - 0.2f;
        for (int i = 0; i < N * PAD; i++) o[i] = -777.0f;
        flashport_problem p;
        flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, N, N, D, FLASHPORT_LAYOUT_BHND);
        p.o.seq = PAD;
        p.o.head = p.o.batch = N * PAD;
        CHECK(flashport_attention_host(ctx, &p, q, k, v, o, NULL) == FLASHPORT_OK);
        for (int i = 0; i < N; i++)
            for (int c = D; c < PAD && i < N - 1; c++) CHECK(o[i * PAD + c] == -777.0f);
        CHECK(o[0] != -777.0f);
    }
    nan_confinement(ctx);

    flashport_plan_info info;
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, 4, 4, 4, FLASHPORT_LAYOUT_BHND);
    CHECK(flashport_plan(ctx, &p, &info) == FLASHPORT_OK);
    CHECK(strcmp(info.kernel, "double_accumulation") == 0);
    CHECK(info.reason[0] != '\0');
    flashport_context_destroy(ctx);
    return check_report("test_reference");
}
