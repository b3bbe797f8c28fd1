/*
 * What the host side of both 3xTF32 variants (tensor_core_tf32x3.cu, tensor_core_tf32x3_wide.cu)
 * does alike: the checks a problem must pass before its head dim is looked at, and the fill of
 * the kernels' argument struct from a launch. Compiled by the CUDA compiler, with the backend's
 * kernel table.
 */
#ifndef FP_TF32X3_HOST_PARAMS_H
#define FP_TF32X3_HOST_PARAMS_H

#include <stdint.h>
#include <stdio.h>

#include "../../kernel_table.h"
#include "../common/attention_args.cuh"
#include "params.h"

/* 1 when the device and problem allow a 3xTF32 kernel whatever the head dim; else 0 and the
 * reason in why. */
static inline int fp_tf32x3_supports_problem(const fp_problem *p, const fp_gpu_device_props *props,
                                             char *why, size_t why_len) {
    if (props->cc_major < 8) {
        snprintf(why, why_len,
                 "needs compute capability 8.0+ (mma.sync .tf32, cp.async), device is %d.%d",
                 props->cc_major, props->cc_minor);
        return 0;
    }
    if (p->dtype != FLASHPORT_F32) {
        snprintf(why, why_len, "3xTF32 path takes f32 inputs only");
        return 0;
    }
    return fp_attn_sizes_fit(p, why, why_len);
}

/* 16-byte vectors of floats: the base and every stride keep row starts 16-byte aligned. */
static inline int fp_tf32x3_vec4_aligned(const void *base, const flashport_strides *s) {
    return (uintptr_t)base % 16 == 0 && s->batch % 4 == 0 && s->head % 4 == 0 && s->seq % 4 == 0;
}

/* The kernels' arguments for launch L. Returns 1 when Q, K and V allow the cp.async load path
 * (16-byte copies), 0 for the element-by-element one. */
static inline int fp_tf32x3_fill_params(fp_tf32x3_params *prm, const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    prm->q = static_cast<const float *>(L->q);
    prm->k = static_cast<const float *>(L->k);
    prm->v = static_cast<const float *>(L->v);
    prm->o = static_cast<float *>(L->o);
    prm->lse = L->lse;
    prm->q_b = p->q.batch, prm->q_h = p->q.head, prm->q_s = p->q.seq;
    prm->k_b = p->k.batch, prm->k_h = p->k.head, prm->k_s = p->k.seq;
    prm->v_b = p->v.batch, prm->v_h = p->v.head, prm->v_s = p->v.seq;
    prm->o_b = p->o.batch, prm->o_h = p->o.head, prm->o_s = p->o.seq;
    prm->heads_q = (int)p->heads_q;
    prm->group = (int)(p->heads_q / p->heads_kv);
    prm->seq_q = (int)p->seq_q;
    prm->seq_kv = (int)p->seq_kv;
    prm->d = (int)p->head_dim;
    prm->scale_log2 = p->scale * 1.44269504088896340736f;
    prm->causal = p->causal != 0;
    prm->o_vec4 = fp_tf32x3_vec4_aligned(L->o, &p->o);
    prm->seq = fp_seq_layout_make(p, L->args);
    prm->mods = fp_score_mods_make(p, L->args);
    return fp_tf32x3_vec4_aligned(L->q, &p->q) && fp_tf32x3_vec4_aligned(L->k, &p->k) &&
           fp_tf32x3_vec4_aligned(L->v, &p->v);
}

#endif /* FP_TF32X3_HOST_PARAMS_H */
