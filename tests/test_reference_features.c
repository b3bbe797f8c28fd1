/*
 * The reference backend's API v2 features against a model written here in another shape. The
 * test keeps every tensor as a dense logical array [batch, heads, longest sequence, d] and
 * scatters it into the layout a case asks for (strided with padded rows, packed by cu_seqlens
 * with rows outside every sequence, or a paged cache with shuffled pages and garbage past each
 * sequence's pages); the model reads only the logical arrays and materialises, per (batch,
 * head), the full score matrix, the visibility matrix and the normalised weight matrix, then
 * O = P V. Outputs are gathered back, and every byte of O and LSE that no row owns must keep
 * its sentinel.
 *
 * Random tiny problems cover each feature and their combinations (GQA, varlen, paged, window,
 * causal, softcap, ALiBi, bias, sinks, FP8 with both descale kinds, every output dtype, f64
 * inputs), and the test asserts that they did; then the edge cases, each also with a property of
 * its own.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp_fp8.h"
#include "fp_half.h"

enum { MAXB = 4, SENTINEL = 0xa5 };

static uint64_t rng = 0x243f6a8885a308d3ull;
static double uniform(void) { /* [0, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static int64_t pick(int64_t lo, int64_t hi) {
    return lo + (int64_t)(uniform() * (double)(hi - lo + 1));
}
static int chance(double p) { return uniform() < p; }

/* ---- values as the library stores and reads them ---- */

static int is_fp8(flashport_dtype t) { return t == FLASHPORT_FP8_E4M3 || t == FLASHPORT_FP8_E5M2; }

static double decode(flashport_dtype t, const unsigned char *p) {
    uint16_t h;
    float f;
    double x;
    switch (t) {
    case FLASHPORT_F64: memcpy(&x, p, 8); return x;
    case FLASHPORT_F32: memcpy(&f, p, 4); return f;
    case FLASHPORT_F16: memcpy(&h, p, 2); return fp_f16_to_f32(h);
    case FLASHPORT_BF16: memcpy(&h, p, 2); return fp_bf16_to_f32(h);
    case FLASHPORT_FP8_E4M3: return fp_e4m3_to_f32(*p);
    case FLASHPORT_FP8_E5M2: return fp_e5m2_to_f32(*p);
    }
    return NAN;
}

static void encode(flashport_dtype t, unsigned char *p, double x) {
    const float f = (float)x;
    uint16_t h;
    switch (t) {
    case FLASHPORT_F64: memcpy(p, &x, 8); break;
    case FLASHPORT_F32: memcpy(p, &f, 4); break;
    case FLASHPORT_F16: h = fp_f32_to_f16(f), memcpy(p, &h, 2); break;
    case FLASHPORT_BF16: h = fp_f32_to_bf16(f), memcpy(p, &h, 2); break;
    case FLASHPORT_FP8_E4M3: *p = fp_f32_to_e4m3(f); break;
    case FLASHPORT_FP8_E5M2: *p = fp_f32_to_e5m2(f); break;
    }
}

/* ---- a case ---- */

typedef struct shape {
    flashport_dtype dtype, out_dtype;
    int64_t batch, heads_q, heads_kv, head_dim;
    int64_t nq[MAXB], nkv[MAXB]; /* each sequence's lengths (all equal where dense) */
    int q_varlen;
    flashport_kv_layout kv_layout;
    flashport_layout layout; /* of strided tensors and of the pages */
    int64_t pad;             /* elements after each row of every tensor */
    int64_t page_size;
    int causal;
    int64_t window_left, window_right;
    float scale, softcap;
    flashport_alibi alibi;
    int bias;                /* 0, or 1 + the bias dtype */
    unsigned bias_broadcast; /* zero bias strides: 1 batch, 2 head, 4 query, 8 key */
    int sinks;
    flashport_descale descale;
    int64_t descale_block;
    int lse;
} shape;

static int64_t longest(const int64_t *n, int64_t batch) {
    int64_t m = 0;
    for (int64_t b = 0; b < batch; b++) m = n[b] > m ? n[b] : m;
    return m;
}

/* The logical values: Q [B, Hq, SQ, d], K and V [B, Hkv, SK, d] (SQ, SK the longest lengths)
 * as the stored bits; the bias buffer as given to the library; the f32 inputs. */
typedef struct data {
    int64_t sq, sk;
    unsigned char *q, *k, *v;
    unsigned char *bias;
    int64_t bias_stride[4], bias_elems;
    float slopes[MAXB * 8], sinks[8];
    float *qs, *ks, *vs; /* descales: one factor, or [B, H, ceil(seq / block)] */
} data;

static int64_t blocks(const shape *s, int64_t seq) {
    return s->descale == FLASHPORT_DESCALE_BLOCK ? (seq + s->descale_block - 1) / s->descale_block
                                                 : 1;
}

static void make_data(const shape *s, data *x) {
    const size_t es = flashport_dtype_size(s->dtype);
    x->sq = longest(s->nq, s->batch); /* the descriptor's seq_q and seq_kv */
    x->sk = longest(s->nkv, s->batch);
    const int64_t nq = s->batch * s->heads_q * x->sq * s->head_dim;
    const int64_t nk = s->batch * s->heads_kv * x->sk * s->head_dim;
    x->q = malloc(es * (size_t)nq + 1);
    x->k = malloc(es * (size_t)nk + 1);
    x->v = malloc(es * (size_t)nk + 1);
    for (int64_t e = 0; e < nq; e++) encode(s->dtype, x->q + e * es, 4.0 * uniform() - 2.0);
    for (int64_t e = 0; e < nk; e++) encode(s->dtype, x->k + e * es, 4.0 * uniform() - 2.0);
    for (int64_t e = 0; e < nk; e++) encode(s->dtype, x->v + e * es, 4.0 * uniform() - 2.0);
    for (int i = 0; i < MAXB * 8; i++) x->slopes[i] = (float)uniform();
    for (int i = 0; i < 8; i++)
        x->sinks[i] = chance(0.1) ? -INFINITY : (float)(4.0 * uniform() - 2.0);
    const int64_t nqs = s->batch * s->heads_q * blocks(s, x->sq);
    const int64_t nks = s->batch * s->heads_kv * blocks(s, x->sk);
    x->qs = malloc(sizeof(float) * (size_t)(nqs + 1));
    x->ks = malloc(sizeof(float) * (size_t)(nks + 1));
    x->vs = malloc(sizeof(float) * (size_t)(nks + 1));
    for (int64_t i = 0; i < nqs; i++) x->qs[i] = (float)(0.25 + 1.75 * uniform());
    for (int64_t i = 0; i < nks; i++) x->ks[i] = (float)(0.25 + 1.75 * uniform());
    for (int64_t i = 0; i < nks; i++) x->vs[i] = (float)(0.25 + 1.75 * uniform());
    /* Bias: compact [B, Hq, SQ, SK] strides with the broadcast ones zeroed; some -inf. */
    const int64_t n[4] = {s->batch, s->heads_q, x->sq, x->sk};
    int64_t stride = 1;
    x->bias_elems = 1;
    for (int dim = 3; dim >= 0; dim--) {
        x->bias_stride[dim] = s->bias_broadcast & (1u << dim) ? 0 : stride;
        if (!(s->bias_broadcast & (1u << dim))) stride *= n[dim];
        x->bias_elems += (n[dim] - 1) * x->bias_stride[dim];
    }
    for (int dim = 0; dim < 4; dim++)
        if (n[dim] == 0) x->bias_elems = 0; /* nothing is read */
    x->bias = NULL;
    if (s->bias) {
        const flashport_dtype bt = (flashport_dtype)(s->bias - 1);
        const size_t bs = flashport_dtype_size(bt);
        x->bias = malloc(bs * (size_t)x->bias_elems + 1);
        for (int64_t e = 0; e < x->bias_elems; e++)
            encode(bt, x->bias + e * bs, chance(0.08) ? -INFINITY : 4.0 * uniform() - 2.0);
    }
}

static void free_data(data *x) {
    free(x->q), free(x->k), free(x->v), free(x->bias), free(x->qs), free(x->ks), free(x->vs);
}

/* Logical element addresses. */
static int64_t lq(const shape *s, const data *x, int64_t b, int64_t h, int64_t i) {
    return ((b * s->heads_q + h) * x->sq + i) * s->head_dim;
}
static int64_t lkv(const shape *s, const data *x, int64_t b, int64_t h, int64_t j) {
    return ((b * s->heads_kv + h) * x->sk + j) * s->head_dim;
}

static double factor(const shape *s, const float *f, int64_t heads, int64_t seq, int64_t b,
                     int64_t h, int64_t pos) {
    if (!is_fp8(s->dtype)) return 1.0;
    if (s->descale == FLASHPORT_DESCALE_TENSOR) return f[0];
    return f[(b * heads + h) * blocks(s, seq) + pos / s->descale_block];
}

/* ---- the model: whole matrices per (batch, head) ---- */

typedef struct expected {
    long double *o;   /* [B, Hq, SQ, d] */
    long double *lse; /* [B, Hq, SQ] */
    int64_t masked_rows, nan_rows;
} expected;

static void model(const shape *s, const data *x, expected *r) {
    const int64_t d = s->head_dim, group = s->heads_q / s->heads_kv;
    const size_t es = flashport_dtype_size(s->dtype);
    const long double scale =
        s->scale != 0.0f ? s->scale : (float)(1.0 / sqrt((double)s->head_dim));
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t h = 0; h < s->heads_q; h++) {
            const int64_t nq = s->nq[b], nk = s->nkv[b], hk = h / group, a = nk - nq;
            long double *S = calloc((size_t)(nq * nk + 1), sizeof *S);
            long double *P = calloc((size_t)(nq * nk + 1), sizeof *P);
            char *vis = calloc((size_t)(nq * nk + 1), 1);
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++) {
                    const int64_t right = s->causal ? 0 : s->window_right;
                    vis[i * nk + j] = (s->window_left < 0 || j >= i + a - s->window_left) &&
                                      (right < 0 || j <= i + a + right);
                    long double dot = 0;
                    for (int64_t c = 0; c < d; c++)
                        dot += (long double)decode(s->dtype, x->q + (lq(s, x, b, h, i) + c) * es) *
                               factor(s, x->qs, s->heads_q, x->sq, b, h, i) *
                               decode(s->dtype, x->k + (lkv(s, x, b, hk, j) + c) * es) *
                               factor(s, x->ks, s->heads_kv, x->sk, b, hk, j);
                    long double sc = scale * dot;
                    if (s->softcap > 0) sc = s->softcap * tanhl(sc / s->softcap);
                    if (s->alibi)
                        sc -= x->slopes[s->alibi == FLASHPORT_ALIBI_PER_HEAD ? h
                                                                             : b * s->heads_q + h] *
                              fabsl((long double)(i + a - j));
                    if (s->bias) {
                        const flashport_dtype bt = (flashport_dtype)(s->bias - 1);
                        const int64_t *st = x->bias_stride;
                        sc += decode(bt, x->bias + (b * st[0] + h * st[1] + i * st[2] + j * st[3]) *
                                                       flashport_dtype_size(bt));
                    }
                    S[i * nk + j] = sc;
                }
            /* Softmax rows into P by the rules of flashport.h: a NaN score or sink, or a +inf
             * score (inf - inf), leaves the row undefined; no finite term, a denominator of 0. */
            for (int64_t i = 0; i < nq; i++) {
                const long double sink = s->sinks ? x->sinks[h] : -INFINITY;
                long double m = sink, z = 0;
                int undefined = isnan(sink);
                for (int64_t j = 0; j < nk; j++)
                    if (vis[i * nk + j]) {
                        const long double v = S[i * nk + j];
                        undefined |= isnan(v) || v == INFINITY;
                        if (v > m) m = v;
                    }
                if (m > -INFINITY) {
                    z = expl(sink - m);
                    for (int64_t j = 0; j < nk; j++)
                        if (vis[i * nk + j]) z += expl(S[i * nk + j] - m);
                }
                for (int64_t j = 0; j < nk; j++)
                    P[i * nk + j] = z > 0 ? expl(S[i * nk + j] - m) / z : 0;
                long double *lse = &r->lse[(b * s->heads_q + h) * x->sq + i];
                *lse = undefined ? NAN : z > 0 ? m + logl(z) : -INFINITY;
                r->masked_rows += !undefined && z == 0;
                r->nan_rows += undefined;
                /* O = P V over the visible keys (0 * NaN is NaN: a visible NaN value always
                 * reaches O); an undefined row is NaN throughout. */
                for (int64_t c = 0; c < d; c++) {
                    long double acc = 0;
                    for (int64_t j = 0; j < nk; j++)
                        if (vis[i * nk + j])
                            acc += P[i * nk + j] *
                                   ((long double)decode(s->dtype,
                                                        x->v + (lkv(s, x, b, hk, j) + c) * es) *
                                    factor(s, x->vs, s->heads_kv, x->sk, b, hk, j));
                    r->o[lq(s, x, b, h, i) + c] = undefined ? NAN : acc;
                }
            }
            free(S), free(P), free(vis);
        }
}

/* ---- the layout a case asks for, the call, and the outputs gathered back ---- */

static flashport_strides strides(flashport_layout l, int64_t heads, int64_t n, int64_t row) {
    if (l == FLASHPORT_LAYOUT_BHND) return (flashport_strides){heads * n * row, n * row, row};
    return (flashport_strides){n * heads * row, row, heads * row};
}

/* Elements a tensor of [n0, heads, n, d] reaches by its strides. */
static int64_t extent(int64_t n0, int64_t heads, int64_t n, int64_t d, flashport_strides st) {
    if (!n0 || !n) return 0;
    return 1 + (n0 - 1) * st.batch + (heads - 1) * st.head + (n - 1) * st.seq + (d - 1);
}

typedef struct placed {
    flashport_attention_desc desc;
    int32_t cu_q[MAXB + 1], cu_kv[MAXB + 1], lens[MAXB], *table;
    unsigned char *q, *k, *v, *o;
    float *lse;
    int64_t q_elems, k_elems, v_elems, o_elems, lse_elems;
} placed;

/* First element of row (b, h, i) of a Q-shaped tensor, or of key row (b, hk, j). */
static int64_t q_at(const placed *p, const flashport_strides *st, int64_t b, int64_t h, int64_t i) {
    if (p->desc.q_varlen) return (p->cu_q[b] + i) * st->seq + h * st->head;
    return b * st->batch + h * st->head + i * st->seq;
}
static int64_t kv_at(const placed *p, const flashport_strides *st, int64_t b, int64_t h,
                     int64_t j) {
    const flashport_attention_desc *d = &p->desc;
    if (d->kv_layout == FLASHPORT_KV_VARLEN) return (p->cu_kv[b] + j) * st->seq + h * st->head;
    if (d->kv_layout == FLASHPORT_KV_PAGED) {
        const int64_t page = p->table[b * d->max_pages_per_seq + j / d->page_size];
        return page * st->batch + (j % d->page_size) * st->seq + h * st->head;
    }
    return b * st->batch + h * st->head + j * st->seq;
}

/* Packed offsets, with up to two rows no sequence owns before the first one and after the last. */
static int64_t pack(const int64_t *n, int64_t batch, int32_t *cu) {
    cu[0] = (int32_t)pick(0, 2);
    for (int64_t b = 0; b < batch; b++) cu[b + 1] = cu[b] + (int32_t)n[b];
    return cu[batch] + pick(0, 2);
}

/* A buffer of n elements of dtype t, every one NaN: a read of anything the case does not place
 * there turns up as a NaN where the model has none. */
static unsigned char *nan_filled(flashport_dtype t, int64_t n) {
    const size_t es = flashport_dtype_size(t);
    unsigned char *p = malloc(es * (size_t)n + 1);
    for (int64_t e = 0; e < n; e++) encode(t, p + e * es, NAN);
    return p;
}

static void place(const shape *s, const data *x, placed *p) {
    flashport_attention_desc *d = &p->desc;
    const int64_t B = s->batch, D = s->head_dim, row = D + s->pad;
    flashport_attention_desc_init(d, s->dtype, B, s->heads_q, s->heads_kv, x->sq, x->sk, D,
                                  s->layout);
    d->out_dtype = s->out_dtype;
    d->scale = s->scale;
    d->causal = s->causal;
    d->window_left = s->window_left;
    d->window_right = s->window_right;
    d->softcap = s->softcap;
    d->alibi = s->alibi;
    if (s->bias)
        d->bias = (flashport_bias_desc){1,
                                        (flashport_dtype)(s->bias - 1),
                                        x->bias_stride[0],
                                        x->bias_stride[1],
                                        x->bias_stride[2],
                                        x->bias_stride[3]};
    d->sinks = s->sinks;
    d->descale = s->descale;
    d->descale_block = s->descale == FLASHPORT_DESCALE_BLOCK ? s->descale_block : 0;

    /* Q and O (O rows one element wider than Q's, so that mixing their strides shows). */
    int64_t rows_q = x->sq, n0 = B;
    if (s->q_varlen) {
        rows_q = pack(s->nq, B, p->cu_q);
        n0 = 1;
        d->q_varlen = 1;
        d->total_q = rows_q;
        d->q = strides(FLASHPORT_LAYOUT_BNHD, s->heads_q, rows_q, row);
        d->o = strides(FLASHPORT_LAYOUT_BNHD, s->heads_q, rows_q, row + 1);
        d->q.batch = d->o.batch = 0;
    } else {
        d->q = strides(s->layout, s->heads_q, x->sq, row);
        d->o = strides(s->layout, s->heads_q, x->sq, row + 1);
    }
    p->q_elems = extent(n0, s->heads_q, rows_q, D, d->q);
    p->o_elems = extent(n0, s->heads_q, rows_q, D, d->o);
    p->lse_elems = s->q_varlen ? s->heads_q * rows_q : B * s->heads_q * x->sq;

    /* K and V (V rows two elements wider than K's). */
    p->table = NULL;
    int64_t rows_kv = x->sk, kv0 = B;
    if (s->kv_layout == FLASHPORT_KV_VARLEN) {
        rows_kv = pack(s->nkv, B, p->cu_kv);
        kv0 = 1;
        d->kv_layout = FLASHPORT_KV_VARLEN;
        d->total_kv = rows_kv;
        d->k = strides(FLASHPORT_LAYOUT_BNHD, s->heads_kv, rows_kv, row);
        d->v = strides(FLASHPORT_LAYOUT_BNHD, s->heads_kv, rows_kv, row + 2);
        d->k.batch = d->v.batch = 0;
    } else if (s->kv_layout == FLASHPORT_KV_PAGED) {
        const int64_t ps = s->page_size;
        int64_t used = 0, most = 1;
        for (int64_t b = 0; b < B; b++) {
            const int64_t need = (s->nkv[b] + ps - 1) / ps;
            used += need;
            most = need > most ? need : most;
        }
        const int64_t max_pages = most + pick(0, 1), num_pages = used + pick(1, 2);
        /* Pages in a shuffled order; table entries past a sequence's pages are garbage. */
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)num_pages);
        for (int64_t i = 0; i < num_pages; i++) perm[i] = i;
        for (int64_t i = num_pages - 1; i > 0; i--) {
            const int64_t j = pick(0, i), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        p->table = malloc(sizeof(int32_t) * (size_t)(B * max_pages));
        for (int64_t b = 0, next = 0; b < B; b++) {
            p->lens[b] = (int32_t)s->nkv[b];
            for (int64_t i = 0; i < max_pages; i++) {
                const int owned = i < (s->nkv[b] + ps - 1) / ps;
                const int32_t garbage = chance(0.5) ? -7 : (int32_t)(num_pages + 50);
                p->table[b * max_pages + i] = owned ? (int32_t)perm[next++] : garbage;
            }
        }
        free(perm);
        flashport_attention_desc_set_paged(d, num_pages, ps, max_pages, s->layout);
        d->seq_kv = x->sk;
        d->v = strides(s->layout, s->heads_kv, ps, row + 2);
        d->k = strides(s->layout, s->heads_kv, ps, row);
        rows_kv = ps;
        kv0 = num_pages;
    } else {
        d->k = strides(s->layout, s->heads_kv, x->sk, row);
        d->v = strides(s->layout, s->heads_kv, x->sk, row + 2);
    }
    p->k_elems = extent(kv0, s->heads_kv, rows_kv, D, d->k);
    p->v_elems = extent(kv0, s->heads_kv, rows_kv, D, d->v);

    /* Scatter the logical values. */
    const size_t es = flashport_dtype_size(s->dtype);
    p->q = nan_filled(s->dtype, p->q_elems);
    p->k = nan_filled(s->dtype, p->k_elems);
    p->v = nan_filled(s->dtype, p->v_elems);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < s->heads_q; h++)
            for (int64_t i = 0; i < s->nq[b]; i++)
                memcpy(p->q + q_at(p, &d->q, b, h, i) * es, x->q + lq(s, x, b, h, i) * es, es * D);
        for (int64_t h = 0; h < s->heads_kv; h++)
            for (int64_t j = 0; j < s->nkv[b]; j++) {
                memcpy(p->k + kv_at(p, &d->k, b, h, j) * es, x->k + lkv(s, x, b, h, j) * es,
                       es * D);
                memcpy(p->v + kv_at(p, &d->v, b, h, j) * es, x->v + lkv(s, x, b, h, j) * es,
                       es * D);
            }
    }
    const size_t os = flashport_dtype_size(s->out_dtype);
    p->o = malloc(os * (size_t)p->o_elems + 1);
    memset(p->o, SENTINEL, os * (size_t)p->o_elems + 1);
    p->lse = malloc(sizeof(float) * (size_t)p->lse_elems + 1);
    memset(p->lse, SENTINEL, sizeof(float) * (size_t)p->lse_elems + 1);
}

static void free_placed(placed *p) {
    free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse), free(p->table);
}

typedef struct result {
    double *o;     /* [B, Hq, SQ, d], as the logical Q */
    double *lse;   /* [B, Hq, SQ] */
    int untouched; /* every byte of O and LSE no row owns kept its sentinel */
} result;

/* Runs the case on the reference backend and gathers O and LSE. */
static flashport_status run(flashport_context *ctx, const shape *s, const data *x, result *r) {
    placed p;
    place(s, x, &p);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = p.q, a.k = p.k, a.v = p.v, a.o = p.o;
    a.lse = s->lse ? p.lse : NULL;
    a.sinks = s->sinks ? x->sinks : NULL;
    a.alibi_slopes = s->alibi ? x->slopes : NULL;
    a.bias = x->bias;
    a.cu_seqlens_q = s->q_varlen ? p.cu_q : NULL;
    a.cu_seqlens_kv = s->kv_layout == FLASHPORT_KV_VARLEN ? p.cu_kv : NULL;
    a.seqlens_kv = s->kv_layout == FLASHPORT_KV_PAGED ? p.lens : NULL;
    a.block_table = p.table;
    if (is_fp8(s->dtype)) a.q_descale = x->qs, a.k_descale = x->ks, a.v_descale = x->vs;
    const flashport_status st = flashport_attention_run_host(ctx, &p.desc, &a);

    const size_t os = flashport_dtype_size(s->out_dtype);
    const int64_t rows = s->batch * s->heads_q * x->sq;
    r->o = calloc((size_t)(rows * s->head_dim + 1), sizeof(double));
    r->lse = calloc((size_t)rows + 1, sizeof(double));
    char *owned_o = calloc((size_t)p.o_elems + 1, 1), *owned_l = calloc((size_t)p.lse_elems + 1, 1);
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t h = 0; h < s->heads_q; h++)
            for (int64_t i = 0; i < s->nq[b]; i++) {
                const int64_t o0 = q_at(&p, &p.desc.o, b, h, i);
                for (int64_t c = 0; c < s->head_dim; c++) {
                    r->o[lq(s, x, b, h, i) + c] = decode(s->out_dtype, p.o + (o0 + c) * os);
                    owned_o[o0 + c] = 1;
                }
                const int64_t l = s->q_varlen ? h * p.desc.total_q + p.cu_q[b] + i
                                              : (b * s->heads_q + h) * x->sq + i;
                r->lse[(b * s->heads_q + h) * x->sq + i] = p.lse[l];
                owned_l[l] = s->lse;
            }
    r->untouched = 1;
    for (int64_t e = 0; e < p.o_elems * (int64_t)os; e++)
        r->untouched &= owned_o[e / (int64_t)os] || p.o[e] == SENTINEL;
    for (int64_t e = 0; e < p.lse_elems * 4; e++)
        r->untouched &= owned_l[e / 4] || ((unsigned char *)p.lse)[e] == SENTINEL;
    free(owned_o), free(owned_l);
    free_placed(&p);
    return st;
}

static void free_result(result *r) { free(r->o), free(r->lse); }

/* ---- comparison ---- */

/* Twice the largest relative rounding error of the output dtype: the reference rounds its
 * double result once to it (through float32), the model does not round at all. */
static double out_tolerance(flashport_dtype t) {
    if (t == FLASHPORT_F64) return 0x1p-40; /* no rounding: the double arithmetic's own error */
    return t == FLASHPORT_F32 ? 0x1p-23 : t == FLASHPORT_F16 ? 0x1p-10 : 0x1p-7;
}

static int same(double got, long double want, double tol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == (double)want;
    return fabs(got - (double)want) <= tol;
}

/* Counts the elements of O and LSE that differ from the model. */
static int64_t mismatches(const shape *s, const data *x, const expected *e, const result *r,
                          const char *what) {
    const size_t es = flashport_dtype_size(s->dtype);
    double vmax = 0.0;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t h = 0; h < s->heads_kv; h++)
            for (int64_t j = 0; j < s->nkv[b]; j++)
                for (int64_t c = 0; c < s->head_dim; c++) {
                    const double v = fabs(decode(s->dtype, x->v + (lkv(s, x, b, h, j) + c) * es) *
                                          factor(s, x->vs, s->heads_kv, x->sk, b, h, j));
                    if (v > vmax && isfinite(v)) vmax = v;
                }
    const double rel = out_tolerance(s->out_dtype);
    const double floor = 1e-12 * vmax + (s->out_dtype == FLASHPORT_F16 ? 0x1p-24 : 0.0);
    int64_t bad = 0;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t h = 0; h < s->heads_q; h++)
            for (int64_t i = 0; i < s->nq[b]; i++) {
                const int64_t row = (b * s->heads_q + h) * x->sq + i;
                for (int64_t c = 0; c < s->head_dim; c++) {
                    const long double want = e->o[lq(s, x, b, h, i) + c];
                    const double got = r->o[lq(s, x, b, h, i) + c];
                    if (!same(got, want, rel * fabs((double)want) + floor)) {
                        if (bad < 3)
                            fprintf(stderr,
                                    "%s: O[b=%lld h=%lld i=%lld c=%lld] = %.9g, model %.9Lg\n",
                                    what, (long long)b, (long long)h, (long long)i, (long long)c,
                                    got, want);
                        bad++;
                    }
                }
                if (s->lse &&
                    !same(r->lse[row], e->lse[row], 0x1p-23 * fabsl(e->lse[row]) + 1e-12)) {
                    if (bad < 3)
                        fprintf(stderr, "%s: LSE[b=%lld h=%lld i=%lld] = %.9g, model %.9Lg\n", what,
                                (long long)b, (long long)h, (long long)i, r->lse[row], e->lse[row]);
                    bad++;
                }
            }
    return bad;
}

typedef struct outcome {
    result got;
    expected want;
} outcome;

/* Runs a case, checks it against the model, and keeps both for further assertions. */
static void check_case(flashport_context *ctx, const shape *s, const data *x, outcome *out,
                       const char *what) {
    const int64_t rows = s->batch * s->heads_q * x->sq;
    out->want = (expected){calloc((size_t)(rows * s->head_dim + 1), sizeof(long double)),
                           calloc((size_t)rows + 1, sizeof(long double)), 0, 0};
    model(s, x, &out->want);
    const flashport_status st = run(ctx, s, x, &out->got);
    if (st != FLASHPORT_OK) fprintf(stderr, "%s: %s\n", what, flashport_last_error());
    CHECK(st == FLASHPORT_OK);
    CHECK(out->got.untouched);
    CHECK(mismatches(s, x, &out->want, &out->got, what) == 0);
}

static void free_outcome(outcome *o) {
    free_result(&o->got);
    free(o->want.o), free(o->want.lse);
}

/* ---- random cases and what they covered ---- */

enum {
    F_WINDOW,
    F_CAUSAL,
    F_SOFTCAP,
    F_ALIBI,
    F_BIAS,
    F_SINKS,
    F_VARLEN,
    F_PAGED,
    F_FP8,
    F_GQA,
    NF
};
static const char *const feature_names[NF] = {"window", "causal", "softcap", "ALiBi", "bias",
                                              "sinks",  "varlen", "paged",   "FP8",   "GQA"};

static shape random_shape(void) {
    static const flashport_dtype dtypes[] = {FLASHPORT_F32,      FLASHPORT_F16,      FLASHPORT_BF16,
                                             FLASHPORT_FP8_E4M3, FLASHPORT_FP8_E5M2, FLASHPORT_F64};
    shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dtypes[pick(0, 5)];
    s.out_dtype = is_fp8(s.dtype) ? dtypes[pick(0, 2)] : s.dtype;
    s.batch = pick(1, MAXB);
    s.heads_kv = pick(1, 2);
    s.heads_q = s.heads_kv * pick(1, 3);
    s.head_dim = pick(1, 6);
    s.q_varlen = chance(0.4);
    s.kv_layout = s.q_varlen ? (chance(0.5) ? FLASHPORT_KV_VARLEN : FLASHPORT_KV_PAGED)
                             : (chance(0.35) ? FLASHPORT_KV_PAGED : FLASHPORT_KV_DENSE);
    const int64_t nq = pick(1, 5), nkv = pick(1, 7);
    for (int64_t b = 0; b < s.batch; b++) {
        s.nq[b] = s.q_varlen ? pick(0, 5) : nq;
        s.nkv[b] = s.kv_layout == FLASHPORT_KV_DENSE ? nkv : pick(0, 7);
    }
    s.layout = chance(0.5) ? FLASHPORT_LAYOUT_BHND : FLASHPORT_LAYOUT_BNHD;
    s.pad = pick(0, 2);
    s.page_size = pick(1, 4);
    s.window_left = s.window_right = -1;
    const double mask = uniform();
    if (mask < 0.25) {
        s.causal = 1;
        if (chance(0.3)) s.window_left = pick(0, 4); /* causal with a left window */
        if (chance(0.3)) s.window_right = 0;
    } else if (mask < 0.6) {
        s.window_left = chance(0.3) ? -1 : pick(0, 8);
        s.window_right = chance(0.3) ? -1 : pick(0, 8);
    }
    s.scale = chance(0.5) ? 0.0f : (float)(0.2 + uniform());
    s.softcap = chance(0.35) ? (float)(0.5 + 3.0 * uniform()) : 0.0f;
    s.alibi = chance(0.35) ? (flashport_alibi)pick(1, 2) : FLASHPORT_ALIBI_NONE;
    s.bias = chance(0.35) ? 1 + (int)pick(0, 2) : 0;
    /* f64 inputs take an f32 or f64 bias */
    if (s.bias && s.dtype == FLASHPORT_F64)
        s.bias = 1 + (chance(0.5) ? FLASHPORT_F32 : FLASHPORT_F64);
    s.bias_broadcast = (unsigned)pick(0, 15);
    s.sinks = chance(0.35);
    if (is_fp8(s.dtype)) {
        s.descale = chance(0.5) ? FLASHPORT_DESCALE_TENSOR : FLASHPORT_DESCALE_BLOCK;
        s.descale_block = pick(1, 3);
    }
    s.lse = chance(0.85);
    return s;
}

static unsigned features_of(const shape *s) {
    unsigned f = 0;
    f |= (unsigned)(s->window_left >= 0 || (!s->causal && s->window_right >= 0)) << F_WINDOW;
    f |= (unsigned)s->causal << F_CAUSAL;
    f |= (unsigned)(s->softcap > 0) << F_SOFTCAP;
    f |= (unsigned)(s->alibi != FLASHPORT_ALIBI_NONE) << F_ALIBI;
    f |= (unsigned)(s->bias != 0) << F_BIAS;
    f |= (unsigned)s->sinks << F_SINKS;
    f |= (unsigned)s->q_varlen << F_VARLEN;
    f |= (unsigned)(s->kv_layout == FLASHPORT_KV_PAGED) << F_PAGED;
    f |= (unsigned)is_fp8(s->dtype) << F_FP8;
    f |= (unsigned)(s->heads_q > s->heads_kv) << F_GQA;
    return f;
}

static void random_cases(flashport_context *ctx, int count) {
    int pairs[NF][NF] = {{0}};
    int64_t masked_rows = 0, empty_sequences = 0, failed = 0, f64_cases = 0;
    for (int n = 0; n < count; n++) {
        const shape s = random_shape();
        data x;
        make_data(&s, &x);
        char what[64];
        snprintf(what, sizeof what, "random case %d", n);
        outcome o;
        const int before = check_failures;
        check_case(ctx, &s, &x, &o, what);
        if (check_failures != before) {
            fprintf(stderr,
                    "  %s: %s->%s B=%lld Hq=%lld Hkv=%lld d=%lld varlen=%d kv=%d page=%lld "
                    "causal=%d window=%lld/%lld softcap=%g alibi=%d bias=%d/%u sinks=%d "
                    "descale=%d/%lld\n",
                    what, flashport_dtype_name(s.dtype), flashport_dtype_name(s.out_dtype),
                    (long long)s.batch, (long long)s.heads_q, (long long)s.heads_kv,
                    (long long)s.head_dim, s.q_varlen, (int)s.kv_layout, (long long)s.page_size,
                    s.causal, (long long)s.window_left, (long long)s.window_right,
                    (double)s.softcap, (int)s.alibi, s.bias, s.bias_broadcast, s.sinks,
                    (int)s.descale, (long long)s.descale_block);
            failed++;
        }
        const unsigned f = features_of(&s);
        for (int a = 0; a < NF; a++)
            for (int b = 0; b < NF; b++) pairs[a][b] += (f >> a & 1u) && (f >> b & 1u);
        masked_rows += o.want.masked_rows;
        for (int64_t b = 0; b < s.batch; b++) empty_sequences += s.nq[b] == 0 || s.nkv[b] == 0;
        f64_cases += s.dtype == FLASHPORT_F64;
        CHECK(o.want.nan_rows == 0);
        free_outcome(&o);
        free_data(&x);
    }
    /* The generator must keep covering every feature and every pair of them. */
    for (int a = 0; a < NF; a++)
        for (int b = a; b < NF; b++) {
            if (pairs[a][b] < 10)
                fprintf(stderr, "random cases: %s with %s only %d times\n", feature_names[a],
                        feature_names[b], pairs[a][b]);
            CHECK(pairs[a][b] >= 10);
        }
    CHECK(masked_rows > 0 && empty_sequences > 0 && f64_cases >= 50);
    printf("random cases: %d, %lld failed; %lld fully masked rows, %lld empty sequences, %lld in "
           "f64\n",
           count, (long long)failed, (long long)masked_rows, (long long)empty_sequences,
           (long long)f64_cases);
}

/* ---- edge cases ---- */

static shape plain(flashport_dtype dtype, int64_t batch, int64_t heads_q, int64_t heads_kv,
                   int64_t nq, int64_t nkv, int64_t d) {
    shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dtype;
    s.out_dtype = is_fp8(dtype) ? FLASHPORT_F32 : dtype;
    s.descale = is_fp8(dtype) ? FLASHPORT_DESCALE_TENSOR : FLASHPORT_DESCALE_NONE;
    s.batch = batch, s.heads_q = heads_q, s.heads_kv = heads_kv, s.head_dim = d;
    for (int64_t b = 0; b < batch; b++) s.nq[b] = nq, s.nkv[b] = nkv;
    s.layout = FLASHPORT_LAYOUT_BNHD;
    s.window_left = s.window_right = -1;
    s.lse = 1;
    return s;
}

static int64_t elems_q(const shape *s, const data *x) {
    return s->batch * s->heads_q * x->sq * s->head_dim;
}
static int64_t elems_kv(const shape *s, const data *x) {
    return s->batch * s->heads_kv * x->sk * s->head_dim;
}

/* Paged with one key per page, pages shuffled: the same bits as the dense problem. */
static void edge_pages_of_one(flashport_context *ctx) {
    shape s = plain(FLASHPORT_F32, 2, 4, 2, 3, 6, 5);
    s.causal = 1;
    s.softcap = 2.0f;
    data x;
    make_data(&s, &x);
    outcome dense, paged;
    check_case(ctx, &s, &x, &dense, "dense for page_size 1");
    shape p = s;
    p.kv_layout = FLASHPORT_KV_PAGED;
    p.page_size = 1;
    check_case(ctx, &p, &x, &paged, "page_size 1");
    const size_t n = (size_t)(s.batch * s.heads_q * x.sq);
    CHECK(memcmp(dense.got.o, paged.got.o, n * (size_t)s.head_dim * sizeof(double)) == 0);
    CHECK(memcmp(dense.got.lse, paged.got.lse, n * sizeof(double)) == 0);
    free_outcome(&dense), free_outcome(&paged), free_data(&x);
}

/* Varlen and paged batches with empty sequences: queries with no keys get O = 0, LSE = -inf. */
static void edge_empty_sequences(flashport_context *ctx) {
    static const int64_t nq[MAXB] = {0, 3, 0, 2}, nkv[MAXB] = {2, 0, 0, 4};
    for (int paged = 0; paged < 2; paged++) {
        shape s = plain(FLASHPORT_BF16, MAXB, 2, 1, 0, 0, 3);
        s.q_varlen = 1;
        s.kv_layout = paged ? FLASHPORT_KV_PAGED : FLASHPORT_KV_VARLEN;
        s.page_size = 3;
        memcpy(s.nq, nq, sizeof nq), memcpy(s.nkv, nkv, sizeof nkv);
        data x;
        make_data(&s, &x);
        outcome o;
        check_case(ctx, &s, &x, &o, paged ? "paged, empty sequences" : "varlen, empty sequences");
        int keyless = 1;
        for (int64_t h = 0; h < s.heads_q; h++)
            for (int64_t i = 0; i < nq[1]; i++) {
                keyless &= o.got.lse[(1 * s.heads_q + h) * x.sq + i] == -INFINITY;
                for (int64_t c = 0; c < s.head_dim; c++)
                    keyless &= o.got.o[lq(&s, &x, 1, h, i) + c] == 0.0;
            }
        CHECK(keyless);
        free_outcome(&o), free_data(&x);
    }
}

/* A window wider than the sequence is no window; a window of 0 keeps only the aligned diagonal,
 * so each row is exactly the V row there (or O = 0, LSE = -inf where that key does not exist). */
static void edge_windows(flashport_context *ctx) {
    shape s = plain(FLASHPORT_F32, 1, 2, 1, 6, 4, 3);
    s.alibi = FLASHPORT_ALIBI_PER_HEAD;
    data x;
    make_data(&s, &x);
    outcome none, wide, zero;
    check_case(ctx, &s, &x, &none, "no window");
    shape w = s;
    w.window_left = w.window_right = 1000;
    check_case(ctx, &w, &x, &wide, "window wider than N");
    const size_t n = (size_t)(s.heads_q * x.sq);
    CHECK(memcmp(none.got.o, wide.got.o, n * (size_t)s.head_dim * sizeof(double)) == 0);
    CHECK(memcmp(none.got.lse, wide.got.lse, n * sizeof(double)) == 0);
    w.window_left = w.window_right = 0;
    check_case(ctx, &w, &x, &zero, "window 0");
    int diagonal = 1;
    for (int64_t h = 0; h < s.heads_q; h++)
        for (int64_t i = 0; i < s.nq[0]; i++) {
            const int64_t j = i + s.nkv[0] - s.nq[0];
            for (int64_t c = 0; c < s.head_dim; c++) {
                const double v =
                    j >= 0 ? decode(s.dtype, x.v + (lkv(&s, &x, 0, 0, j) + c) * 4) : 0.0;
                diagonal &= zero.got.o[lq(&s, &x, 0, h, i) + c] == v;
            }
            if (j < 0) diagonal &= zero.got.lse[h * x.sq + i] == -INFINITY;
        }
    CHECK(diagonal);
    free_outcome(&none), free_outcome(&wide), free_outcome(&zero), free_data(&x);
}

/* A -inf bias on every key: O = 0 and LSE = -inf, or LSE = the sink with sinks. */
static void edge_all_masked(flashport_context *ctx) {
    for (int sinks = 0; sinks < 2; sinks++) {
        shape s = plain(FLASHPORT_F16, 2, 2, 2, 3, 5, 4);
        s.bias = 1 + FLASHPORT_BF16;
        s.bias_broadcast = 15; /* one element for everything */
        s.sinks = sinks;
        data x;
        make_data(&s, &x);
        encode(FLASHPORT_BF16, x.bias, -INFINITY);
        x.sinks[0] = 0.75f, x.sinks[1] = -3.5f;
        outcome o;
        check_case(ctx, &s, &x, &o, sinks ? "all masked, sinks" : "all masked");
        int rule = 1;
        for (int64_t b = 0; b < s.batch; b++)
            for (int64_t h = 0; h < s.heads_q; h++)
                for (int64_t i = 0; i < s.nq[b]; i++) {
                    rule &= o.got.lse[(b * s.heads_q + h) * x.sq + i] ==
                            (sinks ? (double)x.sinks[h] : -INFINITY);
                    for (int64_t c = 0; c < s.head_dim; c++)
                        rule &= o.got.o[lq(&s, &x, b, h, i) + c] == 0.0;
                }
        CHECK(rule);
        CHECK(o.want.masked_rows == (sinks ? 0 : s.batch * s.heads_q * s.nq[0]));
        free_outcome(&o), free_data(&x);
    }
}

/* Logits in the thousands under a softcap of 15: the capped scores stay in (-15, 15). */
static void edge_softcap_large(flashport_context *ctx) {
    shape s = plain(FLASHPORT_F32, 1, 2, 1, 4, 6, 4);
    s.scale = 1.0f;
    s.softcap = 15.0f;
    s.sinks = 1;
    data x;
    make_data(&s, &x);
    for (int64_t e = 0; e < elems_q(&s, &x); e++)
        encode(s.dtype, x.q + 4 * e, chance(0.5) ? 40.0 : -40.0);
    for (int64_t e = 0; e < elems_kv(&s, &x); e++)
        encode(s.dtype, x.k + 4 * e, chance(0.5) ? 40.0 : -40.0);
    outcome o;
    check_case(ctx, &s, &x, &o, "softcap, logits in the thousands");
    int bounded = 1;
    for (int64_t r = 0; r < s.heads_q * x.sq; r++)
        bounded &= isfinite(o.got.lse[r]) && o.got.lse[r] < 15.0 + log(7.0);
    CHECK(bounded);
    free_outcome(&o), free_data(&x);
}

/* FP8 inputs at the format's largest magnitude, both signs. */
static void edge_fp8_max(flashport_context *ctx) {
    const struct {
        flashport_dtype dtype, out;
        uint8_t max;
        double value;
    } formats[] = {{FLASHPORT_FP8_E4M3, FLASHPORT_F32, 0x7e, 448.0},
                   {FLASHPORT_FP8_E5M2, FLASHPORT_BF16, 0x7b, 57344.0}};
    for (int f = 0; f < 2; f++) {
        shape s = plain(formats[f].dtype, 2, 2, 1, 3, 4, 4);
        s.out_dtype = formats[f].out;
        data x;
        make_data(&s, &x);
        x.qs[0] = x.ks[0] = x.vs[0] = 1.0f;
        unsigned char *t[3] = {x.q, x.k, x.v};
        for (int i = 0; i < 3; i++)
            for (int64_t e = 0; e < (i ? elems_kv(&s, &x) : elems_q(&s, &x)); e++)
                t[i][e] = (uint8_t)(formats[f].max | (chance(0.5) ? 0x80 : 0));
        outcome o;
        check_case(ctx, &s, &x, &o, "FP8 at the format's max");
        int bounded = 1;
        for (int64_t e = 0; e < elems_q(&s, &x); e++)
            bounded &= fabs(o.got.o[e]) <= formats[f].value;
        CHECK(bounded);
        free_outcome(&o), free_data(&x);
    }
}

/* FP8 NaN codes: in K, every row that sees the key is NaN (O and LSE) and no other row; in V,
 * only the O elements of that column in the rows that see the key. */
static void edge_fp8_nan(flashport_context *ctx) {
    for (int in_v = 0; in_v < 2; in_v++) {
        shape s = plain(in_v ? FLASHPORT_FP8_E5M2 : FLASHPORT_FP8_E4M3, 1, 4, 2, 5, 5, 3);
        s.causal = 1;
        data x;
        make_data(&s, &x);
        const int64_t hk = in_v, key = in_v ? 1 : 2, col = in_v ? 0 : 1;
        (in_v ? x.v : x.k)[lkv(&s, &x, 0, hk, key) + col] = in_v ? 0x7e : 0x7f;
        outcome o;
        check_case(ctx, &s, &x, &o, in_v ? "e5m2 NaN in V" : "e4m3 NaN in K");
        int confined = 1;
        for (int64_t h = 0; h < s.heads_q; h++)
            for (int64_t i = 0; i < s.nq[0]; i++) {
                const int sees = h / 2 == hk && i >= key;
                confined &= !!isnan(o.got.lse[h * x.sq + i]) == (sees && !in_v);
                for (int64_t c = 0; c < s.head_dim; c++)
                    confined &=
                        !!isnan(o.got.o[lq(&s, &x, 0, h, i) + c]) == (sees && (!in_v || c == col));
            }
        CHECK(confined);
        CHECK(o.want.nan_rows == (in_v ? 0 : 2 * 3));
        free_outcome(&o), free_data(&x);
    }
}

/* Descale 0: Q's makes every score 0, so each row is the mean of its visible V rows and its LSE
 * the log of their count; V's makes O exactly 0. */
static void edge_descale_zero(flashport_context *ctx) {
    for (int which = 0; which < 2; which++) {
        shape s = plain(FLASHPORT_FP8_E4M3, 1, 2, 1, 3, 5, 4);
        s.causal = 1;
        data x;
        make_data(&s, &x);
        (which ? x.vs : x.qs)[0] = 0.0f;
        outcome o;
        check_case(ctx, &s, &x, &o, which ? "v_descale 0" : "q_descale 0");
        int rule = 1;
        for (int64_t h = 0; h < s.heads_q; h++)
            for (int64_t i = 0; i < s.nq[0]; i++) {
                const int64_t seen = i + s.nkv[0] - s.nq[0] + 1;
                if (!which) rule &= fabs(o.got.lse[h * x.sq + i] - log((double)seen)) < 1e-6;
                for (int64_t c = 0; c < s.head_dim; c++) {
                    double mean = 0.0;
                    for (int64_t j = 0; j < seen; j++)
                        mean += decode(s.dtype, x.v + lkv(&s, &x, 0, 0, j) + c) * x.vs[0] /
                                (double)seen;
                    const double got = o.got.o[lq(&s, &x, 0, h, i) + c];
                    rule &= which ? got == 0.0 : fabs(got - mean) <= 1e-6 * (1.0 + fabs(mean));
                }
            }
        CHECK(rule);
        free_outcome(&o), free_data(&x);
    }
}

int main(void) {
    flashport_context *ctx;
    if (flashport_context_create("reference", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    random_cases(ctx, 600);
    edge_pages_of_one(ctx);
    edge_empty_sequences(ctx);
    edge_windows(ctx);
    edge_all_masked(ctx);
    edge_softcap_large(ctx);
    edge_fp8_max(ctx);
    edge_fp8_nan(ctx);
    edge_descale_zero(ctx);
    flashport_context_destroy(ctx);
    return check_report("test_reference_features");
}
