/*
 * The forward tile path's shape (cs_tiling): how many query rows and keys a tile takes, how
 * sequences are cut into tiles for the threads, and the K/V ring each thread keeps. Chosen once
 * by the planner, stored in the plan, and read by attention.c; the decode path (decode.h) fills
 * the same struct with its own split of the keys.
 */
#ifndef CS_TILING_H
#define CS_TILING_H

#include <stdint.h>

#include "fp_backend.h"
#include "kernels/kernel_ops.h"

typedef struct cs_tiling {
    int heads;   /* query heads of one KV group in a tile */
    int queries; /* query positions in a tile */
    int share;   /* query positions cut into tiles on their own: a thread's equal share of a
                    sequence, or at least the whole sequence (see cs_tile_queries) */
    int rows;    /* heads * queries rounded up to CS_Q_PANEL */
    int keys;    /* keys per block, a multiple of CS_KEY_STEP */
    int ring;    /* keys the K/V ring of a thread holds, a multiple of CS_KEY_STEP */
    int64_t dq;  /* head_dim rounded up to CS_DIM_STEP */
    int threads;
    int split;         /* decode path (decode.h): keys of a sequence per work item; 0: tile path */
    int64_t max_tiles; /* tile path: query tiles of every sequence together, at most */
} cs_tiling;

/* Query positions in the tile that starts at position i0 of a sequence of nq: tiles of
 * t->queries from the start of each share, the share's last one shorter. */
static inline int64_t cs_tile_queries(const cs_tiling *t, int64_t i0, int64_t nq) {
    const int64_t share_end = (i0 / t->share + 1) * t->share;
    const int64_t end = share_end < nq ? share_end : nq;
    return end - i0 < t->queries ? end - i0 : t->queries;
}

/* Tile shape for p on the kernels of ops, sized so that a tile's Q and O stay in L2 and a key
 * block in L1. */
void cs_tiling_choose(const fp_problem *p, int threads, const cs_kernel_ops *ops, cs_tiling *t);

/* Bytes of K and V per key in the ring: float32 rows (8 dq), or the bf16 pair layouts of
 * ops->load_kv, whose K takes half its row's space (6 dq). */
static inline int64_t cs_ring_key_bytes(const cs_kernel_ops *ops, int64_t dq) {
    return (ops && ops->load_kv ? 6 : 8) * dq;
}

/* The tiling as a plan's kernel parameters: stored by the planner, read back by run(). */
void cs_tiling_to_plan(const cs_tiling *t, fp_plan *plan);
void cs_tiling_from_plan(const fp_plan *plan, cs_tiling *t);

#endif /* CS_TILING_H */
