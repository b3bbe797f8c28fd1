/*
 * FP8 to float32, one value at a time: the portable path's loads and the SIMD paths' row
 * remainders. Exact (every FP8 value is a float32), NaN kept; no table, and no arithmetic on
 * subnormal float32 values, so a caller's flush-to-zero or denormals-are-zero mode cannot
 * change the result.
 */
#ifndef CS_FP8_DECODE_H
#define CS_FP8_DECODE_H

#include <math.h>
#include <stdint.h>

#include "fp_half.h"

/* OCP E4M3 ("fn"): exponent bias 7, no infinities, S.1111.111 is NaN. A normal value's
 * exponent and mantissa bits, moved to float32's places, need only the bias difference
 * (127 - 7) added; subnormals (exponent 0) are m * 2^-9. */
static inline float cs_e4m3_to_f32(uint8_t x) {
    const uint32_t mag = x & 0x7fu;
    const float v = mag == 0x7fu ? NAN
                    : mag < 8u   ? (float)mag * 0x1p-9f
                                 : fp_bits_f32((mag << 20) + (120u << 23));
    return x & 0x80u ? -v : v;
}

/* OCP E5M2 is the upper byte of an IEEE binary16 (infinities, NaNs and subnormals included). */
static inline float cs_e5m2_to_f32(uint8_t x) { return fp_f16_to_f32((uint16_t)(x << 8)); }

#endif /* CS_FP8_DECODE_H */
