/*
 * flashport: exact attention, O = softmax(scale * Q K^T [+ causal mask]) V, computed with the
 * online-softmax (FlashAttention) algorithm on several kinds of hardware behind one C API.
 *
 * Conventions (the same in every call):
 *   - every function that can fail returns a flashport_status; FLASHPORT_OK is 0;
 *   - on failure, flashport_last_error() returns a message for the calling thread that names the
 *     backend, the call that failed and the cause; outputs are left untouched;
 *   - the library never aborts or exits the process.
 *
 * Threads:
 *   - every function may be called from any thread; errors are per thread (above);
 *   - calls that take no context (backend and device queries, descriptor helpers, status and
 *     version strings) and calls on different contexts may run at the same time, and run in
 *     parallel;
 *   - calls on one context (attention runs and plans, buffer calls, synchronize, timers, peaks)
 *     may also come from several threads at once: a context is one queue, and takes them one
 *     at a time, in the order they reach it. They are safe, but do not overlap: for parallel
 *     work, give each thread a context of its own;
 *   - what the caller shares stays the caller's to order: no call may write an array or buffer
 *     that another call reads or writes at the same time, a context or buffer must not be
 *     destroyed or freed while another thread still uses it, and a timer measures everything
 *     queued on its context between start and stop, whichever thread queued it.
 */
#ifndef FLASHPORT_H
#define FLASHPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHPORT_VERSION_MAJOR 0
#define FLASHPORT_VERSION_MINOR 2
#define FLASHPORT_VERSION_PATCH 0
/* Encodes major.minor.patch as one integer that compares in version order. */
#define FLASHPORT_VERSION_ENCODE(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define FLASHPORT_VERSION                                                                          \
    FLASHPORT_VERSION_ENCODE(FLASHPORT_VERSION_MAJOR, FLASHPORT_VERSION_MINOR,                     \
                             FLASHPORT_VERSION_PATCH)

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
    FLASHPORT_ERROR_INVALID_ARGUMENT = 1, /* null pointer, non-positive size, bad stride, ... */
    FLASHPORT_ERROR_SIZE_OVERFLOW = 2,    /* a byte or element count does not fit in 64 bits */
    FLASHPORT_ERROR_UNSUPPORTED = 3,      /* valid problem that the backend or variant cannot run */
    FLASHPORT_ERROR_UNKNOWN_BACKEND = 4,  /* backend name not known to this build */
    FLASHPORT_ERROR_UNKNOWN_KERNEL = 5,   /* kernel variant name not known to the backend */
    /* backend known but cannot run here (no driver, ...) */
    FLASHPORT_ERROR_BACKEND_UNAVAILABLE = 6,
    FLASHPORT_ERROR_NO_DEVICE = 7,     /* device index or name does not match a device */
    FLASHPORT_ERROR_OUT_OF_MEMORY = 8, /* host or device allocation failed */
    FLASHPORT_ERROR_DEVICE = 9,        /* the driver or runtime reported an error */
    FLASHPORT_ERROR_MISMATCH = 10,     /* buffers of another context, too small, or aliased */
    FLASHPORT_ERROR_INTERNAL = 11,     /* a bug in flashport: please report it */
    /* cu_seqlens, seqlens_kv or block_table content out of range (checked where the table is
     * host-readable, or on the device with FLASHPORT_CHECK=1) */
    FLASHPORT_ERROR_BAD_TABLE = 12
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
    FLASHPORT_F16 = 1,      /* IEEE binary16 */
    FLASHPORT_BF16 = 2,     /* bfloat16 */
    FLASHPORT_FP8_E4M3 = 3, /* OCP FP8 E4M3 ("fn": no infinities, NaN = S.1111.111, max 448);
                             * Q, K and V of a flashport_attention_desc only, with descales */
    FLASHPORT_FP8_E5M2 = 4, /* OCP FP8 E5M2 (IEEE-like: infinities and NaNs, max 57344); same */
    FLASHPORT_F64 = 5       /* IEEE binary64, for a flashport_attention_desc (O, dO and the
                             * gradients f64 too, a bias f32 or f64): an oracle through the API,
                             * e.g. for gradient checks in double. The reference backend computes
                             * it; the others decline it as the feature "float64 inputs" */
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
FLASHPORT_API void flashport_problem_init(flashport_problem *p, flashport_dtype dtype,
                                          int64_t batch, int64_t heads_q, int64_t heads_kv,
                                          int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                          flashport_layout layout);

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
    int available; /* 1 when at least one device can be opened */
    int device_count;
    int is_module;      /* loaded from a shared module rather than linked into the core */
    char reason[512];   /* why unavailable ("" when available) */
    char location[512]; /* module file, or "built-in" */
} flashport_backend_info;

typedef struct flashport_device_info {
    char name[256];
    char vendor[128];
    flashport_device_kind kind;
    uint64_t memory_bytes;
    int compute_units;  /* SMs, CUs, or physical cores */
    char details[1024]; /* backend-specific properties, "key=value" separated by "; " */
} flashport_device_info;

/* Numerical class of a kernel variant: what its results are compared against. */
typedef enum flashport_precision {
    FLASHPORT_PRECISION_NATIVE = 0, /* products in the problem's dtype, f32 (or better) sums */
    FLASHPORT_PRECISION_TF32 = 1,   /* f32 inputs multiplied as tf32 */
    FLASHPORT_PRECISION_F16 = 2,    /* f32 inputs rounded to f16 before the products */
    FLASHPORT_PRECISION_FP8 = 3     /* FP8 inputs, P rounded to e4m3 before P V */
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
/* A context on the caller's own queue, so that a framework's work and flashport's run in order
 * with no synchronisation: a cudaStream_t (backend "cuda"), a hipStream_t ("hip") or a
 * cl_command_queue ("opencl"). spec names one backend and optionally its device
 * ("cuda:1"); the queue must belong to that device (CUDA/HIP: the stream's device; OpenCL: the
 * device is the queue's, and a device in spec must match it). The caller keeps the queue alive
 * until flashport_context_destroy, which does not destroy it. For CUDA and HIP, a NULL queue is
 * the legacy default stream (stream 0, PyTorch's default) of the named device, or of the
 * calling thread's current device; OpenCL has no default queue. Backends without queues (CPU)
 * return FLASHPORT_ERROR_UNSUPPORTED. */
FLASHPORT_API flashport_status flashport_context_create_on_queue(const char *spec, void *queue,
                                                                 flashport_context **out);
/* How this context was selected: every entry tried and why it was or was not taken. */
FLASHPORT_API const char *flashport_context_selection(const flashport_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Buffers: memory of a context's device
 * ------------------------------------------------------------------------------------------- */
typedef struct flashport_buffer flashport_buffer;

FLASHPORT_API flashport_status flashport_buffer_alloc(flashport_context *ctx, size_t bytes,
                                                      flashport_buffer **out);
/* Wraps memory the caller owns and keeps alive, with no copy: a CUDA or HIP device pointer, an
 * OpenCL cl_mem (OpenCL 1.2 has no shared virtual memory: wrap the cl_mem), or a host pointer
 * for CPU backends (reference, cpu_simd). flashport_buffer_free releases the wrapper only. */
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
FLASHPORT_API flashport_status flashport_attention(flashport_context *ctx,
                                                   const flashport_problem *p,
                                                   const flashport_buffer *q,
                                                   const flashport_buffer *k,
                                                   const flashport_buffer *v, flashport_buffer *o,
                                                   flashport_buffer *lse);
FLASHPORT_API flashport_status flashport_synchronize(flashport_context *ctx);

/* Synchronous convenience: host pointers in and out (copies through device buffers as needed). */
FLASHPORT_API flashport_status flashport_attention_host(flashport_context *ctx,
                                                        const flashport_problem *p, const void *q,
                                                        const void *k, const void *v, void *o,
                                                        float *lse);

/* ---------------------------------------------------------------------------------------------
 * Attention, API v2: one descriptor says what is computed, one arguments struct carries every
 * buffer. Both start with struct_size, which the caller sets to sizeof of the struct it was
 * compiled with (flashport_attention_desc_init and FLASHPORT_ATTENTION_ARGS_INIT do it), so
 * that a program built against an older header keeps working when fields are added: the
 * library treats fields past the caller's struct_size as zero, and every field added after
 * this version means "off" when zero.
 *
 * What a query row attends to, for query i (0-based within its sequence) of a sequence with
 * Nq queries and Nkv keys, with the bottom-right alignment offset a = Nkv - Nq:
 *
 *   s_ij = scale * q_i . k_j                         (q, k dequantised first for FP8)
 *   s_ij = softcap * tanh(s_ij / softcap)            when softcap > 0
 *   s_ij = s_ij - slope * |i + a - j|                when ALiBi is on
 *   s_ij = s_ij + bias[b, h, i, j]                   when an additive bias is given
 *   key j is visible when  i + a - window_left <= j <= i + a + window_right  (-1: unbounded);
 *   causal is window_right = 0
 *   P_ij = exp(s_ij) / (sum_{visible j'} exp(s_ij') + exp(sink_h))   (sink term only with sinks)
 *   O_i = sum_{visible j} P_ij v_j,   LSE_i = log(sum_{visible j} exp(s_ij) + exp(sink_h))
 *
 * A row that sees no key (or whose every visible score is -inf) gets O = 0 and LSE = -inf, or
 * LSE = sink_h with sinks; the columns of O that a NaN in V at a visible key reaches are NaN
 * there too. A NaN (or +inf) among a row's visible scores, or a NaN sink, makes
 * that row's O and LSE NaN; a NaN in V at a visible key makes that column of O NaN.
 * ------------------------------------------------------------------------------------------- */

/* How K and V are addressed. */
typedef enum flashport_kv_layout {
    /* [batch, heads_kv, seq_kv, head_dim] by the k and v strides, as in flashport_problem. */
    FLASHPORT_KV_DENSE = 0,
    /* Packed tokens [total_kv, heads_kv, head_dim]: sequence b holds tokens
     * cu_seqlens_kv[b] .. cu_seqlens_kv[b+1]-1. Token t, head h starts at element
     * t*k.seq + h*k.head; k.batch (and v.batch) must be 0. Requires q_varlen. */
    FLASHPORT_KV_VARLEN = 1,
    /* A paged cache: num_pages pages of page_size rows. Key j of sequence b is row
     * j % page_size of page block_table[b*max_pages_per_seq + j/page_size], and sequence b has
     * seqlens_kv[b] keys. Element (page, row, head h) starts at page*k.batch + row*k.seq +
     * h*k.head, so both [num_pages, page_size, heads_kv, d] and [num_pages, heads_kv, page_size,
     * d] are expressed by strides (flashport_attention_desc_set_paged fills either). */
    FLASHPORT_KV_PAGED = 2
} flashport_kv_layout;

/* ALiBi slopes: none, f32 [heads_q], or f32 [batch, heads_q]. */
typedef enum flashport_alibi {
    FLASHPORT_ALIBI_NONE = 0,
    FLASHPORT_ALIBI_PER_HEAD = 1,
    FLASHPORT_ALIBI_PER_BATCH_HEAD = 2
} flashport_alibi;

/* FP8 descale factors (f32): the stored value times its descale is the value used. */
typedef enum flashport_descale {
    FLASHPORT_DESCALE_NONE = 0,   /* the only valid value for f32, f16 and bf16 inputs */
    FLASHPORT_DESCALE_TENSOR = 1, /* one factor each for Q, K and V */
    /* Per (batch, head, block of descale_block positions of the sequence): Q's factors are
     * [batch, heads_q, ceil(seq_q / descale_block)], K's and V's [batch, heads_kv,
     * ceil(seq_kv / descale_block)], row-major; the position is the row's index within its own
     * sequence (varlen and paged included). The FlashAttention-3 block quantisation. */
    FLASHPORT_DESCALE_BLOCK = 2
} flashport_descale;

/* Additive bias over (batch, query head, query, key), in elements; a stride of 0 broadcasts
 * that dimension, so [1, 1, Nq, Nkv] and [B, 1, 1, Nkv] padding masks are strides
 * {0, 0, Nkv, 1} and {Nkv, 0, 0, 1}. The query and key indices are those within the sequence.
 * -inf entries mask the key. */
typedef struct flashport_bias_desc {
    int enabled;                     /* 0: no bias (args.bias must be NULL) */
    flashport_dtype dtype;           /* f32, f16 or bf16 */
    int64_t batch, head, query, key; /* element strides, each >= 0 */
} flashport_bias_desc;

typedef struct flashport_attention_desc {
    size_t struct_size; /* sizeof(flashport_attention_desc); 0 is an error (use _init) */

    flashport_dtype dtype;     /* of Q, K and V */
    flashport_dtype out_dtype; /* of O (and of dQ, dK, dV, dO in the backward call): the same as
                                * dtype for f32, f16 and bf16; f32, f16 or bf16 for FP8 inputs */
    int64_t batch;
    int64_t heads_q, heads_kv; /* heads_q a multiple of heads_kv */
    int64_t seq_q;             /* Nq; with q_varlen the longest query sequence (max_seqlen_q) */
    int64_t seq_kv;            /* Nkv; varlen or paged: the longest key sequence (max_seqlen_kv) */
    int64_t head_dim;
    flashport_strides q, k, v, o; /* element strides, head dimension contiguous */
    float scale;                  /* 0: 1/sqrt(head_dim) */

    /* Masks and score modifiers (see the formulas above). */
    int causal;            /* 1: window_right = 0 (window_right must then be -1 or 0) */
    int64_t window_left;   /* -1: unbounded; >= 0 keys before the aligned diagonal */
    int64_t window_right;  /* -1: unbounded; >= 0 keys after it */
    float softcap;         /* 0: off; > 0: s = softcap * tanh(s / softcap) (Gemma 2: 50) */
    flashport_alibi alibi; /* slopes in args.alibi_slopes */
    flashport_bias_desc bias;
    int sinks; /* 1: args.sinks holds f32 [heads_q] logits that join the softmax
                * denominator only (an extra key with a zero value vector) */

    /* Variable-length batches and paged caches. */
    int q_varlen;    /* 1: Q and O packed [total_q, heads_q, d] by cu_seqlens_q; q.batch and
                      * o.batch must be 0; the LSE is [heads_q, total_q] */
    int64_t total_q; /* rows of packed Q (q_varlen only) */
    flashport_kv_layout kv_layout;
    int64_t total_kv; /* rows of packed K and V (FLASHPORT_KV_VARLEN only) */
    int64_t num_pages, page_size, max_pages_per_seq; /* FLASHPORT_KV_PAGED only; page_size >= 1 */

    /* FP8 inputs. */
    flashport_descale descale;
    int64_t descale_block; /* positions per factor with FLASHPORT_DESCALE_BLOCK */

    /* Backward pass only: 1 makes dQ, dK and dV the same bits on every run (no float atomics,
     * no sums whose order depends on the schedule); 0 lets a backend accumulate dQ in whatever
     * order its threads finish. The forward pass ignores it. */
    int deterministic;

    const char *kernel; /* kernel variant to force; NULL: FLASHPORT_KERNEL, then the planner */
} flashport_attention_desc;

/* Fills every field: struct_size, dtype and out_dtype, the sizes, contiguous strides for the
 * layout, scale 0, no mask (window -1, -1), no modifiers, dense K/V, no descale. */
FLASHPORT_API void flashport_attention_desc_init(flashport_attention_desc *d, flashport_dtype dtype,
                                                 int64_t batch, int64_t heads_q, int64_t heads_kv,
                                                 int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                                 flashport_layout layout);
/* Makes Q/O packed [total_q, heads_q, d] (q_varlen = 1, seq_q = max_seqlen_q) and, when
 * total_kv > 0, K/V packed [total_kv, heads_kv, d] (FLASHPORT_KV_VARLEN, seq_kv =
 * max_seqlen_kv). total_kv = 0 leaves K/V as they are (for a paged cache). */
FLASHPORT_API void flashport_attention_desc_set_varlen(flashport_attention_desc *d, int64_t total_q,
                                                       int64_t max_seqlen_q, int64_t total_kv,
                                                       int64_t max_seqlen_kv);
/* Makes K/V a paged cache with contiguous pages: [num_pages, page_size, heads_kv, d] for
 * FLASHPORT_LAYOUT_BNHD, [num_pages, heads_kv, page_size, d] for FLASHPORT_LAYOUT_BHND;
 * seq_kv becomes max_pages_per_seq * page_size unless it is already smaller and positive. */
FLASHPORT_API void flashport_attention_desc_set_paged(flashport_attention_desc *d,
                                                      int64_t num_pages, int64_t page_size,
                                                      int64_t max_pages_per_seq,
                                                      flashport_layout layout);
/* Checks a descriptor without a context (sizes, strides, and every field's range and
 * consistency); the message names the field. */
FLASHPORT_API flashport_status flashport_attention_desc_validate(const flashport_attention_desc *d);
/* FLOPs of the attention as benchmarks count them, 4 * d per visible (query, key) pair of the
 * forward pass, counted exactly for masks (window, causal with Nq != Nkv), except square causal,
 * which counts N^2 / 2 as the FlashAttention papers do; varlen and paged problems count the
 * maxima (the exact count needs the tables). */
FLASHPORT_API double flashport_attention_desc_flops(const flashport_attention_desc *d);

/* Every buffer of a call. Unused members must be NULL: a buffer the descriptor does not ask for
 * is an error, never ignored. Element types: Q, K, V dtype; O, dO, dQ, dK, dV out_dtype; LSE,
 * sinks, ALiBi slopes and descales f32; the tables int32. */
#define FLASHPORT_ATTENTION_BUFFERS(ptr, cptr)                                                     \
    size_t struct_size; /* sizeof the struct (the _INIT macros below set it) */                    \
    cptr q;                                                                                        \
    cptr k;                                                                                        \
    cptr v;                                                                                        \
    ptr o;              /* forward: output; backward: input, the forward's O */                    \
    ptr lse;            /* forward: optional output; backward: input, required */                  \
    cptr sinks;         /* [heads_q] with desc.sinks */                                            \
    cptr alibi_slopes;  /* [heads_q] or [batch, heads_q] by desc.alibi */                          \
    cptr bias;          /* desc.bias.dtype, by desc.bias strides */                                \
    cptr cu_seqlens_q;  /* int32 [batch + 1], non-decreasing, last <= total_q (q_varlen) */        \
    cptr cu_seqlens_kv; /* int32 [batch + 1], last <= total_kv (FLASHPORT_KV_VARLEN) */            \
    cptr seqlens_kv;    /* int32 [batch], each <= seq_kv (FLASHPORT_KV_PAGED) */                   \
    cptr block_table;   /* int32 [batch, max_pages_per_seq]; entries past a sequence unread */     \
    cptr q_descale;     /* f32, by desc.descale (FP8 only) */                                      \
    cptr k_descale;                                                                                \
    cptr v_descale;                                                                                \
    cptr d_o; /* backward: dO, by the o strides */                                                 \
    ptr d_q;  /* backward outputs, by the q, k and v strides (dense or varlen K/V) */              \
    ptr d_k;                                                                                       \
    ptr d_v

/* Buffers of a context, for flashport_attention_run and flashport_attention_backward. */
typedef struct flashport_attention_args {
    FLASHPORT_ATTENTION_BUFFERS(flashport_buffer *, const flashport_buffer *);
} flashport_attention_args;

/* Host arrays, for the synchronous _host calls. */
typedef struct flashport_attention_host_args {
    FLASHPORT_ATTENTION_BUFFERS(void *, const void *);
} flashport_attention_host_args;

/* C initialisers with struct_size set and every buffer NULL (C++: value-initialise, then set
 * struct_size). */
#define FLASHPORT_ATTENTION_ARGS_INIT                                                              \
    { .struct_size = sizeof(flashport_attention_args) }
#define FLASHPORT_ATTENTION_HOST_ARGS_INIT                                                         \
    { .struct_size = sizeof(flashport_attention_host_args) }

/* Which variant would run the descriptor's forward pass on ctx, and why;
 * FLASHPORT_ERROR_UNSUPPORTED with the reason (naming the missing feature) when none can. */
FLASHPORT_API flashport_status flashport_attention_plan(flashport_context *ctx,
                                                        const flashport_attention_desc *d,
                                                        flashport_plan_info *out);
/* Queues the forward pass on ctx's queue (ordered as flashport_attention). Every field and
 * buffer is checked first; tables in host-readable memory are checked too (and device tables
 * with FLASHPORT_CHECK=1); on any error nothing is written. */
FLASHPORT_API flashport_status flashport_attention_run(flashport_context *ctx,
                                                       const flashport_attention_desc *d,
                                                       const flashport_attention_args *args);
/* Synchronous forward pass on host arrays. */
FLASHPORT_API flashport_status
flashport_attention_run_host(flashport_context *ctx, const flashport_attention_desc *d,
                             const flashport_attention_host_args *args);
/* Backward pass: from Q, K, V, O, dO and the forward's LSE, writes dQ, dK and dV, the gradient
 * of sum(dO * O) with respect to Q, K and V:
 *   P_ij = exp(s_ij - LSE_i) over the visible keys (the LSE carries the sink), D_i = dO_i . O_i,
 *   dS_ij = P_ij (dO_i . v_j - D_i), dV_j = sum_i P_ij dO_i, and dQ, dK through
 *   s_ij's dependence on scale * q_i . k_j (times 1 - tanh^2 under a softcap).
 * Buffers: args.q, k, v as in the forward; args.o and args.d_o of out_dtype by the o strides;
 * args.lse (required) the forward's f32 LSE, same layout as its output; args.d_q, d_k, d_v of
 * out_dtype by the q, k and v strides (packed rows of no sequence are not written). With GQA
 * dK and dV sum over the query heads of a group; a row whose LSE is -inf adds nothing and gets
 * dQ = 0. No gradient reaches the bias, ALiBi slopes or sinks. Paged K/V and FP8 inputs are
 * declined (FLASHPORT_ERROR_UNSUPPORTED naming them). desc.deterministic = 1 asks for the same
 * bits on every run (whatever the thread count, on the CPU backends). */
/* Which variant would run the descriptor's backward pass on ctx, and why; as
 * flashport_attention_plan, FLASHPORT_ERROR_UNSUPPORTED naming what no variant implements. */
FLASHPORT_API flashport_status flashport_attention_backward_plan(flashport_context *ctx,
                                                                 const flashport_attention_desc *d,
                                                                 flashport_plan_info *out);
FLASHPORT_API flashport_status flashport_attention_backward(flashport_context *ctx,
                                                            const flashport_attention_desc *d,
                                                            const flashport_attention_args *args);
FLASHPORT_API flashport_status
flashport_attention_backward_host(flashport_context *ctx, const flashport_attention_desc *d,
                                  const flashport_attention_host_args *args);

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
    double f32_fma_tflops; /* whole device (CPU backends: one core, see fma_per_core) */
    double f32_fma_tflops_per_core;
    double f16_mma_tflops; /* tensor/matrix cores, f16 in, f32 accumulate */
    double bf16_mma_tflops;
    double tf32_mma_tflops;
    double copy_gbps; /* device-to-device copy, bytes read + bytes written */
    char method[256]; /* how each figure was measured */
} flashport_peaks;

FLASHPORT_API flashport_status flashport_measure_peaks(flashport_context *ctx,
                                                       flashport_peaks *out);

/* Read-only streaming bandwidth of the context's device memory in GB/s (bytes read per second),
 * measured by the backend's micro-benchmark over more bytes than the device caches. It is the
 * ceiling of a kernel that only reads, as decode does; copy_gbps may differ from it either way
 * (a CPU core's outstanding loads bound a read stream, and a copy's streaming stores do not take
 * them). *gbps is set on success only; method, when not NULL, receives how it was measured (at
 * most method_size bytes, terminated). FLASHPORT_ERROR_UNSUPPORTED where the backend has no
 * such micro-benchmark. */
FLASHPORT_API flashport_status flashport_measure_read_bandwidth(flashport_context *ctx,
                                                                double *gbps, char *method,
                                                                size_t method_size);

#ifdef __cplusplus
}
#endif
#endif /* FLASHPORT_H */
