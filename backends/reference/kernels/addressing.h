/*
 * Where the reference finds every element of one problem: the sequences of a batch (dense,
 * varlen, paged), the element offsets of Q, K, V and O rows, the LSE entry of a row, and the
 * values themselves, dequantised into double. Written straight from the formulas in
 * flashport.h, one feature per function, and nothing else.
 */
#ifndef FP_REFERENCE_ADDRESSING_H
#define FP_REFERENCE_ADDRESSING_H

#include <math.h>
#include <stdint.h>

#include "fp_backend.h"
#include "fp_fp8.h"
#include "fp_half.h"

/* One sequence of the batch: how many queries and keys it has, and the packed rows where its
 * queries and keys start (0 where Q or K/V are not packed). */
typedef struct ref_seq {
    int64_t b;
    int64_t nq, nkv;
    int64_t q_row0, kv_row0;
} ref_seq;

static inline ref_seq ref_sequence(const fp_problem *p, const fp_args *a, int64_t b) {
    ref_seq s = {b, p->seq_q, p->seq_kv, 0, 0};
    if (p->q_varlen) {
        const int32_t *cu = a->cu_seqlens_q;
        s.q_row0 = cu[b];
        s.nq = cu[b + 1] - cu[b];
    }
    if (p->kv_layout == FLASHPORT_KV_VARLEN) {
        const int32_t *cu = a->cu_seqlens_kv;
        s.kv_row0 = cu[b];
        s.nkv = cu[b + 1] - cu[b];
    } else if (p->kv_layout == FLASHPORT_KV_PAGED) {
        s.nkv = ((const int32_t *)a->seqlens_kv)[b];
    }
    return s;
}

/* First element of query row i, head h, by Q's or O's strides (packed rows have batch 0). */
static inline int64_t ref_q_row(const flashport_strides *st, const ref_seq *s, int64_t h,
                                int64_t i) {
    return s->b * st->batch + h * st->head + (s->q_row0 + i) * st->seq;
}

/* First element of key row j, kv head hk, by K's or V's strides: dense and packed rows as Q's,
 * a paged row through the block table (k.batch is then the page stride). */
static inline int64_t ref_kv_row(const fp_problem *p, const fp_args *a, const flashport_strides *st,
                                 const ref_seq *s, int64_t hk, int64_t j) {
    if (p->kv_layout == FLASHPORT_KV_PAGED) {
        const int32_t *table = a->block_table;
        const int64_t page = table[s->b * p->max_pages_per_seq + j / p->page_size];
        return page * st->batch + (j % p->page_size) * st->seq + hk * st->head;
    }
    return s->b * st->batch + hk * st->head + (s->kv_row0 + j) * st->seq;
}

/* LSE entry of query row i, head h: [batch, heads_q, seq_q], or [heads_q, total_q] packed. */
static inline int64_t ref_lse_index(const fp_problem *p, const ref_seq *s, int64_t h, int64_t i) {
    if (p->q_varlen) return h * p->total_q + s->q_row0 + i;
    return (s->b * p->heads_q + h) * p->seq_q + i;
}

static inline double ref_load(const void *base, flashport_dtype dt, int64_t i) {
    switch (dt) {
    case FLASHPORT_F64: return ((const double *)base)[i];
    case FLASHPORT_F32: return ((const float *)base)[i];
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_FP8_E4M3: return fp_e4m3_to_f32(((const uint8_t *)base)[i]);
    case FLASHPORT_FP8_E5M2: return fp_e5m2_to_f32(((const uint8_t *)base)[i]);
    }
    return NAN;
}

/* 16-bit outputs round through float32 first: that differs from one rounding of the double only
 * where the float32 result falls exactly on a midpoint of the 16-bit grid, far inside every
 * tolerance. */
static inline void ref_store(void *base, flashport_dtype dt, int64_t i, double v) {
    switch (dt) {
    case FLASHPORT_F64: ((double *)base)[i] = v; break;
    case FLASHPORT_F32: ((float *)base)[i] = (float)v; break;
    case FLASHPORT_F16: ((uint16_t *)base)[i] = fp_f32_to_f16((float)v); break;
    case FLASHPORT_BF16: ((uint16_t *)base)[i] = fp_f32_to_bf16((float)v); break;
    default: break; /* the core accepts only f64, f32, f16 and bf16 outputs */
    }
}

/* The FP8 descale factor of position pos (within its sequence) of head h: one per tensor, or
 * [batch, heads, ceil(seq / descale_block)]; 1 for the other dtypes. seq is seq_q for Q and
 * seq_kv for K and V, heads heads_q or heads_kv. */
static inline double ref_descale(const fp_problem *p, const void *factors, int64_t heads,
                                 int64_t seq, const ref_seq *s, int64_t h, int64_t pos) {
    const float *f = factors;
    switch (p->descale) {
    case FLASHPORT_DESCALE_TENSOR: return f[0];
    case FLASHPORT_DESCALE_BLOCK: {
        /* Not seq + block - 1, which overflows for blocks near INT64_MAX. */
        const int64_t blocks = seq / p->descale_block + (seq % p->descale_block != 0);
        return f[(s->b * heads + h) * blocks + pos / p->descale_block];
    }
    default: return 1.0;
    }
}

#endif /* FP_REFERENCE_ADDRESSING_H */
