/* The module's entry point (FP_BACKEND_ENTRY_SYMBOL). */
#ifndef FP_OPENCL_BACKEND_H
#define FP_OPENCL_BACKEND_H

#include "fp_backend.h"

/* The backend's table; keeps host in fp_cl_host for every other call. */
FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *host);

#endif /* FP_OPENCL_BACKEND_H */
