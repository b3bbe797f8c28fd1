/* The OpenCL devices of every platform, and what the planner and flashport-info read of them. */
#ifndef FP_OPENCL_DEVICES_H
#define FP_OPENCL_DEVICES_H

#include <stddef.h>

#include "cl_loader.h"

/* One OpenCL device and the properties the planner and flashport-info use. */
typedef struct fp_cl_device_desc {
    cl_platform_id platform;
    cl_device_id id;
    char platform_name[128];
    char platform_version[128];
    char name[256];
    char vendor[128];
    char driver_version[128];
    char device_version[128];
    cl_device_type type;
    cl_ulong global_mem;
    cl_ulong max_alloc;
    cl_ulong local_mem;
    int local_mem_dedicated; /* CL_LOCAL: on-chip scratch rather than emulated in global memory */
    size_t max_work_group;
    cl_uint compute_units;
    cl_uint clock_mhz;
    cl_uint preferred_vector_float;
    int is_nvidia, is_amd, is_intel;
    int has_fp16;
    int has_intel_subgroups;
    int has_khr_subgroup_shuffle;
    int cc_major, cc_minor; /* NVIDIA compute capability (cl_nv_device_attribute_query); 0 else */
} fp_cl_device_desc;

/* Enumerates every device of every platform, GPUs first, then accelerators, then the rest.
 * Returns the count, or 0 with the reason. Runs once; later calls return the same answer. */
int fp_cl_enumerate(char *reason, size_t reason_len);
const fp_cl_device_desc *fp_cl_device(int index);
/* The first device whose "platform device vendor" text contains selector (case-insensitive). */
int fp_cl_find_device(const char *selector);

#endif /* FP_OPENCL_DEVICES_H */
