/*
 * Thin wrappers over the sm_80 PTX instructions the kernels and the peak micro-benchmarks use:
 * cp.async (global to shared, zero-filled past the source size), ldmatrix, mma.sync (m16n8k16
 * on f16 and bf16, m16n8k8 on tf32, f32 accumulation) and ex2.approx. The fragment_layout.h
 * of each kernel family documents which element each lane holds. Callers compile these only
 * for __CUDA_ARCH__ >= 800.
 */
#ifndef FP_KERNELS_PTX_CUH
#define FP_KERNELS_PTX_CUH

#include <stdint.h>

static __device__ __forceinline__ uint32_t fp_smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Copies src_bytes (0..16) from global src to the 16 bytes at shared dst and zero-fills the
 * rest; src_bytes = 0 reads nothing. Both addresses are 16-byte aligned. Bypasses L1 (.cg). */
static __device__ __forceinline__ void fp_cp_async_16(uint32_t dst, const void *src,
                                                      int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* The same for 4 bytes (src_bytes 0 or 4), through L1 (.ca: 4-byte copies may not bypass it). */
static __device__ __forceinline__ void fp_cp_async_4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void fp_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most `pending` of this thread's committed groups are still in flight. */
template <int pending> static __device__ __forceinline__ void fp_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

static __device__ __forceinline__ void fp_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void fp_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += a * b on one m16n8k16 tile of f16 operands, two to a register. */
static __device__ __forceinline__ void fp_mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4],
                                                           uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += a * b on one m16n8k16 tile of bf16 operands, two to a register. */
static __device__ __forceinline__ void fp_mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                            uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += a * b on one m16n8k8 tile of tf32 operands, each an f32 of which the tensor core reads
 * the tf32 part. Not volatile, so that the compiler may interleave independent products. */
static __device__ __forceinline__ void fp_mma_m16n8k8_tf32(float (&d)[4], uint32_t a0, uint32_t a1,
                                                           uint32_t a2, uint32_t a3, uint32_t b0,
                                                           uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 2^x in one MUFU.EX2 (relative error about 2^-22); results below 2^-126 flush to 0, which
 * the softmax weights can afford. 2^-inf = 0 and NaN stays NaN. exp2f would add a range
 * fix-up around every call. */
static __device__ __forceinline__ float fp_exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* tanh(x) in one MUFU.TANH (sm_75+, relative error about 2^-11); tanh(+-inf) = +-1 and NaN
 * stays NaN. */
static __device__ __forceinline__ float fp_tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif /* FP_KERNELS_PTX_CUH */
