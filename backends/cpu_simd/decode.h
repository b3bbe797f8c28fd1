/*
 * The decode path of the cpu_simd backend: a few query positions (Nq <= CS_DECODE_MAX_Q) per
 * sequence against a long KV cache, where attention is bound by reading K and V.
 *
 * Every query head of a KV head and every position, together (the group's rows: heads x
 * positions, at most CS_DECODE_MAX_ROWS), visit each key block once: a block of K and V is read
 * from memory once, converted to float32 in L1, and used by all of them. The keys of each
 * sequence are cut into splits of a fixed length that depends on the problem only; a work item
 * is one (sequence, KV head, split), so a single sequence and head still spreads over every
 * thread. Each item leaves its rows' running max, sum and unnormalised O; once all items are
 * done they are merged per row by their LSE in split order, so the result is the same bits for
 * any thread count. The kernels are the tile path's (kernels/kernel_ops.h): scores_rows for the
 * group's few rows, the online softmax with every modifier and the P V micro-kernel; the window,
 * varlen and paged K/V and FP8 descales come from the shared policies (sequences.h,
 * kv_stream.h), the sinks and LSE from row_normaliser.h. An additive bias goes to the tile path
 * (its gather is per tile).
 */
#ifndef CS_DECODE_H
#define CS_DECODE_H

#include <stddef.h>

#include "attention.h"
#include "fp_backend.h"
#include "kernels/kernel_ops.h"

#define CS_DECODE_MAX_Q    16 /* query positions per sequence */
#define CS_DECODE_MAX_ROWS 64 /* query heads per KV head x positions */

/* Whether the decode path takes p; else *why says what sends it to the tile path. */
int cs_decode_takes(const fp_problem *p, const char **why);
/* The decode path's tiling: group rows, key blocks and the split length. */
void cs_decode_choose(const fp_problem *p, int threads, cs_tiling *t);
/* Scratch of a run: per thread one group's rows and a K/V block, and the partial results of
 * every work item (linear in the keys, never N^2). */
size_t cs_decode_scratch_bytes(const fp_problem *p, const cs_tiling *t);
/* Runs p on the decode path with the kernels of one path; scratch holds
 * cs_decode_scratch_bytes(p, t) bytes, 64-byte aligned. */
void cs_decode(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
               const fp_args *args, void *scratch);

#endif /* CS_DECODE_H */
