/*
 * The DLPack structures the extension reads, written from the DLPack specification (the
 * exchange format behind __dlpack__): the legacy DLManagedTensor of capsules named "dltensor"
 * and the DLManagedTensorVersioned of DLPack 1.x ("dltensor_versioned"). Only the members read
 * here are named; the layouts are the specification's ABI.
 */
#ifndef FPY_DLPACK_ABI_H
#define FPY_DLPACK_ABI_H

#include <stdint.h>

/* Device types of the specification that the extension distinguishes. */
enum {
    FPY_DL_CPU = 1,
    FPY_DL_CUDA = 2,
    FPY_DL_CUDA_HOST = 3, /* pinned host memory: a host pointer */
    FPY_DL_ROCM = 10,
    FPY_DL_ROCM_HOST = 11,
    FPY_DL_CUDA_MANAGED = 13
};

/* Type codes: signed and unsigned integers, IEEE floats, bfloat16. */
enum { FPY_DL_INT = 0, FPY_DL_UINT = 1, FPY_DL_FLOAT = 2, FPY_DL_BFLOAT = 4 };

/* Flag of a versioned tensor whose memory must not be written. */
#define FPY_DL_FLAG_READ_ONLY 1u

typedef struct {
    int32_t device_type;
    int32_t device_id;
} fpy_dl_device;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} fpy_dl_dtype;

typedef struct {
    void *data;
    fpy_dl_device device;
    int32_t ndim;
    fpy_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} fpy_dl_tensor;

typedef struct fpy_dl_managed {
    fpy_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct fpy_dl_managed *self);
} fpy_dl_managed;

typedef struct fpy_dl_managed_versioned {
    struct {
        uint32_t major, minor;
    } version;
    void *manager_ctx;
    void (*deleter)(struct fpy_dl_managed_versioned *self);
    uint64_t flags;
    fpy_dl_tensor dl_tensor;
} fpy_dl_managed_versioned;

#endif
