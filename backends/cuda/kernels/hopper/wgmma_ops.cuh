/*
 * Thin wrappers over the sm_90a warpgroup matrix instructions (PTX ISA, "wgmma.mma_async"):
 * the fence / commit / wait that order them, and the shapes the Hopper forward issues, each on
 * f16 or bf16 operands with f32 accumulation (fp_wgmma<T, N>, N the product's columns):
 *
 *   - ss: m64nNk16 with A and B from shared memory (S = Q K^T: both K-major, no transpose),
 *     N = the key tile (64, 80 or 128);
 *   - rs: m64nNk16 with A from registers and B from shared memory transposed (O += P V: P from
 *     the S accumulators, V stored key-major, i.e. N-major for the product), N = the head dim
 *     (64, 128 or 256).
 *
 * and, for FP8 inputs (fp_wgmma_fp8<T>, T e4m3 or e5m2, N = 128), the k32 forms: ss on two T
 * operands, rs with P in e4m3 from registers and V^T of type T. 8-bit wgmma reads both shared
 * operands K-major only (no transpose), hence V^T.
 *
 * The accumulators are "+f" operands, so the compiler keeps each in one register from the
 * wgmma that writes it to the wait that publishes it; fp_wgmma_fence_operand stops it from
 * moving other reads or writes of them across the asynchronous window. Fragment layouts and
 * descriptor fields are in fragment_layout.h. Compiled only for sm_90a.
 */
#ifndef FP_HOPPER_WGMMA_OPS_CUH
#define FP_HOPPER_WGMMA_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

/* Makes the register and shared-memory writes of this warpgroup visible to the wgmma that
 * follow (required before the first wgmma after the accumulators or A registers changed). */
static __device__ __forceinline__ void fp_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

/* Closes the wgmma issued since the last commit into one group. */
static __device__ __forceinline__ void fp_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most `pending` committed groups of this warpgroup are still running. */
template <int pending> static __device__ __forceinline__ void fp_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

/* Pins an accumulator register in place: no access to it moves across this point. */
template <int N> static __device__ __forceinline__ void fp_wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename T> struct fp_wgmma_type;
template <> struct fp_wgmma_type<__half> { static constexpr bool BF16 = false; };
template <> struct fp_wgmma_type<__nv_bfloat16> { static constexpr bool BF16 = true; };

/* Operand lists of the accumulator fragments, N / 2 f32 registers a thread, each list the one
 * before it and the next registers: FP_WGMMA_NUMS<n> the asm operand numbers %0 .. %(n - 1)
 * (FP_WGMMA_ACC<n> in braces, as wgmma takes them), FP_WGMMA_OUT<n>(d) the matching "+f"
 * operands d[0] .. d[n - 1]. */
#define FP_WGMMA_NUMS32                                                                            \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "   \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FP_WGMMA_OUT32(d)                                                                          \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FP_WGMMA_ACC32  "{" FP_WGMMA_NUMS32 "}"
#define FP_WGMMA_NUMS40 FP_WGMMA_NUMS32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FP_WGMMA_OUT40(d)                                                                          \
    FP_WGMMA_OUT32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),            \
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FP_WGMMA_ACC40 "{" FP_WGMMA_NUMS40 "}"
#define FP_WGMMA_NUMS64                                                                            \
    FP_WGMMA_NUMS40 ", %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "     \
                    "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FP_WGMMA_OUT64(d)                                                                          \
    FP_WGMMA_OUT40(d), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),            \
        "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), \
        "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FP_WGMMA_ACC64 "{" FP_WGMMA_NUMS64 "}"
#define FP_WGMMA_NUMS88                                                                            \
    FP_WGMMA_NUMS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "     \
                    "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define FP_WGMMA_OUT88(d)                                                                          \
    FP_WGMMA_OUT64(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]),            \
        "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
        "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), \
        "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FP_WGMMA_NUMS128                                                                           \
    FP_WGMMA_NUMS88                                                                                \
        ", %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, "   \
        "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "     \
        "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FP_WGMMA_OUT128(d)                                                                         \
    FP_WGMMA_OUT88(d), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),            \
        "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), \
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),        \
        "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),        \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]),        \
        "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),        \
        "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define FP_WGMMA_ACC128 "{" FP_WGMMA_NUMS128 "}"

/* d (+)= A B, accumulate = 0 overwriting d. ss: A and B K-major in shared memory (descriptors
 * a and b). rs: A from registers (the A fragment of fragment_layout.h, two elements a
 * register), B N-major in shared memory (descriptor b; the last immediate transposes it). */
template <typename T, int N> struct fp_wgmma;

/* The two forms of m64nNk16 as members of fp_wgmma<T, N>, on T's operands. ACC and OUT list
 * the N / 2 accumulators (FP_WGMMA_ACC<N/2>, FP_WGMMA_OUT<N/2>), and the other operands'
 * numbers follow theirs: A, B and P (the accumulate predicate) for ss, A0 (the first of the
 * four A registers), B and P for rs. */
#define FP_WGMMA_SS_ASM(TY, N, ACC, OUT, A, B, P)                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " ACC ", " A ", " B \
                 ", p, 1, 1, 0, 0;\n}\n"                                                           \
                 : OUT(d)                                                                          \
                 : "l"(a), "l"(b), "r"(accumulate))
#define FP_WGMMA_SS(N, ACC, OUT, A, B, P)                                                          \
    static __device__ __forceinline__ void ss(float(&d)[N / 2], uint64_t a, uint64_t b,            \
                                              int accumulate) {                                    \
        if constexpr (fp_wgmma_type<T>::BF16)                                                      \
            FP_WGMMA_SS_ASM("bf16", N, ACC, OUT, A, B, P);                                         \
        else                                                                                       \
            FP_WGMMA_SS_ASM("f16", N, ACC, OUT, A, B, P);                                          \
    }
#define FP_WGMMA_RS_ASM(TY, N, ACC, OUT, A0, A1, A2, A3, B, P)                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " ACC ", {" A0      \
                 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, 1;\n}\n"                              \
                 : OUT(d)                                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
#define FP_WGMMA_RS(N, ACC, OUT, A0, A1, A2, A3, B, P)                                             \
    static __device__ __forceinline__ void rs(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t b, \
                                              int accumulate) {                                    \
        if constexpr (fp_wgmma_type<T>::BF16)                                                      \
            FP_WGMMA_RS_ASM("bf16", N, ACC, OUT, A0, A1, A2, A3, B, P);                            \
        else                                                                                       \
            FP_WGMMA_RS_ASM("f16", N, ACC, OUT, A0, A1, A2, A3, B, P);                             \
    }

template <typename T> struct fp_wgmma<T, 64> {
    FP_WGMMA_SS(64, FP_WGMMA_ACC32, FP_WGMMA_OUT32, "%32", "%33", "%34")
    FP_WGMMA_RS(64, FP_WGMMA_ACC32, FP_WGMMA_OUT32, "%32", "%33", "%34", "%35", "%36", "%37")
};
template <typename T> struct fp_wgmma<T, 80> {
    FP_WGMMA_SS(80, FP_WGMMA_ACC40, FP_WGMMA_OUT40, "%40", "%41", "%42")
};
template <typename T> struct fp_wgmma<T, 128> {
    FP_WGMMA_SS(128, FP_WGMMA_ACC64, FP_WGMMA_OUT64, "%64", "%65", "%66")
    FP_WGMMA_RS(128, FP_WGMMA_ACC64, FP_WGMMA_OUT64, "%64", "%65", "%66", "%67", "%68", "%69")
};
template <typename T> struct fp_wgmma<T, 256> {
    FP_WGMMA_RS(256, FP_WGMMA_ACC128, FP_WGMMA_OUT128, "%128", "%129", "%130", "%131", "%132",
                "%133")
};
#undef FP_WGMMA_RS
#undef FP_WGMMA_RS_ASM
#undef FP_WGMMA_SS
#undef FP_WGMMA_SS_ASM

/* The FP8 shapes, N = 128: S = Q K^T (m64n128k32, both T, K-major) and O += P V (m64n128k32,
 * A = P in e4m3 from the registers of fragment_layout.h's 8-bit A map, B = V^T of type T,
 * K-major). */
template <typename T> struct fp_wgmma_fp8;
#define FP_WGMMA_FP8(T, TY)                                                                        \
    template <> struct fp_wgmma_fp8<T> {                                                           \
        static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b,          \
                                                  int accumulate) {                                \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                              \
                         "wgmma.mma_async.sync.aligned.m64n128k32.f32." TY "." TY                  \
                         " " FP_WGMMA_ACC64 ", %64, %65, p, 1, 1;\n}\n"                            \
                         : FP_WGMMA_OUT64(d)                                                       \
                         : "l"(a), "l"(b), "r"(accumulate));                                       \
        }                                                                                          \
        static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4],          \
                                                  uint64_t b, int accumulate) {                    \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                              \
                         "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." TY " " FP_WGMMA_ACC64 \
                         ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"                              \
                         : FP_WGMMA_OUT64(d)                                                       \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));   \
        }                                                                                          \
    };
FP_WGMMA_FP8(__nv_fp8_e4m3, "e4m3")
FP_WGMMA_FP8(__nv_fp8_e5m2, "e5m2")
#undef FP_WGMMA_FP8

/* Four f32 values rounded to e4m3 (saturating to +-448) in one register, x0 in the low byte:
 * P's 8-bit A operand. */
static __device__ __forceinline__ uint32_t fp_pack_e4m3x4(float x0, float x1, float x2, float x3) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* Register budgets of warp specialisation (setmaxnreg): the producer gives registers back, the
 * consumers take them. Counts are multiples of 8 in [24, 256]; every warp of a warpgroup
 * executes the same one. */
template <int regs> static __device__ __forceinline__ void fp_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
}
template <int regs> static __device__ __forceinline__ void fp_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
}

#endif /* FP_HOPPER_WGMMA_OPS_CUH */
