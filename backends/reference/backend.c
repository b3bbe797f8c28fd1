/*
 * The reference backend: portable C on the host, double accumulation. It is the in-process
 * oracle every other backend is checked against and the backend of last resort. Buffers are
 * host memory; calls run synchronously.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp_backend.h"
#include "fp_host_memory.h"
#include "kernels/attention_backward.h"
#include "kernels/attention_double.h"
#include "planner.h"

static const fp_host *host;
static const char NAME[] = "reference";

static const fp_variant variants[] = {
    {"double_accumulation",
     "straightforward two-pass softmax per query row, double precision, every feature; the "
     "backward pass of all but paged K/V and FP8 inputs",
     FP_PRECISION_NATIVE, FP_FEATURES_ALL},
};

static int probe(char *reason, size_t len) {
    (void)reason;
    (void)len;
    return 1;
}

static flashport_status device_info(int device, flashport_device_info *out) {
    (void)device;
    snprintf(out->name, sizeof out->name, "host CPU (double-precision reference)");
    snprintf(out->vendor, sizeof out->vendor, "portable C");
    out->kind = FLASHPORT_DEVICE_CPU;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    out->compute_units = 1;
    snprintf(out->details, sizeof out->details, "threads=1; accumulation=double");
    return FLASHPORT_OK;
}

static void dev_close(void *dev) { (void)dev; }

static flashport_status plan(void *dev, const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    (void)dev;
    return fp_reference_plan(p, op, forced, out);
}

static flashport_status run(void *dev, const fp_plan *pl, const fp_problem *p,
                            const fp_args *args) {
    (void)dev;
    if (pl->op == FP_OP_BACKWARD) {
        const flashport_status st = fp_reference_attention_backward(p, args);
        if (st)
            return host->error(st, NAME,
                               "backward: cannot allocate %lld doubles of dK/dV accumulators",
                               (long long)((2 * p->seq_kv + 5) * p->head_dim));
        return FLASHPORT_OK;
    }
    const flashport_status st = fp_reference_attention(p, args);
    if (st)
        return host->error(st, NAME, "attention: cannot allocate %lld doubles of row scratch",
                           (long long)(p->seq_kv + 2 * p->head_dim));
    return FLASHPORT_OK;
}

static flashport_status synchronize(void *dev) {
    (void)dev;
    return FLASHPORT_OK;
}

static const fp_device_ops ops = {
    .close = dev_close,
    .buffer_alloc = fp_host_buffer_alloc,
    .buffer_free = fp_host_buffer_free,
    .buffer_upload = fp_host_buffer_upload,
    .buffer_download = fp_host_buffer_download,
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
    .name = NAME,
    .kind = FLASHPORT_DEVICE_CPU,
    .host_memory = 1,
    .variants = variants,
    .n_variants = 1,
    .probe = probe,
    .device_info = device_info,
    .open = open_device,
};

const fp_backend *fp_reference_entry(const fp_host *h) {
    host = h;
    return &backend;
}
