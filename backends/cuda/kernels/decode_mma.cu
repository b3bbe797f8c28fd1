/*
 * Variant decode_mma: decode (up to FP_DECODE_MAX_QUERIES query rows per sequence against a
 * long K/V cache) on the tensor cores, for f16 and bf16 at head dims 64, 128 and 256
 * (decode/decode_mma_kernel.cuh). Blocks take 16 rows of one kv head, so it is chosen when a
 * kv head has more than one row (GQA, or several queries): then the CUDA-core decode kernel is
 * bound by its FMAs, this one by reading K and V. Every API v2 forward feature but FP8.
 */
#include "decode/decode_host.h"
#include "decode/decode_mma_kernel.cuh"

namespace {

template <int D> int blocks_per_sm(const fp_gpu_device_props *props) {
    const size_t per_block = fp_decode_mma_smem<D>::BYTES + 1024; /* the runtime's reserve */
    const int n = props->smem_per_sm > 0 ? (int)(props->smem_per_sm / per_block) : 1;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

int supports(const fp_problem *p, const fp_gpu_device_props *props, fp_gpu_kernel_params *params,
             char *why, size_t why_len) {
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "decode_mma takes f16 and bf16 (decode takes the rest)");
        return 0;
    }
    if (!fp_decode_common_support(p, props, "decode_mma", why, why_len)) return 0;
    int per_sm = 0;
    switch (p->head_dim) {
    case 64: per_sm = blocks_per_sm<64>(props); break;
    case 128: per_sm = blocks_per_sm<128>(props); break;
    case 256: per_sm = blocks_per_sm<256>(props); break;
    default:
        snprintf(why, why_len, "head_dim %lld: decode_mma is built for 64, 128 and 256",
                 (long long)p->head_dim);
        return 0;
    }
    if ((size_t)fp_decode_mma_smem<256>::BYTES > props->smem_per_block_optin &&
        p->head_dim == 256) {
        snprintf(why, why_len, "head_dim 256 needs %d bytes of shared memory per block",
                 fp_decode_mma_smem<256>::BYTES);
        return 0;
    }
    return fp_decode_share(p, props, FP_DECODE_MMA_ROWS, FP_DECODE_MMA_TILE_KEYS, per_sm,
                           &params->decode, why, why_len);
}

template <typename T> gpuError_t launch_type(const fp_gpu_launch *L) {
    switch (L->p.head_dim) {
    case 64:
        return fp_decode_launch<fp_decode_mma_kernel<T, 64>, fp_decode_mma_smem<64>::BYTES>(
            L, FP_DECODE_MMA_TILE_KEYS);
    case 128:
        return fp_decode_launch<fp_decode_mma_kernel<T, 128>, fp_decode_mma_smem<128>::BYTES>(
            L, FP_DECODE_MMA_TILE_KEYS);
    default:
        return fp_decode_launch<fp_decode_mma_kernel<T, 256>, fp_decode_mma_smem<256>::BYTES>(
            L, FP_DECODE_MMA_TILE_KEYS);
    }
}

/* cp.async copies 16 aligned bytes: the strides were checked by supports(), the base pointers
 * can only be checked here. */
gpuError_t launch(const fp_gpu_launch *L) {
    if (((uintptr_t)L->k | (uintptr_t)L->v) % 16 != 0) return gpuErrorMisalignedAddress;
    if (L->p.dtype == FLASHPORT_F16) return launch_type<__half>(L);
    return launch_type<__nv_bfloat16>(L);
}

} // namespace

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_decode_mma;
const fp_gpu_kernel fp_kernel_decode_mma = {
    {"decode_mma",
     "decode on the tensor cores: up to 16 query rows per sequence, 16 rows of a kv head per "
     "block as the M of mma.sync, K/V through a cp.async ring, keys split across blocks; f16 and "
     "bf16, paged and varlen K/V, every mask",
     FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW | FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS |
         FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED},
    supports,
    fp_decode_workspace,
    launch,
};
