#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "fp_half.h"
#include "topology.h"

#define ALIGN_BYTES 64 /* every scratch array starts on a cache line */
#define LOG2E 1.44269504088896340736

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int masked(const fp_problem *p) {
    return p->causal || p->window_left >= 0 || p->window_right >= 0;
}

void cs_tiling_choose(const fp_problem *p, int threads, cs_tiling *t) {
    t->dq = round_up(p->head_dim, CS_DIM_STEP);
    /* Up to 96 rows: each converted K/V block then serves enough rows that converting it is
     * noise; Q and O of the tile (2 * rows * dq floats) stay within about 400 KiB of L2. */
    int64_t rows = min64(96, max64(CS_Q_PANEL, 65536 / t->dq));
    rows = rows / CS_Q_PANEL * CS_Q_PANEL;
    const int64_t group = p->heads_q / p->heads_kv;
    t->heads = (int)min64(group, rows);
    t->queries = (int)max64(1, min64(p->seq_q, rows / t->heads));
    t->threads = threads < 1 ? 1 : threads;
    /* With only a few equal tiles per thread (no mask), the last round leaves threads idle
     * unless the tile count divides evenly: round it up to a multiple that does. */
    const int64_t per_q_tile = p->batch * p->heads_kv * ((group + t->heads - 1) / t->heads);
    int64_t q_tiles = (p->seq_q + t->queries - 1) / t->queries;
    if (!masked(p) && t->threads > 1 && per_q_tile * q_tiles < 8 * (int64_t)t->threads) {
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
    t->keys = (int)min64(keys, max64(CS_KEY_STEP, round_up(p->seq_kv, CS_KEY_STEP)));
    /* Packed sequences of total_q rows cut into tiles: each sequence adds at most one partial
     * tile. */
    t->max_tiles = p->q_varlen ? (p->total_q + p->batch * (t->queries - 1)) / t->queries
                               : p->batch * ((p->seq_q + t->queries - 1) / t->queries);
}

/* Byte offsets of one thread's scratch arrays, each on a cache line. */
typedef struct scratch_layout {
    size_t q, o, k, v, s, bias, m, l, alpha, lo, hi, key_lo, key_hi, slope, diag, bias_at,
        group_lo, group_hi, total;
} scratch_layout;

static scratch_layout layout_of(const cs_tiling *t) {
    scratch_layout L;
    size_t at = 0;
#define PLACE(field, n, type) \
    (L.field = at, at += (size_t)round_up((int64_t)(n) * (int64_t)sizeof(type), ALIGN_BYTES))
    PLACE(q, (int64_t)t->rows * t->dq, float);
    PLACE(o, (int64_t)t->rows * t->dq, float);
    PLACE(k, (int64_t)t->keys * t->dq, float);
    PLACE(v, (int64_t)t->keys * t->dq, float);
    PLACE(s, (int64_t)t->rows * t->keys, float);
    PLACE(bias, (int64_t)t->rows * t->keys, float);
    PLACE(m, t->rows, float);
    PLACE(l, t->rows, float);
    PLACE(alpha, t->rows, float);
    PLACE(lo, t->rows, int);
    PLACE(hi, t->rows, int);
    PLACE(key_lo, t->rows, int64_t);
    PLACE(key_hi, t->rows, int64_t);
    PLACE(slope, t->rows, float);
    PLACE(diag, t->rows, float);
    PLACE(bias_at, t->rows, int64_t);
    PLACE(group_lo, t->rows / CS_PV_ROWS, int);
    PLACE(group_hi, t->rows / CS_PV_ROWS, int);
#undef PLACE
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

_Static_assert(sizeof(cs_tiling) <= FP_PLAN_KERNEL_PARAMS_BYTES,
               "a plan holds the kernel parameters");

void cs_tiling_to_plan(const cs_tiling *t, fp_plan *plan) {
    memcpy(plan->kernel_params.bytes, t, sizeof *t);
}

void cs_tiling_from_plan(const fp_plan *plan, cs_tiling *t) {
    memcpy(t, plan->kernel_params.bytes, sizeof *t);
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
    scratch_layout L;
} call;

typedef struct tile_scratch {
    float *q, *o, *k, *v, *s, *m, *l, *alpha, *slope, *diag;
    float *bias;              /* bias * log2 e of the block, laid out as the scores */
    int *lo, *hi;             /* keys of the current block each row sees, block-relative */
    int64_t *key_lo, *key_hi; /* keys of the sequence each row sees */
    int64_t *bias_at;         /* element of the row's bias at key 0 */
    int *group_lo, *group_hi; /* keys every row of a P V group sees */
} tile_scratch;

/* ---- KV addressing: dense, varlen or paged ---- */

/* One sequence of the batch: its lengths, and where its rows are. */
typedef struct seq_view {
    int64_t b;
    int64_t nq, nkv;
    int64_t q_row0;       /* packed row of its first query (0 when Q is dense) */
    int64_t kv_row0;      /* packed row of its first key (0 unless K/V are varlen) */
    const int32_t *pages; /* its block-table row (paged K/V only) */
} seq_view;

static seq_view seq_of(const call *c, int64_t b) {
    const fp_problem *p = c->p;
    seq_view s = {b, p->seq_q, p->seq_kv, 0, 0, NULL};
    if (p->q_varlen) {
        const int32_t *cu = (const int32_t *)c->a->cu_seqlens_q;
        s.q_row0 = cu[b];
        s.nq = (int64_t)cu[b + 1] - cu[b];
    }
    if (p->kv_layout == FLASHPORT_KV_VARLEN) {
        const int32_t *cu = (const int32_t *)c->a->cu_seqlens_kv;
        s.kv_row0 = cu[b];
        s.nkv = (int64_t)cu[b + 1] - cu[b];
    } else if (p->kv_layout == FLASHPORT_KV_PAGED) {
        s.nkv = ((const int32_t *)c->a->seqlens_kv)[b];
        s.pages = (const int32_t *)c->a->block_table + b * p->max_pages_per_seq;
    }
    return s;
}

/* Element offsets of key j's rows in K and V, and how many keys from j on follow at the seq
 * strides: the rest of its page when paged, unbounded otherwise. */
static int64_t kv_rows(const call *c, const seq_view *s, int64_t kvh, int64_t j, int64_t *k_at,
                       int64_t *v_at) {
    const fp_problem *p = c->p;
    int64_t block = s->b, row = s->kv_row0 + j, run = INT64_MAX;
    if (s->pages) {
        block = s->pages[j / p->page_size];
        row = j % p->page_size;
        run = p->page_size - row;
    }
    *k_at = block * p->k.batch + kvh * p->k.head + row * p->k.seq;
    *v_at = block * p->v.batch + kvh * p->v.head + row * p->v.seq;
    return run;
}

/* Query or output row i of query head h (packed rows have batch stride 0). */
static const void *q_row(const void *base, const flashport_strides *st, size_t esize,
                         const seq_view *s, int64_t h, int64_t i) {
    return (const char *)base + (size_t)(s->b * st->batch + h * st->head + (s->q_row0 + i) * st->seq) * esize;
}

/* The FP8 descale of a row: the tensor's factor, or that of (batch, head, block of positions);
 * 1 for other dtypes. `len` is the tensor's longest sequence. */
static float descale(const call *c, const void *factors, int64_t heads, int64_t len, int64_t b,
                     int64_t h, int64_t pos) {
    const fp_problem *p = c->p;
    const float *f = (const float *)factors;
    if (p->descale == FLASHPORT_DESCALE_TENSOR) return f[0];
    if (p->descale == FLASHPORT_DESCALE_BLOCK) {
        const int64_t per_head = (len + p->descale_block - 1) / p->descale_block;
        return f[(b * heads + h) * per_head + pos / p->descale_block];
    }
    return 1.0f;
}

/* Converts keys [j0, j0 + n) of K and V into the block buffers, a page (or the whole block) at
 * a time; rows up to `padded` are zero so the micro-kernels can run on whole steps. */
static void pack_kv(const call *c, tile_scratch *ts, const seq_view *s, int64_t kvh, int64_t j0,
                    int n, int padded) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    for (int j = 0; j < n;) {
        int64_t k_at, v_at;
        const int64_t run = min64(kv_rows(c, s, kvh, j0 + j, &k_at, &v_at), n - j);
        for (int64_t r = 0; r < run; ++r, ++j) {
            const int64_t key = j0 + j;
            c->ops->load_row((const char *)c->a->k + (size_t)(k_at + r * p->k.seq) * c->in_size,
                             p->dtype, p->head_dim, dq,
                             descale(c, c->a->k_descale, p->heads_kv, p->seq_kv, s->b, kvh, key),
                             ts->k + (int64_t)j * dq);
            c->ops->load_row((const char *)c->a->v + (size_t)(v_at + r * p->v.seq) * c->in_size,
                             p->dtype, p->head_dim, dq,
                             descale(c, c->a->v_descale, p->heads_kv, p->seq_kv, s->b, kvh, key),
                             ts->v + (int64_t)j * dq);
        }
    }
    const size_t tail = (size_t)(padded - n) * (size_t)dq * sizeof(float);
    memset(ts->k + (int64_t)n * dq, 0, tail);
    memset(ts->v + (int64_t)n * dq, 0, tail);
}

/* ---- scores: the window and the modifiers ---- */

/* Keys [*lo, *hi) of sequence s that its query i sees: the window (causal is one) around the
 * sequence's own bottom-right diagonal; [0, 0) when none. */
static void row_keys(const fp_problem *p, const seq_view *s, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t diag = i + s->nkv - s->nq;
    const int64_t right = p->causal ? 0 : p->window_right;
    const int64_t a = p->window_left < 0 ? 0 : max64(0, diag - p->window_left);
    const int64_t e = right < 0 ? s->nkv : min64(s->nkv, diag + right + 1);
    *lo = e > a ? a : 0;
    *hi = e > a ? e : 0;
}

/* Union of the keys its rows see of a tile of nq positions from i0 ([0, 0) when none): what
 * the tile visits, for its cost. */
static void tile_keys(const fp_problem *p, const seq_view *s, int64_t i0, int64_t nq, int64_t *lo,
                      int64_t *hi) {
    *lo = INT64_MAX;
    *hi = 0;
    for (int64_t i = i0; i < i0 + nq; ++i) {
        int64_t a, e;
        row_keys(p, s, i, &a, &e);
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
    const seq_view *s;
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
        if (slopes)
            ts->slope[r] = (float)(LOG2E * slopes[p->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD
                                                      ? tp->s->b * p->heads_q + h
                                                      : h]);
        if (p->bias.enabled)
            ts->bias_at[r] = tp->s->b * p->bias.batch + h * p->bias.head + i * p->bias.query;
    }
}

/* The bias of the block starting at key j0, times log2 e, laid out as the scores, for rows
 * r < real over the keys each sees. */
static void gather_bias(const call *c, tile_scratch *ts, int real, int64_t j0) {
    const flashport_bias_desc *bd = &c->p->bias;
    const int64_t ld = c->t->rows;
    for (int r = 0; r < real; ++r) {
        float *out = ts->bias + r;
        const int64_t at = ts->bias_at[r] + j0 * bd->key;
        if (bd->dtype == FLASHPORT_F32) {
            const float *b = (const float *)c->a->bias + at;
            for (int j = ts->lo[r]; j < ts->hi[r]; ++j) out[j * ld] = (float)LOG2E * b[j * bd->key];
        } else if (bd->dtype == FLASHPORT_F16) {
            const uint16_t *b = (const uint16_t *)c->a->bias + at;
            for (int j = ts->lo[r]; j < ts->hi[r]; ++j) out[j * ld] = (float)LOG2E * fp_f16_to_f32(b[j * bd->key]);
        } else {
            const uint16_t *b = (const uint16_t *)c->a->bias + at;
            for (int j = ts->lo[r]; j < ts->hi[r]; ++j) out[j * ld] = (float)LOG2E * fp_bf16_to_f32(b[j * bd->key]);
        }
    }
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
        c->ops->load_row(q_row(c->a->q, &p->q, c->in_size, tp->s, h, i), p->dtype, p->head_dim, dq,
                         descale(c, c->a->q_descale, p->heads_q, p->seq_q, tp->s->b, h, i),
                         rows_tmp + (int64_t)r * dq);
    }
    for (int r = 0; r < rows; ++r) {
        float *panel = ts->q + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL + r % CS_Q_PANEL;
        if (r < real)
            for (int64_t col = 0; col < dq; ++col) panel[col * CS_Q_PANEL] = rows_tmp[(int64_t)r * dq + col];
        else
            for (int64_t col = 0; col < dq; ++col) panel[col * CS_Q_PANEL] = 0.0f;
    }
}

/* O and LSE of the tile's rows. The normaliser is the rows' sum plus, with sinks, exp(sink_h),
 * both taken relative to the larger of the row's max and the sink, in double so that a sink far
 * above every score neither overflows nor loses the sum. A NaN max or sink makes the row NaN;
 * with no mass at all (no visible key, or only -inf scores, and no sink) O is 0 times the
 * accumulator (0, or NaN in a column whose V was NaN) and LSE is -inf. */
static void store_tile(const call *c, tile_scratch *ts, const tile_pos *tp, int real) {
    const fp_problem *p = c->p;
    const int64_t dq = c->t->dq;
    const float *sinks = (const float *)c->a->sinks;
    float *lse = (float *)c->a->lse;
    for (int r = 0; r < real; ++r) {
        const int64_t h = head_of(c, tp, r), i = position_of(tp, r);
        const double l = ts->l[r], m = ts->m[r];
        const double sink = sinks ? LOG2E * sinks[h] : -INFINITY;
        const double top = sink > m || isnan(sink) ? sink : m;
        const double denom = top == -INFINITY ? 0.0 : l * exp2(m - top) + exp2(sink - top);
        c->ops->store_row(ts->o + (int64_t)r * dq, p->head_dim,
                          denom == 0.0 ? 0.0f : (float)(exp2(m - top) / denom), p->out_dtype,
                          (void *)q_row(c->a->o, &p->o, c->out_size, tp->s, h, i));
        if (lse) {
            const int64_t at = p->q_varlen ? h * p->total_q + tp->s->q_row0 + i
                                           : (tp->s->b * p->heads_q + h) * p->seq_q + i;
            lse[at] = denom == 0.0 ? -INFINITY : (float)((top + log2(denom)) * 0.69314718055994530942);
        }
    }
}

/* One tile: query positions [i0, i0 + nq) of query heads [h0, h0 + nh) within the group of KV
 * head kvh, of sequence s. */
static void run_tile(const call *c, tile_scratch *ts, const seq_view *s, int64_t kvh, int64_t h0,
                     int64_t i0) {
    const fp_problem *p = c->p;
    const cs_tiling *t = c->t;
    const cs_kernel_ops *ops = c->ops;
    const int64_t dq = t->dq;
    const tile_pos tp = {s, kvh, h0, i0, (int)min64(t->heads, c->group - h0)};
    const int nq = (int)min64(t->queries, s->nq - i0);
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
        row_keys(p, s, position_of(&tp, r), &ts->key_lo[r], &ts->key_hi[r]);
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

    for (int64_t j0 = k_lo; j0 < k_hi; j0 += t->keys) {
        const int n = (int)min64(t->keys, k_hi - j0);
        const int padded = (int)round_up(n, CS_KEY_STEP);
        pack_kv(c, ts, s, kvh, j0, n, padded);
        for (int r = 0; r < score_rows; ++r) {
            const int a = (int)max64(0, min64(ts->key_lo[r] - j0, n));
            const int e = (int)max64(0, min64(ts->key_hi[r] - j0, n));
            ts->lo[r] = e > a ? a : 0;
            ts->hi[r] = e > a ? e : 0;
        }
        ops->scores(ts->q, ts->k, p->head_dim, dq, score_rows, ts->lo, ts->hi, ts->s, rows);
        if (mods.slope)
            for (int r = 0; r < real; ++r) ts->diag[r] = (float)(position_of(&tp, r) + s->nkv - s->nq - j0);
        if (mods.bias) gather_bias(c, ts, real, j0);
        ops->softmax(ts->s, rows, score_rows, ts->lo, ts->hi, &mods, ts->m, ts->l, ts->alpha);
        /* The group kernel takes the keys every real row of the group sees; a row's keys
         * outside them are added by itself afterwards (the group kernel applies the
         * rescaling), so that no row ever touches a key it cannot see (0 * NaN from a hidden V
         * row must not reach it). Columns outermost: one strip of V serves every group from
         * L1. */
        for (int g = 0; g < real; g += CS_PV_ROWS) {
            int a = 0, e = n;
            for (int r = g; r < g + CS_PV_ROWS && r < real; ++r) {
                a = ts->lo[r] > a ? ts->lo[r] : a;
                e = ts->hi[r] < e ? ts->hi[r] : e;
            }
            ts->group_lo[g / CS_PV_ROWS] = a;
            ts->group_hi[g / CS_PV_ROWS] = e > a ? e : a;
        }
        for (int64_t c0 = 0; c0 < dq; c0 += CS_PV_COLS)
            for (int g = 0; g < real; g += CS_PV_ROWS) {
                const int a = ts->group_lo[g / CS_PV_ROWS], e = ts->group_hi[g / CS_PV_ROWS];
                ops->pv_rows(ts->s + (int64_t)a * rows + g, rows, ts->v + (int64_t)a * dq + c0, dq,
                             min64(CS_PV_COLS, dq - c0), e - a, ts->alpha + g, ts->o + (int64_t)g * dq + c0);
            }
        for (int r = 0; r < real; ++r) {
            const int a = ts->group_lo[r / CS_PV_ROWS], e = ts->group_hi[r / CS_PV_ROWS];
            if (ts->lo[r] < a)
                ops->pv_row(ts->s + r, rows, ts->v, dq, ts->lo[r], ts->hi[r] < a ? ts->hi[r] : a,
                            ts->o + (int64_t)r * dq);
            if (ts->hi[r] > e)
                ops->pv_row(ts->s + r, rows, ts->v, dq, ts->lo[r] > e ? ts->lo[r] : e, ts->hi[r],
                            ts->o + (int64_t)r * dq);
        }
    }
    store_tile(c, ts, &tp, real);
}

static tile_scratch scratch_of(const call *c, void *base, int thread) {
    char *b = (char *)base + (size_t)thread * c->L.total;
    tile_scratch ts = {
        .q = (float *)(b + c->L.q), .o = (float *)(b + c->L.o), .k = (float *)(b + c->L.k),
        .v = (float *)(b + c->L.v), .s = (float *)(b + c->L.s), .bias = (float *)(b + c->L.bias),
        .m = (float *)(b + c->L.m),
        .l = (float *)(b + c->L.l), .alpha = (float *)(b + c->L.alpha),
        .slope = (float *)(b + c->L.slope), .diag = (float *)(b + c->L.diag),
        .lo = (int *)(b + c->L.lo), .hi = (int *)(b + c->L.hi),
        .key_lo = (int64_t *)(b + c->L.key_lo), .key_hi = (int64_t *)(b + c->L.key_hi),
        .bias_at = (int64_t *)(b + c->L.bias_at), .group_lo = (int *)(b + c->L.group_lo),
        .group_hi = (int *)(b + c->L.group_hi),
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

/* Every query tile of every sequence, with its cost (rows times keys visited, plus the rows'
 * own conversion and store), sorted so that the long ones start early and the short ones fill
 * the gaps at the end. */
static int64_t list_tiles(const call *c, tile_entry *list) {
    const fp_problem *p = c->p;
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        const seq_view s = seq_of(c, b);
        for (int64_t i0 = 0; i0 < s.nq; i0 += c->t->queries) {
            const int64_t nq = min64(c->t->queries, s.nq - i0);
            int64_t lo, hi;
            tile_keys(p, &s, i0, nq, &lo, &hi);
            list[n++] = (tile_entry){nq * (hi - lo + 1), b, i0};
        }
    }
    qsort(list, (size_t)n, sizeof *list, by_cost);
    return n;
}

#if defined(_OPENMP)
/* Worker threads are bound to cores once; the caller's own thread is left where it is, so the
 * library never changes the application's affinity. */
static _Thread_local int bound_core = -1;
#endif

/* Work item `it`: a query tile of the list, one KV head, one chunk of its query heads. */
typedef struct work_list {
    const tile_entry *tiles;
    int64_t head_chunks, per_tile, items;
} work_list;

static void run_item(const call *c, tile_scratch *ts, const work_list *w, int64_t it) {
    const tile_entry *e = &w->tiles[it / w->per_tile];
    const int64_t rest = it % w->per_tile;
    const seq_view s = seq_of(c, e->b);
    run_tile(c, ts, &s, rest / w->head_chunks, rest % w->head_chunks * c->t->heads, e->i0);
}

void cs_attention(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                  const fp_args *args, void *scratch) {
    call c = {
        .ops = ops, .t = t, .p = p, .a = args, .in_size = flashport_dtype_size(p->dtype),
        .out_size = flashport_dtype_size(p->out_dtype), .group = p->heads_q / p->heads_kv,
        .L = layout_of(t),
    };
    c.mods.scale2 = (float)(p->scale * LOG2E);
    if (p->softcap > 0.0f) {
        c.mods.cap_in = p->scale / p->softcap;
        c.mods.cap_out = (float)(p->softcap * LOG2E);
    }
    tile_entry *tiles = (tile_entry *)((char *)scratch + c.L.total * (size_t)t->threads);
    work_list w = {tiles, (c.group + t->heads - 1) / t->heads, 0, 0};
    w.per_tile = p->heads_kv * w.head_chunks;
    w.items = list_tiles(&c, tiles) * w.per_tile;
#if defined(_OPENMP)
    const int threads = (int)max64(1, min64(t->threads, w.items));
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
