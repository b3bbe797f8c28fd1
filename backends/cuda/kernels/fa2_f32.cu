/*
 * fa2_f32: FlashAttention-2 forward on the CUDA cores in exact float32, any d up to 1024
 * (see fa2_f32.cuh). One pass over the keys per query tile; no workspace.
 */
#include "../kernel_list.h"
#include "fa2_f32.cuh"

namespace {

int supports(const fp_problem *p, const fp_gpu_device_props *props, int64_t *param,
             char *why, size_t why_len) {
    if (!fa2_f32::supports_common(p, props, why, why_len)) return 0;
    param[0] = fa2_f32::block_rows(p);
    return 1;
}

gpuError_t launch(const fp_gpu_launch *L) { return fa2_f32::launch(L, 1); }

} // namespace

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_fa2_f32 = {
    {"fa2_f32",
     "FlashAttention-2 on CUDA cores, exact f32 (f16/bf16 converted on load), register-blocked, "
     "d <= 1024",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    supports,
    NULL,
    launch,
};
