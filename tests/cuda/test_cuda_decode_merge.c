/*
 * The decode kernels' in-kernel merge of their splits: the last block of each row chunk to
 * arrive merges the partials, counting arrivals on the context's tickets, which it returns to
 * zero. Checked here: results against the reference backend with the keys split (the plan has
 * a workspace), bit-identical results over repeated calls (the merge order is the split order,
 * not the order of arrival), calls of other shapes and split counts in between (a ticket left
 * non-zero would leave O unwritten or merged early), and two contexts used in turn.
 *
 * Without a usable GPU the test has nothing to run and says so (ctest SKIP).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "fp_half.h"

#define SKIP 77

typedef struct shape {
    const char *kernel;
    flashport_dtype dtype;
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
} shape;

static const shape shapes[] = {
    {"decode_mma", FLASHPORT_BF16, 1, 8, 2, 1, 9000, 128, 0}, /* GQA, one query row */
    {"decode_mma", FLASHPORT_F16, 2, 4, 1, 3, 5003, 64, 1},   /* speculative rows, causal */
    {"decode", FLASHPORT_F32, 1, 2, 2, 1, 7001, 64, 0},       /* MHA on the CUDA cores */
    {"decode", FLASHPORT_BF16, 1, 4, 1, 2, 4099, 128, 1},     /* a group of 8 rows */
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static uint32_t rng_state = 2024u;
static float rand_unit(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void fill(void *x, int64_t n, flashport_dtype dt) {
    for (int64_t i = 0; i < n; i++) {
        const float v = rand_unit();
        if (dt == FLASHPORT_F32)
            ((float *)x)[i] = v;
        else if (dt == FLASHPORT_F16)
            ((uint16_t *)x)[i] = fp_f32_to_f16(v);
        else
            ((uint16_t *)x)[i] = fp_f32_to_bf16(v);
    }
}

static double get(const void *x, int64_t i, flashport_dtype dt) {
    if (dt == FLASHPORT_F32) return ((const float *)x)[i];
    if (dt == FLASHPORT_F16) return fp_f16_to_f32(((const uint16_t *)x)[i]);
    return fp_bf16_to_f32(((const uint16_t *)x)[i]);
}

/* One shape's inputs and outputs on the host: o/lse from the first call, o2/lse2 for later
 * calls, o_ref/lse_ref from the reference. */
typedef struct run_data {
    flashport_problem p;
    void *q, *k, *v, *o, *o2, *o_ref;
    float *lse, *lse2, *lse_ref;
    int64_t no, nl;
} run_data;

static int setup(run_data *r, const shape *sh) {
    memset(r, 0, sizeof *r);
    flashport_problem_init(&r->p, sh->dtype, sh->b, sh->hq, sh->hkv, sh->nq, sh->nkv, sh->d,
                           FLASHPORT_LAYOUT_BNHD);
    r->p.causal = sh->causal;
    r->p.kernel = sh->kernel;
    const size_t es = flashport_dtype_size(sh->dtype);
    const int64_t nq = flashport_problem_extent(&r->p, 'q'),
                  nk = flashport_problem_extent(&r->p, 'k');
    r->no = flashport_problem_extent(&r->p, 'o');
    r->nl = sh->b * sh->hq * sh->nq;
    r->q = malloc(nq * es), r->k = malloc(nk * es), r->v = malloc(nk * es);
    r->o = calloc(r->no, es), r->o2 = calloc(r->no, es), r->o_ref = calloc(r->no, es);
    r->lse = calloc(r->nl, sizeof(float)), r->lse2 = calloc(r->nl, sizeof(float));
    r->lse_ref = calloc(r->nl, sizeof(float));
    if (!r->q || !r->k || !r->v || !r->o || !r->o2 || !r->o_ref || !r->lse || !r->lse2 ||
        !r->lse_ref)
        return 0;
    fill(r->q, nq, sh->dtype);
    fill(r->k, nk, sh->dtype);
    fill(r->v, nk, sh->dtype);
    return 1;
}

static void release(run_data *r) {
    free(r->q), free(r->k), free(r->v), free(r->o), free(r->o2), free(r->o_ref);
    free(r->lse), free(r->lse2), free(r->lse_ref);
}

static int call(flashport_context *ctx, const run_data *r, void *o, float *lse) {
    if (flashport_attention_host(ctx, &r->p, r->q, r->k, r->v, o, lse) == FLASHPORT_OK) return 1;
    fprintf(stderr, "%s: %s\n", r->p.kernel, flashport_last_error());
    return 0;
}

/* The second call's O and LSE are bit for bit the first's. */
static void check_same_bits(const run_data *r, const char *what) {
    const size_t es = flashport_dtype_size(r->p.dtype);
    const int same =
        memcmp(r->o, r->o2, r->no * es) == 0 && memcmp(r->lse, r->lse2, r->nl * sizeof(float)) == 0;
    if (!same) fprintf(stderr, "%s: %s differs from the first call\n", r->p.kernel, what);
    CHECK(same);
}

static void check_reference(const run_data *r) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < r->no; i++) {
        const double a = get(r->o, i, r->p.dtype), b = get(r->o_ref, i, r->p.dtype);
        num += (a - b) * (a - b);
        den += b * b;
    }
    const double err = den > 0.0 ? sqrt(num / den) : sqrt(num);
    const double tol = r->p.dtype == FLASHPORT_F32   ? 1e-5
                       : r->p.dtype == FLASHPORT_F16 ? 2e-3
                                                     : 1e-2;
    if (!(err <= tol))
        fprintf(stderr, "%s: relative L2 error %g (tolerance %g)\n", r->p.kernel, err, tol);
    CHECK(err <= tol);
    int lse_ok = 1;
    for (int64_t i = 0; i < r->nl && lse_ok; i++)
        lse_ok = isinf(r->lse_ref[i]) ? r->lse[i] == r->lse_ref[i]
                                      : fabs(r->lse[i] - r->lse_ref[i]) < 1e-3;
    CHECK(lse_ok);
}

int main(void) {
    int idx;
    flashport_backend_info bi;
    CHECK(flashport_backend_find("cuda", &idx) == FLASHPORT_OK);
    CHECK(flashport_backend_get_info(idx, &bi) == FLASHPORT_OK);
    if (!bi.available) {
        printf("SKIP: no usable GPU (%s)\n", bi.reason);
        return SKIP;
    }
    flashport_context *a = NULL, *b = NULL, *ref = NULL;
    CHECK(flashport_context_create("cuda", &a) == FLASHPORT_OK);
    CHECK(flashport_context_create("cuda", &b) == FLASHPORT_OK);
    CHECK(flashport_context_create("reference", &ref) == FLASHPORT_OK);
    if (!a || !b || !ref) return check_report("test_cuda_decode_merge");

    run_data runs[N_SHAPES];
    int ready = 1;
    for (int s = 0; s < N_SHAPES; s++) ready &= setup(&runs[s], &shapes[s]);
    CHECK(ready);
    for (int s = 0; ready && s < N_SHAPES; s++) {
        run_data *r = &runs[s];
        flashport_plan_info plan;
        CHECK(flashport_plan(a, &r->p, &plan) == FLASHPORT_OK);
        CHECK(strcmp(plan.kernel, r->p.kernel) == 0);
        CHECK(plan.workspace_bytes > 0); /* the keys are split, so the merge runs */
        flashport_problem pr = r->p;
        pr.kernel = NULL;
        CHECK(flashport_attention_host(ref, &pr, r->q, r->k, r->v, r->o_ref, r->lse_ref) ==
              FLASHPORT_OK);
        CHECK(call(a, r, r->o, r->lse));
        check_reference(r);
    }
    /* Every shape again on both contexts, after the other shapes ran on them. */
    for (int round = 0; ready && round < 2; round++)
        for (int s = 0; s < N_SHAPES; s++) {
            run_data *r = &runs[s];
            CHECK(call(round ? b : a, r, r->o2, r->lse2));
            check_same_bits(r, round ? "the second context's call" : "a repeated call");
        }
    /* Other split counts in between, then the planner's own again. */
    const char *counts[] = {"2", "7", "1"};
    for (int c = 0; ready && c < 3; c++) {
        setenv("FLASHPORT_DECODE_SPLITS", counts[c], 1);
        for (int s = 0; s < N_SHAPES; s++) {
            run_data *r = &runs[s];
            void *first = r->o;
            float *first_lse = r->lse;
            r->o = r->o2, r->lse = r->lse2; /* check_reference reads o and lse */
            CHECK(call(a, r, r->o, r->lse));
            check_reference(r);
            r->o = first, r->lse = first_lse;
        }
    }
    unsetenv("FLASHPORT_DECODE_SPLITS");
    for (int s = 0; ready && s < N_SHAPES; s++) {
        run_data *r = &runs[s];
        CHECK(call(a, r, r->o2, r->lse2));
        check_same_bits(r, "a call after other split counts");
    }
    flashport_status bad;
    setenv("FLASHPORT_DECODE_SPLITS", "0", 1);
    flashport_plan_info plan;
    bad = flashport_plan(a, &runs[0].p, &plan);
    CHECK(bad == FLASHPORT_ERROR_UNSUPPORTED && strstr(plan.reason, "FLASHPORT_DECODE_SPLITS"));
    unsetenv("FLASHPORT_DECODE_SPLITS");

    for (int s = 0; s < N_SHAPES; s++) release(&runs[s]);
    flashport_context_destroy(a);
    flashport_context_destroy(b);
    flashport_context_destroy(ref);
    return check_report("test_cuda_decode_merge");
}
