/*
 * No field is silently ignored: for every backend that can open a device here and every kernel
 * variant of it, a problem asking for one API v2 feature either plans on that variant (which
 * then claims the feature, and the conformance suite checks the numbers) or is declined with
 * FLASHPORT_ERROR_UNSUPPORTED and a message naming the feature. The backward pass either runs
 * (and writes dQ) or is declined by name, and that of a paged cache, which no backend
 * implements, is declined by name everywhere. On a device-memory backend, table
 * contents are checked only with FLASHPORT_CHECK=1, and then before anything is queued.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { B = 2, HQ = 4, HKV = 2, NQ = 8, NKV = 16, D = 16, PAGE = 4, PAGES = 12 };

typedef struct feature {
    const char *what; /* the name the core's reason must contain */
    void (*ask)(flashport_attention_desc *d);
} feature;

static void ask_window(flashport_attention_desc *d) { d->window_left = 3; }
static void ask_softcap(flashport_attention_desc *d) { d->softcap = 30.0f; }
static void ask_alibi(flashport_attention_desc *d) { d->alibi = FLASHPORT_ALIBI_PER_HEAD; }
static void ask_bias(flashport_attention_desc *d) {
    d->bias = (flashport_bias_desc){1, FLASHPORT_F32, 0, 0, NKV, 1};
}
static void ask_sinks(flashport_attention_desc *d) { d->sinks = 1; }
static void ask_varlen(flashport_attention_desc *d) {
    flashport_attention_desc_set_varlen(d, B * NQ, NQ, B * NKV, NKV);
}
static void ask_paged(flashport_attention_desc *d) {
    flashport_attention_desc_set_paged(d, PAGES, PAGE, NKV / PAGE, FLASHPORT_LAYOUT_BNHD);
}
static void ask_fp8(flashport_attention_desc *d) {
    d->dtype = FLASHPORT_FP8_E4M3;
    d->out_dtype = FLASHPORT_BF16;
    d->descale = FLASHPORT_DESCALE_TENSOR;
}

static void ask_f64(flashport_attention_desc *d) { d->dtype = d->out_dtype = FLASHPORT_F64; }

static const feature features[] = {
    {"sliding window", ask_window}, {"logit softcap", ask_softcap},
    {"ALiBi", ask_alibi},           {"additive bias", ask_bias},
    {"attention sinks", ask_sinks}, {"variable-length batch", ask_varlen},
    {"paged KV cache", ask_paged},  {"FP8 inputs", ask_fp8},
    {"float64 inputs", ask_f64},
};

static void base_desc_of(flashport_attention_desc *d, flashport_dtype dtype) {
    flashport_attention_desc_init(d, dtype, B, HQ, HKV, NQ, NKV, D, FLASHPORT_LAYOUT_BNHD);
}
static void base_desc(flashport_attention_desc *d) { base_desc_of(d, FLASHPORT_F32); }

/* The first dtype whose plain problem the variant plans: f32, else a variant for 16-bit data
 * only (bf16 products) is asked about the features on the data it takes; -1 when it plans none
 * (it cannot run on this CPU, and says why). */
static int plain_dtype(flashport_context *ctx, const char *kernel) {
    static const flashport_dtype dtypes[] = {FLASHPORT_F32, FLASHPORT_BF16, FLASHPORT_F16};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        flashport_attention_desc d;
        base_desc_of(&d, dtypes[i]);
        d.kernel = kernel;
        flashport_plan_info info;
        if (flashport_attention_plan(ctx, &d, &info) == FLASHPORT_OK) return (int)dtypes[i];
    }
    return -1;
}

/* Every variant of one backend, every feature, forced by name. */
static void check_variants(flashport_context *ctx, const char *backend) {
    const int n = flashport_kernel_count(backend);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        flashport_kernel_info k;
        CHECK(flashport_kernel_get_info(backend, i, &k) == FLASHPORT_OK);
        const int dtype = plain_dtype(ctx, k.name);
        if (dtype < 0) {
            printf("%s/%s: not checked here (%s)\n", backend, k.name, flashport_last_error());
            continue;
        }
        for (size_t f = 0; f < sizeof features / sizeof features[0]; f++) {
            flashport_attention_desc d;
            base_desc_of(&d, (flashport_dtype)dtype);
            features[f].ask(&d);
            d.kernel = k.name;
            flashport_plan_info info;
            flashport_status st = flashport_attention_plan(ctx, &d, &info);
            check_count++;
            if (st == FLASHPORT_OK) continue; /* the variant claims it; conformance judges it */
            if (st != FLASHPORT_ERROR_UNSUPPORTED ||
                !strstr(flashport_last_error(), features[f].what)) {
                check_failures++;
                fprintf(stderr, "%s/%s with %s: %s: '%s' does not name the feature\n", backend,
                        k.name, features[f].what, flashport_status_string(st),
                        flashport_last_error());
            }
        }
    }
}

/* The backward pass on host arrays: run (dQ written), or declined by name (dQ untouched); that
 * of a paged cache declined by name. */
static void check_backward(flashport_context *ctx) {
    flashport_attention_desc d;
    base_desc(&d);
    static float q[B * NQ * HQ * D], k[PAGES * PAGE * HKV * D], v[PAGES * PAGE * HKV * D];
    static float o[B * NQ * HQ * D], d_o[B * NQ * HQ * D], lse[B * HQ * NQ];
    static float dq[B * NQ * HQ * D], dk[PAGES * PAGE * HKV * D], dv[PAGES * PAGE * HKV * D];
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse, a.d_o = d_o;
    a.d_q = dq, a.d_k = dk, a.d_v = dv;
    for (int paged = 0; paged <= 1; paged++) {
        for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++) dq[i] = 7.0f;
        int32_t table[B * (NKV / PAGE)], lens[B] = {NKV, NKV - 3};
        for (int i = 0; i < B * (NKV / PAGE); i++) table[i] = i % PAGES;
        if (paged) {
            ask_paged(&d);
            a.block_table = table, a.seqlens_kv = lens;
        }
        const flashport_status st = flashport_attention_backward_host(ctx, &d, &a);
        int untouched = 1;
        for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++) untouched &= dq[i] == 7.0f;
        if (st == FLASHPORT_OK && !paged) {
            CHECK(!untouched);
            continue;
        }
        CHECK_STATUS(st, FLASHPORT_ERROR_UNSUPPORTED, "backward pass");
        CHECK(untouched);
    }
}

/* A device-memory backend: a block_table entry past num_pages is caught before launch only
 * with FLASHPORT_CHECK=1 (and then whatever the kernels implement). */
static void check_device_tables(flashport_context *ctx) {
    flashport_attention_desc d;
    base_desc(&d);
    ask_paged(&d);
    int32_t table[B * (NKV / PAGE)], lens[B] = {NKV, NKV};
    for (int i = 0; i < B * (NKV / PAGE); i++) table[i] = i % PAGES;
    table[3] = PAGES; /* outside the cache */
    const size_t qb = sizeof(float) * B * NQ * HQ * D, kb = sizeof(float) * PAGES * PAGE * HKV * D;
    flashport_buffer *bq, *bk, *bv, *bo, *bt, *bl;
    CHECK(flashport_buffer_alloc(ctx, qb, &bq) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, kb, &bk) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, kb, &bv) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, qb, &bo) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof table, &bt) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof lens, &bl) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bt, 0, table, sizeof table) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bl, 0, lens, sizeof lens) == FLASHPORT_OK);
    flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
    a.q = bq, a.k = bk, a.v = bv, a.o = bo, a.block_table = bt, a.seqlens_kv = bl;
    unsetenv("FLASHPORT_CHECK");
    flashport_status unchecked = flashport_attention_run(ctx, &d, &a);
    CHECK(unchecked != FLASHPORT_ERROR_BAD_TABLE);
    if (unchecked == FLASHPORT_OK) CHECK(flashport_synchronize(ctx) == FLASHPORT_OK);
    setenv("FLASHPORT_CHECK", "1", 1);
    CHECK_STATUS(flashport_attention_run(ctx, &d, &a), FLASHPORT_ERROR_BAD_TABLE,
                 "block_table[0][3]");
    unsetenv("FLASHPORT_CHECK");
    flashport_buffer *all[] = {bq, bk, bv, bo, bt, bl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) flashport_buffer_free(all[i]);
}

int main(void) {
    int checked = 0;
    for (int b = 0; b < flashport_backend_count(); b++) {
        flashport_backend_info info;
        CHECK(flashport_backend_get_info(b, &info) == FLASHPORT_OK);
        if (!info.available) {
            printf("%s: not checked here (%s)\n", info.name, info.reason);
            continue;
        }
        flashport_context *ctx;
        CHECK(flashport_context_create(info.name, &ctx) == FLASHPORT_OK);
        check_variants(ctx, info.name);
        check_backward(ctx);
        if (info.is_module) check_device_tables(ctx);
        flashport_context_destroy(ctx);
        printf("%s: every variant implements or declines each feature by name\n", info.name);
        checked++;
    }
    CHECK(checked >= 2); /* reference and cpu_simd are always built */
    return check_report("test_feature_declines");
}
