/* CUDA side of the portability layer (see gpu.h). */
#ifndef FP_VENDORS_CUDA_H
#define FP_VENDORS_CUDA_H

#include <stdio.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define FP_GPU_BACKEND_NAME "cuda"
#define FP_GPU_VENDOR       "NVIDIA"
#define FP_GPU_API_PREFIX   "cuda" /* runtime calls are named "cuda" + what follows gpu */
#define FP_WARP_SIZE        32

/* Qualifier of the kernel-table entries (kernel_list.h); see hip.h for why it exists. */
#define FP_KERNEL_ENTRY const

/* Types */
typedef cudaStream_t gpuStream_t;
typedef cudaError_t gpuError_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaDeviceProp gpuDeviceProp_t;
typedef cudaDeviceAttr gpuDeviceAttr_t;
typedef __half gpuHalf;
typedef __nv_bfloat16 gpuBFloat16;

/* Errors */
#define gpuSuccess                cudaSuccess
#define gpuErrorMemoryAllocation  cudaErrorMemoryAllocation
#define gpuErrorInvalidValue      cudaErrorInvalidValue
#define gpuErrorMisalignedAddress cudaErrorMisalignedAddress
#define gpuGetErrorString         cudaGetErrorString
#define gpuGetLastError           cudaGetLastError

/* Devices */
#define gpuGetDeviceCount                          cudaGetDeviceCount
#define gpuSetDevice                               cudaSetDevice
#define gpuGetDevice                               cudaGetDevice
#define gpuGetDeviceProperties                     cudaGetDeviceProperties
#define gpuDeviceGetAttribute                      cudaDeviceGetAttribute
#define gpuDevAttrComputeCapabilityMajor           cudaDevAttrComputeCapabilityMajor
#define gpuDevAttrComputeCapabilityMinor           cudaDevAttrComputeCapabilityMinor
#define gpuDevAttrMultiProcessorCount              cudaDevAttrMultiProcessorCount
#define gpuDevAttrWarpSize                         cudaDevAttrWarpSize
#define gpuDevAttrMaxSharedMemoryPerBlockOptin     cudaDevAttrMaxSharedMemoryPerBlockOptin
#define gpuDevAttrMaxSharedMemoryPerMultiprocessor cudaDevAttrMaxSharedMemoryPerMultiprocessor
#define gpuDevAttrMaxRegistersPerMultiprocessor    cudaDevAttrMaxRegistersPerMultiprocessor
#define gpuDevAttrMaxThreadsPerMultiProcessor      cudaDevAttrMaxThreadsPerMultiProcessor
#define gpuDevAttrL2CacheSize                      cudaDevAttrL2CacheSize
#define gpuDevAttrClockRate                        cudaDevAttrClockRate
#define gpuDevAttrMemoryClockRate                  cudaDevAttrMemoryClockRate
#define gpuDevAttrGlobalMemoryBusWidth             cudaDevAttrGlobalMemoryBusWidth
#define gpuDevAttrMemoryPoolsSupported             cudaDevAttrMemoryPoolsSupported
#define gpuDriverGetVersion                        cudaDriverGetVersion
#define gpuRuntimeGetVersion                       cudaRuntimeGetVersion

/* The target's name: "sm_" and the compute capability. */
static inline cudaError_t fp_gpu_arch_name(int device, char *out, size_t len) {
    int major = 0, minor = 0;
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e == cudaSuccess) snprintf(out, len, "sm_%d%d", major, minor);
    return e;
}

/* Memory */
#define gpuMalloc               cudaMalloc
#define gpuFree                 cudaFree
#define gpuMallocAsync          cudaMallocAsync
#define gpuFreeAsync            cudaFreeAsync
#define gpuMemcpyAsync          cudaMemcpyAsync
#define gpuMemsetAsync          cudaMemsetAsync
#define gpuMemcpyHostToDevice   cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost   cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice

/* Streams and events */
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking     cudaStreamNonBlocking
#define gpuStreamDestroy         cudaStreamDestroy
#define gpuStreamSynchronize     cudaStreamSynchronize
/* The device a stream belongs to, whichever device is current (runtime 12.8+). */
#define fp_gpu_stream_device      cudaStreamGetDevice
#define FP_GPU_STREAM_DEVICE_CALL "StreamGetDevice"
#define gpuEventCreate            cudaEventCreate
#define gpuEventDestroy           cudaEventDestroy
#define gpuEventRecord            cudaEventRecord
#define gpuEventSynchronize       cudaEventSynchronize
#define gpuEventElapsedTime       cudaEventElapsedTime

/* Kernels */
#define gpuFuncSetAttribute                          cudaFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize   cudaFuncAttributeMaxDynamicSharedMemorySize
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor

/* Asks for the SM's largest shared-memory carveout (the rest of its L1 stays cache) whenever
 * `kernel` runs. An SM holds blocks of two kernels at once only when both run under one
 * carveout, so a small kernel overlapped with a large one (fp_gpu_launch_overlapped) asks for
 * the large one's. */
static inline cudaError_t fp_gpu_prefer_shared_carveout(const void *kernel) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                (int)cudaSharedmemCarveoutMaxShared);
}

/* Kernel launch: `kernel FP_GPU_LAUNCH(grid, block, smem_bytes, stream)(args...)`. The launch
 * syntax sits behind a macro so that the CPU emulation the tests use can run the same launchers. */
#define FP_GPU_LAUNCH(grid, block, smem, stream) <<<(grid), (block), (smem), (stream)>>>

/* Overlapped launches (programmatic dependent launch, compute capability 9.0 and later). A
 * kernel launched with fp_gpu_launch_overlapped may be scheduled while the kernel before it on
 * the stream is still running: its blocks wait in fp_grid_wait_prior() until that kernel has
 * finished and its writes are visible, so only the launch latency and the earlier kernel's tail
 * overlap, never the data. An earlier kernel may let the next one be scheduled before it ends
 * with fp_grid_release_next(). Both are no-ops where the launch was ordinary, and `overlap` = 0
 * (or an older device) makes it ordinary. */
template <typename... Params, typename... Args>
static inline cudaError_t fp_gpu_launch_overlapped(int overlap, void (*kernel)(Params...),
                                                   dim3 grid, dim3 block, size_t smem,
                                                   cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    if (overlap) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        config.attrs = attr;
        config.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&config, kernel, args...);
}

static __device__ __forceinline__ void fp_grid_wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void fp_grid_release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Device code with a CUDA-only form (inline PTX from kernels/common/ptx.cuh such as cp.async
 * and ex2.approx, cuda_fp8.h's conversions) tests this; 0 in vendors/hip.h. */
#define FP_GPU_CUDA 1

/* Device code: conversions of the 16-bit storage types, and a butterfly shuffle in which every
 * lane of the warp takes part (CUDA needs the member mask, HIP has none). */
#define gpuHalfToFloat     __half2float
#define gpuFloatToHalf     __float2half_rn
#define gpuBFloat16ToFloat __bfloat162float
#define gpuFloatToBFloat16 __float2bfloat16_rn
#define FP_SHFL_XOR(value, lane_mask, width)                                                       \
    __shfl_xor_sync(0xffffffffu, (value), (lane_mask), (width))

/* The f16/bf16 matrix-core variants the planner prefers (mma.sync, kernels/tensor_core_mma*). */
#define FP_MATRIX_KERNEL       "tensor_core_mma"
#define FP_MATRIX_SPLIT_KERNEL "tensor_core_mma_split_kv"
#define FP_MATRIX_KERNEL_ROWS  128
/* The f16/bf16 backward on the matrix cores, and what the plan's reason calls it. */
#define FP_MATRIX_BACKWARD_KERNEL "backward_mma"
#define FP_MATRIX_BACKWARD_KIND   "f16/bf16 backward on tensor cores (mma.sync m16n8k16)"

#endif /* FP_VENDORS_CUDA_H */
