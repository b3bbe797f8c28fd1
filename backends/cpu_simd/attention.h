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
#include "tiling.h"

/* Scratch the run needs: threads x (one tile + a K/V ring) and the list of query tiles, never a
 * function of N^2. */
size_t cs_scratch_bytes(const cs_tiling *t);

/* Runs the attention with the kernels of one path. scratch holds cs_scratch_bytes(t) bytes,
 * 64-byte aligned. */
void cs_attention(const cs_kernel_ops *ops, const cs_tiling *t, const fp_problem *p,
                  const fp_args *args, void *scratch);

#endif /* CS_ATTENTION_H */
