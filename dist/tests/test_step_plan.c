/*
 * The ring's step planning against brute force, without MPI: for every rank and visiting block
 * of small problems (P = 1 .. 6, both shardings, causal or not, windows from 0 to wider than
 * N), the rectangles of a step, each with its local bottom-right aligned window, must cover
 * every visible (query, key) pair of the shard and block exactly once and no masked pair, and
 * their windows must be ones the kernels take (-1 or >= 0); the ring's length must be 1 + the
 * last step at which any rank sees a key.
 */
#include <stdio.h>
#include <string.h>

#include "global_pairs.h"
#include "step_plan.h"

enum { MAX_N = 12 };

static int failures;

/* Pair (i, j) of a rectangle, in its own coordinates, is inside its local window. */
static int local_visible(const fp_dist_rect *r, int64_t i, int64_t j) {
    int64_t a = r->kv_len - r->q_len;
    return (r->window_left < 0 || j >= i + a - r->window_left) &&
           (r->window_right < 0 || j <= i + a + r->window_right);
}

static void check_ring(const flashport_dist_desc *d, int ranks) {
    const int want = ring_steps(d, ranks);
    int got = fp_dist_ring_steps(d, ranks);
    if (got != want && failures++ < 10)
        fprintf(stderr, "FAIL: P=%d n=%lld causal %d window (%lld, %lld): %d ring steps, not %d\n",
                ranks, (long long)d->seq_local, d->causal, (long long)d->window_left,
                (long long)d->window_right, got, want);
}

static void check(const flashport_dist_desc *d, int rank, int ranks, int src) {
    fp_dist_step s = fp_dist_step_plan(d, rank, ranks, src);
    int64_t n = d->seq_local;
    int cover[MAX_N][MAX_N];
    memset(cover, 0, sizeof cover);
    int ok = s.count >= 0 && s.count <= FP_DIST_MAX_RECTS;
    for (int k = 0; k < s.count && ok; k++) {
        const fp_dist_rect *r = &s.rect[k];
        ok = r->q_off >= 0 && r->q_len >= 1 && r->q_off + r->q_len <= n && r->kv_off >= 0 &&
             r->kv_len >= 1 && r->kv_off + r->kv_len <= n && r->window_left >= -1 &&
             r->window_right >= -1;
        for (int64_t i = 0; i < r->q_len && ok; i++)
            for (int64_t j = 0; j < r->kv_len; j++)
                cover[r->q_off + i][r->kv_off + j] += local_visible(r, i, j);
    }
    for (int64_t i = 0; i < n && ok; i++)
        for (int64_t j = 0; j < n && ok; j++) {
            ok = cover[i][j] == global_visible(d, flashport_dist_global_row(d, rank, ranks, i),
                                               flashport_dist_global_row(d, src, ranks, j));
        }
    if (ok) return;
    if (failures++ < 10)
        fprintf(stderr,
                "FAIL: %s n=%lld P=%d rank %d block %d causal %d window (%lld, %lld): %d "
                "rectangle(s) do not cover the visible pairs exactly once\n",
                d->sharding == FLASHPORT_DIST_ZIGZAG ? "zigzag" : "contiguous", (long long)n, ranks,
                rank, src, d->causal, (long long)d->window_left, (long long)d->window_right,
                s.count);
}

int main(void) {
    static const int64_t windows[] = {-1, 0, 1, 2, 3, 5, 8, 13, 40};
    static const int64_t sizes[] = {2, 4, 6, 8, 12};
    enum { W = sizeof windows / sizeof windows[0], S = sizeof sizes / sizeof sizes[0] };
    long checked = 0;
    for (int ranks = 1; ranks <= 6; ranks++)
        for (int z = 0; z < S; z++)
            for (int sh = 0; sh < 2; sh++)
                for (int causal = 0; causal < 2; causal++)
                    for (int l = 0; l < W; l++)
                        for (int r = 0; r < (causal ? 2 : W); r++) {
                            flashport_dist_desc d;
                            flashport_dist_desc_init(&d, FLASHPORT_F32, 1, 1, 1, sizes[z],
                                                     sizes[z] * ranks, 8, FLASHPORT_LAYOUT_BHND);
                            d.sharding = sh ? FLASHPORT_DIST_ZIGZAG : FLASHPORT_DIST_CONTIGUOUS;
                            d.causal = causal;
                            d.window_left = windows[l];
                            d.window_right = windows[r]; /* causal: -1 or 0 */
                            check_ring(&d, ranks);
                            for (int rank = 0; rank < ranks; rank++)
                                for (int src = 0; src < ranks; src++, checked++)
                                    check(&d, rank, ranks, src);
                        }
    printf("%s: %ld steps checked, %d failure(s)\n", failures ? "FAILED" : "passed", checked,
           failures);
    return failures ? 1 : 0;
}
