/* Contexts, buffers and measurement: everything is validated here before a backend sees it, so
 * that bad input fails with a specific status and touches no output (the attention calls are in
 * attention.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp_core.h"

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

FLASHPORT_API flashport_status flashport_context_create_on_queue(const char *spec, void *queue,
                                                                 flashport_context **out) {
    static const char *where = "flashport_context_create_on_queue";
    if (!spec || !out)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "spec and out are required");
    flashport_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a context");
    flashport_status st = fp_select_queue(spec, queue, ctx);
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

FLASHPORT_API flashport_status flashport_synchronize(flashport_context *ctx) {
    if (!ctx)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_synchronize", "context is NULL");
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
