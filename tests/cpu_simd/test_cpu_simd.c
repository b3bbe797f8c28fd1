/*
 * cpu_simd against a double-precision attention written here (naive_attention.h), on the kernel
 * path named on the command line (portable, avx2 or avx512): small odd shapes, causal with Nq !=
 * Nkv, GQA and MQA, odd head dims, both layouts and strides with gaps, f16 and bf16, NaN in K or V,
 * logits near +-1000, several thread counts. Every output element is checked, and the gaps between
 * output rows must keep their poison.
 *
 * A path the planner refuses exits 77 (ctest: skipped), but only when the compiler's own cpuid
 * check, or the build, agrees that the path cannot run here; a refusal on a CPU that has the
 * features is a failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "flashport.h"
#include "fp_half.h"
#include "naive_attention.h"

#define EXIT_SKIP 77

enum layout_kind { BHND, BNHD, GAPPED };
enum special { PLAIN, LARGE_LOGITS, NAN_IN_K, NAN_IN_HIDDEN_V };

typedef struct test_case {
    const char *name;
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    enum layout_kind layout;
    int causal;
    enum special special;
} test_case;

static const test_case cases[] = {
    {"one_element", FLASHPORT_F32, 1, 1, 1, 1, 1, 1, BHND, 0, PLAIN},
    {"odd_d13", FLASHPORT_F32, 2, 4, 2, 37, 53, 13, BHND, 0, PLAIN},
    {"odd_d13_causal", FLASHPORT_F32, 2, 4, 2, 37, 53, 13, BHND, 1, PLAIN},
    {"causal_nq_gt_nkv", FLASHPORT_F32, 1, 2, 1, 70, 20, 24, BHND, 1, PLAIN},
    {"causal_square_multiblock", FLASHPORT_F32, 1, 2, 2, 300, 300, 64, BHND, 1, PLAIN},
    {"long_kv_d128", FLASHPORT_F32, 1, 1, 1, 50, 1000, 128, BHND, 0, PLAIN},
    {"decode_one_query", FLASHPORT_F32, 2, 8, 2, 1, 517, 64, BHND, 1, PLAIN},
    {"mqa_64_heads", FLASHPORT_F32, 1, 64, 1, 9, 40, 8, BHND, 1, PLAIN},
    {"gqa_group5_bnhd", FLASHPORT_F32, 2, 10, 2, 33, 47, 40, BNHD, 1, PLAIN},
    {"gapped_strides", FLASHPORT_F32, 2, 3, 3, 19, 29, 17, GAPPED, 1, PLAIN},
    {"d256", FLASHPORT_F32, 1, 2, 1, 20, 70, 256, BHND, 1, PLAIN},
    {"d1024", FLASHPORT_F32, 1, 1, 1, 13, 40, 1024, BNHD, 0, PLAIN},
    {"d1000", FLASHPORT_F32, 1, 1, 1, 7, 20, 1000, BHND, 1, PLAIN},
    {"f16_gqa", FLASHPORT_F16, 2, 4, 2, 45, 60, 64, BHND, 1, PLAIN},
    {"f16_odd_d", FLASHPORT_F16, 1, 3, 1, 17, 33, 11, BNHD, 0, PLAIN},
    {"bf16_gqa", FLASHPORT_BF16, 2, 4, 1, 45, 60, 128, BNHD, 1, PLAIN},
    {"bf16_odd_d", FLASHPORT_BF16, 1, 2, 2, 17, 33, 7, GAPPED, 0, PLAIN},
    /* Half a 16-wide register left over at the end of each row (AVX-512 remainders). */
    {"f16_d40_half_register", FLASHPORT_F16, 1, 4, 2, 29, 41, 40, BHND, 1, PLAIN},
    {"bf16_d24_half_register", FLASHPORT_BF16, 1, 2, 1, 21, 35, 24, BNHD, 0, PLAIN},
    {"logits_near_1000", FLASHPORT_F32, 1, 2, 1, 40, 90, 16, BHND, 0, LARGE_LOGITS},
    {"nan_in_one_key", FLASHPORT_F32, 1, 2, 1, 40, 40, 32, BHND, 1, NAN_IN_K},
    {"nan_in_hidden_value", FLASHPORT_F32, 1, 2, 2, 40, 40, 32, BNHD, 1, NAN_IN_HIDDEN_V},
    /* Float32 keys past what the K/V ring holds (4064 at d = 128, 8160 at d = 64) are read where
     * they lie, the last few (not a whole step) through the ring. */
    {"kv_in_place_d128", FLASHPORT_F32, 1, 3, 1, 37, 4100, 128, BHND, 0, PLAIN},
    {"kv_in_place_d64_causal", FLASHPORT_F32, 2, 2, 1, 21, 8203, 64, BNHD, 1, PLAIN},
    {"kv_in_place_hidden_value", FLASHPORT_F32, 1, 2, 2, 40, 4200, 128, BHND, 1, NAN_IN_HIDDEN_V},
};

/* Keys where the NaN cases put their NaN (kv head 0, batch 0): the hidden one is behind the
 * causal diagonal of the first 30 of the 40 query positions those cases have. */
#define NAN_KEY              5
#define HIDDEN_V_KEY(seq_kv) ((seq_kv)-10)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void store(void *base, flashport_dtype dt, int64_t index, double x) {
    if (dt == FLASHPORT_F32)
        ((float *)base)[index] = (float)x;
    else if (dt == FLASHPORT_F16)
        ((uint16_t *)base)[index] = fp_f32_to_f16((float)x);
    else
        ((uint16_t *)base)[index] = fp_f32_to_bf16((float)x);
}

/* Strides of one tensor of `heads` heads for the case's layout. */
static flashport_strides strides_of(const test_case *tc, int64_t heads, int64_t seq) {
    const int64_t d = tc->head_dim;
    flashport_strides s;
    if (tc->layout == BHND)
        s = (flashport_strides){heads * seq * d, seq * d, d};
    else if (tc->layout == BNHD)
        s = (flashport_strides){seq * heads * d, d, heads * d};
    else { /* rows d + 5 apart, heads and batches with extra gaps */
        s.seq = d + 5;
        s.head = seq * s.seq + 7;
        s.batch = heads * s.head + 11;
    }
    return s;
}

static int64_t extent(const flashport_strides *s, int64_t b, int64_t h, int64_t n, int64_t d) {
    return (b - 1) * s->batch + (h - 1) * s->head + (n - 1) * s->seq + d;
}

typedef struct tensors {
    flashport_problem p;
    void *q, *k, *v;
    int64_t nq, nk, no;
    double *ref_o, *ref_lse;
} tensors;

static void make_tensors(const test_case *tc, tensors *t) {
    flashport_problem *p = &t->p;
    memset(p, 0, sizeof *p);
    p->dtype = tc->dtype;
    p->batch = tc->batch;
    p->heads_q = tc->heads_q;
    p->heads_kv = tc->heads_kv;
    p->seq_q = tc->seq_q;
    p->seq_kv = tc->seq_kv;
    p->head_dim = tc->head_dim;
    p->q = strides_of(tc, tc->heads_q, tc->seq_q);
    p->o = p->q;
    p->k = strides_of(tc, tc->heads_kv, tc->seq_kv);
    p->v = p->k;
    p->causal = tc->causal;
    p->scale = tc->special == LARGE_LOGITS ? 1.0f : 0.0f;
    const size_t es = flashport_dtype_size(tc->dtype);
    t->nq = extent(&p->q, p->batch, p->heads_q, p->seq_q, p->head_dim);
    t->nk = extent(&p->k, p->batch, p->heads_kv, p->seq_kv, p->head_dim);
    t->no = t->nq;
    t->q = malloc((size_t)t->nq * es);
    t->k = malloc((size_t)t->nk * es);
    t->v = malloc((size_t)t->nk * es);
    /* Logits near +-1000: |q|,|k| up to 16 over d = 16 give scores of several hundred. */
    const double amp = tc->special == LARGE_LOGITS ? 16.0 : 1.0;
    for (int64_t i = 0; i < t->nq; ++i) store(t->q, p->dtype, i, amp * uniform());
    for (int64_t i = 0; i < t->nk; ++i) {
        store(t->k, p->dtype, i, amp * uniform());
        store(t->v, p->dtype, i, uniform());
    }
    if (tc->special == NAN_IN_K) store(t->k, p->dtype, naive_index(&p->k, 0, 0, NAN_KEY) + 3, NAN);
    if (tc->special == NAN_IN_HIDDEN_V)
        store(t->v, p->dtype, naive_index(&p->v, 0, 0, HIDDEN_V_KEY(p->seq_kv)) + 1, NAN);
    const int64_t rows = p->batch * p->heads_q * p->seq_q;
    t->ref_o = malloc(sizeof(double) * (size_t)(rows * p->head_dim));
    t->ref_lse = malloc(sizeof(double) * (size_t)rows);
    naive_attention(p, t->q, t->k, t->v, t->ref_o, t->ref_lse);
}

static void free_tensors(tensors *t) {
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->ref_o);
    free(t->ref_lse);
}

static double tolerance_rel_l2(const test_case *tc) {
    /* f32 scores of ~1000 are rounded at ulp(1000) ~ 6e-5: ten times the f32 tolerance. */
    if (tc->special == LARGE_LOGITS) return 1e-4;
    return tc->dtype == FLASHPORT_F32 ? 1e-5 : tc->dtype == FLASHPORT_F16 ? 2e-3 : 1e-2;
}

/* Runs one case on one kernel; returns the number of failed checks. */
static int run_case(flashport_context *ctx, const test_case *tc, const tensors *t,
                    const char *kernel) {
    const flashport_problem *p = &t->p;
    flashport_problem run = *p;
    run.kernel = kernel;
    const size_t es = flashport_dtype_size(p->dtype);
    const int64_t rows = p->batch * p->heads_q * p->seq_q, d = p->head_dim;
    unsigned char *o = malloc((size_t)t->no * es);
    float *lse = malloc(sizeof(float) * (size_t)rows);
    memset(o, 0x7b, (size_t)t->no * es); /* poison: every written element must change it */
    for (int64_t r = 0; r < rows; ++r) lse[r] = 12345.0f;

    int failures = 0;
    const flashport_status st = flashport_attention_host(ctx, &run, t->q, t->k, t->v, o, lse);
    if (st != FLASHPORT_OK) {
        printf("FAIL %s [%s]: %s: %s\n", tc->name, kernel, flashport_status_string(st),
               flashport_last_error());
        free(o);
        free(lse);
        return 1;
    }

    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0, max_lse = 0.0;
    int64_t nan_mismatch = 0, written = 0, nan_elems = 0;
    char *touched = calloc((size_t)t->no, 1);
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < p->seq_q; ++i) {
                const int64_t row = (b * p->heads_q + h) * p->seq_q + i;
                for (int64_t c = 0; c < d; ++c) {
                    const int64_t at = naive_index(&p->o, b, h, i) + c;
                    touched[at] = 1;
                    const double got = naive_load(o, p->dtype, at), want = t->ref_o[row * d + c];
                    if (isnan(want) || isnan(got)) {
                        nan_mismatch += isnan(want) != isnan(got);
                        nan_elems += isnan(want);
                        continue;
                    }
                    ++written;
                    err2 += (got - want) * (got - want);
                    ref2 += want * want;
                    if (fabs(got - want) > max_abs) max_abs = fabs(got - want);
                }
                const double want = t->ref_lse[row], got = lse[row];
                if (isnan(want) || isnan(got) || isinf(want) || isinf(got)) {
                    if (!(isnan(want) && isnan(got)) && want != got) {
                        printf("  %s [%s]: lse row %lld: got %g want %g\n", tc->name, kernel,
                               (long long)row, got, want);
                        ++failures;
                    }
                } else if (fabs(got - want) / fmax(1.0, fabs(want)) > max_lse) {
                    max_lse = fabs(got - want) / fmax(1.0, fabs(want));
                }
            }
    int64_t gap_changed = 0;
    for (int64_t e = 0; e < t->no; ++e)
        if (!touched[e])
            for (size_t byte = 0; byte < es; ++byte)
                gap_changed += o[(size_t)e * es + byte] != 0x7b;
    free(touched);

    const double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    const double tol = tolerance_rel_l2(tc);
    const double tol_abs = tc->dtype == FLASHPORT_F32 && tc->special == PLAIN ? 1e-4 : 10 * tol;
    failures += rel > tol;
    failures += max_abs > tol_abs;
    failures += max_lse > 1e-4;
    failures += nan_mismatch != 0;
    failures += gap_changed != 0;
    /* The NaN cases must leave some rows finite, or they would not test containment. */
    failures += tc->special >= NAN_IN_K && (written == 0 || nan_elems == 0);
    printf("%s %s [%s]: rel_l2 %.2e (tol %.0e) max_abs %.2e lse %.2e nan_elems %lld "
           "nan_mismatch %lld gaps_changed %lld\n",
           failures ? "FAIL" : "ok  ", tc->name, kernel, rel, tol, max_abs, max_lse,
           (long long)nan_elems, (long long)nan_mismatch, (long long)gap_changed);
    free(o);
    free(lse);
    return failures;
}

static int plans_as(flashport_context *ctx, const flashport_problem *p, const char *kernel) {
    flashport_problem forced = *p;
    forced.kernel = kernel;
    flashport_plan_info info;
    return flashport_plan(ctx, &forced, &info) == FLASHPORT_OK;
}

/* The planner's path for a bf16 prefill: amxbf16 wherever it can run; else avx512bf16 or the
 * float32 products, the reason giving the measured rate of vdpbf16ps that decided. */
static int check_bf16_plan(flashport_context *ctx) {
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_BF16, 1, 4, 4, 2048, 2048, 128, FLASHPORT_LAYOUT_BHND);
    flashport_plan_info info;
    if (flashport_plan(ctx, &p, &info) != FLASHPORT_OK) {
        printf("FAIL plan (bf16): %s\n", flashport_last_error());
        return 1;
    }
    printf("plan (auto, bf16): %s: %s\n", info.kernel, info.reason);
    const char *expected = NULL, *says = NULL;
    if (plans_as(ctx, &p, "amxbf16")) {
        expected = "amxbf16";
        says = "AMX tiles";
    } else if (plans_as(ctx, &p, "avx512bf16")) {
        const int pairs = strcmp(info.kernel, "avx512bf16") == 0;
        expected = pairs ? "avx512bf16" : "avx512";
        says = pairs ? "vdpbf16ps measured at" : "on float32 products: vdpbf16ps measured at";
    }
    if (expected && (strcmp(info.kernel, expected) != 0 || !strstr(info.reason, says))) {
        printf("FAIL plan (bf16): expected %s saying \"%s\", got %s\n", expected, says,
               info.kernel);
        return 1;
    }
    return 0;
}

/* The planner's own choice on this CPU, and the scratch bound of the issue (N = 65536). */
static int check_plans(flashport_context *ctx) {
    int failures = 0;
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, 65536, 65536, 128, FLASHPORT_LAYOUT_BHND);
    p.causal = 1;
    flashport_plan_info info;
    flashport_status st = flashport_plan(ctx, &p, &info);
    if (st != FLASHPORT_OK) {
        printf("FAIL plan: %s\n", flashport_last_error());
        return 1;
    }
    printf("plan (auto): %s: %s; scratch %zu bytes\n", info.kernel, info.reason,
           info.workspace_bytes);
    if (info.workspace_bytes >= ((size_t)64 << 20)) {
        printf("FAIL plan: N = 65536 needs %zu bytes of scratch (limit 64 MiB)\n",
               info.workspace_bytes);
        ++failures;
    }
    if (strcmp(info.kernel, "avx512") != 0 && strcmp(info.kernel, "avx2") != 0 &&
        strcmp(info.kernel, "portable") != 0) {
        printf("FAIL plan: unknown kernel '%s'\n", info.kernel);
        ++failures;
    }
    p.kernel = "portable";
    st = flashport_plan(ctx, &p, &info);
    if (st != FLASHPORT_OK || strcmp(info.kernel, "portable") != 0) {
        printf("FAIL plan: forcing portable gave %s (%s)\n", info.kernel, flashport_last_error());
        ++failures;
    }
    return failures + check_bf16_plan(ctx);
}

/* A row whose every score is -inf (a -inf in Q against positive keys) gets O = 0 and
 * LSE = -inf, as flashport.h says, and the other rows stay finite: the online softmax once
 * took 2^(-inf - -inf) = NaN as the rows' weights (found by fuzz_cpu_simd). */
static int check_all_scores_neg_inf(flashport_context *ctx, const char *path) {
    enum { NQ = 3, NKV = 5, D = 8 };
    float q[NQ * D], k[NKV * D], v[NKV * D], o[NQ * D], lse[NQ];
    for (int i = 0; i < NQ * D; ++i) q[i] = 0.25f * (float)(i % 5) - 0.5f;
    for (int i = 0; i < NKV * D; ++i) k[i] = 1.0f, v[i] = 0.125f * (float)(i % 7);
    q[1 * D] = -INFINITY;
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
    p.kernel = path;
    int failures = 0;
    if (flashport_attention_host(ctx, &p, q, k, v, o, lse) != FLASHPORT_OK) {
        printf("FAIL all-scores -inf (%s): %s\n", path, flashport_last_error());
        return 1;
    }
    for (int r = 0; r < NQ; ++r)
        for (int c = 0; c < D; ++c)
            failures += r == 1 ? o[r * D + c] != 0.0f : !isfinite(o[r * D + c]);
    failures += !(isinf(lse[1]) && lse[1] < 0) + !isfinite(lse[0]) + !isfinite(lse[2]);
    printf("%s all-scores -inf row (%s): O row %g.., LSE %g\n", failures ? "FAIL" : "ok  ", path,
           o[D], lse[1]);
    return failures;
}

/* Logits past 2^31 (scale 1e30 on ordinary inputs): equal scores give equal weights, O the
 * mean of the V rows. The weights were once 2^(st * scale2 - m) fused, the product's rounding
 * error, which at this size overflows to inf and made O NaN (found by fuzz_cpu_simd). */
static int check_huge_logits(flashport_context *ctx, const char *path) {
    enum { NQ = 2, NKV = 4, D = 7 };
    float q[NQ * D], k[NKV * D], v[NKV * D], o[NQ * D], lse[NQ];
    for (int i = 0; i < NQ * D; ++i) q[i] = -1.0f - 0.125f * (float)(i % 6);
    for (int i = 0; i < NKV * D; ++i) k[i] = -4.0f, v[i] = (float)(i / D);
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
    p.scale = 1e30f;
    p.kernel = path;
    int failures = 0;
    if (flashport_attention_host(ctx, &p, q, k, v, o, lse) != FLASHPORT_OK) {
        printf("FAIL huge logits (%s): %s\n", path, flashport_last_error());
        return 1;
    }
    for (int i = 0; i < NQ * D; ++i) failures += !(fabsf(o[i] - 1.5f) <= 1e-5f);
    failures += !isfinite(lse[0]) + !isfinite(lse[1]);
    printf("%s huge logits (%s): O %g, LSE %g\n", failures ? "FAIL" : "ok  ", path, o[0], lse[0]);
    return failures;
}

/* Whether this CPU and build can run a path, by the compiler's cpuid (which also checks that
 * the OS saves the registers), independently of the backend's own detection. */
static int path_expected(const char *path, const char **why) {
    if (strcmp(path, "portable") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(path, "avx2") == 0) {
#if defined(CS_TEST_BUILT_AVX2)
        *why = "CPU lacks AVX2, FMA or F16C";
        /* clang (14) has no "f16c" for __builtin_cpu_supports: CPUID leaf 1, ECX bit 29, read
         * with the compiler's cpuid.h; the OS support of YMM state is what "avx2" checks. */
        unsigned a, b, c = 0, d;
        const int f16c = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
        *why = "this build has no AVX2 kernels";
        return 0;
#endif
    }
    if (strcmp(path, "avx512") == 0) {
#if defined(CS_TEST_BUILT_AVX512)
        *why = "CPU lacks AVX-512F";
        return __builtin_cpu_supports("avx512f");
#else
        *why = "this build has no AVX-512 kernels";
        return 0;
#endif
    }
#endif
    *why = "not an x86 build";
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "portable") != 0 && strcmp(argv[1], "avx2") != 0 &&
                      strcmp(argv[1], "avx512") != 0)) {
        fprintf(stderr, "usage: %s portable|avx2|avx512\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    flashport_context *ctx = NULL;
    if (flashport_context_create("cpu_simd", &ctx) != FLASHPORT_OK) {
        printf("FAIL: cannot open cpu_simd: %s\n", flashport_last_error());
        return 1;
    }
    flashport_device_info dev;
    if (flashport_context_device_info(ctx, &dev) == FLASHPORT_OK)
        printf("device: %s (%s), %d cores; %s\n", dev.name, dev.vendor, dev.compute_units,
               dev.details);

    int failures = check_plans(ctx);
    /* Can the path run here? f16 input: the AVX2 path needs F16C for it. */
    flashport_problem probe;
    flashport_problem_init(&probe, FLASHPORT_F16, 1, 1, 1, 4, 4, 8, FLASHPORT_LAYOUT_BHND);
    probe.kernel = path;
    flashport_plan_info info;
    const int runnable = flashport_plan(ctx, &probe, &info) == FLASHPORT_OK;
    const char *why_not = "";
    const int expected = path_expected(path, &why_not);
    if (!runnable) {
        flashport_context_destroy(ctx);
        if (expected || info.reason[0] == '\0') {
            printf("FAIL: the planner refuses %s (\"%s\") on a CPU and build that have it\n", path,
                   info.reason);
            return 1;
        }
        printf("SKIP: %s path cannot run here (%s; the planner agrees: %s)\n", path, why_not,
               info.reason);
        return failures ? 1 : EXIT_SKIP;
    }
    if (!expected) {
        printf("FAIL: the planner accepts %s where the CPU or build lacks it (%s)\n", path,
               why_not);
        ++failures;
    }
    /* The planner's own choice is the widest path that runs: avx512 wherever it can. */
    probe.kernel = NULL;
    if (strcmp(path, "avx512") == 0 && (flashport_plan(ctx, &probe, &info) != FLASHPORT_OK ||
                                        strcmp(info.kernel, "avx512") != 0)) {
        printf("FAIL: avx512 runs here but the planner's own choice is '%s' (%s)\n", info.kernel,
               info.reason);
        ++failures;
    }

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        tensors t;
        make_tensors(&cases[i], &t);
        failures += run_case(ctx, &cases[i], &t, path);
        free_tensors(&t);
    }
    failures += check_all_scores_neg_inf(ctx, path);
    failures += check_huge_logits(ctx, path);
    /* Thread counts other than the default give the same results (work is split by tiles). */
    const char *thread_counts[] = {"1", "3", NULL};
    for (const char **n = thread_counts; *n; ++n) {
        setenv("FLASHPORT_NUM_THREADS", *n, 1);
        printf("FLASHPORT_NUM_THREADS=%s\n", *n);
        for (size_t i = 3; i <= 6; ++i) {
            tensors t;
            make_tensors(&cases[i], &t);
            failures += run_case(ctx, &cases[i], &t, path);
            free_tensors(&t);
        }
    }
    unsetenv("FLASHPORT_NUM_THREADS");
    flashport_context_destroy(ctx);
    printf("%s: %d failed checks\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
