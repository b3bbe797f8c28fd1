/*
 * The per-(query, key) part of API v2 in one place for the CUDA kernels, in flashport.h's order:
 * which keys a query sees (window and causal, aligned bottom-right per sequence), then the score
 * from the dot product: scale, softcap, ALiBi, additive bias, and the sink that joins the
 * denominator. Scores leave in the log2 domain (times log2(e)), as online_softmax.cuh takes them.
 */
#ifndef FP_KERNELS_SCORE_MODS_CUH
#define FP_KERNELS_SCORE_MODS_CUH

#include <math.h>
#include <stdint.h>

#include "../../kernel_table.h"
#include "dtype.cuh"
#include "online_softmax.cuh"

struct fp_score_mods {
    float scale;
    float softcap; /* 0: off */
    flashport_alibi alibi;
    const float *alibi_slopes;
    const void *bias; /* NULL: no bias */
    flashport_dtype bias_dtype;
    int64_t bias_batch, bias_head, bias_query, bias_key;
    const float *sinks; /* NULL: no sinks */
    int heads_q;
    int causal;
    int64_t window_left, window_right; /* -1: unbounded */
};

static inline fp_score_mods fp_score_mods_make(const fp_problem *p, const fp_args *a) {
    fp_score_mods m;
    m.scale = p->scale;
    m.softcap = p->softcap;
    m.alibi = p->alibi;
    m.alibi_slopes = (const float *)a->alibi_slopes;
    m.bias = p->bias.enabled ? a->bias : NULL;
    m.bias_dtype = p->bias.dtype;
    m.bias_batch = p->bias.batch;
    m.bias_head = p->bias.head;
    m.bias_query = p->bias.query;
    m.bias_key = p->bias.key;
    m.sinks = p->sinks ? (const float *)a->sinks : NULL;
    m.heads_q = (int)p->heads_q;
    m.causal = p->causal;
    m.window_left = p->window_left;
    m.window_right = p->window_right;
    return m;
}

/* Keys [*lo, *hi) that query i of a sequence with nq queries and nkv keys sees. Bounds are
 * clamped before they meet the row index, so a window as wide as INT64_MAX is unbounded. */
__device__ __forceinline__ void fp_visible_keys(const fp_score_mods &m, int i, int nq, int nkv,
                                                int *lo, int *hi) {
    const int64_t diag = (int64_t)i + nkv - nq;
    const int64_t right = m.causal ? 0 : m.window_right, left = m.window_left;
    const int64_t first = left < 0 || left >= diag ? 0 : diag - left;
    const int64_t last = right < 0 || right > nkv - 1 - diag ? nkv - 1 : diag + right;
    *lo = (int)first;
    *hi = last < first ? (int)first : (int)(last + 1);
}

/* Whether any modifier beyond the scale applies: kernels take the plain path when not. */
__device__ __forceinline__ bool fp_score_mods_any(const fp_score_mods &m) {
    return m.softcap > 0.0f || m.alibi != FLASHPORT_ALIBI_NONE || m.bias != NULL;
}

__device__ __forceinline__ float fp_bias_load(const void *base, flashport_dtype dt, int64_t i) {
    switch (dt) {
    case FLASHPORT_F16: return fp_to_f32(((const gpuHalf *)base)[i]);
    case FLASHPORT_BF16: return fp_to_f32(((const gpuBFloat16 *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

/* The log2-domain score of query i (head h, batch b) against key j from their dot product. */
__device__ __forceinline__ float fp_score_log2(const fp_score_mods &m, float dot, int b, int h,
                                               int i, int j, int nq, int nkv) {
    float s = m.scale * dot;
    if (!fp_score_mods_any(m)) return s * FP_LOG2E;
    if (m.softcap > 0.0f) s = m.softcap * tanhf(s / m.softcap);
    if (m.alibi != FLASHPORT_ALIBI_NONE) {
        const int idx = m.alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? b * m.heads_q + h : h;
        s -= m.alibi_slopes[idx] * fabsf((float)(i + nkv - nq - j));
    }
    if (m.bias)
        s += fp_bias_load(m.bias, m.bias_dtype,
                          (int64_t)b * m.bias_batch + (int64_t)h * m.bias_head +
                              (int64_t)i * m.bias_query + (int64_t)j * m.bias_key);
    return s * FP_LOG2E;
}

/* The sink logit of head h in the log2 domain, or -inf without sinks. */
__device__ __forceinline__ float fp_sink_log2(const fp_score_mods &m, int h) {
    return m.sinks ? m.sinks[h] * FP_LOG2E : -INFINITY;
}

#endif /* FP_KERNELS_SCORE_MODS_CUH */
