#include "attention.h"

#include <math.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "topology.h"

#define ALIGN_FLOATS 16 /* 64 bytes: every scratch array starts on a cache line */

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void cs_tiling_choose(const fp_problem *p, int threads, cs_tiling *t) {
    t->dq = round_up(p->head_dim, CS_DIM_STEP);
    /* Up to 96 rows: each converted K/V block then serves enough rows that converting it is
     * noise; Q and O of the tile (2 * rows * dq floats) stay within about 400 KiB of L2. */
    int64_t rows = min64(96, max64(CS_Q_PANEL, 65536 / t->dq));
    rows = rows / CS_Q_PANEL * CS_Q_PANEL;
    const int64_t group = p->heads_q / p->heads_kv;
    t->heads = (int)min64(group, rows);
    t->queries = (int)min64(p->seq_q, max64(1, rows / t->heads));
    t->threads = threads < 1 ? 1 : threads;
    /* With only a few equal tiles per thread (no causal mask), the last round leaves threads
     * idle unless the tile count divides evenly: round it up to a multiple that does. */
    const int64_t per_q_tile = p->batch * p->heads_kv * ((group + t->heads - 1) / t->heads);
    int64_t q_tiles = (p->seq_q + t->queries - 1) / t->queries;
    if (!p->causal && t->threads > 1 && per_q_tile * q_tiles < 8 * (int64_t)t->threads) {
        int64_t a = per_q_tile, b = t->threads;
        while (b) {
            const int64_t r = a % b;
            a = b;
            b = r;
        }
        q_tiles = round_up(q_tiles, t->threads / a);
        t->queries = (int)max64(1, (p->seq_q + q_tiles - 1) / q_tiles);
    }
    t->rows = (int)round_up((int64_t)t->heads * t->queries, CS_Q_PANEL);
    /* Blocks of K and V of about 64 KiB each (L2): longer blocks spread the per-block softmax
     * and rescaling over more products; measured best between 64 and 128 keys at d = 64..128. */
    int64_t keys = min64(128, max64(CS_KEY_STEP, 16384 / t->dq));
    keys = keys / CS_KEY_STEP * CS_KEY_STEP;
    t->keys = (int)min64(keys, round_up(p->seq_kv, CS_KEY_STEP));
}

/* Floats of one thread's scratch, each array rounded to a cache line. */
typedef struct scratch_layout {
    int64_t q, o, k, v, s, m, l, alpha, count, visible, common, total;
} scratch_layout;

static scratch_layout layout_of(const cs_tiling *t) {
    scratch_layout L;
    int64_t at = 0;
#define PLACE(field, n) (L.field = at, at += round_up((n), ALIGN_FLOATS))
    PLACE(q, (int64_t)t->rows * t->dq);
    PLACE(o, (int64_t)t->rows * t->dq);
    PLACE(k, (int64_t)t->keys * t->dq);
    PLACE(v, (int64_t)t->keys * t->dq);
    PLACE(s, (int64_t)t->rows * t->keys);
    PLACE(m, t->rows);
    PLACE(l, t->rows);
    PLACE(alpha, t->rows);
    PLACE(count, t->rows); /* ints share the float slots: both are 4 bytes */
    PLACE(visible, t->rows);
    PLACE(common, t->rows / CS_PV_ROWS);
#undef PLACE
    L.total = at;
    return L;
}

size_t cs_scratch_bytes(const cs_tiling *t) {
    return (size_t)layout_of(t).total * sizeof(float) * (size_t)t->threads;
}

void cs_tiling_to_params(const cs_tiling *t, int64_t param[8]) {
    param[0] = t->heads;
    param[1] = t->queries;
    param[2] = t->rows;
    param[3] = t->keys;
    param[4] = t->dq;
    param[5] = t->threads;
}

void cs_tiling_from_params(const int64_t param[8], cs_tiling *t) {
    t->heads = (int)param[0];
    t->queries = (int)param[1];
    t->rows = (int)param[2];
    t->keys = (int)param[3];
    t->dq = param[4];
    t->threads = (int)param[5];
}

/* Everything a tile needs to know about the call. */
typedef struct call {
    const cs_kernel_ops *ops;
    const cs_tiling *t;
    const fp_problem *p;
    const fp_args *a;
    size_t esize;
    int64_t group;       /* query heads per KV head */
    float scale2;        /* scale * log2(e): softmax in base 2 */
    scratch_layout L;
} call;

typedef struct tile_scratch {
    float *q, *o, *k, *v, *s, *m, *l, *alpha;
    int *count, *visible, *common; /* common: keys every row of a P V group sees */
} tile_scratch;

static const void *elem(const void *base, const flashport_strides *st, int64_t b, int64_t h,
                        int64_t n, size_t esize) {
    return (const char *)base + (size_t)(b * st->batch + h * st->head + n * st->seq) * esize;
}

/* Converts keys [j0, j0 + n) of K and V into the block buffers; rows up to `padded` are zero
 * so the micro-kernels can run on whole steps. */
static void pack_kv(const call *c, tile_scratch *ts, int64_t b, int64_t kvh, int64_t j0, int n,
                    int padded) {
    const fp_problem *p = c->p;
    for (int j = 0; j < n; ++j) {
        c->ops->load_row(elem(c->a->k, &p->k, b, kvh, j0 + j, c->esize), p->dtype, p->head_dim,
                         c->t->dq, 1.0f, ts->k + (int64_t)j * c->t->dq);
        c->ops->load_row(elem(c->a->v, &p->v, b, kvh, j0 + j, c->esize), p->dtype, p->head_dim,
                         c->t->dq, 1.0f, ts->v + (int64_t)j * c->t->dq);
    }
    const size_t tail = (size_t)(padded - n) * (size_t)c->t->dq * sizeof(float);
    memset(ts->k + (int64_t)n * c->t->dq, 0, tail);
    memset(ts->v + (int64_t)n * c->t->dq, 0, tail);
}

/* Row r of a tile is position i0 + r / nh of query head h0 + r % nh (within KV head kvh's
 * group), so rows that share a position, and so a causal limit, sit next to each other. */
typedef struct tile_pos {
    int64_t b, kvh, h0, i0;
    int nh;
} tile_pos;

static int64_t head_of(const call *c, const tile_pos *tp, int r) {
    return tp->kvh * c->group + tp->h0 + r % tp->nh;
}
static int64_t position_of(const tile_pos *tp, int r) { return tp->i0 + r / tp->nh; }

/* Converts the tile's query rows (unscaled: the scale is applied to the scores, one rounding
 * at their own magnitude) and lays them out as transposed
 * panels; rows past `real` are zero. `rows_tmp` holds real * dq floats. */
static void pack_q(const call *c, tile_scratch *ts, const tile_pos *tp, int real, int rows,
                   float *rows_tmp) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    for (int r = 0; r < real; ++r)
        c->ops->load_row(elem(c->a->q, &p->q, tp->b, head_of(c, tp, r), position_of(tp, r), c->esize),
                         p->dtype, p->head_dim, dq, 1.0f, rows_tmp + (int64_t)r * dq);
    for (int r = 0; r < rows; ++r) {
        float *panel = ts->q + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        if (r < real)
            for (int64_t col = 0; col < dq; ++col) panel[col * CS_Q_PANEL] = rows_tmp[(int64_t)r * dq + col];
        else
            for (int64_t col = 0; col < dq; ++col) panel[col * CS_Q_PANEL] = 0.0f;
    }
}

/* One tile: query positions [i0, i0 + nq) of query heads [h0, h0 + nh) within the group of KV
 * head kvh. */
static void run_tile(const call *c, tile_scratch *ts, int64_t b, int64_t kvh, int64_t h0,
                     int64_t i0) {
    const fp_problem *p = c->p;
    const cs_tiling *t = c->t;
    const cs_kernel_ops *ops = c->ops;
    const int64_t dq = t->dq;
    const tile_pos tp = {b, kvh, h0, i0, (int)min64(t->heads, c->group - h0)};
    const int nq = (int)min64(t->queries, p->seq_q - i0);
    const int real = tp.nh * nq;
    const int rows = t->rows;                           /* a multiple of CS_Q_PANEL */
    const int score_rows = (int)round_up(real, CS_ROW_STEP); /* rows past these are all padding */
    const int64_t causal_shift = p->seq_kv - p->seq_q;

    int64_t last_key = 0;
    for (int r = 0; r < rows; ++r) {
        ts->m[r] = -INFINITY;
        ts->l[r] = 0.0f;
        ts->alpha[r] = 1.0f;
        ts->count[r] = 0;
        if (r >= real) continue;
        const int64_t count =
            p->causal ? min64(p->seq_kv, max64(0, position_of(&tp, r) + causal_shift + 1)) : p->seq_kv;
        ts->count[r] = (int)min64(count, INT32_MAX);
        last_key = max64(last_key, count);
    }
    pack_q(c, ts, &tp, real, rows, ts->o); /* O's space is free until the first block */
    memset(ts->o, 0, (size_t)rows * (size_t)dq * sizeof(float));
    /* Score rows past score_rows are never written: zero keeps the P V kernel's padding rows
     * finite. */
    memset(ts->s, 0, (size_t)t->keys * (size_t)rows * sizeof(float));

    for (int64_t j0 = 0; j0 < last_key; j0 += t->keys) {
        const int n = (int)min64(t->keys, last_key - j0);
        const int padded = (int)round_up(n, CS_KEY_STEP);
        pack_kv(c, ts, b, kvh, j0, n, padded);
        ops->scores(ts->q, ts->k, p->head_dim, dq, score_rows, padded, ts->s, rows);
        for (int r = 0; r < score_rows; ++r)
            ts->visible[r] = (int)max64(0, min64((int64_t)ts->count[r] - j0, n));
        ops->softmax(ts->s, rows, score_rows, ts->visible, c->scale2, ts->m, ts->l, ts->alpha);
        /* The group kernel takes the keys every real row of the group sees; a row's keys past
         * that are added by itself afterwards (the group kernel applies the rescaling), so that
         * no row ever touches a key it cannot see (0 * NaN from a hidden V row must not reach
         * it). Columns outermost: one strip of V serves every group from L1. */
        for (int g = 0; g < real; g += CS_PV_ROWS) {
            int common = n;
            for (int r = g; r < g + CS_PV_ROWS && r < real; ++r)
                common = ts->visible[r] < common ? ts->visible[r] : common;
            ts->common[g / CS_PV_ROWS] = common;
        }
        for (int64_t c0 = 0; c0 < dq; c0 += CS_PV_COLS)
            for (int g = 0; g < real; g += CS_PV_ROWS)
                ops->pv_rows(ts->s + g, rows, ts->v + c0, dq, min64(CS_PV_COLS, dq - c0),
                             ts->common[g / CS_PV_ROWS], ts->alpha + g, ts->o + (int64_t)g * dq + c0);
        for (int r = 0; r < real; ++r)
            if (ts->visible[r] > ts->common[r / CS_PV_ROWS])
                ops->pv_row(ts->s + r, rows, ts->v, dq, ts->common[r / CS_PV_ROWS], ts->visible[r],
                            ts->o + (int64_t)r * dq);
    }

    float *lse = (float *)c->a->lse;
    for (int r = 0; r < real; ++r) {
        const int64_t head = head_of(c, &tp, r), i = position_of(&tp, r);
        const float l = ts->l[r];
        /* A row with no visible key has l = 0: O = 0 and LSE = -inf. */
        ops->store_row(ts->o + (int64_t)r * dq, p->head_dim, l == 0.0f ? 0.0f : 1.0f / l,
                       p->dtype, (void *)elem(c->a->o, &p->o, b, head, i, c->esize));
        if (lse)
            lse[(b * p->heads_q + head) * p->seq_q + i] =
                l == 0.0f ? -INFINITY
                          : (float)(((double)ts->m[r] + log2((double)l)) * 0.69314718055994530942);
    }
}

static tile_scratch scratch_of(const call *c, void *base, int thread) {
    float *f = (float *)base + (int64_t)thread * c->L.total;
    tile_scratch ts = {
        .q = f + c->L.q, .o = f + c->L.o, .k = f + c->L.k, .v = f + c->L.v, .s = f + c->L.s,
        .m = f + c->L.m, .l = f + c->L.l, .alpha = f + c->L.alpha,
        .count = (int *)(f + c->L.count), .visible = (int *)(f + c->L.visible),
        .common = (int *)(f + c->L.common),
    };
    return ts;
}

#if defined(_OPENMP)
/* Worker threads are bound to cores once; the caller's own thread is left where it is, so the
 * library never changes the application's affinity. */
static _Thread_local int bound_core = -1;
#endif

/* Work item `it` of the call's list: tiles are handed out last query tile first. Under a
 * causal mask those see the most keys, so the long ones start early and the short ones fill
 * the gaps at the end. */
typedef struct work_list {
    int64_t head_chunks, q_tiles, per_q_tile, items;
} work_list;

static void run_item(const call *c, tile_scratch *ts, const work_list *w, int64_t it) {
    const int64_t qt = w->q_tiles - 1 - it / w->per_q_tile, rest = it % w->per_q_tile;
    const int64_t hc = rest % w->head_chunks;
    const int64_t kvh = rest / w->head_chunks % c->p->heads_kv;
    const int64_t b = rest / w->head_chunks / c->p->heads_kv;
    run_tile(c, ts, b, kvh, hc * c->t->heads, qt * c->t->queries);
}

void cs_attention(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                  const fp_args *args, void *scratch) {
    call c = {
        .ops = ops, .t = t, .p = p, .a = args, .esize = p->dtype == FLASHPORT_F32 ? 4 : 2,
        .group = p->heads_q / p->heads_kv, .scale2 = p->scale * 1.44269504088896340736f,
        .L = layout_of(t),
    };
    work_list w;
    w.head_chunks = (c.group + t->heads - 1) / t->heads;
    w.q_tiles = (p->seq_q + t->queries - 1) / t->queries;
    w.per_q_tile = p->batch * p->heads_kv * w.head_chunks;
    w.items = w.per_q_tile * w.q_tiles;
#if defined(_OPENMP)
    const int threads = (int)min64(t->threads, w.items);
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num();
        if (me > 0 && bound_core != me) {
            cs_bind_thread_to_core(me);
            bound_core = me;
        }
        tile_scratch ts = scratch_of(&c, scratch, me);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < w.items; ++it) run_item(&c, &ts, &w, it);
    }
#else
    tile_scratch ts = scratch_of(&c, scratch, 0);
    for (int64_t it = 0; it < w.items; ++it) run_item(&c, &ts, &w, it);
#endif
}
