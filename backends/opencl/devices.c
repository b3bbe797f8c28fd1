/* Enumeration of OpenCL platforms and devices, and lookup by index or name. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"

#define FP_CL_MAX_DEVICES 64
/* cl_nv_device_attribute_query, spelled out: not every cl_ext.h has them. */
#define FP_CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define FP_CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

static fp_cl_device_desc devices[FP_CL_MAX_DEVICES];
static int device_count;
static int enumerated;
static char enumerate_reason[512];

static void platform_string(const fp_cl_api *cl, cl_platform_id p, cl_platform_info what, char *buf,
                            size_t len) {
    if (cl->clGetPlatformInfo(p, what, len, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
    buf[len - 1] = '\0';
}

static void device_string(const fp_cl_api *cl, cl_device_id d, cl_device_info what, char *buf,
                          size_t len) {
    if (cl->clGetDeviceInfo(d, what, len, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
    buf[len - 1] = '\0';
}

static int contains_ci(const char *text, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 1;
    for (; *text; text++) {
        size_t i = 0;
        while (i < n && text[i] &&
               tolower((unsigned char)text[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

static int has_extension(const char *extensions, const char *name) {
    size_t n = strlen(name);
    for (const char *s = strstr(extensions, name); s; s = strstr(s + 1, name)) {
        int starts = s == extensions || s[-1] == ' ';
        int ends = s[n] == '\0' || s[n] == ' ';
        if (starts && ends) return 1;
    }
    return 0;
}

static void describe(const fp_cl_api *cl, cl_platform_id platform, cl_device_id id,
                     fp_cl_device_desc *d) {
    memset(d, 0, sizeof *d);
    d->platform = platform;
    d->id = id;
    platform_string(cl, platform, CL_PLATFORM_NAME, d->platform_name, sizeof d->platform_name);
    platform_string(cl, platform, CL_PLATFORM_VERSION, d->platform_version,
                    sizeof d->platform_version);
    device_string(cl, id, CL_DEVICE_NAME, d->name, sizeof d->name);
    device_string(cl, id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
    device_string(cl, id, CL_DRIVER_VERSION, d->driver_version, sizeof d->driver_version);
    device_string(cl, id, CL_DEVICE_VERSION, d->device_version, sizeof d->device_version);
    cl->clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_mem, &d->global_mem, NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof d->local_mem, &d->local_mem, NULL);
    cl_device_local_mem_type lmt = CL_GLOBAL;
    cl->clGetDeviceInfo(id, CL_DEVICE_LOCAL_MEM_TYPE, sizeof lmt, &lmt, NULL);
    d->local_mem_dedicated = lmt == CL_LOCAL;
    cl->clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_work_group,
                        &d->max_work_group, NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->compute_units,
                        &d->compute_units, NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof d->clock_mhz, &d->clock_mhz,
                        NULL);
    cl->clGetDeviceInfo(id, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
                        sizeof d->preferred_vector_float, &d->preferred_vector_float, NULL);
    d->is_nvidia = contains_ci(d->vendor, "nvidia");
    d->is_amd = contains_ci(d->vendor, "advanced micro devices") || contains_ci(d->vendor, "amd");
    d->is_intel = contains_ci(d->vendor, "intel");
    if (d->is_nvidia) {
        /* Left at 0 where the driver does not answer. */
        cl_uint major = 0, minor = 0;
        if (cl->clGetDeviceInfo(id, FP_CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major,
                                NULL) == CL_SUCCESS &&
            cl->clGetDeviceInfo(id, FP_CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor,
                                NULL) == CL_SUCCESS) {
            d->cc_major = (int)major;
            d->cc_minor = (int)minor;
        }
    }

    size_t ext_len = 0;
    if (cl->clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS &&
        ext_len > 0) {
        char *ext = malloc(ext_len + 1);
        if (ext && cl->clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
            ext[ext_len] = '\0';
            d->has_fp16 = has_extension(ext, "cl_khr_fp16");
            d->has_intel_subgroups = has_extension(ext, "cl_intel_subgroups");
            d->has_khr_subgroup_shuffle = has_extension(ext, "cl_khr_subgroup_shuffle");
        }
        free(ext);
    }
}

static int type_rank(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return 0;
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return 1;
    return 2;
}

int fp_cl_enumerate(char *reason, size_t reason_len) {
    if (!enumerated) {
        enumerated = 1;
        const fp_cl_api *cl = fp_cl_load(enumerate_reason, sizeof enumerate_reason);
        cl_uint n_platforms = 0;
        cl_platform_id platforms[16];
        cl_int err = CL_SUCCESS;
        if (cl) err = cl->clGetPlatformIDs(16, platforms, &n_platforms);
        if (cl && (err != CL_SUCCESS || n_platforms == 0)) {
            snprintf(enumerate_reason, sizeof enumerate_reason,
                     "no OpenCL platforms: the ICD loader has no driver registered "
                     "(clGetPlatformIDs: %s)",
                     err == CL_SUCCESS ? "0 platforms" : fp_cl_error_name(err));
            n_platforms = 0;
        }
        if (n_platforms > 16) n_platforms = 16;
        /* Gather by rank so that GPUs come first; platform order is kept within a rank. */
        for (int rank = 0; rank < 3; rank++) {
            for (cl_uint p = 0; p < n_platforms; p++) {
                cl_uint n = 0;
                cl_device_id ids[FP_CL_MAX_DEVICES];
                if (cl->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, FP_CL_MAX_DEVICES, ids,
                                       &n) != CL_SUCCESS)
                    continue;
                if (n > FP_CL_MAX_DEVICES) n = FP_CL_MAX_DEVICES;
                for (cl_uint i = 0; i < n && device_count < FP_CL_MAX_DEVICES; i++) {
                    cl_device_type t = 0;
                    cl->clGetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof t, &t, NULL);
                    if (type_rank(t) != rank) continue;
                    describe(cl, platforms[p], ids[i], &devices[device_count++]);
                }
            }
        }
        if (cl && n_platforms > 0 && device_count == 0)
            snprintf(enumerate_reason, sizeof enumerate_reason,
                     "%u OpenCL platform(s) but no devices", (unsigned)n_platforms);
    }
    if (device_count == 0 && reason && reason_len)
        snprintf(reason, reason_len, "%s", enumerate_reason);
    return device_count;
}

const fp_cl_device_desc *fp_cl_device(int index) {
    if (index < 0 || index >= device_count) return NULL;
    return &devices[index];
}

int fp_cl_find_device(const char *selector) {
    for (int i = 0; i < device_count; i++) {
        char text[600];
        snprintf(text, sizeof text, "%s %s %s", devices[i].platform_name, devices[i].name,
                 devices[i].vendor);
        if (contains_ci(text, selector)) return i;
    }
    return -1;
}
