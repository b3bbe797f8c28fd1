/* A DLPack export read as the extension needs it: shape, element strides, dtype, device. The
 * capsule is kept (not consumed) until release, so the producer's memory stays alive. */
#include <stdio.h>
#include <string.h>

#include "dlpack_abi.h"
#include "fpy.h"

static const char *device_name(int type) {
    switch (type) {
    case FPY_DL_CPU: return "host";
    case FPY_DL_CUDA: return "CUDA";
    case FPY_DL_ROCM: return "ROCm";
    }
    return "unsupported";
}

const char *fpy_dtype_name(int dtype) {
    switch (dtype) {
    case FLASHPORT_F32: return "float32";
    case FLASHPORT_F16: return "float16";
    case FLASHPORT_BF16: return "bfloat16";
    case FLASHPORT_F64: return "float64";
    }
    return "another dtype";
}

/* "float64", "int64", "uint8", ...: the DLPack type code's family and the width. */
static void describe_dtype(fpy_dl_dtype t, char *out, size_t len) {
    static const char *family[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
    const char *f = t.code < sizeof family / sizeof family[0] ? family[t.code] : "dtype code ";
    if (t.lanes == 1)
        snprintf(out, len, "%s%u", f, (unsigned)t.bits);
    else
        snprintf(out, len, "%s%ux%u", f, (unsigned)t.bits, (unsigned)t.lanes);
}

static int read_dtype(fpy_dl_dtype t, int *elem_size) {
    *elem_size = t.bits / 8;
    if (t.lanes != 1) return FPY_OTHER_DTYPE;
    if (t.code == FPY_DL_FLOAT && t.bits == 64) return FLASHPORT_F64;
    if (t.code == FPY_DL_FLOAT && t.bits == 32) return FLASHPORT_F32;
    if (t.code == FPY_DL_FLOAT && t.bits == 16) return FLASHPORT_F16;
    if (t.code == FPY_DL_BFLOAT && t.bits == 16) return FLASHPORT_BF16;
    if (t.code == FPY_DL_INT && t.bits == 32) return FPY_INT32;
    return FPY_OTHER_DTYPE;
}

/* Pinned and managed memory are addressed as host and device memory respectively. */
static int normalised_device(int type) {
    switch (type) {
    case FPY_DL_CPU:
    case FPY_DL_CUDA_HOST:
    case FPY_DL_ROCM_HOST: return FPY_DL_CPU;
    case FPY_DL_CUDA_MANAGED: return FPY_DL_CUDA;
    }
    return type;
}

int fpy_tensor_get(PyObject *obj, const char *name, int64_t stream, fpy_tensor *t) {
    memset(t, 0, sizeof *t);
    fpy_kind *kind = fpy_kind_of(obj);
    if (!kind) return -1;
    PyObject *cap = fpy_export(kind, obj, name, stream);
    if (!cap) return -1;
    const fpy_dl_tensor *dl = NULL;
    uint64_t flags = 0;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        fpy_dl_managed_versioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m->version.major != 1) {
            Py_DECREF(cap);
            fpy_raise(FPY_ERR_ARGUMENT, "%s: DLPack version %u.%u is not supported (1.x is)", name,
                      m->version.major, m->version.minor);
            return -1;
        }
        dl = &m->dl_tensor;
        flags = m->flags;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        dl = &((fpy_dl_managed *)PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
    } else {
        Py_DECREF(cap);
        fpy_raise(FPY_ERR_ARGUMENT, "%s: __dlpack__ did not return a DLPack capsule", name);
        return -1;
    }
    t->capsule = cap;
    if (dl->ndim < 1 || dl->ndim > FPY_MAX_DIMS) {
        fpy_raise(FPY_ERR_LAYOUT, "%s has %d dimensions; at most %d are taken", name, (int)dl->ndim,
                  FPY_MAX_DIMS);
        return -1;
    }
    t->ndim = dl->ndim;
    t->dtype = read_dtype(dl->dtype, &t->elem_size);
    describe_dtype(dl->dtype, t->dtype_name, sizeof t->dtype_name);
    t->device_type = normalised_device(dl->device.device_type);
    t->device = t->device_type == FPY_DL_CPU ? 0 : dl->device.device_id;
    t->read_only = (flags & FPY_DL_FLAG_READ_ONLY) != 0;
    t->data = (char *)dl->data + dl->byte_offset;
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->shape[i] = dl->shape[i];
        t->strides[i] = dl->strides ? dl->strides[i] : step;
        step *= dl->shape[i];
        /* A dimension of extent 1 is addressed by no stride, whatever its producer reports. */
        if (dl->shape[i] == 1 && t->strides[i] < 0) t->strides[i] = 0;
        if (t->strides[i] < 0) {
            fpy_raise(FPY_ERR_STRIDE,
                      "%s has a negative stride in dimension %d; flashport takes "
                      "strides >= 0",
                      name, i);
            return -1;
        }
    }
    if (t->device_type != FPY_DL_CPU && t->device_type != FPY_DL_CUDA &&
        t->device_type != FPY_DL_ROCM) {
        fpy_raise(FPY_ERR_DEVICE,
                  "%s is in memory of DLPack device type %d (%s); flashport takes "
                  "host, CUDA and ROCm memory",
                  name, dl->device.device_type, device_name(t->device_type));
        return -1;
    }
    return 0;
}

void fpy_tensor_release(fpy_tensor *t) { Py_CLEAR(t->capsule); }

size_t fpy_tensor_extent(const fpy_tensor *t) {
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return 0;
        last += (t->shape[i] - 1) * t->strides[i];
    }
    return (size_t)(last + 1) * (size_t)t->elem_size;
}

int fpy_tensor_contiguous(const fpy_tensor *t) {
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != step) return 0;
        step *= t->shape[i];
    }
    return 1;
}
