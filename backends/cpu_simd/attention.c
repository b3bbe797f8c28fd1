#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "fp_half.h"
#include "kv_stream.h"
#include "row_normaliser.h"
#include "scratch.h"
#include "sequences.h"
#include "topology.h"

/* Byte offsets of one thread's scratch arrays, each on a cache line. */
typedef struct scratch_layout {
    size_t q, o, k, v, s, bias, m, l, alpha, lo, hi, key_lo, key_hi, slope, diag, bias_at, group_lo,
        group_hi, group_ragged, total;
} scratch_layout;

static scratch_layout layout_of(const cs_tiling *t) {
    scratch_layout L;
    size_t at = 0;
    L.q = cs_scratch_place(&at, (int64_t)t->rows * t->dq, sizeof(float));
    L.o = cs_scratch_place(&at, (int64_t)t->rows * t->dq, sizeof(float));
    /* The rings, with CS_KEY_STEP rows past the end for the zero rows of a block that ends
     * where the ring wraps around. */
    L.k = cs_scratch_place(&at, (int64_t)(t->ring + CS_KEY_STEP) * t->dq, sizeof(float));
    L.v = cs_scratch_place(&at, (int64_t)(t->ring + CS_KEY_STEP) * t->dq, sizeof(float));
    L.s = cs_scratch_place(&at, (int64_t)t->rows * t->keys, sizeof(float));
    L.bias = cs_scratch_place(&at, (int64_t)t->rows * t->keys, sizeof(float));
    L.m = cs_scratch_place(&at, t->rows, sizeof(float));
    L.l = cs_scratch_place(&at, t->rows, sizeof(float));
    L.alpha = cs_scratch_place(&at, t->rows, sizeof(float));
    L.lo = cs_scratch_place(&at, t->rows, sizeof(int));
    L.hi = cs_scratch_place(&at, t->rows, sizeof(int));
    L.key_lo = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.key_hi = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.slope = cs_scratch_place(&at, t->rows, sizeof(float));
    L.diag = cs_scratch_place(&at, t->rows, sizeof(float));
    L.bias_at = cs_scratch_place(&at, t->rows, sizeof(int64_t));
    L.group_lo = cs_scratch_place(&at, t->rows / CS_PV_ROWS, sizeof(int));
    L.group_hi = cs_scratch_place(&at, t->rows / CS_PV_ROWS, sizeof(int));
    L.group_ragged = cs_scratch_place(&at, t->rows / CS_PV_ROWS, sizeof(int));
    L.total = at;
    return L;
}

/* The list of query tiles, shared by the threads. */
typedef struct tile_entry {
    int64_t cost, b, i0;
} tile_entry;

size_t cs_scratch_bytes(const cs_tiling *t) {
    return layout_of(t).total * (size_t)t->threads + (size_t)t->max_tiles * sizeof(tile_entry);
}

/* Everything a tile needs to know about the call. */
typedef struct call {
    const cs_kernel_ops *ops;
    const cs_tiling *t;
    const fp_problem *p;
    const fp_args *a;
    size_t in_size, out_size; /* bytes of a Q/K/V element and of an O element */
    int64_t group;            /* query heads per KV head */
    cs_score_mods mods;       /* scale and softcap; the ALiBi and bias arrays are each tile's */
    int kv_in_place;          /* K and V rows are float32 rows as the ring's (kv_in_place) */
    scratch_layout L;
} call;

typedef struct tile_scratch {
    float *q, *o, *s, *m, *l, *alpha, *slope, *diag;
    /* The K/V ring: key j of KV head ring_kvh of sequence ring_b sits in row
     * (j - ring_base) mod t->ring of k and v; keys [ring_lo, ring_hi) are there. */
    float *k, *v;
    int64_t ring_b, ring_kvh, ring_base, ring_lo, ring_hi;
    float *bias;              /* bias * log2 e of the block, laid out as the scores */
    int *lo, *hi;             /* keys of the current block each row sees, block-relative */
    int64_t *key_lo, *key_hi; /* keys of the sequence each row sees */
    int64_t *bias_at;         /* element of the row's bias at key 0 */
    int *group_lo, *group_hi; /* keys every row of a P V group sees */
    int *group_ragged;        /* whether some row of the group sees other keys too */
} tile_scratch;

/* Converts keys [j0, j0 + n) into rows [row, row + n) of the ring. */
static void pack_kv(const call *c, tile_scratch *ts, const cs_seq *s, int64_t kvh, int64_t j0,
                    int64_t n, int64_t row) {
    if (c->ops->load_kv) {
        cs_place_kv(c->ops, c->p, c->a, s, kvh, j0, n, c->t->dq, ts->k, ts->v, row);
        return;
    }
    cs_convert_kv(c->ops, c->p, c->a, s, kvh, j0, n, c->t->dq, ts->k + row * c->t->dq,
                  ts->v + row * c->t->dq, 0, 0);
}

static int64_t ring_row(const tile_scratch *ts, const cs_tiling *t, int64_t j) {
    const int64_t r = (j - ts->ring_base) % t->ring;
    return r < 0 ? r + t->ring : r;
}

/* Makes keys [a, e) of KV head kvh of sequence s (e - a <= t->ring - CS_KEY_STEP) present in
 * the ring, converting only those it does not hold: consecutive tiles of one head share all
 * their keys without a window, and all but a tile height of them with one. The rows of keys
 * outside [a, e) are free afterwards; e - a leaves CS_KEY_STEP of them past e. */
static void ring_fill(const call *c, tile_scratch *ts, const cs_seq *s, int64_t kvh, int64_t a,
                      int64_t e) {
    if (ts->ring_b != s->b || ts->ring_kvh != kvh || e <= ts->ring_lo || a >= ts->ring_hi) {
        ts->ring_b = s->b;
        ts->ring_kvh = kvh;
        ts->ring_base = ts->ring_lo = ts->ring_hi = a;
    }
    const int64_t missing[2][2] = {{a, min64(ts->ring_lo, e)}, {max64(ts->ring_hi, a), e}};
    for (int i = 0; i < 2; ++i)
        for (int64_t j = missing[i][0]; j < missing[i][1];) {
            const int64_t row = ring_row(ts, c->t, j),
                          n = min64(missing[i][1] - j, c->t->ring - row);
            pack_kv(c, ts, s, kvh, j, n, row);
            j += n;
        }
    ts->ring_lo = a;
    ts->ring_hi = e;
}

/* Whether the kernels can read K and V where they are: float32 rows of exactly the ring's
 * layout (head_dim floats, a multiple of CS_DIM_STEP, consecutive keys head_dim floats apart,
 * no descale), as a contiguous [.., N, d] tensor has them. A tile whose keys do not fit the
 * ring reads them so; converting them would copy every key again for every tile (at N = 4096,
 * d = 128: 13% of a call), and so does a tile under a window. Where the keys fit and no window
 * cuts them, the ring's copy, made once and aligned, is read by every tile (2-3% faster than
 * the source rows). */
static int kv_in_place(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                       const fp_args *a) {
    return p->dtype == FLASHPORT_F32 && !ops->load_kv && t->dq == p->head_dim &&
           p->k.seq == t->dq && p->v.seq == t->dq && !a->k_descale && !a->v_descale;
}

/* The block of the n keys from key j0 (a whole block, or the tile's last keys) in place: its
 * K and V rows at *kb and *vb, and its length, n down to a whole number of CS_KEY_STEP, so that
 * no zero rows are needed past it; 0 when the keys cross a page (smaller blocks would cost
 * more than converting) or are fewer than a step: the ring takes the block. */
static int in_place_block(const call *c, const cs_seq *s, int64_t kvh, int64_t j0, int64_t n,
                          const float **kb, const float **vb) {
    if (!c->kv_in_place) return 0;
    int64_t k_at, v_at;
    if (cs_kv_rows(c->p, s, kvh, j0, &k_at, &v_at) < n) return 0;
    *kb = (const float *)c->a->k + k_at;
    *vb = (const float *)c->a->v + v_at;
    return (int)(n / CS_KEY_STEP * CS_KEY_STEP);
}

/* ---- scores: the window and the modifiers ---- */

/* Union of the keys its rows see of a tile of nq positions from i0 ([0, 0) when none): what
 * the tile visits, for its cost. */
static void tile_keys(const fp_problem *p, const cs_seq *s, int64_t i0, int64_t nq, int64_t *lo,
                      int64_t *hi) {
    *lo = INT64_MAX;
    *hi = 0;
    for (int64_t i = i0; i < i0 + nq; ++i) {
        int64_t a, e;
        cs_row_keys(p, s, i, &a, &e);
        if (e > a) {
            *lo = min64(*lo, a);
            *hi = max64(*hi, e);
        }
    }
    if (*hi == 0) *lo = 0;
}

/* Row r of a tile is position i0 + r / nh of query head h0 + r % nh (within KV head kvh's
 * group), so rows that share a position, and so a window, sit next to each other. */
typedef struct tile_pos {
    const cs_seq *s;
    int64_t kvh, h0, i0;
    int nh;
} tile_pos;

static int64_t head_of(const call *c, const tile_pos *tp, int r) {
    return tp->kvh * c->group + tp->h0 + r % tp->nh;
}
static int64_t position_of(const tile_pos *tp, int r) { return tp->i0 + r / tp->nh; }

/* Per-row state of the modifiers: ALiBi slopes (times log2 e) and bias rows. Padding rows get
 * finite values, since the kernels load whole registers of rows. */
static void tile_modifiers(const call *c, tile_scratch *ts, const tile_pos *tp, int real) {
    const fp_problem *p = c->p;
    const float *slopes = (const float *)c->a->alibi_slopes;
    for (int r = 0; r < c->t->rows; ++r) {
        ts->slope[r] = 0.0f;
        ts->diag[r] = 0.0f;
        if (r >= real) continue;
        const int64_t h = head_of(c, tp, r), i = position_of(tp, r);
        if (slopes) ts->slope[r] = (float)(CS_LOG2E * cs_alibi_slope(p, slopes, tp->s->b, h));
        if (p->bias.enabled) ts->bias_at[r] = cs_bias_at(p, tp->s, h, i);
    }
}

/* The bias of the block starting at key j0, times log2 e, laid out as the scores, for rows
 * r < real over the keys each sees. */
static void gather_bias(const call *c, tile_scratch *ts, int real, int64_t j0) {
    for (int r = 0; r < real; ++r)
        cs_bias_row(c->p, c->a->bias, ts->bias_at[r] + j0 * c->p->bias.key, ts->lo[r], ts->hi[r],
                    (float)CS_LOG2E, ts->bias + r, c->t->rows);
}

/* ---- the tile ---- */

/* Converts the tile's query rows (unscaled: the scale is applied to the scores, one rounding
 * at their own magnitude; FP8 rows times their descale) and lays them out as transposed
 * panels; rows past `real` are zero. `rows_tmp` holds real * dq floats. */
static void pack_q(const call *c, tile_scratch *ts, const tile_pos *tp, int real, int rows,
                   float *rows_tmp) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    for (int r = 0; r < real; ++r) {
        const int64_t h = head_of(c, tp, r), i = position_of(tp, r);
        c->ops->load_row(cs_q_row(c->a->q, &p->q, c->in_size, tp->s, h, i), p->dtype, p->head_dim,
                         dq,
                         cs_descale(c->p, c->a->q_descale, p->heads_q, p->seq_q, tp->s->b, h, i),
                         rows_tmp + (int64_t)r * dq);
    }
    if (c->ops->pack_q) {
        c->ops->pack_q(rows_tmp, real, rows, dq, ts->q);
        return;
    }
    for (int r = 0; r < rows; ++r) {
        float *panel = ts->q + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        if (r < real)
            for (int64_t col = 0; col < dq; ++col)
                panel[col * CS_Q_PANEL] = rows_tmp[(int64_t)r * dq + col];
        else
            for (int64_t col = 0; col < dq; ++col) panel[col * CS_Q_PANEL] = 0.0f;
    }
}

/* O and LSE of the tile's rows (cs_row_normaliser: sinks, rows without mass). */
static void store_tile(const call *c, tile_scratch *ts, const tile_pos *tp, int real) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    const float *sinks = (const float *)c->a->sinks;
    float *lse = (float *)c->a->lse;
    for (int r = 0; r < real; ++r) {
        const int64_t h = head_of(c, tp, r), i = position_of(tp, r);
        float mul, row_lse;
        cs_row_normaliser(ts->m[r], ts->l[r], sinks ? sinks[h] : -INFINITY, &mul, &row_lse);
        c->ops->store_row(ts->o + (int64_t)r * dq, p->head_dim, mul, p->out_dtype,
                          (void *)cs_q_row(c->a->o, &p->o, c->out_size, tp->s, h, i));
        if (lse) lse[cs_lse_index(p, tp->s, h, i)] = row_lse;
    }
}

/* The keys the next tile adds to the ring, prefetched a share at a time: keys [lo, lo + n), done
 * of them so far, over `calls` calls of the P V kernel. */
typedef struct next_keys {
    int64_t lo, n, calls, done;
} next_keys;

static void prefetch_step(const call *c, const cs_seq *s, int64_t kvh, next_keys *pf) {
    if (pf->done >= pf->n) return;
    const int64_t take = min64(pf->n - pf->done, (pf->n + pf->calls - 1) / pf->calls);
    cs_prefetch_keys(c->p, c->a, s, kvh, pf->lo + pf->done, take);
    pf->done += take;
}

/* One tile: query positions [i0, i0 + nq) of query heads [h0, h0 + nh) within the group of KV
 * head kvh, of sequence s. next_i0: the first position of the tile of the same sequence and
 * heads this thread likely runs next, or -1. */
static void run_tile(const call *c, tile_scratch *ts, const cs_seq *s, int64_t kvh, int64_t h0,
                     int64_t i0, int64_t next_i0) {
    const fp_problem *p = c->p;
    const cs_tiling *t = c->t;
    const cs_kernel_ops *ops = c->ops;
    const int64_t dq = t->dq;
    const tile_pos tp = {s, kvh, h0, i0, (int)min64(t->heads, c->group - h0)};
    const int nq = (int)cs_tile_queries(t, i0, s->nq);
    const int real = tp.nh * nq;
    const int rows = t->rows;                                /* a multiple of CS_Q_PANEL */
    const int score_rows = (int)round_up(real, CS_ROW_STEP); /* rows past these are all padding */

    int64_t k_lo = INT64_MAX, k_hi = 0; /* the keys the tile visits */
    for (int r = 0; r < rows; ++r) {
        ts->m[r] = -INFINITY;
        ts->l[r] = 0.0f;
        ts->alpha[r] = 1.0f;
        ts->key_lo[r] = ts->key_hi[r] = 0;
        if (r >= real) continue;
        cs_row_keys(p, s, position_of(&tp, r), &ts->key_lo[r], &ts->key_hi[r]);
        if (ts->key_hi[r] > ts->key_lo[r]) {
            k_lo = min64(k_lo, ts->key_lo[r]);
            k_hi = max64(k_hi, ts->key_hi[r]);
        }
    }
    cs_score_mods mods = c->mods;
    if (p->alibi != FLASHPORT_ALIBI_NONE || p->bias.enabled) tile_modifiers(c, ts, &tp, real);
    if (p->alibi != FLASHPORT_ALIBI_NONE) {
        mods.slope = ts->slope;
        mods.diag = ts->diag;
    }
    if (p->bias.enabled) {
        /* Entries of keys a row does not see are read by the softmax (and discarded): keep
         * them defined. */
        memset(ts->bias, 0, (size_t)t->keys * (size_t)rows * sizeof(float));
        mods.bias = ts->bias;
    }
    pack_q(c, ts, &tp, real, rows, ts->o); /* O's space is free until the first block */
    memset(ts->o, 0, (size_t)rows * (size_t)dq * sizeof(float));
    /* The P V kernel reads whole groups of rows, and the last group's rows past score_rows are
     * never written: zero keeps them finite. */
    const int group_rows = (int)round_up(real, CS_PV_ROWS);
    for (int64_t j = 0; j < t->keys; ++j)
        for (int r = score_rows; r < group_rows; ++r) ts->s[j * rows + r] = 0.0f;

    /* The keys the next tile adds to the ring (a tile height of them with a window) come from
     * memory: prefetched while this tile computes, a few per call of the P V kernel, since a
     * burst of them stalls the kernels as much as the misses would. */
    next_keys pf = {0, 0, 1, 0};
    if (next_i0 >= 0) {
        int64_t lo, hi;
        tile_keys(p, s, next_i0, cs_tile_queries(t, next_i0, s->nq), &lo, &hi);
        pf.lo = hi > k_hi ? max64(lo, k_hi) : lo;
        pf.n = max64(0, (hi > k_hi ? hi : min64(hi, k_lo)) - pf.lo);
        const int64_t pv_calls = ops->pv_block ? 1
                                               : ((real + CS_PV_ROWS - 1) / CS_PV_ROWS) *
                                                     ((dq + ops->pv_cols - 1) / ops->pv_cols);
        /* A tile whose rows see no key (k_lo > k_hi) runs no block. */
        const int64_t blocks = k_hi > k_lo ? (k_hi - k_lo + t->keys - 1) / t->keys : 0;
        pf.calls = max64(1, blocks * pv_calls);
    }
    /* The tile's keys go into the ring all at once when they fit, else a block at a time,
     * except the blocks the kernels read in place. Under a window every key serves only the
     * few tiles whose positions reach it, so where the kernels can read them in place a copy
     * would cost more than it saves. */
    const int windowed = p->window_left >= 0 && p->window_left < s->nkv;
    const int whole = !(windowed && c->kv_in_place) && k_hi - k_lo <= t->ring - CS_KEY_STEP;
    if (whole && k_hi > k_lo) ring_fill(c, ts, s, kvh, k_lo, k_hi);
    for (int64_t j0 = k_lo; j0 < k_hi;) {
        const float *kb, *vb;
        int n = whole ? 0 : in_place_block(c, s, kvh, j0, min64(t->keys, k_hi - j0), &kb, &vb);
        if (n == 0) {
            if (!whole) ring_fill(c, ts, s, kvh, j0, min64(j0 + t->keys, k_hi));
            /* A block also ends where the ring wraps around. Its rows up to a whole step are
             * zero, so the micro-kernels can run on whole steps: they are free rows of the
             * ring (keys past the fill) or the rows past its end. */
            const int64_t row = ring_row(ts, t, j0);
            n = (int)min64(min64(t->keys, k_hi - j0), t->ring - row);
            const int padded = (int)round_up(n, CS_KEY_STEP);
            float *kr = ts->k + row * dq, *vr = ts->v + row * dq;
            memset(kr + (int64_t)n * dq, 0, (size_t)(padded - n) * (size_t)dq * sizeof(float));
            memset(vr + (int64_t)n * dq, 0, (size_t)(padded - n) * (size_t)dq * sizeof(float));
            kb = kr;
            vb = vr;
        }
        for (int r = 0; r < score_rows; ++r) {
            const int a = (int)max64(0, min64(ts->key_lo[r] - j0, n));
            const int e = (int)max64(0, min64(ts->key_hi[r] - j0, n));
            ts->lo[r] = e > a ? a : 0;
            ts->hi[r] = e > a ? e : 0;
        }
        ops->scores(ts->q, kb, p->head_dim, dq, score_rows, ts->lo, ts->hi, ts->s, rows);
        if (mods.slope)
            for (int r = 0; r < real; ++r)
                ts->diag[r] = (float)(position_of(&tp, r) + s->nkv - s->nq - j0);
        if (mods.bias) gather_bias(c, ts, real, j0);
        ops->softmax(ts->s, rows, score_rows, ts->lo, ts->hi, &mods, ts->m, ts->l, ts->alpha);
        if (ops->pv_block) {
            ops->pv_block(ts->s, rows, vb, p->head_dim, dq, real, ts->lo, ts->hi, ts->alpha, ts->o);
            prefetch_step(c, s, kvh, &pf);
            j0 += n;
            continue;
        }
        /* The group kernel takes the keys every real row of the group sees; where its rows'
         * keys differ, the ranged one adds each row's others in the same registers, and no row
         * ever touches a key it cannot see (0 * NaN from a hidden V row must not reach it).
         * Columns outermost: one strip of V serves every group from L1. */
        for (int g = 0; g < real; g += CS_PV_ROWS) {
            int a = 0, e = n, ragged = 0;
            for (int r = g; r < g + CS_PV_ROWS && r < real; ++r) {
                a = ts->lo[r] > a ? ts->lo[r] : a;
                e = ts->hi[r] < e ? ts->hi[r] : e;
                ragged |= ts->lo[r] != ts->lo[g] || ts->hi[r] != ts->hi[g];
            }
            ts->group_lo[g / CS_PV_ROWS] = a;
            ts->group_hi[g / CS_PV_ROWS] = e > a ? e : a;
            ts->group_ragged[g / CS_PV_ROWS] = ragged;
        }
        for (int64_t c0 = 0; c0 < dq; c0 += ops->pv_cols)
            for (int g = 0; g < real; g += CS_PV_ROWS) {
                const int a = ts->group_lo[g / CS_PV_ROWS], e = ts->group_hi[g / CS_PV_ROWS];
                const int64_t cols = min64(ops->pv_cols, dq - c0);
                if (!ts->group_ragged[g / CS_PV_ROWS])
                    ops->pv_rows(ts->s + (int64_t)a * rows + g, rows, vb + (int64_t)a * dq + c0, dq,
                                 cols, e - a, ts->alpha + g, ts->o + (int64_t)g * dq + c0);
                else
                    ops->pv_rows_ranged(ts->s + g, rows, vb + c0, dq, cols, a, e,
                                        (int)min64(CS_PV_ROWS, real - g), ts->lo + g, ts->hi + g,
                                        ts->alpha + g, ts->o + (int64_t)g * dq + c0);
                prefetch_step(c, s, kvh, &pf);
            }
        j0 += n;
    }
    store_tile(c, ts, &tp, real);
}

static tile_scratch scratch_of(const call *c, void *base, int thread) {
    char *b = (char *)base + (size_t)thread * c->L.total;
    tile_scratch ts = {
        .q = (float *)(b + c->L.q),
        .o = (float *)(b + c->L.o),
        .k = (float *)(b + c->L.k),
        .v = (float *)(b + c->L.v),
        .s = (float *)(b + c->L.s),
        .bias = (float *)(b + c->L.bias),
        .m = (float *)(b + c->L.m),
        .l = (float *)(b + c->L.l),
        .alpha = (float *)(b + c->L.alpha),
        .slope = (float *)(b + c->L.slope),
        .diag = (float *)(b + c->L.diag),
        .lo = (int *)(b + c->L.lo),
        .hi = (int *)(b + c->L.hi),
        .key_lo = (int64_t *)(b + c->L.key_lo),
        .key_hi = (int64_t *)(b + c->L.key_hi),
        .bias_at = (int64_t *)(b + c->L.bias_at),
        .group_lo = (int *)(b + c->L.group_lo),
        .group_hi = (int *)(b + c->L.group_hi),
        .group_ragged = (int *)(b + c->L.group_ragged),
        .ring_b = -1,
    };
    return ts;
}

/* ---- work items ---- */

/* Most expensive first; ties (equal tiles of a dense problem) last query tile first, then in
 * batch order, so that the order does not depend on qsort. */
static int by_cost(const void *x, const void *y) {
    const tile_entry *a = (const tile_entry *)x, *b = (const tile_entry *)y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->i0 != b->i0) return a->i0 > b->i0 ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

/* Every query tile of every sequence. With a team, sorted by cost (rows times keys visited,
 * plus the rows' own conversion and store) so that the long ones start early and the short
 * ones fill the gaps at the end. One thread has no gaps to fill: it takes each sequence's
 * tiles in position order, so that each tile finds all but its newest keys in the K/V ring
 * (in cost order a window's partial last tile and its first ones, which see fewer keys, fall
 * between tiles far from them and convert every key again). */
static int64_t list_tiles(const call *c, tile_entry *list) {
    const fp_problem *p = c->p;
    const int sorted = c->t->threads > 1;
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        const cs_seq s = cs_seq_of(c->p, c->a, b);
        for (int64_t i0 = 0, nq; i0 < s.nq; i0 += nq) {
            nq = cs_tile_queries(c->t, i0, s.nq);
            int64_t lo = 0, hi = 0;
            if (sorted) tile_keys(p, &s, i0, nq, &lo, &hi);
            list[n++] = (tile_entry){nq * (hi - lo + 1), b, i0};
        }
    }
    if (sorted) qsort(list, (size_t)n, sizeof *list, by_cost);
    return n;
}

/* Work item `it`: a query tile of the list, one KV head, one chunk of its query heads; the
 * items of one head and chunk are consecutive, so that a thread's next tile is usually of the
 * same head and finds most of its keys in the ring. */
typedef struct work_list {
    const tile_entry *tiles;
    int64_t tiles_n, head_chunks, per_tile, items;
} work_list;

/* Item `it` of a team of `threads`, which take items in about that turn: the thread's next item
 * is likely `threads` further on. */
static void run_item(const call *c, tile_scratch *ts, const work_list *w, int64_t it, int threads) {
    const tile_entry *e = &w->tiles[it % w->tiles_n];
    const int64_t rest = it / w->tiles_n, next = it + threads;
    const tile_entry *n =
        next < w->items && next / w->tiles_n == rest ? &w->tiles[next % w->tiles_n] : NULL;
    const cs_seq s = cs_seq_of(c->p, c->a, e->b);
    run_tile(c, ts, &s, rest / w->head_chunks, rest % w->head_chunks * c->t->heads, e->i0,
             n && n->b == e->b ? n->i0 : -1);
}

void cs_attention(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                  const fp_args *args, void *scratch) {
    call c = {
        .ops = ops,
        .t = t,
        .p = p,
        .a = args,
        .in_size = fp_dtype_size(p->dtype),
        .out_size = fp_dtype_size(p->out_dtype),
        .group = p->heads_q / p->heads_kv,
        .kv_in_place = kv_in_place(ops, t, p, args),
        .L = layout_of(t),
    };
    c.mods.scale2 = (float)(p->scale * CS_LOG2E);
    if (p->softcap > 0.0f) {
        c.mods.cap_in = p->scale / p->softcap;
        c.mods.cap_out = (float)(p->softcap * CS_LOG2E);
    }
    tile_entry *tiles = (tile_entry *)((char *)scratch + c.L.total * (size_t)t->threads);
    work_list w = {tiles, list_tiles(&c, tiles), (c.group + t->heads - 1) / t->heads, 0, 0};
    w.per_tile = p->heads_kv * w.head_chunks;
    w.items = w.tiles_n * w.per_tile;
#if defined(_OPENMP)
    const int threads = (int)max64(1, min64(t->threads, w.items));
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num();
        cs_bind_worker(me);
        tile_scratch ts = scratch_of(&c, scratch, me);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < w.items; ++it) run_item(&c, &ts, &w, it, threads);
    }
#else
    tile_scratch ts = scratch_of(&c, scratch, 0);
    for (int64_t it = 0; it < w.items; ++it) run_item(&c, &ts, &w, it, 1);
#endif
}
