#include "cl_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static fp_cl_api api;
static int load_state; /* 0: not tried, 1: loaded, -1: failed */
static char load_reason[512];

const fp_cl_api *fp_cl_load(char *reason, size_t reason_len) {
    if (load_state == 0) {
        /* The versioned name is what the loader packages install without a -dev package. */
        void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            /* The versioned name's failure is the one worth reporting. */
            const char *why = dlerror();
            snprintf(load_reason, sizeof load_reason, "no OpenCL ICD loader (libOpenCL.so.1): %s",
                     why ? why : "not found");
            lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
        }
        if (!lib) {
            load_state = -1;
        } else {
            load_state = 1;
#define FP_CL_RESOLVE(fn)                                                                          \
    if (load_state == 1) {                                                                         \
        void *sym = dlsym(lib, #fn);                                                               \
        if (!sym) {                                                                                \
            snprintf(load_reason, sizeof load_reason,                                              \
                     "the OpenCL ICD loader lacks %s (an OpenCL 1.2 loader is required)", #fn);    \
            load_state = -1;                                                                       \
        } else {                                                                                   \
            memcpy(&api.fn, &sym, sizeof sym);                                                     \
        }                                                                                          \
    }
            FP_CL_FUNCTIONS(FP_CL_RESOLVE)
#undef FP_CL_RESOLVE
            if (load_state != 1) dlclose(lib);
        }
    }
    if (load_state == 1) return &api;
    if (reason && reason_len) snprintf(reason, reason_len, "%s", load_reason);
    return NULL;
}

const char *fp_cl_error_name(cl_int err) {
    switch (err) {
#define FP_CL_CASE(code)                                                                           \
    case code: return #code;
        FP_CL_CASE(CL_DEVICE_NOT_FOUND)
        FP_CL_CASE(CL_DEVICE_NOT_AVAILABLE)
        FP_CL_CASE(CL_COMPILER_NOT_AVAILABLE)
        FP_CL_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        FP_CL_CASE(CL_OUT_OF_RESOURCES)
        FP_CL_CASE(CL_OUT_OF_HOST_MEMORY)
        FP_CL_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
        FP_CL_CASE(CL_MEM_COPY_OVERLAP)
        FP_CL_CASE(CL_BUILD_PROGRAM_FAILURE)
        FP_CL_CASE(CL_MAP_FAILURE)
        FP_CL_CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        FP_CL_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        FP_CL_CASE(CL_INVALID_VALUE)
        FP_CL_CASE(CL_INVALID_DEVICE_TYPE)
        FP_CL_CASE(CL_INVALID_PLATFORM)
        FP_CL_CASE(CL_INVALID_DEVICE)
        FP_CL_CASE(CL_INVALID_CONTEXT)
        FP_CL_CASE(CL_INVALID_QUEUE_PROPERTIES)
        FP_CL_CASE(CL_INVALID_COMMAND_QUEUE)
        FP_CL_CASE(CL_INVALID_HOST_PTR)
        FP_CL_CASE(CL_INVALID_MEM_OBJECT)
        FP_CL_CASE(CL_INVALID_BINARY)
        FP_CL_CASE(CL_INVALID_BUILD_OPTIONS)
        FP_CL_CASE(CL_INVALID_PROGRAM)
        FP_CL_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
        FP_CL_CASE(CL_INVALID_KERNEL_NAME)
        FP_CL_CASE(CL_INVALID_KERNEL)
        FP_CL_CASE(CL_INVALID_ARG_INDEX)
        FP_CL_CASE(CL_INVALID_ARG_VALUE)
        FP_CL_CASE(CL_INVALID_ARG_SIZE)
        FP_CL_CASE(CL_INVALID_KERNEL_ARGS)
        FP_CL_CASE(CL_INVALID_WORK_DIMENSION)
        FP_CL_CASE(CL_INVALID_WORK_GROUP_SIZE)
        FP_CL_CASE(CL_INVALID_WORK_ITEM_SIZE)
        FP_CL_CASE(CL_INVALID_GLOBAL_OFFSET)
        FP_CL_CASE(CL_INVALID_EVENT_WAIT_LIST)
        FP_CL_CASE(CL_INVALID_EVENT)
        FP_CL_CASE(CL_INVALID_OPERATION)
        FP_CL_CASE(CL_INVALID_BUFFER_SIZE)
        FP_CL_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
#undef FP_CL_CASE
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: {
        static _Thread_local char buf[32];
        snprintf(buf, sizeof buf, "OpenCL error %d", (int)err);
        return buf;
    }
    }
}
