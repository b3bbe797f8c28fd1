/*
 * The tuning variables' parsers, on arbitrary text: FLASHPORT_OPENCL_TILE through the tiled
 * kernel's planner (with a device whose type, work-group limit and local memory also come from the
 * input), FLASHPORT_OPENCL_TF32X3_CONFIG through the nv_tf32x3 planner (on a device too small
 * for any configuration, so that no program is built), and the CUDA kernels' config index
 * variables (fp_config_from_env). Input: the first line is the variable's text, the bytes
 * after it the device and the problem. Every outcome is a plan or a status with its reason;
 * nothing divides by zero, overflows or overruns.
 */
#define _GNU_SOURCE /* setenv, putenv */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config_env.h"
#include "kernel_list.h"

static char last_message[1024];

/* The variables live in these buffers (putenv), rewritten for each input: glibc's setenv keeps
 * every value it was ever given, which a long run turns into gigabytes. The text is cut to the
 * buffers' size. */
static char tile_var[4200] = "FLASHPORT_OPENCL_TILE=",
            nv_var[4200] = "FLASHPORT_OPENCL_TF32X3_CONFIG=",
            tc_var[4200] = "FLASHPORT_CUDA_TC_CONFIG=";

static void set_value(char *var, size_t size, const char *value) {
    char *eq = strchr(var, '=') + 1;
    snprintf(eq, size - (size_t)(eq - var), "%s", value);
}

static flashport_status record_error(flashport_status status, const char *backend, const char *fmt,
                                     ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_message, sizeof last_message, "%s: ", backend);
    vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

static void quiet_log(int level, const char *backend, const char *fmt, ...) {
    (void)level;
    (void)backend;
    (void)fmt;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const fp_host host = {FP_BACKEND_ABI, record_error, quiet_log};
    flashport_backend_entry(&host);
    putenv(tile_var);
    putenv(nv_var);
    putenv(tc_var);
    setenv("FLASHPORT_OPENCL_NV_EMULATE", "1", 1);
    return 0;
}

static uint8_t next(const uint8_t **p, const uint8_t *end) { return *p < end ? *(*p)++ : 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size), *end = data + size;
    const size_t len = nl ? (size_t)(nl - data) : size;
    char *text = malloc(len + 1);
    if (!text) abort();
    memcpy(text, data, len);
    text[len] = '\0';
    const uint8_t *p = nl ? nl + 1 : end;

    fp_cl_device_desc desc;
    memset(&desc, 0, sizeof desc);
    static const cl_device_type types[] = {CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
                                           CL_DEVICE_TYPE_ACCELERATOR, 0};
    const uint8_t dev_bits = next(&p, end);
    desc.type = types[dev_bits % 4];
    desc.is_nvidia = (dev_bits >> 2) & 1;
    desc.cc_major = (dev_bits >> 3) & 1 ? 9 : 7;
    desc.max_work_group = (size_t)1 << (next(&p, end) % 12);
    desc.local_mem = (cl_ulong)next(&p, end) << 10;
    fp_cl_dev dev;
    memset(&dev, 0, sizeof dev);
    dev.desc = &desc;

    fp_problem prob;
    static const int64_t dims[] = {1, 8, 32, 63, 64, 100, 128, 256, 512, 1000, 4096, 65536};
    const int64_t seq_q = dims[next(&p, end) % 12], seq_kv = dims[next(&p, end) % 12];
    const int64_t d = dims[next(&p, end) % 12];
    flashport_attention_desc_init(&prob, next(&p, end) & 1 ? FLASHPORT_F16 : FLASHPORT_F32, 1, 1, 1,
                                  seq_q, seq_kv, d, FLASHPORT_LAYOUT_BHND);

    set_value(tile_var, sizeof tile_var, text);
    fp_cl_kernel_params params;
    char reason[512] = "";
    flashport_status st = fp_cl_kernel_tiled.plan(&dev, &prob, &params, reason, sizeof reason);
    if (!reason[0]) abort(); /* a plan or a refusal, either way with its reason */
    if (st == FLASHPORT_OK) {
        const fp_cl_launch_shape shape = fp_cl_kernel_tiled.shape(&params, &prob);
        if (shape.threads < 1 || shape.threads > desc.max_work_group || shape.slices < 1) abort();
        char options[1024];
        fp_cl_kernel_tiled.options(&desc, &params, &prob, options, sizeof options);
    } else if (st != FLASHPORT_ERROR_UNSUPPORTED && st != FLASHPORT_ERROR_INVALID_ARGUMENT) {
        abort();
    }

    /* No work-group of this device holds a warp: every configuration is declined after the
     * index is read, before anything would be compiled. */
    desc.max_work_group = 16;
    set_value(nv_var, sizeof nv_var, text);
    reason[0] = '\0';
    if (fp_cl_kernel_nv_tf32x3.plan(&dev, &prob, &params, reason, sizeof reason) !=
            FLASHPORT_ERROR_UNSUPPORTED ||
        !reason[0])
        abort();

    set_value(tc_var, sizeof tc_var, text);
    const int count = next(&p, end) % 9;
    const int index =
        fp_config_from_env("FLASHPORT_CUDA_TC_CONFIG", 64, count, reason, sizeof reason);
    if (index != FP_CONFIG_ENV_UNSET && (index < -1 || index >= count)) abort();
    free(text);
    return 0;
}
