/* Ring step shapes and the global positions of local rows. */
#include "step_plan.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Consecutive global rows held at consecutive local rows. */
typedef struct chunk {
    int64_t local, len, global;
} chunk;

static int shard_chunks(const flashport_dist_desc *d, int rank, int ranks, chunk out[2]) {
    int count = d->sharding == FLASHPORT_DIST_ZIGZAG ? 2 : 1;
    int64_t len = d->seq_local / count;
    for (int c = 0; c < count; c++)
        out[c] = (chunk){c * len, len, flashport_dist_global_row(d, rank, ranks, c * len)};
    return count;
}

/*
 * Query i of chunk qc (0-based in it) sees key j of chunk kc when, with delta = qc.global -
 * kc.global, i + delta - left <= j <= i + delta + right (a bound of -1 is absent). The rows
 * that see any key are [i0, i1), and the keys they see [s0, s1). In that sub-rectangle's own
 * coordinates (i' = i - i0, j' = j - s0, a' = (s1 - s0) - (i1 - i0)) the kernels' band is
 * i' + a' - left' <= j' <= i' + a' + right', the same set for
 *   left'  = left + s1 - i1 - delta,   right' = right + delta + i1 - s1,
 * which depend only on the bottom-right corner and are >= 0 because s1 <= i1 + delta + right
 * and i1 <= s1 - delta + left. A window that covers the whole rectangle is dropped. Returns 0
 * when no query of qc sees a key of kc.
 */
static int pair_rect(const chunk *qc, const chunk *kc, int64_t left, int64_t right,
                     fp_dist_rect *out) {
    int64_t delta = qc->global - kc->global;
    int64_t i0 = right < 0 ? 0 : max64(0, -delta - right);
    int64_t i1 = left < 0 ? qc->len : min64(qc->len, kc->len - delta + left);
    if (i0 >= i1) return 0;
    int64_t s0 = left < 0 ? 0 : max64(0, i0 + delta - left);
    int64_t s1 = right < 0 ? kc->len : min64(kc->len, i1 + delta + right);
    int64_t nq = i1 - i0, nk = s1 - s0;
    int64_t l = left < 0 ? -1 : left + s1 - i1 - delta;
    int64_t r = right < 0 ? -1 : right + delta + i1 - s1;
    *out = (fp_dist_rect){qc->local + i0,      nq, kc->local + s0, nk, l >= nk - 1 ? -1 : l,
                          r >= nq - 1 ? -1 : r};
    return 1;
}

static int unmasked(const fp_dist_rect *r) { return r->window_left < 0 && r->window_right < 0; }

/* Fully visible rectangles side by side (the same keys, adjacent rows, or the same rows,
 * adjacent keys) are one call: a merges b. */
static int join(fp_dist_rect *a, const fp_dist_rect *b) {
    if (!unmasked(a) || !unmasked(b)) return 0;
    if (a->kv_off == b->kv_off && a->kv_len == b->kv_len && a->q_off + a->q_len == b->q_off) {
        a->q_len += b->q_len;
        return 1;
    }
    if (a->q_off == b->q_off && a->q_len == b->q_len && a->kv_off + a->kv_len == b->kv_off) {
        a->kv_len += b->kv_len;
        return 1;
    }
    return 0;
}

static void coalesce(fp_dist_step *s) {
    for (int again = 1; again;) {
        again = 0;
        for (int a = 0; a < s->count && !again; a++)
            for (int b = 0; b < s->count && !again; b++)
                if (a != b && join(&s->rect[a], &s->rect[b])) {
                    s->rect[b] = s->rect[--s->count];
                    again = 1;
                }
    }
}

fp_dist_step fp_dist_step_plan(const flashport_dist_desc *d, int rank, int ranks, int src) {
    fp_dist_step s = {0};
    int64_t n = d->seq_local, left = d->window_left, right = d->causal ? 0 : d->window_right;
    if (src == rank && left < 0 && right <= 0) {
        /* The shard's rows are in global order (zig-zag's chunk r precedes chunk 2P-1-r), so
         * against its own block a causal mask, or none, is the shard's own problem. */
        s.count = 1;
        s.rect[0] = (fp_dist_rect){0, n, 0, n, -1, right};
        return s;
    }
    chunk qc[2], kc[2];
    int chunks = shard_chunks(d, rank, ranks, qc);
    shard_chunks(d, src, ranks, kc);
    for (int i = 0; i < chunks; i++)
        for (int j = 0; j < chunks; j++)
            s.count += pair_rect(&qc[i], &kc[j], left, right, &s.rect[s.count]);
    coalesce(&s);
    return s;
}

int fp_dist_ring_steps(const flashport_dist_desc *d, int ranks) {
    /* step 0 is the shard against its own block, whose diagonal is always visible */
    for (int step = ranks - 1; step > 0; step--)
        for (int rank = 0; rank < ranks; rank++)
            if (fp_dist_step_plan(d, rank, ranks, (rank - step + ranks) % ranks).count)
                return step + 1;
    return 1;
}

int64_t flashport_dist_global_row(const flashport_dist_desc *d, int rank, int ranks, int64_t i) {
    if (!d || ranks < 1 || rank < 0 || rank >= ranks || i < 0 || i >= d->seq_local) return -1;
    int64_t n = d->seq_local;
    if (d->sharding != FLASHPORT_DIST_ZIGZAG) return (int64_t)rank * n + i;
    int64_t c = n / 2;
    if (c == 0) return -1;
    int64_t chunk = i < c ? rank : 2 * (int64_t)ranks - 1 - rank;
    return chunk * c + i % c;
}
