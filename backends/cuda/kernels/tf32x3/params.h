/*
 * The arguments of the 3xTF32 forward kernels (flash_forward_kernel.cuh and the wide-head
 * wide_forward_kernel.cuh), passed by value.
 */
#ifndef FP_TF32X3_PARAMS_H
#define FP_TF32X3_PARAMS_H

#include <stdint.h>

/* Everything a block needs, by value. Strides are in elements. */
struct fp_tf32x3_params {
    const float *q, *k, *v;
    float *o;
    float *lse; /* NULL: not wanted */
    int64_t q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, o_b, o_h, o_s;
    int heads_q, group, seq_q, seq_kv, d;
    float scale_log2; /* scale * log2(e) */
    int causal;
    int o_vec4; /* O allows 16-byte stores of four adjacent columns */
};

#endif /* FP_TF32X3_PARAMS_H */
