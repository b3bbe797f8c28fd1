/* The device's own ceilings, measured by micro-benchmarks (flashport_peaks). */
#ifndef FP_OPENCL_PEAKS_H
#define FP_OPENCL_PEAKS_H

#include "device_context.h"
#include "fp_backend.h"

flashport_status fp_cl_measure_peaks(fp_cl_dev *dev, flashport_peaks *out);

#endif /* FP_OPENCL_PEAKS_H */
