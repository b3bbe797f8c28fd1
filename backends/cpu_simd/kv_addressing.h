/*
 * KV addressing of the cpu_simd paths (the tile path, attention.c, and the decode path,
 * decode.c): a sequence's query and key counts and first rows (dense, cu_seqlens for varlen,
 * seqlens_kv and the block table for a paged cache), where key j's rows of K and V are, the rows
 * of Q and O, FP8 descales, and the conversion of a run of keys into float32 rows, a page at a
 * time.
 */
#ifndef CS_KV_ADDRESSING_H
#define CS_KV_ADDRESSING_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "kernels/kernel_ops.h"

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
 * strides: the rest of its page when paged, unbounded otherwise. */
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

/* Prefetches the rows of K and V of keys [j, j + n) of KV head kvh, addressed once per page.
 * Inlined: GCC takes a function that only prefetches for one without effects and drops its
 * calls. */
static inline __attribute__((always_inline)) void cs_prefetch_keys(const fp_problem *p,
                                                                   const fp_args *a,
                                                                   const cs_seq *s, int64_t kvh,
                                                                   int64_t j, int64_t n) {
    const size_t es = flashport_dtype_size(p->dtype);
    const int64_t bytes = p->head_dim * (int64_t)es;
    for (int64_t key = j; key < j + n;) {
        int64_t k_at, v_at;
        const int64_t rest = cs_kv_rows(p, s, kvh, key, &k_at, &v_at);
        const int64_t run = rest < j + n - key ? rest : j + n - key;
        for (int64_t r = 0; r < run; ++r, ++key) {
            const char *k = (const char *)a->k + (size_t)(k_at + r * p->k.seq) * es;
            const char *v = (const char *)a->v + (size_t)(v_at + r * p->v.seq) * es;
            for (int64_t at = 0; at < bytes; at += 64) {
                __builtin_prefetch(k + at, 0, 3);
                __builtin_prefetch(v + at, 0, 3);
            }
        }
    }
}

/* Converts keys [j0, j0 + n) of KV head kvh into float32 rows of dq floats at k and v (times
 * their descales, zero past head_dim), a page (or the whole run) at a time. With ahead > 0 each
 * key's conversion also prefetches the rows of the key `ahead` further on, while it is before
 * `end`: a stream of keys then keeps its next block in flight while this one converts. */
static inline void cs_convert_kv(const cs_kernel_ops *ops, const fp_problem *p, const fp_args *a,
                                 const cs_seq *s, int64_t kvh, int64_t j0, int64_t n, int64_t dq,
                                 float *k, float *v, int64_t ahead, int64_t end) {
    const size_t es = flashport_dtype_size(p->dtype);
    for (int64_t j = 0; j < n;) {
        int64_t k_at, v_at;
        const int64_t rest = cs_kv_rows(p, s, kvh, j0 + j, &k_at, &v_at);
        const int64_t run = rest < n - j ? rest : n - j;
        for (int64_t r = 0; r < run; ++r, ++j) {
            const int64_t key = j0 + j;
            if (ahead > 0 && key + ahead < end) cs_prefetch_keys(p, a, s, kvh, key + ahead, 1);
            ops->load_row(
                (const char *)a->k + (size_t)(k_at + r * p->k.seq) * es, p->dtype, p->head_dim, dq,
                cs_descale(p, a->k_descale, p->heads_kv, p->seq_kv, s->b, kvh, key), k + j * dq);
            ops->load_row(
                (const char *)a->v + (size_t)(v_at + r * p->v.seq) * es, p->dtype, p->head_dim, dq,
                cs_descale(p, a->v_descale, p->heads_kv, p->seq_kv, s->b, kvh, key), v + j * dq);
        }
    }
}

#endif /* CS_KV_ADDRESSING_H */
