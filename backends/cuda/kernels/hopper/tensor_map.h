/*
 * Host side of the Hopper forward's TMA: the 4-d tiled tensor map of one of Q, K and V, built by
 * the driver's cuTensorMapEncodeTiled. The module links only the static runtime, so the driver
 * function is looked up through cudaGetDriverEntryPointByVersion at first use, not linked.
 *
 * A map sees the tensor as [batch][heads][rows][head_dim] with the caller's element strides
 * (dimension 0, the head dim, contiguous) and copies boxes of one 128-byte panel (64 16-bit or
 * 128 FP8 columns) x `box_rows` rows of one head with 128-byte swizzle (fragment_layout.h). TMA
 * needs the base 16-byte aligned and every stride of a dimension longer than 1 a positive
 * multiple of 16 bytes below 2^40; a dimension of length 1 is never stepped, so its stride is
 * replaced by a legal one. The head dims built (64, 128, 256) make a row a multiple of 16
 * bytes.
 */
#ifndef FP_HOPPER_TENSOR_MAP_H
#define FP_HOPPER_TENSOR_MAP_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <mutex>
#include <stdint.h>
#include <stdio.h>

#include "../../kernel_table.h"
#include "device_check.h"
#include "fragment_layout.h"

#define FP_HOPPER_STRIDE_LIMIT ((int64_t)1 << 40)

/* 1 when a dimension of `len` with element stride `stride` (elements of `elem` bytes) is one
 * TMA can step; else 0 and the reason, naming the tensor and the stride. */
static inline int fp_hopper_stride_fits(const char *tensor, const char *dim, int64_t len,
                                        int64_t stride, int elem, char *why, size_t why_len) {
    if (len <= 1) return 1;
    if (stride <= 0 || (stride * elem) % 16 != 0 || stride * elem >= FP_HOPPER_STRIDE_LIMIT) {
        snprintf(why, why_len,
                 "TMA needs %s's %s stride to be a positive multiple of %d elements (16 bytes) "
                 "below 2^40 bytes, got %lld",
                 tensor, dim, 16 / elem, (long long)stride);
        return 0;
    }
    return 1;
}

static inline int fp_hopper_strides_fit(const char *tensor, const flashport_strides *st,
                                        int64_t batch, int64_t heads, int64_t rows, int elem,
                                        char *why, size_t why_len) {
    return fp_hopper_stride_fits(tensor, "sequence", rows, st->seq, elem, why, why_len) &&
           fp_hopper_stride_fits(tensor, "head", heads, st->head, elem, why, why_len) &&
           fp_hopper_stride_fits(tensor, "batch", batch, st->batch, elem, why, why_len);
}

/* The driver's cuTensorMapEncodeTiled, looked up once; NULL when the driver lacks it. */
static inline PFN_cuTensorMapEncodeTiled_v12000 fp_hopper_encode_fn(void) {
    static std::once_flag once;
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    std::call_once(once, [] {
        void *ptr = NULL;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                             cudaEnableDefault, &found) == cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
        else
            (void)cudaGetLastError(); /* a missing symbol is this variant's problem alone */
    });
    return fn;
}

/* What the TMA-fed Hopper variants' supports() ask of the device: what every Hopper variant
 * needs (device_check.h), and the driver's TMA encoder. 1, or 0 and the reason. */
static inline int fp_hopper_device_fits(const fp_gpu_device_props *props, size_t smem,
                                        const void *kernel, char *why, size_t why_len) {
    if (!fp_hopper_device_loads(props, smem, kernel, why, why_len)) return 0;
    if (!fp_hopper_encode_fn()) {
        snprintf(why, why_len, "the driver has no cuTensorMapEncodeTiled (TMA)");
        return 0;
    }
    return 1;
}

/* The map of a [batch][heads][rows][head_dim] tensor at base; cudaSuccess, or the error the
 * launch returns. */
static inline cudaError_t fp_hopper_encode(CUtensorMap *map, const void *base, flashport_dtype dt,
                                           const flashport_strides *st, int64_t batch,
                                           int64_t heads, int64_t rows, int64_t head_dim,
                                           int box_rows) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = fp_hopper_encode_fn();
    if (!encode) return cudaErrorNotSupported;
    if ((uintptr_t)base % 16 != 0) return cudaErrorMisalignedAddress;
    const int elem = (int)fp_dtype_size(dt); /* 2, or 1 for FP8 (copied as bytes) */
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)rows, (cuuint64_t)heads,
                                (cuuint64_t)batch};
    /* Bytes between consecutive rows, heads and batches. A length-1 dimension is never
     * stepped; it gets the stride of the dimension inside it (a row's bytes for the rows), a
     * legal value whatever order the driver may ask the strides to grow in. */
    const int64_t elem_strides[3] = {st->seq, st->head, st->batch};
    cuuint64_t strides[3];
    for (int i = 0; i < 3; ++i)
        strides[i] = dims[i + 1] > 1 ? (cuuint64_t)(elem_strides[i] * elem)
                     : i == 0        ? (cuuint64_t)(head_dim * elem)
                                     : strides[i - 1];
    const cuuint32_t box[4] = {(cuuint32_t)(128 / elem), (cuuint32_t)box_rows, 1, 1};
    const CUtensorMapDataType type = elem == 1              ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : dt == FLASHPORT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const cuuint32_t elem_step[4] = {1, 1, 1, 1};
    const CUresult r =
        encode(map, type, 4, const_cast<void *>(base), dims, strides, box, elem_step,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

#endif /* FP_HOPPER_TENSOR_MAP_H */
