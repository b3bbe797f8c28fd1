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

/* Box-Muller: two standard-normal values per pair of uniforms. */
void bench_fill_random(void *dst, flashport_dtype dtype, int64_t n, uint64_t seed) {
    const double two_pi = 6.283185307179586;
    uint64_t state = seed;
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
    if (in->o) flashport_buffer_free(in->o);
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

flashport_status bench_inputs_create(flashport_context *ctx, const flashport_problem *p, int sets,
                                     uint64_t seed, bench_inputs *in, char *why, size_t why_len) {
    memset(in, 0, sizeof *in);
    flashport_clear_error();
    size_t es = flashport_dtype_size(p->dtype);
    int64_t nq = flashport_problem_extent(p, 'q'), nk = flashport_problem_extent(p, 'k');
    int64_t nv = flashport_problem_extent(p, 'v'), no = flashport_problem_extent(p, 'o');
    if (es == 0 || nq <= 0 || nk <= 0 || nv <= 0 || no <= 0) {
        snprintf(why, why_len, "invalid problem: %s", flashport_last_error());
        return FLASHPORT_ERROR_INVALID_ARGUMENT;
    }
    in->q_bytes = (size_t)nq * es;
    in->k_bytes = (size_t)nk * es;
    in->v_bytes = (size_t)nv * es;
    in->o_bytes = (size_t)no * es;
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
        bench_fill_random(in->host_q, p->dtype, nq, seed);
        bench_fill_random(in->host_k, p->dtype, nk, seed + 1);
        bench_fill_random(in->host_v, p->dtype, nv, seed + 2);
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
    free(scratch);
    if (st != FLASHPORT_OK) bench_inputs_destroy(in);
    return st;
}
