/*
 * Thin wrappers over the sm_90a warpgroup matrix instructions (PTX ISA, "wgmma.mma_async"):
 * the fence / commit / wait that order them, and the shapes the Hopper forward issues, each on
 * f16 or bf16 operands with f32 accumulation:
 *
 *   - m64n128k16 with A and B from shared memory (S = Q K^T: both K-major, no transpose);
 *   - m64n64k16 and m64n128k16 with A from registers and B from shared memory transposed
 *     (O += P V: P from the S accumulators, V stored key-major, i.e. N-major for the product).
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

/* Operand lists of the accumulator fragments: N / 2 f32 registers per thread. */
#define FP_WGMMA_ACC32                                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FP_WGMMA_OUT32(d)                                                                          \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FP_WGMMA_ACC64                                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define FP_WGMMA_OUT64(d)                                                                          \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])

/* d (+)= A B for m64n128k16, A and B K-major in shared memory (descriptors a and b);
 * accumulate = 0 overwrites d. */
template <typename T>
static __device__ __forceinline__ void fp_wgmma_ss_m64n128k16(float (&d)[64], uint64_t a,
                                                              uint64_t b, int accumulate) {
#define FP_WGMMA_SS(TY)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " FP_WGMMA_ACC64       \
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : FP_WGMMA_OUT64(d)                                                               \
                 : "l"(a), "l"(b), "r"(accumulate))
    if constexpr (fp_wgmma_type<T>::BF16)
        FP_WGMMA_SS("bf16");
    else
        FP_WGMMA_SS("f16");
#undef FP_WGMMA_SS
}

/* d (+)= A B for m64nNk16 (N = 64 or 128), A from registers (the A fragment of
 * fragment_layout.h, two elements a register), B N-major in shared memory (transposed: the
 * last immediate); accumulate = 0 overwrites d. */
template <typename T>
static __device__ __forceinline__ void fp_wgmma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                             uint64_t b, int accumulate) {
#define FP_WGMMA_RS(TY)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " FP_WGMMA_ACC32        \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                   \
                 : FP_WGMMA_OUT32(d)                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
    if constexpr (fp_wgmma_type<T>::BF16)
        FP_WGMMA_RS("bf16");
    else
        FP_WGMMA_RS("f16");
#undef FP_WGMMA_RS
}

template <typename T>
static __device__ __forceinline__ void
fp_wgmma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#define FP_WGMMA_RS(TY)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " FP_WGMMA_ACC64       \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                   \
                 : FP_WGMMA_OUT64(d)                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
    if constexpr (fp_wgmma_type<T>::BF16)
        FP_WGMMA_RS("bf16");
    else
        FP_WGMMA_RS("f16");
#undef FP_WGMMA_RS
}

/* O (+)= P V for a head dim of D columns: one m64nDk16. */
template <typename T, int D> struct fp_wgmma_pv;
template <typename T> struct fp_wgmma_pv<T, 64> {
    static __device__ __forceinline__ void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                               int accumulate) {
        fp_wgmma_rs_m64n64k16<T>(d, a, b, accumulate);
    }
};
template <typename T> struct fp_wgmma_pv<T, 128> {
    static __device__ __forceinline__ void run(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                               int accumulate) {
        fp_wgmma_rs_m64n128k16<T>(d, a, b, accumulate);
    }
};

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
