#include "decode.h"

#include <math.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kv_stream.h"
#include "row_normaliser.h"
#include "scratch.h"
#include "sequences.h"
#include "topology.h"

/* K and V rows of a key block together, as read (in their dtype, or float32 when converted):
 * the block and the next one, prefetched while this one computes, fit L1 together. */
#define BLOCK_BYTES (16 << 10)
/* Keys of the scores kernel per call, between prefetches of the next block. */
#define PREFETCH_STEP 4
/* Bytes of K and V rows between the keys computed and those prefetched: best at 8 KiB of the
 * distances tried (4 to 128 KiB) on the Zen 5 development machine. A prefetch holds one of the
 * core's few line-fill slots until its line arrives, so prefetching further ahead only makes
 * the later ones wait. */
#define AHEAD_BYTES (8 << 10)
/* Splits are at least this many keys, so an item's fixed work (its rows of Q, its partial
 * result and their merge) stays small beside its keys. */
#define MIN_SPLIT 512
/* Items aimed at per call: enough for any thread count to balance; the split length follows
 * from it and from the problem alone, never from the thread count, so results do not change
 * with it. */
#define TARGET_ITEMS 256
/* The partial results of all items together stay under this (the split grows instead). */
#define PARTIAL_BYTES ((int64_t)32 << 20)

int cs_decode_takes(const fp_problem *p, const char **why) {
    if (p->seq_q > CS_DECODE_MAX_Q) {
        *why = "more than 16 query positions per sequence";
        return 0;
    }
    if (p->heads_q / p->heads_kv * p->seq_q > CS_DECODE_MAX_ROWS) {
        *why = "more than 64 query rows per KV head (heads per KV head x positions)";
        return 0;
    }
    if (p->bias.enabled) {
        *why = "an additive bias (gathered per tile by the tile path)";
        return 0;
    }
    *why = "few query positions against the keys";
    return 1;
}

/* Splits of the longest sequence, and the bytes of every item's partial result. */
static int64_t splits_of(const fp_problem *p, const cs_tiling *t) {
    return max64(1, (p->seq_kv + t->split - 1) / t->split);
}
static int64_t items_of(const fp_problem *p, const cs_tiling *t) {
    return p->batch * p->heads_kv * splits_of(p, t);
}
/* An item's partial result: m and l of each real row, then O of each row. */
static int64_t partial_floats(const fp_problem *p, const cs_tiling *t) {
    return (int64_t)t->heads * p->seq_q * (2 + t->dq);
}

void cs_decode_choose(const fp_problem *p, int threads, cs_tiling *t) {
    memset(t, 0, sizeof *t);
    t->dq = round_up(p->head_dim, CS_DIM_STEP);
    t->heads = (int)(p->heads_q / p->heads_kv);
    t->queries = (int)p->seq_q;
    /* Score rows: a multiple of the softmax's register of rows and of the P V kernel's rows. */
    t->rows = (int)round_up((int64_t)t->heads * t->queries, CS_Q_PANEL);
    const int64_t row_bytes =
        t->dq *
        (int64_t)(p->dtype == FLASHPORT_F16 || p->dtype == FLASHPORT_BF16 ? 2 : sizeof(float));
    t->keys = (int)(max64(1, BLOCK_BYTES / (2 * row_bytes) / CS_KEY_STEP) * CS_KEY_STEP);
    t->threads = threads < 1 ? 1 : threads;
    const int64_t per_seq = max64(1, TARGET_ITEMS / (p->batch * p->heads_kv));
    int64_t split = max64(MIN_SPLIT, (p->seq_kv + per_seq - 1) / per_seq);
    split = round_up(split, t->keys);
    t->split = (int)min64(split, INT32_MAX / 2);
    while (items_of(p, t) > 1 &&
           items_of(p, t) * partial_floats(p, t) * (int64_t)sizeof(float) > PARTIAL_BYTES &&
           t->split < INT32_MAX / 4)
        t->split *= 2;
}

/* Byte offsets of one thread's arrays, each on a cache line. */
typedef struct layout {
    size_t q, qt, o, k, v, kp, vp, s, m, l, alpha, slope, diag, lo, hi, key_lo, key_hi, total;
} layout;

static layout layout_of(const cs_tiling *t) {
    layout L;
    size_t at = 0;
    L.q = cs_scratch_place(&at, (int64_t)t->rows * t->dq, sizeof(float));
    L.qt = cs_scratch_place(&at, (int64_t)t->rows * t->dq, sizeof(float));
    L.o = cs_scratch_place(&at, (int64_t)t->rows * t->dq, sizeof(float));
    L.k = cs_scratch_place(&at, (int64_t)t->keys * t->dq, sizeof(float));
    L.v = cs_scratch_place(&at, (int64_t)t->keys * t->dq, sizeof(float));
    L.kp = cs_scratch_place(&at, t->keys, sizeof(const void *));
    L.vp = cs_scratch_place(&at, t->keys, sizeof(const void *));
    L.s = cs_scratch_place(&at, (int64_t)t->keys * t->rows, sizeof(float));
    L.m = cs_scratch_place(&at, t->rows, sizeof(float));
    L.l = cs_scratch_place(&at, t->rows, sizeof(float));
    L.alpha = cs_scratch_place(&at, t->rows, sizeof(float));
    L.slope = cs_scratch_place(&at, t->rows, sizeof(float));
    L.diag = cs_scratch_place(&at, t->rows, sizeof(float));
    L.lo = cs_scratch_place(&at, t->rows, sizeof(int));
    L.hi = cs_scratch_place(&at, t->rows, sizeof(int));
    L.key_lo = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.key_hi = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.total = at;
    return L;
}

size_t cs_decode_scratch_bytes(const fp_problem *p, const cs_tiling *t) {
    return layout_of(t).total * (size_t)t->threads +
           (size_t)(items_of(p, t) * partial_floats(p, t)) * sizeof(float);
}

typedef struct call {
    const cs_kernel_ops *ops;
    const cs_tiling *t;
    const fp_problem *p;
    const fp_args *a;
    int64_t splits;
    int direct;         /* K/V rows are read in place (else converted into the block buffers) */
    int64_t ahead;      /* keys between a key computed and the one prefetched */
    cs_score_mods mods; /* scale and softcap; ALiBi's arrays are each item's */
    layout L;
    float *partials;
} call;

typedef struct rows_scratch {
    float *q, *qt, *o, *k, *v, *s, *m, *l, *alpha, *slope, *diag; /* qt: Q's panels */
    const void **kp, **vp; /* the block's K and V rows, one pointer per key */
    int *lo, *hi;
    int64_t *key_lo, *key_hi;
} rows_scratch;

static rows_scratch scratch_of(const call *c, void *base, int thread) {
    char *b = (char *)base + (size_t)thread * c->L.total;
    rows_scratch rs = {
        .q = (float *)(b + c->L.q),
        .qt = (float *)(b + c->L.qt),
        .o = (float *)(b + c->L.o),
        .k = (float *)(b + c->L.k),
        .v = (float *)(b + c->L.v),
        .kp = (const void **)(b + c->L.kp),
        .vp = (const void **)(b + c->L.vp),
        .s = (float *)(b + c->L.s),
        .m = (float *)(b + c->L.m),
        .l = (float *)(b + c->L.l),
        .alpha = (float *)(b + c->L.alpha),
        .slope = (float *)(b + c->L.slope),
        .diag = (float *)(b + c->L.diag),
        .lo = (int *)(b + c->L.lo),
        .hi = (int *)(b + c->L.hi),
        .key_lo = (int64_t *)(b + c->L.key_lo),
        .key_hi = (int64_t *)(b + c->L.key_hi),
    };
    return rs;
}

/* Row r of a group is position r / heads of query head kvh * heads + r % heads, as in a tile. */
static int64_t head_of(const call *c, int64_t kvh, int r) {
    return kvh * c->t->heads + r % c->t->heads;
}
static int64_t position_of(const call *c, int r) { return r / c->t->heads; }

/* O += P V for the block's keys, rows of K/V at rs->vp in dtype dt and d columns: groups of
 * CS_PV_ROWS rows over the keys all of them see (rescaling by alpha), then each row's own keys
 * outside them, so that no row touches a key it cannot see. */
static void pv_block(const call *c, rows_scratch *rs, int real, flashport_dtype dt, int64_t d) {
    static const float ones[CS_PV_ROWS] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    const cs_kernel_ops *ops = c->ops;
    const int64_t dq = c->t->dq, ld = c->t->rows;
    for (int g = 0; g < real; g += CS_PV_ROWS) {
        const int rows = (int)min64(CS_PV_ROWS, real - g);
        int a = 0, e = INT32_MAX;
        for (int r = g; r < g + rows; ++r) {
            a = rs->lo[r] > a ? rs->lo[r] : a;
            e = rs->hi[r] < e ? rs->hi[r] : e;
        }
        e = e > a ? e : a;
        ops->decode_pv(rs->s + (int64_t)a * ld + g, ld, rs->vp + a, dt, d, e - a, rows,
                       rs->alpha + g, rs->o + g * dq, dq);
        for (int r = g; r < g + rows; ++r) {
            const int lo = rs->lo[r], hi = rs->hi[r];
            if (lo < a)
                ops->decode_pv(rs->s + (int64_t)lo * ld + r, ld, rs->vp + lo, dt, d,
                               (hi < a ? hi : a) - lo, 1, ones, rs->o + r * dq, dq);
            if (hi > e) {
                const int from = lo > e ? lo : e;
                ops->decode_pv(rs->s + (int64_t)from * ld + r, ld, rs->vp + from, dt, d, hi - from,
                               1, ones, rs->o + r * dq, dq);
            }
        }
    }
}

/* The first `panels` panels of the rows' Q (kernel_ops.h's decode_scores_panel): rows
 * [n * P, (n + 1) * P) as qt[n * P * dq + c * P + lane], for columns c < d. */
static void pack_panels(const call *c, rows_scratch *rs, int panels, int64_t d) {
    const int P = c->ops->decode_panel_rows;
    const int64_t dq = c->t->dq;
    for (int n = 0; n < panels; ++n)
        for (int lane = 0; lane < P; ++lane) {
            const float *row = rs->q + ((int64_t)n * P + lane) * dq;
            float *panel = rs->qt + (int64_t)n * P * dq + lane;
            for (int64_t col = 0; col < d; ++col) panel[col * P] = row[col];
        }
}

/* The scores of the block's keys [j, j + m) for the rows r < real: the first `panels` panels
 * of rows on the panel kernel, the rest as dot products. */
static void block_scores(const call *c, rows_scratch *rs, int real, int panels, flashport_dtype dt,
                         int64_t d, int j, int m) {
    const cs_kernel_ops *ops = c->ops;
    const int P = ops->decode_panel_rows;
    const int64_t dq = c->t->dq, ld = c->t->rows;
    float *st = rs->s + (int64_t)j * ld;
    for (int n = 0; n < panels; ++n)
        ops->decode_scores_panel(rs->qt + (int64_t)n * P * dq, rs->kp + j, d, m, st + n * P, ld);
    const int done = panels * P;
    if (done < real)
        ops->decode_scores(rs->q + done * dq, dq, real - done, rs->kp + j, dt, d, m, st + done, ld);
}

/* Points rs->kp and rs->vp at the rows of keys [j0, j0 + n): where they are when the kernels
 * read them in place, else at their float32 conversions (FP8 with its descales, or a head dim
 * the kernels' registers do not divide). */
static void block_rows(const call *c, rows_scratch *rs, const cs_seq *s, int64_t kvh, int64_t j0,
                       int n, int64_t end) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    if (!c->direct) {
        cs_convert_kv(c->ops, p, c->a, s, kvh, j0, n, dq, rs->k, rs->v, c->t->keys, end);
        for (int j = 0; j < n; ++j) {
            rs->kp[j] = rs->k + j * dq;
            rs->vp[j] = rs->v + j * dq;
        }
        return;
    }
    const size_t es = fp_dtype_size(p->dtype);
    for (int j = 0; j < n;) {
        int64_t k_at, v_at;
        const int64_t run = min64(cs_kv_rows(p, s, kvh, j0 + j, &k_at, &v_at), n - j);
        for (int64_t r = 0; r < run; ++r, ++j) {
            rs->kp[j] = (const char *)c->a->k + (size_t)(k_at + r * p->k.seq) * es;
            rs->vp[j] = (const char *)c->a->v + (size_t)(v_at + r * p->v.seq) * es;
        }
    }
}

/* The rows of sequence s and KV head kvh over the keys of split `split`, into their partial
 * result: the running max and sum of each row and its unnormalised O. */
static void run_split(const call *c, rows_scratch *rs, const cs_seq *s, int64_t kvh, int64_t split,
                      float *part) {
    const fp_problem *p = c->p;
    const cs_tiling *t = c->t;
    const cs_kernel_ops *ops = c->ops;
    const int64_t dq = t->dq, ld = t->rows;
    const int real = (int)(t->heads * s->nq);
    const int64_t k0 = split * t->split, k1 = min64(s->nkv, k0 + t->split);
    float *pm = part, *pl = part + real, *po = part + 2 * real;

    int64_t lo = INT64_MAX, hi = 0; /* the keys the split's rows see */
    for (int r = 0; r < ld; ++r) {
        rs->m[r] = -INFINITY;
        rs->l[r] = 0.0f;
        rs->key_lo[r] = rs->key_hi[r] = 0;
        if (r >= real) continue;
        int64_t a, e;
        cs_row_keys(p, s, position_of(c, r), &a, &e);
        a = max64(a, k0);
        e = min64(e, k1);
        if (e > a) {
            rs->key_lo[r] = a;
            rs->key_hi[r] = e;
            lo = min64(lo, a);
            hi = max64(hi, e);
        }
    }
    memset(rs->o, 0, (size_t)ld * (size_t)dq * sizeof(float));
    if (hi > lo) {
        cs_score_mods mods = c->mods;
        if (p->alibi != FLASHPORT_ALIBI_NONE) {
            const void *slopes = c->a->alibi_slopes;
            for (int r = 0; r < ld; ++r) {
                const int64_t h = head_of(c, kvh, r);
                rs->diag[r] = 0.0f; /* padding rows: finite, as the kernels read whole registers */
                rs->slope[r] =
                    r >= real ? 0.0f : (float)(CS_LOG2E * cs_alibi_slope(p, slopes, s->b, h));
            }
            mods.slope = rs->slope;
            mods.diag = rs->diag;
        }
        for (int r = 0; r < real; ++r) {
            const int64_t h = head_of(c, kvh, r), i = position_of(c, r);
            ops->load_row(cs_q_row(c->a->q, &p->q, fp_dtype_size(p->dtype), s, h, i), p->dtype,
                          p->head_dim, dq,
                          cs_descale(p, c->a->q_descale, p->heads_q, p->seq_q, s->b, h, i),
                          rs->q + r * dq);
        }
        const flashport_dtype dt = c->direct ? p->dtype : FLASHPORT_F32;
        const int64_t d = c->direct ? p->head_dim : dq;
        if (ops->decode_prepare_q) ops->decode_prepare_q(rs->q, dq, real, dt, d);
        /* Whole registers of rows take panels where K is float32 (a panel of fewer real rows
         * would multiply its padding as often as its rows). */
        const int panels =
            dt == FLASHPORT_F32 && ops->decode_panel_rows ? real / ops->decode_panel_rows : 0;
        pack_panels(c, rs, panels, d);
        /* Rows past `real` in the softmax's last register of rows: finite scores. */
        memset(rs->s, 0, (size_t)t->keys * (size_t)ld * sizeof(float));
        const int score_rows = (int)round_up(real, CS_ROW_STEP);
        for (int64_t j0 = lo; j0 < hi; j0 += t->keys) {
            const int n = (int)min64(t->keys, hi - j0);
            block_rows(c, rs, s, kvh, j0, n, hi);
            int uniform = 1; /* every real row sees the same keys of the block */
            for (int r = 0; r < real; ++r) {
                const int a = (int)max64(0, min64(rs->key_lo[r] - j0, n));
                const int e = (int)max64(0, min64(rs->key_hi[r] - j0, n));
                rs->lo[r] = e > a ? a : 0;
                rs->hi[r] = e > a ? e : 0;
                uniform &= rs->lo[r] == rs->lo[0] && rs->hi[r] == rs->hi[0];
            }
            /* Padding rows see no key, or, when the real rows agree, the same keys as they do:
             * the softmax then needs no mask (their finite results are never used). */
            for (int r = real; r < score_rows; ++r) {
                rs->lo[r] = uniform ? rs->lo[0] : 0;
                rs->hi[r] = uniform ? rs->hi[0] : 0;
            }
            /* Keys `ahead` further on are prefetched a few per call of the scores kernel: the
             * core's own window of loads is too short for memory latency (its loads and FMAs
             * per byte are many), and a burst of prefetches would stall as long as the misses
             * (the converting path prefetches as it converts). */
            for (int j = 0; j < n; j += PREFETCH_STEP) {
                const int m = (int)min64(PREFETCH_STEP, n - j);
                block_scores(c, rs, real, panels, dt, d, j, m);
                const int64_t at = j0 + j + c->ahead;
                if (c->direct && at < hi) cs_prefetch_keys(p, c->a, s, kvh, at, min64(m, hi - at));
            }
            if (mods.slope)
                for (int r = 0; r < real; ++r)
                    rs->diag[r] = (float)(position_of(c, r) + s->nkv - s->nq - j0);
            ops->decode_softmax(rs->s, ld, score_rows, rs->lo, rs->hi, &mods, rs->m, rs->l,
                                rs->alpha);
            pv_block(c, rs, real, dt, d);
        }
    }
    memcpy(pm, rs->m, (size_t)real * sizeof(float));
    memcpy(pl, rs->l, (size_t)real * sizeof(float));
    memcpy(po, rs->o, (size_t)real * (size_t)dq * sizeof(float));
}

/* The rows of sequence b and KV head kvh: their splits' partial results merged by LSE in split
 * order (a split's O and sum weighted by 2^(its max - the overall max)), then normalised and
 * stored with the LSE. acc holds one row of dq floats. */
static void merge(const call *c, int64_t b, int64_t kvh, float *acc) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    const cs_seq s = cs_seq_of(p, c->a, b);
    const int real = (int)(c->t->heads * s.nq);
    const int64_t used = max64(1, (s.nkv + c->t->split - 1) / c->t->split);
    const float *first =
        c->partials + (b * p->heads_kv + kvh) * c->splits * partial_floats(p, c->t);
    const float *sinks = (const float *)c->a->sinks;
    float *lse = (float *)c->a->lse;
    for (int r = 0; r < real; ++r) {
        double top = -INFINITY;
        int nan = 0;
        for (int64_t k = 0; k < used; ++k) {
            const float m = first[k * partial_floats(p, c->t) + r];
            nan |= isnan(m);
            top = m > top ? m : top;
        }
        if (nan) top = NAN;
        double l = 0.0;
        memset(acc, 0, (size_t)dq * sizeof(float));
        for (int64_t k = 0; k < used; ++k) {
            const float *part = first + k * partial_floats(p, c->t);
            const float m = part[r];
            /* A split without mass for the row adds 0 times its O (0, or NaN from a NaN V). */
            const float w = m == -INFINITY ? 0.0f : (float)exp2(m - top);
            l += (double)part[real + r] * w;
            const float *o = part + 2 * real + r * dq;
            for (int64_t col = 0; col < dq; ++col) acc[col] += w * o[col];
        }
        const int64_t h = head_of(c, kvh, r), i = position_of(c, r);
        float mul, row_lse;
        cs_row_normaliser(top, l, sinks ? sinks[h] : -INFINITY, &mul, &row_lse);
        c->ops->store_row(acc, p->head_dim, mul, p->out_dtype,
                          (void *)cs_q_row(c->a->o, &p->o, fp_dtype_size(p->out_dtype), &s, h, i));
        if (lse) lse[cs_lse_index(p, &s, h, i)] = row_lse;
    }
}

static void run_item(const call *c, rows_scratch *rs, int64_t it) {
    const int64_t split = it % c->splits, kvh = it / c->splits % c->p->heads_kv,
                  b = it / c->splits / c->p->heads_kv;
    const cs_seq s = cs_seq_of(c->p, c->a, b);
    if (s.nq == 0 || (split > 0 && split * c->t->split >= s.nkv)) return; /* merge skips it */
    run_split(c, rs, &s, kvh, split, c->partials + it * partial_floats(c->p, c->t));
}

void cs_decode(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
               const fp_args *args, void *scratch) {
    call c = {.ops = ops, .t = t, .p = p, .a = args, .splits = splits_of(p, t), .L = layout_of(t)};
    c.partials = (float *)((char *)scratch + c.L.total * (size_t)t->threads);
    c.direct =
        (p->dtype == FLASHPORT_F32 || p->dtype == FLASHPORT_F16 || p->dtype == FLASHPORT_BF16) &&
        p->descale == FLASHPORT_DESCALE_NONE && p->head_dim % ops->decode_step == 0;
    c.ahead = max64(1, AHEAD_BYTES / (2 * p->head_dim * (int64_t)fp_dtype_size(p->dtype)));
    c.mods.scale2 = (float)(p->scale * CS_LOG2E);
    if (p->softcap > 0.0f) {
        c.mods.cap_in = p->scale / p->softcap;
        c.mods.cap_out = (float)(p->softcap * CS_LOG2E);
    }
    const int64_t items = items_of(p, t), groups = p->batch * p->heads_kv;
#if defined(_OPENMP)
    const int threads = (int)max64(1, min64(t->threads, items));
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num();
        cs_bind_worker(me);
        rows_scratch rs = scratch_of(&c, scratch, me);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) run_item(&c, &rs, it);
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < groups; ++g) merge(&c, g / p->heads_kv, g % p->heads_kv, rs.o);
    }
#else
    rows_scratch rs = scratch_of(&c, scratch, 0);
    for (int64_t it = 0; it < items; ++it) run_item(&c, &rs, it);
    for (int64_t g = 0; g < groups; ++g) merge(&c, g / p->heads_kv, g % p->heads_kv, rs.o);
#endif
}
