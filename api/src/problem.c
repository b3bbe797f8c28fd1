/* The v1 problem descriptor: defaults, and validation, extents and FLOPs through the v2
 * descriptor it converts into (attention_desc.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

FLASHPORT_API const char *flashport_dtype_name(flashport_dtype dtype) {
    switch (dtype) {
    case FLASHPORT_F32: return "f32";
    case FLASHPORT_F16: return "f16";
    case FLASHPORT_BF16: return "bf16";
    case FLASHPORT_FP8_E4M3: return "fp8_e4m3";
    case FLASHPORT_FP8_E5M2: return "fp8_e5m2";
    case FLASHPORT_F64: return "f64";
    }
    return "unknown";
}

FLASHPORT_API size_t flashport_dtype_size(flashport_dtype dtype) { return fp_dtype_size(dtype); }

static flashport_strides contiguous(flashport_layout layout, int64_t heads, int64_t seq,
                                    int64_t d) {
    flashport_strides s;
    if (layout == FLASHPORT_LAYOUT_BNHD) {
        s.head = d;
        s.seq = fp_mul_sat(heads, d);
        s.batch = fp_mul_sat(seq, s.seq);
    } else {
        s.seq = d;
        s.head = fp_mul_sat(seq, d);
        s.batch = fp_mul_sat(heads, s.head);
    }
    return s;
}

FLASHPORT_API void flashport_problem_init(flashport_problem *p, flashport_dtype dtype,
                                          int64_t batch, int64_t heads_q, int64_t heads_kv,
                                          int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                          flashport_layout layout) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    p->batch = batch;
    p->heads_q = heads_q;
    p->heads_kv = heads_kv;
    p->seq_q = seq_q;
    p->seq_kv = seq_kv;
    p->head_dim = head_dim;
    p->q = p->o = contiguous(layout, heads_q, seq_q, head_dim);
    p->k = p->v = contiguous(layout, heads_kv, seq_kv, head_dim);
}

flashport_status fp_problem_check(const flashport_problem *p, const char *where) {
    if (!p) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "problem is NULL");
    if (p->dtype != FLASHPORT_F32 && p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "unknown dtype %d for flashport_problem (FP8 and f64 inputs take a "
                        "flashport_attention_desc)",
                        (int)p->dtype);
    fp_problem d;
    fp_problem_from_v1(p, &d);
    return fp_desc_check(&d, where);
}

FLASHPORT_API flashport_status flashport_problem_validate(const flashport_problem *p) {
    return fp_problem_check(p, "flashport_problem_validate");
}

FLASHPORT_API int64_t flashport_problem_extent(const flashport_problem *p, char tensor) {
    static const char names[4] = {'q', 'k', 'v', 'o'};
    const char *at = memchr(names, tensor, sizeof names);
    if (!at || fp_problem_check(p, "flashport_problem_extent") != FLASHPORT_OK) return 0;
    fp_problem d;
    fp_problem_from_v1(p, &d);
    return (int64_t)(fp_slot_need(&d, FP_OP_FORWARD, (fp_slot)(at - names)).bytes /
                     flashport_dtype_size(p->dtype));
}

FLASHPORT_API double flashport_problem_flops(const flashport_problem *p) {
    if (!p) return 0.0;
    double f = 4.0 * (double)p->batch * (double)p->heads_q * (double)p->seq_q * (double)p->seq_kv *
               (double)p->head_dim;
    return p->causal ? f / 2.0 : f;
}
