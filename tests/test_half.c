/* The host f16/bf16 conversions round to nearest even and keep NaN and infinity: checked against
 * the compiler's _Float16 for every f16 value and a sweep of float32 values. */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "fp_half.h"

int main(void) {
#if defined(__FLT16_MAX__)
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        uint16_t bits = (uint16_t)h;
        memcpy(&x, &bits, 2);
        float ours = fp_f16_to_f32(bits), theirs = (float)x;
        if (isnan(theirs))
            CHECK(isnan(ours));
        else
            CHECK(fp_f32_bits(ours) == fp_f32_bits(theirs));
    }
    /* Every 97th float32 bit pattern: covers subnormal, normal, overflow and NaN ranges. */
    for (uint64_t u = 0; u <= 0xffffffffu; u += 97) {
        float f = fp_bits_f32((uint32_t)u);
        _Float16 x = (_Float16)f;
        uint16_t theirs;
        memcpy(&theirs, &x, 2);
        uint16_t ours = fp_f32_to_f16(f);
        if (isnan(f)) {
            if ((ours & 0x7c00u) != 0x7c00u || (ours & 0x3ffu) == 0) CHECK(0);
        } else if (ours != theirs) {
            CHECK(ours == theirs);
            break;
        }
    }
#else
    /* Without _Float16, check the values that matter by hand. */
    CHECK(fp_f32_to_f16(1.0f) == 0x3c00u);
    CHECK(fp_f32_to_f16(65504.0f) == 0x7bffu);
    CHECK(fp_f32_to_f16(65520.0f) == 0x7c00u);
    CHECK(fp_f32_to_f16(5.9604644775390625e-8f) == 0x0001u);
    CHECK(fp_f16_to_f32(0x3555u) == 0.333251953125f);
#endif
    /* bf16: round to nearest even on the dropped 16 bits, NaN stays NaN. */
    CHECK(fp_f32_to_bf16(1.0f) == 0x3f80u);
    CHECK(fp_f32_to_bf16(fp_bits_f32(0x3f808000u)) == 0x3f80u); /* tie, even stays */
    CHECK(fp_f32_to_bf16(fp_bits_f32(0x3f818000u)) == 0x3f82u); /* tie, odd rounds up */
    CHECK(fp_f32_to_bf16(fp_bits_f32(0x3f808001u)) == 0x3f81u);
    CHECK(isnan(fp_bf16_to_f32(fp_f32_to_bf16(NAN))));
    CHECK(isinf(fp_bf16_to_f32(fp_f32_to_bf16(INFINITY))));
    CHECK(fp_round_bf16(3.0f) == 3.0f);
    return check_report("test_half");
}
