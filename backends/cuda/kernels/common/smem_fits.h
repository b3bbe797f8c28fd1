/*
 * The shared-memory check of every variant's supports(): whether `bytes` a block fit the
 * device's opt-in limit, and if not, the reason in the words every variant uses. Host code.
 */
#ifndef FP_COMMON_SMEM_FITS_H
#define FP_COMMON_SMEM_FITS_H

#include <stddef.h>
#include <stdio.h>

#include "../../kernel_table.h"

static inline int fp_smem_fits(size_t bytes, const fp_gpu_device_props *props, char *why,
                               size_t why_len) {
    if (bytes <= props->smem_per_block_optin) return 1;
    snprintf(why, why_len, "needs %zu bytes of shared memory a block, device allows %zu", bytes,
             props->smem_per_block_optin);
    return 0;
}

#endif /* FP_COMMON_SMEM_FITS_H */
