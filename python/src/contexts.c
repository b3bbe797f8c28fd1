/*
 * Contexts cached per place: a GPU context per (backend, device, stream), made with
 * flashport_context_create_on_queue on the caller's stream; a host context per (backend
 * argument, thread), so that a host call can run without the interpreter lock and without
 * sharing a context between threads. The least recently used context is destroyed when the
 * table is full.
 */
#include <stdio.h>
#include <string.h>

#include "dlpack_abi.h"
#include "fpy.h"
#include "pythread.h"

enum { MAX_CONTEXTS = 32, MAX_SPEC = 256 };

typedef struct {
    flashport_context *ctx; /* NULL: free entry */
    int gpu, device_type, device;
    int64_t stream;
    unsigned long thread;
    int has_spec;
    char spec[MAX_SPEC];
    uint64_t last_use;
} entry;

static entry cache[MAX_CONTEXTS];
static uint64_t clock_ticks;

static int matches(const entry *e, const fpy_place *p, unsigned long thread) {
    if (!e->ctx || e->gpu != p->gpu) return 0;
    if (p->gpu)
        return e->device_type == p->device_type && e->device == p->device && e->stream == p->stream;
    if (e->thread != thread || e->has_spec != (p->spec != NULL)) return 0;
    return !p->spec || strcmp(e->spec, p->spec) == 0;
}

static flashport_context *create(const fpy_place *p) {
    flashport_context *ctx = NULL;
    flashport_status st;
    if (p->gpu) {
        char spec[64];
        snprintf(spec, sizeof spec, "%s:%d", p->device_type == FPY_DL_ROCM ? "hip" : "cuda",
                 p->device);
        st = flashport_context_create_on_queue(spec, (void *)(intptr_t)p->stream, &ctx);
    } else {
        st = flashport_context_create(p->spec, &ctx);
    }
    if (st) {
        fpy_raise_status(st);
        return NULL;
    }
    return ctx;
}

flashport_context *fpy_context_get(const fpy_place *p) {
    const unsigned long thread = p->gpu ? 0 : PyThread_get_thread_ident();
    if (p->spec && strlen(p->spec) >= MAX_SPEC) {
        fpy_raise(FPY_ERR_ARGUMENT, "backend spec of %zu characters; at most %d are taken",
                  strlen(p->spec), MAX_SPEC - 1);
        return NULL;
    }
    entry *oldest = &cache[0];
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        entry *e = &cache[i];
        if (matches(e, p, thread)) {
            e->last_use = ++clock_ticks;
            return e->ctx;
        }
        if (!e->ctx || (oldest->ctx && e->last_use < oldest->last_use)) oldest = e;
    }
    flashport_context *ctx = create(p);
    if (!ctx) return NULL;
    flashport_context_destroy(oldest->ctx);
    *oldest = (entry){.ctx = ctx,
                      .gpu = p->gpu,
                      .device_type = p->device_type,
                      .device = p->device,
                      .stream = p->stream,
                      .thread = thread,
                      .has_spec = p->spec != NULL,
                      .last_use = ++clock_ticks};
    if (p->spec) snprintf(oldest->spec, sizeof oldest->spec, "%s", p->spec);
    return ctx;
}
