/*
 * The NVIDIA tensor-core kernel of the OpenCL backend (kernels/attention_nv_tf32x3.cl, f32
 * through mma.sync with the 3xTF32 split): its tile configurations, whether a device and a
 * problem can run it, its build options and its work-groups. The planner (planner.c) asks here
 * first.
 *
 * Configurations, by padded head dim D (64 or 128), numbered from 0 within D:
 *   warps    work-items / 32; each warp owns m_tiles slices of 16 query rows
 *   m_tiles  slices of 16 rows a warp (two halve the local reads and operand splits of K and V
 *            per product, at twice the registers for O, Q and S)
 *   bc       keys a tile; two stages of K and V tiles take 16 bc D bytes of local memory
 * Q stays in registers (D/2 floats a lane and slice) beside O (as many), so the defaults are
 * one slice a warp; clang's PTX for sm_90 stays spill-free under 255 registers with them
 * (d = 128: a few words). FLASHPORT_OPENCL_TF32X3_CONFIG=<index> picks another, for tuning.
 *
 * FLASHPORT_OPENCL_NV_EMULATE=1 lets the kernel run on any device, its PTX replaced by a model
 * of each warp operation (the kernel's EMULATE option): slow, it is how the tests check the
 * kernel's index maps and pipeline without an NVIDIA GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "kernel_list.h"
#include "kernel_sources.h"
#include "program_cache.h"

#define NV_CONFIG_ENV "FLASHPORT_OPENCL_TF32X3_CONFIG"
#define NV_EMULATE_ENV "FLASHPORT_OPENCL_NV_EMULATE"
/* The kernel's row and key indices are 32-bit with room to spare below this. */
#define NV_MAX_SEQ (1 << 30)
/* NVIDIA maps the second and third NDRange dimensions to grid y and z. */
#define NV_MAX_GRID_YZ 65535

static const fp_cl_nv_tf32x3_config configs[] = {
    {64, 4, 1, 32}, {64, 8, 1, 32}, {64, 4, 1, 16}, {64, 4, 2, 32},
    {128, 4, 1, 16}, {128, 8, 1, 16},
};
enum { N_CONFIGS = sizeof configs / sizeof configs[0] };

/* Configuration `index` of padded head dim d, or NULL. */
static const fp_cl_nv_tf32x3_config *find_config(int d, long index) {
    for (int i = 0, k = 0; i < N_CONFIGS; i++)
        if (configs[i].d == d && k++ == index) return &configs[i];
    return NULL;
}

/* Two stages of K and V tiles; emulated, also 6 floats a work-item to exchange fragments. */
static size_t local_bytes(const fp_cl_nv_tf32x3_config *c, int emulate) {
    return ((size_t)2 * 2 * c->bc * c->d + (emulate ? (size_t)c->warps * 32 * 6 : 0)) *
           sizeof(float);
}

static int emulated(void) {
    const char *env = getenv(NV_EMULATE_ENV);
    return env && strcmp(env, "1") == 0;
}

/* 1 when the rows of a float tensor with strides s can be read 16 bytes at a time (buffers are
 * 16-byte aligned; every stride a multiple of 4 floats; d % 4 == 0 keeps a chunk inside d). */
static int quad_aligned(const flashport_strides *s, int64_t head_dim) {
    return head_dim % 4 == 0 && s->batch % 4 == 0 && s->head % 4 == 0 && s->seq % 4 == 0;
}

static void nv_options(const fp_cl_device_desc *dev, const fp_cl_kernel_params *params,
                       const fp_problem *p, char *buf, size_t len) {
    const fp_cl_nv_tf32x3_params nv = params->nv_tf32x3;
    const int vec = quad_aligned(&p->q, p->head_dim) && quad_aligned(&p->k, p->head_dim) &&
                    quad_aligned(&p->v, p->head_dim);
    snprintf(buf, len,
             "-cl-std=CL1.2 -DD=%d -DWARPS=%d -DMT=%d -DBC=%d -DVEC=%d -DOVEC=%d -DEMULATE=%d%s",
             nv.config.d, nv.config.warps, nv.config.m_tiles, nv.config.bc, vec,
             quad_aligned(&p->o, p->head_dim), nv.emulate,
             /* registers and spills in the build log, logged at the info level */
             dev->is_nvidia ? " -cl-nv-verbose" : "");
}

static fp_cl_launch_shape nv_shape(const fp_cl_kernel_params *params, const fp_problem *p) {
    (void)p;
    const fp_cl_nv_tf32x3_config c = params->nv_tf32x3.config;
    fp_cl_launch_shape shape;
    shape.threads = (size_t)c.warps * 32;
    shape.rows = (size_t)(16 * c.warps * c.m_tiles);
    shape.slices = 1;
    return shape;
}

static flashport_status nv_plan(fp_cl_dev *dev, const fp_problem *p,
                                fp_cl_kernel_params *params, char *reason, size_t reason_len) {
    const fp_cl_device_desc *desc = dev->desc;
    const int emulate = emulated();
    if (!desc->is_nvidia && !emulate) {
        snprintf(reason, reason_len, "nv_tf32x3 runs on NVIDIA devices only");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (desc->cc_major < 8 && !emulate) {
        snprintf(reason, reason_len,
                 "nv_tf32x3 needs compute capability 8.0+ (mma.sync .tf32), device is %d.%d",
                 desc->cc_major, desc->cc_minor);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (p->dtype != FLASHPORT_F32) {
        snprintf(reason, reason_len, "nv_tf32x3 takes f32 inputs only");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (p->head_dim > 128) {
        snprintf(reason, reason_len, "nv_tf32x3 takes head_dim <= 128, not %lld",
                 (long long)p->head_dim);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (p->seq_q > NV_MAX_SEQ || p->seq_kv > NV_MAX_SEQ || p->heads_q > NV_MAX_GRID_YZ ||
        p->batch > NV_MAX_GRID_YZ) {
        snprintf(reason, reason_len,
                 "nv_tf32x3 takes sequences up to 2^30 and up to %d heads and batches",
                 NV_MAX_GRID_YZ);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (dev->nv_tf32x3_build_failed) {
        snprintf(reason, reason_len, "the nv_tf32x3 program did not build on this device");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    const int d = p->head_dim <= 64 ? 64 : 128;
    long index = 0;
    const char *env = getenv(NV_CONFIG_ENV);
    if (env && *env) {
        char *end = NULL;
        index = strtol(env, &end, 10);
        if (*end != '\0' || env[0] < '0' || env[0] > '9') index = -1;
    }
    const fp_cl_nv_tf32x3_config *c = index >= 0 ? find_config(d, index) : NULL;
    if (!c) {
        snprintf(reason, reason_len, "%s=%s names no nv_tf32x3 configuration of padded head dim %d",
                 NV_CONFIG_ENV, env, d);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if ((size_t)c->warps * 32 > desc->max_work_group || local_bytes(c, emulate) > desc->local_mem) {
        snprintf(reason, reason_len,
                 "nv_tf32x3 configuration %ld needs %d work-items and %zu bytes of local memory "
                 "a group, the device allows %zu and %llu",
                 index, c->warps * 32, local_bytes(c, emulate), desc->max_work_group,
                 (unsigned long long)desc->local_mem);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }

    params->nv_tf32x3.config = *c;
    params->nv_tf32x3.emulate = emulate;

    /* Built here rather than at the first run, so that a compiler that rejects the inline PTX
     * turns into the portable kernel with the reason, instead of a failed call. */
    char options[256];
    nv_options(desc, params, p, options, sizeof options);
    cl_kernel kernel = NULL;
    if (fp_cl_get_kernel(dev, fp_cl_kernel_nv_tf32x3.source, options,
                         fp_cl_kernel_nv_tf32x3.entry_point, &kernel) != FLASHPORT_OK) {
        dev->nv_tf32x3_build_failed = 1;
        fp_cl_host->log(FP_LOG_INFO, FP_CL_NAME,
                        "the nv_tf32x3 program did not build on %s (compiler log above); "
                        "the portable kernel runs instead unless nv_tf32x3 is forced",
                        desc->name);
        snprintf(reason, reason_len, "the nv_tf32x3 program did not build on this device");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    snprintf(reason, reason_len,
             "nv_tf32x3: %s, f32: tensor cores through inline PTX (3xTF32); config %ld: D=%d "
             "warps=%d m_tiles=%d bc=%d%s, %zu B local",
             emulate ? "warp operations emulated (" NV_EMULATE_ENV ")"
                     : "NVIDIA compute capability 8.0+",
             index, c->d, c->warps, c->m_tiles, c->bc, env && *env ? " (" NV_CONFIG_ENV ")" : "",
             local_bytes(c, emulate));
    return FLASHPORT_OK;
}

const fp_cl_kernel fp_cl_kernel_nv_tf32x3 = {
    {"nv_tf32x3",
     "NVIDIA, f32: FlashAttention-2 on the tensor cores through inline PTX (mma.sync m16n8k8 "
     "tf32, 3xTF32 split for f32 accuracy), online softmax in registers",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    fp_opencl_source_attention_nv_tf32x3,
    "attention_nv_tf32x3",
    nv_plan,
    nv_options,
    nv_shape,
};
