/*
 * Split-KV ("flash-decoding") support shared by the kernels that split the keys of a problem
 * across blocks when B*Hq*ceil(Nq/Br) blocks cannot fill the GPU: the workspace that holds each
 * split's partial result, how many splits to use, and the kernel that merges the partials.
 *
 * Workspace of S splits over the query rows, numbered as the LSE is: rows = B*Hq*Nq with
 * row r = (b*Hq + h)*Nq + i, or for packed Q rows = Hq*total_q with r = h*total_q + t:
 *   part_o : float [S][rows][d]  the split's own normalised output, O_acc / l_split
 *                                (0 for a split that saw no visible key);
 *   part_ml: float [S][rows][2]  (m_split, l_split): the split's maximum of the scaled scores
 *                                in the log2 domain (scores times scale*log2(e)) and its sum of
 *                                exp2(s - m_split); m = -inf and l = 0 when it saw no key.
 * part_o starts the workspace; part_ml follows at fp_split_kv_ml_offset(), 16-byte aligned.
 * The size is O(B*Hq*Nq*S*d), never O(N^2).
 *
 * Merge: M = max_s m_s, w_s = l_s 2^(m_s - M), O = sum_s w_s part_o_s / sum_s w_s,
 * LSE = (M + log2(sum_s w_s)) ln 2. A row that no split saw gives O = 0 and LSE = -inf.
 */
#ifndef FP_CUDA_SPLIT_KV_H
#define FP_CUDA_SPLIT_KV_H

#include <stddef.h>

#include "../kernel_table.h"

/* Rows of one split's partials, numbered as the LSE is: B*Hq*Nq, or Hq*total_q for packed Q. */
int64_t fp_split_kv_rows(const fp_problem *p);

/* 1 when p's rows can be split and merged; else 0 with the reason. Packed Q cannot be yet:
 * the merge walks every packed row, and rows of no sequence (before cu_seqlens_q[0] or from
 * cu_seqlens_q[batch] on) must stay untouched, which the merge cannot see without the table. */
int fp_split_kv_takes(const fp_problem *p, char *why, size_t why_len);

/* Bytes of workspace for `splits` splits of p (0 when splits < 2: nothing to merge). */
size_t fp_split_kv_workspace(const fp_problem *p, int splits);

/* The workspace() of every split-KV variant: fp_split_kv_workspace for params->split_kv. */
size_t fp_split_kv_kernel_workspace(const fp_problem *p, const fp_gpu_kernel_params *params);

/* Byte offset of part_ml from the start of the workspace. */
size_t fp_split_kv_ml_offset(const fp_problem *p, int splits);

/* Merges the partials in L->workspace into L->o (problem dtype and strides) and L->lse (when
 * not NULL). Enqueued on L->stream; returns the launch error, without synchronising. */
gpuError_t fp_split_kv_merge(const fp_gpu_launch *L, int splits);

/* Number of splits: at most enough for B*Hq*ceil(Nq/block_rows)*splits to reach two blocks per
 * SM, at least min_keys_per_split keys each, and among those the fewest that minimise
 * waves x keys per split. 1 means "don't split": the grid already fills the GPU or Nkv is too
 * short to share out. */
int fp_split_kv_choose(const fp_problem *p, const fp_gpu_device_props *props, int block_rows,
                       int min_keys_per_split);

/* p's keys shared out over `splits` >= 2 ranges of whole key_tile-key tiles: keys_per_split is
 * ceil(Nkv / splits) rounded up to whole tiles, which can leave fewer splits than asked (1: the
 * keys are better not split). The tile configuration is left 0. */
fp_split_kv_params fp_split_kv_share(const fp_problem *p, int splits, int key_tile);

#endif /* FP_CUDA_SPLIT_KV_H */
