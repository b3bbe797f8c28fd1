/*
 * What every Hopper variant's supports() asks of the device: compute capability 9.0, `smem`
 * bytes of shared memory a block, and sm_90a code of `kernel` that the device loads (the module
 * holds it for this target or not at all). 1, or 0 and the reason. Host code.
 */
#ifndef FP_HOPPER_DEVICE_CHECK_H
#define FP_HOPPER_DEVICE_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>

#include "../../kernel_table.h"
#include "../common/smem_fits.h"

static inline int fp_hopper_device_loads(const fp_gpu_device_props *props, size_t smem,
                                         const void *kernel, char *why, size_t why_len) {
    if (props->cc_major != 9 || props->cc_minor != 0) {
        snprintf(why, why_len,
                 "needs compute capability 9.0 (sm_90a: wgmma, setmaxnreg), device is %d.%d",
                 props->cc_major, props->cc_minor);
        return 0;
    }
    if (!fp_smem_fits(smem, props, why, why_len)) return 0;
    cudaFuncAttributes attr;
    const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_len, "no loadable sm_90a code for this device: %s",
                 cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

#endif /* FP_HOPPER_DEVICE_CHECK_H */
