/*
 * fa2_f32_split_kv: the fa2_f32 forward with the keys split across blocks and the partials
 * merged (split_kv.h), for problems whose B*Hq*ceil(Nq/Br) blocks leave the GPU idle: the
 * single-head N = d = 1024 shape, decoding with Nq = 1.
 */
#include "../kernel_list.h"
#include "fa2_f32.cuh"

namespace {

/* A split shorter than this spends more on its fixed costs (Q staging, epilogue, merge) than
 * the parallelism returns. */
constexpr int MIN_KEYS_PER_SPLIT = 128;

int supports(const fp_problem *p, const fp_gpu_device_props *props, fp_gpu_kernel_params *params,
             char *why, size_t why_len) {
    if (!fa2_f32::supports_common(p, props, why, why_len)) return 0;
    if (!fp_split_kv_takes(p, why, why_len)) return 0;
    const int br = fa2_f32::block_rows(p);
    const int splits = fp_split_kv_choose(p, props, br, MIN_KEYS_PER_SPLIT);
    if (splits > 1) params->split_kv = fp_split_kv_share(p, splits, fa2_f32::block_cols(p));
    if (params->split_kv.splits < 2) {
        snprintf(why, why_len,
                 "splitting does not pay: %lld blocks of %d rows already fill the GPU "
                 "or Nkv = %lld is too short",
                 (long long)(p->batch * p->heads_q * ((p->seq_q + br - 1) / br)), br,
                 (long long)p->seq_kv);
        return 0;
    }
    return 1;
}

gpuError_t launch(const fp_gpu_launch *L) { return fa2_f32::launch(L, &L->params->split_kv); }

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_fa2_f32_split_kv = {
    {"fa2_f32_split_kv",
     "fa2_f32 with the keys split across blocks and merged, for grids too small to fill the GPU",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_NO_FP8},
    supports,
    fp_split_kv_kernel_workspace,
    launch,
};
