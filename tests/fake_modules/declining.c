/* A module, named as the hip module would be, whose variants decline problems in the three
 * ways flashport-conformance tells apart: silently declining a feature it claims (the reason
 * names no feature, and the same problem without the feature plans), naming a feature the
 * problem does not use, and declining for a reason that holds with or without features (an
 * honest unsupported); the last two variants compute only the backward pass (they decline every
 * forward, as the GPU backward variants do) and decline backward problems in the first and the
 * last way. It runs nothing. Host memory, like the CPU backends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_backend.h"

static const fp_host *host;

static const fp_variant variants[] = {
    {"silent_window", "declines windows without naming them", FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW},
    {"names_alibi", "declines everything, blaming ALiBi", FP_PRECISION_NATIVE, FP_FEATURE_WINDOW},
    {"too_small", "declines everything for its size", FP_PRECISION_NATIVE, FP_FEATURE_WINDOW},
    {"backward_silent_window", "backward only; declines windows without naming them",
     FP_PRECISION_NATIVE, FP_FEATURE_BACKWARD | FP_FEATURE_WINDOW},
    {"backward_too_small", "backward only; declines everything for its size", FP_PRECISION_NATIVE,
     FP_FEATURE_BACKWARD | FP_FEATURE_WINDOW},
};

static int probe(char *reason, size_t len) {
    (void)reason;
    (void)len;
    return 1;
}

static flashport_status device_info(int device, flashport_device_info *out) {
    (void)device;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "declining test module");
    out->kind = FLASHPORT_DEVICE_CPU;
    return FLASHPORT_OK;
}

static void dev_close(void *dev) { (void)dev; }

static flashport_status buffer_alloc(void *dev, size_t bytes, void **handle) {
    (void)dev;
    *handle = malloc(bytes ? bytes : 1);
    return *handle ? FLASHPORT_OK : FLASHPORT_ERROR_OUT_OF_MEMORY;
}

static void buffer_free(void *dev, void *handle) {
    (void)dev;
    free(handle);
}

static flashport_status buffer_upload(void *dev, void *handle, size_t offset, const void *src,
                                      size_t bytes) {
    (void)dev;
    memcpy((char *)handle + offset, src, bytes);
    return FLASHPORT_OK;
}

static flashport_status buffer_download(void *dev, const void *handle, size_t offset, void *dst,
                                        size_t bytes) {
    (void)dev;
    memcpy(dst, (const char *)handle + offset, bytes);
    return FLASHPORT_OK;
}

static flashport_status plan(void *dev, const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    (void)dev;
    out->variant = forced >= 0 ? forced : 0;
    const int backward_only = out->variant >= 3;
    if (backward_only && op == FP_OP_FORWARD) {
        snprintf(out->reason, sizeof out->reason, "computes only the gradients, no forward output");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    switch (out->variant) {
    case 0:
    case 3:
        if (p->window_left < 0 && p->window_right < 0) return FLASHPORT_OK;
        snprintf(out->reason, sizeof out->reason, "no tile configuration fits");
        break;
    case 1: snprintf(out->reason, sizeof out->reason, "ALiBi slopes unavailable"); break;
    default:
        snprintf(out->reason, sizeof out->reason, "head_dim %lld needs more registers than exist",
                 (long long)p->head_dim);
        break;
    }
    return FLASHPORT_ERROR_UNSUPPORTED;
}

static flashport_status run(void *dev, const fp_plan *pl, const fp_problem *p, const fp_args *a) {
    (void)dev;
    (void)pl;
    (void)p;
    (void)a;
    return host->error(FLASHPORT_ERROR_INTERNAL, "hip", "the declining test module runs nothing");
}

static flashport_status synchronize(void *dev) {
    (void)dev;
    return FLASHPORT_OK;
}

static const fp_device_ops ops = {
    .close = dev_close,
    .buffer_alloc = buffer_alloc,
    .buffer_free = buffer_free,
    .buffer_upload = buffer_upload,
    .buffer_download = buffer_download,
    .plan = plan,
    .run = run,
    .synchronize = synchronize,
};

static flashport_status open_device(int device, const fp_device_ops **o, void **dev) {
    (void)device;
    *o = &ops;
    *dev = NULL;
    return FLASHPORT_OK;
}

static const fp_backend backend = {
    .abi = FP_BACKEND_ABI,
    .name = "hip",
    .kind = FLASHPORT_DEVICE_CPU,
    .host_memory = 1,
    .variants = variants,
    .n_variants = sizeof variants / sizeof variants[0],
    .probe = probe,
    .device_info = device_info,
    .open = open_device,
};

FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *h) {
    host = h;
    return &backend;
}
