/*
 * Portable conversions between float32 and the OCP 8-bit floating-point formats, host code only
 * (GPU kernels use their vendor's intrinsics):
 *
 *   E4M3 ("fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities; S.1111.111
 *                (0x7f, 0xff) is NaN, so the largest finite value is 448 (S.1111.110).
 *   E5M2:        sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is
 *                infinity, S.11111.xx (xx != 0) NaN, largest finite value 57344. It is exactly
 *                the high byte of an IEEE binary16.
 *
 * Decoding is exact. Encoding rounds to nearest, ties to even, and then:
 *   E4M3: every value past the largest finite one, infinities included, saturates to +-448
 *         (the format has no infinity; this is the "satfinite" conversion that FP8 quantisers
 *         and PTX cvt.satfinite use); NaN becomes 0x7f with the input's sign bit.
 *   E5M2: as IEEE: magnitudes that round past 57344 (from 61440 on) become infinity,
 *         infinities stay, NaN becomes the quiet NaN 0x7e with the input's sign bit.
 */
#ifndef FP_FP8_H
#define FP_FP8_H

#include <stdint.h>

#include "fp_half.h"

static inline float fp_e4m3_to_f32(uint8_t x) {
    const uint32_t sign = (uint32_t)(x & 0x80u) << 24;
    const uint32_t exp = (x >> 3) & 0xfu, man = x & 0x7u;
    if (exp == 0xfu && man == 0x7u) return fp_bits_f32(sign | 0x7fc00000u);
    if (exp == 0) {
        /* subnormal: man * 2^-9 */
        const float v = (float)man * 0.001953125f;
        return sign ? -v : v;
    }
    return fp_bits_f32(sign | ((exp + 120u) << 23) | (man << 20)); /* rebias 7 -> 127 */
}

static inline float fp_e5m2_to_f32(uint8_t x) { return fp_f16_to_f32((uint16_t)(x << 8)); }

/* The magnitude code of finite |f| (float32 bits a) on the grid of a format with `man`
 * mantissa bits and exponent bias `bias`, rounded to nearest even. Codes past the format's
 * largest finite one are returned as they come: each format applies its own overflow rule. */
static inline uint32_t fp_fp8_round(uint32_t a, int man, int bias) {
    const int e32 = (int)(a >> 23);
    const uint32_t sig = e32 ? (a & 0x7fffffu) | 0x800000u : a; /* with the implicit bit */
    const int lsb = (e32 ? e32 : 1) - 150;                      /* exponent of sig's last bit */
    /* Exponent of the leading bit, but no lower than the format's smallest normal one: below
     * it the grid is the subnormal one, 2^(1 - bias - man). */
    int e = (e32 ? e32 : 1) - 127;
    if (e < 1 - bias) e = 1 - bias;
    const int shift = e - man - lsb; /* bits of sig below the grid step, at least 23 - man */
    if (shift > 24) return 0;        /* below half the smallest subnormal */
    uint32_t n = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    n += rest > half || (rest == half && (n & 1u));
    /* n counts grid steps: [2^man, 2^(man+1)] for a normal exponent e, so the code is the
     * exponent field's base plus n; in the subnormal range the code is n itself. A carry to
     * 2^(man+1) lands on the next exponent's code. */
    return ((uint32_t)(e + bias - 1) << man) + n;
}

static inline uint8_t fp_f32_to_e4m3(float f) {
    const uint32_t u = fp_f32_bits(f), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
    if (a == 0x7f800000u) return (uint8_t)(sign | 0x7eu);
    const uint32_t code = fp_fp8_round(a, 3, 7);
    return (uint8_t)(sign | (code > 0x7eu ? 0x7eu : code));
}

static inline uint8_t fp_f32_to_e5m2(float f) {
    const uint32_t u = fp_f32_bits(f), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7eu);
    if (a == 0x7f800000u) return (uint8_t)(sign | 0x7cu);
    const uint32_t code = fp_fp8_round(a, 2, 15);
    return (uint8_t)(sign | (code > 0x7cu ? 0x7cu : code));
}

/* Rounds a float32 to the nearest value representable in the 8-bit format (rules above). */
static inline float fp_round_e4m3(float f) { return fp_e4m3_to_f32(fp_f32_to_e4m3(f)); }
static inline float fp_round_e5m2(float f) { return fp_e5m2_to_f32(fp_f32_to_e5m2(f)); }

#endif /* FP_FP8_H */
