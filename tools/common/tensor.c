#include "tensor.h"

#include <math.h>

#include "fp_half.h"

void tensor_layout_dims(flashport_layout layout, tensor_shape s, int64_t dims[4]) {
    dims[0] = s.batch;
    dims[1] = layout == FLASHPORT_LAYOUT_BHND ? s.heads : s.seq;
    dims[2] = layout == FLASHPORT_LAYOUT_BHND ? s.seq : s.heads;
    dims[3] = s.dim;
}

tensor_shape tensor_shape_from_dims(flashport_layout layout, const int64_t dims[4]) {
    tensor_shape s = {dims[0], dims[1], dims[2], dims[3]};
    if (layout == FLASHPORT_LAYOUT_BNHD) {
        s.heads = dims[2];
        s.seq = dims[1];
    }
    return s;
}

int64_t tensor_file_index(flashport_layout layout, tensor_shape s, int64_t b, int64_t h, int64_t n,
                          int64_t c) {
    if (layout == FLASHPORT_LAYOUT_BHND) return ((b * s.heads + h) * s.seq + n) * s.dim + c;
    return ((b * s.seq + n) * s.heads + h) * s.dim + c;
}

flashport_strides tensor_padded_strides(flashport_layout layout, tensor_shape s, int64_t pad) {
    flashport_strides st;
    int64_t row = s.dim + pad;
    if (layout == FLASHPORT_LAYOUT_BHND) {
        st.seq = row;
        st.head = s.seq * row;
        st.batch = s.heads * s.seq * row;
    } else {
        st.head = row;
        st.seq = s.heads * row;
        st.batch = s.seq * s.heads * row;
    }
    return st;
}

float tensor_load(flashport_dtype dtype, const void *base, int64_t i) {
    switch (dtype) {
    case FLASHPORT_F64: return (float)((const double *)base)[i];
    case FLASHPORT_F32: return ((const float *)base)[i];
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    case FLASHPORT_FP8_E4M3:
    case FLASHPORT_FP8_E5M2: break; /* raw bytes, never converted here (tensor.h) */
    }
    return NAN;
}

void tensor_store(flashport_dtype dtype, void *base, int64_t i, float v) {
    switch (dtype) {
    case FLASHPORT_F64: ((double *)base)[i] = v; break;
    case FLASHPORT_F32: ((float *)base)[i] = v; break;
    case FLASHPORT_F16: ((uint16_t *)base)[i] = fp_f32_to_f16(v); break;
    case FLASHPORT_BF16: ((uint16_t *)base)[i] = fp_f32_to_bf16(v); break;
    case FLASHPORT_FP8_E4M3:
    case FLASHPORT_FP8_E5M2: break; /* raw bytes, never converted here (tensor.h) */
    }
}

float tensor_round(flashport_dtype dtype, float v) {
    switch (dtype) {
    case FLASHPORT_F64:
    case FLASHPORT_F32: return v;
    case FLASHPORT_F16: return fp_round_f16(v);
    case FLASHPORT_BF16: return fp_round_bf16(v);
    case FLASHPORT_FP8_E4M3:
    case FLASHPORT_FP8_E5M2: break; /* raw bytes, never converted here (tensor.h) */
    }
    return NAN;
}

float tensor_round_tf32(float v) {
    uint32_t u = fp_f32_bits(v);
    if ((u & 0x7f800000u) == 0x7f800000u) return v; /* inf and NaN unchanged */
    u += 0xfffu + ((u >> 13) & 1u);
    return fp_bits_f32(u & ~0x1fffu);
}
