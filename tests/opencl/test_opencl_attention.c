/*
 * The OpenCL backend against attention computed here in double precision, on problems that
 * exercise every field of the descriptor: GQA, Nq != Nkv both ways, bottom-right causal with
 * rows that see no key, both layouts and padded strides, head dims from 1 to 1024 (several
 * output slices), LSE, the three dtypes, and NaN confined to the rows that see it.
 *
 * test_opencl_attention [SPEC [MODE]]; MODE picks what runs (one ctest test each, so that the
 * slow parts run in parallel and can carry their own environment):
 *   (none)             those problems on the planner's tiles
 *   gpu_tiles          some of them on the portable kernel's GPU tile shapes, forced, so that
 *                      a CPU device checks those shapes too
 *   nv_tf32x3          the f32 problems of head dim <= 128 on the NVIDIA tensor-core kernel: the
 *                      real one on NVIDIA compute capability 8.0+, elsewhere with its warp
 *                      operations emulated (FLASHPORT_OPENCL_NV_EMULATE), which checks its
 *                      fragment maps, swizzle, pipeline and masks without an NVIDIA GPU
 *   nv_tf32x3_configs  the same under every tile configuration of that kernel
 *                      (FLASHPORT_OPENCL_TF32X3_CONFIG = 0, 1, ... until the planner says there
 *                      is no such configuration for the problem's padded head dim)
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp_half.h"

typedef struct {
    flashport_dtype dtype;
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
    flashport_layout layout;
    int64_t seq_pad; /* extra elements per row of every tensor: strides that are not packed */
    float scale;     /* 0: 1/sqrt(d) */
} shape;

static double uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static size_t dsize(flashport_dtype dt) { return dt == FLASHPORT_F32 ? 4 : 2; }

static double load(const void *base, flashport_dtype dt, int64_t i) {
    if (dt == FLASHPORT_F32) return ((const float *)base)[i];
    uint16_t u = ((const uint16_t *)base)[i];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(u) : fp_bf16_to_f32(u);
}

static void store(void *base, flashport_dtype dt, int64_t i, float v) {
    if (dt == FLASHPORT_F32)
        ((float *)base)[i] = v;
    else
        ((uint16_t *)base)[i] = dt == FLASHPORT_F16 ? fp_f32_to_f16(v) : fp_f32_to_bf16(v);
}

static int64_t index_of(const flashport_strides *s, int64_t b, int64_t h, int64_t n) {
    return b * s->batch + h * s->head + n * s->seq;
}

/* Strides for the layout with rows padded by `pad` elements. */
static flashport_strides padded(flashport_layout layout, int64_t heads, int64_t n, int64_t d,
                                int64_t pad) {
    flashport_strides s;
    if (layout == FLASHPORT_LAYOUT_BHND) {
        s.seq = d + pad;
        s.head = n * s.seq;
        s.batch = heads * s.head;
    } else {
        s.head = d + pad;
        s.seq = heads * s.head;
        s.batch = n * s.seq;
    }
    return s;
}

/* softmax(scale q.k) v of one query row in double; lse = -inf and o = 0 when no key is visible. */
static void attention_row(const flashport_problem *p, const void *q, const void *k, const void *v,
                          int64_t b, int64_t h, int64_t i, double *o, double *lse) {
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const int64_t last = p->causal ? i + (p->seq_kv - p->seq_q) : p->seq_kv - 1;
    const int64_t n = last + 1 < p->seq_kv ? last + 1 : p->seq_kv;
    double *w = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double m = -INFINITY, sum = 0.0;
    int nan_seen = 0;
    for (int64_t j = 0; j < n; j++) {
        double dot = 0.0;
        for (int64_t c = 0; c < p->head_dim; c++)
            dot += load(q, p->dtype, index_of(&p->q, b, h, i) + c) *
                   load(k, p->dtype, index_of(&p->k, b, hk, j) + c);
        w[j] = dot * p->scale;
        if (isnan(w[j])) nan_seen = 1;
        else if (w[j] > m) m = w[j];
    }
    for (int64_t c = 0; c < p->head_dim; c++) o[c] = 0.0;
    *lse = -INFINITY;
    if (n > 0) {
        for (int64_t j = 0; j < n; j++) sum += w[j] = exp(w[j] - (m == -INFINITY ? 0.0 : m));
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < p->head_dim; c++)
                o[c] += w[j] / sum * load(v, p->dtype, index_of(&p->v, b, hk, j) + c);
        *lse = nan_seen ? NAN : m + log(sum);
    }
    free(w);
}

static double tolerance(flashport_dtype dt) {
    return dt == FLASHPORT_F32 ? 1e-5 : dt == FLASHPORT_F16 ? 2e-3 : 1e-2;
}

/* Runs one problem on ctx and compares O and LSE with the double attention. nan_at >= 0 puts
 * a NaN in K at key nan_at of batch 0, kv head 0. */
static void problem_of(shape s, flashport_problem *p) {
    flashport_problem_init(p, s.dtype, s.b, s.hq, s.hkv, s.nq, s.nkv, s.d, s.layout);
    p->q = p->o = padded(s.layout, s.hq, s.nq, s.d, s.seq_pad);
    p->k = p->v = padded(s.layout, s.hkv, s.nkv, s.d, s.seq_pad);
    p->causal = s.causal;
    p->scale = s.scale != 0.0f ? s.scale : (float)(1.0 / sqrt((double)s.d));
}

static void run_case(flashport_context *ctx, shape s, uint64_t seed, int64_t nan_at) {
    flashport_problem p;
    problem_of(s, &p);
    int64_t nq_el = flashport_problem_extent(&p, 'q'), nk_el = flashport_problem_extent(&p, 'k');
    size_t es = dsize(s.dtype);
    void *q = malloc((size_t)nq_el * es), *k = malloc((size_t)nk_el * es);
    void *v = malloc((size_t)nk_el * es), *o = malloc((size_t)nq_el * es);
    int64_t n_lse = s.b * s.hq * s.nq;
    float *lse = malloc(sizeof(float) * (size_t)n_lse);
    double *row = malloc(sizeof(double) * (size_t)s.d);
    for (int64_t i = 0; i < nq_el; i++) store(q, s.dtype, i, (float)(2.0 * uniform(&seed)));
    for (int64_t i = 0; i < nk_el; i++) store(k, s.dtype, i, (float)(2.0 * uniform(&seed)));
    for (int64_t i = 0; i < nk_el; i++) store(v, s.dtype, i, (float)uniform(&seed));
    if (nan_at >= 0) store(k, s.dtype, index_of(&p.k, 0, 0, nan_at) + s.d / 2, NAN);
    /* The padding between rows of O must keep its sentinel. */
    float sentinel_store = 0.0f;
    store(&sentinel_store, s.dtype, 0, 12345.0f);
    const double sentinel = load(&sentinel_store, s.dtype, 0);
    for (int64_t i = 0; i < nq_el; i++) store(o, s.dtype, i, 12345.0f);

    flashport_status st = flashport_attention_host(ctx, &p, q, k, v, o, lse);
    CHECK(st == FLASHPORT_OK);
    if (st != FLASHPORT_OK) fprintf(stderr, "  %s\n", flashport_last_error());

    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    int bad_special = 0, bad_pad = 0;
    for (int64_t b = 0; b < s.b; b++)
        for (int64_t h = 0; h < s.hq; h++)
            for (int64_t i = 0; i < s.nq; i++) {
                double ref_lse;
                attention_row(&p, q, k, v, b, h, i, row, &ref_lse);
                float got_lse = lse[(b * s.hq + h) * s.nq + i];
                int row_nan = isnan(ref_lse);
                if (row_nan || isinf(ref_lse)) {
                    /* NaN rows must be NaN; rows with no visible key give O = 0, LSE = -inf. */
                    if (row_nan ? !isnan(got_lse) : !(isinf(got_lse) && got_lse < 0)) bad_special++;
                } else {
                    double e = fabs(got_lse - ref_lse);
                    if (e > max_abs) max_abs = e;
                    if (isnan(got_lse)) bad_special++;
                }
                int64_t base = index_of(&p.o, b, h, i);
                for (int64_t c = 0; c < s.d; c++) {
                    double got = load(o, s.dtype, base + c);
                    if (row_nan) {
                        if (!isnan(got)) bad_special++;
                        continue;
                    }
                    if (isnan(got)) bad_special++;
                    err2 += (got - row[c]) * (got - row[c]);
                    ref2 += row[c] * row[c];
                    if (fabs(got - row[c]) > max_abs) max_abs = fabs(got - row[c]);
                }
                for (int64_t c = s.d; c < s.d + s.seq_pad && base + c < nq_el; c++)
                    if (load(o, s.dtype, base + c) != sentinel) bad_pad++;
            }
    double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    /* Logits in the hundreds (a scale far above 1/sqrt(d)): any f32 kernel's scores then carry
     * errors of about 1e-7 |s|, which the softmax turns into 1e-5-scale errors of O, so such
     * cases get ten times the bounds, as the conformance suite's big_logits cases do. */
    const double factor = fabs(p.scale) * sqrt((double)s.d) > 4.0 ? 10.0 : 1.0;
    double tol = tolerance(s.dtype) * factor;
    int ok = rel <= tol && bad_special == 0 && bad_pad == 0 &&
             (s.dtype != FLASHPORT_F32 || max_abs <= 1e-4 * factor);
    CHECK(ok);
    printf("%s %s b=%lld hq=%lld hkv=%lld nq=%lld nkv=%lld d=%lld causal=%d %s pad=%lld nan=%lld: "
           "scale=%g rel_l2=%.2e max_abs=%.2e special=%d pad=%d\n",
           ok ? "ok  " : "FAIL", flashport_dtype_name(s.dtype), (long long)s.b, (long long)s.hq,
           (long long)s.hkv, (long long)s.nq, (long long)s.nkv, (long long)s.d, s.causal,
           s.layout == FLASHPORT_LAYOUT_BHND ? "bhnd" : "bnhd", (long long)s.seq_pad,
           (long long)nan_at, p.scale, rel, max_abs, bad_special, bad_pad);
    free(q), free(k), free(v), free(o), free(lse), free(row);
}

/* Problems of every path through the tensor-core kernel: both padded head dims (64, 128), the
 * element-wise and 16-byte load paths (d % 4, padded strides), GQA and MQA, Nq != Nkv both ways
 * under causal (rows with no key, warps that skip tiles, masked and unmasked tiles), several
 * key tiles, a negative scale, large logits, and a NaN confined to the rows that see it. */
static void run_nv_tf32x3(flashport_context *ctx, int every_config) {
    flashport_device_info dev;
    CHECK_STATUS(flashport_device_get_info("opencl", flashport_context_device(ctx), &dev),
                 FLASHPORT_OK, NULL);
    const char *cc = strstr(dev.details, "nv_compute_capability=");
    if (!cc || atoi(cc + strlen("nv_compute_capability=")) < 8)
        setenv("FLASHPORT_OPENCL_NV_EMULATE", "1", 1);
    setenv("FLASHPORT_OPENCL_KERNEL", "nv_tf32x3", 1);
    const flashport_layout H = FLASHPORT_LAYOUT_BHND, N = FLASHPORT_LAYOUT_BNHD;
    const flashport_dtype F32 = FLASHPORT_F32;
    const shape cases[] = {
        /* dtype b hq hkv nq nkv d causal layout pad scale */
        {F32, 1, 1, 1, 1, 1, 1, 0, H, 0, 0.0f},
        {F32, 2, 4, 2, 37, 53, 64, 0, H, 0, 0.0f},
        {F32, 1, 2, 1, 70, 45, 64, 1, N, 3, 0.0f},
        {F32, 1, 3, 3, 20, 100, 32, 1, H, 0, 0.0f},
        {F32, 1, 2, 2, 33, 33, 3, 1, N, 0, 0.0f},
        {F32, 1, 8, 1, 1, 200, 64, 1, H, 0, 0.0f},
        {F32, 1, 2, 2, 60, 80, 40, 1, H, 0, -0.7f},
        {F32, 1, 1, 1, 50, 50, 64, 0, N, 0, 3.0f},
        {F32, 1, 4, 2, 150, 90, 100, 1, H, 0, 0.0f},
        {F32, 2, 2, 2, 33, 129, 128, 0, N, 4, 0.0f},
        {F32, 1, 2, 1, 130, 200, 128, 1, H, 0, 0.0f},
    };
    const size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t c = 0; c <= n_cases; c++) {
        /* The last: a NaN confined to the rows that see it. */
        const shape s = c < n_cases ? cases[c] : (shape){F32, 1, 2, 1, 50, 50, 64, 1, H, 0, 0.0f};
        const uint64_t seed = c < n_cases ? 301 + c : 399;
        const int64_t nan_at = c < n_cases ? -1 : 20;
        if (!every_config) {
            run_case(ctx, s, seed, nan_at);
            continue;
        }
        flashport_problem p;
        problem_of(s, &p);
        for (int config = 0;; config++) {
            char value[16];
            snprintf(value, sizeof value, "%d", config);
            setenv("FLASHPORT_OPENCL_TF32X3_CONFIG", value, 1);
            flashport_plan_info info;
            if (flashport_plan(ctx, &p, &info) != FLASHPORT_OK) {
                printf("declined: %s\n", info.reason);
                /* Past the last configuration (0 always exists), or one that needs more than
                 * the device allows; anything else fails. */
                const int too_big = strstr(info.reason, "the device allows") != NULL;
                CHECK(strstr(info.reason, "names no nv_tf32x3 configuration") ? config > 0
                                                                               : too_big);
                if (!too_big) break;
                continue;
            }
            printf("FLASHPORT_OPENCL_TF32X3_CONFIG=%d: %s\n", config, info.reason);
            run_case(ctx, s, seed, nan_at);
        }
        unsetenv("FLASHPORT_OPENCL_TF32X3_CONFIG");
    }
    unsetenv("FLASHPORT_OPENCL_KERNEL");
    unsetenv("FLASHPORT_OPENCL_NV_EMULATE");
}

/* run_case under a forced tile: a device whose local memory cannot hold the tile (NVIDIA's
 * 48 KiB, for the larger shapes at d = 128) must decline it with that reason, and every tile it
 * accepts must compute the right result. Returns 1 when the problem ran. */
static int run_forced_tile_case(flashport_context *ctx, shape s, uint64_t seed, int64_t nan_at) {
    flashport_problem p;
    problem_of(s, &p);
    flashport_plan_info info;
    if (flashport_plan(ctx, &p, &info) == FLASHPORT_ERROR_UNSUPPORTED) {
        CHECK(strstr(info.reason, "bytes of local memory") != NULL);
        printf("declined: %s\n", info.reason);
        return 0;
    }
    run_case(ctx, s, seed, nan_at);
    return 1;
}

int main(int argc, char **argv) {
    flashport_context *ctx = NULL;
    const char *spec = argc > 1 ? argv[1] : "opencl";
    CHECK_STATUS(flashport_context_create(spec, &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_opencl_attention");
    const char *mode = argc > 2 ? argv[2] : "";
    if (strcmp(mode, "nv_tf32x3") == 0 || strcmp(mode, "nv_tf32x3_configs") == 0) {
        const int every_config = strcmp(mode, "nv_tf32x3_configs") == 0;
        run_nv_tf32x3(ctx, every_config);
        flashport_context_destroy(ctx);
        return check_report(every_config ? "test_opencl_attention nv_tf32x3_configs"
                                         : "test_opencl_attention nv_tf32x3");
    }
    const int gpu_tiles = strcmp(mode, "gpu_tiles") == 0;
    if (*mode && !gpu_tiles) {
        fprintf(stderr, "test_opencl_attention: unknown mode '%s'\n", mode);
        return 2;
    }

    const flashport_layout H = FLASHPORT_LAYOUT_BHND, N = FLASHPORT_LAYOUT_BNHD;
    const flashport_dtype F32 = FLASHPORT_F32, F16 = FLASHPORT_F16, BF16 = FLASHPORT_BF16;
    const shape cases[] = {
        /* dtype b hq hkv nq nkv d causal layout pad */
        {F32, 1, 1, 1, 1, 1, 1, 0, H, 0, 0.0f},
        {F32, 2, 4, 2, 37, 53, 64, 0, H, 0, 0.0f},      /* GQA, ragged tiles */
        {F32, 1, 2, 1, 70, 45, 64, 1, N, 3, 0.0f},      /* Nq > Nkv causal: first rows see no key */
        {F32, 1, 3, 3, 20, 100, 32, 1, H, 0, 0.0f},     /* Nq < Nkv causal, skipped blocks */
        {F32, 1, 2, 2, 33, 33, 3, 1, N, 0, 0.0f},       /* tiny d */
        {F32, 1, 1, 1, 40, 70, 130, 0, H, 2, 0.0f},     /* two output slices */
        {F32, 1, 1, 1, 9, 17, 1024, 1, N, 0, 0.0f},     /* largest d, decode-like rows */
        {F32, 1, 8, 1, 1, 200, 64, 1, H, 0, 0.0f},      /* MQA decode */
        {F16, 2, 2, 1, 45, 66, 64, 1, N, 1, 0.0f},
        {F16, 1, 1, 1, 30, 30, 200, 0, H, 0, 0.0f},
        {BF16, 1, 4, 2, 65, 65, 128, 1, H, 0, 0.0f},
        {BF16, 2, 1, 1, 17, 40, 16, 0, N, 0, 0.0f},
        {F32, 1, 2, 2, 60, 80, 40, 1, H, 0, -0.7f}, /* a negative scale: the max is at min q.k */
        {F32, 1, 1, 1, 50, 50, 64, 0, N, 0, 3.0f},  /* logits in the hundreds */
    };
    if (!gpu_tiles) {
        uint64_t seed = 1;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            run_case(ctx, cases[c], seed++, -1);
        /* A NaN in one key reaches exactly the rows that see it: with causal the rows before it
         * stay finite, also in the block the diagonal crosses. */
        run_case(ctx, (shape){F32, 1, 2, 1, 50, 50, 64, 1, H, 0, 0.0f}, 99, 20);
        run_case(ctx, (shape){BF16, 1, 1, 1, 24, 40, 16, 1, N, 0, 0.0f}, 98, 30);
        flashport_context_destroy(ctx);
        return check_report("test_opencl_attention");
    }

    /* The GPU tile shapes of the portable kernel (kept on it also on NVIDIA), forced here so
     * that a CPU OpenCL device checks them too: 128 work-items with 4x8 score tiles and Q
     * resident or staged per chunk, with and without the register prefetch; 256 work-items
     * with 4x4 score tiles; and the decode shape. */
    setenv("FLASHPORT_OPENCL_KERNEL", "tiled", 1);
    const char *gpu_shapes[] = {"br=64,bc=64,tm=4,tn=8,kc=32,vc=32,dv=128,qr=1,pf=0",
                                "br=64,bc=64,tm=4,tn=8,kc=32,vc=32,dv=128,qr=0,pf=1",
                                "br=64,bc=64,tm=4,tn=4,kc=32,vc=32,dv=128,om=8,qr=1,pf=1",
                                "br=16,bc=64,tm=1,tn=4,kc=16,vc=32,dv=64"};
    int forced_ran = 0;
    for (int g = 0; g < 4; g++) {
        setenv("FLASHPORT_OPENCL_TILE", gpu_shapes[g], 1);
        printf("FLASHPORT_OPENCL_TILE=%s\n", gpu_shapes[g]);
        forced_ran += run_forced_tile_case(ctx, cases[1], 201, -1);
        forced_ran += run_forced_tile_case(ctx, cases[2], 202, -1);
        forced_ran += run_forced_tile_case(ctx, cases[5], 203, -1);
        forced_ran += run_forced_tile_case(ctx, cases[8], 204, -1);
        forced_ran += run_forced_tile_case(ctx, (shape){F32, 1, 2, 1, 50, 50, 64, 1, H, 0, 0.0f},
                                           205, 20);
    }
    CHECK(forced_ran > 0);
    unsetenv("FLASHPORT_OPENCL_TILE");
    unsetenv("FLASHPORT_OPENCL_KERNEL");

    flashport_context_destroy(ctx);
    return check_report("test_opencl_attention gpu_tiles");
}
