/*
 * The backward pass of the cpu_simd backend, on the forward's micro-kernels and policies.
 *
 * Work items are key tiles: one tile of keys of one KV head of one sequence, its K and V
 * converted once, its dK and dV accumulated in the thread's scratch over every block of query
 * rows of every query head of the group (GQA sums there), then stored; a block recomputes its
 * scores S = Q K^T and dP = dO V^T with the forward's score kernel, P = exp(S - LSE) and
 * dS = P (dP - D) with the gradient kernel (D = rowsum(dO * O), computed once per row before the
 * items), and adds P^T dO to dV and dS^T Q to dK. dQ = dS K needs every key tile of a row:
 *   - fast (deterministic = 0): each block's dQ is added into an f32 accumulator of every row,
 *     under a lock striped by query block, in whatever order the threads finish, then stored;
 *   - deterministic: the key-tile pass leaves dQ alone, and a second pass over blocks of query
 *     rows recomputes S, dP and dS and sums dS K over the key tiles in order, so that the bits
 *     depend neither on the schedule nor on the thread count (two more products per block).
 * Scratch is per thread (tiles of Q, dO, K, V, dK, dV and two key x row blocks) plus, in the
 * fast mode, the accumulator, the size of dQ in f32: never a function of Nq x Nkv.
 */
#ifndef CS_BACKWARD_H
#define CS_BACKWARD_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "kernels/kernel_ops.h"

/* Key tiles are multiples of this: whole steps of the score kernel (CS_KEY_STEP) and whole
 * groups of rows of the transposed product (CS_PV_ROWS). */
#define CS_BWD_KEY_STEP 48

typedef struct cs_bwd_tiling {
    int keys; /* keys of a tile, a multiple of CS_BWD_KEY_STEP */
    int rows; /* query rows of a block: one Q panel */
    int64_t dq;
    int threads;
    int deterministic;
    int64_t rows_total; /* LSE entries: the rows of D and of the fast mode's dQ accumulator */
    int64_t max_items;  /* work items of either pass, at most */
} cs_bwd_tiling;

void cs_bwd_tiling_choose(const fp_problem *p, int threads, cs_bwd_tiling *t);
size_t cs_bwd_scratch_bytes(const cs_bwd_tiling *t);
void cs_bwd_tiling_to_plan(const cs_bwd_tiling *t, fp_plan *plan);
void cs_bwd_tiling_from_plan(const fp_plan *plan, cs_bwd_tiling *t);

/* Writes dQ, dK and dV. scratch holds cs_bwd_scratch_bytes(t) bytes, 64-byte aligned. */
void cs_attention_backward(const cs_kernel_ops *ops, const cs_bwd_tiling *t, const fp_problem *p,
                           const fp_args *args, void *scratch);

#endif /* CS_BACKWARD_H */
