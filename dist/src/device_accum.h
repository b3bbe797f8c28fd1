/* Device-side float32 accumulators of the NCCL ring: the same operations as host_accum.h, as
 * kernels queued on a stream. */
#ifndef FP_DIST_DEVICE_ACCUM_H
#define FP_DIST_DEVICE_ACCUM_H

#include <cuda_runtime.h>

#include "dist_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of a shard as the kernels see it. */
typedef struct fp_dist_dev_shape {
    int dtype;  /* flashport_dtype */
    int layout; /* flashport_layout */
    int64_t batch, heads, seq_local, head_dim;
} fp_dist_dev_shape;

fp_dist_dev_shape fp_dist_dev_shape_of(const flashport_dist_desc *d, int64_t heads);

/* As fp_dist_merge_rows (shape: heads_q). */
cudaError_t fp_dist_dev_merge_rows(fp_dist_dev_shape sh, int64_t q_off, int64_t q_len,
                                   const void *o_part, const float *lse_part, float *acc_o,
                                   float *acc_lse, cudaStream_t stream);
/* As fp_dist_merge_sinks (shape: heads_q; sinks on the device). */
cudaError_t fp_dist_dev_merge_sinks(fp_dist_dev_shape sh, const float *sinks, float *acc_o,
                                    float *acc_lse, cudaStream_t stream);
/* As fp_dist_add_rows, part of sh.dtype. */
cudaError_t fp_dist_dev_add_rows(fp_dist_dev_shape sh, int64_t off, int64_t len, const void *part,
                                 float *acc, cudaStream_t stream);
/* As fp_dist_lse_rows (shape: heads_q). */
cudaError_t fp_dist_dev_lse_rows(fp_dist_dev_shape sh, int64_t q_off, int64_t q_len,
                                 const float *lse, float *out, cudaStream_t stream);
/* count float32 values to dtype. */
cudaError_t fp_dist_dev_store_all(int dtype, const float *src, void *dst, int64_t count,
                                  cudaStream_t stream);
cudaError_t fp_dist_dev_fill(float *dst, float value, int64_t count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* FP_DIST_DEVICE_ACCUM_H */
