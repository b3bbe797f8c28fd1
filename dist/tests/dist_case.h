/* What the ring tests share: a problem, its random inputs, the shard of a rank, and the error
 * sums of a rank's shard against the whole-sequence result (summed over ranks by the caller). */
#ifndef DIST_CASE_H
#define DIST_CASE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashport_dist.h"
#include "fp_half.h"
#include "global_pairs.h"

typedef struct tcase {
    flashport_dtype dtype;
    flashport_layout layout;
    int64_t batch, heads_q, heads_kv, seq, dim;
    int causal;
    flashport_dist_sharding sharding;
    int64_t window_left, window_right; /* global positions; -1: unbounded */
    float softcap;
    int sinks; /* 1: per-head sink logits (case_reference makes them) */
} tcase;

/* The problems every ring test runs (N divisible by 2P for P = 1, 2, 4). */
static const tcase dist_cases[] = {
    /* dtype, layout, B, Hq, Hkv, N, d, causal, sharding, window_left, window_right, softcap, sinks
     */
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS, -1, -1, 0,
     0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 1, FLASHPORT_DIST_CONTIGUOUS, -1, -1, 0,
     0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, -1, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 2, 64, 32, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 4, 1, 96, 64, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 4, 2, 96, 64, 1, FLASHPORT_DIST_CONTIGUOUS, -1, -1, 0,
     0},
    {FLASHPORT_BF16, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 64, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0,
     0},
    {FLASHPORT_BF16, FLASHPORT_LAYOUT_BNHD, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS, -1, -1,
     0, 0},
    {FLASHPORT_F16, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 64, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0, 0},
    /* Windows on global positions: at P = 4 a shard is 16 rows, a zig-zag chunk 8. */
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS, 5, 3, 0,
     0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, 5, 3, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 2, 2, 64, 32, 1, FLASHPORT_DIST_ZIGZAG, 20, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 2, 1, 64, 32, 1, FLASHPORT_DIST_CONTIGUOUS, 3, 0, 0,
     0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS, 100, 70,
     0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, 17, -1, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, -1, 9, 0, 0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, 0, 0, 0, 0},
    {FLASHPORT_F16, FLASHPORT_LAYOUT_BNHD, 1, 2, 2, 64, 32, 1, FLASHPORT_DIST_CONTIGUOUS, 6, -1, 0,
     0},
    /* Softcap and sinks, alone and with a window */
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 32, 1, FLASHPORT_DIST_ZIGZAG, -1, -1, 0.5f,
     0},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 32, 1, FLASHPORT_DIST_CONTIGUOUS, -1, -1, 0,
     1},
    {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 4, 4, 64, 32, 0, FLASHPORT_DIST_ZIGZAG, 9, 2, 0, 1},
    {FLASHPORT_BF16, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 64, 0, FLASHPORT_DIST_ZIGZAG, 12, 4, 1.0f,
     1},
};
enum { DIST_CASES = sizeof dist_cases / sizeof dist_cases[0] };

static void case_name(const tcase *c, int ranks, char *out, size_t size) {
    char mods[96] = "";
    if (c->window_left >= 0 || c->window_right >= 0)
        snprintf(mods, sizeof mods, " window(%lld,%lld)", (long long)c->window_left,
                 (long long)c->window_right);
    if (c->softcap > 0)
        snprintf(mods + strlen(mods), sizeof mods - strlen(mods), " softcap %g", c->softcap);
    if (c->sinks) snprintf(mods + strlen(mods), sizeof mods - strlen(mods), " sinks");
    snprintf(out, size, "P=%d %s %s B=%lld Hq=%lld Hkv=%lld N=%lld d=%lld%s%s %s", ranks,
             flashport_dtype_name(c->dtype), c->layout == FLASHPORT_LAYOUT_BHND ? "bhnd" : "bnhd",
             (long long)c->batch, (long long)c->heads_q, (long long)c->heads_kv, (long long)c->seq,
             (long long)c->dim, c->causal ? " causal" : "", mods,
             c->sharding == FLASHPORT_DIST_ZIGZAG ? "zigzag" : "contiguous");
}

static float case_rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static float case_get(flashport_dtype dt, const void *p, int64_t i) {
    if (dt == FLASHPORT_BF16) return fp_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FLASHPORT_F16) return fp_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Element offset of (b, h, row) in a contiguous [B, H, N, d] tensor of either layout. */
static int64_t case_at(flashport_layout l, int64_t heads, int64_t n, int64_t dim, int64_t b,
                       int64_t h, int64_t i) {
    return l == FLASHPORT_LAYOUT_BHND ? ((b * heads + h) * n + i) * dim
                                      : ((b * n + i) * heads + h) * dim;
}

static void *case_tensor(const tcase *c, int64_t heads, uint64_t seed) {
    int64_t count = c->batch * heads * c->seq * c->dim;
    void *p = malloc((size_t)count * flashport_dtype_size(c->dtype));
    for (int64_t i = 0; i < count; i++) {
        float v = case_rnd(&seed);
        if (c->dtype == FLASHPORT_BF16)
            ((uint16_t *)p)[i] = fp_f32_to_bf16(v);
        else if (c->dtype == FLASHPORT_F16)
            ((uint16_t *)p)[i] = fp_f32_to_f16(v);
        else
            ((float *)p)[i] = v;
    }
    return p;
}

/* The distributed descriptor of a case on `ranks` ranks. */
static flashport_dist_desc case_desc(const tcase *c, int ranks) {
    flashport_dist_desc d;
    flashport_dist_desc_init(&d, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq / ranks,
                             c->seq, c->dim, c->layout);
    d.causal = c->causal;
    d.window_left = c->window_left;
    d.window_right = c->window_right;
    d.softcap = c->softcap;
    d.sharding = c->sharding;
    return d;
}

/* The whole-sequence attention descriptor of a case. */
static flashport_attention_desc case_full_desc(const tcase *c) {
    flashport_attention_desc ad;
    flashport_attention_desc_init(&ad, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq, c->seq,
                                  c->dim, c->layout);
    ad.causal = c->causal;
    ad.window_left = c->window_left;
    ad.window_right = c->window_right;
    ad.softcap = c->softcap;
    ad.sinks = c->sinks;
    return ad;
}

/* Rank `rank`'s rows of a global tensor. */
static void *case_shard(const tcase *c, const flashport_dist_desc *d, int rank, int ranks,
                        int64_t heads, const void *g) {
    size_t es = flashport_dtype_size(c->dtype);
    int64_t n = d->seq_local;
    char *out = malloc((size_t)(c->batch * heads * n * c->dim) * es);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < n; i++) {
                int64_t gi = flashport_dist_global_row(d, rank, ranks, i);
                memcpy(out + case_at(c->layout, heads, n, c->dim, b, h, i) * es,
                       (const char *)g + case_at(c->layout, heads, c->seq, c->dim, b, h, gi) * es,
                       (size_t)c->dim * es);
            }
    return out;
}

/* Adds rank `rank`'s squared error and squared reference to sums[0] and sums[1]. */
static void case_l2_sums(const tcase *c, const flashport_dist_desc *d, int rank, int ranks,
                         int64_t heads, const void *got, const void *ref, double sums[2]) {
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < d->seq_local; i++) {
                int64_t gi = flashport_dist_global_row(d, rank, ranks, i);
                int64_t lo = case_at(c->layout, heads, d->seq_local, c->dim, b, h, i);
                int64_t go = case_at(c->layout, heads, c->seq, c->dim, b, h, gi);
                for (int64_t e = 0; e < c->dim; e++) {
                    double x = case_get(c->dtype, got, lo + e), y = case_get(c->dtype, ref, go + e);
                    sums[0] += (x - y) * (x - y);
                    sums[1] += y * y;
                }
            }
}

static double case_rel_l2(const double sums[2]) {
    return sqrt(sums[0] / (sums[1] > 1e-30 ? sums[1] : 1e-30));
}

/* The worst relative LSE error of rank `rank`'s rows (NaN counts as worst). */
static double case_lse_err(const tcase *c, const flashport_dist_desc *d, int rank, int ranks,
                           const float *got, const float *ref) {
    double worst = 0;
    for (int64_t bh = 0; bh < c->batch * c->heads_q; bh++)
        for (int64_t i = 0; i < d->seq_local; i++) {
            double y = ref[bh * c->seq + flashport_dist_global_row(d, rank, ranks, i)];
            double e = fabs(got[bh * d->seq_local + i] - y) / (fabs(y) > 1 ? fabs(y) : 1);
            if (!(e <= worst)) worst = e;
        }
    return worst;
}

/* The whole-sequence forward (O, LSE) and backward (dQ, dK, dV) on ctx; returns the forward's
 * status. */
typedef struct case_ref {
    void *q, *k, *v, *d_o;
    void *o, *d_q, *d_k, *d_v;
    float *lse;
    float *sinks;              /* f32 [heads_q] with c->sinks, else NULL */
    flashport_status backward; /* the backward call's status (UNSUPPORTED: ctx has none) */
} case_ref;

static flashport_status case_reference(flashport_context *ctx, const tcase *c, case_ref *r) {
    size_t es = flashport_dtype_size(c->dtype);
    size_t qn = (size_t)(c->batch * c->heads_q * c->seq * c->dim);
    size_t kvn = (size_t)(c->batch * c->heads_kv * c->seq * c->dim);
    r->q = case_tensor(c, c->heads_q, 1), r->k = case_tensor(c, c->heads_kv, 2);
    r->v = case_tensor(c, c->heads_kv, 3), r->d_o = case_tensor(c, c->heads_q, 4);
    r->o = malloc(qn * es), r->d_q = malloc(qn * es);
    r->d_k = malloc(kvn * es), r->d_v = malloc(kvn * es);
    r->lse = malloc(sizeof(float) * (size_t)(c->batch * c->heads_q * c->seq));
    r->sinks = NULL;
    if (c->sinks) {
        /* about a row's LSE (log of its visible keys), so that the sink takes a real share */
        uint64_t seed = 5;
        r->sinks = malloc(sizeof(float) * (size_t)c->heads_q);
        for (int64_t h = 0; h < c->heads_q; h++) r->sinks[h] = 2.5f + 1.5f * case_rnd(&seed);
    }
    flashport_attention_desc ad = case_full_desc(c);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = r->q, a.k = r->k, a.v = r->v, a.o = r->o, a.lse = r->lse, a.sinks = r->sinks;
    flashport_status st = flashport_attention_run_host(ctx, &ad, &a);
    a.d_o = r->d_o, a.d_q = r->d_q, a.d_k = r->d_k, a.d_v = r->d_v;
    r->backward = st == FLASHPORT_OK ? flashport_attention_backward_host(ctx, &ad, &a) : st;
    return st;
}

/* Whether query row gi sees key row gj under the case's mask (global positions). */
/* What the ring must do, counted pair by pair: *steps, 1 + the last step (rank r holds the block
 * of rank r - step) at which any rank sees a key, and *skipped, the steps before it at which
 * rank `rank` sees none. */
static void case_ring(const flashport_dist_desc *d, int rank, int ranks, int *steps, int *skipped) {
    *steps = ring_steps(d, ranks);
    *skipped = 0;
    for (int step = 0; step < *steps; step++)
        *skipped += !rank_sees(d, rank, ranks, (rank - step + ranks) % ranks);
}

static void case_ref_free(case_ref *r) {
    void *p[] = {r->q, r->k, r->v, r->d_o, r->o, r->d_q, r->d_k, r->d_v, r->lse, r->sinks};
    for (int i = 0; i < 10; i++) free(p[i]);
}

#endif /* DIST_CASE_H */
