/*
 * The OpenCL entry points the backend uses, resolved from the ICD loader (libOpenCL.so.1) at
 * run time. Opening the loader ourselves keeps the module loadable on machines without one, so
 * that the backend can say why it is unavailable instead of failing to load.
 */
#ifndef FP_OPENCL_CL_LOADER_H
#define FP_OPENCL_CL_LOADER_H

#include <CL/cl.h>

#define FP_CL_FUNCTIONS(X)         \
    X(clGetPlatformIDs)            \
    X(clGetPlatformInfo)           \
    X(clGetDeviceIDs)              \
    X(clGetDeviceInfo)             \
    X(clCreateContext)             \
    X(clRetainContext)             \
    X(clReleaseContext)            \
    X(clCreateCommandQueue)        \
    X(clGetCommandQueueInfo)       \
    X(clRetainCommandQueue)        \
    X(clReleaseCommandQueue)       \
    X(clCreateBuffer)              \
    X(clRetainMemObject)           \
    X(clReleaseMemObject)          \
    X(clGetMemObjectInfo)          \
    X(clEnqueueWriteBuffer)        \
    X(clEnqueueReadBuffer)         \
    X(clEnqueueCopyBuffer)         \
    X(clCreateProgramWithSource)   \
    X(clCreateProgramWithBinary)   \
    X(clBuildProgram)              \
    X(clGetProgramInfo)            \
    X(clGetProgramBuildInfo)       \
    X(clReleaseProgram)            \
    X(clCreateKernel)              \
    X(clReleaseKernel)             \
    X(clSetKernelArg)              \
    X(clGetKernelWorkGroupInfo)    \
    X(clEnqueueNDRangeKernel)      \
    X(clFinish)                    \
    X(clWaitForEvents)             \
    X(clGetEventProfilingInfo)     \
    X(clReleaseEvent)

typedef struct fp_cl_api {
#define FP_CL_MEMBER(fn) __typeof__(&fn) fn;
    FP_CL_FUNCTIONS(FP_CL_MEMBER)
#undef FP_CL_MEMBER
} fp_cl_api;

/* The resolved entry points, or NULL with the reason in reason[reason_len] (dlerror or the
 * missing symbol). Opens the loader on the first call; later calls return the same answer. */
const fp_cl_api *fp_cl_load(char *reason, size_t reason_len);

/* Name of an OpenCL error code ("CL_OUT_OF_RESOURCES"), or "OpenCL error <n>". */
const char *fp_cl_error_name(cl_int err);

#endif /* FP_OPENCL_CL_LOADER_H */
