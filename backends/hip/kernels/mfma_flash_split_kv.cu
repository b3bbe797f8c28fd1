/*
 * mfma_flash_split_kv: mfma_flash with the keys split across blocks and the partials merged
 * (split_kv.h), for grids of B*Hq*ceil(Nq/128) blocks too small to fill the GPU.
 */
#include "kernel_list.h"
#include "mfma_flash.cuh"

namespace {

/* A split shorter than this spends more on its fixed costs (Q load, epilogue, merge) than the
 * parallelism returns. */
constexpr int MIN_KEYS_PER_SPLIT = 128;

int supports(const fp_problem *p, const fp_gpu_device_props *props,
             fp_gpu_kernel_params *params, char *why, size_t why_len) {
    if (!mfma_flash::supports_common(p, props, why, why_len)) return 0;
    const int splits = fp_split_kv_choose(p, props, mfma_flash::BR, MIN_KEYS_PER_SPLIT);
    if (splits > 1) params->split_kv = fp_split_kv_share(p, splits, mfma_flash::BC);
    if (params->split_kv.splits < 2) {
        snprintf(why, why_len,
                 "splitting does not pay: %lld blocks of %d rows already fill the GPU or "
                 "Nkv = %lld is too short",
                 (long long)(p->batch * p->heads_q * ((p->seq_q + mfma_flash::BR - 1) /
                                                      mfma_flash::BR)),
                 mfma_flash::BR, (long long)p->seq_kv);
        return 0;
    }
    return 1;
}

gpuError_t launch(const fp_gpu_launch *L) { return mfma_flash::launch(L, &L->params->split_kv); }

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_mfma_flash_split_kv = {
    {"mfma_flash_split_kv",
     "mfma_flash with the keys split across blocks and merged, for grids too small to fill the GPU",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    supports,
    fp_split_kv_kernel_workspace,
    launch,
};
