/*
 * The 3xTF32 pieces of the f32 tensor-core forward: splitting an f32 into two tf32 halves, and
 * one m16n8k8 product of split operands. Callers compile these only for __CUDA_ARCH__ >= 800.
 */
#ifndef FP_TF32X3_TF32_SPLIT_CUH
#define FP_TF32X3_TF32_SPLIT_CUH

#include <stdint.h>

#include "../common/ptx.cuh"

/* x = big + small + e, |e| <= 2^-20 |x|: the pair carries about 20 significant bits of x where
 * one tf32 carries 11. big = x with its 13 low bits cleared (a tf32); x - big is then exact in
 * f32 and below 2^-10 |x|. small is handed to the mma as that f32: the tensor core reads only
 * its tf32 part (dropping or rounding the 13 low bits), within 2^-10 of small. Two
 * instructions; rounding big to nearest instead (one more add, or cvt.rna.tf32.f32 at about four
 * with its inf/NaN guard) halves e, but the f32 softmax around the products dominates the
 * error either way (tests/cuda_tf32x3_layout models the whole computation).
 * Non-finite x: a NaN makes small NaN (big may be inf), so it still reaches the product; an
 * infinity also makes small NaN, so its products are NaN where exact f32 would give +-inf. */
struct fp_tf32_pair {
    uint32_t big, small;
};

static __device__ __forceinline__ fp_tf32_pair fp_tf32_split(float x)
{
    fp_tf32_pair p;
    p.big = __float_as_uint(x) & 0xffffe000u;
    p.small = __float_as_uint(x - __uint_as_float(p.big));
    return p;
}

/* Term `term` of d += a * b to about f32 accuracy: 0 small*big, 1 big*small, 2 big*big; the
 * small*small term (below 2^-20 of the product) is dropped. Callers issue one term for several
 * independent accumulators before the next term, so that consecutive mma do not wait on each
 * other; the small terms go first, while d is still small next to them. */
static __device__ __forceinline__ void fp_mma_3xtf32_term(float (&d)[4], const fp_tf32_pair (&a)[4],
                                                          const fp_tf32_pair &b0,
                                                          const fp_tf32_pair &b1, int term)
{
    if (term == 0)
        fp_mma_m16n8k8_tf32(d, a[0].small, a[1].small, a[2].small, a[3].small, b0.big, b1.big);
    else if (term == 1)
        fp_mma_m16n8k8_tf32(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.small, b1.small);
    else
        fp_mma_m16n8k8_tf32(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.big, b1.big);
}

#endif /* FP_TF32X3_TF32_SPLIT_CUH */
