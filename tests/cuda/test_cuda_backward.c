/*
 * The cuda module's backward variants (backward_mma, backward_tf32x3, backward_f32) against the
 * reference backend's backward in the same process, from the reference's O and LSE: every
 * combination of window (causal included), softcap, ALiBi, bias, sinks and packed sequences on
 * random problems (GQA, rows that see no key, partial tiles at both ends, both layouts, both
 * modes), with the dtypes and head dims each variant takes. dQ, dK and dV are compared by relative
 * L2 error within the conformance tolerances (f32: 1e-4, which backward_tf32x3 meets as
 * backward_f32 does: each 3xTF32 product carries about 2^-20 of relative error, below the f32
 * softmax around it), and packed rows of no sequence must keep their sentinel. The deterministic
 * mode must give the same bits run after run; the planner must pick backward_mma for f16/bf16 at
 * head dims in multiples of 8 up to 256 (those between 64, 128 and 256 run on the next instance
 * up, drawn here with the built ones), backward_tf32x3 for f32 at d = 64 and 128 and backward_f32
 * for other head dims, and no backward variant may plan a forward pass.
 *
 * Without a usable GPU it exits 77 (ctest: skipped) with the runtime's reason.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "backward_case.h"
#include "check.h"

#define EXIT_SKIP 77

static double tolerance(flashport_dtype t) {
    return t == FLASHPORT_F32 ? 1e-4 : t == FLASHPORT_F16 ? 2e-3 : 2e-2;
}

/* One problem: the reference's and the variant's gradients from the reference's O and LSE. */
static void check(flashport_context *gpu, flashport_context *ref, const bwd_spec *s,
                  const char *kernel, const char *what) {
    double err[3];
    CHECK_STATUS(bwd_errors_vs_reference(gpu, ref, s, kernel, err), FLASHPORT_OK, NULL);
    const double tol = tolerance(s->dtype);
    const int ok = err[0] < tol && err[1] < tol && err[2] < tol;
    CHECK(ok);
    if (!ok || what)
        printf("%s %s %-26s %s B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld causal=%d "
               "window=%lld/%lld softcap=%g alibi=%d bias=%d sinks=%d varlen=%d det=%d: dQ %.1e "
               "dK %.1e dV %.1e\n",
               ok ? "ok  " : "FAIL", kernel, what ? what : "random", flashport_dtype_name(s->dtype),
               (long long)s->batch, (long long)s->heads_q, (long long)s->heads_kv,
               (long long)s->seq_q, (long long)s->seq_kv, (long long)s->head_dim, s->causal,
               (long long)s->window_left, (long long)s->window_right, s->softcap, (int)s->alibi,
               s->bias, s->sinks, s->varlen, s->deterministic, err[0], err[1], err[2]);
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

/* The variants under test, and the dtypes and head dims each takes. */
enum { V_MMA, V_TF32X3, V_F32, N_VARIANTS };
static const char *const variant_names[N_VARIANTS] = {"backward_mma", "backward_tf32x3",
                                                      "backward_f32"};

/* A random problem with features f for variant v; big: several key and query tiles. */
static bwd_spec random_spec(unsigned f, int v, int big) {
    static const int64_t dims[] = {8, 13, 40, 64, 72, 128, 200};
    static const int64_t mma_dims[] = {16, 40, 64, 80, 96, 128, 192, 256};
    static const flashport_dtype dts[] = {FLASHPORT_F32, FLASHPORT_F16, FLASHPORT_BF16};
    bwd_spec s;
    memset(&s, 0, sizeof s);
    s.dtype = v == V_MMA      ? dts[bwd_pick(1, 2)]
              : v == V_TF32X3 ? FLASHPORT_F32
                              : dts[bwd_pick(0, 2)];
    s.batch = bwd_pick(1, 3);
    s.heads_kv = bwd_pick(1, 2);
    s.heads_q = s.heads_kv * bwd_pick(1, 3);
    s.head_dim = v == V_F32   ? dims[bwd_pick(0, 6)]
                 : v == V_MMA ? mma_dims[bwd_pick(0, 7)]
                              : 64 << bwd_pick(0, 1);
    s.seq_q = big ? bwd_pick(60, 200) : bwd_pick(1, 30);
    s.seq_kv = big ? bwd_pick(70, 260) : bwd_pick(1, 60);
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
    s.scale = bwd_pick(0, 3) == 0 ? (float)bwd_uniform(-0.5, 0.5) : 0.0f;
    s.deterministic = (int)bwd_pick(0, 1);
    return s;
}

/* deterministic = 1: the same bits on a second run (GQA, causal, packed sequences). */
static void determinism(flashport_context *gpu, flashport_context *ref, int v) {
    const char *const kernel = variant_names[v];
    bwd_spec s = random_spec(F_CAUSAL | F_SOFTCAP | F_VARLEN, v, 1);
    s.deterministic = 1, s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seq_q = 300;
    s.seq_kv = 330;
    bwd_case first, again;
    const uint64_t seed = bwd_rng;
    bwd_case_make(&first, &s);
    bwd_rng = seed;
    bwd_case_make(&again, &s);
    CHECK(bwd_case_forward(ref, &first) == FLASHPORT_OK);
    CHECK(bwd_case_forward(ref, &again) == FLASHPORT_OK);
    int identical = 1;
    CHECK(bwd_case_backward(gpu, &first, kernel) == FLASHPORT_OK);
    for (int i = 0; i < 3; i++) {
        CHECK(bwd_case_backward(gpu, &again, kernel) == FLASHPORT_OK);
        identical &= bwd_same_bits(&first, &again);
    }
    printf("%s deterministic: %s bits on four runs\n", kernel,
           identical ? "the same" : "DIFFERENT");
    CHECK(identical);
    bwd_case_free(&first);
    bwd_case_free(&again);
}

/* The planner's backward choice, and no forward pass on a backward variant. */
static void planner(flashport_context *gpu) {
    static const struct {
        flashport_dtype dtype;
        int64_t d;
        const char *kernel;
    } want[] = {{FLASHPORT_BF16, 128, "backward_mma"},   {FLASHPORT_F16, 64, "backward_mma"},
                {FLASHPORT_BF16, 256, "backward_mma"},   {FLASHPORT_BF16, 96, "backward_mma"},
                {FLASHPORT_F16, 40, "backward_mma"},     {FLASHPORT_BF16, 100, "backward_f32"},
                {FLASHPORT_F32, 128, "backward_tf32x3"}, {FLASHPORT_F32, 64, "backward_tf32x3"},
                {FLASHPORT_F32, 96, "backward_f32"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        flashport_attention_desc d;
        flashport_attention_desc_init(&d, want[i].dtype, 2, 8, 2, 1024, 1024, want[i].d,
                                      FLASHPORT_LAYOUT_BNHD);
        flashport_plan_info info;
        CHECK(flashport_attention_backward_plan(gpu, &d, &info) == FLASHPORT_OK);
        CHECK(strcmp(info.kernel, want[i].kernel) == 0);
        d.kernel = want[i].kernel;
        CHECK_STATUS(flashport_attention_plan(gpu, &d, &info), FLASHPORT_ERROR_UNSUPPORTED,
                     "computes only the gradients");
    }
}

int main(void) {
    unsetenv("FLASHPORT_KERNEL");
    int idx;
    flashport_backend_info bi;
    memset(&bi, 0, sizeof bi);
    if (flashport_backend_find("cuda", &idx) != FLASHPORT_OK ||
        flashport_backend_get_info(idx, &bi) != FLASHPORT_OK || !bi.available) {
        printf("SKIP: %s\n", bi.reason[0] ? bi.reason : "no cuda backend");
        return EXIT_SKIP;
    }
    flashport_context *gpu = NULL, *ref = NULL;
    if (flashport_context_create("cuda", &gpu) != FLASHPORT_OK ||
        flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        printf("FAIL: cannot open the backends: %s\n", flashport_last_error());
        return 1;
    }
    planner(gpu);
    for (int v = 0; v < N_VARIANTS; v++) {
        const char *const kernel = variant_names[v];
        int cases = 0;
        for (unsigned f = 0; f <= F_ALL; ++f)
            for (int round = 0; round < (f % 4 == 0 ? 3 : 2); ++round, ++cases) {
                bwd_spec s = random_spec(f, v, round == 2);
                check(gpu, ref, &s, kernel, NULL);
            }
        printf("%s: %d random cases (every combination of 7 features)\n", kernel, cases);
        for (int det = 0; det <= 1; ++det) {
            bwd_spec s = random_spec(F_BIAS | F_CAUSAL, v, 1);
            s.masked = 1, s.deterministic = det;
            check(gpu, ref, &s, kernel, "bias masks whole rows");
            s = random_spec(F_CAUSAL | F_SINKS, v, 1);
            s.seq_q = 200, s.seq_kv = 120, s.deterministic = det;
            check(gpu, ref, &s, kernel, "causal, rows without keys");
            s = random_spec(F_WINDOW | F_ALIBI | F_SOFTCAP | F_VARLEN, v, 1);
            s.deterministic = det;
            check(gpu, ref, &s, kernel, "every modifier, packed");
        }
        determinism(gpu, ref, v);
    }
    flashport_context_destroy(ref);
    flashport_context_destroy(gpu);
    return check_report("test_cuda_backward");
}
