/*
 * What fuzz_desc and fuzz_cpu_simd share: a reader of the fuzzer's bytes, an API v2 descriptor
 * built from them, and host arrays sized exactly as flashport.h documents each buffer, so that
 * AddressSanitizer sees any access past what the documentation lets the library touch. The
 * sizes are worked out here from the header's text, independently of the library's own code.
 */
#ifndef FLASHPORT_FUZZ_PROBLEM_H
#define FLASHPORT_FUZZ_PROBLEM_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flashport.h"
#include "fp_fp8.h"
#include "fp_half.h"

typedef struct fz_bytes {
    const uint8_t *p, *end;
} fz_bytes;

/* The next byte; 0 once the input is used up, so that every input is a complete problem. */
static inline uint8_t fz_u8(fz_bytes *b) { return b->p < b->end ? *b->p++ : 0; }

/* A size or index field: small values (-2..17) for most bytes, the edges of the integer types
 * and of the library's checks for the rest. */
static inline int64_t fz_int(fz_bytes *b) {
    static const int64_t edges[] = {INT64_MAX,
                                    INT64_MIN,
                                    INT64_MAX / 2,
                                    INT64_MIN / 2,
                                    INT32_MAX,
                                    INT32_MIN,
                                    (int64_t)INT32_MAX + 1,
                                    (int64_t)1 << 31,
                                    (int64_t)1 << 32,
                                    (int64_t)1 << 40,
                                    (int64_t)1 << 62,
                                    -((int64_t)1 << 62),
                                    65535,
                                    65536,
                                    1024,
                                    4096,
                                    -1000,
                                    1000000,
                                    3037000500,
                                    -3037000500,
                                    (int64_t)1 << 30,
                                    255,
                                    256,
                                    511,
                                    512,
                                    128,
                                    129,
                                    63,
                                    64,
                                    31,
                                    32,
                                    48};
    const uint8_t c = fz_u8(b);
    return c < 0xe0 ? (int64_t)(c % 20) - 2 : edges[c - 0xe0];
}

static inline float fz_float_field(fz_bytes *b) {
    static const float values[] = {0.0f, 1.0f, 0.125f, 50.0f, -1.0f, 1e-30f, 1e30f, 3.0f};
    const uint8_t c = fz_u8(b);
    if (c == 0xff) return NAN;
    if (c == 0xfe) return INFINITY;
    if (c == 0xfd) return -INFINITY;
    return values[c % 8];
}

/* A tensor value: a multiple of 1/32 in [-4, 4), exact in every dtype but FP8, for most bytes;
 * 0xfd..0xff are -inf, +inf and NaN when specials are allowed. */
static inline float fz_value(uint8_t c, int specials) {
    if (specials && c == 0xff) return NAN;
    if (specials && c == 0xfe) return INFINITY;
    if (specials && c == 0xfd) return -INFINITY;
    return (float)((int)c - 128) / 32.0f;
}

static inline size_t fz_dtype_size(flashport_dtype t) {
    return t == FLASHPORT_F64                          ? 8
           : t == FLASHPORT_F32                        ? 4
           : t == FLASHPORT_F16 || t == FLASHPORT_BF16 ? 2
                                                       : 1;
}

/* Stores v as element i of an array of dtype t (FP8: the byte as it is, every code included). */
static inline void fz_store(void *a, flashport_dtype t, size_t i, float v, uint8_t raw) {
    switch (t) {
    case FLASHPORT_F64: ((double *)a)[i] = v; break;
    case FLASHPORT_F32: ((float *)a)[i] = v; break;
    case FLASHPORT_F16: ((uint16_t *)a)[i] = fp_f32_to_f16(v); break;
    case FLASHPORT_BF16: ((uint16_t *)a)[i] = fp_f32_to_bf16(v); break;
    default: ((uint8_t *)a)[i] = raw; break;
    }
}

static inline double fz_load(const void *a, flashport_dtype t, size_t i) {
    switch (t) {
    case FLASHPORT_F64: return ((const double *)a)[i];
    case FLASHPORT_F32: return ((const float *)a)[i];
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)a)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)a)[i]);
    case FLASHPORT_FP8_E4M3: return fp_e4m3_to_f32(((const uint8_t *)a)[i]);
    case FLASHPORT_FP8_E5M2: return fp_e5m2_to_f32(((const uint8_t *)a)[i]);
    }
    return 0.0;
}

/* ---- buffer sizes, from flashport.h ---- */

enum {
    FZ_Q,
    FZ_K,
    FZ_V,
    FZ_O,
    FZ_LSE,
    FZ_SINKS,
    FZ_ALIBI,
    FZ_BIAS,
    FZ_CU_Q,
    FZ_CU_KV,
    FZ_SEQLENS_KV,
    FZ_BLOCK_TABLE,
    FZ_Q_DESCALE,
    FZ_K_DESCALE,
    FZ_V_DESCALE,
    FZ_SLOTS
};

/* 1 + sum (n_i - 1) * s_i elements (0 when a dimension is empty); -1 on overflow. */
static inline int64_t fz_span(const int64_t n[4], const int64_t s[4]) {
    int64_t total = 1, term;
    for (int i = 0; i < 4; i++) {
        if (n[i] <= 0) return 0;
        if (__builtin_mul_overflow(n[i] - 1, s[i], &term) ||
            __builtin_add_overflow(total, term, &total))
            return -1;
    }
    return total;
}

static inline int64_t fz_mul(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

/* Bytes the documentation gives buffer `slot` of a valid descriptor's forward pass; 0 for a
 * buffer it does not use, -1 when the size does not fit. */
static inline int64_t fz_slot_bytes(const flashport_attention_desc *d, int slot) {
    const int fp8 = d->dtype == FLASHPORT_FP8_E4M3 || d->dtype == FLASHPORT_FP8_E5M2;
    const int64_t in = (int64_t)fz_dtype_size(d->dtype), out = (int64_t)fz_dtype_size(d->out_dtype);
    switch (slot) {
    case FZ_Q:
    case FZ_O: {
        const flashport_strides *s = slot == FZ_Q ? &d->q : &d->o;
        const int64_t n[4] = {d->q_varlen ? 1 : d->batch, d->heads_q,
                              d->q_varlen ? d->total_q : d->seq_q, d->head_dim};
        const int64_t st[4] = {s->batch, s->head, s->seq, 1};
        return fz_mul(fz_span(n, st), slot == FZ_Q ? in : out);
    }
    case FZ_K:
    case FZ_V: {
        const flashport_strides *s = slot == FZ_K ? &d->k : &d->v;
        int64_t n[4] = {d->batch, d->heads_kv, d->seq_kv, d->head_dim};
        if (d->kv_layout == FLASHPORT_KV_VARLEN) n[0] = 1, n[2] = d->total_kv;
        if (d->kv_layout == FLASHPORT_KV_PAGED) n[0] = d->num_pages, n[2] = d->page_size;
        const int64_t st[4] = {s->batch, s->head, s->seq, 1};
        return fz_mul(fz_span(n, st), in);
    }
    case FZ_LSE:
        return fz_mul(fz_mul(d->heads_q, d->q_varlen ? d->total_q : fz_mul(d->batch, d->seq_q)), 4);
    case FZ_SINKS: return d->sinks ? fz_mul(d->heads_q, 4) : 0;
    case FZ_ALIBI:
        if (d->alibi == FLASHPORT_ALIBI_NONE) return 0;
        return fz_mul(fz_mul(d->heads_q, d->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? d->batch : 1),
                      4);
    case FZ_BIAS: {
        if (!d->bias.enabled) return 0;
        const int64_t n[4] = {d->batch, d->heads_q, d->seq_q, d->seq_kv};
        const int64_t st[4] = {d->bias.batch, d->bias.head, d->bias.query, d->bias.key};
        return fz_mul(fz_span(n, st), (int64_t)fz_dtype_size(d->bias.dtype));
    }
    case FZ_CU_Q:
    case FZ_CU_KV:
        if (slot == FZ_CU_Q ? !d->q_varlen : d->kv_layout != FLASHPORT_KV_VARLEN) return 0;
        return d->batch < INT64_MAX ? fz_mul(d->batch + 1, 4) : -1;
    case FZ_SEQLENS_KV: return d->kv_layout == FLASHPORT_KV_PAGED ? fz_mul(d->batch, 4) : 0;
    case FZ_BLOCK_TABLE:
        return d->kv_layout == FLASHPORT_KV_PAGED
                   ? fz_mul(fz_mul(d->batch, d->max_pages_per_seq), 4)
                   : 0;
    default: {
        if (!fp8) return 0;
        if (d->descale == FLASHPORT_DESCALE_TENSOR) return 4;
        const int q = slot == FZ_Q_DESCALE;
        const int64_t seq = q ? d->seq_q : d->seq_kv, block = d->descale_block;
        return fz_mul(fz_mul(fz_mul(d->batch, q ? d->heads_q : d->heads_kv),
                             seq / block + (seq % block != 0)),
                      4);
    }
    }
}

/* ---- the tables ---- */

/* Fills the int32 tables a descriptor uses: mode 0 consistent with the descriptor (lengths
 * drawn from the bytes, within the maxima), 1 raw small integers from the bytes, 2 consistent
 * with one entry then overwritten. */
static inline void fz_fill_tables(fz_bytes *b, const flashport_attention_desc *d, int mode,
                                  int32_t *cu_q, int32_t *cu_kv, int32_t *lens, int32_t *table) {
    const int64_t batch = d->batch;
    if (cu_q) {
        cu_q[0] = 0;
        for (int64_t i = 0; i < batch; i++) {
            int64_t len = (int64_t)(fz_u8(b) % ((uint64_t)d->seq_q + 1));
            if (cu_q[i] + len > d->total_q) len = d->total_q - cu_q[i];
            cu_q[i + 1] = (int32_t)(cu_q[i] + len);
        }
    }
    if (cu_kv) {
        cu_kv[0] = 0;
        for (int64_t i = 0; i < batch; i++) {
            int64_t len = (int64_t)(fz_u8(b) % ((uint64_t)d->seq_kv + 1));
            if (cu_kv[i] + len > d->total_kv) len = d->total_kv - cu_kv[i];
            cu_kv[i + 1] = (int32_t)(cu_kv[i] + len);
        }
    }
    if (lens) {
        for (int64_t i = 0; i < batch; i++)
            lens[i] = (int32_t)(fz_u8(b) % ((uint64_t)d->seq_kv + 1));
        for (int64_t i = 0; i < batch * d->max_pages_per_seq; i++)
            table[i] = (int32_t)(fz_u8(b) % d->num_pages);
    }
    int32_t *all[4] = {cu_q, cu_kv, lens, table};
    const int64_t counts[4] = {batch + 1, batch + 1, batch, batch * d->max_pages_per_seq};
    for (int t = 0; t < 4; t++) {
        if (!all[t]) continue;
        if (mode == 1)
            for (int64_t i = 0; i < counts[t]; i++) all[t][i] = (int32_t)(int8_t)fz_u8(b);
        else if (mode == 2 && fz_u8(b) & 1)
            all[t][fz_u8(b) % counts[t]] = (int32_t)fz_int(b);
    }
}

#endif /* FLASHPORT_FUZZ_PROBLEM_H */
