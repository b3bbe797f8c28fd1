/*
 * cpu_simd's backward pass on the kernel path named on the command line (portable, avx2 or
 * avx512), against the reference backend's in the same process, from the same O and LSE: every
 * combination of window (causal included), softcap, ALiBi, bias, sinks and packed sequences on
 * random problems (GQA, odd head dims, rows that see no key, several key tiles and query
 * blocks, f32, f16 and bf16, both modes), then rows whose bias masks every key. Every element
 * of dQ, dK and dV is compared, and packed rows of no sequence must keep their sentinel. The
 * deterministic mode must give the same bits for 1, 2 and 3 threads and on a second run; paged
 * K/V and FP8 inputs are declined by name with nothing written.
 *
 * A path the planner refuses exits 77 (ctest: skipped) with the planner's reason; test_cpu_simd
 * checks that such a refusal is right for this CPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "backward_case.h"
#include "check.h"

#define EXIT_SKIP 77

static double tolerance(flashport_dtype t) {
    return t == FLASHPORT_F32 ? 2e-5 : t == FLASHPORT_F16 ? 2e-3 : 1e-2;
}

/* One problem: the reference's and the path's gradients from the reference's O and LSE. */
static void check(flashport_context *simd, flashport_context *ref, const bwd_spec *s,
                  const char *kernel, const char *what) {
    double err[3];
    CHECK_STATUS(bwd_errors_vs_reference(simd, ref, s, kernel, err), FLASHPORT_OK, NULL);
    const double tol = tolerance(s->dtype);
    const int ok = err[0] < tol && err[1] < tol && err[2] < tol;
    CHECK(ok);
    if (!ok || what)
        printf("%s %-28s %s B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld det=%d: dQ %.1e dK "
               "%.1e dV %.1e\n",
               ok ? "ok  " : "FAIL", what ? what : "random", flashport_dtype_name(s->dtype),
               (long long)s->batch, (long long)s->heads_q, (long long)s->heads_kv,
               (long long)s->seq_q, (long long)s->seq_kv, (long long)s->head_dim, s->deterministic,
               err[0], err[1], err[2]);
}

enum {
    F_WINDOW = 1,
    F_CAUSAL = 2,
    F_SOFTCAP = 4,
    F_ALIBI = 8,
    F_BIAS = 16,
    F_SINKS = 32,
    F_VARLEN = 64,
    F_ALL = 127
};

static bwd_spec random_spec(unsigned f, int big) {
    static const int64_t dims[] = {8, 13, 40, 64, 72, 128};
    static const flashport_dtype dts[] = {FLASHPORT_F32, FLASHPORT_F16, FLASHPORT_BF16,
                                          FLASHPORT_F32};
    bwd_spec s;
    memset(&s, 0, sizeof s);
    s.dtype = dts[bwd_pick(0, 3)];
    s.batch = bwd_pick(1, 3);
    s.heads_kv = bwd_pick(1, 2);
    s.heads_q = s.heads_kv * bwd_pick(1, 3);
    s.head_dim = dims[bwd_pick(0, 5)];
    s.seq_q = big ? bwd_pick(60, 160) : bwd_pick(1, 30);
    s.seq_kv = big ? bwd_pick(90, 250) : bwd_pick(1, 60);
    s.layout = bwd_pick(0, 1) ? FLASHPORT_LAYOUT_BNHD : FLASHPORT_LAYOUT_BHND;
    s.window_left = s.window_right = -1;
    s.causal = (f & F_CAUSAL) != 0;
    if (f & F_WINDOW) {
        s.window_left = bwd_pick(0, s.seq_kv);
        if (!s.causal) s.window_right = bwd_pick(-1, 8);
    }
    s.softcap = f & F_SOFTCAP ? (float)bwd_uniform(1.0, 30.0) : 0.0f;
    s.alibi = f & F_ALIBI
                  ? (bwd_pick(0, 1) ? FLASHPORT_ALIBI_PER_HEAD : FLASHPORT_ALIBI_PER_BATCH_HEAD)
                  : FLASHPORT_ALIBI_NONE;
    s.bias = (f & F_BIAS) != 0;
    s.masked = s.bias && bwd_pick(0, 1);
    s.sinks = (f & F_SINKS) != 0;
    s.varlen = (f & F_VARLEN) != 0;
    s.scale = bwd_pick(0, 3) == 0 ? (float)bwd_uniform(0.05, 0.5) : 0.0f;
    s.deterministic = (int)bwd_pick(0, 1);
    return s;
}

/* deterministic = 1: the same bits for 1, 2 and 3 threads, run after run. */
static void determinism(flashport_context *simd, flashport_context *ref, const char *kernel) {
    bwd_spec s = random_spec(F_CAUSAL | F_SOFTCAP | F_VARLEN, 1);
    s.dtype = FLASHPORT_F32, s.deterministic = 1, s.batch = 2, s.heads_q = 4, s.heads_kv = 2;
    s.seq_q = 150, s.seq_kv = 230, s.head_dim = 64;
    bwd_case first, again;
    const uint64_t seed = bwd_rng;
    bwd_case_make(&first, &s);
    bwd_rng = seed;
    bwd_case_make(&again, &s);
    CHECK(bwd_case_forward(ref, &first) == FLASHPORT_OK);
    CHECK(bwd_case_forward(ref, &again) == FLASHPORT_OK);
    const char *threads[] = {"1", "2", "3", "2"};
    int identical = 1;
    for (int i = 0; i < 4; i++) {
        setenv("FLASHPORT_NUM_THREADS", threads[i], 1);
        CHECK(bwd_case_backward(simd, i ? &again : &first, kernel) == FLASHPORT_OK);
        if (i) identical &= bwd_same_bits(&first, &again);
    }
    unsetenv("FLASHPORT_NUM_THREADS");
    printf("deterministic: %s bits for 1, 2, 3 and 2 threads again\n",
           identical ? "the same" : "DIFFERENT");
    CHECK(identical);
    bwd_case_free(&first);
    bwd_case_free(&again);
}

/* Paged K/V and FP8 inputs: declined by name, nothing written. */
static void declines(flashport_context *simd, flashport_context *ref, const char *kernel) {
    bwd_spec s = random_spec(0, 0);
    s.dtype = FLASHPORT_F32, s.batch = 2, s.seq_kv = 8, s.heads_q = s.heads_kv = 1, s.head_dim = 8;
    bwd_case c;
    bwd_case_make(&c, &s);
    CHECK(bwd_case_forward(ref, &c) == FLASHPORT_OK);
    memset(c.dq, BWD_SENTINEL, (size_t)c.n_q * c.esize);
    flashport_attention_desc d = c.d;
    d.kernel = kernel;
    flashport_attention_desc_set_paged(&d, 4, 4, 2, FLASHPORT_LAYOUT_BNHD);
    int32_t lens[2] = {8, 5}, table[4] = {0, 1, 2, 3};
    flashport_attention_host_args a = c.a;
    a.seqlens_kv = lens, a.block_table = table;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    CHECK_STATUS(flashport_attention_backward_host(simd, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of paged KV cache");
    d = c.d;
    d.kernel = kernel;
    d.dtype = FLASHPORT_FP8_E5M2, d.out_dtype = FLASHPORT_F32, d.descale = FLASHPORT_DESCALE_TENSOR;
    const float one = 1.0f;
    a = c.a;
    a.q_descale = a.k_descale = a.v_descale = &one;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    CHECK_STATUS(flashport_attention_backward_host(simd, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of FP8 inputs");
    int untouched = 1;
    for (size_t i = 0; i < (size_t)c.n_q * c.esize; i++)
        untouched &= ((unsigned char *)c.dq)[i] == BWD_SENTINEL;
    CHECK(untouched);
    bwd_case_free(&c);
}

/* Whether the planner takes the kernel here; else the reason. */
static int runnable(flashport_context *ctx, const char *kernel, char *why, size_t len) {
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F16, 1, 1, 1, 4, 4, 8, FLASHPORT_LAYOUT_BHND);
    d.kernel = kernel;
    flashport_plan_info info;
    const flashport_status st = flashport_attention_plan(ctx, &d, &info);
    snprintf(why, len, "%s", info.reason);
    return st == FLASHPORT_OK;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "portable") != 0 && strcmp(argv[1], "avx2") != 0 &&
                      strcmp(argv[1], "avx512") != 0)) {
        fprintf(stderr, "usage: %s portable|avx2|avx512\n", argv[0]);
        return 2;
    }
    unsetenv("FLASHPORT_KERNEL");
    const char *kernel = argv[1];
    flashport_context *simd = NULL, *ref = NULL;
    if (flashport_context_create("cpu_simd", &simd) != FLASHPORT_OK ||
        flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        printf("FAIL: cannot open the backends: %s\n", flashport_last_error());
        flashport_context_destroy(simd);
        return 1;
    }
    char why[512];
    if (!runnable(simd, kernel, why, sizeof why)) {
        printf("SKIP: %s cannot run here: %s\n", kernel, why);
        /* Closed before the skip, so that a sanitized build's leak check passes it. */
        flashport_context_destroy(ref);
        flashport_context_destroy(simd);
        return EXIT_SKIP;
    }
    /* Every combination twice, small; every fourth once more with several key tiles and query
     * blocks. */
    int cases = 0;
    for (unsigned f = 0; f <= F_ALL; ++f)
        for (int round = 0; round < (f % 4 == 0 ? 3 : 2); ++round, ++cases) {
            bwd_spec s = random_spec(f, round == 2);
            check(simd, ref, &s, kernel, NULL);
        }
    printf("%d random cases (every combination of 7 features)\n", cases);
    for (int det = 0; det <= 1; ++det) {
        bwd_spec s = random_spec(F_BIAS | F_CAUSAL, 1);
        s.masked = 1, s.deterministic = det, s.dtype = FLASHPORT_F32;
        check(simd, ref, &s, kernel, "bias masks whole rows");
        s = random_spec(F_CAUSAL | F_SINKS, 1);
        s.seq_q = 200, s.seq_kv = 120, s.deterministic = det, s.head_dim = 128;
        check(simd, ref, &s, kernel, "causal, rows without keys");
        s = random_spec(F_WINDOW | F_ALIBI | F_SOFTCAP | F_VARLEN, 1);
        s.deterministic = det, s.head_dim = 200;
        check(simd, ref, &s, kernel, "d = 200, every modifier");
    }
    determinism(simd, ref, kernel);
    declines(simd, ref, kernel);
    flashport_context_destroy(ref);
    flashport_context_destroy(simd);
    return check_report("test_cpu_simd_backward");
}
