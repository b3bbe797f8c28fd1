/*
 * The cuda module: it loads on every machine that builds it and lists the variants it was built
 * with (argv: the kernel files compiled). Without a usable GPU it reports "cuda unavailable:
 * <runtime reason>", and an explicit "cuda" context fails with that reason while "cuda,reference"
 * falls back. With a GPU: device info, error statuses from the runtime, and every variant
 * against the reference backend on small awkward shapes (partial tiles, GQA, Nq != Nkv,
 * causal with fully masked rows, LSE, both layouts, all dtypes).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "fp_half.h"

static const char *const canonical_order[] = {
    "naive_tiled",
    "smem_tiled",
    "register_tiled",
    "wide_register_tile",
    "float4_loads",
    "transposed_smem",
    "double_buffered",
    "wmma_f16",
    "decode_mma",
    "decode",
    "hopper_wgmma",
    "hopper_wgmma_fp8",
    "tensor_core_mma",
    "tensor_core_mma_split_kv",
    "fa2_f32",
    "fa2_f32_split_kv",
    "tensor_core_tf32x3",
    "tensor_core_tf32x3_wide",
    "hopper_wgmma_tf32x3",
    "backward_mma",
    "backward_tf32x3",
    "backward_f32",
};
#define N_CANONICAL (int)(sizeof canonical_order / sizeof canonical_order[0])

static int kernel_index(const char *name) {
    flashport_kernel_info ki;
    for (int i = 0; i < flashport_kernel_count("cuda"); i++)
        if (flashport_kernel_get_info("cuda", i, &ki) == FLASHPORT_OK && strcmp(ki.name, name) == 0)
            return i;
    return -1;
}

static int is_variant_name(const char *name) {
    for (int c = 0; c < N_CANONICAL; c++)
        if (strcmp(canonical_order[c], name) == 0) return 1;
    return 0;
}

/* The variants are exactly the variant files compiled (argv holds every kernel source file; shared
 * helpers among them are not variants), in ladder-then-production order. */
static void check_kernel_list(int n_files, char **files) {
    int n_variant_files = 0;
    for (int f = 0; f < n_files; f++) {
        if (!is_variant_name(files[f])) continue;
        n_variant_files++;
        if (kernel_index(files[f]) < 0) {
            fprintf(stderr, "kernel file %s.cu is not listed as a variant\n", files[f]);
            CHECK(0);
        }
    }
    CHECK(flashport_kernel_count("cuda") == n_variant_files);
    int last = -1;
    for (int c = 0; c < N_CANONICAL; c++) {
        int i = kernel_index(canonical_order[c]);
        if (i < 0) continue;
        CHECK(i > last);
        last = i;
    }
}

static void check_unavailable(const flashport_backend_info *bi) {
    CHECK(strncmp(bi->reason, "cuda unavailable: ", 18) == 0 && strlen(bi->reason) > 18);
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create("cuda", &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                 "cuda unavailable: ");
    CHECK(flashport_context_create("cuda,reference", &ctx) == FLASHPORT_OK);
    CHECK(ctx && strcmp(flashport_context_backend(ctx), "reference") == 0);
    flashport_context_destroy(ctx);
}

/* ---- with a GPU ---- */

typedef struct shape {
    flashport_dtype dtype;
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
    flashport_layout layout;
} shape;

static const shape shapes[] = {
    {FLASHPORT_F32, 1, 1, 1, 1, 1, 1, 0, FLASHPORT_LAYOUT_BHND},
    {FLASHPORT_F32, 2, 4, 2, 37, 45, 72, 0, FLASHPORT_LAYOUT_BHND},
    {FLASHPORT_F32, 1, 3, 1, 70, 33, 40, 1, FLASHPORT_LAYOUT_BNHD}, /* rows with no visible key */
    {FLASHPORT_F32, 1, 2, 2, 33, 150, 130, 1, FLASHPORT_LAYOUT_BHND},
    /* The head dims of the Hopper f32 variant: partial tiles, GQA, Nq != Nkv both ways, causal
     * blocks past the diagonal, two query blocks a head. */
    {FLASHPORT_F32, 1, 4, 2, 200, 300, 64, 1, FLASHPORT_LAYOUT_BNHD},
    {FLASHPORT_F32, 2, 2, 1, 129, 77, 128, 0, FLASHPORT_LAYOUT_BHND},
    {FLASHPORT_F32, 1, 2, 2, 160, 100, 128, 1, FLASHPORT_LAYOUT_BNHD},
    {FLASHPORT_F16, 2, 2, 1, 65, 65, 64, 1, FLASHPORT_LAYOUT_BNHD},
    {FLASHPORT_BF16, 1, 2, 1, 17, 200, 96, 0, FLASHPORT_LAYOUT_BHND},
};

static uint32_t rng_state = 12345u;
static float rand_unit(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void fill(void *x, int64_t n, flashport_dtype dt) {
    for (int64_t i = 0; i < n; i++) {
        float v = rand_unit();
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

/* Runs p on ctx and on the reference; returns the relative L2 error of O (-1 on failure) and
 * checks the LSE rows agree (equal infinities included). */
static double compare_with_reference(flashport_context *ctx, flashport_context *ref,
                                     const flashport_problem *p) {
    size_t es = flashport_dtype_size(p->dtype);
    int64_t nq = flashport_problem_extent(p, 'q'), nk = flashport_problem_extent(p, 'k');
    int64_t nv = flashport_problem_extent(p, 'v'), no = flashport_problem_extent(p, 'o');
    int64_t nl = p->batch * p->heads_q * p->seq_q;
    void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nv * es);
    void *o = calloc(no, es), *o_ref = calloc(no, es);
    float *lse = calloc(nl, sizeof *lse), *lse_ref = calloc(nl, sizeof *lse_ref);
    double err = -1.0;
    if (!q || !k || !v || !o || !o_ref || !lse || !lse_ref) goto done;
    fill(q, nq, p->dtype);
    fill(k, nk, p->dtype);
    fill(v, nv, p->dtype);
    flashport_problem pr = *p;
    pr.kernel = NULL;
    if (flashport_attention_host(ctx, p, q, k, v, o, lse) != FLASHPORT_OK ||
        flashport_attention_host(ref, &pr, q, k, v, o_ref, lse_ref) != FLASHPORT_OK) {
        fprintf(stderr, "attention failed: %s\n", flashport_last_error());
        goto done;
    }
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < no; i++) {
        double a = get(o, i, p->dtype), r = get(o_ref, i, p->dtype);
        num += (a - r) * (a - r);
        den += r * r;
    }
    err = den > 0.0 ? sqrt(num / den) : sqrt(num);
    for (int64_t i = 0; i < nl; i++) {
        int same = isinf(lse_ref[i]) ? lse[i] == lse_ref[i] : fabs(lse[i] - lse_ref[i]) < 1e-3;
        if (!same) {
            fprintf(stderr, "lse[%lld] = %g, reference %g\n", (long long)i, lse[i], lse_ref[i]);
            err = -1.0;
            break;
        }
    }
done:
    free(q), free(k), free(v), free(o), free(o_ref), free(lse), free(lse_ref);
    return err;
}

static void check_variants(flashport_context *ctx, flashport_context *ref) {
    for (int i = 0; i < flashport_kernel_count("cuda"); i++) {
        flashport_kernel_info ki;
        CHECK(flashport_kernel_get_info("cuda", i, &ki) == FLASHPORT_OK);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const shape *sh = &shapes[s];
            flashport_problem p;
            flashport_problem_init(&p, sh->dtype, sh->b, sh->hq, sh->hkv, sh->nq, sh->nkv, sh->d,
                                   sh->layout);
            p.causal = sh->causal;
            p.kernel = ki.name;
            flashport_plan_info plan;
            if (flashport_plan(ctx, &p, &plan) != FLASHPORT_OK) {
                CHECK(plan.reason[0] != '\0'); /* declining is fine, silently is not */
                continue;
            }
            /* The dtype's tolerance, loosened to f16's where an f16 variant rounds f32 inputs. */
            double tol = sh->dtype == FLASHPORT_BF16 ? 1e-2
                         : sh->dtype == FLASHPORT_F16 || ki.precision == FLASHPORT_PRECISION_F16
                             ? 2e-3
                             : 1e-5;
            double err = compare_with_reference(ctx, ref, &p);
            if (err < 0.0 || err > tol) {
                fprintf(stderr, "%s on shape %zu: relative L2 error %g (tolerance %g)\n", ki.name,
                        s, err, tol);
                CHECK(0);
            }
        }
    }
}

static void check_device(void) {
    flashport_device_info di;
    CHECK(flashport_device_get_info("cuda", 0, &di) == FLASHPORT_OK);
    CHECK(strcmp(di.vendor, "NVIDIA") == 0 && di.memory_bytes > 0 && di.compute_units > 0);
    CHECK(strstr(di.details, "cc=") != NULL);

    flashport_context *ctx = NULL, *ref = NULL;
    CHECK(flashport_context_create("cuda", &ctx) == FLASHPORT_OK);
    CHECK(flashport_context_create("reference", &ref) == FLASHPORT_OK);
    if (!ctx || !ref) return;

    /* cudaMallocAsync where the device has memory pools, else cudaMalloc. */
    flashport_buffer *huge = NULL;
    CHECK_STATUS(flashport_buffer_alloc(ctx, (size_t)1 << 50, &huge), FLASHPORT_ERROR_OUT_OF_MEMORY,
                 "cudaMalloc");
    CHECK(message_has("requested"));

    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, 1024, 1024, 1024, FLASHPORT_LAYOUT_BHND);
    flashport_plan_info plan;
    CHECK(flashport_plan(ctx, &p, &plan) == FLASHPORT_OK && plan.kernel[0] && plan.reason[0]);

    flashport_peaks peaks;
    CHECK(flashport_measure_peaks(ctx, &peaks) == FLASHPORT_OK);
    CHECK(peaks.f32_fma_tflops > 0.0 && peaks.copy_gbps > 0.0 && peaks.method[0]);

    check_variants(ctx, ref);
    flashport_context_destroy(ctx);
    flashport_context_destroy(ref);
}

int main(int argc, char **argv) {
    int idx;
    flashport_backend_info bi;
    CHECK(flashport_backend_find("cuda", &idx) == FLASHPORT_OK);
    CHECK(flashport_backend_get_info(idx, &bi) == FLASHPORT_OK);
    const char *suffix = "libflashport-cuda.so";
    size_t n = strlen(bi.location), ns = strlen(suffix);
    CHECK(bi.is_module && n >= ns && strcmp(bi.location + n - ns, suffix) == 0);
    check_kernel_list(argc - 1, argv + 1);
    if (bi.available) {
        printf("cuda available: %d device(s); running the variants\n", bi.device_count);
        check_device();
    } else {
        printf("%s\n", bi.reason);
        check_unavailable(&bi);
    }
    return check_report("test_cuda_module");
}
