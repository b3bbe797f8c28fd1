/*
 * Buffer operations for backends whose device memory is the host's (reference, cpu_simd): the
 * fp_device_ops buffer members, shared so that each such backend does not write them again.
 * Only backends linked into the core use them.
 */
#ifndef FP_HOST_MEMORY_H
#define FP_HOST_MEMORY_H

#include "fp_backend.h"

/* 64-byte aligned, so that SIMD kernels may use aligned loads on whole buffers. */
flashport_status fp_host_buffer_alloc(void *dev, size_t bytes, void **handle);
void fp_host_buffer_free(void *dev, void *handle);
flashport_status fp_host_buffer_upload(void *dev, void *handle, size_t offset, const void *src,
                                       size_t bytes);
flashport_status fp_host_buffer_download(void *dev, const void *handle, size_t offset, void *dst,
                                         size_t bytes);

#endif /* FP_HOST_MEMORY_H */
