/* The programs built for a device: kept per context in memory and on disk across processes. */
#ifndef FP_OPENCL_PROGRAM_CACHE_H
#define FP_OPENCL_PROGRAM_CACHE_H

#include "device_context.h"
#include "fp_backend.h"

/* Kernel `kernel_name` of `source` built with `options` for dev's device: from this context's
 * programs, else the on-disk cache, else built (and then cached). A build failure returns
 * FLASHPORT_ERROR_DEVICE with the compiler's log. */
flashport_status fp_cl_get_kernel(fp_cl_dev *dev, const char *source, const char *options,
                                  const char *kernel_name, cl_kernel *out);
void fp_cl_release_programs(fp_cl_dev *dev);

#endif /* FP_OPENCL_PROGRAM_CACHE_H */
