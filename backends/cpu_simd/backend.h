/* Shared by the files of the cpu_simd backend. */
#ifndef CS_BACKEND_H
#define CS_BACKEND_H

#include "fp_backend.h"
#include "kernels/kernel_ops.h"

#define CS_NAME "cpu_simd"

enum {
    CS_VARIANT_AVX2 = 0,
    CS_VARIANT_PORTABLE = 1,
    CS_VARIANT_AVX512 = 2,
    CS_VARIANT_AVX512BF16 = 3,
    CS_VARIANT_AMXBF16 = 4,
    CS_VARIANT_COUNT = 5
};

/* The core's services, kept by the entry function. */
extern const fp_host *cs_host;

/* Whether a path can run here (with binary16 conversions when f16 is set: f16 data or FP8
 * E5M2 input), and why or why not. */
int cs_avx2_usable(int f16, const char **why);
int cs_avx512_usable(const char **why);
int cs_avx512bf16_usable(const char **why);
int cs_amxbf16_usable(const char **why);
/* The path of bf16 products that the planner gives bf16 problems of the tile path: amxbf16
 * where Linux grants the tiles, else avx512bf16 where cs_bf16_dot_vs_fma() says its products
 * pay; -1 for the float32 products. why says which and why. */
int cs_bf16_tile_variant(char *why, size_t len);
/* A bf16 decode of this many query rows a KV head (heads per KV head x positions) or more runs
 * on amxbf16's tile path where the tiles are granted. With both products on the tiles, at 16
 * rows 1.08-1.81x the decode path's speed (Nkv = 4096 and 32768, d = 64 and 128, GQA, MHA and
 * MQA, 1 and 2 threads), except a single KV head on two threads (0.80x: it is one tile, where
 * the decode path splits the keys); at 8 rows 0.84-1.09x. The choice never depends on the
 * thread count, so that results do not either. */
#define CS_AMX_DECODE_MIN_ROWS 16
int cs_usable(int variant, int f16, const char **why);
/* The path the planner takes when none is forced, with the reason in why[len]. */
int cs_auto_variant(int f16, char *why, unsigned long len);
/* The kernels of a variant (NULL when this build lacks them), and its name. */
const cs_kernel_ops *cs_variant_ops(int variant);
const char *cs_variant_name(int variant);

/* The one planning function (fp_device_ops.plan). */
flashport_status cs_plan(const fp_problem *p, fp_op op, int forced, fp_plan *out);

/* f32 FMA rate of one core and of all threads, and copy bandwidth (fp_device_ops.measure_peaks). */
flashport_status cs_measure_peaks(flashport_peaks *out);

/* Read-only streaming bandwidth in GB/s over twice the last-level cache, every thread reading
 * (fp_device_ops.measure_read_bandwidth). */
flashport_status cs_measure_read_bandwidth(double *gbps, char *method, size_t method_size);

/* FLOP/s of vdpbf16ps over that of the AVX-512 FMA on one core, measured once per process
 * (~10 ms, at the first call); 0 where either is not usable. The planner's test of whether bf16
 * products pay. */
double cs_bf16_dot_vs_fma(void);

#endif /* CS_BACKEND_H */
