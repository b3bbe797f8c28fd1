/*
 * What the stored elements of a kernel's tensors are worth, in float (OpenCL C 1.2). Build
 * options: DTYPE, the type of Q, K and V, and ODTYPE, that of O (the same but for FP8 inputs),
 * by flashport_dtype: 0 float, 1 IEEE half (through vload_half/vstore_half, so no cl_khr_fp16
 * is needed), 2 bfloat16 (bit shifts), 3 FP8 E4M3, 4 FP8 E5M2 (inputs only, decoded by bit
 * manipulation, each row times its descale factor).
 */

#define FP_CAT_(a, b) a##b
#define FP_CAT(a, b)  FP_CAT_(a, b)

#define FP_TYPE_0 float
#define FP_TYPE_1 half
#define FP_TYPE_2 ushort
#define FP_TYPE_3 uchar
#define FP_TYPE_4 uchar

#if DTYPE == 3
/* OCP E4M3 ("fn"): bias 7, no infinities, S.1111.111 is NaN, subnormals m * 2^-9. */
__attribute__((always_inline)) float e4m3_to_float(uchar x) {
    const uint e = (x >> 3) & 15u, m = x & 7u;
    const float mag = e ? as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    const float v = e == 15u && m == 7u ? NAN : mag;
    return x & 0x80u ? -v : v;
}
#endif

#if DTYPE == 4
/* OCP E5M2: bias 15, IEEE-like (exponent 31: infinity when m = 0, else NaN), subnormals
 * m * 2^-16. */
__attribute__((always_inline)) float e5m2_to_float(uchar x) {
    const uint e = (x >> 2) & 31u, m = x & 3u;
    const float mag = e == 31u ? (m ? NAN : INFINITY)
                      : e      ? as_float(((e + 112u) << 23) | (m << 21))
                               : (float)m * 0x1p-16f;
    return x & 0x80u ? -mag : mag;
}
#endif

#if ODTYPE == 2
/* Round to nearest even; NaN stays a (quiet) NaN. */
__attribute__((always_inline)) ushort float_to_bf16(float x) {
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
#endif

#define FP_LOAD_0(p, i) ((p)[i])
#define FP_LOAD_1(p, i) vload_half((size_t)(i), (p))
#define FP_LOAD_2(p, i) as_float((uint)(p)[i] << 16)
#define FP_LOAD_3(p, i) e4m3_to_float((p)[i])
#define FP_LOAD_4(p, i) e5m2_to_float((p)[i])

#define FP_STORE_0(p, i, x) ((p)[i] = (x))
#define FP_STORE_1(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#define FP_STORE_2(p, i, x) ((p)[i] = float_to_bf16(x))

#if DTYPE < 0 || DTYPE > 4 || ODTYPE < 0 || ODTYPE > 2 || (DTYPE < 3 && ODTYPE != DTYPE)
#error "DTYPE must be 0..4 (float, half, bfloat16, e4m3, e5m2), ODTYPE 0..2 (DTYPE below 3)"
#endif

typedef FP_CAT(FP_TYPE_, DTYPE) storage_t;
typedef FP_CAT(FP_TYPE_, ODTYPE) out_t;
#define LOAD(p, i)     FP_CAT(FP_LOAD_, DTYPE)(p, i)
#define STORE(p, i, x) FP_CAT(FP_STORE_, ODTYPE)(p, i, x)

#define FP8 (DTYPE >= 3)

/* The factor every element of one staged row is multiplied by as it is loaded: a sign (the
 * tiled kernel keeps scores unscaled and moves the sign of the scale into Q) and, for FP8, the
 * row's descale factor: f[base + pos / block] for the row at position pos of its sequence (per
 * tensor: base 0 and block INT_MAX, so one factor). */
typedef struct row_scale {
    float sign;
#if FP8
    __global const float *f;
    long base;
    int pos0, block; /* the position of row 0 of what is staged; positions per factor */
#endif
} row_scale;

#if FP8
#define ROW_FACTOR(rs, r) ((rs).sign * (rs).f[(rs).base + ((rs).pos0 + (r)) / (rs).block])
#else
#define ROW_FACTOR(rs, r) ((rs).sign)
#endif

__attribute__((always_inline)) row_scale make_row_scale(float sign, __global const float *f,
                                                        long base, int pos0, int block) {
    row_scale rs;
    rs.sign = sign;
#if FP8
    rs.f = f;
    rs.base = base;
    rs.pos0 = pos0;
    rs.block = block;
#endif
    return rs;
}
