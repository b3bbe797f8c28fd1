/*
 * The backward pass's tiles, workspace and launches (backward.h).
 *
 * One tile shape per device kind keeps the programs few (PoCL builds each in seconds): blocks
 * of 32 query rows and 32 keys, 4x4 score tiles per work-item on CPUs (64 work-items, which
 * PoCL runs as loops between barriers) and on GPUs for heads of up to 64 columns, 2x4 (128) on
 * GPUs for wider heads, the head dim staged 32 columns at a time, output tiles of 4 rows. DV,
 * the output columns per work-group, is 1024 on CPUs whatever the head dim (columns past it are
 * skipped at run time, so that one program serves every head dim up to 1024 without recomputing
 * the scores per slice); on GPUs the head dim rounded up to a power of two between 64 and 128,
 * which keeps the dK and dV accumulators in registers. Wider heads are split into column
 * slices. Every feature is a runtime argument: one program per dtype on a CPU.
 * FLASHPORT_OPENCL_BACKWARD_SHAPE=gpu (or cpu) takes that device kind's shape on any device, so
 * that a CPU driver can test the GPU one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "feature_args.h"
#include "host.h"
#include "kernel_sources.h"
#include "kernel_table.h"
#include "program_cache.h"

static cl_mem as_mem(const void *handle) { return (cl_mem)(void *)(uintptr_t)handle; }

static int64_t work_items(const fp_cl_backward_params *t) {
    return (int64_t)(t->br / t->tm) * (t->bc / 4);
}

/* Local memory of the dK/dV and dQ kernels (the same arrays). */
static size_t local_bytes(const fp_cl_backward_params *t) {
    const int64_t scores = 2 * (int64_t)t->br * (t->kc + 4) + 2 * (int64_t)t->kc * (t->bc + 4);
    const int64_t slices = 2 * (int64_t)t->vc * t->dv;
    const int64_t floats =
        (scores > slices ? scores : slices) + 2 * (int64_t)t->br * (t->bc + 4) + 2 * t->br;
    return (size_t)floats * sizeof(float);
}

static int32_t round_up_pow2(int64_t x, int32_t lo, int32_t hi) {
    int32_t r = lo;
    while (r < x && r < hi) r *= 2;
    return r;
}

/* Entries of the LSE, and of D. */
static int64_t lse_entries(const fp_problem *p) {
    return p->q_varlen ? p->heads_q * p->total_q : p->batch * p->heads_q * p->seq_q;
}

flashport_status fp_cl_backward_plan(const fp_cl_device_desc *dev, const fp_problem *p,
                                     fp_plan *out) {
    const int paged = p->kv_layout == FLASHPORT_KV_PAGED;
    const int fp8 = p->dtype == FLASHPORT_FP8_E4M3 || p->dtype == FLASHPORT_FP8_E5M2;
    if (paged || fp8) {
        snprintf(out->reason, sizeof out->reason,
                 "the %s of %s%s%s is not implemented (only the forward pass reads them)",
                 fp_feature_name(FP_FEATURE_BACKWARD),
                 paged ? fp_feature_name(FP_FEATURE_PAGED) : "", paged && fp8 ? " + " : "",
                 fp8 ? fp_feature_name(FP_FEATURE_FP8) : "");
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (!fp_cl_feature_sizes_fit(p, out->reason, sizeof out->reason))
        return FLASHPORT_ERROR_UNSUPPORTED;
    int gpu_like = (dev->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    const char *shape = getenv("FLASHPORT_OPENCL_BACKWARD_SHAPE");
    if (shape && *shape) {
        if (strcmp(shape, "gpu") != 0 && strcmp(shape, "cpu") != 0) {
            snprintf(out->reason, sizeof out->reason,
                     "FLASHPORT_OPENCL_BACKWARD_SHAPE=%.32s is neither gpu nor cpu", shape);
            return FLASHPORT_ERROR_INVALID_ARGUMENT;
        }
        gpu_like = strcmp(shape, "gpu") == 0;
    }
    /* GPUs: heads of up to 64 columns take the 4x4 score tiles too (64 work-items, two float4
     * groups of dK/dV columns each instead of one), wider heads 2x4 (128). */
    const int32_t tm = gpu_like && p->head_dim > 64 ? 2 : 4;
    fp_cl_backward_params t = {32, 32, tm, 32, 16, 0, 4};
    /* Columns come in float4 groups, 8 (CPUs) or 16 (GPUs) of them across a row. */
    const int32_t dv_min = gpu_like ? 64 : 32;
    t.dv = gpu_like ? round_up_pow2(p->head_dim, dv_min, 128) : 1024;
    /* Devices with little local memory: narrower column slices. */
    while (local_bytes(&t) > dev->local_mem && t.dv > dv_min) t.dv /= 2;
    if ((size_t)work_items(&t) > dev->max_work_group && t.tm < 4) t.tm = 4;
    if ((size_t)work_items(&t) > dev->max_work_group || local_bytes(&t) > dev->local_mem) {
        snprintf(out->reason, sizeof out->reason,
                 "the %s needs %lld work-items per group and %zu bytes of local memory, the "
                 "device allows %zu and has %llu",
                 fp_feature_name(FP_FEATURE_BACKWARD), (long long)work_items(&t), local_bytes(&t),
                 dev->max_work_group, (unsigned long long)dev->local_mem);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    memcpy(out->kernel_params.bytes, &t, sizeof t);
    out->workspace_bytes = (size_t)lse_entries(p) * sizeof(float);
    const int64_t slices = (p->head_dim + t.dv - 1) / t.dv;
    snprintf(out->reason, sizeof out->reason,
             "tiled backward: D = rowsum(dO * O), then dK and dV per block of %d keys and dQ per "
             "block of %d query rows (no atomics: deterministic), %d-column slices (%lld), %lld "
             "work-items, %zu B local",
             t.bc, t.br, t.dv, (long long)slices, (long long)work_items(&t), local_bytes(&t));
    return FLASHPORT_OK;
}

/* The workspace for D, grown when a problem needs more. */
static flashport_status workspace(fp_cl_dev *dev, size_t bytes, cl_mem *out) {
    if (bytes > dev->workspace_bytes) {
        cl_int err = CL_SUCCESS;
        cl_mem grown = dev->cl->clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!grown || err != CL_SUCCESS) return fp_cl_fail(err, "clCreateBuffer (workspace)");
        /* Kernels queued on the old buffer keep it alive until they complete. */
        if (dev->workspace) dev->cl->clReleaseMemObject(dev->workspace);
        dev->workspace = grown;
        dev->workspace_bytes = bytes;
    }
    *out = dev->workspace;
    return FLASHPORT_OK;
}

static void options(const fp_cl_device_desc *dev, const fp_cl_backward_params *t,
                    const fp_problem *p, char *buf, size_t len) {
    snprintf(buf, len,
             "-cl-std=CL1.2 -DBR=%d -DBC=%d -DTM=%d -DKC=%d -DVC=%d -DDV=%d -DOM=%d "
             "-DDTYPE=%d -DODTYPE=%d -DPAGED=0%s",
             t->br, t->bc, t->tm, t->kc, t->vc, t->dv, t->om, (int)p->dtype, (int)p->out_dtype,
             dev->is_nvidia ? " -cl-nv-verbose" : "");
}

/* Sets the arguments every backward kernel takes (attention_backward.cl's BACKWARD_ARGS). */
static flashport_status set_args(fp_cl_dev *dev, cl_kernel kernel, const fp_problem *p,
                                 const fp_args *a, cl_mem dsum, cl_int slices) {
    const fp_cl_api *cl = dev->cl;
    const cl_mem bufs[10] = {as_mem(a->q),   as_mem(a->k),   as_mem(a->v), as_mem(a->o),
                             as_mem(a->d_o), as_mem(a->lse), dsum,         as_mem(a->d_q),
                             as_mem(a->d_k), as_mem(a->d_v)};
    const cl_int ints[7] = {(cl_int)p->seq_q,
                            (cl_int)p->seq_kv,
                            (cl_int)p->head_dim,
                            (cl_int)p->heads_q,
                            (cl_int)(p->heads_q / p->heads_kv),
                            slices,
                            p->causal != 0};
    const cl_float q_sign = p->scale < 0.0f ? -1.0f : 1.0f;
    const cl_float scale_log2 = (cl_float)(fabs((double)p->scale) * 1.4426950408889634);
    const cl_long strides[12] = {p->q.batch, p->q.head, p->q.seq, p->k.batch, p->k.head, p->k.seq,
                                 p->v.batch, p->v.head, p->v.seq, p->o.batch, p->o.head, p->o.seq};
    cl_uint i = 0;
    cl_int err = CL_SUCCESS;
    for (int j = 0; j < 10 && err == CL_SUCCESS; j++)
        err = cl->clSetKernelArg(kernel, i++, sizeof bufs[j], &bufs[j]);
    for (int j = 0; j < 7 && err == CL_SUCCESS; j++)
        err = cl->clSetKernelArg(kernel, i++, sizeof ints[j], &ints[j]);
    if (err == CL_SUCCESS) err = cl->clSetKernelArg(kernel, i++, sizeof q_sign, &q_sign);
    if (err == CL_SUCCESS) err = cl->clSetKernelArg(kernel, i++, sizeof scale_log2, &scale_log2);
    for (int j = 0; j < 12 && err == CL_SUCCESS; j++)
        err = cl->clSetKernelArg(kernel, i++, sizeof strides[j], &strides[j]);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clSetKernelArg (backward)");
    return fp_cl_set_feature_args(cl, kernel, i, p, a);
}

/* The kernel `name` of the program, checked against the work-group size it needs. */
static flashport_status get_kernel(fp_cl_dev *dev, const char *opts, const char *name,
                                   size_t threads, cl_kernel *out) {
    flashport_status st =
        fp_cl_get_kernel(dev, fp_opencl_source_attention_backward, opts, name, out);
    if (st != FLASHPORT_OK) return st;
    size_t limit = 0;
    cl_int err = dev->cl->clGetKernelWorkGroupInfo(*out, dev->desc->id, CL_KERNEL_WORK_GROUP_SIZE,
                                                   sizeof limit, &limit, NULL);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clGetKernelWorkGroupInfo");
    if (limit < threads)
        return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME,
                                 "the compiled %s allows %zu work-items per group, the backward "
                                 "pass needs %zu",
                                 name, limit, threads);
    return FLASHPORT_OK;
}

flashport_status fp_cl_backward_run(fp_cl_dev *dev, const fp_plan *plan, const fp_problem *p,
                                    const fp_args *a) {
    fp_cl_backward_params t;
    memcpy(&t, plan->kernel_params.bytes, sizeof t);
    char opts[512];
    options(dev->desc, &t, p, opts, sizeof opts);
    const size_t threads = (size_t)work_items(&t);
    /* D's work-groups: any size the device takes; 64 rows where it can. */
    const size_t row_group = dev->desc->max_work_group < 64 ? dev->desc->max_work_group : 64;
    cl_kernel rowsum = NULL, dkdv = NULL, dq = NULL;
    flashport_status st = get_kernel(dev, opts, "attention_backward_rowsum", row_group, &rowsum);
    if (st == FLASHPORT_OK) st = get_kernel(dev, opts, "attention_backward_dkdv", threads, &dkdv);
    if (st == FLASHPORT_OK) st = get_kernel(dev, opts, "attention_backward_dq", threads, &dq);
    if (st != FLASHPORT_OK) return st;

    cl_mem dsum = NULL;
    const size_t entries = (size_t)lse_entries(p);
    if ((st = workspace(dev, (entries ? entries : 1) * sizeof(float), &dsum))) return st;
    const cl_int slices = (cl_int)((p->head_dim + t.dv - 1) / t.dv);
    cl_kernel kernels[3] = {rowsum, dkdv, dq};
    for (int i = 0; i < 3; i++)
        if ((st = set_args(dev, kernels[i], p, a, dsum, slices))) return st;

    const size_t batch = (size_t)p->batch, heads_q = (size_t)p->heads_q;
    const size_t q_rows = (size_t)p->seq_q, kv_rows = (size_t)p->seq_kv;
    const size_t ranges[3][3] = {
        {(q_rows + row_group - 1) / row_group * row_group, heads_q, batch},
        {(kv_rows + (size_t)t.bc - 1) / (size_t)t.bc * threads, (size_t)p->heads_kv,
         batch * (size_t)slices},
        {(q_rows + (size_t)t.br - 1) / (size_t)t.br * threads, heads_q, batch * (size_t)slices}};
    const size_t locals[3][3] = {{row_group, 1, 1}, {threads, 1, 1}, {threads, 1, 1}};
    for (int i = 0; i < 3; i++) {
        if (!ranges[i][0] || !ranges[i][1] || !ranges[i][2]) continue; /* nothing to compute */
        if ((st = fp_cl_launch(dev, kernels[i], ranges[i], locals[i]))) return st;
    }
    return FLASHPORT_OK;
}
