/*
 * The interface between the flashport core and its backends.
 *
 * Two levels, each a table of function pointers plus an opaque context pointer:
 *   fp_backend     one per backend: probe, device info, open;
 *   fp_device_ops  one per opened device: buffers, plan, run, synchronize.
 * Members documented as optional may be NULL.
 *
 * The core validates every problem and buffer before a backend sees it, resolves scale 0 to
 * 1/sqrt(d), and checks buffer sizes against the strides; backends may rely on that. Problems
 * reach backends as fp_problem, the API v2 descriptor with its window normalised (causal is
 * window_right = 0 with an unbounded left side, and is then spelled causal = 1, window -1/-1),
 * so that a kernel that knows only causal runs every problem that is only causal.
 *
 * Features: each variant lists the features of API v2 it implements (fp_variant.features). The
 * core computes a problem's features (fp_problem_features) and declines, naming the feature,
 * when the forced variant or every variant of the backend lacks one; a planner therefore sees
 * only problems some variant can run, and must pick a variant that covers all their features
 * (the core checks that too).
 *
 * Threads: the core calls the ops of one opened device one at a time (it holds the context's
 * lock around each), so a device's state needs no lock of its own; ops of different devices,
 * and open, may run at the same time on different threads. The error service records the
 * message for the calling thread.
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

#define FP_BACKEND_ABI          3
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
#define FP_PRECISION_TF32   FLASHPORT_PRECISION_TF32
#define FP_PRECISION_F16    FLASHPORT_PRECISION_F16
#define FP_PRECISION_FP8    FLASHPORT_PRECISION_FP8

/* The problem as backends see it: validated, scale resolved, window normalised. */
typedef flashport_attention_desc fp_problem;

/* What a problem asks for beyond dense forward attention with an optional causal mask, over
 * f32, f16 or bf16, GQA, any strides, Nq != Nkv and an optional LSE (which every variant
 * implements). */
enum fp_feature {
    FP_FEATURE_WINDOW = 1u << 0, /* window_left or window_right other than causal */
    FP_FEATURE_SOFTCAP = 1u << 1,
    FP_FEATURE_ALIBI = 1u << 2,
    FP_FEATURE_BIAS = 1u << 3,
    FP_FEATURE_SINKS = 1u << 4,
    FP_FEATURE_VARLEN = 1u << 5,   /* packed Q (q_varlen) and packed K/V */
    FP_FEATURE_PAGED = 1u << 6,    /* paged K/V, Q dense or packed */
    FP_FEATURE_FP8 = 1u << 7,      /* FP8 Q/K/V with descales */
    FP_FEATURE_BACKWARD = 1u << 8, /* the backward pass (fp_op FP_OP_BACKWARD) */
    FP_FEATURE_F64 = 1u << 9       /* f64 inputs (the reference backend's oracle precision) */
};
#define FP_FEATURES_NONE 0u /* dense forward attention only */
#define FP_FEATURES_ALL  0x3ffu
#define FP_FEATURE_COUNT 10

/* Name of one feature bit, as reasons print it ("sliding window", "paged KV cache"). Inline
 * here so that the conformance runner matches a decline's reason against the very strings the
 * core prints. */
static inline const char *fp_feature_name(unsigned feature) {
    switch (feature) {
    case FP_FEATURE_WINDOW: return "sliding window (window_left/window_right)";
    case FP_FEATURE_SOFTCAP: return "logit softcap";
    case FP_FEATURE_ALIBI: return "ALiBi";
    case FP_FEATURE_BIAS: return "additive bias";
    case FP_FEATURE_SINKS: return "attention sinks";
    case FP_FEATURE_VARLEN: return "variable-length batch (cu_seqlens)";
    case FP_FEATURE_PAGED: return "paged KV cache";
    case FP_FEATURE_FP8: return "FP8 inputs";
    case FP_FEATURE_BACKWARD: return "backward pass";
    case FP_FEATURE_F64: return "float64 inputs";
    }
    return "unknown feature";
}

typedef enum fp_op { FP_OP_FORWARD = 0, FP_OP_BACKWARD = 1 } fp_op;

/* The features problem p asks for in operation op: what the core checks variants against, and
 * what a planner checks before it offers a variant. */
static inline unsigned fp_problem_features(const fp_problem *p, fp_op op) {
    unsigned f = 0;
    if (p->window_left >= 0 || p->window_right >= 0) f |= FP_FEATURE_WINDOW;
    if (p->softcap > 0.0f) f |= FP_FEATURE_SOFTCAP;
    if (p->alibi != FLASHPORT_ALIBI_NONE) f |= FP_FEATURE_ALIBI;
    if (p->bias.enabled) f |= FP_FEATURE_BIAS;
    if (p->sinks) f |= FP_FEATURE_SINKS;
    if (p->q_varlen || p->kv_layout == FLASHPORT_KV_VARLEN) f |= FP_FEATURE_VARLEN;
    if (p->kv_layout == FLASHPORT_KV_PAGED) f |= FP_FEATURE_PAGED;
    if (p->dtype == FLASHPORT_FP8_E4M3 || p->dtype == FLASHPORT_FP8_E5M2) f |= FP_FEATURE_FP8;
    if (op == FP_OP_BACKWARD) f |= FP_FEATURE_BACKWARD;
    if (p->dtype == FLASHPORT_F64) f |= FP_FEATURE_F64;
    return f;
}

/* Bytes per element (0 for an unknown dtype). Backend modules use this, not the core's
 * flashport_dtype_size: a module must resolve every symbol by itself, because a host that
 * loads the core with RTLD_LOCAL (as Python does its extension modules) leaves the core's
 * exports invisible to the modules the core then opens. */
static inline size_t fp_dtype_size(flashport_dtype t) {
    switch (t) {
    case FLASHPORT_F64: return 8;
    case FLASHPORT_F32: return 4;
    case FLASHPORT_F16:
    case FLASHPORT_BF16: return 2;
    case FLASHPORT_FP8_E4M3:
    case FLASHPORT_FP8_E5M2: return 1;
    }
    return 0;
}

typedef struct fp_variant {
    const char *name;        /* stable, lowercase, what it does: "double_buffered" */
    const char *description; /* one line */
    fp_precision precision;
    unsigned features; /* fp_feature bits it implements (0: dense forward only) */
} fp_variant;

/* Bytes a plan holds for the chosen kernel's parameters. */
#define FP_PLAN_KERNEL_PARAMS_BYTES 64

/* Filled by plan(), read by run(). */
typedef struct fp_plan {
    int variant;            /* index into the backend's variants */
    fp_op op;               /* set by the core after plan() */
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

/* Backend handles of the buffers of one call; members the problem does not use are NULL
 * (flashport_attention_args documents each). */
typedef struct fp_args {
    const void *q, *k, *v;
    void *o, *lse;
    const void *sinks, *alibi_slopes, *bias;
    const void *cu_seqlens_q, *cu_seqlens_kv, *seqlens_kv, *block_table;
    const void *q_descale, *k_descale, *v_descale;
    const void *d_o;
    void *d_q, *d_k, *d_v;
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
    flashport_status (*plan)(void *dev, const fp_problem *p, fp_op op, int forced, fp_plan *out);
    flashport_status (*run)(void *dev, const fp_plan *plan, const fp_problem *p,
                            const fp_args *args);
    flashport_status (*synchronize)(void *dev);

    /* Optional: device-side timing of queued work (CUDA/HIP events, OpenCL profiling). start
     * marks the queue; stop marks it again, waits, and returns the milliseconds between the two
     * marks and frees the timer. NULL: the core synchronizes and uses the host's clock. */
    flashport_status (*timer_start)(void *dev, void **timer);
    flashport_status (*timer_stop)(void *dev, void *timer, double *ms);

    /* Optional: the device's own ceilings, measured by micro-benchmarks (see flashport.h). */
    flashport_status (*measure_peaks)(void *dev, flashport_peaks *out);
    /* Optional: read-only streaming bandwidth in GB/s and how it was measured (see
     * flashport_measure_read_bandwidth); method has method_size bytes, never NULL. */
    flashport_status (*measure_read_bandwidth)(void *dev, double *gbps, char *method,
                                               size_t method_size);
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
    /* Optional: opens a device on the caller's queue (cudaStream_t, hipStream_t,
     * cl_command_queue), which close() leaves alone. *device is the index the spec named, or -1;
     * on return it is the queue's device (a named device the queue is not on: MISMATCH). */
    flashport_status (*open_queue)(int *device, void *queue, const fp_device_ops **ops, void **dev);
} fp_backend;

typedef const fp_backend *(*fp_backend_entry_fn)(const fp_host *host);

#ifdef __cplusplus
}
#endif
#endif /* FP_BACKEND_H */
