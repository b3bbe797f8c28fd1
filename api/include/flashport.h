/*
 * flashport: exact attention, O = softmax(scale * Q K^T [+ causal mask]) V, computed with the
 * online-softmax (FlashAttention) algorithm on several kinds of hardware behind one C API.
 *
 * Conventions (the same in every call):
 *   - every function that can fail returns a flashport_status; FLASHPORT_OK is 0;
 *   - on failure, flashport_last_error() returns a message for the calling thread that names the
 *     backend, the call that failed and the cause; outputs are left untouched;
 *   - the library never aborts or exits the process.
 */
#ifndef FLASHPORT_H
#define FLASHPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHPORT_VERSION_MAJOR 0
#define FLASHPORT_VERSION_MINOR 1
#define FLASHPORT_VERSION_PATCH 0
/* Encodes major.minor.patch as one integer that compares in version order. */
#define FLASHPORT_VERSION_ENCODE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define FLASHPORT_VERSION \
    FLASHPORT_VERSION_ENCODE(FLASHPORT_VERSION_MAJOR, FLASHPORT_VERSION_MINOR, FLASHPORT_VERSION_PATCH)

#if defined(_WIN32)
#define FLASHPORT_API __declspec(dllexport)
#else
#define FLASHPORT_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------------- */
typedef enum flashport_status {
    FLASHPORT_OK = 0,
    FLASHPORT_ERROR_INVALID_ARGUMENT = 1,   /* null pointer, non-positive size, bad stride, ... */
    FLASHPORT_ERROR_SIZE_OVERFLOW = 2,      /* a byte or element count does not fit in 64 bits */
    FLASHPORT_ERROR_UNSUPPORTED = 3,        /* valid problem that the backend or variant cannot run */
    FLASHPORT_ERROR_UNKNOWN_BACKEND = 4,    /* backend name not known to this build */
    FLASHPORT_ERROR_UNKNOWN_KERNEL = 5,     /* kernel variant name not known to the backend */
    FLASHPORT_ERROR_BACKEND_UNAVAILABLE = 6,/* backend known but cannot run here (no driver, ...) */
    FLASHPORT_ERROR_NO_DEVICE = 7,          /* device index or name does not match a device */
    FLASHPORT_ERROR_OUT_OF_MEMORY = 8,      /* host or device allocation failed */
    FLASHPORT_ERROR_DEVICE = 9,             /* the driver or runtime reported an error */
    FLASHPORT_ERROR_MISMATCH = 10,          /* buffers of another context, too small, or aliased */
    FLASHPORT_ERROR_INTERNAL = 11           /* a bug in flashport: please report it */
} flashport_status;

FLASHPORT_API const char *flashport_status_string(flashport_status status);
/* Message of the last failed call on this thread ("" when none). Valid until the next call. */
FLASHPORT_API const char *flashport_last_error(void);
FLASHPORT_API void flashport_clear_error(void);

/* Runtime version: "major.minor.patch", and the encoded number (FLASHPORT_VERSION_ENCODE). */
FLASHPORT_API const char *flashport_version_string(void);
FLASHPORT_API int flashport_version(void);

/* ---------------------------------------------------------------------------------------------
 * Problem description
 * ------------------------------------------------------------------------------------------- */
typedef enum flashport_dtype {
    FLASHPORT_F32 = 0,
    FLASHPORT_F16 = 1, /* IEEE binary16 */
    FLASHPORT_BF16 = 2 /* bfloat16 */
} flashport_dtype;

FLASHPORT_API const char *flashport_dtype_name(flashport_dtype dtype);
FLASHPORT_API size_t flashport_dtype_size(flashport_dtype dtype); /* 0 for an unknown dtype */

typedef enum flashport_layout {
    FLASHPORT_LAYOUT_BHND = 0, /* [batch, heads, seq, head_dim] */
    FLASHPORT_LAYOUT_BNHD = 1  /* [batch, seq, heads, head_dim] */
} flashport_layout;

/* Element strides of one tensor. The head dimension is always contiguous (stride 1). */
typedef struct flashport_strides {
    int64_t batch;
    int64_t head;
    int64_t seq;
} flashport_strides;

typedef struct flashport_problem {
    flashport_dtype dtype; /* of Q, K, V and O; the optional LSE is always float32 */
    int64_t batch;
    int64_t heads_q;  /* query heads */
    int64_t heads_kv; /* key/value heads; heads_q must be a multiple (GQA, MQA when 1) */
    int64_t seq_q;    /* Nq */
    int64_t seq_kv;   /* Nkv */
    int64_t head_dim; /* d */
    flashport_strides q, k, v, o;
    float scale;        /* 0: 1/sqrt(head_dim) */
    int causal;         /* key j is visible to query i when j <= i + (Nkv - Nq) (bottom-right) */
    const char *kernel; /* kernel variant to force; NULL: FLASHPORT_KERNEL, then the planner */
} flashport_problem;

/* Fills every field of *p: contiguous strides for the layout, scale 0, not causal, no kernel. */
FLASHPORT_API void flashport_problem_init(flashport_problem *p, flashport_dtype dtype, int64_t batch,
                                          int64_t heads_q, int64_t heads_kv, int64_t seq_q,
                                          int64_t seq_kv, int64_t head_dim, flashport_layout layout);

/* Checks a problem without a context: sizes, GQA ratio, strides (no overlap). */
FLASHPORT_API flashport_status flashport_problem_validate(const flashport_problem *p);

/* Number of elements a tensor's strides reach (the buffer must hold at least this many),
 * for "q", "k", "v" or "o"; the LSE holds batch*heads_q*seq_q floats. 0 on invalid input. */
FLASHPORT_API int64_t flashport_problem_extent(const flashport_problem *p, char tensor);

/* FLOPs of the attention as benchmarks count them: 4*B*Hq*Nq*Nkv*d, halved when causal. */
FLASHPORT_API double flashport_problem_flops(const flashport_problem *p);

/* ---------------------------------------------------------------------------------------------
 * Backends and devices
 * ------------------------------------------------------------------------------------------- */
typedef enum flashport_device_kind {
    FLASHPORT_DEVICE_CPU = 0,
    FLASHPORT_DEVICE_GPU = 1,
    FLASHPORT_DEVICE_ACCELERATOR = 2
} flashport_device_kind;

typedef struct flashport_backend_info {
    char name[32];
    int available;       /* 1 when at least one device can be opened */
    int device_count;
    int is_module;       /* loaded from a shared module rather than linked into the core */
    char reason[512];    /* why unavailable ("" when available) */
    char location[512];  /* module file, or "built-in" */
} flashport_backend_info;

typedef struct flashport_device_info {
    char name[256];
    char vendor[128];
    flashport_device_kind kind;
    uint64_t memory_bytes;
    int compute_units;   /* SMs, CUs, or physical cores */
    char details[1024];  /* backend-specific properties, "key=value" separated by "; " */
} flashport_device_info;

/* Numerical class of a kernel variant: what its results are compared against. */
typedef enum flashport_precision {
    FLASHPORT_PRECISION_NATIVE = 0, /* products in the problem's dtype, f32 (or better) sums */
    FLASHPORT_PRECISION_TF32 = 1,   /* f32 inputs multiplied as tf32 */
    FLASHPORT_PRECISION_F16 = 2     /* f32 inputs rounded to f16 before the products */
} flashport_precision;

typedef struct flashport_kernel_info {
    char name[64];
    char description[256];
    flashport_precision precision;
} flashport_kernel_info;

/* Backends known to this build, in auto-selection order. Probing happens on first use. */
FLASHPORT_API int flashport_backend_count(void);
FLASHPORT_API flashport_status flashport_backend_get_info(int index, flashport_backend_info *out);
FLASHPORT_API flashport_status flashport_backend_find(const char *name, int *index);
FLASHPORT_API flashport_status flashport_device_get_info(const char *backend, int device,
                                                         flashport_device_info *out);
FLASHPORT_API int flashport_kernel_count(const char *backend); /* -1 for an unknown backend */
FLASHPORT_API flashport_status flashport_kernel_get_info(const char *backend, int index,
                                                         flashport_kernel_info *out);

/* ---------------------------------------------------------------------------------------------
 * Contexts: one backend, one device, one queue or stream
 * ------------------------------------------------------------------------------------------- */
typedef struct flashport_context flashport_context;

/* spec: "name[:device]" entries separated by commas, e.g. "cuda:1,cpu_simd", where device is an
 * index or part of a device name ("opencl:nvidia"); "auto" takes the first available backend.
 * NULL or "": the FLASHPORT_BACKEND environment variable, then "auto". An explicit entry that
 * cannot be met is never replaced silently: when no entry can be met the call fails and the
 * message names every entry and its reason. */
FLASHPORT_API flashport_status flashport_context_create(const char *spec, flashport_context **out);
FLASHPORT_API void flashport_context_destroy(flashport_context *ctx);
FLASHPORT_API const char *flashport_context_backend(const flashport_context *ctx);
FLASHPORT_API int flashport_context_device(const flashport_context *ctx);
FLASHPORT_API flashport_status flashport_context_device_info(const flashport_context *ctx,
                                                             flashport_device_info *out);
/* How this context was selected: every entry tried and why it was or was not taken. */
FLASHPORT_API const char *flashport_context_selection(const flashport_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Buffers: memory of a context's device
 * ------------------------------------------------------------------------------------------- */
typedef struct flashport_buffer flashport_buffer;

FLASHPORT_API flashport_status flashport_buffer_alloc(flashport_context *ctx, size_t bytes,
                                                      flashport_buffer **out);
/* Wraps memory the caller owns and keeps alive: a CUDA or HIP device pointer, an OpenCL cl_mem,
 * or a host pointer for CPU backends. flashport_buffer_free releases the wrapper only. */
FLASHPORT_API flashport_status flashport_buffer_wrap(flashport_context *ctx, void *native,
                                                     size_t bytes, flashport_buffer **out);
FLASHPORT_API void flashport_buffer_free(flashport_buffer *buf);
FLASHPORT_API size_t flashport_buffer_size(const flashport_buffer *buf);
/* Copies are synchronous with respect to the host and ordered after queued work. */
FLASHPORT_API flashport_status flashport_buffer_upload(flashport_buffer *buf, size_t offset,
                                                       const void *src, size_t bytes);
FLASHPORT_API flashport_status flashport_buffer_download(const flashport_buffer *buf, size_t offset,
                                                         void *dst, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Attention
 * ------------------------------------------------------------------------------------------- */
typedef struct flashport_plan_info {
    char kernel[64];        /* variant that runs the problem ("" when unsupported) */
    char reason[512];       /* why it was chosen, or why nothing can run the problem */
    size_t workspace_bytes; /* device scratch the call allocates */
} flashport_plan_info;

/* Which variant would run the problem on ctx, and why; FLASHPORT_ERROR_UNSUPPORTED with the
 * reason in out->reason (and in the last error) when none can. */
FLASHPORT_API flashport_status flashport_plan(flashport_context *ctx, const flashport_problem *p,
                                              flashport_plan_info *out);

/* Queues attention on ctx's queue. lse may be NULL; otherwise it receives float32
 * [batch, heads_q, seq_q] log-sum-exp of the scaled scores (natural log). O and LSE are written
 * once the queue reaches the call; flashport_synchronize waits for it. */
FLASHPORT_API flashport_status flashport_attention(flashport_context *ctx, const flashport_problem *p,
                                                   const flashport_buffer *q, const flashport_buffer *k,
                                                   const flashport_buffer *v, flashport_buffer *o,
                                                   flashport_buffer *lse);
FLASHPORT_API flashport_status flashport_synchronize(flashport_context *ctx);

/* Synchronous convenience: host pointers in and out (copies through device buffers as needed). */
FLASHPORT_API flashport_status flashport_attention_host(flashport_context *ctx,
                                                        const flashport_problem *p, const void *q,
                                                        const void *k, const void *v, void *o,
                                                        float *lse);

/* ---------------------------------------------------------------------------------------------
 * Measurement (used by flashport-bench)
 * ------------------------------------------------------------------------------------------- */
typedef struct flashport_timer flashport_timer;

/* Marks the context's queue. flashport_timer_stop marks it again, waits for the queue, stores
 * the milliseconds between the marks, and frees the timer. Device timers (CUDA/HIP events,
 * OpenCL profiling) are used where the backend has them, else the host's monotonic clock. */
FLASHPORT_API flashport_status flashport_timer_start(flashport_context *ctx, flashport_timer **out);
FLASHPORT_API flashport_status flashport_timer_stop(flashport_timer *timer, double *ms);

/* Ceilings of the context's device, measured by the backend's micro-benchmarks; a figure the
 * backend cannot measure is 0. Rates count one fused multiply-add as 2 FLOPs. */
typedef struct flashport_peaks {
    double f32_fma_tflops;   /* whole device (CPU backends: one core, see fma_per_core) */
    double f32_fma_tflops_per_core;
    double f16_mma_tflops;   /* tensor/matrix cores, f16 in, f32 accumulate */
    double bf16_mma_tflops;
    double tf32_mma_tflops;
    double copy_gbps;        /* device-to-device copy, bytes read + bytes written */
    char method[256];        /* how each figure was measured */
} flashport_peaks;

FLASHPORT_API flashport_status flashport_measure_peaks(flashport_context *ctx, flashport_peaks *out);

#ifdef __cplusplus
}
#endif
#endif /* FLASHPORT_H */
