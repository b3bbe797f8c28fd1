/*
 * The tile algorithm of the cpu_simd backend, shared by every kernel path.
 *
 * A tile is a few query rows of every query head that shares one KV head (GQA), stacked so that
 * each block of K and V is converted once and used by all of them. For each key block the tile
 * computes S = Q K^T with the score micro-kernel, applies the score modifiers (softcap, ALiBi,
 * bias) when the problem has any, updates the running max and sum of every row (online softmax
 * in base 2: scores times scale * log2 e), and accumulates O += P V with the P V micro-kernel.
 * A tile visits only the keys its rows can see under the window (causal is one), so blocks
 * outside it are never touched. Two policies keep the features in one place each:
 *   - KV addressing (dense, varlen, paged): a sequence's lengths and rows, and where key j's
 *     rows of K and V are, resolved once per run of contiguous rows (a page);
 *   - scores: the window's key range of each row, and the modifiers applied to a block.
 * Converted keys are kept in a ring per thread, so that the next tile of the same head converts
 * only the keys it does not share with the last one. Threads take (sequence, KV head, head
 * chunk, query tile) work items from a shared counter, the tiles of one head in a row, most
 * expensive first.
 */
#ifndef CS_ATTENTION_H
#define CS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "kernels/kernel_ops.h"

typedef struct cs_tiling {
    int heads;   /* query heads of one KV group in a tile */
    int queries; /* query positions in a tile */
    int rows;    /* heads * queries rounded up to CS_PV_ROWS */
    int keys;    /* keys per block, a multiple of CS_KEY_STEP */
    int ring;    /* keys the K/V ring of a thread holds, a multiple of CS_KEY_STEP */
    int64_t dq;  /* head_dim rounded up to CS_DIM_STEP */
    int threads;
    int split;         /* decode path (decode.h): keys of a sequence per work item; 0: tile path */
    int64_t max_tiles; /* tile path: query tiles of every sequence together, at most */
} cs_tiling;

/* Tile shape for p on the kernels of ops, sized so that a tile's Q and O stay in L2 and a key
 * block in L1. */
void cs_tiling_choose(const fp_problem *p, int threads, const cs_kernel_ops *ops, cs_tiling *t);

/* Bytes of K and V per key in the ring: float32 rows (8 dq), or the bf16 pair layouts of
 * ops->load_kv, whose K takes half its row's space (6 dq). */
static inline int64_t cs_ring_key_bytes(const cs_kernel_ops *ops, int64_t dq) {
    return (ops && ops->load_kv ? 6 : 8) * dq;
}
/* Scratch the run needs: threads x (one tile + a K/V ring) and the list of query tiles, never a
 * function of N^2. */
size_t cs_scratch_bytes(const cs_tiling *t);

/* The tiling as a plan's kernel parameters: stored by the planner, read back by run(). */
void cs_tiling_to_plan(const cs_tiling *t, fp_plan *plan);
void cs_tiling_from_plan(const fp_plan *plan, cs_tiling *t);

/* Runs the attention with the kernels of one path. scratch holds cs_scratch_bytes(t) bytes,
 * 64-byte aligned. */
void cs_attention(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                  const fp_args *args, void *scratch);

#endif /* CS_ATTENTION_H */
