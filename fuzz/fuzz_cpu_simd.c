/*
 * cpu_simd against the reference backend on tiny problems drawn from the input: f32, f16 and
 * bf16 (and FP8), 1..2 batches, grouped-query heads, 1..9 queries and keys, head dims around
 * the vector widths, BHND or BNHD with padded rows, causal, scale, and the API v2 features
 * (window, softcap, ALiBi, bias, sinks, varlen, paged KV); each of the cpu_simd kernels forced
 * or the planner's choice; the v1 call flashport_attention_host or flashport_attention_run_host.
 *
 * A problem cpu_simd declines (UNSUPPORTED) must leave O and the LSE untouched. Otherwise every
 * element of O and the LSE must match the reference's: NaN where it is NaN, the same infinity
 * (or NaN: an infinite value times a weight that is 0 in f32 but not in double), and finite
 * values within
 *     |o - o_ref| <= max|V| * eps32 * (8 S + 64) + ulp * max(|o|, |o_ref|) + tiny,
 * where S bounds the magnitude of any score before the softcap (|scale| sum |q k|, plus the
 * ALiBi, bias and sink terms):
 * cpu_simd rounds each score to f32 (error about eps32 * S, which exp turns into a relative
 * error of the weights), its exp approximation and its f32 sums add a few eps32, and a 16-bit
 * output may then round to the neighbouring value (ulp 2^-10 for f16, 2^-7 for bf16; tiny
 * covers f16 subnormals). The inputs are multiples of 1/32 in [-4, 4), so the products
 * themselves are exact in f32. The LSE is within eps32 * (8 S + 64) + eps32 |lse|.
 */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_problem.h"

static flashport_context *simd, *ref;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* One thread: these problems are one tile, and idle OpenMP workers spinning on the
     * shared cores would cut the inputs a second several times over (test_cpu_simd covers
     * other thread counts). */
    setenv("FLASHPORT_NUM_THREADS", "1", 1);
    if (flashport_context_create("cpu_simd", &simd) != FLASHPORT_OK ||
        flashport_context_create("reference", &ref) != FLASHPORT_OK)
        abort();
    return 0;
}

static const double eps32 = 1.1920928955078125e-07;

/* The largest finite |element * factor| of an array. */
static double max_abs(const void *a, flashport_dtype t, int64_t n, double factor) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double v = fabs(fz_load(a, t, (size_t)i) * factor);
        if (isfinite(v) && v > m) m = v;
    }
    return m;
}

static const int64_t head_dims[] = {1,  2,  3,  4,  5,  7,  8,  9,  15,  16,  17,  24,  31,
                                    32, 33, 40, 48, 63, 64, 65, 96, 127, 128, 129, 160, 256};

/* A tiny problem the reference accepts: returns 0 when the bytes give none. */
static int draw(fz_bytes *b, flashport_attention_desc *d, uint8_t *features) {
    const flashport_dtype dtype = (flashport_dtype)(fz_u8(b) % 5);
    const int64_t batch = fz_u8(b) % 2 + 1, hkv = fz_u8(b) % 2 + 1, hq = hkv * (fz_u8(b) % 3 + 1);
    const int64_t sq = fz_u8(b) % 9 + 1, skv = fz_u8(b) % 9 + 1;
    const int64_t hd = head_dims[fz_u8(b) % (sizeof head_dims / sizeof head_dims[0])];
    const flashport_layout layout = (flashport_layout)(fz_u8(b) & 1);
    flashport_attention_desc_init(d, dtype, batch, hq, hkv, sq, skv, hd, layout);
    const uint8_t f = *features = fz_u8(b);
    if (f & 1) { /* padded rows: every stride scaled */
        const int64_t k = fz_u8(b) % 3 + 2;
        flashport_strides *all[4] = {&d->q, &d->k, &d->v, &d->o};
        for (int i = 0; i < 4; i++) all[i]->batch *= k, all[i]->head *= k, all[i]->seq *= k;
    }
    if (f & 2) d->causal = 1;
    if (f & 4) d->scale = fz_float_field(b);
    if (!isfinite(d->scale)) d->scale = 0.0f;
    if (f & 8) {
        d->window_left = fz_u8(b) % 12 - 1;
        if (!d->causal) d->window_right = fz_u8(b) % 12 - 1;
    }
    if (f & 16) d->softcap = (float)(fz_u8(b) % 64 + 1) / 4.0f;
    if (f & 32) d->alibi = (flashport_alibi)(fz_u8(b) % 2 + 1);
    if (f & 64) {
        d->bias = (flashport_bias_desc){1, (flashport_dtype)(fz_u8(b) % 3), 0, 0, skv, 1};
        if (fz_u8(b) & 1) d->bias.batch = hq * sq * skv, d->bias.head = sq * skv;
    }
    if (f & 128) {
        const uint8_t g = fz_u8(b);
        d->sinks = g & 1;
        /* varlen Q (and K/V unless paged): the maxima are sq and skv, the totals what the
         * batch holds; paged K/V: pages of 1..4 rows, enough of them for skv keys. */
        if (g & 2)
            flashport_attention_desc_set_varlen(d, batch * sq, sq, g & 4 ? 0 : batch * skv, skv);
        if (g & 4) {
            const int64_t page = fz_u8(b) % 4 + 1;
            flashport_attention_desc_set_paged(d, fz_u8(b) % 8 + 1, page, (skv + page - 1) / page,
                                               layout);
        }
    }
    return flashport_attention_desc_validate(d) == FLASHPORT_OK;
}

/* Fills an input array of dtype t from the bytes (FP8 takes them raw, every code). */
static void fill(fz_bytes *b, void *a, flashport_dtype t, int64_t bytes, int specials) {
    const int64_t n = bytes / (int64_t)fz_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t c = fz_u8(b);
        fz_store(a, t, (size_t)i, fz_value(c, specials), c);
    }
}

static int same(double a, double r, double tol) {
    /* An infinity in V reaches O through its weight; a weight the reference keeps in double
     * (e^-468, say) is 0 in f32, and 0 * inf is NaN. */
    if (isinf(r) && isnan(a)) return 1;
    if (isnan(a) || isnan(r)) return isnan(a) && isnan(r);
    if (isinf(a) || isinf(r)) return a == r;
    return fabs(a - r) <= tol;
}

static void compare(const char *what, const void *got, const void *want, flashport_dtype t,
                    int64_t bytes, double tol, double ulp, const flashport_attention_desc *d,
                    const char *kernel) {
    const int64_t n = bytes / (int64_t)fz_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        const double a = fz_load(got, t, (size_t)i), r = fz_load(want, t, (size_t)i);
        const double bound = tol + ulp * fmax(fabs(a), fabs(r)) + 1e-7;
        if (same(a, r, bound)) continue;
        fprintf(stderr,
                "cpu_simd (%s) %s[%lld] = %.9g, reference %.9g (bound %.3g): %s B=%lld Hq=%lld "
                "Hkv=%lld Nq=%lld Nkv=%lld d=%lld causal=%d window=%lld,%lld softcap=%g alibi=%d "
                "bias=%d sinks=%d varlen=%d kv_layout=%d scale=%g\n",
                kernel ? kernel : "planner", what, (long long)i, a, r, bound,
                flashport_dtype_name(d->dtype), (long long)d->batch, (long long)d->heads_q,
                (long long)d->heads_kv, (long long)d->seq_q, (long long)d->seq_kv,
                (long long)d->head_dim, d->causal, (long long)d->window_left,
                (long long)d->window_right, d->softcap, (int)d->alibi, d->bias.enabled, d->sinks,
                d->q_varlen, (int)d->kv_layout, d->scale);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_bytes b = {data, data + size};
    flashport_attention_desc d;
    uint8_t features;
    if (!draw(&b, &d, &features)) return 0;
    const uint8_t how = fz_u8(&b);
    const int specials = how & 1, with_lse = !(how & 2);
    static const char *const kernels[] = {NULL, "portable", "avx2", "avx512"};
    const char *kernel = kernels[(how >> 2) % 4];
    /* The v1 call takes what it can express: no v2 feature, no FP8. */
    const int v1 =
        (how & 64) && !(features & (8 | 16 | 32 | 64 | 128)) && d.dtype <= FLASHPORT_BF16;

    int64_t bytes[FZ_SLOTS];
    void *buf[FZ_SLOTS] = {0};
    for (int i = 0; i < FZ_SLOTS; i++) {
        bytes[i] = fz_slot_bytes(&d, i);
        if (i == FZ_LSE && !with_lse) bytes[i] = 0;
        if (bytes[i] <= 0) continue;
        buf[i] = malloc((size_t)bytes[i]);
        if (!buf[i]) abort();
    }
    fill(&b, buf[FZ_Q], d.dtype, bytes[FZ_Q], specials);
    fill(&b, buf[FZ_K], d.dtype, bytes[FZ_K], specials);
    fill(&b, buf[FZ_V], d.dtype, bytes[FZ_V], specials);
    if (buf[FZ_BIAS]) fill(&b, buf[FZ_BIAS], d.bias.dtype, bytes[FZ_BIAS], specials);
    if (buf[FZ_SINKS]) fill(&b, buf[FZ_SINKS], FLASHPORT_F32, bytes[FZ_SINKS], specials);
    if (buf[FZ_ALIBI])
        for (int64_t i = 0; i < bytes[FZ_ALIBI] / 4; i++)
            ((float *)buf[FZ_ALIBI])[i] = (float)(fz_u8(&b) % 17) / 16.0f;
    for (int i = FZ_Q_DESCALE; i <= FZ_V_DESCALE; i++)
        for (int64_t j = 0; buf[i] && j < bytes[i] / 4; j++)
            ((float *)buf[i])[j] = ldexpf(1.0f, fz_u8(&b) % 5 - 2);
    fz_fill_tables(&b, &d, 0, buf[FZ_CU_Q], buf[FZ_CU_KV], buf[FZ_SEQLENS_KV], buf[FZ_BLOCK_TABLE]);

    /* Each backend writes into its own O and LSE, both first filled with the same pattern,
     * which stays in the gaps of padded rows. */
    void *o_ref = malloc((size_t)bytes[FZ_O]), *o = malloc((size_t)bytes[FZ_O]);
    float *lse_ref = with_lse ? malloc((size_t)bytes[FZ_LSE]) : NULL, *lse = buf[FZ_LSE];
    if (!o_ref || !o || (with_lse && !lse_ref)) abort();
    memset(o_ref, 0xa5, (size_t)bytes[FZ_O]);
    memset(o, 0xa5, (size_t)bytes[FZ_O]);
    if (with_lse)
        memset(lse_ref, 0xa5, (size_t)bytes[FZ_LSE]), memset(lse, 0xa5, (size_t)bytes[FZ_LSE]);

    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = buf[FZ_Q], a.k = buf[FZ_K], a.v = buf[FZ_V], a.o = o_ref, a.lse = lse_ref;
    a.sinks = buf[FZ_SINKS], a.alibi_slopes = buf[FZ_ALIBI], a.bias = buf[FZ_BIAS];
    a.cu_seqlens_q = buf[FZ_CU_Q], a.cu_seqlens_kv = buf[FZ_CU_KV];
    a.seqlens_kv = buf[FZ_SEQLENS_KV], a.block_table = buf[FZ_BLOCK_TABLE];
    a.q_descale = buf[FZ_Q_DESCALE], a.k_descale = buf[FZ_K_DESCALE],
    a.v_descale = buf[FZ_V_DESCALE];
    if (flashport_attention_run_host(ref, &d, &a) != FLASHPORT_OK) {
        fprintf(stderr, "reference refused a valid problem: %s\n", flashport_last_error());
        abort();
    }

    flashport_status st;
    a.o = o, a.lse = lse;
    if (v1) {
        flashport_problem p;
        flashport_problem_init(&p, d.dtype, d.batch, d.heads_q, d.heads_kv, d.seq_q, d.seq_kv,
                               d.head_dim, FLASHPORT_LAYOUT_BHND);
        p.q = d.q, p.k = d.k, p.v = d.v, p.o = d.o;
        p.scale = d.scale;
        p.causal = d.causal;
        p.kernel = kernel;
        st = flashport_attention_host(simd, &p, a.q, a.k, a.v, o, lse);
    } else {
        d.kernel = kernel;
        st = flashport_attention_run_host(simd, &d, &a);
    }
    if (st == FLASHPORT_ERROR_UNSUPPORTED) {
        /* Declined (a feature, or a forced kernel this CPU lacks): nothing written. */
        for (int64_t i = 0; i < bytes[FZ_O]; i++)
            if (((uint8_t *)o)[i] != 0xa5) abort();
        for (int64_t i = 0; with_lse && i < bytes[FZ_LSE]; i++)
            if (((uint8_t *)lse)[i] != 0xa5) abort();
    } else if (st != FLASHPORT_OK) {
        fprintf(stderr, "cpu_simd failed: %s\n", flashport_last_error());
        abort();
    } else {
        const int fp8 = d.dtype == FLASHPORT_FP8_E4M3 || d.dtype == FLASHPORT_FP8_E5M2;
        const double qs =
            fp8 ? max_abs(buf[FZ_Q_DESCALE], FLASHPORT_F32, bytes[FZ_Q_DESCALE] / 4, 1) : 1;
        const double ks =
            fp8 ? max_abs(buf[FZ_K_DESCALE], FLASHPORT_F32, bytes[FZ_K_DESCALE] / 4, 1) : 1;
        const double vs =
            fp8 ? max_abs(buf[FZ_V_DESCALE], FLASHPORT_F32, bytes[FZ_V_DESCALE] / 4, 1) : 1;
        const int64_t nq = bytes[FZ_Q] / (int64_t)fz_dtype_size(d.dtype);
        const int64_t nk = bytes[FZ_K] / (int64_t)fz_dtype_size(d.dtype);
        const double scale = d.scale == 0.0f ? 1.0 / sqrt((double)d.head_dim) : fabs(d.scale);
        /* q k is rounded to f32 before the softcap, and tanh's slope, 1 near 0, passes that
         * rounding on whole: a score whose terms of 6e8 cancel to 4.5 may round to 0, an error
         * the cap keeps. So the error term takes the uncapped magnitude S_dot, and only the
         * test of f32's range below takes the capped one. */
        const double S_dot = scale * max_abs(buf[FZ_Q], d.dtype, nq, qs) *
                             max_abs(buf[FZ_K], d.dtype, nk, ks) * (double)d.head_dim;
        double S_mods = 0.0;
        if (buf[FZ_ALIBI]) S_mods += (double)(d.seq_q + d.seq_kv); /* slopes are at most 1 */
        if (buf[FZ_BIAS])
            S_mods += max_abs(buf[FZ_BIAS], d.bias.dtype,
                              bytes[FZ_BIAS] / (int64_t)fz_dtype_size(d.bias.dtype), 1);
        if (buf[FZ_SINKS]) S_mods += max_abs(buf[FZ_SINKS], FLASHPORT_F32, bytes[FZ_SINKS] / 4, 1);
        const double S_logit = (d.softcap > 0.0f ? fmin(S_dot, d.softcap) : S_dot) + S_mods;
        const double vmax =
            max_abs(buf[FZ_V], d.dtype, bytes[FZ_V] / (int64_t)fz_dtype_size(d.dtype), vs);
        const double score_err = eps32 * (8.0 * (S_dot + S_mods) + 64.0);
        /* The bf16-product variants round P to bf16 before P V, as documented (README, cpu_simd):
         * each weight within 2^-8 of itself, so O within 2^-8 max|V| more. */
        flashport_plan_info plan;
        const int p_bf16 = flashport_attention_plan(simd, &d, &plan) == FLASHPORT_OK &&
                           (!strcmp(plan.kernel, "avx512bf16") || !strcmp(plan.kernel, "amxbf16"));
        const double p_err = p_bf16 ? 0x1p-8 * vmax : 0.0;
        const double ulp = d.out_dtype == FLASHPORT_F16    ? 0x1p-10
                           : d.out_dtype == FLASHPORT_BF16 ? 0x1p-7
                                                           : eps32;
        /* Logits past f32's range are not computable in f32: the kernels work in base 2
         * (scale * log2 e), where a logit of 3e38 is already infinite, and inf - inf is NaN,
         * while the reference keeps it in double. Such problems only have to run. */
        if (S_logit <= 0x1p126) {
            compare("O", o, o_ref, d.out_dtype, bytes[FZ_O], vmax * score_err + p_err, ulp, &d,
                    kernel);
            if (with_lse)
                compare("LSE", lse, lse_ref, FLASHPORT_F32, bytes[FZ_LSE], score_err, eps32, &d,
                        kernel);
        }
    }
    free(o_ref);
    free(o);
    free(lse_ref);
    for (int i = 0; i < FZ_SLOTS; i++) free(buf[i]);
    return 0;
}
