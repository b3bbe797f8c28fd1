/* CUDA side of the portability layer (see gpu.h). */
#ifndef FP_VENDORS_CUDA_H
#define FP_VENDORS_CUDA_H

#include <cuda_runtime.h>

#define FP_GPU_BACKEND_NAME "cuda"
#define FP_WARP_SIZE 32

typedef cudaStream_t gpuStream_t;
typedef cudaError_t gpuError_t;
typedef cudaEvent_t gpuEvent_t;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuFuncSetAttribute cudaFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize

#endif /* FP_VENDORS_CUDA_H */
