/*
 * The flashport extension module (flashport._C): the hot path of flashport.attention in C, so
 * that a call costs a few microseconds over the library call. Arrays arrive through DLPack with
 * no copy; the descriptor and the buffers are built here from the arrays' shapes and strides.
 *
 * Files: errors.c (status -> exception), kinds.c (how each array type is exported and
 * allocated), tensor.c (a DLPack export read as shape, strides, dtype, device), call.c (the
 * descriptor and buffers of one call, shared by every operation), contexts.c (contexts cached
 * per backend, device and stream), module.c (the Python functions).
 */
#ifndef FPY_H
#define FPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "flashport.h"

/* ---- errors.c ---- */

/* The binding's own checks, each raising a subclass of a status class. */
typedef enum {
    FPY_ERR_ARGUMENT, /* InvalidArgumentError */
    FPY_ERR_DTYPE,    /* DtypeError (an UnsupportedError) */
    FPY_ERR_LAYOUT,   /* LayoutError (an InvalidArgumentError) */
    FPY_ERR_STRIDE,   /* StrideError (an InvalidArgumentError) */
    FPY_ERR_DEVICE,   /* DeviceMismatchError (a MismatchError) */
    FPY_ERR_COUNT
} fpy_error;

/* Takes the classes from flashport._errors; returns -1 with an exception set on failure. */
int fpy_errors_init(PyObject *status_classes, PyObject *specific);
/* Raises the class of `st` with flashport_last_error(); returns NULL. */
PyObject *fpy_raise_status(flashport_status st);
/* Raises one of the binding's classes with a formatted message; returns NULL. */
PyObject *fpy_raise(fpy_error kind, const char *fmt, ...);

/* ---- kinds.c ---- */

/* How arrays of one Python type are exported and allocated (flashport._arrays.kind_for). */
typedef struct fpy_kind {
    PyTypeObject *type;
    PyObject *export_fn;  /* callable(array) -> DLPack capsule, or NULL: __dlpack__ */
    int pass_stream;      /* __dlpack__(stream=) for device arrays */
    int versioned;        /* __dlpack__(max_version=(1, 0)) accepted: 1, refused: 0, -1 untried */
    PyObject *empty_like; /* callable(array) -> new array, or NULL */
    PyObject *empty_f32;  /* callable(shape, like) -> new float32 array, or NULL */
    PyObject *current_stream; /* callable(device index) -> stream as int, or NULL */
} fpy_kind;

int fpy_kinds_init(PyObject *kind_for);
/* The kind of obj's type (cached); NULL with an exception set on failure. */
fpy_kind *fpy_kind_of(PyObject *obj);
/* obj.__dlpack_device__() as (DLPack device type, index); -1 with an exception on failure. */
int fpy_dlpack_device(PyObject *obj, const char *name, int *type, int *index);
/* A DLPack capsule of obj: the kind's export function, or __dlpack__ (with stream= when the
 * kind asks for one and stream >= 0). New reference, or NULL with an exception. */
PyObject *fpy_export(fpy_kind *kind, PyObject *obj, const char *name, int64_t stream);

/* ---- tensor.c ---- */

enum { FPY_MAX_DIMS = 4 };
enum { FPY_INT32 = 100, FPY_OTHER_DTYPE = 101 }; /* beside the flashport_dtype values */

/* An array seen through its DLPack export. */
typedef struct fpy_tensor {
    PyObject *capsule; /* keeps the export alive; NULL when the slot is unused */
    char *data;        /* first element (byte_offset applied) */
    int ndim;
    int64_t shape[FPY_MAX_DIMS];
    int64_t strides[FPY_MAX_DIMS]; /* elements */
    int dtype;                     /* flashport_dtype, FPY_INT32 or FPY_OTHER_DTYPE */
    char dtype_name[24];           /* for messages: "float32", "int64", ... */
    int elem_size;
    int device_type; /* FPY_DL_CPU for host memory, FPY_DL_CUDA, FPY_DL_ROCM, or another */
    int device;      /* index of a GPU array; 0 for host memory */
    int read_only;
} fpy_tensor;

/* Exports obj and reads the export; -1 with an exception set on failure. */
int fpy_tensor_get(PyObject *obj, const char *name, int64_t stream, fpy_tensor *t);
void fpy_tensor_release(fpy_tensor *t);
/* Bytes from the first element to one past the last reached by shape and strides. */
size_t fpy_tensor_extent(const fpy_tensor *t);
/* Row-major contiguous (tables, slopes, sinks). */
int fpy_tensor_contiguous(const fpy_tensor *t);
const char *fpy_dtype_name(int dtype);

/* ---- contexts.c ---- */

/* Where a call runs: a host context (from a spec, or NULL for FLASHPORT_BACKEND then auto)
 * or a GPU context on a stream. */
typedef struct fpy_place {
    int gpu; /* 0: host arrays */
    int device_type;
    int device;
    int64_t stream;
    const char *spec; /* host: the backend argument, NULL when not given; GPU: unused */
} fpy_place;

/* A context of a place, held by one call: the cached one, created on first use. */
typedef struct fpy_lease {
    flashport_context *ctx;
    void *entry; /* the cache entry; NULL for a context made for this call alone */
} fpy_lease;

/* -1 with an exception set on failure (then nothing is to be released). */
int fpy_context_acquire(const fpy_place *place, fpy_lease *lease);
/* Called with the interpreter lock held, once the call is done with the context. */
void fpy_context_release(fpy_lease *lease);

/* ---- call.c ---- */

/* The buffers of a call, in the order of flashport_attention_args. */
typedef enum {
    FPY_Q,
    FPY_K,
    FPY_V,
    FPY_O,
    FPY_LSE,
    FPY_SINKS,
    FPY_ALIBI,
    FPY_BIAS,
    FPY_CU_Q,
    FPY_CU_KV,
    FPY_SEQLENS_KV,
    FPY_BLOCK_TABLE,
    FPY_DO, /* the backward pass's: dO in, dQ, dK, dV out */
    FPY_DQ,
    FPY_DK,
    FPY_DV,
    FPY_SLOT_COUNT
} fpy_slot;

/* The options of a call as flashport.attention receives them, in this order after q, k, v. */
typedef enum {
    FPY_OPT_CAUSAL,
    FPY_OPT_SCALE,
    FPY_OPT_WINDOW,
    FPY_OPT_SOFTCAP,
    FPY_OPT_ALIBI,
    FPY_OPT_BIAS,
    FPY_OPT_SINKS,
    FPY_OPT_CU_Q,
    FPY_OPT_CU_KV,
    FPY_OPT_BLOCK_TABLE,
    FPY_OPT_SEQLENS_KV,
    FPY_OPT_MAX_SEQLEN_Q,
    FPY_OPT_MAX_SEQLEN_KV,
    FPY_OPT_LAYOUT,
    FPY_OPT_BACKEND,
    FPY_OPT_KERNEL,
    FPY_OPT_COUNT
} fpy_option;

typedef struct fpy_call {
    flashport_attention_desc desc;
    fpy_tensor t[FPY_SLOT_COUNT];
    fpy_place place;
    fpy_kind *kind;          /* of q: allocates O and the LSE */
    PyObject *q_obj;         /* q itself (borrowed), for the kind's allocators */
    PyObject *k_obj, *v_obj; /* k and v (borrowed), to allocate dK and dV like them */
    int bhnd;
    int64_t lse_shape[3]; /* [B, Hq, Nq], or [Hq, total_q] with packed Q (lse_rank 2) */
    int lse_rank;
} fpy_call;

/* Reads q, k, v and the options (opts[FPY_OPT_COUNT]) into a descriptor and its input arrays,
 * and picks the place the call runs. -1 with an exception set on failure; fpy_call_release
 * must be called in both cases. */
int fpy_call_prepare(fpy_call *c, PyObject *q, PyObject *k, PyObject *v, PyObject *const *opts);
/* Takes an output array for `slot` (given, or NULL to allocate one of q's kind: O like q, the
 * LSE float32 by lse_shape, dQ, dK, dV like q, k, v) and checks it against the descriptor; sets
 * the o strides for O. Returns the array (new reference) or NULL with an exception set. */
PyObject *fpy_call_output(fpy_call *c, fpy_slot slot, PyObject *given);
/* Takes an input of the backward pass (O, the LSE, dO) and checks it as the output it was (dO
 * by O's strides); sets the o strides for O, which must come before dO. -1 with an exception. */
int fpy_call_input(fpy_call *c, fpy_slot slot, PyObject *given);
/* Runs `device_fn` (buffers wrapped on the place's context) or `host_fn` (host arrays) with the
 * slots in use, `repeat` times (1 for a call; more to time the library call alone, the
 * seconds spent in the calls then stored in *seconds, which may be NULL). -1 with an exception
 * set on failure. Forward and backward passes differ only in the pair of functions and the
 * slots filled. */
typedef flashport_status (*fpy_device_fn)(flashport_context *, const flashport_attention_desc *,
                                          const flashport_attention_args *);
typedef flashport_status (*fpy_host_fn)(flashport_context *, const flashport_attention_desc *,
                                        const flashport_attention_host_args *);
int fpy_call_repeat(fpy_call *c, fpy_device_fn device_fn, fpy_host_fn host_fn, int repeat,
                    double *seconds);
void fpy_call_release(fpy_call *c);

#endif
