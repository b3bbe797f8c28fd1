/*
 * Problem validation on arbitrary descriptors: every API v2 field (sizes, strides, masks,
 * softcap, ALiBi, bias, sinks, varlen, paged KV, FP8 and descales, struct_size) and the v1
 * problem, through flashport_attention_desc_validate, flashport_problem_validate and
 * flashport_attention_desc_flops; then flashport_attention_run_host on the reference backend
 * with every buffer sized exactly as flashport.h documents it and the tables read from the
 * input (consistent, raw, or consistent with one entry broken), and sometimes a buffer added
 * or left out. Properties: nothing crashes or reads out of bounds; run_host fails exactly when
 * validation does (same status) or on a bad table or buffer, with a message; a failed call
 * leaves O and LSE as they were.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_problem.h"

/* Buffers larger than this, or problems with more multiply-adds, are validated but not run. */
enum { MAX_BUFFER_BYTES = 1 << 20 };
static const double MAX_WORK = 2e5;

static flashport_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (flashport_context_create("reference", &ctx) != FLASHPORT_OK) abort();
    return 0;
}

static flashport_strides fz_strides(fz_bytes *b, flashport_strides s) {
    switch (fz_u8(b) % 4) {
    case 0: return s; /* as the layout gives them */
    case 1: return (flashport_strides){fz_int(b), fz_int(b), fz_int(b)};
    case 2: { /* padded rows: the layout's strides scaled (any size: saturated) */
        const int64_t k = fz_u8(b) % 4 + 1;
        int64_t r[3];
        const int64_t in[3] = {s.batch, s.head, s.seq};
        for (int i = 0; i < 3; i++)
            if (__builtin_mul_overflow(in[i], k, &r[i])) r[i] = INT64_MAX;
        return (flashport_strides){r[0], r[1], r[2]};
    }
    default: return (flashport_strides){s.head, s.batch, s.seq}; /* two swapped */
    }
}

static void fz_desc(fz_bytes *b, flashport_attention_desc *d) {
    const flashport_dtype dtype = (flashport_dtype)(fz_u8(b) % 7); /* 6: unknown */
    const int64_t batch = fz_int(b), hq = fz_int(b), hkv = fz_int(b), sq = fz_int(b),
                  skv = fz_int(b), hd = fz_int(b);
    const flashport_layout layout = (flashport_layout)(fz_u8(b) & 1);
    flashport_attention_desc_init(d, dtype, batch, hq, hkv, sq, skv, hd, layout);
    const uint8_t kv = fz_u8(b) % 4;
    if (kv == 1 || kv == 2) {
        const int64_t total_q = fz_int(b), max_q = fz_int(b), total_kv = kv == 1 ? fz_int(b) : 0,
                      max_kv = fz_int(b);
        flashport_attention_desc_set_varlen(d, total_q, max_q, total_kv, max_kv);
    }
    if (kv >= 2) {
        const int64_t pages = fz_int(b), page_size = fz_int(b), per_seq = fz_int(b);
        flashport_attention_desc_set_paged(d, pages, page_size, per_seq, layout);
    }
    d->q = fz_strides(b, d->q);
    d->k = fz_strides(b, d->k);
    d->v = fz_strides(b, d->v);
    d->o = fz_strides(b, d->o);
    const uint8_t f = fz_u8(b), g = fz_u8(b);
    if (f & 1) d->scale = fz_float_field(b);
    if (f & 2) d->causal = fz_u8(b) % 3;
    if (f & 4) d->window_left = fz_int(b), d->window_right = fz_int(b);
    if (f & 8) d->softcap = fz_float_field(b);
    if (f & 16) d->alibi = (flashport_alibi)(fz_u8(b) % 4);
    if (f & 32) {
        d->bias.enabled = fz_u8(b) % 3;
        d->bias.dtype = (flashport_dtype)(fz_u8(b) % 7);
        d->bias.batch = fz_int(b), d->bias.head = fz_int(b);
        d->bias.query = fz_int(b), d->bias.key = fz_int(b);
    }
    if (f & 64) d->sinks = fz_u8(b) % 3;
    if (f & 128) d->out_dtype = (flashport_dtype)(fz_u8(b) % 7);
    if (g & 1) d->descale = (flashport_descale)(fz_u8(b) % 4), d->descale_block = fz_int(b);
    if (g & 2) d->deterministic = fz_u8(b) % 3;
    if (g & 4) d->q_varlen = fz_u8(b) % 3, d->total_q = fz_int(b);
    if (g & 8) d->kv_layout = (flashport_kv_layout)(fz_u8(b) % 4), d->total_kv = fz_int(b);
    if (g & 16) {
        d->num_pages = fz_int(b), d->page_size = fz_int(b);
        d->max_pages_per_seq = fz_int(b);
    }
    if (g & 32) {
        static const char *const kernels[] = {NULL, "", "double_accumulation", "no_such_kernel"};
        d->kernel = kernels[fz_u8(b) % 4];
    }
}

/* The v1 problem of the same sizes and strides, through its own validator. */
static void check_v1(const flashport_attention_desc *d) {
    flashport_problem p;
    flashport_problem_init(&p, d->dtype, d->batch, d->heads_q, d->heads_kv, d->seq_q, d->seq_kv,
                           d->head_dim, FLASHPORT_LAYOUT_BHND);
    p.q = d->q, p.k = d->k, p.v = d->v, p.o = d->o;
    p.scale = d->scale;
    p.causal = d->causal;
    const flashport_status st = flashport_problem_validate(&p);
    if (st != FLASHPORT_OK && !flashport_last_error()[0]) abort();
    for (const char *t = "qkvo"; *t; t++)
        if (flashport_problem_extent(&p, *t) < 0) abort();
    (void)flashport_problem_flops(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_bytes b = {data, data + size};
    /* Room for a newer caller's fields, which must be zero unless the call is to fail. */
    struct {
        flashport_attention_desc d;
        unsigned char newer[16];
    } s;
    memset(&s, 0, sizeof s);
    fz_desc(&b, &s.d);
    const uint8_t shape = fz_u8(&b);
    /* The library reads struct_size bytes: at most the struct that is really there. */
    if (shape & 1) {
        const size_t hi = fz_u8(&b);
        s.d.struct_size = (hi << 8 | fz_u8(&b)) % (sizeof s + 1);
    }
    if (shape & 2) s.newer[fz_u8(&b) % sizeof s.newer] = fz_u8(&b);
    check_v1(&s.d);

    const flashport_status valid = flashport_attention_desc_validate(&s.d);
    if (valid != FLASHPORT_OK && !flashport_last_error()[0]) abort();
    (void)flashport_attention_desc_flops(&s.d);

    /* Every buffer at its documented size, or a small one where that size is unknown
     * (invalid descriptors must fail before touching any buffer). */
    int64_t bytes[FZ_SLOTS];
    double work = (double)s.d.batch * (double)s.d.heads_q * (double)s.d.head_dim *
                  (double)(s.d.q_varlen ? s.d.total_q : s.d.seq_q) *
                  (double)(s.d.kv_layout == FLASHPORT_KV_VARLEN ? s.d.total_kv : s.d.seq_kv);
    int run = valid == FLASHPORT_OK || !(shape & 4);
    for (int i = 0; i < FZ_SLOTS; i++) {
        bytes[i] = valid == FLASHPORT_OK ? fz_slot_bytes(&s.d, i) : (i < FZ_LSE ? 64 : 0);
        if (bytes[i] < 0 || bytes[i] > MAX_BUFFER_BYTES) run = 0;
    }
    if (valid == FLASHPORT_OK && !(work >= 0.0 && work <= MAX_WORK)) run = 0;
    if (!run) return 0;

    void *buf[FZ_SLOTS] = {0};
    for (int i = 0; i < FZ_SLOTS; i++) {
        if (!bytes[i] && i != FZ_LSE) continue;
        buf[i] = malloc(bytes[i] ? (size_t)bytes[i] : 1);
        if (!buf[i]) abort();
        for (int64_t j = 0; j < bytes[i]; j++) ((uint8_t *)buf[i])[j] = fz_u8(&b);
    }
    if (valid == FLASHPORT_OK)
        fz_fill_tables(&b, &s.d, fz_u8(&b) % 3, buf[FZ_CU_Q], buf[FZ_CU_KV], buf[FZ_SEQLENS_KV],
                       buf[FZ_BLOCK_TABLE]);
    /* The LSE is optional: asked for or not. */
    if (fz_u8(&b) & 1) {
        free(buf[FZ_LSE]);
        buf[FZ_LSE] = NULL;
        bytes[FZ_LSE] = 0;
    }
    /* A buffer the descriptor does not use, or one missing that it needs. */
    static uint8_t stray[64];
    const uint8_t presence = fz_u8(&b);
    int toggled = -1;
    /* Not the LSE: it is optional, and the stray array is too small to be one. */
    if (presence & 1 && (presence >> 1) % FZ_SLOTS != FZ_LSE) toggled = (presence >> 1) % FZ_SLOTS;

    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    const void **slots[FZ_SLOTS] = {&a.q,
                                    &a.k,
                                    &a.v,
                                    (const void **)&a.o,
                                    (const void **)&a.lse,
                                    &a.sinks,
                                    &a.alibi_slopes,
                                    &a.bias,
                                    &a.cu_seqlens_q,
                                    &a.cu_seqlens_kv,
                                    &a.seqlens_kv,
                                    &a.block_table,
                                    &a.q_descale,
                                    &a.k_descale,
                                    &a.v_descale};
    for (int i = 0; i < FZ_SLOTS; i++) *slots[i] = buf[i];
    if (toggled >= 0) *slots[toggled] = *slots[toggled] ? NULL : stray;

    void *before_o = NULL, *before_lse = NULL;
    if (a.o && bytes[FZ_O])
        before_o = malloc((size_t)bytes[FZ_O]), memcpy(before_o, a.o, (size_t)bytes[FZ_O]);
    if (a.lse && bytes[FZ_LSE])
        before_lse = malloc((size_t)bytes[FZ_LSE]),
        memcpy(before_lse, a.lse, (size_t)bytes[FZ_LSE]);

    const flashport_status st = flashport_attention_run_host(ctx, &s.d, &a);
    if (st != FLASHPORT_OK && !flashport_last_error()[0]) abort();
    /* The descriptor's verdict is the call's; a valid one can still fail on its tables, its
     * buffers or a kernel name (the reference implements every feature). */
    if (valid != FLASHPORT_OK && st != valid) abort();
    if (valid == FLASHPORT_OK && st != FLASHPORT_OK && st != FLASHPORT_ERROR_BAD_TABLE &&
        st != FLASHPORT_ERROR_INVALID_ARGUMENT && st != FLASHPORT_ERROR_UNKNOWN_KERNEL)
        abort();
    if (st != FLASHPORT_OK) {
        if (before_o && memcmp(before_o, a.o, (size_t)bytes[FZ_O])) abort();
        if (before_lse && memcmp(before_lse, a.lse, (size_t)bytes[FZ_LSE])) abort();
    }
    free(before_o);
    free(before_lse);
    for (int i = 0; i < FZ_SLOTS; i++) free(buf[i]);
    return 0;
}
