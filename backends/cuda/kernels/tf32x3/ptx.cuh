/*
 * The 3xTF32 pieces of the f32 tensor-core forward: splitting an f32 into two tf32 halves, and
 * one m16n8k8 product of split operands. Callers compile these only for __CUDA_ARCH__ >= 800.
 */
#ifndef FP_TF32X3_PTX_CUH
#define FP_TF32X3_PTX_CUH

#include <stdint.h>

/* x = big + small + e with big = tf32(x), small = tf32(x - big) (both round to nearest, ties
 * away) and |e| <= 2^-22 |x|: the pair carries about 21 significant bits of x where one tf32
 * carries 11. x - big is exact in f32. */
struct fp_tf32_pair {
    uint32_t big, small;
};

static __device__ __forceinline__ fp_tf32_pair fp_tf32_split(float x)
{
    fp_tf32_pair p;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(p.big) : "f"(x));
    const float rest = x - __uint_as_float(p.big);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(p.small) : "f"(rest));
    return p;
}

static __device__ __forceinline__ void fp_mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1,
                                                   uint32_t a2, uint32_t a3, uint32_t b0,
                                                   uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* d += a * b to about f32 accuracy: big*big + big*small + small*big, the small*small term
 * (below 2^-22 of the product) dropped. The small terms go first, while d is still small
 * relative to them in the first k-step. */
static __device__ __forceinline__ void fp_mma_3xtf32(float (&d)[4], const fp_tf32_pair (&a)[4],
                                                     const fp_tf32_pair &b0,
                                                     const fp_tf32_pair &b1)
{
    fp_mma_tf32(d, a[0].small, a[1].small, a[2].small, a[3].small, b0.big, b1.big);
    fp_mma_tf32(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.small, b1.small);
    fp_mma_tf32(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.big, b1.big);
}

#endif /* FP_TF32X3_PTX_CUH */
