/*
 * Portability layer: the CUDA backend's sources are written against these names, and the HIP
 * build compiles the same sources with vendors/hip.h in place of vendors/cuda.h (the approach
 * ggml takes for its CUDA and HIP backends). Wave size is a compile-time constant of the target,
 * FP_WARP_SIZE; no kernel may assume 32 lanes.
 */
#ifndef FP_VENDORS_GPU_H
#define FP_VENDORS_GPU_H

#if defined(__HIP_PLATFORM_AMD__) || defined(FLASHPORT_HIP_BUILD)
#include "hip.h"
#else
#include "cuda.h"
#endif

#endif /* FP_VENDORS_GPU_H */
