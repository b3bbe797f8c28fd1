/*
 * Which rows of the local Q shard and of the visiting K/V block one ring step computes, and
 * with which mask. A shard is one chunk of consecutive global rows (contiguous sharding) or two
 * (zig-zag), so a step is made of chunk pairs: a query chunk at global row qs against a key
 * chunk at ks. On global positions a window makes each pair fully masked, fully visible, or a
 * band, and a band is the local (bottom-right aligned) window of a sub-rectangle: the query
 * rows that see any key against the keys that any of them sees (step_plan.c has the algebra).
 * The step runs each such rectangle with the existing kernels through strides; none is N x N.
 */
#ifndef FP_DIST_STEP_PLAN_H
#define FP_DIST_STEP_PLAN_H

#include <stdint.h>

#include "flashport_dist.h"

/* One attention call of a step: local rows of the shard and of the block, and the window of
 * that rectangle in its own (bottom-right aligned) coordinates; -1 is unbounded. */
typedef struct fp_dist_rect {
    int64_t q_off, q_len;   /* local query rows */
    int64_t kv_off, kv_len; /* rows of the visiting block */
    int64_t window_left, window_right;
} fp_dist_rect;

enum { FP_DIST_MAX_RECTS = 4 }; /* two query chunks by two key chunks */

typedef struct fp_dist_step {
    int count; /* rectangles to run; 0: the block is fully masked for every local query */
    fp_dist_rect rect[FP_DIST_MAX_RECTS];
} fp_dist_step;

/* The step at which `rank` (of `ranks`) holds the block of rank `src`, for d's sharding and
 * mask (d checked). */
fp_dist_step fp_dist_step_plan(const flashport_dist_desc *d, int rank, int ranks, int src);

/* How many steps the ring runs, the same on every rank: P, or fewer when every rank's last
 * steps are empty (a window that reaches back only a few shards: causal with window_left,
 * contiguous sharding), so that the blocks stop where no rank attends to them any more. */
int fp_dist_ring_steps(const flashport_dist_desc *d, int ranks);

#endif /* FP_DIST_STEP_PLAN_H */
