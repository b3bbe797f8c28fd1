/*
 * HIP side of the portability layer (see gpu.h): the same gpu* names as cuda.h, mapped onto the
 * HIP runtime, so that the CUDA backend's sources compile unchanged as HIP for AMD GPUs.
 */
#ifndef FP_VENDORS_HIP_H
#define FP_VENDORS_HIP_H

#include <stdio.h>

#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define FP_GPU_BACKEND_NAME "hip"
#define FP_GPU_VENDOR       "AMD"
#define FP_GPU_API_PREFIX   "hip" /* runtime calls are named "hip" + what follows gpu */

/*
 * Wave size. In a device pass it is the target's: 64 on CDNA (gfx90a, gfx940), 32 on RDNA
 * (gfx1030, which compiles for wave32 unless told otherwise). The host pass is compiled once for
 * all targets, so no single value is right there: it is set to the narrowest wave of any target,
 * which keeps the "a lane group fits in one wave" checks of shared templates conservative.
 * Host code must never shape a launch from it; it reads fp_gpu_device_props.warp_size at run
 * time, or launches groups of at most 32 lanes whose layout does not depend on the wave.
 */
#if defined(__HIP_DEVICE_COMPILE__)
#define FP_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define FP_WARP_SIZE 32
#endif

/*
 * Kernel-table entries (kernel_list.h) are host data that point at host functions. clang emits
 * externally visible const objects into the device code as well, where those pointers cannot be
 * resolved and the device link fails (llvm/llvm-project issue 75799). In the device pass the
 * entries are declared non-const, which keeps them host-only; the host pass sees them const.
 */
#if defined(__HIP_DEVICE_COMPILE__)
#define FP_KERNEL_ENTRY
#else
#define FP_KERNEL_ENTRY const
#endif

/* Types */
typedef hipStream_t gpuStream_t;
typedef hipError_t gpuError_t;
typedef hipEvent_t gpuEvent_t;
typedef hipDeviceProp_t gpuDeviceProp_t;
typedef hipDeviceAttribute_t gpuDeviceAttr_t;
typedef __half gpuHalf;
typedef hip_bfloat16 gpuBFloat16;

/* Errors. HIP has no misaligned-address error: a launcher's alignment refusal is an invalid
 * value there. */
#define gpuSuccess                hipSuccess
#define gpuErrorMemoryAllocation  hipErrorOutOfMemory
#define gpuErrorInvalidValue      hipErrorInvalidValue
#define gpuErrorMisalignedAddress hipErrorInvalidValue
#define gpuGetErrorString         hipGetErrorString
#define gpuGetLastError           hipGetLastError

/* Devices */
#define gpuGetDeviceCount                          hipGetDeviceCount
#define gpuSetDevice                               hipSetDevice
#define gpuGetDevice                               hipGetDevice
#define gpuGetDeviceProperties                     hipGetDeviceProperties
#define gpuDeviceGetAttribute                      hipDeviceGetAttribute
#define gpuDevAttrMaxSharedMemoryPerBlockOptin     hipDeviceAttributeSharedMemPerBlockOptin
#define gpuDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeSharedMemPerMultiprocessor
#define gpuDevAttrMaxRegistersPerMultiprocessor    hipDeviceAttributeMaxRegistersPerMultiprocessor
#define gpuDevAttrClockRate                        hipDeviceAttributeClockRate
#define gpuDevAttrMemoryClockRate                  hipDeviceAttributeMemoryClockRate
#define gpuDevAttrGlobalMemoryBusWidth             hipDeviceAttributeMemoryBusWidth
#define gpuDevAttrMemoryPoolsSupported             hipDeviceAttributeMemoryPoolsSupported
#define gpuDriverGetVersion                        hipDriverGetVersion
#define gpuRuntimeGetVersion                       hipRuntimeGetVersion

#define gpuDevAttrMaxThreadsPerMultiProcessor hipDeviceAttributeMaxThreadsPerMultiProcessor
#define gpuDevAttrL2CacheSize                 hipDeviceAttributeL2CacheSize
#define gpuDevAttrComputeCapabilityMajor      hipDeviceAttributeComputeCapabilityMajor
#define gpuDevAttrComputeCapabilityMinor      hipDeviceAttributeComputeCapabilityMinor
#define gpuDevAttrMultiProcessorCount         hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrWarpSize                    hipDeviceAttributeWarpSize

/* The target's name as the runtime gives it, e.g. "gfx90a:sramecc+:xnack-". */
static inline hipError_t fp_gpu_arch_name(int device, char *out, size_t len) {
    hipDeviceProp_t prop;
    const hipError_t e = hipGetDeviceProperties(&prop, device);
    if (e == hipSuccess) snprintf(out, len, "%s", prop.gcnArchName);
    return e;
}

/* Memory */
#define gpuMalloc               hipMalloc
#define gpuFree                 hipFree
#define gpuMallocAsync          hipMallocAsync
#define gpuFreeAsync            hipFreeAsync
#define gpuMemcpyAsync          hipMemcpyAsync
#define gpuMemsetAsync          hipMemsetAsync
#define gpuMemcpyHostToDevice   hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost   hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice

/* Streams and events */
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking     hipStreamNonBlocking
#define gpuStreamDestroy         hipStreamDestroy
#define gpuStreamSynchronize     hipStreamSynchronize
/* The device a stream belongs to, whichever device is current: hipGetStreamDeviceId, since
 * ROCm 5 lacks hipStreamGetDevice. It answers -1 for a stream it does not know. */
static inline hipError_t fp_gpu_stream_device(hipStream_t stream, int *device) {
    const int d = hipGetStreamDeviceId(stream);
    if (d < 0) return hipErrorInvalidHandle;
    *device = d;
    return hipSuccess;
}
#define FP_GPU_STREAM_DEVICE_CALL "GetStreamDeviceId"
#define gpuEventCreate            hipEventCreate
#define gpuEventDestroy           hipEventDestroy
#define gpuEventRecord            hipEventRecord
#define gpuEventSynchronize       hipEventSynchronize
#define gpuEventElapsedTime       hipEventElapsedTime

/* Kernels. hipFuncSetAttribute takes the kernel as const void *; CUDA's takes the function. */
#define gpuFuncSetAttribute(kernel, attr, value)                                                   \
    hipFuncSetAttribute(reinterpret_cast<const void *>(kernel), (attr), (value))
#define gpuFuncAttributeMaxDynamicSharedMemorySize   hipFuncAttributeMaxDynamicSharedMemorySize
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor

/* See vendors/cuda.h. A CU's LDS is memory of its own, not a share of a cache: nothing to ask. */
static inline hipError_t fp_gpu_prefer_shared_carveout(const void *kernel) {
    (void)kernel;
    return hipSuccess;
}

/* Kernel launch: `kernel FP_GPU_LAUNCH(grid, block, smem_bytes, stream)(args...)`. */
#define FP_GPU_LAUNCH(grid, block, smem, stream) <<<(grid), (block), (smem), (stream)>>>

/* Overlapped launches (see vendors/cuda.h): HIP has no programmatic dependent launch, so the
 * launch is ordinary and the stream orders the kernels; the device calls do nothing. */
template <typename... Params, typename... Args>
static inline hipError_t fp_gpu_launch_overlapped(int overlap, void (*kernel)(Params...),
                                                  dim3 grid, dim3 block, size_t smem,
                                                  hipStream_t stream, Args... args) {
    (void)overlap;
    kernel<<<grid, block, smem, stream>>>(args...);
    return hipGetLastError();
}

static __device__ __forceinline__ void fp_grid_wait_prior() {}
static __device__ __forceinline__ void fp_grid_release_next() {}

/* No inline PTX and no cuda_fp8.h: device code takes its portable form (see vendors/cuda.h). */
#define FP_GPU_CUDA 0

/* Device code: conversions of the 16-bit storage types (round to nearest even, as on CUDA), and
 * a butterfly shuffle across the lanes of a group (HIP's shuffles take no member mask). */
#define gpuHalfToFloat __half2float
#define gpuFloatToHalf __float2half_rn
__host__ __device__ inline float gpuBFloat16ToFloat(gpuBFloat16 x) { return static_cast<float>(x); }
__host__ __device__ inline gpuBFloat16 gpuFloatToBFloat16(float x) { return gpuBFloat16(x); }
#define FP_SHFL_XOR(value, lane_mask, width) __shfl_xor((value), (lane_mask), (width))

/* The f16/bf16 matrix-core variants the planner prefers (MFMA, backends/hip/kernels/). */
#define FP_MATRIX_KERNEL       "mfma_flash"
#define FP_MATRIX_SPLIT_KERNEL "mfma_flash_split_kv"
#define FP_MATRIX_KERNEL_ROWS  128
/* The f16/bf16 backward on the matrix cores, and what the plan's reason calls it. */
#define FP_MATRIX_BACKWARD_KERNEL "backward_mfma"
#define FP_MATRIX_BACKWARD_KIND   "f16/bf16 backward on MFMA matrix cores (32x32x8)"

#endif /* FP_VENDORS_HIP_H */
