/* Random device-resident inputs for flashport-bench. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "fp_half.h"

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so that log() below stays finite. */
static double uniform01(uint64_t *state) {
    return ((double)(splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static void store(void *dst, flashport_dtype dtype, int64_t i, float x) {
    switch (dtype) {
    case FLASHPORT_F16: ((uint16_t *)dst)[i] = fp_f32_to_f16(x); break;
    case FLASHPORT_BF16: ((uint16_t *)dst)[i] = fp_f32_to_bf16(x); break;
    default: ((float *)dst)[i] = x; break;
    }
}

float bench_load(const void *src, flashport_dtype dtype, int64_t i) {
    switch (dtype) {
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)src)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)src)[i]);
    default: return ((const float *)src)[i];
    }
}

/* FP8 bytes of magnitude 0.25 to 7.5: a random sign and mantissa, and one of the five
 * exponents around 1 (E4M3: fields 5..9 of bias 7; E5M2: 13..17 of bias 15), so never NaN or
 * infinite. */
static void fill_fp8(uint8_t *dst, flashport_dtype dtype, int64_t n, uint64_t *state) {
    const int e4m3 = dtype == FLASHPORT_FP8_E4M3;
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(state);
        const unsigned sign = (unsigned)(r & 1) << 7, exp = (unsigned)((r >> 1) % 5);
        dst[i] = (uint8_t)(e4m3 ? sign | (exp + 5) << 3 | (unsigned)((r >> 8) & 7)
                                : sign | (exp + 13) << 2 | (unsigned)((r >> 8) & 3));
    }
}

/* Box-Muller: two standard-normal values per pair of uniforms. */
void bench_fill_random(void *dst, flashport_dtype dtype, int64_t n, uint64_t seed) {
    const double two_pi = 6.283185307179586;
    uint64_t state = seed;
    if (dtype == FLASHPORT_FP8_E4M3 || dtype == FLASHPORT_FP8_E5M2) {
        fill_fp8(dst, dtype, n, &state);
        return;
    }
    for (int64_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform01(&state)));
        double t = two_pi * uniform01(&state);
        store(dst, dtype, i, (float)(r * cos(t)));
        if (i + 1 < n) store(dst, dtype, i + 1, (float)(r * sin(t)));
    }
}

int bench_choose_sets(size_t set_bytes, size_t cache_bytes) {
    const size_t budget = (size_t)512 << 20;
    if (set_bytes == 0 || set_bytes >= 4 * cache_bytes) return 1;
    size_t sets = (2 * cache_bytes + set_bytes - 1) / set_bytes;
    if (sets < 2) sets = 2;
    if (sets > 64) sets = 64;
    while (sets > 2 && sets * set_bytes > budget) --sets;
    return (int)sets;
}

void bench_inputs_destroy(bench_inputs *in) {
    for (int s = 0; s < in->sets; ++s) {
        if (in->q && in->q[s]) flashport_buffer_free(in->q[s]);
        if (in->k && in->k[s]) flashport_buffer_free(in->k[s]);
        if (in->v && in->v[s]) flashport_buffer_free(in->v[s]);
    }
    flashport_buffer *shared[] = {in->o,           in->cu_q,  in->cu_kv,      in->seqlens_kv,
                                  in->block_table, in->alibi, in->bias,       in->sinks,
                                  in->descale[0],  in->descale[1], in->descale[2], in->lse,
                                  in->d_o,         in->d_q,   in->d_k,        in->d_v};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; ++i)
        if (shared[i]) flashport_buffer_free(shared[i]);
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->host_q);
    free(in->host_k);
    free(in->host_v);
    memset(in, 0, sizeof *in);
}

/* Set s of a tensor: set 0's values rotated by s*7919 elements. Distinct data at distinct
 * addresses is all that keeping the inputs out of cache needs, and a rotation costs a copy where
 * drawing fresh numbers for dozens of sets would cost seconds. */
static flashport_status upload_set(flashport_buffer **buf, flashport_context *ctx,
                                   const unsigned char *set0, int64_t n, size_t es, int s,
                                   unsigned char *scratch) {
    size_t bytes = (size_t)n * es;
    flashport_status st = flashport_buffer_alloc(ctx, bytes, buf);
    if (st != FLASHPORT_OK) return st;
    if (s == 0) return flashport_buffer_upload(*buf, 0, set0, bytes);
    size_t shift = (size_t)(((int64_t)s * 7919) % n) * es;
    memcpy(scratch, set0 + shift, bytes - shift);
    memcpy(scratch + (bytes - shift), set0, shift);
    return flashport_buffer_upload(*buf, 0, scratch, bytes);
}

/* A buffer holding a copy of `bytes` bytes of host memory (tables, slopes, descales). */
static flashport_status upload_table(flashport_context *ctx, const void *host, size_t bytes,
                                     flashport_buffer **buf) {
    flashport_status st = flashport_buffer_alloc(ctx, bytes, buf);
    return st != FLASHPORT_OK ? st : flashport_buffer_upload(*buf, 0, host, bytes);
}

/* The descriptor's tables and f32 parameters, shared by every input set. */
static flashport_status upload_tables(flashport_context *ctx, const bench_problem *p,
                                      bench_inputs *in) {
    const flashport_attention_desc *d = &p->desc;
    const size_t i4 = sizeof(int32_t), b = (size_t)d->batch;
    flashport_status st = FLASHPORT_OK;
    if (p->cu_q) st = upload_table(ctx, p->cu_q, (b + 1) * i4, &in->cu_q);
    if (!st && p->cu_kv) st = upload_table(ctx, p->cu_kv, (b + 1) * i4, &in->cu_kv);
    if (!st && p->seqlens_kv) st = upload_table(ctx, p->seqlens_kv, b * i4, &in->seqlens_kv);
    if (!st && p->block_table)
        st = upload_table(ctx, p->block_table, b * (size_t)d->max_pages_per_seq * i4,
                          &in->block_table);
    if (!st && d->alibi)
        st = upload_table(ctx, p->alibi, (size_t)d->heads_q * sizeof(float), &in->alibi);
    if (!st && p->bias)
        st = upload_table(ctx, p->bias, (size_t)(d->batch * d->bias.batch) * sizeof(float),
                          &in->bias);
    if (!st && p->sinks)
        st = upload_table(ctx, p->sinks, (size_t)d->heads_q * sizeof(float), &in->sinks);
    for (int t = 0; t < 3 && !st && d->descale; ++t)
        st = upload_table(ctx, &p->descale[t], sizeof(float), &in->descale[t]);
    return st;
}

void bench_inputs_args(const bench_inputs *in, int set, flashport_attention_args *a) {
    *a = (flashport_attention_args)FLASHPORT_ATTENTION_ARGS_INIT;
    a->q = in->q[set];
    a->k = in->k[set];
    a->v = in->v[set];
    a->o = in->o;
    a->cu_seqlens_q = in->cu_q;
    a->cu_seqlens_kv = in->cu_kv;
    a->seqlens_kv = in->seqlens_kv;
    a->block_table = in->block_table;
    a->alibi_slopes = in->alibi;
    a->bias = in->bias;
    a->sinks = in->sinks;
    a->q_descale = in->descale[0];
    a->k_descale = in->descale[1];
    a->v_descale = in->descale[2];
    if (!in->d_o) return;
    a->lse = in->lse;
    a->d_o = in->d_o;
    a->d_q = in->d_q;
    a->d_k = in->d_k;
    a->d_v = in->d_v;
}

flashport_status bench_inputs_add_backward(flashport_context *ctx, const bench_problem *p,
                                           uint64_t seed, bench_inputs *in, char *why,
                                           size_t why_len) {
    const flashport_attention_desc *d = &p->desc;
    const size_t os = flashport_dtype_size(d->out_dtype);
    const size_t lse_bytes = sizeof(float) * (size_t)d->heads_q *
                             (size_t)(d->q_varlen ? d->total_q : d->batch * d->seq_q);
    void *host_do = malloc(in->o_bytes);
    flashport_status st = host_do ? FLASHPORT_OK : FLASHPORT_ERROR_OUT_OF_MEMORY;
    why[0] = '\0';
    if (st) snprintf(why, why_len, "host allocation of dO failed");
    if (!st) bench_fill_random(host_do, d->out_dtype, p->o_elems, seed + 3);
    if (!st) st = flashport_buffer_alloc(ctx, lse_bytes, &in->lse);
    if (!st) st = upload_table(ctx, host_do, in->o_bytes, &in->d_o);
    if (!st) st = flashport_buffer_alloc(ctx, in->o_bytes, &in->d_q);
    if (!st) st = flashport_buffer_alloc(ctx, (size_t)p->kv_elems * os, &in->d_k);
    if (!st) st = flashport_buffer_alloc(ctx, (size_t)p->kv_elems * os, &in->d_v);
    free(host_do);
    if (!st) {
        flashport_attention_args a;
        flashport_buffer *d_o = in->d_o;
        in->d_o = NULL; /* the forward call's arguments */
        bench_inputs_args(in, 0, &a);
        in->d_o = d_o;
        a.lse = in->lse;
        st = flashport_attention_run(ctx, d, &a);
        if (!st) st = flashport_synchronize(ctx);
    }
    if (st && !why[0]) snprintf(why, why_len, "backward buffers: %s", flashport_last_error());
    if (st) bench_inputs_destroy(in);
    return st;
}

flashport_status bench_inputs_create(flashport_context *ctx, const bench_problem *p, int sets,
                                     uint64_t seed, bench_inputs *in, char *why, size_t why_len) {
    memset(in, 0, sizeof *in);
    flashport_clear_error();
    const flashport_attention_desc *d = &p->desc;
    const size_t es = flashport_dtype_size(d->dtype), os = flashport_dtype_size(d->out_dtype);
    const int64_t nq = p->q_elems, nk = p->kv_elems, nv = p->kv_elems;
    in->q_bytes = (size_t)nq * es;
    in->k_bytes = (size_t)nk * es;
    in->v_bytes = (size_t)nv * es;
    in->o_bytes = (size_t)p->o_elems * os;
    size_t largest = in->q_bytes;
    if (in->k_bytes > largest) largest = in->k_bytes;
    if (in->v_bytes > largest) largest = in->v_bytes;

    in->sets = sets;
    in->q = calloc((size_t)sets, sizeof *in->q);
    in->k = calloc((size_t)sets, sizeof *in->k);
    in->v = calloc((size_t)sets, sizeof *in->v);
    in->host_q = malloc(in->q_bytes);
    in->host_k = malloc(in->k_bytes);
    in->host_v = malloc(in->v_bytes);
    unsigned char *scratch = sets > 1 ? malloc(largest) : NULL;
    flashport_status st = FLASHPORT_OK;
    if (!in->q || !in->k || !in->v || !in->host_q || !in->host_k || !in->host_v ||
        (sets > 1 && !scratch)) {
        snprintf(why, why_len, "host allocation of %zu bytes failed", largest);
        st = FLASHPORT_ERROR_OUT_OF_MEMORY;
    } else {
        bench_fill_random(in->host_q, d->dtype, nq, seed);
        bench_fill_random(in->host_k, d->dtype, nk, seed + 1);
        bench_fill_random(in->host_v, d->dtype, nv, seed + 2);
    }
    for (int s = 0; st == FLASHPORT_OK && s < sets; ++s) {
        st = upload_set(&in->q[s], ctx, in->host_q, nq, es, s, scratch);
        if (st == FLASHPORT_OK) st = upload_set(&in->k[s], ctx, in->host_k, nk, es, s, scratch);
        if (st == FLASHPORT_OK) st = upload_set(&in->v[s], ctx, in->host_v, nv, es, s, scratch);
        if (st != FLASHPORT_OK)
            snprintf(why, why_len, "input set %d of %d: %s", s + 1, sets, flashport_last_error());
    }
    if (st == FLASHPORT_OK) {
        st = flashport_buffer_alloc(ctx, in->o_bytes, &in->o);
        if (st != FLASHPORT_OK) snprintf(why, why_len, "output: %s", flashport_last_error());
    }
    if (st == FLASHPORT_OK && (st = upload_tables(ctx, p, in)) != FLASHPORT_OK)
        snprintf(why, why_len, "tables: %s", flashport_last_error());
    free(scratch);
    if (st != FLASHPORT_OK) bench_inputs_destroy(in);
    return st;
}
