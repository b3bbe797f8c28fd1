/*
 * Which rows of the local Q shard and of the visiting K/V block one ring step computes, and
 * with which mask. The sharded causal pattern makes every step one rectangle of the local
 * problem: fully visible, fully masked (skipped), or the diagonal block, which is the local
 * shard's own causal problem (with zig-zag sharding as well: chunk r precedes chunk 2P-1-r).
 */
#ifndef FP_DIST_STEP_PLAN_H
#define FP_DIST_STEP_PLAN_H

#include <stdint.h>

#include "flashport_dist.h"

typedef struct fp_dist_step {
    int skip;       /* 1: every key of the block is masked for every local query */
    int64_t q_off;  /* first local query row */
    int64_t q_len;  /* query rows */
    int64_t kv_off; /* first row of the visiting block */
    int64_t kv_len; /* key rows */
    int causal;     /* 1: the diagonal block (q and kv cover the same global rows) */
} fp_dist_step;

/* The step at which `rank` holds the block of rank `src`, for shards of n rows. */
fp_dist_step fp_dist_step_plan(flashport_dist_sharding sharding, int causal, int rank, int src,
                               int64_t n);

#endif /* FP_DIST_STEP_PLAN_H */
