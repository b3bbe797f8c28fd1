/*
 * The hip module: it loads on every machine that builds it and lists exactly the variants it was
 * built with (argv: the kernel names compiled), none of the CUDA-only ones. Without an AMD GPU
 * its reason is "hip unavailable: " followed by the HIP runtime's own string for the error of
 * hipGetDeviceCount (this test asks the runtime too and compares), an explicit "hip" context
 * fails with that reason, "hip,reference" falls back, and the other backends keep working.
 * With an AMD GPU: device info, every forward variant against the reference backend, and the
 * backward pass (fast and deterministic) against the reference backend's gradients.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <hip/hip_runtime_api.h>

#include "check.h"
#include "fp_half.h"

static const char *const cuda_only[] = {"wmma_f16", "tensor_core_mma", "tensor_core_mma_split_kv",
                                        "hopper_wgmma", "hopper_wgmma_fp8"};

static int kernel_index(const char *name) {
    flashport_kernel_info ki;
    for (int i = 0; i < flashport_kernel_count("hip"); i++)
        if (flashport_kernel_get_info("hip", i, &ki) == FLASHPORT_OK && strcmp(ki.name, name) == 0)
            return i;
    return -1;
}

static void check_kernel_list(int n_names, char **names) {
    CHECK(flashport_kernel_count("hip") == n_names);
    for (int i = 0; i < n_names; i++) {
        if (kernel_index(names[i]) < 0) {
            fprintf(stderr, "kernel %s is not listed as a hip variant\n", names[i]);
            CHECK(0);
        }
    }
    for (size_t i = 0; i < sizeof cuda_only / sizeof cuda_only[0]; i++)
        CHECK(kernel_index(cuda_only[i]) < 0);
    CHECK(kernel_index("mfma_flash") >= 0 && kernel_index("mfma_flash_split_kv") >= 0);
}

static void check_unavailable(const flashport_backend_info *bi) {
    int n = 0;
    const hipError_t e = hipGetDeviceCount(&n);
    char expected[512];
    if (e != hipSuccess)
        snprintf(expected, sizeof expected, "hip unavailable: %s", hipGetErrorString(e));
    else
        snprintf(expected, sizeof expected, "hip unavailable: the runtime reports no devices");
    if (strcmp(bi->reason, expected) != 0) {
        fprintf(stderr, "reason '%s', expected '%s'\n", bi->reason, expected);
        CHECK(0);
    }
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create("hip", &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                 "hip unavailable: ");
    CHECK(flashport_context_create("hip,reference", &ctx) == FLASHPORT_OK);
    CHECK(ctx && strcmp(flashport_context_backend(ctx), "reference") == 0);
    flashport_context_destroy(ctx);
}

/* Every other backend that reports itself available still opens and computes. */
static void check_other_backends(void) {
    for (int i = 0; i < flashport_backend_count(); i++) {
        flashport_backend_info bi;
        CHECK(flashport_backend_get_info(i, &bi) == FLASHPORT_OK);
        if (strcmp(bi.name, "hip") == 0 || !bi.available) continue;
        flashport_context *ctx = NULL;
        CHECK(flashport_context_create(bi.name, &ctx) == FLASHPORT_OK);
        if (!ctx) continue;
        float q[2 * 4] = {1, 0, 0, 1, 0, 1, 1, 0}, o[2 * 4] = {0};
        flashport_problem p;
        flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, 2, 2, 4, FLASHPORT_LAYOUT_BHND);
        CHECK(flashport_attention_host(ctx, &p, q, q, q, o, NULL) == FLASHPORT_OK);
        CHECK(o[0] > 0.0f && o[0] < 1.0f); /* a convex combination of the two rows of V */
        flashport_context_destroy(ctx);
    }
}

/* ---- with an AMD GPU ---- */

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

static double value(const void *x, int64_t i, flashport_dtype dt) {
    if (dt == FLASHPORT_F32) return ((const float *)x)[i];
    if (dt == FLASHPORT_F16) return fp_f16_to_f32(((const uint16_t *)x)[i]);
    return fp_bf16_to_f32(((const uint16_t *)x)[i]);
}

/* Relative L2 error of O against the reference backend, or -1 when a run fails. */
static double error_vs_reference(flashport_context *ctx, flashport_context *ref,
                                 const flashport_problem *p) {
    const size_t es = flashport_dtype_size(p->dtype);
    const int64_t nq = flashport_problem_extent(p, 'q'), nk = flashport_problem_extent(p, 'k');
    const int64_t nv = flashport_problem_extent(p, 'v'), no = flashport_problem_extent(p, 'o');
    void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nv * es);
    void *o = calloc(no, es), *o_ref = calloc(no, es);
    double err = -1.0;
    if (q && k && v && o && o_ref) {
        fill(q, nq, p->dtype);
        fill(k, nk, p->dtype);
        fill(v, nv, p->dtype);
        flashport_problem pr = *p;
        pr.kernel = NULL;
        if (flashport_attention_host(ctx, p, q, k, v, o, NULL) == FLASHPORT_OK &&
            flashport_attention_host(ref, &pr, q, k, v, o_ref, NULL) == FLASHPORT_OK) {
            double num = 0.0, den = 0.0;
            for (int64_t i = 0; i < no; i++) {
                const double a = value(o, i, p->dtype), r = value(o_ref, i, p->dtype);
                num += (a - r) * (a - r);
                den += r * r;
            }
            err = den > 0.0 ? sqrt(num / den) : sqrt(num);
        } else {
            fprintf(stderr, "attention failed: %s\n", flashport_last_error());
        }
    }
    free(q), free(k), free(v), free(o), free(o_ref);
    return err;
}

/* The largest relative L2 error of dQ, dK and dV against the reference backend's, for f32
 * inputs of one GQA causal shape, or -1 when a run fails. */
static double backward_error(flashport_context *ctx, flashport_context *ref, int deterministic) {
    enum { B = 2, HQ = 4, HKV = 2, NQ = 33, NKV = 47, D = 64 };
    enum { QN = B * HQ * NQ * D, KN = B * HKV * NKV * D };
    static float q[QN], k[KN], v[KN], o[QN], d_o[QN], lse[B * HQ * NQ];
    static float grads[2][3][QN > KN ? QN : KN];
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F32, B, HQ, HKV, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
    d.causal = 1;
    d.deterministic = deterministic;
    fill(q, QN, FLASHPORT_F32), fill(k, KN, FLASHPORT_F32), fill(v, KN, FLASHPORT_F32);
    fill(d_o, QN, FLASHPORT_F32);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse, a.d_o = d_o;
    if (flashport_attention_run_host(ref, &d, &a) != FLASHPORT_OK) return -1.0;
    flashport_context *runs[2] = {ctx, ref};
    for (int r = 0; r < 2; r++) {
        a.d_q = grads[r][0], a.d_k = grads[r][1], a.d_v = grads[r][2];
        if (flashport_attention_backward_host(runs[r], &d, &a) != FLASHPORT_OK) {
            fprintf(stderr, "backward failed: %s\n", flashport_last_error());
            return -1.0;
        }
    }
    double worst = 0.0;
    for (int g = 0; g < 3; g++) {
        const int64_t n = g == 0 ? QN : KN;
        double num = 0.0, den = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double e = (double)grads[0][g][i] - grads[1][g][i];
            num += e * e, den += (double)grads[1][g][i] * grads[1][g][i];
        }
        const double err = sqrt(num / (den > 0.0 ? den : 1.0));
        if (err > worst) worst = err;
    }
    return worst;
}

static void check_device(void) {
    flashport_device_info di;
    CHECK(flashport_device_get_info("hip", 0, &di) == FLASHPORT_OK);
    CHECK(strcmp(di.vendor, "AMD") == 0 && strstr(di.details, "arch=gfx") != NULL);
    flashport_context *ctx = NULL, *ref = NULL;
    CHECK(flashport_context_create("hip", &ctx) == FLASHPORT_OK);
    CHECK(flashport_context_create("reference", &ref) == FLASHPORT_OK);
    if (!ctx || !ref) return;
    static const struct {
        flashport_dtype dt;
        int64_t b, hq, hkv, nq, nkv, d;
        int causal;
    } shapes[] = {
        {FLASHPORT_F32, 2, 4, 2, 37, 45, 72, 0},   {FLASHPORT_F16, 2, 2, 1, 65, 65, 64, 1},
        {FLASHPORT_BF16, 1, 2, 1, 17, 200, 96, 0}, {FLASHPORT_F16, 1, 1, 1, 70, 33, 256, 1},
        {FLASHPORT_F16, 1, 1, 1, 3, 4000, 128, 0}, /* small grid: the split-KV form */
    };
    for (int i = 0; i < flashport_kernel_count("hip"); i++) {
        flashport_kernel_info ki;
        CHECK(flashport_kernel_get_info("hip", i, &ki) == FLASHPORT_OK);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            flashport_problem p;
            flashport_problem_init(&p, shapes[s].dt, shapes[s].b, shapes[s].hq, shapes[s].hkv,
                                   shapes[s].nq, shapes[s].nkv, shapes[s].d, FLASHPORT_LAYOUT_BHND);
            p.causal = shapes[s].causal;
            p.kernel = ki.name;
            flashport_plan_info plan;
            if (flashport_plan(ctx, &p, &plan) != FLASHPORT_OK) {
                CHECK(plan.reason[0] != '\0');
                continue;
            }
            const double tol = shapes[s].dt == FLASHPORT_F32   ? 1e-5
                               : shapes[s].dt == FLASHPORT_F16 ? 2e-3
                                                               : 1e-2;
            const double err = error_vs_reference(ctx, ref, &p);
            if (err < 0.0 || err > tol) {
                fprintf(stderr, "%s on shape %zu: relative L2 error %g (tolerance %g)\n", ki.name,
                        s, err, tol);
                CHECK(0);
            }
        }
    }
    for (int det = 0; det <= 1; det++) {
        const double err = backward_error(ctx, ref, det);
        if (err < 0.0 || err > 1e-4) {
            fprintf(stderr, "backward (deterministic %d): relative L2 error %g (tolerance 1e-4)\n",
                    det, err);
            CHECK(0);
        }
    }
    flashport_context_destroy(ctx);
    flashport_context_destroy(ref);
}

int main(int argc, char **argv) {
    int idx;
    flashport_backend_info bi;
    CHECK(flashport_backend_find("hip", &idx) == FLASHPORT_OK);
    CHECK(flashport_backend_get_info(idx, &bi) == FLASHPORT_OK);
    const char *suffix = "libflashport-hip.so";
    const size_t n = strlen(bi.location), ns = strlen(suffix);
    CHECK(bi.is_module && n >= ns && strcmp(bi.location + n - ns, suffix) == 0);
    check_kernel_list(argc - 1, argv + 1);
    if (bi.available) {
        printf("hip available: %d device(s); running the variants\n", bi.device_count);
        check_device();
    } else {
        printf("%s\n", bi.reason);
        check_unavailable(&bi);
    }
    check_other_backends();
    return check_report("test_hip_module");
}
