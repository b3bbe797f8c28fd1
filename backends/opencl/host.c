/* The core's services and failed OpenCL calls (host.h). */
#include "host.h"

const fp_host *fp_cl_host;

flashport_status fp_cl_fail(cl_int err, const char *call) {
    flashport_status st = FLASHPORT_ERROR_DEVICE;
    if (err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
        err == CL_OUT_OF_RESOURCES)
        st = FLASHPORT_ERROR_OUT_OF_MEMORY;
    return fp_cl_host->error(st, FP_CL_NAME, "%s: %s", call, fp_cl_error_name(err));
}
