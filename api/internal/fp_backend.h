/*
 * The interface between the flashport core and its backends.
 *
 * Two levels, each a table of function pointers plus an opaque context pointer:
 *   fp_backend     one per backend: probe, device info, open;
 *   fp_device_ops  one per opened device: buffers, plan, run, synchronize.
 * Members documented as optional may be NULL.
 *
 * The core validates every problem and buffer before a backend sees it, resolves scale 0 to
 * 1/sqrt(d), and checks buffer sizes against the strides; backends may rely on that.
 *
 * Backends built as modules export one symbol, FP_BACKEND_ENTRY_SYMBOL, of type
 * fp_backend_entry_fn. The core passes its services (fp_host) and refuses a table whose abi
 * differs from FP_BACKEND_ABI.
 */
#ifndef FP_BACKEND_H
#define FP_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "flashport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP_BACKEND_ABI 1
#define FP_BACKEND_ENTRY_SYMBOL "flashport_backend_entry"

enum fp_log_level { FP_LOG_ERROR = 0, FP_LOG_WARN = 1, FP_LOG_INFO = 2, FP_LOG_DEBUG = 3 };

/* Services of the core, handed to every backend. */
typedef struct fp_host {
    int abi;
    /* Records the thread's last error as "<backend>: <message>" and returns status. */
    flashport_status (*error)(flashport_status status, const char *backend, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* Prints "flashport[<backend>] <message>" on stderr when level <= FLASHPORT_LOG. */
    void (*log)(int level, const char *backend, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
} fp_host;

/* Numerical class of a variant (flashport_precision): what conformance compares it against. */
typedef flashport_precision fp_precision;
#define FP_PRECISION_NATIVE FLASHPORT_PRECISION_NATIVE
#define FP_PRECISION_TF32 FLASHPORT_PRECISION_TF32
#define FP_PRECISION_F16 FLASHPORT_PRECISION_F16

typedef struct fp_variant {
    const char *name;        /* stable, lowercase, what it does: "double_buffered" */
    const char *description; /* one line */
    fp_precision precision;
} fp_variant;

/* Bytes a plan holds for the chosen kernel's parameters. */
#define FP_PLAN_KERNEL_PARAMS_BYTES 64

/* Filled by plan(), read by run(). */
typedef struct fp_plan {
    int variant;            /* index into the backend's variants */
    char reason[256];       /* why this variant was chosen, or why the problem is unsupported */
    size_t workspace_bytes; /* device scratch run() allocates or uses */
    /* Backend-private: the chosen kernel's parameters (tile shape, split count, ...). A backend
     * copies one type of its own in and out (its parameter struct, or a union of its kernels'
     * structs) and checks at compile time that it fits; the core only zeroes the bytes. */
    union {
        unsigned char bytes[FP_PLAN_KERNEL_PARAMS_BYTES];
        max_align_t align;
    } kernel_params;
} fp_plan;

/* Backend handles of the buffers of one call (lse may be NULL). */
typedef struct fp_args {
    const void *q, *k, *v;
    void *o, *lse;
} fp_args;

typedef struct fp_device_ops {
    void (*close)(void *dev);

    flashport_status (*buffer_alloc)(void *dev, size_t bytes, void **handle);
    void (*buffer_free)(void *dev, void *handle);
    flashport_status (*buffer_upload)(void *dev, void *handle, size_t offset, const void *src,
                                      size_t bytes);
    flashport_status (*buffer_download)(void *dev, const void *handle, size_t offset, void *dst,
                                        size_t bytes);
    /* Optional: turns a native handle into a buffer handle (NULL: the native pointer is used
     * as the handle). buffer_unwrap, also optional, releases what wrap took. */
    flashport_status (*buffer_wrap)(void *dev, void *native, size_t bytes, void **handle);
    void (*buffer_unwrap)(void *dev, void *handle);

    /* The one planning function: which variant runs p (forced >= 0: only that variant), or
     * FLASHPORT_ERROR_UNSUPPORTED with the reason in out->reason. run() takes the plan. */
    flashport_status (*plan)(void *dev, const flashport_problem *p, int forced, fp_plan *out);
    flashport_status (*run)(void *dev, const fp_plan *plan, const flashport_problem *p,
                            const fp_args *args);
    flashport_status (*synchronize)(void *dev);

    /* Optional: device-side timing of queued work (CUDA/HIP events, OpenCL profiling). start
     * marks the queue; stop marks it again, waits, and returns the milliseconds between the two
     * marks and frees the timer. NULL: the core synchronizes and uses the host's clock. */
    flashport_status (*timer_start)(void *dev, void **timer);
    flashport_status (*timer_stop)(void *dev, void *timer, double *ms);

    /* Optional: the device's own ceilings, measured by micro-benchmarks (see flashport.h). */
    flashport_status (*measure_peaks)(void *dev, flashport_peaks *out);
} fp_device_ops;

typedef struct fp_backend {
    int abi; /* FP_BACKEND_ABI */
    const char *name;
    flashport_device_kind kind;
    int host_memory; /* 1: buffer handles are host pointers (CPU backends) */
    const fp_variant *variants;
    int n_variants;

    /* Number of devices, or 0 and the reason in reason[reason_len]. Called once. */
    int (*probe)(char *reason, size_t reason_len);
    flashport_status (*device_info)(int device, flashport_device_info *out);
    /* Optional: resolves a device selector that is not a number ("nvidia") to an index. */
    flashport_status (*find_device)(const char *selector, int *device);
    flashport_status (*open)(int device, const fp_device_ops **ops, void **dev);
} fp_backend;

typedef const fp_backend *(*fp_backend_entry_fn)(const fp_host *host);

#ifdef __cplusplus
}
#endif
#endif /* FP_BACKEND_H */
