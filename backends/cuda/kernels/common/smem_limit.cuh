/*
 * Per-function shared-memory attributes: opting a kernel instance into more than the default
 * 48 KB of dynamic shared memory, and asking for the largest shared-memory carveout. Both are
 * per-device attributes set by a driver call, so each instance sets them once per device
 * (devices 0..63; any further device sets them at every launch, which is still correct).
 */
#ifndef FP_COMMON_SMEM_LIMIT_CUH
#define FP_COMMON_SMEM_LIMIT_CUH

#include <atomic>
#include <stddef.h>

#include "../../vendors/gpu.h"

/* Runs set() unless it has succeeded on the current device before (per `done`). */
template <typename Set>
static gpuError_t fp_once_per_device(std::atomic<unsigned long long> &done, Set set) {
    int device = 0;
    gpuError_t err = gpuGetDevice(&device);
    if (err != gpuSuccess) return err;
    const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
    if (bit && (done.load(std::memory_order_acquire) & bit)) return gpuSuccess;
    err = set();
    if (err == gpuSuccess && bit) done.fetch_or(bit, std::memory_order_release);
    return err;
}

/* Raises KERNEL's dynamic shared-memory limit to BYTES on the current device. */
template <auto KERNEL, size_t BYTES> static gpuError_t fp_raise_smem_limit() {
    static std::atomic<unsigned long long> raised_on{0};
    return fp_once_per_device(raised_on, [] {
        return gpuFuncSetAttribute(reinterpret_cast<const void *>(KERNEL),
                                   gpuFuncAttributeMaxDynamicSharedMemorySize, (int)BYTES);
    });
}

/* Asks for the largest shared-memory carveout whenever KERNEL runs on the current device
 * (fp_gpu_prefer_shared_carveout says why). */
template <auto KERNEL> static gpuError_t fp_prefer_shared_carveout() {
    static std::atomic<unsigned long long> set_on{0};
    return fp_once_per_device(set_on, [] {
        return fp_gpu_prefer_shared_carveout(reinterpret_cast<const void *>(KERNEL));
    });
}

#endif /* FP_COMMON_SMEM_LIMIT_CUH */
