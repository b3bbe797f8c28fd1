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

/* The second half of both create calls: the lock, once a backend is open. */
static flashport_status created(flashport_context *ctx, flashport_status st,
                                flashport_context **out, const char *where) {
    if (st == FLASHPORT_OK && pthread_mutex_init(&ctx->lock, NULL) != 0) {
        ctx->ops->close(ctx->dev);
        st = fp_error(FLASHPORT_ERROR_INTERNAL, where, "cannot create the context's lock");
    }
    if (st) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_context_create(const char *spec, flashport_context **out) {
    static const char *where = "flashport_context_create";
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    flashport_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a context");
    return created(ctx, fp_select(spec, ctx), out, where);
}

FLASHPORT_API flashport_status flashport_context_create_on_queue(const char *spec, void *queue,
                                                                 flashport_context **out) {
    static const char *where = "flashport_context_create_on_queue";
    if (!spec || !out)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "spec and out are required");
    flashport_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a context");
    return created(ctx, fp_select_queue(spec, queue, ctx), out, where);
}

FLASHPORT_API void flashport_context_destroy(flashport_context *ctx) {
    if (!ctx) return;
    ctx->ops->close(ctx->dev);
    pthread_mutex_destroy(&ctx->lock);
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

/* Gives a buffer's storage back to the backend (a wrapped one is only forgotten). */
static void release(flashport_context *ctx, void *handle, int wrapped) {
    pthread_mutex_lock(&ctx->lock);
    if (!wrapped)
        ctx->ops->buffer_free(ctx->dev, handle);
    else if (ctx->ops->buffer_unwrap)
        ctx->ops->buffer_unwrap(ctx->dev, handle);
    pthread_mutex_unlock(&ctx->lock);
}

static flashport_status new_buffer(flashport_context *ctx, void *handle, size_t bytes, int wrapped,
                                   flashport_buffer **out, const char *where) {
    flashport_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        release(ctx, handle, wrapped);
        return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a buffer record");
    }
    b->ctx = ctx;
    b->handle = handle;
    b->bytes = bytes;
    b->wrapped = wrapped;
    *out = b;
    return FLASHPORT_OK;
}

/* Test hook (tests/README.md): FLASHPORT_TEST_FAIL_ALLOC_BYTES=N fails every allocation of
 * exactly N bytes as a full device would, so that a test can fail one buffer of a call. */
static int refused_by_test(size_t bytes) {
    const char *hook = getenv("FLASHPORT_TEST_FAIL_ALLOC_BYTES");
    return hook && hook[0] && strtoull(hook, NULL, 10) == bytes;
}

FLASHPORT_API flashport_status flashport_buffer_alloc(flashport_context *ctx, size_t bytes,
                                                      flashport_buffer **out) {
    static const char *where = "flashport_buffer_alloc";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (bytes == 0) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "size is 0 bytes");
    if (refused_by_test(bytes))
        return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where,
                        "%s: %zu bytes refused (FLASHPORT_TEST_FAIL_ALLOC_BYTES)", ctx->entry->name,
                        bytes);
    void *h = NULL;
    pthread_mutex_lock(&ctx->lock);
    flashport_status st = ctx->ops->buffer_alloc(ctx->dev, bytes, &h);
    pthread_mutex_unlock(&ctx->lock);
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
        pthread_mutex_lock(&ctx->lock);
        flashport_status st = ctx->ops->buffer_wrap(ctx->dev, native, bytes, &h);
        pthread_mutex_unlock(&ctx->lock);
        if (st) return st;
    }
    return new_buffer(ctx, h, bytes, 1, out, where);
}

FLASHPORT_API void flashport_buffer_free(flashport_buffer *buf) {
    if (!buf) return;
    release(buf->ctx, buf->handle, buf->wrapped);
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
    flashport_context *ctx = buf->ctx;
    pthread_mutex_lock(&ctx->lock);
    st = ctx->ops->buffer_upload(ctx->dev, buf->handle, offset, src, bytes);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

FLASHPORT_API flashport_status flashport_buffer_download(const flashport_buffer *buf, size_t offset,
                                                         void *dst, size_t bytes) {
    flashport_status st = check_range(buf, offset, dst, bytes, "flashport_buffer_download");
    if (st || bytes == 0) return st;
    flashport_context *ctx = buf->ctx;
    pthread_mutex_lock(&ctx->lock);
    st = ctx->ops->buffer_download(ctx->dev, buf->handle, offset, dst, bytes);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

FLASHPORT_API flashport_status flashport_synchronize(flashport_context *ctx) {
    if (!ctx)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, "flashport_synchronize",
                        "context is NULL");
    pthread_mutex_lock(&ctx->lock);
    flashport_status st = ctx->ops->synchronize(ctx->dev);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

/* ---- measurement ---- */

FLASHPORT_API flashport_status flashport_timer_start(flashport_context *ctx,
                                                     flashport_timer **out) {
    static const char *where = "flashport_timer_start";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    flashport_timer *t = calloc(1, sizeof *t);
    if (!t) return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate a timer");
    t->ctx = ctx;
    flashport_status st;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->ops->timer_start) {
        st = ctx->ops->timer_start(ctx->dev, &t->device_timer);
    } else {
        st = ctx->ops->synchronize(ctx->dev);
        clock_gettime(CLOCK_MONOTONIC, &t->host_start);
    }
    pthread_mutex_unlock(&ctx->lock);
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
    pthread_mutex_lock(&ctx->lock);
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
    pthread_mutex_unlock(&ctx->lock);
    free(t);
    return st;
}

FLASHPORT_API flashport_status flashport_measure_peaks(flashport_context *ctx,
                                                       flashport_peaks *out) {
    static const char *where = "flashport_measure_peaks";
    if (!ctx || !out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (!ctx->ops->measure_peaks)
        return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where, "%s has no peak micro-benchmarks",
                        ctx->entry->name);
    flashport_peaks tmp;
    memset(&tmp, 0, sizeof tmp);
    pthread_mutex_lock(&ctx->lock);
    flashport_status st = ctx->ops->measure_peaks(ctx->dev, &tmp);
    pthread_mutex_unlock(&ctx->lock);
    if (st == FLASHPORT_OK) *out = tmp;
    return st;
}

FLASHPORT_API flashport_status flashport_measure_read_bandwidth(flashport_context *ctx,
                                                                double *gbps, char *method,
                                                                size_t method_size) {
    static const char *where = "flashport_measure_read_bandwidth";
    if (!ctx || !gbps) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    if (method && method_size == 0)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "method_size is 0 with a method buffer");
    if (!ctx->ops->measure_read_bandwidth)
        return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where,
                        "%s has no read-bandwidth micro-benchmark", ctx->entry->name);
    double rate = 0.0;
    char how[256] = "";
    pthread_mutex_lock(&ctx->lock);
    flashport_status st = ctx->ops->measure_read_bandwidth(ctx->dev, &rate, how, sizeof how);
    pthread_mutex_unlock(&ctx->lock);
    if (st != FLASHPORT_OK) return st;
    *gbps = rate;
    if (method) snprintf(method, method_size, "%s", how);
    return FLASHPORT_OK;
}
