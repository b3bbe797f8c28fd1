/*
 * API v2 validation through the public calls: each bad descriptor field, buffer or table gets
 * its specific status and a message naming the field, and no byte of any output is written,
 * on host arrays and on buffers. Feature declines name the feature, for the planner and for a
 * forced kernel.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

enum { B = 2, HQ = 2, HKV = 1, NQ = 3, NKV = 4, D = 4, PAGES = 4, PAGE = 2 };
enum { ELEMS = 256, SENTINEL = 0x5a };

typedef struct fixture {
    flashport_attention_desc d;
    flashport_attention_host_args a;
    int32_t cu_q[B + 1], cu_kv[B + 1], lens[B], table[B * 2];
} fixture;

static float q[ELEMS], k[ELEMS], v[ELEMS], bias[ELEMS], factors[ELEMS], sinks[HQ];
static unsigned char o[ELEMS * 4], lse[ELEMS * 4], dq[ELEMS * 4], dk[ELEMS * 4], dv[ELEMS * 4];

static void dense(fixture *f) {
    flashport_attention_desc_init(&f->d, FLASHPORT_F32, B, HQ, HKV, NQ, NKV, D,
                                  FLASHPORT_LAYOUT_BNHD);
    f->a = (flashport_attention_host_args)FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    f->a.q = q, f->a.k = k, f->a.v = v, f->a.o = o, f->a.lse = lse;
}

/* Sequences of 2 and 3 queries, 4 and 3 keys, packed. */
static void varlen(fixture *f) {
    dense(f);
    flashport_attention_desc_set_varlen(&f->d, 5, NQ, 7, NKV);
    const int32_t cu_q[B + 1] = {0, 2, 5}, cu_kv[B + 1] = {0, 4, 7};
    memcpy(f->cu_q, cu_q, sizeof cu_q), memcpy(f->cu_kv, cu_kv, sizeof cu_kv);
    f->a.cu_seqlens_q = f->cu_q, f->a.cu_seqlens_kv = f->cu_kv;
}

/* Dense Q, a cache of 4 pages of 2 keys; sequences of 4 and 3 keys. */
static void paged(fixture *f) {
    dense(f);
    flashport_attention_desc_set_paged(&f->d, PAGES, PAGE, 2, FLASHPORT_LAYOUT_BNHD);
    const int32_t lens[B] = {4, 3}, table[B * 2] = {2, 0, 3, 1};
    memcpy(f->lens, lens, sizeof lens), memcpy(f->table, table, sizeof table);
    f->a.seqlens_kv = f->lens, f->a.block_table = f->table;
}

static void fp8(fixture *f) {
    dense(f);
    f->d.dtype = FLASHPORT_FP8_E4M3;
    f->d.out_dtype = FLASHPORT_BF16;
    f->d.descale = FLASHPORT_DESCALE_TENSOR;
    f->a.q_descale = f->a.k_descale = f->a.v_descale = factors;
}

static void fill_sentinels(void) {
    memset(o, SENTINEL, sizeof o), memset(lse, SENTINEL, sizeof lse),
        memset(dq, SENTINEL, sizeof dq);
}

static int untouched(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

/* ---- the rejected calls, one per bad value ---- */

static void cu_q_not_monotonic(fixture *f) { f->cu_q[1] = 3, f->cu_q[2] = 2; }
static void cu_q_overrun(fixture *f) { f->cu_q[1] = 3, f->cu_q[2] = 6; }
static void cu_kv_overrun(fixture *f) { f->cu_kv[2] = 8; }
static void cu_q_negative(fixture *f) { f->cu_q[0] = -1; }
static void cu_kv_too_long(fixture *f) { f->cu_kv[1] = 5; }
static void page_past_cache(fixture *f) { f->table[2] = PAGES; }
static void page_negative(fixture *f) { f->table[1] = -1; }
static void seqlen_past_seq_kv(fixture *f) { f->lens[1] = NKV + 1; }
static void seqlen_negative(fixture *f) { f->lens[0] = -2; }
static void no_v_descale(fixture *f) { f->a.v_descale = NULL; }
static void unused_sinks(fixture *f) { f->a.sinks = sinks; }
static void unused_block_table(fixture *f) { f->a.block_table = f->table; }
static void unused_cu_kv(fixture *f) { f->a.cu_seqlens_kv = f->cu_kv; }
static void unused_bias(fixture *f) { f->a.bias = bias; }
static void unused_descale(fixture *f) { f->a.q_descale = factors; }
static void forward_with_dq(fixture *f) { f->a.d_q = dq; }
static void missing_alibi(fixture *f) { f->d.alibi = FLASHPORT_ALIBI_PER_HEAD; }
static void missing_table(fixture *f) { f->a.block_table = NULL; }
static void desc_size_0(fixture *f) { f->d.struct_size = 0; }
static void args_size_0(fixture *f) { f->a.struct_size = 0; }
static void causal_right(fixture *f) { f->d.causal = 1, f->d.window_right = 2; }
static void left_below(fixture *f) { f->d.window_left = -2; }
static void softcap_negative(fixture *f) { f->d.softcap = -1.0f; }
static void softcap_inf(fixture *f) { f->d.softcap = INFINITY; }
static void alibi_unknown(fixture *f) { f->d.alibi = (flashport_alibi)7; }
static void bias_stride_negative(fixture *f) {
    f->d.bias = (flashport_bias_desc){1, FLASHPORT_F32, 0, 0, -1, 1};
    f->a.bias = bias;
}
static void bias_fp8(fixture *f) {
    f->d.bias = (flashport_bias_desc){1, FLASHPORT_FP8_E4M3, 0, 0, NKV, 1};
    f->a.bias = bias;
}
static void bias_off_strides(fixture *f) { f->d.bias.query = NKV; }
static void sinks_2(fixture *f) { f->d.sinks = 2; }
static void varlen_q_batch(fixture *f) { f->d.q.batch = 1; }
static void varlen_kv_only(fixture *f) { f->d.q_varlen = 0, f->d.total_q = 0; }
static void varlen_q_dense_kv(fixture *f) {
    f->d.kv_layout = FLASHPORT_KV_DENSE, f->d.total_kv = 0, f->a.cu_seqlens_kv = NULL;
}
static void descale_on_f32(fixture *f) { f->d.descale = FLASHPORT_DESCALE_TENSOR; }
static void out_dtype_differs(fixture *f) { f->d.out_dtype = FLASHPORT_F16; }
static void fp8_out_fp8(fixture *f) { f->d.out_dtype = FLASHPORT_FP8_E5M2; }
static void fp8_out_f64(fixture *f) { f->d.out_dtype = FLASHPORT_F64; }
static void f64_bias_f16(fixture *f) {
    f->d.dtype = f->d.out_dtype = FLASHPORT_F64;
    f->d.bias = (flashport_bias_desc){1, FLASHPORT_F16, 0, 0, NKV, 1};
    f->a.bias = bias;
}
static void f32_bias_f64(fixture *f) {
    f->d.bias = (flashport_bias_desc){1, FLASHPORT_F64, 0, 0, NKV, 1};
    f->a.bias = bias;
}
static void fp8_no_descale(fixture *f) { f->d.descale = FLASHPORT_DESCALE_NONE; }
static void block_0(fixture *f) { f->d.descale = FLASHPORT_DESCALE_BLOCK; }
static void pages_0(fixture *f) { f->d.num_pages = 0; }
static void seq_kv_past_cache(fixture *f) { f->d.seq_kv = 2 * PAGE + 1; }
static void table_size_overflows(fixture *f) {
    /* batch * max_pages_per_seq overflows int64 while page_size * max_pages_per_seq does not:
     * the table's size must be rejected, not wrapped and then indexed. */
    f->d.page_size = 1;
    f->d.max_pages_per_seq = INT64_C(1) << 62;
    f->d.k.batch = f->d.v.batch = HKV * D;
}

typedef struct rejected {
    const char *what;
    void (*base)(fixture *);
    void (*bad)(fixture *);
    flashport_status status;
    const char *needle;
    int descriptor; /* a fault of the descriptor alone: flashport_attention_desc_validate too */
} rejected;

static const rejected cases[] = {
    {"cu_seqlens_q decreasing", varlen, cu_q_not_monotonic, FLASHPORT_ERROR_BAD_TABLE,
     "cu_seqlens_q is not monotonic: entry 1 is 3, entry 2 is 2", 0},
    {"cu_seqlens_q past total_q", varlen, cu_q_overrun, FLASHPORT_ERROR_BAD_TABLE,
     "cu_seqlens_q[2] = 6 overruns", 0},
    {"cu_seqlens_kv past total_kv", varlen, cu_kv_overrun, FLASHPORT_ERROR_BAD_TABLE,
     "cu_seqlens_kv[2] = 8 overruns", 0},
    {"cu_seqlens_q negative", varlen, cu_q_negative, FLASHPORT_ERROR_BAD_TABLE,
     "cu_seqlens_q[0] is -1", 0},
    {"a key sequence longer than seq_kv", varlen, cu_kv_too_long, FLASHPORT_ERROR_BAD_TABLE,
     "cu_seqlens_kv: sequence 0 has 5 rows", 0},
    {"block_table entry = num_pages", paged, page_past_cache, FLASHPORT_ERROR_BAD_TABLE,
     "block_table[1][0] is 4, outside [0, num_pages = 4)", 0},
    {"block_table entry negative", paged, page_negative, FLASHPORT_ERROR_BAD_TABLE,
     "block_table[0][1] is -1", 0},
    {"seqlens_kv past seq_kv", paged, seqlen_past_seq_kv, FLASHPORT_ERROR_BAD_TABLE,
     "seqlens_kv[1] is 5", 0},
    {"seqlens_kv negative", paged, seqlen_negative, FLASHPORT_ERROR_BAD_TABLE,
     "seqlens_kv[0] is -2", 0},
    {"FP8 without v_descale", fp8, no_v_descale, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.v_descale is NULL", 0},
    {"sinks not asked for", dense, unused_sinks, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.sinks is set, but the descriptor (forward pass) does not use it", 0},
    {"block_table of a dense cache", dense, unused_block_table, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.block_table is set", 0},
    {"cu_seqlens_kv of a paged cache", paged, unused_cu_kv, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.cu_seqlens_kv is set", 0},
    {"bias not enabled", dense, unused_bias, FLASHPORT_ERROR_INVALID_ARGUMENT, "args.bias is set",
     0},
    {"descale of f32 inputs", dense, unused_descale, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.q_descale is set", 0},
    {"d_q in a forward call", dense, forward_with_dq, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.d_q is set", 0},
    {"ALiBi without slopes", dense, missing_alibi, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.alibi_slopes is NULL", 0},
    {"paged without block_table", paged, missing_table, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.block_table is NULL", 0},
    {"desc.struct_size 0", dense, desc_size_0, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "desc.struct_size is 0", 1},
    {"args.struct_size 0", dense, args_size_0, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "args.struct_size is 0", 0},
    {"causal with window_right 2", dense, causal_right, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "window_right 2 contradicts it", 1},
    {"window_left -2", dense, left_below, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "window_left must be -1 or >= 0 (got -2)", 1},
    {"softcap -1", dense, softcap_negative, FLASHPORT_ERROR_INVALID_ARGUMENT, "softcap", 1},
    {"softcap inf", dense, softcap_inf, FLASHPORT_ERROR_INVALID_ARGUMENT, "softcap", 1},
    {"alibi 7", dense, alibi_unknown, FLASHPORT_ERROR_INVALID_ARGUMENT, "alibi must be", 1},
    {"bias stride -1", dense, bias_stride_negative, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "bias strides must be non-negative", 1},
    {"bias in FP8", dense, bias_fp8, FLASHPORT_ERROR_INVALID_ARGUMENT, "bias.dtype", 1},
    {"bias strides without bias", dense, bias_off_strides, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "bias.enabled is 0", 1},
    {"sinks 2", dense, sinks_2, FLASHPORT_ERROR_INVALID_ARGUMENT, "sinks must be 0 or 1", 1},
    {"packed Q with q.batch", varlen, varlen_q_batch, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "q.batch and o.batch must be 0", 1},
    {"packed K/V with dense Q", varlen, varlen_kv_only, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "FLASHPORT_KV_VARLEN needs q_varlen", 1},
    {"packed Q with dense K/V", varlen, varlen_q_dense_kv, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "q_varlen needs kv_layout", 1},
    {"descale of f32", dense, descale_on_f32, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "descale and descale_block are for FP8 inputs only", 1},
    {"f32 into f16", dense, out_dtype_differs, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "out_dtype (f16) must equal dtype (f32)", 1},
    {"FP8 out_dtype", fp8, fp8_out_fp8, FLASHPORT_ERROR_INVALID_ARGUMENT, "out_dtype must be", 1},
    {"FP8 to f64", fp8, fp8_out_f64, FLASHPORT_ERROR_INVALID_ARGUMENT, "out_dtype must be", 1},
    {"f64 with an f16 bias", dense, f64_bias_f16, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "f32 or f64 for f64 inputs", 1},
    {"f32 with an f64 bias", dense, f32_bias_f64, FLASHPORT_ERROR_INVALID_ARGUMENT, "bias.dtype",
     1},
    {"FP8 without descale", fp8, fp8_no_descale, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "descale must be", 1},
    {"descale_block 0", fp8, block_0, FLASHPORT_ERROR_INVALID_ARGUMENT, "descale_block", 1},
    {"num_pages 0", paged, pages_0, FLASHPORT_ERROR_INVALID_ARGUMENT, "num_pages", 1},
    {"seq_kv past the pages", paged, seq_kv_past_cache, FLASHPORT_ERROR_INVALID_ARGUMENT,
     "seq_kv (5) exceeds max_pages_per_seq * page_size (4)", 1},
    {"block_table size overflows", paged, table_size_overflows, FLASHPORT_ERROR_SIZE_OVERFLOW,
     "args.block_table", 1},
};

static void rejected_on_host(flashport_context *ctx) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rejected *c = &cases[i];
        fixture f;
        c->base(&f);
        fill_sentinels();
        CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
        const int base_wrote = !untouched(o, sizeof o);
        c->base(&f);
        c->bad(&f);
        fill_sentinels();
        const flashport_status st = flashport_attention_run_host(ctx, &f.d, &f.a);
        check_count++;
        if (st != c->status || !message_has(c->needle) || !base_wrote || !untouched(o, sizeof o) ||
            !untouched(lse, sizeof lse) || !untouched(dq, sizeof dq)) {
            check_failures++;
            fprintf(stderr, "%s: %s, '%s' (expected %s and '%s'); outputs %s\n", c->what,
                    flashport_status_string(st), flashport_last_error(),
                    flashport_status_string(c->status), c->needle,
                    untouched(o, sizeof o) && untouched(lse, sizeof lse) ? "untouched" : "written");
        }
        if (c->descriptor)
            CHECK_STATUS(flashport_attention_desc_validate(&f.d), c->status, c->needle);
    }
}

/* Buffers: a bias buffer smaller than its strides reach, and a host-readable block table that
 * points past the cache; O keeps every byte. */
static void rejected_on_buffers(flashport_context *ctx) {
    fixture f;
    paged(&f);
    f.d.bias = (flashport_bias_desc){1, FLASHPORT_F32, NQ * NKV, 0, NKV, 1};
    const size_t bias_bytes = sizeof(float) * B * NQ * NKV;
    flashport_buffer *bq, *bk, *bv, *bo, *bb, *small, *bt, *bl;
    CHECK(flashport_buffer_alloc(ctx, sizeof q, &bq) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof k, &bk) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof v, &bv) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof o, &bo) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bias_bytes, &bb) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bias_bytes - 4, &small) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof f.table, &bt) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, sizeof f.lens, &bl) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bq, 0, q, sizeof q) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bk, 0, k, sizeof k) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bv, 0, v, sizeof v) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bb, 0, bias, bias_bytes) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bt, 0, f.table, sizeof f.table) == FLASHPORT_OK);
    CHECK(flashport_buffer_upload(bl, 0, f.lens, sizeof f.lens) == FLASHPORT_OK);
    fill_sentinels();
    CHECK(flashport_buffer_upload(bo, 0, o, sizeof o) == FLASHPORT_OK);
    flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
    a.q = bq, a.k = bk, a.v = bv, a.o = bo, a.bias = small, a.block_table = bt, a.seqlens_kv = bl;
    CHECK_STATUS(flashport_attention_run(ctx, &f.d, &a), FLASHPORT_ERROR_MISMATCH,
                 "buffer bias holds 92 bytes; the problem reaches 96");
    a.bias = bb;
    const int32_t outside[B * 2] = {2, 0, PAGES + 3, 1};
    CHECK(flashport_buffer_upload(bt, 0, outside, sizeof outside) == FLASHPORT_OK);
    CHECK_STATUS(flashport_attention_run(ctx, &f.d, &a), FLASHPORT_ERROR_BAD_TABLE,
                 "block_table[1][0] is 7");
    CHECK(flashport_synchronize(ctx) == FLASHPORT_OK);
    CHECK(flashport_buffer_download(bo, 0, o, sizeof o) == FLASHPORT_OK);
    CHECK(untouched(o, sizeof o));
    /* The same buffers with a good table run, so the rejections above were for their cause. */
    CHECK(flashport_buffer_upload(bt, 0, f.table, sizeof f.table) == FLASHPORT_OK);
    CHECK(flashport_attention_run(ctx, &f.d, &a) == FLASHPORT_OK);
    CHECK(flashport_synchronize(ctx) == FLASHPORT_OK);
    CHECK(flashport_buffer_download(bo, 0, o, sizeof o) == FLASHPORT_OK);
    CHECK(!untouched(o, sizeof o));
    flashport_buffer *all[] = {bq, bk, bv, bo, bb, small, bt, bl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) flashport_buffer_free(all[i]);
}

/* Sizes whose contiguous strides overflow int64: the init and set_* helpers fill them in
 * without signed overflow (they once multiplied unchecked, which UBSan reported from
 * fuzz_desc) and the validators reject the result. */
static void sizes_past_int64(void) {
    const int64_t big = (int64_t)1 << 40;
    for (int layout = 0; layout < 2; layout++) {
        flashport_attention_desc d;
        flashport_attention_desc_init(&d, FLASHPORT_F32, 1, big, 1, big, 2, big,
                                      (flashport_layout)layout);
        CHECK_STATUS(flashport_attention_desc_validate(&d), FLASHPORT_ERROR_SIZE_OVERFLOW,
                     "overflows");
        flashport_problem p;
        flashport_problem_init(&p, FLASHPORT_F16, 3, 2, 2, big, big, big, (flashport_layout)layout);
        CHECK_STATUS(flashport_problem_validate(&p), FLASHPORT_ERROR_SIZE_OVERFLOW, "overflows");
        flashport_attention_desc_init(&d, FLASHPORT_F32, 1, -big, 1, big, 2, big,
                                      (flashport_layout)layout);
        CHECK_STATUS(flashport_attention_desc_validate(&d), FLASHPORT_ERROR_INVALID_ARGUMENT,
                     "heads_q must be positive");
        flashport_attention_desc_init(&d, FLASHPORT_F32, 2, big, big, 4, 4, big,
                                      (flashport_layout)layout);
        flashport_attention_desc_set_varlen(&d, 8, 4, 8, 4);
        CHECK_STATUS(flashport_attention_desc_validate(&d), FLASHPORT_ERROR_SIZE_OVERFLOW,
                     "overflows");
        flashport_attention_desc_init(&d, FLASHPORT_F32, 2, 4, 4, 4, 0, 64,
                                      (flashport_layout)layout);
        flashport_attention_desc_set_paged(&d, 2, INT64_MAX / 2, 4, (flashport_layout)layout);
        CHECK_STATUS(flashport_attention_desc_validate(&d), FLASHPORT_ERROR_SIZE_OVERFLOW,
                     "overflows");
        /* INT64_MAX sequences packed: their batch + 1 offsets do not fit (once computed with
         * signed overflow, found by fuzz_desc). */
        flashport_attention_desc_init(&d, FLASHPORT_F32, INT64_MAX, 1, 1, 4, 4, 8,
                                      (flashport_layout)layout);
        flashport_attention_desc_set_varlen(&d, 8, 4, 8, 4);
        CHECK_STATUS(flashport_attention_desc_validate(&d), FLASHPORT_ERROR_SIZE_OVERFLOW,
                     "cu_seqlens");
    }
}

/* flashport_attention_desc_flops counts the visible pairs of a window exactly, against a
 * count of every pair on small grids, and at once for huge sizes and windows: it once looped
 * over the rows and overflowed int64 on window_left = INT64_MAX (UBSan, found by fuzz_desc). */
static void window_flops(void) {
    for (int64_t m = 1; m <= 6; m++)
        for (int64_t n = 1; n <= 6; n++)
            for (int64_t left = -1; left <= 7; left++)
                for (int64_t right = -1; right <= 7; right++) {
                    flashport_attention_desc d;
                    flashport_attention_desc_init(&d, FLASHPORT_F32, 1, 1, 1, m, n, 1,
                                                  FLASHPORT_LAYOUT_BHND);
                    d.window_left = left, d.window_right = right;
                    double pairs = 0.0;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++)
                            pairs += (left < 0 || j - i >= n - m - left) &&
                                     (right < 0 || j - i <= n - m + right);
                    if (left < 0 && right == 0 && m == n)
                        pairs = (double)(m * n) / 2.0; /* square causal */
                    CHECK(flashport_attention_desc_flops(&d) == 4.0 * pairs);
                }
    const int64_t n = (int64_t)1 << 40;
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F32, 1, 1, 1, n, n, 1, FLASHPORT_LAYOUT_BHND);
    d.window_left = INT64_MAX, d.window_right = 3;
    const double half = 4.0 * (double)n * (double)n / 2.0;
    CHECK(fabs(flashport_attention_desc_flops(&d) / half - 1.0) < 1e-9);
}

/* Windows as wide as INT64_MAX see every key, as no window does: the reference once summed
 * them into the row index unchecked (UBSan, found by fuzz_desc). */
static void widest_window(flashport_context *ctx) {
    fixture f;
    dense(&f);
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    unsigned char open[sizeof o];
    memcpy(open, o, sizeof o);
    dense(&f);
    f.d.window_left = f.d.window_right = INT64_MAX;
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    CHECK(memcmp(open, o, sizeof o) == 0);
}

/* One FP8 descale block as long as INT64_MAX positions: one factor per (batch, head), as with
 * a block longer than the sequences (its count once overflowed, UBSan, found by fuzz_desc). */
static void longest_descale_block(flashport_context *ctx) {
    fixture f;
    fp8(&f);
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    unsigned char per_tensor[sizeof o];
    memcpy(per_tensor, o, sizeof o);
    fp8(&f);
    f.d.descale = FLASHPORT_DESCALE_BLOCK, f.d.descale_block = INT64_MAX;
    CHECK(flashport_attention_desc_validate(&f.d) == FLASHPORT_OK);
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    CHECK(memcmp(per_tensor, o, sizeof o) == 0);
}

/* A loose bound on the packed sequences (max_seqlen_kv far above any sequence, as a caller
 * that does not know the longest may pass) runs as the tight one does: the reference sized
 * its scratch by the bound (2^31 asked for 16 GiB, found by fuzz_desc; 2^60 here could not
 * be allocated at all). */
static void loose_max_seqlen(flashport_context *ctx) {
    fixture f;
    varlen(&f);
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    unsigned char tight[sizeof o];
    memcpy(tight, o, sizeof o);
    varlen(&f);
    f.d.seq_kv = (int64_t)1 << 60;
    fill_sentinels();
    CHECK(flashport_attention_run_host(ctx, &f.d, &f.a) == FLASHPORT_OK);
    CHECK(memcmp(tight, o, sizeof o) == 0);
}

/* Features a backend lacks are declined by name, by the planner and for a forced kernel. */
static void declines(flashport_context *reference) {
    fixture f;
    int idx;
    if (flashport_backend_find("cpu_simd", &idx) != FLASHPORT_OK) {
        printf("cpu_simd is not part of this build: its declines are not checked\n");
    } else {
        /* cpu_simd takes every forward feature, and the backward pass of all but paged K/V and
         * FP8 inputs. */
        flashport_context *simd;
        CHECK(flashport_context_create("cpu_simd", &simd) == FLASHPORT_OK);
        dense(&f);
        f.d.window_left = 2;
        flashport_plan_info info;
        CHECK(flashport_attention_plan(simd, &f.d, &info) == FLASHPORT_OK);
        f.a.d_o = q, f.a.d_q = dq, f.a.d_k = dk, f.a.d_v = dv;
        CHECK(flashport_attention_backward_host(simd, &f.d, &f.a) == FLASHPORT_OK);
        paged(&f);
        f.a.d_o = q, f.a.d_q = dq, f.a.d_k = dk, f.a.d_v = dv;
        fill_sentinels();
        CHECK_STATUS(flashport_attention_backward_host(simd, &f.d, &f.a),
                     FLASHPORT_ERROR_UNSUPPORTED, "backward pass of paged KV cache");
        flashport_kernel_info kernel;
        CHECK(flashport_kernel_get_info("cpu_simd", 0, &kernel) == FLASHPORT_OK);
        f.d.kernel = kernel.name;
        CHECK_STATUS(flashport_attention_backward_host(simd, &f.d, &f.a),
                     FLASHPORT_ERROR_UNSUPPORTED, "backward pass of paged KV cache");
        CHECK(strstr(flashport_last_error(), kernel.name) != NULL);
        CHECK(untouched(dq, sizeof dq));
        flashport_context_destroy(simd);
    }
    /* The reference takes every forward feature at once, and declines only the backward pass of
     * paged K/V and FP8 inputs. */
    fixture all;
    paged(&all);
    all.d.q_varlen = 1, all.d.total_q = 5, all.d.q = all.d.o = (flashport_strides){0, D, HQ * D};
    all.d.window_left = 1, all.d.window_right = 0, all.d.softcap = 5.0f;
    all.d.alibi = FLASHPORT_ALIBI_PER_BATCH_HEAD, all.d.sinks = 1;
    all.d.bias = (flashport_bias_desc){1, FLASHPORT_BF16, 0, NQ * NKV, NKV, 1};
    all.d.dtype = FLASHPORT_FP8_E5M2, all.d.out_dtype = FLASHPORT_F16;
    all.d.descale = FLASHPORT_DESCALE_BLOCK, all.d.descale_block = 2;
    flashport_plan_info info;
    CHECK(flashport_attention_plan(reference, &all.d, &info) == FLASHPORT_OK);
    CHECK(strcmp(info.kernel, "double_accumulation") == 0);
    dense(&f);
    f.d.kernel = "double_accumulation";
    f.a.d_o = q, f.a.d_q = dq, f.a.d_k = dk, f.a.d_v = dv;
    CHECK(flashport_attention_backward_host(reference, &f.d, &f.a) == FLASHPORT_OK);
    fp8(&f);
    f.d.kernel = "double_accumulation";
    f.a.d_o = o, f.a.d_q = dq, f.a.d_k = dk, f.a.d_v = dv;
    fill_sentinels();
    CHECK_STATUS(flashport_attention_backward_host(reference, &f.d, &f.a),
                 FLASHPORT_ERROR_UNSUPPORTED,
                 "kernel double_accumulation unsupported: the backward "
                 "pass of FP8 inputs is not implemented");
    CHECK(untouched(dq, sizeof dq));
}

int main(void) {
    unsetenv("FLASHPORT_KERNEL");
    for (int i = 0; i < ELEMS; i++) q[i] = k[i] = v[i] = bias[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < ELEMS; i++) factors[i] = 1.0f;
    flashport_context *ctx;
    if (flashport_context_create("reference", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    rejected_on_host(ctx);
    rejected_on_buffers(ctx);
    declines(ctx);
    sizes_past_int64();
    loose_max_seqlen(ctx);
    window_flops();
    widest_window(ctx);
    longest_descale_block(ctx);
    flashport_context_destroy(ctx);
    return check_report("test_attention_validation");
}
