/* The host FP8 conversions (fp_fp8.h) against a model written from the OCP formats' definitions:
 * every code decodes to sign * 2^(e - bias) * (1 + m / 2^M) (subnormals 2^(1 - bias) * m / 2^M),
 * and every float32 of a sweep encodes to the nearest code, ties to the even code, with E4M3
 * saturating at 448 and E5M2 rounding past 57344 to infinity. */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "fp_fp8.h"

typedef struct format {
    const char *name;
    int man, bias;
    uint8_t max_code; /* largest finite magnitude */
    int has_inf;
    float (*decode)(uint8_t);
    uint8_t (*encode)(float);
} format;

static const format formats[] = {
    {"e4m3", 3, 7, 0x7e, 0, fp_e4m3_to_f32, fp_f32_to_e4m3},
    {"e5m2", 2, 15, 0x7b, 1, fp_e5m2_to_f32, fp_f32_to_e5m2},
};

/* The value of magnitude code c from the definition; past the largest finite code it gives the
 * value the grid would continue with. */
static double value(const format *f, unsigned c) {
    const unsigned e = c >> f->man, m = c & ((1u << f->man) - 1u);
    if (e == 0) return ldexp((double)m, 1 - f->bias - f->man);
    return ldexp(1.0 + ldexp((double)m, -f->man), (int)e - f->bias);
}

/* The code the rules give for finite |x|: the nearest of the finite grid, extended by one step
 * past the largest value, ties to the even code; that extra step is infinity for E5M2 and
 * saturates to the largest value for E4M3. */
static unsigned expected_code(const format *f, double x) {
    unsigned lo = 0, hi = f->max_code; /* the largest code whose value is <= x */
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        if (value(f, mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    const double below = value(f, lo), above = value(f, lo + 1);
    unsigned code = lo;
    if (x - below > above - x || (x - below == above - x && (lo & 1u))) code = lo + 1;
    if (code > f->max_code) code = f->has_inf ? f->max_code + 1u : f->max_code;
    return code;
}

static void check_format(const format *f) {
    /* Decoding: every finite code from the definition, NaN and infinity codes by rule. */
    for (unsigned c = 0; c < 256; c++) {
        const float got = f->decode((uint8_t)c);
        const unsigned mag = c & 0x7fu;
        const double sign = c & 0x80u ? -1.0 : 1.0;
        if (mag <= f->max_code)
            CHECK((double)got == sign * value(f, mag) && !!signbit(got) == (c >= 128));
        else if (f->has_inf && mag == 0x7cu)
            CHECK(isinf(got) && !!signbit(got) == (c >= 128));
        else
            CHECK(isnan(got));
    }
    CHECK(value(f, f->max_code) == (f->has_inf ? 57344.0 : 448.0));
    /* Every finite code survives the round trip, signed zero included. */
    int trips = 1;
    for (unsigned c = 0; c < 256; c++)
        if ((c & 0x7fu) <= f->max_code) trips &= f->encode(f->decode((uint8_t)c)) == c;
    CHECK(trips);
    /* Encoding: a sweep over all float32 bit patterns, both signs. A sparse sweep misses the
     * exact midpoints, so each grid value's midpoints to both neighbours are added. */
    int bad = 0;
    for (uint64_t u = 0; u <= 0xffffffffu && bad < 5; u += 4099) {
        const float x = fp_bits_f32((uint32_t)u);
        if (isnan(x)) continue;
        const uint8_t got = f->encode(x);
        const unsigned want =
            isinf(x) ? (f->has_inf ? 0x7cu : f->max_code) : expected_code(f, fabs((double)x));
        if (got != ((x < 0 || (x == 0 && signbit(x)) ? 0x80u : 0u) | want)) {
            fprintf(stderr, "%s: %a encodes to 0x%02x, expected magnitude 0x%02x\n", f->name,
                    (double)x, got, want);
            bad++;
        }
    }
    for (unsigned c = 0; c <= f->max_code && bad < 5; c++) {
        const float mid = (float)((value(f, c) + value(f, c + 1)) / 2.0); /* exact in float32 */
        const unsigned want = expected_code(f, mid);
        if (f->encode(mid) != want || f->encode(-mid) != (0x80u | want)) {
            fprintf(stderr, "%s: midpoint %a encodes to 0x%02x, expected 0x%02x\n", f->name,
                    (double)mid, f->encode(mid), want);
            bad++;
        }
    }
    CHECK(bad == 0);
    /* NaN keeps its sign and becomes the format's NaN. */
    CHECK(isnan(f->decode(f->encode(NAN))));
    CHECK((f->encode(-NAN) & 0x80u) && isnan(f->decode(f->encode(-NAN))));
}

int main(void) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) check_format(&formats[i]);
    /* The rules at the edges, spelled out. */
    CHECK(fp_f32_to_e4m3(448.0f) == 0x7e && fp_f32_to_e4m3(464.0f) == 0x7e); /* 464: tie, even */
    CHECK(fp_f32_to_e4m3(1e30f) == 0x7e && fp_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK(fp_f32_to_e4m3(NAN) == 0x7f);
    CHECK(fp_f32_to_e5m2(57344.0f) == 0x7b && fp_f32_to_e5m2(61439.0f) == 0x7b);
    CHECK(fp_f32_to_e5m2(61440.0f) == 0x7c && fp_f32_to_e5m2(-INFINITY) == 0xfc);
    CHECK(fp_f32_to_e5m2(NAN) == 0x7e);
    CHECK(fp_e4m3_to_f32(0x01) == 0x1p-9f && fp_e5m2_to_f32(0x01) == 0x1p-16f);    /* subnormals */
    CHECK(fp_f32_to_e4m3(0x1p-10f) == 0x00 && fp_f32_to_e4m3(0x1.8p-10f) == 0x01); /* half, above */
    CHECK(fp_round_e4m3(0.3f) == 0.3125f && fp_round_e5m2(0.3f) == 0.3125f);
    return check_report("test_fp8");
}
