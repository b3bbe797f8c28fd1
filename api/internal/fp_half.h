/*
 * Portable conversions between float32 and the 16-bit storage types (IEEE binary16, bfloat16),
 * round-to-nearest-even, NaN and infinity preserved. Host code only; GPU kernels use their
 * vendor's intrinsics.
 */
#ifndef FP_HALF_H
#define FP_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fp_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fp_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float fp_bf16_to_f32(uint16_t h) { return fp_bits_f32((uint32_t)h << 16); }

static inline uint16_t fp_f32_to_bf16(float f) {
    uint32_t u = fp_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float fp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return fp_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return fp_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return fp_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fp_f32_to_f16(float f) {
    uint32_t u = fp_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        /* Adding 0.5 (2^-1) aligns the f16 subnormal grid (2^-24) to the float's last bits,
         * so the FPU's own round-to-nearest-even does the rounding. */
        float v = fp_bits_f32(a) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(fp_f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (a >> 13) & 1u;
    a += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (uint16_t)(a >> 13));
}

/* Rounds a float32 to the nearest value representable in the 16-bit type. */
static inline float fp_round_f16(float f) { return fp_f16_to_f32(fp_f32_to_f16(f)); }
static inline float fp_round_bf16(float f) { return fp_bf16_to_f32(fp_f32_to_bf16(f)); }

#endif /* FP_HALF_H */
