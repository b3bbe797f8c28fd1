/*
 * The arguments of the 3xTF32 forward kernels (flash_forward_kernel.cuh and the wide-head
 * wide_forward_kernel.cuh), passed by value.
 */
#ifndef FP_TF32X3_PARAMS_H
#define FP_TF32X3_PARAMS_H

#include <stdint.h>

#include "../common/kv_addressing.cuh"
#include "../common/score_mods.cuh"

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
    /* API v2 layouts and masks (the narrow kernel's GENERAL instances read them): */
    fp_seq_layout seq;
    fp_score_mods mods;
};

#endif /* FP_TF32X3_PARAMS_H */
