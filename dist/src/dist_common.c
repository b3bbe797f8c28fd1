/* Descriptor checks, the agreement between ranks, and the calling thread's error. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under C11 */
#include "dist_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[FP_DIST_MESSAGE_MAX + 200];

const char *flashport_dist_last_error(void) { return last_error; }

flashport_status fp_dist_fail(flashport_status status, const char *where, const char *fmt, ...) {
    char msg[FP_DIST_MESSAGE_MAX + 100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(last_error, sizeof last_error, "%s: %s", where, msg);
    return status;
}

void flashport_dist_desc_init(flashport_dist_desc *d, flashport_dtype dtype, int64_t batch,
                              int64_t heads_q, int64_t heads_kv, int64_t seq_local,
                              int64_t seq_total, int64_t head_dim, flashport_layout layout) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    d->dtype = dtype;
    d->layout = layout;
    d->batch = batch;
    d->heads_q = heads_q;
    d->heads_kv = heads_kv;
    d->head_dim = head_dim;
    d->seq_local = seq_local;
    d->seq_total = seq_total;
    d->window_left = d->window_right = -1;
    d->sharding = FLASHPORT_DIST_CONTIGUOUS;
}

void fp_dist_record_init(fp_dist_record *r, const flashport_dist_desc *d) {
    memset(r, 0, sizeof *r);
    if (!d || d->struct_size != sizeof *d) return;
    r->shaped = 1;
    r->dtype = d->dtype;
    r->layout = d->layout;
    r->causal = d->causal;
    r->sharding = d->sharding;
    r->sinks = d->sinks != NULL;
    r->window_left = d->window_left;
    r->window_right = d->window_right;
    r->softcap = d->softcap;
    r->batch = d->batch;
    r->heads_q = d->heads_q;
    r->heads_kv = d->heads_kv;
    r->head_dim = d->head_dim;
    r->seq_local = d->seq_local;
    r->seq_total = d->seq_total;
}

void fp_dist_record_fail(fp_dist_record *r, flashport_status status, const char *fmt, ...) {
    if (r->status != FLASHPORT_OK) return;
    r->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

void fp_dist_check_buffers(fp_dist_record *r, int n, const void *const *ptrs,
                           const char *const *names) {
    for (int i = 0; i < n; i++)
        if (!ptrs[i]) {
            fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "%s is NULL", names[i]);
            return;
        }
}

void fp_dist_step_desc(flashport_attention_desc *out, const flashport_dist_desc *d,
                       const fp_dist_rect *s) {
    /* The strides are the whole shard's, so that a step's rows are a view into it. */
    flashport_attention_desc full;
    flashport_attention_desc_init(&full, d->dtype, d->batch, d->heads_q, d->heads_kv, d->seq_local,
                                  d->seq_local, d->head_dim, d->layout);
    flashport_attention_desc_init(out, d->dtype, d->batch, d->heads_q, d->heads_kv, s->q_len,
                                  s->kv_len, d->head_dim, d->layout);
    out->q = full.q;
    out->k = full.k;
    out->v = full.v;
    out->o = full.o;
    out->scale = d->scale;
    out->window_left = s->window_left;
    out->window_right = s->window_right;
    out->softcap = d->softcap;
    out->kernel = d->kernel;
}

/* The mask and the score modifiers: what the ring takes, and what it declines by name. */
static void check_mask(fp_dist_record *r, const flashport_dist_desc *d) {
    if (d->causal != 0 && d->causal != 1)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "causal is %d, not 0 or 1",
                            d->causal);
    if (d->window_left < -1 || d->window_right < -1)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "window_left %lld and window_right %lld must be -1 or >= 0",
                            (long long)d->window_left, (long long)d->window_right);
    if (d->causal && d->window_right > 0)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "causal is window_right = 0; window_right %lld contradicts it",
                            (long long)d->window_right);
    if (!(d->softcap >= 0.0f) || !isfinite(d->softcap))
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "softcap must be 0 (off) or a finite positive value");
    const char *declined = d->alibi != FLASHPORT_ALIBI_NONE      ? "ALiBi (alibi)"
                           : d->bias                             ? "an additive bias (bias)"
                           : d->q_varlen                         ? "varlen Q (q_varlen)"
                           : d->kv_layout == FLASHPORT_KV_VARLEN ? "varlen K/V (kv_layout)"
                           : d->kv_layout == FLASHPORT_KV_PAGED  ? "paged K/V (kv_layout)"
                                                                 : NULL;
    if (d->kv_layout != FLASHPORT_KV_DENSE && d->kv_layout != FLASHPORT_KV_VARLEN &&
        d->kv_layout != FLASHPORT_KV_PAGED)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "kv_layout %d is not a layout",
                            (int)d->kv_layout);
    else if (declined)
        fp_dist_record_fail(r, FLASHPORT_ERROR_UNSUPPORTED,
                            "%s is not taken by the ring (windows, softcap and sinks are)",
                            declined);
}

static void check_shape(fp_dist_record *r, const flashport_dist_desc *d, int ranks) {
    if (d->struct_size != sizeof *d) {
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "struct_size is %zu, expected %zu (use flashport_dist_desc_init)",
                            d->struct_size, sizeof *d);
        return;
    }
    if (d->dtype != FLASHPORT_F32 && d->dtype != FLASHPORT_F16 && d->dtype != FLASHPORT_BF16)
        fp_dist_record_fail(r, FLASHPORT_ERROR_UNSUPPORTED, "dtype %s: f32, f16 or bf16 only",
                            flashport_dtype_name(d->dtype));
    if (d->layout != FLASHPORT_LAYOUT_BHND && d->layout != FLASHPORT_LAYOUT_BNHD)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "layout %d is not a layout",
                            (int)d->layout);
    if (d->sharding != FLASHPORT_DIST_CONTIGUOUS && d->sharding != FLASHPORT_DIST_ZIGZAG)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "sharding %d is not a sharding",
                            (int)d->sharding);
    check_mask(r, d);
    if (d->batch < 1 || d->heads_q < 1 || d->heads_kv < 1 || d->head_dim < 1 || d->seq_local < 1)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "batch %lld, heads_q %lld, heads_kv %lld, head_dim %lld and seq_local "
                            "%lld must be positive",
                            (long long)d->batch, (long long)d->heads_q, (long long)d->heads_kv,
                            (long long)d->head_dim, (long long)d->seq_local);
    else if (d->heads_q % d->heads_kv)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "heads_q %lld is not a multiple of heads_kv %lld",
                            (long long)d->heads_q, (long long)d->heads_kv);
    if (d->seq_local >= 1 && d->seq_total != d->seq_local * ranks)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "seq_total %lld is not %d ranks x seq_local %lld (the ranks must "
                            "divide the sequence evenly)",
                            (long long)d->seq_total, ranks, (long long)d->seq_local);
    if (d->sharding == FLASHPORT_DIST_ZIGZAG && d->seq_local % 2)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "zig-zag sharding needs an even seq_local (two chunks), got %lld",
                            (long long)d->seq_local);
}

/* Every distinct rectangle shape this rank meets, planned on ctx. */
static void check_plans(fp_dist_record *r, const flashport_dist_desc *d, flashport_context *ctx,
                        int rank, int ranks, int backward) {
    enum { SEEN = 16 }; /* a shape beyond these is planned again: correct, only slower */
    fp_dist_rect seen[SEEN];
    int n_seen = 0;
    for (int src = 0; src < ranks && r->status == FLASHPORT_OK; src++) {
        fp_dist_step s = fp_dist_step_plan(d, rank, ranks, src);
        for (int k = 0; k < s.count && r->status == FLASHPORT_OK; k++) {
            const fp_dist_rect *x = &s.rect[k];
            int known = 0;
            for (int i = 0; i < n_seen && !known; i++)
                known = seen[i].q_len == x->q_len && seen[i].kv_len == x->kv_len &&
                        seen[i].window_left == x->window_left &&
                        seen[i].window_right == x->window_right;
            if (known) continue;
            if (n_seen < SEEN) seen[n_seen++] = *x;
            flashport_attention_desc ad;
            fp_dist_step_desc(&ad, d, x);
            flashport_plan_info info;
            flashport_status st = backward ? flashport_attention_backward_plan(ctx, &ad, &info)
                                           : flashport_attention_plan(ctx, &ad, &info);
            if (st != FLASHPORT_OK)
                fp_dist_record_fail(r, st,
                                    "the %s backend cannot run a ring step (%lld x %lld rows, "
                                    "window %lld, %lld): %s",
                                    flashport_context_backend(ctx), (long long)x->q_len,
                                    (long long)x->kv_len, (long long)x->window_left,
                                    (long long)x->window_right, flashport_last_error());
        }
    }
}

void fp_dist_check(fp_dist_record *r, const flashport_dist_desc *d, flashport_context *ctx,
                   int rank, int ranks, int backward) {
    if (!d) {
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "the descriptor is NULL");
        return;
    }
    if (!ctx) fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT, "the context is NULL");
    check_shape(r, d, ranks);
    if (r->status == FLASHPORT_OK) check_plans(r, d, ctx, rank, ranks, backward);
}

static flashport_status settle_shapes(const fp_dist_record *all, int ranks, const char *where) {
    const fp_dist_record *a = NULL;
    int ai = 0;
    for (int i = 0; i < ranks; i++) {
        const fp_dist_record *b = &all[i];
        if (!b->shaped) continue;
        if (!a) {
            a = b;
            ai = i;
            continue;
        }
        const char *field = a->dtype != b->dtype                 ? "dtype"
                            : a->layout != b->layout             ? "layout"
                            : a->causal != b->causal             ? "causal"
                            : a->sharding != b->sharding         ? "sharding"
                            : a->window_left != b->window_left   ? "window_left"
                            : a->window_right != b->window_right ? "window_right"
                            : a->softcap != b->softcap           ? "softcap"
                            : a->sinks != b->sinks               ? "sinks"
                                                                 : NULL;
        if (field)
            return fp_dist_fail(FLASHPORT_ERROR_MISMATCH, where,
                                "rank %d's %s differs from rank %d's", i, field, ai);
        const int64_t av[6] = {a->batch,    a->heads_q,   a->heads_kv,
                               a->head_dim, a->seq_local, a->seq_total};
        const int64_t bv[6] = {b->batch,    b->heads_q,   b->heads_kv,
                               b->head_dim, b->seq_local, b->seq_total};
        static const char *names[6] = {"batch",    "heads_q",   "heads_kv",
                                       "head_dim", "seq_local", "seq_total"};
        for (int f = 0; f < 6; f++)
            if (av[f] != bv[f])
                return fp_dist_fail(FLASHPORT_ERROR_MISMATCH, where,
                                    "rank %d holds %s %lld, rank %d %lld (every rank must pass "
                                    "the same shape)",
                                    i, names[f], (long long)bv[f], ai, (long long)av[f]);
    }
    return FLASHPORT_OK;
}

flashport_status fp_dist_settle(const fp_dist_record *all, int ranks, int rank, const char *where) {
    flashport_status st = settle_shapes(all, ranks, where);
    if (st != FLASHPORT_OK) return st;
    for (int i = 0; i < ranks; i++)
        if (all[i].status != FLASHPORT_OK)
            return fp_dist_fail((flashport_status)all[i].status, where, "rank %d%s: %s", i,
                                i == rank ? " (this rank)" : "", all[i].message);
    return FLASHPORT_OK;
}

int64_t fp_dist_row_offset(const flashport_dist_desc *d, int64_t heads, int64_t b, int64_t h,
                           int64_t i) {
    int64_t n = d->seq_local, dim = d->head_dim;
    if (d->layout == FLASHPORT_LAYOUT_BHND) return ((b * heads + h) * n + i) * dim;
    return ((b * n + i) * heads + h) * dim;
}

double fp_dist_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int flashport_dist_has_nccl(void) {
#ifdef FP_DIST_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}
