/*
 * Contexts cached per place: a GPU context per (backend, device, stream), made with
 * flashport_context_create_on_queue on the caller's stream; a host context per (backend
 * argument, thread), so that a host call can run without the interpreter lock and without
 * sharing a context between threads. When the table is full, the least recently used context
 * that no call holds is destroyed; when every one is held (as many threads in host calls as
 * entries), the new context serves its call alone.
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
    int users; /* calls holding it, which may run without the interpreter lock */
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

int fpy_context_acquire(const fpy_place *p, fpy_lease *lease) {
    const unsigned long thread = p->gpu ? 0 : PyThread_get_thread_ident();
    lease->ctx = NULL;
    lease->entry = NULL;
    if (p->spec && strlen(p->spec) >= MAX_SPEC) {
        fpy_raise(FPY_ERR_ARGUMENT, "backend spec of %zu characters; at most %d are taken",
                  strlen(p->spec), MAX_SPEC - 1);
        return -1;
    }
    entry *victim = NULL;
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        entry *e = &cache[i];
        if (matches(e, p, thread)) {
            e->last_use = ++clock_ticks;
            e->users++;
            lease->ctx = e->ctx;
            lease->entry = e;
            return 0;
        }
        if (e->users) continue;
        if (!victim || !e->ctx || (victim->ctx && e->last_use < victim->last_use)) victim = e;
    }
    flashport_context *ctx = create(p);
    if (!ctx) return -1;
    lease->ctx = ctx;
    if (!victim) return 0; /* every entry is held: this context is the call's alone */
    flashport_context_destroy(victim->ctx);
    *victim = (entry){.ctx = ctx,
                      .gpu = p->gpu,
                      .device_type = p->device_type,
                      .device = p->device,
                      .stream = p->stream,
                      .thread = thread,
                      .has_spec = p->spec != NULL,
                      .last_use = ++clock_ticks,
                      .users = 1};
    if (p->spec) snprintf(victim->spec, sizeof victim->spec, "%s", p->spec);
    lease->entry = victim;
    return 0;
}

void fpy_context_release(fpy_lease *lease) {
    entry *e = lease->entry;
    if (e)
        e->users--;
    else
        flashport_context_destroy(lease->ctx);
    lease->ctx = NULL;
}
