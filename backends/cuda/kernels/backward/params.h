/*
 * What every backward kernel of the CUDA backend receives, by value: the problem's tensors and
 * strides, its layout and score modifiers (the forward's shared headers), and the workspace the
 * preprocessing kernel fills (backward/workspace.cuh).
 *
 * The backward recomputes P from Q, K and the forward's LSE, tile by tile, with no N x N storage:
 *   D_i = dO_i . O_i,  P_ij = exp(s_ij - LSE_i),  dP_ij = dO_i . V_j,
 *   dS_ij = P_ij (dP_ij - D_i) * ds_ij/dx_ij   (x = q_i . k_j; 1 - tanh^2 under a softcap),
 *   dV_j = sum_i P_ij dO_i,  dK_j = scale sum_i dS_ij q_i,  dQ_i = scale sum_j dS_ij k_j.
 * ALiBi, the bias and the sink only enter s_ij or the LSE, so they have no term of their own.
 */
#ifndef FP_BACKWARD_PARAMS_H
#define FP_BACKWARD_PARAMS_H

#include <stdint.h>

#include "../common/kv_addressing.cuh"
#include "../common/score_mods.cuh"

struct fp_bwd_params {
    const void *q, *k, *v, *o, *d_o;
    void *d_q, *d_k, *d_v;
    const float *lse;
    flashport_strides qs, ks, vs, os; /* dQ, dK, dV by the q, k, v strides; dO by o's */
    fp_seq_layout seq;
    fp_score_mods mods; /* signed scale */
    int group, d;
    float scale_log2; /* scale * log2(e), signed: no running max, so no sign trick */
    /* Workspace, one entry per LSE row (fp_lse_index): the LSE in the log2 domain (+inf where it
     * is -inf, so that P = 2^(s - lse) is 0 on a row that sees no key), D, and in fast mode
     * the f32 dQ accumulator (NULL in deterministic mode): [rows, d] by LSE rows in
     * backward_f32, fragment tiles of dq_head_rows padded rows a head in backward_mma and
     * backward_tf32x3 (dq_tiles.cuh). */
    float *lse_log2, *delta, *dq_acc;
    int64_t dq_head_rows;
};

#endif /* FP_BACKWARD_PARAMS_H */
