/*
 * The forward tile path's cut of sequences into tiles (tiling.c), on a grid of shapes, thread
 * counts, GQA groups, masks and varlen batches:
 *   - the tiles of every sequence cover its positions once, in order, each within the tile's
 *     rows, and the plan's bound on their number holds;
 *   - without a mask and with a team, the tiles spread over the threads evenly: given the
 *     tiles most expensive first to whichever thread is least loaded (what the dynamic
 *     schedule does), no thread computes more score rows (a tile's rows rounded up to the
 *     16-row registers the kernels run) than an even split of the rows plus one register of
 *     them per share; tiles of fewer queries each, the plain alternative, pad every tile up
 *     to a register and leave threads with up to a tile more;
 *   - the tile height depends on the threads only where the float32 paths take 48-row tiles
 *     (a mask, a team, fewer than 4 tiles of 96 rows per thread), never on a path with its own
 *     P V on matrix tiles (pv_block, as amxbf16), whose ring rows (load_kv) and tile rows
 *     differ: both kinds of kernel table are walked.
 */
#include <stdio.h>
#include <stdlib.h>

#include "flashport.h"
#include "scratch.h"
#include "tiling.h"

static int failures;

#define MAX_THREADS 8

/* Checks the tiles of one sequence of nq positions; returns their count and adds each tile's
 * score rows to rows[] (NULL: not needed). */
static int64_t walk(const cs_tiling *t, int64_t nq, int64_t *rows, int64_t *n_rows,
                    const char *what) {
    int64_t count = 0, i0 = 0;
    while (i0 < nq) {
        const int64_t q = cs_tile_queries(t, i0, nq);
        if (q < 1 || q > t->queries || (int64_t)t->heads * q > t->rows) {
            printf("FAIL %s: the tile at %lld has %lld queries (tiles of %d, %d rows)\n", what,
                   (long long)i0, (long long)q, t->queries, t->rows);
            ++failures;
            return count;
        }
        if (rows) rows[(*n_rows)++] = round_up((int64_t)t->heads * q, CS_ROW_STEP);
        i0 += q;
        ++count;
    }
    return count;
}

static int by_size_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The most score rows one thread computes when the items go, largest first, to whichever
 * thread has the least. */
static int64_t most_per_thread(int64_t *items, int64_t n, int threads) {
    qsort(items, (size_t)n, sizeof *items, by_size_desc);
    int64_t load[MAX_THREADS] = {0};
    for (int64_t i = 0; i < n; ++i) {
        int least = 0;
        for (int k = 1; k < threads; ++k)
            if (load[k] < load[least]) least = k;
        load[least] += items[i];
    }
    int64_t most = 0;
    for (int k = 0; k < threads; ++k) most = load[k] > most ? load[k] : most;
    return most;
}

/* A kernel table of a path with its own K/V ring layout and P V on matrix tiles: only whether
 * these are set matters to the tiling, never called. */
static void unused_load_kv(const void *k, const void *v, const void *v_next, int first, int64_t d,
                           int64_t dq, float *k_ring, float *v_ring, int64_t row) {
    (void)k, (void)v, (void)v_next, (void)first, (void)d, (void)dq, (void)k_ring, (void)v_ring;
    (void)row;
    abort();
}
static void unused_pv_block(float *p, int64_t ldp, const float *v, int64_t d, int64_t dq, int real,
                            const int *lo, const int *hi, const float *alpha, float *o) {
    (void)p, (void)ldp, (void)v, (void)d, (void)dq, (void)real, (void)lo, (void)hi, (void)alpha;
    (void)o;
    abort();
}
static const cs_kernel_ops matrix_tiles = {.load_kv = unused_load_kv, .pv_block = unused_pv_block};

static void check(flashport_attention_desc *d, const int32_t *lengths, int threads,
                  const char *mask, const cs_kernel_ops *ops) {
    char what[192];
    snprintf(what, sizeof what, "B=%lld Hq=%lld Hkv=%lld Nq=%lld%s d=%lld %s, %d threads, %s",
             (long long)d->batch, (long long)d->heads_q, (long long)d->heads_kv,
             (long long)d->seq_q, lengths ? " (varlen)" : "", (long long)d->head_dim, mask, threads,
             ops ? "matrix tiles" : "float32 paths");
    cs_tiling t, alone;
    cs_tiling_choose(d, threads, ops, &t);
    cs_tiling_choose(d, 1, ops, &alone);
    const int panel_tiles = !ops && mask[0] != 'n' && threads > 1 &&
                            d->batch * d->heads_q * d->seq_q < 4 * threads * 96;
    if (panel_tiles ? t.rows != CS_Q_PANEL : t.rows != alone.rows) {
        printf("FAIL %s: tiles of %d rows (one thread: %d)\n", what, t.rows, alone.rows);
        ++failures;
    }
    const int64_t chunks = (d->heads_q / d->heads_kv + t.heads - 1) / t.heads;
    const int64_t per_tile = d->batch * d->heads_kv * chunks;
    int64_t tiles = 0, n_rows = 0, real = 0;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)(t.max_tiles + 1));
    if (!rows) abort();
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t nq = lengths ? lengths[b] : d->seq_q;
        tiles += walk(&t, nq, rows, &n_rows, what);
        if (tiles > t.max_tiles) break;
        real += nq * t.heads;
    }
    if (tiles > t.max_tiles) {
        printf("FAIL %s: %lld tiles, the plan holds %lld\n", what, (long long)tiles,
               (long long)t.max_tiles);
        ++failures;
    } else if (!lengths && mask[0] == 'n' && threads > 1 && d->seq_q >= threads * t.queries) {
        /* Every (KV head, head chunk) runs the same tiles of each sequence. */
        const int64_t heads_items = per_tile / d->batch;
        int64_t *items = malloc(sizeof(int64_t) * (size_t)(n_rows * heads_items));
        if (!items) abort();
        int64_t n_items = 0, padded = 0;
        for (int64_t h = 0; h < heads_items; ++h)
            for (int64_t i = 0; i < n_rows; ++i) padded += items[n_items++] = rows[i];
        real *= heads_items;
        const int64_t shares = (d->seq_q + t.share - 1) / t.share;
        const int64_t last = d->seq_q - (shares - 1) * t.share;
        /* Padding: a register of rows per share at most, beside the full tiles' own. */
        const int64_t pad_bound = real / 16 + shares * d->batch * heads_items * CS_ROW_STEP;
        /* Spread: even but for the last share's shortfall. */
        const int64_t even = (padded + threads - 1) / threads;
        const int64_t spread_bound = even + t.heads * (t.share - last) + CS_ROW_STEP;
        const int64_t most = most_per_thread(items, n_items, threads);
        if (padded - real > pad_bound || most > spread_bound) {
            printf("FAIL %s: %lld score rows for %lld rows (at most %lld more), a thread's most "
                   "%lld (bound %lld; tiles of %d queries, shares of %d)\n",
                   what, (long long)padded, (long long)real, (long long)pad_bound, (long long)most,
                   (long long)spread_bound, t.queries, t.share);
            ++failures;
        }
        free(items);
    }
    free(rows);
}

int main(void) {
    static const int64_t lengths[] = {1, 5, 16, 17, 95, 96, 97, 200, 512, 1000, 1024, 2048, 4100};
    static const int64_t groups[][2] = {{1, 1}, {2, 1}, {3, 1}, {8, 1}, {6, 2}, {12, 4}, {32, 1}};
    static const int thread_counts[] = {1, 2, 3, 4, 8};
    static const char *const masks[] = {"none", "causal", "window"};
    int cases = 0;
    for (size_t n = 0; n < sizeof lengths / sizeof lengths[0]; ++n)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; ++g)
            for (int64_t batch = 1; batch <= 3; ++batch)
                for (size_t th = 0; th < sizeof thread_counts / sizeof thread_counts[0]; ++th)
                    for (size_t m = 0; m < 3; ++m)
                        for (int64_t hd = 64; hd <= 128; hd += 64) {
                            flashport_attention_desc d;
                            flashport_attention_desc_init(&d, FLASHPORT_F32, batch, groups[g][0],
                                                          groups[g][1], lengths[n], lengths[n], hd,
                                                          FLASHPORT_LAYOUT_BHND);
                            d.causal = m == 1;
                            if (m == 2) d.window_left = 100, d.window_right = 0;
                            check(&d, NULL, thread_counts[th], masks[m], NULL);
                            check(&d, NULL, thread_counts[th], masks[m], &matrix_tiles);
                            cases += 2;
                            /* The same batch packed, its sequences of other lengths. */
                            int32_t lens[3];
                            int64_t total = 0;
                            for (int64_t b = 0; b < batch; ++b)
                                total += lens[b] = (int32_t)(lengths[n] - b * lengths[n] / 3);
                            flashport_attention_desc_set_varlen(&d, total, lengths[n], total,
                                                                lengths[n]);
                            check(&d, lens, thread_counts[th], masks[m], NULL);
                            check(&d, lens, thread_counts[th], masks[m], &matrix_tiles);
                            cases += 2;
                        }
    printf("%s: %d shapes, %d failed checks\n", failures ? "FAILED" : "PASSED", cases, failures);
    return failures ? 1 : 0;
}
