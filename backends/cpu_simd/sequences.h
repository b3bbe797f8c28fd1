/*
 * The two policies every cpu_simd pass shares (the forward's tiles and the backward's):
 *   - KV addressing: a sequence of the batch (dense, packed by cu_seqlens, or paged), its
 *     lengths, and the element offsets of its query, key and value rows and LSE entries;
 *   - the window: which keys each query row sees (causal is one window).
 * The per-row inputs of the score modifiers live here too (the FP8 descale, the ALiBi slope,
 * the bias row), since they are addressed by the row's sequence, head and position.
 */
#ifndef CS_SEQUENCES_H
#define CS_SEQUENCES_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "fp_half.h"

/* One sequence of the batch: its lengths, and where its rows are. */
typedef struct cs_seq {
    int64_t b;
    int64_t nq, nkv;
    int64_t q_row0;       /* packed row of its first query (0 when Q is dense) */
    int64_t kv_row0;      /* packed row of its first key (0 unless K/V are varlen) */
    const int32_t *pages; /* its block-table row (paged K/V only) */
} cs_seq;

static inline cs_seq cs_seq_of(const fp_problem *p, const fp_args *a, int64_t b) {
    cs_seq s = {b, p->seq_q, p->seq_kv, 0, 0, NULL};
    if (p->q_varlen) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_q;
        s.q_row0 = cu[b];
        s.nq = (int64_t)cu[b + 1] - cu[b];
    }
    if (p->kv_layout == FLASHPORT_KV_VARLEN) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_kv;
        s.kv_row0 = cu[b];
        s.nkv = (int64_t)cu[b + 1] - cu[b];
    } else if (p->kv_layout == FLASHPORT_KV_PAGED) {
        s.nkv = ((const int32_t *)a->seqlens_kv)[b];
        s.pages = (const int32_t *)a->block_table + b * p->max_pages_per_seq;
    }
    return s;
}

/* Element offsets of key j's rows in K and V, and how many keys from j on follow at the seq
 * strides: the rest of its page when paged, unbounded otherwise. dK and dV, which take the K
 * and V strides, are addressed by the same offsets. */
static inline int64_t cs_kv_rows(const fp_problem *p, const cs_seq *s, int64_t kvh, int64_t j,
                                 int64_t *k_at, int64_t *v_at) {
    int64_t block = s->b, row = s->kv_row0 + j, run = INT64_MAX;
    if (s->pages) {
        block = s->pages[j / p->page_size];
        row = j % p->page_size;
        run = p->page_size - row;
    }
    *k_at = block * p->k.batch + kvh * p->k.head + row * p->k.seq;
    *v_at = block * p->v.batch + kvh * p->v.head + row * p->v.seq;
    return run;
}

/* Query or output row i of query head h (packed rows have batch stride 0). */
static inline const void *cs_q_row(const void *base, const flashport_strides *st, size_t esize,
                                   const cs_seq *s, int64_t h, int64_t i) {
    return (const char *)base +
           (size_t)(s->b * st->batch + h * st->head + (s->q_row0 + i) * st->seq) * esize;
}

/* LSE entry of row i of query head h: [batch, heads_q, seq_q], or [heads_q, total_q] packed. */
static inline int64_t cs_lse_index(const fp_problem *p, const cs_seq *s, int64_t h, int64_t i) {
    return p->q_varlen ? h * p->total_q + s->q_row0 + i : (s->b * p->heads_q + h) * p->seq_q + i;
}

/* The FP8 descale of a row: the tensor's factor, or that of (batch, head, block of positions);
 * 1 for other dtypes. `len` is the tensor's longest sequence. */
static inline float cs_descale(const fp_problem *p, const void *factors, int64_t heads, int64_t len,
                               int64_t b, int64_t h, int64_t pos) {
    const float *f = (const float *)factors;
    if (p->descale == FLASHPORT_DESCALE_TENSOR) return f[0];
    if (p->descale == FLASHPORT_DESCALE_BLOCK) {
        const int64_t per_head = (len + p->descale_block - 1) / p->descale_block;
        return f[(b * heads + h) * per_head + pos / p->descale_block];
    }
    return 1.0f;
}

/* Keys [*lo, *hi) of sequence s that its query i sees: the window (causal is one) around the
 * sequence's own bottom-right diagonal; [0, 0) when none. */
static inline void cs_row_keys(const fp_problem *p, const cs_seq *s, int64_t i, int64_t *lo,
                               int64_t *hi) {
    const int64_t diag = i + s->nkv - s->nq;
    /* A side longer than the sequence's queries and keys together reaches past every key from
     * every row: clamped to that, it adds to the diagonal without overflow. */
    const int64_t span = s->nq + s->nkv;
    const int64_t left = p->window_left < span ? p->window_left : span;
    const int64_t wr = p->causal ? 0 : p->window_right;
    const int64_t right = wr < span ? wr : span;
    const int64_t a = left < 0 ? 0 : diag - left > 0 ? diag - left : 0;
    const int64_t e = right < 0 ? s->nkv : diag + right + 1 < s->nkv ? diag + right + 1 : s->nkv;
    *lo = e > a ? a : 0;
    *hi = e > a ? e : 0;
}

/* Element of the bias of row i of query head h of sequence s at key 0 (the keys then follow at
 * the key stride). */
static inline int64_t cs_bias_at(const fp_problem *p, const cs_seq *s, int64_t h, int64_t i) {
    return s->b * p->bias.batch + h * p->bias.head + i * p->bias.query;
}

/* out[j * ld] = scale * bias[at + j * key] for lo <= j < hi: one row of a block's bias, laid
 * out as the scores (scale is log2 e: the kernels take base-2 logits). */
static inline void cs_bias_row(const fp_problem *p, const void *bias, int64_t at, int lo, int hi,
                               float scale, float *out, int64_t ld) {
    const int64_t key = p->bias.key;
    if (p->bias.dtype == FLASHPORT_F32) {
        const float *b = (const float *)bias + at;
        for (int j = lo; j < hi; ++j) out[j * ld] = scale * b[j * key];
    } else if (p->bias.dtype == FLASHPORT_F16) {
        const uint16_t *b = (const uint16_t *)bias + at;
        for (int j = lo; j < hi; ++j) out[j * ld] = scale * fp_f16_to_f32(b[j * key]);
    } else {
        const uint16_t *b = (const uint16_t *)bias + at;
        for (int j = lo; j < hi; ++j) out[j * ld] = scale * fp_bf16_to_f32(b[j * key]);
    }
}

/* The ALiBi slope of query head h of batch b. */
static inline float cs_alibi_slope(const fp_problem *p, const void *slopes, int64_t b, int64_t h) {
    return (
        (const float *)slopes)[p->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? b * p->heads_q + h : h];
}

#endif /* CS_SEQUENCES_H */
