/*
 * Host-side helpers for attention tensors: indices in the two layouts and conversions between
 * float values and the storage of each flashport dtype.
 *
 * A tensor has a logical shape (batch, heads, seq, dim). In a file (a .npy fixture, the
 * flashport-run inputs) it is contiguous in its layout's order; in a flashport buffer it sits
 * at the problem's element strides, which may leave gaps.
 */
#ifndef FP_TOOLS_TENSOR_H
#define FP_TOOLS_TENSOR_H

#include <stdint.h>

#include "flashport.h"

typedef struct tensor_shape {
    int64_t batch, heads, seq, dim;
} tensor_shape;

/* The four dimensions in the layout's order: bhnd = (B, H, N, d), bnhd = (B, N, H, d). */
void tensor_layout_dims(flashport_layout layout, tensor_shape s, int64_t dims[4]);

/* Reads a layout's dims back into a logical shape. */
tensor_shape tensor_shape_from_dims(flashport_layout layout, const int64_t dims[4]);

/* Index of element (b, h, n, c) in the contiguous layout order. */
int64_t tensor_file_index(flashport_layout layout, tensor_shape s, int64_t b, int64_t h, int64_t n,
                          int64_t c);

/* Index of element (b, h, n, c) at the given element strides (head_dim stride 1). */
static inline int64_t tensor_strided_index(const flashport_strides *st, int64_t b, int64_t h,
                                           int64_t n, int64_t c) {
    return b * st->batch + h * st->head + n * st->seq + c;
}

/* Strides of a layout whose every row of dim elements is followed by pad unused elements. */
flashport_strides tensor_padded_strides(flashport_layout layout, tensor_shape s, int64_t pad);

/* Element i of a buffer of dtype, and a float stored into one (rounded to nearest even).
 * f32, f16 and bf16 only: FP8 tensors reach the library as the bytes the caller quantised
 * (with its own rounding and descales) and are never converted here; for them load and round
 * give NaN and store writes nothing. */
float tensor_load(flashport_dtype dtype, const void *base, int64_t i);
void tensor_store(flashport_dtype dtype, void *base, int64_t i, float v);

/* A float rounded to what the dtype can hold (f32: unchanged). */
float tensor_round(flashport_dtype dtype, float v);

/* A float rounded to tf32 (10 explicit mantissa bits, nearest even), NaN and inf kept. */
float tensor_round_tf32(float v);

#endif /* FP_TOOLS_TENSOR_H */
