/* Contexts, buffers, planning and the attention calls: everything is validated here before a
 * backend sees it, so that bad input fails with a specific status and touches no output. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp_core.h"

struct flashport_buffer {
    flashport_context *ctx;
    void *handle;
    size_t bytes;
    int wrapped;
};

struct flashport_timer {
    flashport_context *ctx;
    void *device_timer;
    struct timespec host_start;
};

FLASHPORT_API flashport_status flashport_context_create(const char *spec, flashport_context **out) {
    if (!out)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_context_create", "out is NULL");
    flashport_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, "flashport_context_create",
                        "cannot allocate a context");
    flashport_status st = fp_select(spec, ctx);
    if (st) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return FLASHPORT_OK;
}

FLASHPORT_API void flashport_context_destroy(flashport_context *ctx) {
    if (!ctx) return;
    ctx->ops->close(ctx->dev);
    free(ctx);
}

FLASHPORT_API const char *flashport_context_backend(const flashport_context *ctx) {
    return ctx ? ctx->entry->name : NULL;
}

FLASHPORT_API int flashport_context_device(const flashport_context *ctx) {
    return ctx ? ctx->device : -1;
}

FLASHPORT_API flashport_status flashport_context_device_info(const flashport_context *ctx,
                                                             flashport_device_info *out) {
    if (!ctx || !out)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_context_device_info",
                        "NULL argument");
    return flashport_device_get_info(ctx->entry->name, ctx->device, out);
}

FLASHPORT_API const char *flashport_context_selection(const flashport_context *ctx) {
    return ctx ? ctx->selection : "";
}

/* ---- buffers ---- */

static flashport_status new_buffer(flashport_context *ctx, void *handle, size_t bytes, int wrapped,
                                   flashport_buffer **out, const char *where) {
    flashport_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        if (wrapped && ctx->ops->buffer_unwrap) ctx->ops->buffer_unwrap(ctx->dev, handle);
        else if (!wrapped) ctx->ops->buffer_free(ctx->dev, handle);
        return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a buffer record");
    }
    b->ctx = ctx;
    b->handle = handle;
    b->bytes = bytes;
    b->wrapped = wrapped;
    *out = b;
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_buffer_alloc(flashport_context *ctx, size_t bytes,
                                                      flashport_buffer **out) {
    static const char *where = "flashport_buffer_alloc";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (bytes == 0) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "size is 0 bytes");
    void *h = NULL;
    flashport_status st = ctx->ops->buffer_alloc(ctx->dev, bytes, &h);
    if (st) return st;
    return new_buffer(ctx, h, bytes, 0, out, where);
}

FLASHPORT_API flashport_status flashport_buffer_wrap(flashport_context *ctx, void *native,
                                                     size_t bytes, flashport_buffer **out) {
    static const char *where = "flashport_buffer_wrap";
    if (!ctx || !native || !out)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (bytes == 0) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "size is 0 bytes");
    void *h = native;
    if (ctx->ops->buffer_wrap) {
        flashport_status st = ctx->ops->buffer_wrap(ctx->dev, native, bytes, &h);
        if (st) return st;
    }
    return new_buffer(ctx, h, bytes, 1, out, where);
}

FLASHPORT_API void flashport_buffer_free(flashport_buffer *buf) {
    if (!buf) return;
    flashport_context *ctx = buf->ctx;
    if (!buf->wrapped) ctx->ops->buffer_free(ctx->dev, buf->handle);
    else if (ctx->ops->buffer_unwrap) ctx->ops->buffer_unwrap(ctx->dev, buf->handle);
    free(buf);
}

FLASHPORT_API size_t flashport_buffer_size(const flashport_buffer *buf) {
    return buf ? buf->bytes : 0;
}

static flashport_status check_range(const flashport_buffer *buf, size_t offset, const void *ptr,
                                    size_t bytes, const char *where) {
    if (!buf || !ptr) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "range [%zu, %zu + %zu) is outside the %zu-byte buffer", offset, offset,
                        bytes, buf->bytes);
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_buffer_upload(flashport_buffer *buf, size_t offset,
                                                       const void *src, size_t bytes) {
    flashport_status st = check_range(buf, offset, src, bytes, "flashport_buffer_upload");
    if (st || bytes == 0) return st;
    return buf->ctx->ops->buffer_upload(buf->ctx->dev, buf->handle, offset, src, bytes);
}

FLASHPORT_API flashport_status flashport_buffer_download(const flashport_buffer *buf, size_t offset,
                                                         void *dst, size_t bytes) {
    flashport_status st = check_range(buf, offset, dst, bytes, "flashport_buffer_download");
    if (st || bytes == 0) return st;
    return buf->ctx->ops->buffer_download(buf->ctx->dev, buf->handle, offset, dst, bytes);
}

/* ---- planning ---- */

/* Validated copy of *p with the scale resolved and the kernel name looked up (-1: planner). */
static flashport_status prepare(flashport_context *ctx, const flashport_problem *p,
                                flashport_problem *out, int *forced, const char *where) {
    if (!ctx) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "context is NULL");
    flashport_status st = fp_problem_check(p, where);
    if (st) return st;
    *out = *p;
    if (out->scale == 0.0f) out->scale = (float)(1.0 / sqrt((double)p->head_dim));
    const char *kernel = p->kernel;
    const char *origin = "problem.kernel";
    if (!kernel || !kernel[0]) {
        kernel = getenv("FLASHPORT_KERNEL");
        origin = "FLASHPORT_KERNEL";
    }
    *forced = -1;
    out->kernel = NULL;
    if (kernel && kernel[0]) {
        const fp_backend *b = ctx->entry->backend;
        *forced = fp_variant_index(b, kernel);
        if (*forced < 0) {
            char known[1024] = "";
            for (int i = 0; i < b->n_variants; i++) {
                size_t used = strlen(known);
                snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                         b->variants[i].name);
            }
            return fp_error(FLASHPORT_ERROR_UNKNOWN_KERNEL, where,
                            "%s: unknown kernel '%s' from %s (known: %s)", b->name, kernel, origin,
                            known);
        }
        out->kernel = b->variants[*forced].name;
    }
    return FLASHPORT_OK;
}

static flashport_status make_plan(flashport_context *ctx, const flashport_problem *p, int forced,
                                  fp_plan *plan, const char *where) {
    memset(plan, 0, sizeof *plan);
    plan->variant = -1;
    flashport_status st = ctx->ops->plan(ctx->dev, p, forced, plan);
    const char *name = ctx->entry->name;
    if (st == FLASHPORT_ERROR_UNSUPPORTED)
        return fp_error(st, where, "%s: %s%s unsupported: %s", name,
                        forced >= 0 ? "kernel " : "", forced >= 0 ? p->kernel : "problem",
                        plan->reason[0] ? plan->reason : "no variant accepts it");
    if (st) return st;
    if (plan->variant < 0 || plan->variant >= ctx->entry->backend->n_variants)
        return fp_error(FLASHPORT_ERROR_INTERNAL, where, "%s planner returned variant %d", name,
                        plan->variant);
    fp_log(FP_LOG_INFO, name, "B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld %s%s: kernel %s (%s)",
           (long long)p->batch, (long long)p->heads_q, (long long)p->heads_kv,
           (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim,
           flashport_dtype_name(p->dtype), p->causal ? " causal" : "",
           ctx->entry->backend->variants[plan->variant].name, plan->reason);
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_plan(flashport_context *ctx, const flashport_problem *p,
                                              flashport_plan_info *out) {
    static const char *where = "flashport_plan";
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    flashport_problem q;
    int forced = -1;
    flashport_status st = prepare(ctx, p, &q, &forced, where);
    if (st) return st;
    fp_plan plan;
    st = make_plan(ctx, &q, forced, &plan, where);
    memset(out, 0, sizeof *out);
    if (st == FLASHPORT_OK)
        snprintf(out->kernel, sizeof out->kernel, "%s",
                 ctx->entry->backend->variants[plan.variant].name);
    snprintf(out->reason, sizeof out->reason, "%s", plan.reason);
    out->workspace_bytes = plan.workspace_bytes;
    return st;
}

/* ---- attention ---- */

static int ranges_overlap(const flashport_context *ctx, const flashport_buffer *a,
                          const flashport_buffer *b) {
    if (!a || !b) return 0;
    if (a == b || a->handle == b->handle) return 1;
    if (ctx->ops->buffer_wrap) return 0; /* opaque handles (cl_mem) do not share storage */
    const char *pa = a->handle, *pb = b->handle;
    return pa < pb + b->bytes && pb < pa + a->bytes;
}

static flashport_status check_buffers(flashport_context *ctx, const flashport_problem *p,
                                      const flashport_buffer *const bufs[5], const char *where) {
    static const char names[5] = {'q', 'k', 'v', 'o', 'l'};
    const size_t esize = flashport_dtype_size(p->dtype);
    for (int i = 0; i < 5; i++) {
        if (!bufs[i]) {
            if (i == 4) continue;
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "buffer %c is NULL", names[i]);
        }
        if (bufs[i]->ctx != ctx)
            return fp_error(FLASHPORT_ERROR_MISMATCH, where,
                            "buffer %c belongs to another context", names[i]);
        uint64_t need = i == 4 ? (uint64_t)(p->batch * p->heads_q * p->seq_q) * sizeof(float)
                               : (uint64_t)flashport_problem_extent(p, names[i]) * esize;
        if (bufs[i]->bytes < need)
            return fp_error(FLASHPORT_ERROR_MISMATCH, where,
                            "buffer %c holds %zu bytes; the problem's strides reach %llu",
                            names[i] == 'l' ? 'L' : names[i], bufs[i]->bytes,
                            (unsigned long long)need);
    }
    for (int out = 3; out < 5; out++)
        for (int other = 0; other < 5; other++)
            if (other != out && bufs[out] && ranges_overlap(ctx, bufs[out], bufs[other]))
                return fp_error(FLASHPORT_ERROR_MISMATCH, where,
                                "output %s shares storage with %s",
                                out == 3 ? "o" : "lse",
                                other == 4 ? "lse" : (const char[]){names[other], 0});
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_attention(flashport_context *ctx, const flashport_problem *p,
                                                   const flashport_buffer *q, const flashport_buffer *k,
                                                   const flashport_buffer *v, flashport_buffer *o,
                                                   flashport_buffer *lse) {
    static const char *where = "flashport_attention";
    flashport_problem pr;
    int forced = -1;
    flashport_status st = prepare(ctx, p, &pr, &forced, where);
    if (st) return st;
    const flashport_buffer *bufs[5] = {q, k, v, o, lse};
    st = check_buffers(ctx, &pr, bufs, where);
    if (st) return st;
    fp_plan plan;
    st = make_plan(ctx, &pr, forced, &plan, where);
    if (st) return st;
    fp_args args = {q->handle, k->handle, v->handle, o->handle, lse ? lse->handle : NULL};
    return ctx->ops->run(ctx->dev, &plan, &pr, &args);
}

FLASHPORT_API flashport_status flashport_synchronize(flashport_context *ctx) {
    if (!ctx)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_synchronize", "context is NULL");
    return ctx->ops->synchronize(ctx->dev);
}

/* Device path of the synchronous call: copies in, runs, copies out only once all succeeded. */
static flashport_status attention_via_device(flashport_context *ctx, const flashport_problem *p,
                                             const void *host[4], void *o, float *lse,
                                             const char *where) {
    static const char names[4] = {'q', 'k', 'v', 'o'};
    const size_t esize = flashport_dtype_size(p->dtype);
    size_t bytes[5];
    flashport_buffer *bufs[5] = {0};
    flashport_status st = FLASHPORT_OK;
    for (int i = 0; i < 5 && st == FLASHPORT_OK; i++) {
        if (i == 4 && !lse) break;
        bytes[i] = i < 4 ? (size_t)flashport_problem_extent(p, names[i]) * esize
                         : (size_t)(p->batch * p->heads_q * p->seq_q) * sizeof(float);
        st = flashport_buffer_alloc(ctx, bytes[i], &bufs[i]);
        /* O's strides may leave gaps the kernel never writes: carry the caller's bytes there
         * so that the copy back changes only the elements of O. */
        if (st == FLASHPORT_OK && i < 4) st = flashport_buffer_upload(bufs[i], 0, host[i], bytes[i]);
    }
    if (st == FLASHPORT_OK) st = flashport_attention(ctx, p, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]);
    if (st == FLASHPORT_OK) st = flashport_synchronize(ctx);
    if (st == FLASHPORT_OK) {
        /* Download into scratch first so a failed copy leaves the caller's outputs untouched. */
        void *tmp_o = malloc(bytes[3]);
        float *tmp_l = lse ? malloc(bytes[4]) : NULL;
        if (!tmp_o || (lse && !tmp_l)) {
            st = fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate %zu host bytes",
                          bytes[3] + (lse ? bytes[4] : 0));
        } else {
            st = flashport_buffer_download(bufs[3], 0, tmp_o, bytes[3]);
            if (st == FLASHPORT_OK && lse) st = flashport_buffer_download(bufs[4], 0, tmp_l, bytes[4]);
            if (st == FLASHPORT_OK) {
                memcpy(o, tmp_o, bytes[3]);
                if (lse) memcpy(lse, tmp_l, bytes[4]);
            }
        }
        free(tmp_o);
        free(tmp_l);
    }
    for (int i = 0; i < 5; i++) flashport_buffer_free(bufs[i]);
    return st;
}

FLASHPORT_API flashport_status flashport_attention_host(flashport_context *ctx,
                                                        const flashport_problem *p, const void *q,
                                                        const void *k, const void *v, void *o,
                                                        float *lse) {
    static const char *where = "flashport_attention_host";
    flashport_problem pr;
    int forced = -1;
    flashport_status st = prepare(ctx, p, &pr, &forced, where);
    if (st) return st;
    if (!q || !k || !v || !o)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "q, k, v and o must not be NULL");
    const void *host[4] = {q, k, v, o};
    if (!ctx->entry->backend->host_memory) return attention_via_device(ctx, &pr, host, o, lse, where);

    /* Host-memory backends read and write the caller's arrays in place. */
    const size_t esize = flashport_dtype_size(pr.dtype);
    flashport_buffer wrapped[5];
    const flashport_buffer *bufs[5] = {0};
    static const char names[4] = {'q', 'k', 'v', 'o'};
    for (int i = 0; i < 5; i++) {
        if (i == 4 && !lse) break;
        wrapped[i].ctx = ctx;
        wrapped[i].handle = i < 4 ? (void *)host[i] : (void *)lse;
        wrapped[i].bytes = i < 4 ? (size_t)flashport_problem_extent(&pr, names[i]) * esize
                                 : (size_t)(pr.batch * pr.heads_q * pr.seq_q) * sizeof(float);
        wrapped[i].wrapped = 1;
        bufs[i] = &wrapped[i];
    }
    st = check_buffers(ctx, &pr, bufs, where);
    if (st) return st;
    fp_plan plan;
    st = make_plan(ctx, &pr, forced, &plan, where);
    if (st) return st;
    fp_args args = {q, k, v, o, lse};
    st = ctx->ops->run(ctx->dev, &plan, &pr, &args);
    if (st) return st;
    return ctx->ops->synchronize(ctx->dev);
}

/* ---- measurement ---- */

FLASHPORT_API flashport_status flashport_timer_start(flashport_context *ctx, flashport_timer **out) {
    static const char *where = "flashport_timer_start";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    flashport_timer *t = calloc(1, sizeof *t);
    if (!t) return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a timer");
    t->ctx = ctx;
    flashport_status st;
    if (ctx->ops->timer_start) {
        st = ctx->ops->timer_start(ctx->dev, &t->device_timer);
    } else {
        st = ctx->ops->synchronize(ctx->dev);
        clock_gettime(CLOCK_MONOTONIC, &t->host_start);
    }
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_timer_stop(flashport_timer *t, double *ms) {
    if (!t || !ms)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_timer_stop", "NULL argument");
    flashport_context *ctx = t->ctx;
    flashport_status st;
    if (ctx->ops->timer_start) {
        st = ctx->ops->timer_stop(ctx->dev, t->device_timer, ms);
    } else {
        st = ctx->ops->synchronize(ctx->dev);
        struct timespec end;
        clock_gettime(CLOCK_MONOTONIC, &end);
        if (st == FLASHPORT_OK)
            *ms = (double)(end.tv_sec - t->host_start.tv_sec) * 1e3 +
                  (double)(end.tv_nsec - t->host_start.tv_nsec) * 1e-6;
    }
    free(t);
    return st;
}

FLASHPORT_API flashport_status flashport_measure_peaks(flashport_context *ctx, flashport_peaks *out) {
    static const char *where = "flashport_measure_peaks";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (!ctx->ops->measure_peaks)
        return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where, "%s has no peak micro-benchmarks",
                        ctx->entry->name);
    flashport_peaks tmp;
    memset(&tmp, 0, sizeof tmp);
    flashport_status st = ctx->ops->measure_peaks(ctx->dev, &tmp);
    if (st == FLASHPORT_OK) *out = tmp;
    return st;
}
