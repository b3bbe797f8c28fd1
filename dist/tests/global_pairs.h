/*
 * Brute force over global positions, what the dist tests hold the ring's plan to: whether a
 * query sees a key under a descriptor's causal flag and window, whether some query of one rank
 * sees some key of another rank's block, and how many steps the ring must run.
 */
#ifndef FP_DIST_TESTS_GLOBAL_PAIRS_H
#define FP_DIST_TESTS_GLOBAL_PAIRS_H

#include <stdint.h>

#include "flashport_dist.h"

/* Global query gi sees global key gj. */
static int global_visible(const flashport_dist_desc *d, int64_t gi, int64_t gj) {
    const int64_t right = d->causal ? 0 : d->window_right;
    return (d->window_left < 0 || gj >= gi - d->window_left) && (right < 0 || gj <= gi + right);
}

/* Some query of `rank` sees some key of rank `src`'s block. */
static int rank_sees(const flashport_dist_desc *d, int rank, int ranks, int src) {
    for (int64_t i = 0; i < d->seq_local; i++)
        for (int64_t j = 0; j < d->seq_local; j++)
            if (global_visible(d, flashport_dist_global_row(d, rank, ranks, i),
                               flashport_dist_global_row(d, src, ranks, j)))
                return 1;
    return 0;
}

/* 1 + the last step (rank r holds the block of rank r - step) at which any rank sees a key. */
static int ring_steps(const flashport_dist_desc *d, int ranks) {
    int steps = 1;
    for (int step = 1; step < ranks; step++)
        for (int r = 0; r < ranks; r++)
            if (rank_sees(d, r, ranks, (r - step + ranks) % ranks)) steps = step + 1;
    return steps;
}

#endif /* FP_DIST_TESTS_GLOBAL_PAIRS_H */
