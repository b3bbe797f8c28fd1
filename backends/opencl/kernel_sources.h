/* The OpenCL C sources of kernels/, embedded as strings at build time (embed_kernels.cmake). */
#ifndef FP_OPENCL_KERNEL_SOURCES_H
#define FP_OPENCL_KERNEL_SOURCES_H

extern const char fp_opencl_source_attention_tiled[];
extern const char fp_opencl_source_attention_nv_tf32x3[];
extern const char fp_opencl_source_peaks[];
extern const char fp_opencl_source_attention_backward[];

#endif /* FP_OPENCL_KERNEL_SOURCES_H */
