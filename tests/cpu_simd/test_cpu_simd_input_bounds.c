/*
 * Inputs read within their bounds: every cpu_simd path runs problems whose Q, K and V each end
 * exactly where an inaccessible page begins, so a kernel that reads one element past the last
 * row faults and fails the test. Head dimensions whose rows the kernels pad (124 and 121: the
 * amxbf16 tile lays them out 144 floats long; 13 and 72: not a whole register) and the output
 * checked against the reference backend. A path this CPU or build lacks is declined by the
 * planner, reported and left out; the portable path must run.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flashport.h"

#include "fp_half.h"

/* `bytes` of memory whose last byte is followed by a PROT_NONE page (NULL on failure); free with
 * guarded_free. */
typedef struct guarded {
    void *map, *data;
    size_t map_bytes;
} guarded;

static int guarded_alloc(size_t bytes, guarded *g) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (bytes + page - 1) / page * page;
    g->map_bytes = body + page;
    g->map = mmap(NULL, g->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return 0;
    if (mprotect((char *)g->map + body, page, PROT_NONE) != 0) return 0;
    g->data = (char *)g->map + body - bytes;
    return 1;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_bytes); }

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float random_unit(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void fill(void *p, flashport_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = random_unit();
        if (dt == FLASHPORT_BF16)
            ((uint16_t *)p)[i] = fp_f32_to_bf16(x);
        else if (dt == FLASHPORT_F16)
            ((uint16_t *)p)[i] = fp_f32_to_f16(x);
        else
            ((float *)p)[i] = x;
    }
}

static double value(const void *p, flashport_dtype dt, int64_t i) {
    if (dt == FLASHPORT_BF16) return fp_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FLASHPORT_F16) return fp_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* One problem on one path; 1 when it failed, 0 when it passed or the path declined it. */
static int check(flashport_context *ctx, flashport_context *ref, const char *kernel,
                 flashport_dtype dt, int64_t d, int causal, int *ran) {
    const int64_t b = 1, hq = 2, hkv = 1, nq = 40, nkv = 70;
    flashport_attention_desc desc;
    flashport_attention_desc_init(&desc, dt, b, hq, hkv, nq, nkv, d, FLASHPORT_LAYOUT_BHND);
    desc.causal = causal;
    desc.kernel = kernel;
    flashport_plan_info info;
    if (flashport_attention_plan(ctx, &desc, &info) != FLASHPORT_OK) return 0;
    const size_t es = dt == FLASHPORT_F32 ? 4 : 2;
    const int64_t nq_el = b * hq * nq * d, nkv_el = b * hkv * nkv * d;
    guarded q, k, v;
    if (!guarded_alloc((size_t)nq_el * es, &q) || !guarded_alloc((size_t)nkv_el * es, &k) ||
        !guarded_alloc((size_t)nkv_el * es, &v)) {
        printf("FAIL mmap\n");
        return 1;
    }
    fill(q.data, dt, nq_el);
    fill(k.data, dt, nkv_el);
    fill(v.data, dt, nkv_el);
    void *o = calloc((size_t)nq_el, es), *o_ref = calloc((size_t)nq_el, es);
    flashport_attention_host_args args = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    args.q = q.data;
    args.k = k.data;
    args.v = v.data;
    args.o = o;
    flashport_status st = flashport_attention_run_host(ctx, &desc, &args);
    flashport_attention_desc rdesc = desc;
    rdesc.kernel = NULL;
    args.o = o_ref;
    const flashport_status rst = flashport_attention_run_host(ref, &rdesc, &args);
    double worst = 0.0;
    for (int64_t i = 0; i < nq_el && st == FLASHPORT_OK && rst == FLASHPORT_OK; ++i) {
        const double err = fabs(value(o, dt, i) - value(o_ref, dt, i));
        worst = err > worst || isnan(err) ? err : worst;
    }
    const double tol = dt == FLASHPORT_F32 ? 1e-4 : 2e-2;
    const int failed = st != FLASHPORT_OK || rst != FLASHPORT_OK || !(worst <= tol);
    printf("%s %s %s d=%lld%s: max |O - reference| %.2e (tol %.0e)%s%s\n", failed ? "FAIL" : "ok  ",
           kernel, flashport_dtype_name(dt), (long long)d, causal ? " causal" : "", worst, tol,
           st != FLASHPORT_OK ? ": " : "", st != FLASHPORT_OK ? flashport_last_error() : "");
    free(o);
    free(o_ref);
    guarded_free(&q);
    guarded_free(&k);
    guarded_free(&v);
    ++*ran;
    return failed;
}

int main(void) {
    flashport_context *ctx = NULL, *ref = NULL;
    if (flashport_context_create("cpu_simd", &ctx) != FLASHPORT_OK ||
        flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        printf("FAIL: contexts: %s\n", flashport_last_error());
        return 1;
    }
    static const char *kernels[] = {"portable", "avx2", "avx512", "avx512bf16", "amxbf16"};
    static const flashport_dtype dtypes[] = {FLASHPORT_F32, FLASHPORT_F16, FLASHPORT_BF16};
    static const int64_t dims[] = {13, 72, 121, 124};
    int failures = 0, portable_ran = 0;
    for (size_t kv = 0; kv < sizeof kernels / sizeof kernels[0]; ++kv) {
        int ran = 0;
        for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; ++t)
            for (size_t a = 0; a < sizeof dims / sizeof dims[0]; ++a)
                for (int causal = 0; causal < 2; ++causal)
                    failures += check(ctx, ref, kernels[kv], dtypes[t], dims[a], causal, &ran);
        if (!ran) printf("not run: %s (declined here for every problem)\n", kernels[kv]);
        if (kv == 0) portable_ran = ran;
    }
    if (!portable_ran) {
        printf("FAIL: the portable path ran nothing\n");
        ++failures;
    }
    flashport_context_destroy(ref);
    flashport_context_destroy(ctx);
    printf("%s: %d failed checks\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
