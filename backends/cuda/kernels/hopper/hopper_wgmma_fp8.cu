/*
 * Variant hopper_wgmma_fp8: the Hopper forward of hopper/forward_kernel.cuh on FP8 inputs (e4m3
 * or e5m2 Q, K and V with descales per tensor or per block), S = Q K^T and O = P V by FP8 wgmma
 * (k32) into f32 accumulators, output f16, bf16 or f32. Head dim 128; causal and sliding
 * windows, sinks, GQA, Nq != Nkv and LSE. Softcap, ALiBi, bias, packed batches and paged caches
 * are not implemented here and are declined by the planner's feature check.
 *
 * Numerics (the FP8 precision class): the products of the stored FP8 values are summed by the
 * tensor cores, not as an exact f32 running sum (hence the class's looser LSE bound), and
 * descaled after the product; P is rounded to e4m3 (scaled by 2^8 to use its range) before
 * P V, as FlashAttention-3's FP8 path does, so each probability carries a relative error up to
 * 2^-4 and O about 1.5-2% relative L2 on random inputs (conformance's FP8 bounds: 5e-2 on O,
 * 1e-3 on the LSE).
 *
 * Two launches: the V^T pre-pass (v_transpose.cuh) into the workspace, then the forward. Per
 * block descales need K's and V's factor constant over a 128-key tile: blocks of a multiple of
 * 128 positions, or one block per sequence; other block sizes are declined by name.
 */
#include <stdio.h>

#include "../common/attention_args.cuh"
#include "../common/smem_limit.cuh"
#include "forward_kernel.cuh"
#include "tensor_map.h"
#include "v_transpose.cuh"

#define FP_HOPPER_FP8_D         128                                /* the one head dim built */
#define FP_HOPPER_FP8_BC        fp_hopper_input<__nv_fp8_e4m3>::BC /* keys of a tile */
#define FP_HOPPER_FP8_CONSUMERS 2 /* at d = 128 O leaves no registers for a third */
#define FP_HOPPER_FP8_BR        fp_hopper_block<FP_HOPPER_FP8_CONSUMERS>::BR

template <typename T>
using fp8_smem = fp_hopper_smem<T, FP_HOPPER_FP8_D, FP_HOPPER_FP8_BC, FP_HOPPER_FP8_BR>;

template <typename T>
static cudaError_t launch_instance(const CUtensorMap &qm, const CUtensorMap &km,
                                   const CUtensorMap &vm, const fp_hopper_params &prm, dim3 grid,
                                   cudaStream_t stream) {
    constexpr size_t smem = fp8_smem<T>::BYTES;
    cudaError_t err =
        fp_raise_smem_limit<fp_hopper_forward_kernel<T, FP_HOPPER_FP8_D, FP_HOPPER_FP8_BC,
                                                     FP_HOPPER_MODS_NONE, FP_HOPPER_FP8_CONSUMERS>,
                            smem>();
    if (err != cudaSuccess) return err;
    fp_hopper_forward_kernel<T, FP_HOPPER_FP8_D, FP_HOPPER_FP8_BC, FP_HOPPER_MODS_NONE,
                             FP_HOPPER_FP8_CONSUMERS>
        <<<grid, fp_hopper_block<FP_HOPPER_FP8_CONSUMERS>::THREADS, smem, stream>>>(qm, km, vm,
                                                                                    prm);
    return cudaGetLastError();
}

static const void *kernel_of(flashport_dtype dt) {
    return dt == FLASHPORT_FP8_E5M2
               ? reinterpret_cast<const void *>(
                     fp_hopper_forward_kernel<__nv_fp8_e5m2, FP_HOPPER_FP8_D, FP_HOPPER_FP8_BC,
                                              FP_HOPPER_MODS_NONE, FP_HOPPER_FP8_CONSUMERS>)
               : reinterpret_cast<const void *>(
                     fp_hopper_forward_kernel<__nv_fp8_e4m3, FP_HOPPER_FP8_D, FP_HOPPER_FP8_BC,
                                              FP_HOPPER_MODS_NONE, FP_HOPPER_FP8_CONSUMERS>);
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    if (p->dtype != FLASHPORT_FP8_E4M3 && p->dtype != FLASHPORT_FP8_E5M2) {
        snprintf(why, why_len, "takes FP8 (e4m3, e5m2) inputs only");
        return 0;
    }
    if (p->head_dim != FP_HOPPER_FP8_D) {
        snprintf(why, why_len, "head_dim %lld: the FP8 instance is built for %d only",
                 (long long)p->head_dim, FP_HOPPER_FP8_D);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if (p->descale == FLASHPORT_DESCALE_NONE) {
        snprintf(why, why_len, "FP8 inputs without descale factors");
        return 0;
    }
    const int tile = FP_HOPPER_FP8_BC;
    if (p->descale == FLASHPORT_DESCALE_BLOCK && p->descale_block % tile != 0 &&
        p->descale_block < p->seq_kv) {
        snprintf(why, why_len,
                 "FP8 descale blocks of %lld positions: K's and V's factors must hold over a "
                 "%d-key tile (blocks of a multiple of %d, or one block per sequence)",
                 (long long)p->descale_block, tile, tile);
        return 0;
    }
    /* Q and K through TMA; V through the pre-pass's 16-byte row loads: the same rule. */
    if (!fp_hopper_strides_fit("Q", &p->q, p->batch, p->heads_q, p->seq_q, 1, why, why_len) ||
        !fp_hopper_strides_fit("K", &p->k, p->batch, p->heads_kv, p->seq_kv, 1, why, why_len) ||
        !fp_hopper_strides_fit("V", &p->v, p->batch, p->heads_kv, p->seq_kv, 1, why, why_len))
        return 0;
    return fp_hopper_device_fits(props, fp8_smem<__nv_fp8_e4m3>::BYTES, kernel_of(p->dtype), why,
                                 why_len);
}

/* V^T: [batch][heads_kv][D][keys_pad] bytes. */
static size_t workspace(const fp_problem *p, const fp_gpu_kernel_params *params) {
    (void)params;
    return (size_t)(p->batch * p->heads_kv * FP_HOPPER_FP8_D * fp_hopper_vt_keys(p->seq_kv));
}

static cudaError_t launch(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    if (p->head_dim != FP_HOPPER_FP8_D || !L->workspace) return cudaErrorInvalidValue;
    if ((uintptr_t)L->v % 16 != 0) return cudaErrorMisalignedAddress;
    const int64_t keys_pad = fp_hopper_vt_keys(p->seq_kv);
    uint8_t *vt = static_cast<uint8_t *>(L->workspace);
    const dim3 vt_grid((unsigned)(keys_pad / FP_HOPPER_VT_KEYS),
                       (unsigned)(p->batch * p->heads_kv));
    fp_hopper_v_transpose<FP_HOPPER_FP8_D><<<vt_grid, FP_HOPPER_VT_THREADS, 0, L->stream>>>(
        static_cast<const uint8_t *>(L->v), p->v, (int)p->seq_kv, (int)p->heads_kv, (int)keys_pad,
        vt);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;

    CUtensorMap qm, km, vm;
    err = fp_hopper_encode(&qm, L->q, p->dtype, &p->q, p->batch, p->heads_q, p->seq_q, p->head_dim,
                           FP_HOPPER_FP8_BR);
    if (err == cudaSuccess)
        err = fp_hopper_encode(&km, L->k, p->dtype, &p->k, p->batch, p->heads_kv, p->seq_kv,
                               p->head_dim, FP_HOPPER_FP8_BC);
    /* V^T's map: rows are the head dim, columns the keys; a box is a tile's keys x D rows. */
    const flashport_strides vts = {p->heads_kv * FP_HOPPER_FP8_D * keys_pad,
                                   FP_HOPPER_FP8_D * keys_pad, keys_pad};
    if (err == cudaSuccess)
        err = fp_hopper_encode(&vm, vt, p->dtype, &vts, p->batch, p->heads_kv, FP_HOPPER_FP8_D,
                               keys_pad, FP_HOPPER_FP8_D);
    if (err != cudaSuccess) return err;

    fp_hopper_params prm = fp_hopper_params_make(L, FP_HOPPER_FP8_BC);
    const bool per_block = p->descale == FLASHPORT_DESCALE_BLOCK;
    prm.descale.q = static_cast<const float *>(L->args->q_descale);
    prm.descale.k = static_cast<const float *>(L->args->k_descale);
    prm.descale.v = static_cast<const float *>(L->args->v_descale);
    prm.descale.block =
        per_block ? (int)(p->descale_block < INT_MAX / 2 ? p->descale_block : INT_MAX / 2) : 0;
    prm.descale.q_blocks =
        per_block ? (int)((p->seq_q + p->descale_block - 1) / p->descale_block) : 0;
    prm.descale.kv_blocks =
        per_block ? (int)((p->seq_kv + p->descale_block - 1) / p->descale_block) : 0;
    const dim3 grid((unsigned)((p->seq_q + FP_HOPPER_FP8_BR - 1) / FP_HOPPER_FP8_BR),
                    (unsigned)(p->batch * p->heads_q));
    return p->dtype == FLASHPORT_FP8_E5M2
               ? launch_instance<__nv_fp8_e5m2>(qm, km, vm, prm, grid, L->stream)
               : launch_instance<__nv_fp8_e4m3>(qm, km, vm, prm, grid, L->stream);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_hopper_wgmma_fp8;
const fp_gpu_kernel fp_kernel_hopper_wgmma_fp8 = {
    {"hopper_wgmma_fp8",
     "FlashAttention-3 style forward on Hopper in FP8 (e4m3/e5m2 Q K V with descales, wgmma k32, "
     "P rounded to e4m3), d = 128, f16/bf16/f32 out; windows, sinks",
     FP_PRECISION_FP8, FP_FEATURE_FP8 | FP_FEATURE_WINDOW | FP_FEATURE_SINKS},
    supports,
    workspace,
    launch,
};
