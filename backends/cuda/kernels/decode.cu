/*
 * Variant decode: up to FP_DECODE_MAX_QUERIES query rows per sequence against a long K/V cache,
 * on the CUDA cores (decode/decode_kernel.cuh), at the bandwidth of reading K and V once. It
 * takes every dtype and every API v2 forward feature (window, softcap, ALiBi, bias, sinks,
 * varlen, paged K/V, FP8 inputs) for head dims 32, 64, 128 and 256. Its rows per block are few
 * (1, 4 or 8: what the registers hold), so decode_mma takes f16/bf16 problems with more rows
 * per kv head. The HIP build compiles the same kernel (vector loads in place of cp.async) and
 * leaves FP8 out, its conversions being CUDA's.
 */
#include "../kernel_list.h"
#include "decode/decode_host.h"

#if FP_GPU_CUDA
/* The ring's 64 KB per block leaves room for three blocks on sm_80 and sm_90. */
#define FP_DECODE_BLOCKS_PER_SM 3
#define FP_DECODE_FP8_FEATURE   FP_FEATURE_FP8
#else
/* A block's ring or merge (32 KB) and its statistics: one fits a CU's 64 KB of LDS. */
#define FP_DECODE_BLOCKS_PER_SM 1
#define FP_DECODE_FP8_FEATURE   0u
#endif

namespace {

int tile_keys(const fp_problem *p) {
    return FP_DECODE_STAGE_BYTES / 2 / (int)(p->head_dim * fp_decode_elem_bytes(p->dtype));
}

/* Rows per block: 1, 4 or 8, the fewest that hold the group's rows, within what the registers
 * allow (fp_decode_shape::MAX_ROWS). */
int block_rows(const fp_problem *p) {
    const int n = 16 / fp_decode_elem_bytes(p->dtype);
    const int row_vecs = (int)p->head_dim / n;
    const int lanes = row_vecs < 32 ? row_vecs : 32;
    const int elems = row_vecs / lanes * n;
    const int most = 64 / elems < 8 ? 64 / elems : 8;
    const int64_t want = p->heads_q / p->heads_kv * p->seq_q;
    if (want <= 1) return 1;
    if (want <= 4 || most < 8) return 4;
    return 8;
}

int supports(const fp_problem *p, const fp_gpu_device_props *props, fp_gpu_kernel_params *params,
             char *why, size_t why_len) {
    if (!fp_decode_common_support(p, props, "decode", why, why_len)) return 0;
    if (p->head_dim != 32 && p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256) {
        snprintf(why, why_len, "head_dim %lld: decode is built for 32, 64, 128 and 256",
                 (long long)p->head_dim);
        return 0;
    }
    return fp_decode_share(p, props, block_rows(p), tile_keys(p), FP_DECODE_BLOCKS_PER_SM,
                           &params->decode, why, why_len);
}

template <typename T, int D, int ROWS> gpuError_t launch_rows(const fp_gpu_launch *L) {
    return fp_decode_launch<fp_decode_kernel<T, D, ROWS>, fp_decode_smem<T, D, ROWS>::BYTES>(
        L, fp_decode_shape<T, D>::TILE_KEYS);
}

template <typename T, int D> gpuError_t launch_dim(const fp_gpu_launch *L) {
    switch (L->params->decode.rows) {
    case 1: return launch_rows<T, D, 1>(L);
    case 4: return launch_rows<T, D, 4>(L);
    default:
        if constexpr (fp_decode_shape<T, D>::MAX_ROWS >= 8) return launch_rows<T, D, 8>(L);
        return gpuErrorInvalidValue;
    }
}

template <typename T> gpuError_t launch_type(const fp_gpu_launch *L) {
    switch (L->p.head_dim) {
    case 32: return launch_dim<T, 32>(L);
    case 64: return launch_dim<T, 64>(L);
    case 128: return launch_dim<T, 128>(L);
    default: return launch_dim<T, 256>(L);
    }
}

/* The ring's copies take 16 aligned bytes: the strides were checked by supports(), the base
 * pointers can only be checked here. */
gpuError_t launch(const fp_gpu_launch *L) {
    if (((uintptr_t)L->k | (uintptr_t)L->v) % 16 != 0) return gpuErrorMisalignedAddress;
    switch (L->p.dtype) {
    case FLASHPORT_F32: return launch_type<float>(L);
    case FLASHPORT_F16: return launch_type<gpuHalf>(L);
    case FLASHPORT_BF16: return launch_type<gpuBFloat16>(L);
#if FP_GPU_CUDA
    case FLASHPORT_FP8_E4M3: return launch_type<fp_e4m3>(L);
    case FLASHPORT_FP8_E5M2: return launch_type<fp_e5m2>(L);
#else
    case FLASHPORT_FP8_E4M3:
    case FLASHPORT_FP8_E5M2: break; /* not claimed (FP_DECODE_FP8_FEATURE) */
#endif
    case FLASHPORT_F64: break; /* f64 problems reach only variants that claim FP_FEATURE_F64 */
    }
    return gpuErrorInvalidValue;
}

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_decode = {
    {"decode",
     "decode at memory bandwidth without matrix units: up to 16 query rows per sequence, the "
     "query heads of a kv head in one block, K/V through a shared-memory ring (cp.async on "
     "CUDA), keys split across blocks; every dtype (FP8 on CUDA), paged and varlen K/V, every "
     "mask",
     FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW | FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS |
         FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED | FP_DECODE_FP8_FEATURE},
    supports,
    fp_decode_workspace,
    launch,
};
