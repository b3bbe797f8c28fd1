/* Micro-benchmarks that measure the device's own ceilings for flashport_measure_peaks. */
#ifndef FP_CUDA_PEAKS_H
#define FP_CUDA_PEAKS_H

#include "kernel_table.h"

/* Runs the micro-benchmarks on `stream` (the current device must be the context's). On a
 * runtime error returns it and names the failing call in *call, without the vendor prefix
 * ("Malloc", "EventRecord"). */
gpuError_t fp_gpu_measure_peaks(gpuStream_t stream, const fp_gpu_device_props *props,
                                flashport_peaks *out, const char **call);

#endif /* FP_CUDA_PEAKS_H */
