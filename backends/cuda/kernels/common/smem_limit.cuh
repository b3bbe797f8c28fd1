/*
 * Opting a kernel instance into more than the default 48 KB of dynamic shared memory. The limit
 * is a per-device, per-function attribute; setting it is a driver call, so each instance sets
 * it once per device (devices 0..63; any further device sets it at every launch, which is
 * still correct).
 */
#ifndef FP_COMMON_SMEM_LIMIT_CUH
#define FP_COMMON_SMEM_LIMIT_CUH

#include <atomic>
#include <stddef.h>

#include "../../vendors/gpu.h"

/* Raises KERNEL's dynamic shared-memory limit to BYTES on the current device. */
template <auto KERNEL, size_t BYTES> static gpuError_t fp_raise_smem_limit() {
    static std::atomic<unsigned long long> raised_on{0};
    int device = 0;
    gpuError_t err = gpuGetDevice(&device);
    if (err != gpuSuccess) return err;
    const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
    if (bit && (raised_on.load(std::memory_order_acquire) & bit)) return gpuSuccess;
    err = gpuFuncSetAttribute(reinterpret_cast<const void *>(KERNEL),
                              gpuFuncAttributeMaxDynamicSharedMemorySize, (int)BYTES);
    if (err == gpuSuccess && bit) raised_on.fetch_or(bit, std::memory_order_release);
    return err;
}

#endif /* FP_COMMON_SMEM_LIMIT_CUH */
