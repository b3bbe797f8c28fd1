/*
 * FlashAttention-2 forward on CDNA matrix cores (MFMA 32x32x8, f16 or bf16 operands, f32
 * accumulation). This header is what the mfma_flash and mfma_flash_split_kv variants share: the
 * block shape, the support check and the launcher. The kernel is instantiated once, in
 * mfma_flash.cu, so that the two variants do not compile it twice.
 *
 * A block is four 64-lane waves over 128 query rows; wave w owns rows 32w..32w+31 of them (four
 * waves share each K/V tile: see PERFORMANCE.md for why four). Q stays in registers as A
 * operands for the whole pass. Per tile of 32 keys the block stages K (as [key][dim]) and V
 * transposed (as [dim][key]) in LDS, both in the operand type; each wave then
 *   S = Q K^T           d/8 MFMAs into one 32x32 f32 accumulator,
 *   online softmax      in f32 on the accumulator: a row sits in one register of 32 lanes, so
 *                       its max and sum are 5-step butterflies (mfma_layout.h),
 *   P -> LDS            rounded to the operand type, written in D's layout, read in A's,
 *   O += P V            4 MFMAs per 32 output columns.
 * Head dims are padded to D (64, 128 or 256) with zeros, so any d <= 256 runs. Masked scores are
 * set to -inf (a select, so a NaN key never leaks into rows that cannot see it); padding keys
 * past Nkv are staged as zeros.
 *
 * Split-KV: blockIdx.y picks a range of keys; with a workspace the block writes its normalised
 * partial O and (m, l) as split_kv.h lays out, and fp_split_kv_merge combines them.
 *
 * Known limit: a NaN in V at a key that the causal mask hides from some rows of a tile still
 * reaches those rows (0 * NaN in the P V product); NaN in Q or K is contained.
 *
 * Targets without MFMA (gfx1030) get an empty kernel body so every target's code object has the
 * same kernels; supports() declines them.
 */
#ifndef FP_HIP_MFMA_FLASH_CUH
#define FP_HIP_MFMA_FLASH_CUH

#include <string.h>

#include "../../cuda/kernels/common/attention_args.cuh"
#include "../../cuda/kernels/split_kv.h"
#include "../mfma_layout.h"

namespace mfma_flash {

constexpr int WAVES = 4;
constexpr int THREADS = WAVES * FP_MFMA_WAVE;
constexpr int BR = WAVES * FP_MFMA_M; /* query rows per block */
constexpr int BC = FP_MFMA_N;         /* keys per tile */
constexpr int D_MAX = 256;
static_assert(BR == FP_MATRIX_KERNEL_ROWS, "the planner's rows per block must match");

/* Host: does the device run MFMA code objects of this build (gfx90a or gfx940)? */
inline int device_has_mfma(const fp_gpu_device_props *props) {
    return strncmp(props->arch, "gfx90a", 6) == 0 || strncmp(props->arch, "gfx940", 6) == 0;
}

inline int supports_common(const fp_problem *p, const fp_gpu_device_props *props,
                           char *why, size_t why_len) {
    if (!device_has_mfma(props)) {
        snprintf(why, why_len, "MFMA path needs a gfx90a or gfx940 device, this is %s",
                 props->arch[0] ? props->arch : "unknown");
        return 0;
    }
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "MFMA path takes f16 or bf16 inputs, not f32");
        return 0;
    }
    if (p->head_dim > D_MAX) {
        snprintf(why, why_len, "head_dim = %lld exceeds the MFMA path's %d",
                 (long long)p->head_dim, D_MAX);
        return 0;
    }
    return fp_attn_sizes_fit(p, why, why_len);
}

/* Enqueues the forward; split (NULL: one pass) shares the keys out in whole tiles of BC, writes
 * the partials to L->workspace (split_kv.h layout) and merges them. Defined in mfma_flash.cu,
 * the one file that instantiates the kernel. */
gpuError_t launch(const fp_gpu_launch *L, const fp_split_kv_params *split);

} // namespace mfma_flash

#endif /* FP_HIP_MFMA_FLASH_CUH */
