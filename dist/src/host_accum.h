/* Host-side float32 accumulators of the ring: the LSE merge of partial outputs, the sums of
 * partial gradients, and the conversions between them and the shards' dtype. */
#ifndef FP_DIST_HOST_ACCUM_H
#define FP_DIST_HOST_ACCUM_H

#include "dist_common.h"

/* Merges a rectangle's partial O (dtype, the shard's layout, rows r->q_off .. + q_len written)
 * and its LSE (f32 [B, heads_q, q_len]) into acc_o (f32, the shard's layout) and acc_lse (f32
 * [B, heads_q, n]): O = (e^(l1-m) O1 + e^(l2-m) O2) / (e^(l1-m) + e^(l2-m)), m = max(l1, l2). */
void fp_dist_merge_rows(const flashport_dist_desc *d, const fp_dist_rect *r, const void *o_part,
                        const float *lse_part, float *acc_o, float *acc_lse);

/* Merges the sinks (f32 [heads_q]) into every row, once: a partial with O = 0, LSE = sink_h. */
void fp_dist_merge_sinks(const flashport_dist_desc *d, const float *sinks, float *acc_o,
                         float *acc_lse);

/* acc (f32) += part (part_dtype) over rows off .. off + len of a shard of `heads` heads. */
void fp_dist_add_rows(const flashport_dist_desc *d, flashport_dtype part_dtype, int64_t heads,
                      int64_t off, int64_t len, const void *part, float *acc);

/* Rows q_off .. + q_len of lse (f32 [B, heads_q, n]) into out (f32 [B, heads_q, q_len]). */
void fp_dist_lse_rows(const flashport_dist_desc *d, const fp_dist_rect *r, const float *lse,
                      float *out);

/* count float32 values to dtype. */
void fp_dist_store_all(flashport_dtype dtype, const float *src, void *dst, int64_t count);

#endif /* FP_DIST_HOST_ACCUM_H */
