/*
 * The .tf32 shapes of wgmma.mma_async that the 3xTF32 Hopper forward issues (PTX ISA,
 * "wgmma.mma_async", kind tf32: m64nNk8, f32 accumulators, both shared operands K-major, no
 * transpose immediates), as members of fp_wgmma_tf32<N>, N the product's columns:
 *
 *   - ss: A and B from shared memory (S = Q K^T), N = the key tile (32 or 64);
 *   - rs: A from registers (P, tf32_layout.h's A map, one tf32 a register), B from shared
 *     memory (V^T), N = the head dim (64 or 128).
 *
 * Each operand is a tf32 bit pattern in a 32-bit word; the tensor core reads its 19 high bits,
 * which is what the 3xTF32 split relies on (kernels/tf32x3/tf32_split.cuh). Fences, commit and
 * wait are wgmma_ops.cuh's, whose accumulator operand lists these reuse. Compiled only for
 * sm_90a.
 */
#ifndef FP_HOPPER_WGMMA_TF32_CUH
#define FP_HOPPER_WGMMA_TF32_CUH

#include <stdint.h>

#include "wgmma_ops.cuh"

/* The 16-accumulator lists of N = 32, as wgmma_ops.cuh lists 32 and more. */
#define FP_WGMMA_NUMS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FP_WGMMA_OUT16(d)                                                                          \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15])
#define FP_WGMMA_ACC16 "{" FP_WGMMA_NUMS16 "}"

/* d (+)= A B, accumulate = 0 overwriting d. */
template <int N> struct fp_wgmma_tf32;

/* ACC and OUT list the N / 2 accumulators; the other operands' numbers follow theirs: A, B and
 * P (the accumulate predicate) for ss, A0 (the first of the four A registers), B and P for rs. */
#define FP_WGMMA_TF32_SS(N, ACC, OUT, A, B, P)                                                     \
    static __device__ __forceinline__ void ss(float(&d)[N / 2], uint64_t a, uint64_t b,            \
                                              int accumulate) {                                    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " ACC ", " A ", " B  \
                     ", p, 1, 1;\n}\n"                                                             \
                     : OUT(d)                                                                      \
                     : "l"(a), "l"(b), "r"(accumulate));                                           \
    }
#define FP_WGMMA_TF32_RS(N, ACC, OUT, A0, A1, A2, A3, B, P)                                        \
    static __device__ __forceinline__ void rs(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t b, \
                                              int accumulate) {                                    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " ACC ", {" A0       \
                     ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1;\n}\n"                             \
                     : OUT(d)                                                                      \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));       \
    }

template <> struct fp_wgmma_tf32<32> {
    FP_WGMMA_TF32_SS(32, FP_WGMMA_ACC16, FP_WGMMA_OUT16, "%16", "%17", "%18")
};
template <> struct fp_wgmma_tf32<64> {
    FP_WGMMA_TF32_SS(64, FP_WGMMA_ACC32, FP_WGMMA_OUT32, "%32", "%33", "%34")
    FP_WGMMA_TF32_RS(64, FP_WGMMA_ACC32, FP_WGMMA_OUT32, "%32", "%33", "%34", "%35", "%36", "%37")
};
template <> struct fp_wgmma_tf32<128> {
    FP_WGMMA_TF32_RS(128, FP_WGMMA_ACC64, FP_WGMMA_OUT64, "%64", "%65", "%66", "%67", "%68", "%69")
};
#undef FP_WGMMA_TF32_RS
#undef FP_WGMMA_TF32_SS

#endif /* FP_HOPPER_WGMMA_TF32_CUH */
