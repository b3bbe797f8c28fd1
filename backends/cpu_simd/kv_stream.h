/*
 * Reading the K and V rows of a sequence (sequences.h addresses them), for the forward's tile
 * path (attention.c) and the decode path (decode.c): prefetching a run of keys, and converting
 * it into float32 rows a page at a time.
 */
#ifndef CS_KV_STREAM_H
#define CS_KV_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "fp_backend.h"
#include "kernels/kernel_ops.h"
#include "sequences.h"

/* Prefetches the rows of K and V of keys [j, j + n) of KV head kvh, addressed once per page.
 * Inlined: GCC takes a function that only prefetches for one without effects and drops its
 * calls. */
static inline __attribute__((always_inline)) void cs_prefetch_keys(const fp_problem *p,
                                                                   const fp_args *a,
                                                                   const cs_seq *s, int64_t kvh,
                                                                   int64_t j, int64_t n) {
    const size_t es = fp_dtype_size(p->dtype);
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
    const size_t es = fp_dtype_size(p->dtype);
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

/* Places the bf16 keys [j0, j0 + n) of KV head kvh into rows [row, row + n) of the K and V
 * rings through the kernels' own layout (ops->load_kv), a page at a time; each key is handed
 * the next key's V row within its page. */
static inline void cs_place_kv(const cs_kernel_ops *ops, const fp_problem *p, const fp_args *a,
                               const cs_seq *s, int64_t kvh, int64_t j0, int64_t n, int64_t dq,
                               float *k_ring, float *v_ring, int64_t row) {
    const size_t es = fp_dtype_size(p->dtype);
    for (int64_t j = 0; j < n;) {
        int64_t k_at, v_at;
        const int64_t rest = cs_kv_rows(p, s, kvh, j0 + j, &k_at, &v_at);
        const int64_t run = rest < n - j ? rest : n - j;
        const char *v_rows = (const char *)a->v + (size_t)v_at * es;
        for (int64_t r = 0; r < run; ++r, ++j)
            ops->load_kv((const char *)a->k + (size_t)(k_at + r * p->k.seq) * es,
                         v_rows + (size_t)(r * p->v.seq) * es,
                         r + 1 < run ? v_rows + (size_t)((r + 1) * p->v.seq) * es : NULL, r == 0,
                         p->head_dim, dq, k_ring, v_ring, row + j);
    }
}

#endif /* CS_KV_STREAM_H */
