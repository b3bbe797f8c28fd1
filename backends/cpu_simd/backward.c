#include "backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "scratch.h"
#include "sequences.h"

#define LOG2E 1.44269504088896340736
#define LOCKS 64 /* stripes of the fast mode's dQ accumulator */

void cs_bwd_tiling_choose(const fp_problem *p, int threads, cs_bwd_tiling *t) {
    t->dq = round_up(p->head_dim, CS_DIM_STEP);
    t->rows = CS_Q_PANEL;
    /* K, V, dK and dV of a tile (4 x keys x dq floats) within about 200 KiB of L2: 96 keys up
     * to d = 128, 48 past it. */
    t->keys = t->dq <= 128 ? 96 : CS_BWD_KEY_STEP;
    t->keys = (int)min64(t->keys, max64(CS_BWD_KEY_STEP, round_up(p->seq_kv, CS_BWD_KEY_STEP)));
    t->threads = threads < 1 ? 1 : threads;
    t->deterministic = p->deterministic;
    t->rows_total = p->q_varlen ? p->heads_q * p->total_q : p->batch * p->heads_q * p->seq_q;
    /* Packed sequences add at most one partial tile or block each. */
    const int64_t kv_tiles = p->kv_layout == FLASHPORT_KV_VARLEN
                                 ? (p->total_kv + p->batch * (t->keys - 1)) / t->keys
                                 : p->batch * ((p->seq_kv + t->keys - 1) / t->keys);
    const int64_t q_blocks = p->q_varlen ? (p->total_q + p->batch * (t->rows - 1)) / t->rows
                                         : p->batch * ((p->seq_q + t->rows - 1) / t->rows);
    t->max_items = max64(kv_tiles * p->heads_kv, t->deterministic ? q_blocks * p->heads_q : 0);
}

/* Byte offsets of one thread's scratch arrays, each on a cache line. */
typedef struct bwd_layout {
    size_t k, v, dk, dv, q, d_o, qp, dop, st, dp, bias, dqt, lse2, dsum, slope, diag, ones, lo, hi,
        key_lo, key_hi, bias_at, total;
} bwd_layout;

static bwd_layout layout_of(const cs_bwd_tiling *t) {
    bwd_layout L;
    size_t at = 0;
    const int64_t tile = (int64_t)t->keys * t->dq, block = (int64_t)t->rows * t->dq;
    L.k = cs_scratch_place(&at, tile, sizeof(float));
    L.v = cs_scratch_place(&at, tile, sizeof(float));
    L.dk = cs_scratch_place(&at, tile, sizeof(float));
    L.dv = cs_scratch_place(&at, tile, sizeof(float));
    L.q = cs_scratch_place(&at, block, sizeof(float));
    L.d_o = cs_scratch_place(&at, block, sizeof(float));
    L.qp = cs_scratch_place(&at, block, sizeof(float));
    L.dop = cs_scratch_place(&at, block, sizeof(float));
    L.st = cs_scratch_place(&at, (int64_t)t->keys * t->rows, sizeof(float));
    L.dp = cs_scratch_place(&at, (int64_t)t->keys * t->rows, sizeof(float));
    L.bias = cs_scratch_place(&at, (int64_t)t->keys * t->rows, sizeof(float));
    L.dqt = cs_scratch_place(&at, block, sizeof(float));
    L.lse2 = cs_scratch_place(&at, t->rows, sizeof(float));
    L.dsum = cs_scratch_place(&at, t->rows, sizeof(float));
    L.slope = cs_scratch_place(&at, t->rows, sizeof(float));
    L.diag = cs_scratch_place(&at, t->rows, sizeof(float));
    L.ones = cs_scratch_place(&at, t->rows, sizeof(float));
    L.lo = cs_scratch_place(&at, t->rows, sizeof(int));
    L.hi = cs_scratch_place(&at, t->rows, sizeof(int));
    L.key_lo = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.key_hi = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.bias_at = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.total = at;
    return L;
}

/* A work item: a key tile (b, KV head, first key) or, in the second pass, a block of query rows
 * (b, query head, first position). */
typedef struct bwd_item {
    int64_t cost, b, head, first;
} bwd_item;

/* The shared part of the scratch, after the threads' own: the items, D of every row (and, in
 * the fast mode, the dQ accumulator). */
static size_t shared_items_at(const cs_bwd_tiling *t) {
    return (size_t)round_up((int64_t)layout_of(t).total * t->threads, CS_SCRATCH_ALIGN);
}
static size_t shared_dsum_at(const cs_bwd_tiling *t) {
    return shared_items_at(t) +
           (size_t)round_up(t->max_items * (int64_t)sizeof(bwd_item), CS_SCRATCH_ALIGN);
}
static size_t shared_dq_at(const cs_bwd_tiling *t) {
    return shared_dsum_at(t) +
           (size_t)round_up(t->rows_total * (int64_t)sizeof(float), CS_SCRATCH_ALIGN);
}

size_t cs_bwd_scratch_bytes(const cs_bwd_tiling *t) {
    return shared_dq_at(t) +
           (t->deterministic ? 0 : (size_t)t->rows_total * (size_t)t->dq * sizeof(float));
}

_Static_assert(sizeof(cs_bwd_tiling) <= FP_PLAN_KERNEL_PARAMS_BYTES,
               "a plan holds the kernel parameters");

void cs_bwd_tiling_to_plan(const cs_bwd_tiling *t, fp_plan *plan) {
    memcpy(plan->kernel_params.bytes, t, sizeof *t);
}

void cs_bwd_tiling_from_plan(const fp_plan *plan, cs_bwd_tiling *t) {
    memcpy(t, plan->kernel_params.bytes, sizeof *t);
}

/* Everything an item needs to know about the call. */
typedef struct bcall {
    const cs_kernel_ops *ops;
    const cs_bwd_tiling *t;
    const fp_problem *p;
    const fp_args *a;
    size_t in_size, out_size;
    int64_t group;
    cs_score_mods mods; /* scale and softcap; each block's ALiBi and bias arrays */
    bwd_layout L;
    const float *dsum; /* D of every row, by LSE index */
    float *dq_acc;     /* fast mode: dQ of every row, by LSE index x dq */
#if defined(_OPENMP)
    omp_lock_t *locks;
#endif
} bcall;

typedef struct bscratch {
    float *k, *v, *dk, *dv, *q, *d_o, *qp, *dop, *st, *dp, *bias, *dqt, *lse2, *dsum, *slope, *diag,
        *ones;
    int *lo, *hi;
    int64_t *key_lo, *key_hi, *bias_at;
} bscratch;

static bscratch scratch_of(const bcall *c, void *base, int thread) {
    char *b = (char *)base + (size_t)thread * c->L.total;
    bscratch s = {
        .k = (float *)(b + c->L.k),
        .v = (float *)(b + c->L.v),
        .dk = (float *)(b + c->L.dk),
        .dv = (float *)(b + c->L.dv),
        .q = (float *)(b + c->L.q),
        .d_o = (float *)(b + c->L.d_o),
        .qp = (float *)(b + c->L.qp),
        .dop = (float *)(b + c->L.dop),
        .st = (float *)(b + c->L.st),
        .dp = (float *)(b + c->L.dp),
        .bias = (float *)(b + c->L.bias),
        .dqt = (float *)(b + c->L.dqt),
        .lse2 = (float *)(b + c->L.lse2),
        .dsum = (float *)(b + c->L.dsum),
        .slope = (float *)(b + c->L.slope),
        .diag = (float *)(b + c->L.diag),
        .ones = (float *)(b + c->L.ones),
        .lo = (int *)(b + c->L.lo),
        .hi = (int *)(b + c->L.hi),
        .key_lo = (int64_t *)(b + c->L.key_lo),
        .key_hi = (int64_t *)(b + c->L.key_hi),
        .bias_at = (int64_t *)(b + c->L.bias_at),
    };
    for (int r = 0; r < c->t->rows; ++r) s.ones[r] = 1.0f;
    return s;
}

/* ---- D = rowsum(dO * O), once per row ---- */

static void row_dsum(const bcall *c, float *out, const cs_seq *s, int64_t h, float *tmp) {
    const fp_problem *p = c->p;
    const int64_t d = p->head_dim;
    for (int64_t i = 0; i < s->nq; ++i) {
        c->ops->load_row(cs_q_row(c->a->o, &p->o, c->out_size, s, h, i), p->out_dtype, d, c->t->dq,
                         1.0f, tmp);
        c->ops->load_row(cs_q_row(c->a->d_o, &p->o, c->out_size, s, h, i), p->out_dtype, d,
                         c->t->dq, 1.0f, tmp + c->t->dq);
        double sum = 0.0;
        for (int64_t col = 0; col < d; ++col) sum += (double)tmp[col] * tmp[c->t->dq + col];
        out[cs_lse_index(p, s, h, i)] = (float)sum;
    }
}

/* ---- a block: rows of one query head against one key tile ---- */

/* Converts the block's query and dO rows (positions [i0, i0 + nr) of query head h), as rows
 * and as a transposed panel each, and its per-row state: LSE in base 2, D, the keys each row
 * sees (none where the LSE is -inf: no mass anywhere), ALiBi and bias. */
static void pack_rows(const bcall *c, bscratch *ts, const cs_seq *s, int64_t h, int64_t i0,
                      int nr) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq, d = p->head_dim;
    const float *lse = (const float *)c->a->lse;
    for (int r = 0; r < c->t->rows; ++r) {
        float *qr = ts->q + r * dq, *dr = ts->d_o + r * dq;
        ts->key_lo[r] = ts->key_hi[r] = 0;
        ts->lse2[r] = ts->dsum[r] = ts->slope[r] = ts->diag[r] = 0.0f;
        if (r >= nr) {
            memset(qr, 0, (size_t)dq * sizeof(float));
            memset(dr, 0, (size_t)dq * sizeof(float));
            continue;
        }
        const int64_t i = i0 + r, at = cs_lse_index(p, s, h, i);
        c->ops->load_row(cs_q_row(c->a->q, &p->q, c->in_size, s, h, i), p->dtype, d, dq, 1.0f, qr);
        c->ops->load_row(cs_q_row(c->a->d_o, &p->o, c->out_size, s, h, i), p->out_dtype, d, dq,
                         1.0f, dr);
        ts->lse2[r] = (float)(LOG2E * lse[at]);
        ts->dsum[r] = c->dsum[at];
        if (lse[at] != -INFINITY) cs_row_keys(p, s, i, &ts->key_lo[r], &ts->key_hi[r]);
        if (p->alibi != FLASHPORT_ALIBI_NONE)
            ts->slope[r] = (float)(LOG2E * cs_alibi_slope(p, c->a->alibi_slopes, s->b, h));
        if (p->bias.enabled) ts->bias_at[r] = cs_bias_at(p, s, h, i);
    }
    for (int r = 0; r < c->t->rows; ++r)
        for (int64_t col = 0; col < dq; ++col) {
            ts->qp[col * CS_Q_PANEL + r] = ts->q[r * dq + col];
            ts->dop[col * CS_Q_PANEL + r] = ts->d_o[r * dq + col];
        }
}

/* Converts keys [j0, j0 + n) of KV head kvh into rows of k and v, zero rows up to kp. */
static void pack_keys(const bcall *c, bscratch *ts, const cs_seq *s, int64_t kvh, int64_t j0, int n,
                      int kp) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    for (int j = 0; j < n; ++j) {
        int64_t k_at, v_at;
        cs_kv_rows(p, s, kvh, j0 + j, &k_at, &v_at);
        c->ops->load_row((const char *)c->a->k + (size_t)k_at * c->in_size, p->dtype, p->head_dim,
                         dq, 1.0f, ts->k + j * dq);
        c->ops->load_row((const char *)c->a->v + (size_t)v_at * c->in_size, p->dtype, p->head_dim,
                         dq, 1.0f, ts->v + j * dq);
    }
    memset(ts->k + n * dq, 0, (size_t)(kp - n) * (size_t)dq * sizeof(float));
    memset(ts->v + n * dq, 0, (size_t)(kp - n) * (size_t)dq * sizeof(float));
}

/* P into st and dS into dp for the packed rows (nr of them) against the loaded key tile
 * [j0, j0 + n), kp keys with the zero rows; 0 when no row sees a key of the tile. */
static int block_grads(const bcall *c, bscratch *ts, const cs_seq *s, int64_t i0, int nr,
                       int64_t j0, int n, int kp) {
    const fp_problem *p = c->p;
    const int rows = c->t->rows;
    int any = 0;
    for (int r = 0; r < rows; ++r) {
        const int a = (int)max64(0, min64(ts->key_lo[r] - j0, n));
        const int e = (int)max64(0, min64(ts->key_hi[r] - j0, n));
        ts->lo[r] = e > a ? a : 0;
        ts->hi[r] = e > a ? e : 0;
        any |= e > a;
    }
    if (!any) return 0;
    c->ops->scores(ts->qp, ts->k, p->head_dim, c->t->dq, rows, ts->lo, ts->hi, ts->st, rows);
    c->ops->scores(ts->dop, ts->v, p->head_dim, c->t->dq, rows, ts->lo, ts->hi, ts->dp, rows);
    cs_score_mods mods = c->mods;
    if (p->alibi != FLASHPORT_ALIBI_NONE) {
        for (int r = 0; r < nr; ++r) ts->diag[r] = (float)(i0 + r + s->nkv - s->nq - j0);
        mods.slope = ts->slope;
        mods.diag = ts->diag;
    }
    if (p->bias.enabled) {
        for (int r = 0; r < nr; ++r)
            cs_bias_row(p, c->a->bias, ts->bias_at[r] + j0 * p->bias.key, ts->lo[r], ts->hi[r],
                        (float)LOG2E, ts->bias + r, rows);
        mods.bias = ts->bias;
    }
    c->ops->grads(ts->st, ts->dp, rows, rows, kp, ts->lo, ts->hi, &mods, ts->lse2, ts->dsum,
                  p->scale);
    return 1;
}

/* dQ of the block's rows (nr, in groups of CS_PV_ROWS) += dS K over kp keys, into ts->dqt. */
static void block_dq(const bcall *c, bscratch *ts, int nr, int kp) {
    const int64_t dq = c->t->dq;
    for (int64_t c0 = 0; c0 < dq; c0 += c->ops->pv_cols)
        for (int g = 0; g < nr; g += CS_PV_ROWS)
            c->ops->pv_rows(ts->dp + g, c->t->rows, ts->k + c0, dq, min64(c->ops->pv_cols, dq - c0),
                            kp, ts->ones, ts->dqt + (int64_t)g * dq + c0);
}

/* ---- the two passes ---- */

/* Whether row positions [i0, i0 + nr) see any key of [j0, j1). */
static int rows_meet(const fp_problem *p, const cs_seq *s, int64_t i0, int64_t nr, int64_t j0,
                     int64_t j1) {
    for (int64_t i = i0; i < i0 + nr; ++i) {
        int64_t lo, hi;
        cs_row_keys(p, s, i, &lo, &hi);
        if (hi > lo && lo < j1 && hi > j0) return 1;
    }
    return 0;
}

/* Adds the block's dQ (nr rows of query head h from position i0) into the accumulator, under
 * the block's lock. */
static void add_dq(const bcall *c, const bscratch *ts, const cs_seq *s, int64_t h, int64_t i0,
                   int nr) {
    const int64_t dq = c->t->dq;
#if defined(_OPENMP)
    omp_lock_t *lock = &c->locks[(uint64_t)(cs_lse_index(c->p, s, h, i0) / c->t->rows) % LOCKS];
    omp_set_lock(lock);
#endif
    for (int r = 0; r < nr; ++r) {
        float *acc = c->dq_acc + cs_lse_index(c->p, s, h, i0 + r) * dq;
        const float *add = ts->dqt + (int64_t)r * dq;
        for (int64_t col = 0; col < dq; ++col) acc[col] += add[col];
    }
#if defined(_OPENMP)
    omp_unset_lock(lock);
#endif
}

/* A key tile: dK and dV over every block of the group's query heads, and in the fast mode each
 * block's dQ. */
static void key_tile(const bcall *c, bscratch *ts, const bwd_item *it) {
    const fp_problem *p = c->p;
    const cs_bwd_tiling *t = c->t;
    const int64_t dq = t->dq, kvh = it->head, j0 = it->first;
    const cs_seq s = cs_seq_of(p, c->a, it->b);
    const int n = (int)min64(t->keys, s.nkv - j0), kp = (int)round_up(n, CS_BWD_KEY_STEP);
    pack_keys(c, ts, &s, kvh, j0, n, kp);
    memset(ts->dk, 0, (size_t)kp * (size_t)dq * sizeof(float));
    memset(ts->dv, 0, (size_t)kp * (size_t)dq * sizeof(float));
    for (int64_t h = kvh * c->group; h < (kvh + 1) * c->group; ++h)
        for (int64_t i0 = 0; i0 < s.nq; i0 += t->rows) {
            const int nr = (int)min64(t->rows, s.nq - i0);
            if (!rows_meet(p, &s, i0, nr, j0, j0 + n)) continue;
            pack_rows(c, ts, &s, h, i0, nr);
            if (!block_grads(c, ts, &s, i0, nr, j0, n, kp)) continue;
            for (int64_t c0 = 0; c0 < dq; c0 += c->ops->pv_cols) {
                const int64_t cols = min64(c->ops->pv_cols, dq - c0);
                for (int g = 0; g < kp; g += CS_PV_ROWS) {
                    c->ops->pt_rows(ts->st + (int64_t)g * t->rows, t->rows, ts->d_o + c0, dq, cols,
                                    nr, ts->dv + (int64_t)g * dq + c0);
                    c->ops->pt_rows(ts->dp + (int64_t)g * t->rows, t->rows, ts->q + c0, dq, cols,
                                    nr, ts->dk + (int64_t)g * dq + c0);
                }
            }
            if (!t->deterministic) {
                memset(ts->dqt, 0, (size_t)t->rows * (size_t)dq * sizeof(float));
                block_dq(c, ts, nr, kp);
                add_dq(c, ts, &s, h, i0, nr);
            }
        }
    for (int j = 0; j < n; ++j) {
        int64_t k_at, v_at;
        cs_kv_rows(p, &s, kvh, j0 + j, &k_at, &v_at);
        c->ops->store_row(ts->dk + j * dq, p->head_dim, 1.0f, p->out_dtype,
                          (char *)c->a->d_k + (size_t)k_at * c->out_size);
        c->ops->store_row(ts->dv + j * dq, p->head_dim, 1.0f, p->out_dtype,
                          (char *)c->a->d_v + (size_t)v_at * c->out_size);
    }
}

/* The deterministic mode's dQ of a block of query rows: dS K over its key tiles in order. */
static void query_block(const bcall *c, bscratch *ts, const bwd_item *it) {
    const fp_problem *p = c->p;
    const cs_bwd_tiling *t = c->t;
    const int64_t dq = t->dq, h = it->head, i0 = it->first;
    const cs_seq s = cs_seq_of(p, c->a, it->b);
    const int nr = (int)min64(t->rows, s.nq - i0);
    pack_rows(c, ts, &s, h, i0, nr);
    memset(ts->dqt, 0, (size_t)t->rows * (size_t)dq * sizeof(float));
    int64_t lo = INT64_MAX, hi = 0;
    for (int r = 0; r < nr; ++r)
        if (ts->key_hi[r] > ts->key_lo[r]) {
            lo = min64(lo, ts->key_lo[r]);
            hi = max64(hi, ts->key_hi[r]);
        }
    for (int64_t j0 = lo; j0 < hi; j0 += t->keys) {
        const int n = (int)min64(t->keys, hi - j0), kp = (int)round_up(n, CS_BWD_KEY_STEP);
        pack_keys(c, ts, &s, h / c->group, j0, n, kp);
        if (block_grads(c, ts, &s, i0, nr, j0, n, kp)) block_dq(c, ts, nr, kp);
    }
    for (int r = 0; r < nr; ++r)
        c->ops->store_row(ts->dqt + (int64_t)r * dq, p->head_dim, 1.0f, p->out_dtype,
                          (void *)cs_q_row(c->a->d_q, &p->q, c->out_size, &s, h, i0 + r));
}

/* ---- work lists ---- */

/* Most expensive first; ties in list order, so that the order does not depend on qsort. */
static int by_cost(const void *x, const void *y) {
    const bwd_item *a = (const bwd_item *)x, *b = (const bwd_item *)y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    if (a->head != b->head) return a->head < b->head ? -1 : 1;
    return (a->first > b->first) - (a->first < b->first);
}

/* Visible (query, key) pairs of rows [i0, i1) and keys [j0, j1). */
static int64_t pairs(const fp_problem *p, const cs_seq *s, int64_t i0, int64_t i1, int64_t j0,
                     int64_t j1) {
    int64_t n = 0;
    for (int64_t i = i0; i < i1; ++i) {
        int64_t lo, hi;
        cs_row_keys(p, s, i, &lo, &hi);
        n += max64(0, min64(hi, j1) - max64(lo, j0));
    }
    return n;
}

static int64_t list_key_tiles(const bcall *c, bwd_item *list) {
    const fp_problem *p = c->p;
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        const cs_seq s = cs_seq_of(p, c->a, b);
        for (int64_t j0 = 0; j0 < s.nkv; j0 += c->t->keys) {
            const int64_t cost = pairs(p, &s, 0, s.nq, j0, min64(s.nkv, j0 + c->t->keys)) + 1;
            for (int64_t kvh = 0; kvh < p->heads_kv; ++kvh)
                list[n++] = (bwd_item){cost, b, kvh, j0};
        }
    }
    qsort(list, (size_t)n, sizeof *list, by_cost);
    return n;
}

static int64_t list_query_blocks(const bcall *c, bwd_item *list) {
    const fp_problem *p = c->p;
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        const cs_seq s = cs_seq_of(p, c->a, b);
        for (int64_t i0 = 0; i0 < s.nq; i0 += c->t->rows) {
            const int64_t cost = pairs(p, &s, i0, min64(s.nq, i0 + c->t->rows), 0, s.nkv) + 1;
            for (int64_t h = 0; h < p->heads_q; ++h) list[n++] = (bwd_item){cost, b, h, i0};
        }
    }
    qsort(list, (size_t)n, sizeof *list, by_cost);
    return n;
}

/* ---- the call ---- */

typedef enum { PASS_DSUM, PASS_KEYS, PASS_QUERIES, PASS_STORE_DQ } bwd_pass;

/* Item `it` of a pass: a (sequence, query head) for the row passes, a list entry otherwise. */
static void run_item(const bcall *c, bscratch *ts, bwd_pass pass, const bwd_item *list,
                     int64_t it) {
    const fp_problem *p = c->p;
    if (pass == PASS_KEYS) {
        key_tile(c, ts, &list[it]);
        return;
    }
    if (pass == PASS_QUERIES) {
        query_block(c, ts, &list[it]);
        return;
    }
    const cs_seq s = cs_seq_of(p, c->a, it / p->heads_q);
    const int64_t h = it % p->heads_q;
    if (pass == PASS_DSUM) {
        row_dsum(c, (float *)c->dsum, &s, h, ts->q);
        return;
    }
    for (int64_t i = 0; i < s.nq; ++i)
        c->ops->store_row(c->dq_acc + cs_lse_index(p, &s, h, i) * c->t->dq, p->head_dim, 1.0f,
                          p->out_dtype, (void *)cs_q_row(c->a->d_q, &p->q, c->out_size, &s, h, i));
}

static void run_pass(const bcall *c, void *scratch, bwd_pass pass, const bwd_item *list,
                     int64_t items) {
#if defined(_OPENMP)
    const int threads = (int)max64(1, min64(c->t->threads, items));
#pragma omp parallel num_threads(threads)
    {
        bscratch ts = scratch_of(c, scratch, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) run_item(c, &ts, pass, list, it);
    }
#else
    bscratch ts = scratch_of(c, scratch, 0);
    for (int64_t it = 0; it < items; ++it) run_item(c, &ts, pass, list, it);
#endif
}

void cs_attention_backward(const cs_kernel_ops *ops, const cs_bwd_tiling *t, const fp_problem *p,
                           const fp_args *args, void *scratch) {
    bcall c = {
        .ops = ops,
        .t = t,
        .p = p,
        .a = args,
        .in_size = fp_dtype_size(p->dtype),
        .out_size = fp_dtype_size(p->out_dtype),
        .group = p->heads_q / p->heads_kv,
        .L = layout_of(t),
        .dsum = (const float *)((char *)scratch + shared_dsum_at(t)),
        .dq_acc = t->deterministic ? NULL : (float *)((char *)scratch + shared_dq_at(t)),
    };
    c.mods.scale2 = (float)(p->scale * LOG2E);
    if (p->softcap > 0.0f) {
        c.mods.cap_in = p->scale / p->softcap;
        c.mods.cap_out = (float)(p->softcap * LOG2E);
    }
#if defined(_OPENMP)
    omp_lock_t locks[LOCKS];
    for (int i = 0; i < LOCKS; ++i) omp_init_lock(&locks[i]);
    c.locks = locks;
#endif
    bwd_item *list = (bwd_item *)((char *)scratch + shared_items_at(t));
    const int64_t rows = p->batch * p->heads_q;
    run_pass(&c, scratch, PASS_DSUM, NULL, rows);
    if (c.dq_acc) memset(c.dq_acc, 0, (size_t)t->rows_total * (size_t)t->dq * sizeof(float));
    run_pass(&c, scratch, PASS_KEYS, list, list_key_tiles(&c, list));
    if (t->deterministic)
        run_pass(&c, scratch, PASS_QUERIES, list, list_query_blocks(&c, list));
    else
        run_pass(&c, scratch, PASS_STORE_DQ, NULL, rows);
#if defined(_OPENMP)
    for (int i = 0; i < LOCKS; ++i) omp_destroy_lock(&locks[i]);
#endif
}
