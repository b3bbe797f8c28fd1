/*
 * What every file of the OpenCL backend reports through: the core's services as the module entry
 * was handed them, the backend's name, and the status and message of a failed OpenCL call.
 */
#ifndef FP_OPENCL_HOST_H
#define FP_OPENCL_HOST_H

#include "cl_loader.h"
#include "fp_backend.h"

#define FP_CL_NAME "opencl"

/* Set by the module entry (backend.c) before any other call. */
extern const fp_host *fp_cl_host;

/* Turns a failed OpenCL call into a flashport status and message naming the call. */
flashport_status fp_cl_fail(cl_int err, const char *call);

#endif /* FP_OPENCL_HOST_H */
