/*
 * fa2_f32: FlashAttention-2 forward on the CUDA cores in exact float32, any d up to 1024
 * (see fa2_f32.cuh). One pass over the keys per query tile; no workspace.
 */
#include "../kernel_list.h"
#include "fa2_f32.cuh"

namespace {

int supports(const fp_problem *p, const fp_gpu_device_props *props,
             fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    return fa2_f32::supports_common(p, props, why, why_len);
}

gpuError_t launch(const fp_gpu_launch *L) { return fa2_f32::launch(L, NULL); }

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
