/*
 * The head dim of the instance that runs a problem's, for the variants built for head dims 64,
 * 128 and 256: the next of them up, the columns between zero-filled. Host code.
 */
#ifndef FP_COMMON_INSTANCE_HEAD_DIM_H
#define FP_COMMON_INSTANCE_HEAD_DIM_H

#include <stdint.h>

static inline int fp_instance_head_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

#endif /* FP_COMMON_INSTANCE_HEAD_DIM_H */
