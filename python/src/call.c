/*
 * One call's descriptor and buffers, built from the arrays: the layout argument names the
 * order of the dimensions ([B, N, H, d] or [B, H, N, d]; packed [total, H, d] or [H, total, d];
 * pages [pages, page_size, H, d] or [pages, H, page_size, d]), and the strides are the arrays'
 * own. Every check the library cannot make on host pointers (shapes that agree, devices, dtypes)
 * is made here, before anything runs or is written. The forward pass fills the slots up to the
 * block table; a backward pass takes O, the LSE and dO as inputs, adds the gradients as further
 * slots and runs through fpy_call_repeat with flashport_attention_backward and _backward_host.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlpack_abi.h"
#include "fpy.h"

static const char *const slot_name[FPY_SLOT_COUNT] = {"q",
                                                      "k",
                                                      "v",
                                                      "out",
                                                      "lse",
                                                      "sinks",
                                                      "alibi_slopes",
                                                      "bias",
                                                      "cu_seqlens_q",
                                                      "cu_seqlens_kv",
                                                      "seqlens_kv",
                                                      "block_table",
                                                      "grad_out",
                                                      "dq",
                                                      "dk",
                                                      "dv"};

#define HOST_OFF(m) offsetof(flashport_attention_host_args, m)
#define DEV_OFF(m)  offsetof(flashport_attention_args, m)
static const size_t host_offset[FPY_SLOT_COUNT] = {HOST_OFF(q),
                                                   HOST_OFF(k),
                                                   HOST_OFF(v),
                                                   HOST_OFF(o),
                                                   HOST_OFF(lse),
                                                   HOST_OFF(sinks),
                                                   HOST_OFF(alibi_slopes),
                                                   HOST_OFF(bias),
                                                   HOST_OFF(cu_seqlens_q),
                                                   HOST_OFF(cu_seqlens_kv),
                                                   HOST_OFF(seqlens_kv),
                                                   HOST_OFF(block_table),
                                                   HOST_OFF(d_o),
                                                   HOST_OFF(d_q),
                                                   HOST_OFF(d_k),
                                                   HOST_OFF(d_v)};
static const size_t device_offset[FPY_SLOT_COUNT] = {DEV_OFF(q),
                                                     DEV_OFF(k),
                                                     DEV_OFF(v),
                                                     DEV_OFF(o),
                                                     DEV_OFF(lse),
                                                     DEV_OFF(sinks),
                                                     DEV_OFF(alibi_slopes),
                                                     DEV_OFF(bias),
                                                     DEV_OFF(cu_seqlens_q),
                                                     DEV_OFF(cu_seqlens_kv),
                                                     DEV_OFF(seqlens_kv),
                                                     DEV_OFF(block_table),
                                                     DEV_OFF(d_o),
                                                     DEV_OFF(d_q),
                                                     DEV_OFF(d_k),
                                                     DEV_OFF(d_v)};

/* ---- options ---- */

static int opt_int64(PyObject *o, const char *name, int64_t none_value, int64_t *out) {
    if (o == Py_None) {
        *out = none_value;
        return 0;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        fpy_raise(FPY_ERR_ARGUMENT, "%s must be an integer or None", name);
        return -1;
    }
    *out = v;
    return 0;
}

static int opt_float(PyObject *o, const char *name, float *out) {
    if (o == Py_None) {
        *out = 0.0f;
        return 0;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        fpy_raise(FPY_ERR_ARGUMENT, "%s must be a number or None", name);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int opt_window(PyObject *o, int64_t *left, int64_t *right) {
    *left = *right = -1;
    if (o == Py_None) return 0;
    PyObject *seq = PySequence_Fast(o, "");
    int ok = seq && PySequence_Fast_GET_SIZE(seq) == 2;
    if (ok) {
        *left = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, 0));
        *right = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, 1));
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(seq);
    if (!ok) {
        PyErr_Clear();
        fpy_raise(FPY_ERR_ARGUMENT, "window must be a pair (left, right) of integers, -1 for an "
                                    "unbounded side, or None");
        return -1;
    }
    return 0;
}

static int opt_string(PyObject *o, const char *name, const char **out) {
    *out = NULL;
    if (o == Py_None) return 0;
    if (PyUnicode_Check(o)) *out = PyUnicode_AsUTF8(o);
    if (!*out) {
        PyErr_Clear();
        fpy_raise(FPY_ERR_ARGUMENT, "%s must be a string or None", name);
        return -1;
    }
    return 0;
}

/* ---- arrays ---- */

static const char *memory_name(const fpy_tensor *t) {
    return t->device_type == FPY_DL_CPU ? "host" : t->device_type == FPY_DL_CUDA ? "CUDA" : "ROCm";
}

static int check_device(const fpy_call *c, const fpy_tensor *t, const char *name) {
    const fpy_tensor *q = &c->t[FPY_Q];
    if (t->device_type == q->device_type && t->device == q->device) return 0;
    char where_t[48] = "", where_q[48] = "";
    if (t->device_type != FPY_DL_CPU) snprintf(where_t, sizeof where_t, " of device %d", t->device);
    if (q->device_type != FPY_DL_CPU) snprintf(where_q, sizeof where_q, " of device %d", q->device);
    fpy_raise(FPY_ERR_DEVICE,
              "%s is in %s memory%s, q in %s memory%s: every array of a call must "
              "be on q's device",
              name, memory_name(t), where_t, memory_name(q), where_q);
    return -1;
}

/* Exports an array of the call into its slot (None leaves the slot empty). */
static int take(fpy_call *c, fpy_slot s, PyObject *obj) {
    if (obj == NULL || obj == Py_None) return 0;
    if (fpy_tensor_get(obj, slot_name[s], c->place.stream, &c->t[s])) return -1;
    return s == FPY_Q ? 0 : check_device(c, &c->t[s], slot_name[s]);
}

static int check_dtype(const fpy_tensor *t, const char *name, int want, const char *what) {
    if (t->dtype == want) return 0;
    fpy_raise(FPY_ERR_DTYPE, "%s is %s; it must be %s", name, t->dtype_name, what);
    return -1;
}

static int check_rank(const fpy_tensor *t, const char *name, int ndim, const char *shape) {
    if (t->ndim == ndim) return 0;
    fpy_raise(FPY_ERR_LAYOUT, "%s has %d dimensions; it must be %s", name, t->ndim, shape);
    return -1;
}

static int check_head_dim(const fpy_tensor *t, const char *name) {
    const int last = t->ndim - 1;
    if (t->strides[last] == 1 || t->shape[last] == 1) return 0;
    fpy_raise(FPY_ERR_STRIDE,
              "%s: the head dimension (the last) has stride %lld; flashport needs it "
              "contiguous (stride 1)",
              name, (long long)t->strides[last]);
    return -1;
}

static int check_contiguous(const fpy_tensor *t, const char *name) {
    if (fpy_tensor_contiguous(t)) return 0;
    fpy_raise(FPY_ERR_STRIDE, "%s must be contiguous (row-major)", name);
    return -1;
}

static int check_length(const fpy_tensor *t, const char *name, int dim, int64_t want,
                        const char *what) {
    if (t->shape[dim] == want) return 0;
    fpy_raise(FPY_ERR_LAYOUT, "%s has %lld entries in dimension %d; %s is %lld", name,
              (long long)t->shape[dim], dim, what, (long long)want);
    return -1;
}

/* Dimensions of a Q/K/V-like array by the layout: 4-d (outer, rows, heads) or packed 3-d. */
typedef struct {
    int outer, head, seq; /* indices into shape; outer -1 for a packed array */
} dims;

static dims dims_of(int bhnd, int packed) {
    if (packed) return bhnd ? (dims){-1, 0, 1} : (dims){-1, 1, 0};
    return bhnd ? (dims){0, 1, 2} : (dims){0, 2, 1};
}

static flashport_strides strides_of(const fpy_tensor *t, dims d) {
    return (flashport_strides){d.outer < 0 ? 0 : t->strides[d.outer], t->strides[d.head],
                               t->strides[d.seq]};
}

/* The longest sequence of a host-readable cu_seqlens table (1 at least, so that a table the
 * library will refuse as a whole still gives a valid size); `bound` for a device table. */
static int64_t longest(const fpy_tensor *cu, int64_t bound) {
    if (cu->device_type != FPY_DL_CPU) return bound;
    const int32_t *v = (const int32_t *)cu->data;
    int64_t m = 1;
    for (int64_t b = 0; b + 1 < cu->shape[0]; b++)
        if ((int64_t)v[b + 1] - v[b] > m) m = (int64_t)v[b + 1] - v[b];
    return m;
}

static int read_tables(fpy_call *c, int64_t batch) {
    static const fpy_slot tables[] = {FPY_CU_Q, FPY_CU_KV, FPY_SEQLENS_KV, FPY_BLOCK_TABLE};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        const fpy_slot s = tables[i];
        fpy_tensor *t = &c->t[s];
        if (!t->capsule) continue;
        const int rank = s == FPY_BLOCK_TABLE ? 2 : 1;
        if (check_dtype(t, slot_name[s], FPY_INT32, "int32") ||
            check_rank(t, slot_name[s], rank, rank == 2 ? "[batch, max_pages]" : "a vector") ||
            check_contiguous(t, slot_name[s]))
            return -1;
        const int64_t want = (s == FPY_CU_Q || s == FPY_CU_KV) ? batch + 1 : batch;
        if (check_length(t, slot_name[s], 0, want,
                         s == FPY_CU_Q || s == FPY_CU_KV ? "batch + 1" : "the batch"))
            return -1;
    }
    return 0;
}

static int read_modifiers(fpy_call *c) {
    flashport_attention_desc *d = &c->desc;
    fpy_tensor *t = &c->t[FPY_ALIBI];
    if (t->capsule) {
        if (check_dtype(t, "alibi_slopes", FLASHPORT_F32, "float32") ||
            check_contiguous(t, "alibi_slopes"))
            return -1;
        if (t->ndim == 1 && t->shape[0] == d->heads_q)
            d->alibi = FLASHPORT_ALIBI_PER_HEAD;
        else if (t->ndim == 2 && t->shape[0] == d->batch && t->shape[1] == d->heads_q)
            d->alibi = FLASHPORT_ALIBI_PER_BATCH_HEAD;
        else {
            fpy_raise(FPY_ERR_LAYOUT,
                      "alibi_slopes must be [heads_q] or [batch, heads_q] = [%lld] "
                      "or [%lld, %lld]",
                      (long long)d->heads_q, (long long)d->batch, (long long)d->heads_q);
            return -1;
        }
    }
    t = &c->t[FPY_SINKS];
    if (t->capsule) {
        if (check_dtype(t, "sinks", FLASHPORT_F32, "float32") ||
            check_rank(t, "sinks", 1, "[heads_q]") || check_contiguous(t, "sinks") ||
            check_length(t, "sinks", 0, d->heads_q, "heads_q"))
            return -1;
        d->sinks = 1;
    }
    t = &c->t[FPY_BIAS];
    if (t->capsule) {
        const int f64 = d->dtype == FLASHPORT_F64;
        if (f64 ? t->dtype != FLASHPORT_F32 && t->dtype != FLASHPORT_F64
                : t->dtype != FLASHPORT_F32 && t->dtype != FLASHPORT_F16 &&
                      t->dtype != FLASHPORT_BF16) {
            fpy_raise(FPY_ERR_DTYPE, "bias is %s; it must be %s", t->dtype_name,
                      f64 ? "float32 or float64 for float64 inputs"
                          : "float32, float16 or bfloat16");
            return -1;
        }
        if (check_rank(t, "bias", 4, "[batch, heads_q, seq_q, seq_kv], 1 where broadcast"))
            return -1;
        const int64_t full[4] = {d->batch, d->heads_q, d->seq_q, d->seq_kv};
        int64_t s[4];
        for (int i = 0; i < 4; i++) {
            if (t->shape[i] != 1 && t->shape[i] != full[i]) {
                fpy_raise(FPY_ERR_LAYOUT,
                          "bias has %lld entries in dimension %d; it must be %lld, "
                          "or 1 to broadcast ([batch, heads_q, seq_q, seq_kv])",
                          (long long)t->shape[i], i, (long long)full[i]);
                return -1;
            }
            s[i] = t->shape[i] == 1 ? 0 : t->strides[i];
        }
        d->bias = (flashport_bias_desc){1, (flashport_dtype)t->dtype, s[0], s[1], s[2], s[3]};
    }
    return 0;
}

/* Sizes and strides of Q, K, V, and the packing or paging the tables ask for. */
static int read_qkv(fpy_call *c, const int64_t max_seqlen[2]) {
    flashport_attention_desc *d = &c->desc;
    const fpy_tensor *q = &c->t[FPY_Q], *k = &c->t[FPY_K], *v = &c->t[FPY_V];
    const int q_packed = c->t[FPY_CU_Q].capsule != NULL;
    const int kv_packed = c->t[FPY_CU_KV].capsule != NULL;
    const int paged = c->t[FPY_BLOCK_TABLE].capsule != NULL;
    if (kv_packed && paged) {
        fpy_raise(FPY_ERR_LAYOUT, "cu_seqlens_kv (packed K/V) and block_table (paged K/V) "
                                  "exclude each other");
        return -1;
    }
    static const char *packed_shape[2] = {"[total, heads, d] (layout 'bnhd')",
                                          "[heads, total, d] (layout 'bhnd')"};
    static const char *dense_shape[2] = {"[batch, seq, heads, d] (layout 'bnhd')",
                                         "[batch, heads, seq, d] (layout 'bhnd')"};
    static const char *page_shape[2] = {"[pages, page_size, heads, d] (layout 'bnhd')",
                                        "[pages, heads, page_size, d] (layout 'bhnd')"};
    if (check_rank(q, "q", q_packed ? 3 : 4, (q_packed ? packed_shape : dense_shape)[c->bhnd]))
        return -1;
    const char *kv_shape = (kv_packed ? packed_shape : paged ? page_shape : dense_shape)[c->bhnd];
    if (check_rank(k, "k", kv_packed ? 3 : 4, kv_shape)) return -1;
    for (int i = 0; i < k->ndim; i++)
        if (v->shape[i] != k->shape[i] || v->ndim != k->ndim) {
            fpy_raise(FPY_ERR_LAYOUT, "v's shape differs from k's in dimension %d (%lld, %lld)", i,
                      (long long)v->shape[i], (long long)k->shape[i]);
            return -1;
        }
    if (q->dtype != FLASHPORT_F32 && q->dtype != FLASHPORT_F16 && q->dtype != FLASHPORT_BF16 &&
        q->dtype != FLASHPORT_F64) {
        fpy_raise(FPY_ERR_DTYPE,
                  "q is %s; flashport takes float32, float16 and bfloat16 (and float64 on the "
                  "reference backend)",
                  q->dtype_name);
        return -1;
    }
    for (int s = FPY_Q; s <= FPY_V; s++) {
        if (check_head_dim(&c->t[s], slot_name[s])) return -1;
        if (s != FPY_Q && check_dtype(&c->t[s], slot_name[s], q->dtype, fpy_dtype_name(q->dtype)))
            return -1;
    }
    const dims dq = dims_of(c->bhnd, q_packed), dk = dims_of(c->bhnd, kv_packed);
    const int64_t head_dim = q->shape[q->ndim - 1];
    if (k->shape[k->ndim - 1] != head_dim) {
        fpy_raise(FPY_ERR_LAYOUT, "k's head dimension is %lld, q's %lld",
                  (long long)k->shape[k->ndim - 1], (long long)head_dim);
        return -1;
    }
    const int64_t batch = q_packed ? c->t[FPY_CU_Q].shape[0] - 1 : q->shape[0];
    if (c->t[FPY_CU_Q].capsule && c->t[FPY_CU_Q].ndim != 1) {
        fpy_raise(FPY_ERR_LAYOUT, "cu_seqlens_q must be a vector [batch + 1]");
        return -1;
    }
    if (read_tables(c, batch)) return -1;
    if (!kv_packed && !paged && check_length(k, "k", 0, batch, "the batch of q")) return -1;
    const int64_t rows_q = q->shape[dq.seq], rows_kv = k->shape[dk.seq];
    int64_t seq_q = rows_q, seq_kv = rows_kv;
    if (q_packed) seq_q = max_seqlen[0] >= 0 ? max_seqlen[0] : longest(&c->t[FPY_CU_Q], rows_q);
    if (kv_packed) seq_kv = max_seqlen[1] >= 0 ? max_seqlen[1] : longest(&c->t[FPY_CU_KV], rows_kv);
    const int64_t max_pages = paged ? c->t[FPY_BLOCK_TABLE].shape[1] : 0;
    if (paged) seq_kv = max_seqlen[1] >= 0 ? max_seqlen[1] : max_pages * rows_kv;

    flashport_attention_desc_init(d, (flashport_dtype)q->dtype, batch, q->shape[dq.head],
                                  k->shape[dk.head], seq_q, seq_kv, head_dim,
                                  c->bhnd ? FLASHPORT_LAYOUT_BHND : FLASHPORT_LAYOUT_BNHD);
    d->q = strides_of(q, dq);
    d->o = d->q; /* replaced by the output's own strides */
    d->k = strides_of(k, dk);
    d->v = strides_of(v, dk);
    if (q_packed) {
        d->q_varlen = 1;
        d->total_q = rows_q;
    }
    if (kv_packed) {
        d->kv_layout = FLASHPORT_KV_VARLEN;
        d->total_kv = rows_kv;
    }
    if (paged) {
        d->kv_layout = FLASHPORT_KV_PAGED;
        d->num_pages = k->shape[0];
        d->page_size = rows_kv;
        d->max_pages_per_seq = max_pages;
    }
    c->lse_rank = q_packed ? 2 : 3;
    const int64_t lse[3] = {batch, d->heads_q, seq_q}, lse_packed[2] = {d->heads_q, rows_q};
    memcpy(c->lse_shape, q_packed ? lse_packed : lse, sizeof(int64_t) * (size_t)c->lse_rank);
    return 0;
}

/* The backend argument for arrays in GPU memory: their device's backend, or an error. */
static int check_gpu_backend(const fpy_call *c, const char *spec) {
    const fpy_tensor *q = &c->t[FPY_Q];
    const char *want = q->device_type == FPY_DL_ROCM ? "hip" : "cuda";
    if (!spec) return 0;
    const size_t n = strlen(want);
    int ok = strncmp(spec, want, n) == 0 && (spec[n] == '\0' || spec[n] == ':');
    if (ok && spec[n] == ':') {
        char *end = NULL;
        long dev = strtol(spec + n + 1, &end, 10);
        ok = end && *end == '\0' && end != spec + n + 1 && dev == q->device;
    }
    if (ok) return 0;
    fpy_raise(FPY_ERR_DEVICE,
              "q is in %s memory of device %d; backend '%s' cannot run on it (pass "
              "backend=None or '%s:%d', or move the arrays to the host)",
              memory_name(q), q->device, spec, want, q->device);
    return -1;
}

/* Exports q, finds its device and, for GPU memory, the caller's current stream there. */
static int take_q(fpy_call *c, PyObject *q) {
    fpy_kind *kind = fpy_kind_of(q);
    if (!kind) return -1;
    c->kind = kind;
    c->place.stream = -1;
    int type = FPY_DL_CPU, index = 0;
    /* A producer told the consumer's stream must be asked for its device first. */
    if (kind->pass_stream && fpy_dlpack_device(q, "q", &type, &index)) return -1;
    if (!kind->pass_stream) {
        if (take(c, FPY_Q, q)) return -1;
        type = c->t[FPY_Q].device_type;
        index = c->t[FPY_Q].device;
    }
    const int gpu = type != FPY_DL_CPU && type != FPY_DL_CUDA_HOST && type != FPY_DL_ROCM_HOST;
    if (gpu) {
        c->place.stream = 0; /* the legacy default stream, for kinds that name no stream */
        if (kind->current_stream) {
            PyObject *idx = PyLong_FromLong(index);
            PyObject *s = idx ? PyObject_CallOneArg(kind->current_stream, idx) : NULL;
            Py_XDECREF(idx);
            if (!s) return -1;
            c->place.stream = PyLong_AsLongLong(s);
            Py_DECREF(s);
            if (c->place.stream == -1 && PyErr_Occurred()) return -1;
        }
    }
    if (kind->pass_stream && take(c, FPY_Q, q)) return -1;
    c->place.gpu = c->t[FPY_Q].device_type != FPY_DL_CPU;
    c->place.device_type = c->t[FPY_Q].device_type;
    c->place.device = c->t[FPY_Q].device;
    return 0;
}

int fpy_call_prepare(fpy_call *c, PyObject *q, PyObject *k, PyObject *v, PyObject *const *opts) {
    memset(c, 0, sizeof *c);
    const char *layout = NULL, *backend = NULL, *kernel = NULL;
    int64_t max_seqlen[2], window[2];
    float scale, softcap;
    const int causal = PyObject_IsTrue(opts[FPY_OPT_CAUSAL]);
    if (causal < 0 || opt_string(opts[FPY_OPT_LAYOUT], "layout", &layout) ||
        opt_string(opts[FPY_OPT_BACKEND], "backend", &backend) ||
        opt_string(opts[FPY_OPT_KERNEL], "kernel", &kernel) ||
        opt_float(opts[FPY_OPT_SCALE], "scale", &scale) ||
        opt_float(opts[FPY_OPT_SOFTCAP], "softcap", &softcap) ||
        opt_window(opts[FPY_OPT_WINDOW], &window[0], &window[1]) ||
        opt_int64(opts[FPY_OPT_MAX_SEQLEN_Q], "max_seqlen_q", -1, &max_seqlen[0]) ||
        opt_int64(opts[FPY_OPT_MAX_SEQLEN_KV], "max_seqlen_kv", -1, &max_seqlen[1]))
        return -1;
    if (!layout || (strcmp(layout, "bnhd") != 0 && strcmp(layout, "bhnd") != 0)) {
        fpy_raise(FPY_ERR_LAYOUT,
                  "layout must be 'bnhd' ([batch, seq, heads, d]) or 'bhnd' "
                  "([batch, heads, seq, d]); got %s",
                  layout ? layout : "None");
        return -1;
    }
    if (opts[FPY_OPT_SCALE] != Py_None && scale == 0.0f) {
        fpy_raise(FPY_ERR_ARGUMENT, "scale must not be 0 (None means 1/sqrt(d))");
        return -1;
    }
    c->bhnd = layout[1] == 'h';
    c->q_obj = q;
    c->k_obj = k;
    c->v_obj = v;
    if (backend && !backend[0]) backend = NULL;
    if (take_q(c, q)) return -1;
    if (c->place.gpu) {
        if (check_gpu_backend(c, backend)) return -1;
    } else {
        c->place.spec = backend;
    }
    if (take(c, FPY_K, k) || take(c, FPY_V, v) || take(c, FPY_ALIBI, opts[FPY_OPT_ALIBI]) ||
        take(c, FPY_BIAS, opts[FPY_OPT_BIAS]) || take(c, FPY_SINKS, opts[FPY_OPT_SINKS]) ||
        take(c, FPY_CU_Q, opts[FPY_OPT_CU_Q]) || take(c, FPY_CU_KV, opts[FPY_OPT_CU_KV]) ||
        take(c, FPY_BLOCK_TABLE, opts[FPY_OPT_BLOCK_TABLE]) ||
        take(c, FPY_SEQLENS_KV, opts[FPY_OPT_SEQLENS_KV]))
        return -1;
    if (read_qkv(c, max_seqlen)) return -1;
    flashport_attention_desc *d = &c->desc;
    d->scale = scale;
    d->causal = causal;
    d->window_left = window[0];
    d->window_right = window[1];
    d->softcap = softcap;
    d->kernel = kernel;
    return read_modifiers(c);
}

/* Strides that address the same elements of `t` (a dimension of one entry has no stride that
 * matters; the outer one is absent from packed arrays). */
static int same_strides(const fpy_tensor *t, dims d, flashport_strides a, flashport_strides b) {
    return (d.outer < 0 || t->shape[d.outer] == 1 || a.batch == b.batch) &&
           (t->shape[d.head] == 1 || a.head == b.head) && (t->shape[d.seq] == 1 || a.seq == b.seq);
}

/* Checks O, the LSE, dO, dQ, dK or dV against the descriptor: `written` for an output. O sets
 * the o strides; dO must follow them, and dQ, dK, dV the strides of q, k and v, as the library
 * reads each pair by one set of strides. */
static int check_array(fpy_call *c, fpy_slot slot, int written) {
    const fpy_tensor *t = &c->t[slot];
    const char *name = slot_name[slot];
    if (written && t->read_only) {
        fpy_raise(FPY_ERR_ARGUMENT, "%s is read-only", name);
        return -1;
    }
    if (slot == FPY_LSE) {
        if (check_dtype(t, name, FLASHPORT_F32, "float32") ||
            check_rank(t, name, c->lse_rank,
                       c->lse_rank == 2 ? "[heads_q, total_q]" : "[batch, heads_q, seq_q]") ||
            check_contiguous(t, name))
            return -1;
        for (int i = 0; i < c->lse_rank; i++)
            if (check_length(t, name, i, c->lse_shape[i], "the LSE's")) return -1;
        return 0;
    }
    const fpy_slot like = slot == FPY_DK ? FPY_K : slot == FPY_DV ? FPY_V : FPY_Q;
    const fpy_tensor *l = &c->t[like];
    const char *what = like == FPY_K ? "k's shape" : like == FPY_V ? "v's shape" : "q's shape";
    if (check_dtype(t, name, (int)c->desc.out_dtype, fpy_dtype_name((int)c->desc.out_dtype)) ||
        check_rank(t, name, l->ndim, what) || check_head_dim(t, name))
        return -1;
    for (int i = 0; i < l->ndim; i++)
        if (check_length(t, name, i, l->shape[i], what)) return -1;
    const int packed = like == FPY_Q ? c->desc.q_varlen : c->desc.kv_layout == FLASHPORT_KV_VARLEN;
    const dims dd = dims_of(c->bhnd, packed);
    const flashport_strides got = strides_of(t, dd);
    if (slot == FPY_O) {
        c->desc.o = got;
        return 0;
    }
    const flashport_strides want = slot == FPY_DO   ? c->desc.o
                                   : slot == FPY_DQ ? c->desc.q
                                   : slot == FPY_DK ? c->desc.k
                                                    : c->desc.v;
    if (same_strides(t, dd, got, want)) return 0;
    fpy_raise(FPY_ERR_STRIDE, "%s must have the strides of %s (the library reads both by one set)",
              name, slot == FPY_DO ? "out" : slot_name[like]);
    return -1;
}

int fpy_call_input(fpy_call *c, fpy_slot slot, PyObject *given) {
    if (given == Py_None) {
        fpy_raise(FPY_ERR_ARGUMENT, "the backward pass needs %s", slot_name[slot]);
        return -1;
    }
    return take(c, slot, given) || check_array(c, slot, 0) ? -1 : 0;
}

PyObject *fpy_call_output(fpy_call *c, fpy_slot slot, PyObject *given) {
    PyObject *arr;
    const char *type = c->kind->type->tp_name;
    if (given && given != Py_None) {
        arr = Py_NewRef(given);
    } else if (slot != FPY_LSE) {
        if (!c->kind->empty_like)
            return fpy_raise(FPY_ERR_ARGUMENT,
                             "flashport cannot allocate arrays of type %s: pass out=", type);
        PyObject *like = slot == FPY_DK ? c->k_obj : slot == FPY_DV ? c->v_obj : c->q_obj;
        arr = PyObject_CallOneArg(c->kind->empty_like, like);
    } else {
        if (!c->kind->empty_f32)
            return fpy_raise(FPY_ERR_ARGUMENT,
                             "flashport cannot allocate arrays of type %s for the LSE", type);
        PyObject *shape = c->lse_rank == 2 ? Py_BuildValue("(LL)", c->lse_shape[0], c->lse_shape[1])
                                           : Py_BuildValue("(LLL)", c->lse_shape[0],
                                                           c->lse_shape[1], c->lse_shape[2]);
        arr =
            shape ? PyObject_CallFunctionObjArgs(c->kind->empty_f32, shape, c->q_obj, NULL) : NULL;
        Py_XDECREF(shape);
    }
    if (!arr) return NULL;
    if (take(c, slot, arr) || check_array(c, slot, 1)) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* ---- running ---- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static flashport_status run_device(fpy_call *c, flashport_context *ctx, fpy_device_fn fn,
                                   int repeat, double *seconds) {
    flashport_attention_args args = FLASHPORT_ATTENTION_ARGS_INIT;
    flashport_buffer *bufs[FPY_SLOT_COUNT] = {0};
    flashport_status st = FLASHPORT_OK;
    for (int s = 0; s < FPY_SLOT_COUNT && st == FLASHPORT_OK; s++) {
        if (!c->t[s].capsule) continue;
        st = flashport_buffer_wrap(ctx, c->t[s].data, fpy_tensor_extent(&c->t[s]), &bufs[s]);
        memcpy((char *)&args + device_offset[s], &bufs[s], sizeof bufs[s]);
    }
    const double start = now_seconds();
    for (int i = 0; i < repeat && st == FLASHPORT_OK; i++) st = fn(ctx, &c->desc, &args);
    *seconds = now_seconds() - start;
    for (int s = 0; s < FPY_SLOT_COUNT; s++) flashport_buffer_free(bufs[s]);
    return st;
}

static flashport_status run_host(fpy_call *c, flashport_context *ctx, fpy_host_fn fn, int repeat,
                                 double *seconds) {
    flashport_attention_host_args args = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    for (int s = 0; s < FPY_SLOT_COUNT; s++)
        if (c->t[s].capsule) memcpy((char *)&args + host_offset[s], &c->t[s].data, sizeof(void *));
    flashport_status st = FLASHPORT_OK;
    /* Host contexts belong to one thread (contexts.c), so the call can let others run. */
    Py_BEGIN_ALLOW_THREADS;
    const double start = now_seconds();
    for (int i = 0; i < repeat && st == FLASHPORT_OK; i++) st = fn(ctx, &c->desc, &args);
    *seconds = now_seconds() - start;
    Py_END_ALLOW_THREADS;
    return st;
}

int fpy_call_repeat(fpy_call *c, fpy_device_fn device_fn, fpy_host_fn host_fn, int repeat,
                    double *seconds) {
    fpy_lease lease;
    if (fpy_context_acquire(&c->place, &lease)) return -1;
    double unused;
    if (!seconds) seconds = &unused;
    const flashport_status st = c->place.gpu ? run_device(c, lease.ctx, device_fn, repeat, seconds)
                                             : run_host(c, lease.ctx, host_fn, repeat, seconds);
    if (st) fpy_raise_status(st); /* before the release, which may destroy the context */
    fpy_context_release(&lease);
    return st ? -1 : 0;
}

void fpy_call_release(fpy_call *c) {
    for (int s = 0; s < FPY_SLOT_COUNT; s++) fpy_tensor_release(&c->t[s]);
}
