/*
 * The one planning function of the OpenCL backend: which variant runs a problem. nv_tf32x3
 * (kernels/attention_nv_tf32x3.cl, tensor cores through inline PTX) where nv_tf32x3.c says the
 * device and problem can run it (NVIDIA, compute capability 8.0+, f32, d <= 128, and its program
 * builds) and the problem asks for no API v2 feature; tiled (kernels/attention_tiled.cl,
 * portable OpenCL C, every forward feature, tiled.c) everywhere else. A variant is asked only
 * about problems whose features it implements.
 * FLASHPORT_OPENCL_KERNEL=tiled keeps the planner on tiled, FLASHPORT_OPENCL_KERNEL=nv_tf32x3
 * makes a problem nv_tf32x3 cannot run unsupported (both for comparing the two on one GPU); a
 * kernel forced by name takes precedence. Each variant chooses its own parameters. The
 * backward pass has one implementation, tiled's (backward.c), whatever FLASHPORT_OPENCL_KERNEL
 * says; the core offers it to no variant without the backward feature.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "host.h"
#include "kernel_list.h"
#include "planner.h"

#define FP_CL_KERNEL_ADDRESS(name) &fp_cl_kernel_##name,
static const fp_cl_kernel *const kernels[] = {FP_CL_KERNELS(FP_CL_KERNEL_ADDRESS)};
#undef FP_CL_KERNEL_ADDRESS
static const int n_kernels = (int)(sizeof kernels / sizeof kernels[0]);

int fp_cl_kernel_count(void) { return n_kernels; }

const fp_cl_kernel *fp_cl_kernel_at(int index) {
    return index >= 0 && index < n_kernels ? kernels[index] : NULL;
}

static int find_kernel(const char *name) {
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i]->info.name, name) == 0) return i;
    return -1;
}

/* Asks variant i, when it implements every feature of the problem; on yes fills the plan. The
 * reason, either way, is in out->reason. */
static flashport_status try_variant(int i, fp_cl_dev *dev, const fp_problem *p, fp_plan *out) {
    const unsigned missing = fp_problem_features(p, FP_OP_FORWARD) & ~kernels[i]->info.features;
    if (missing) {
        snprintf(out->reason, sizeof out->reason, "%s does not implement %s", kernels[i]->info.name,
                 fp_feature_name(missing & -missing));
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    fp_cl_kernel_params params;
    memset(&params, 0, sizeof params);
    flashport_status st = kernels[i]->plan(dev, p, &params, out->reason, sizeof out->reason);
    if (st != FLASHPORT_OK) return st;
    out->variant = i;
    memcpy(out->kernel_params.bytes, &params, sizeof params);
    return FLASHPORT_OK;
}

flashport_status fp_cl_plan(fp_cl_dev *dev, const fp_problem *p, int forced, fp_plan *out) {
    memset(out, 0, sizeof *out);
    const char *choice = getenv("FLASHPORT_OPENCL_KERNEL");
    if (choice && *choice) {
        const int named = find_kernel(choice);
        if (named < 0) {
            snprintf(out->reason, sizeof out->reason,
                     "FLASHPORT_OPENCL_KERNEL=%.64s is neither tiled nor nv_tf32x3", choice);
            return fp_cl_host->error(FLASHPORT_ERROR_INVALID_ARGUMENT, FP_CL_NAME, "%s",
                                     out->reason);
        }
        if (forced < 0) forced = named;
    }
    flashport_status st;
    if (forced >= 0) {
        st = try_variant(forced, dev, p, out);
    } else {
        st = try_variant(find_kernel(fp_cl_kernel_nv_tf32x3.info.name), dev, p, out);
        if (st != FLASHPORT_OK) {
            /* On NVIDIA, say why the tensor-core kernel was passed over (elsewhere it never
             * runs). */
            if (dev->desc->is_nvidia)
                fp_cl_host->log(FP_LOG_INFO, FP_CL_NAME, "tiled rather than nv_tf32x3: %s",
                                out->reason);
            st = try_variant(find_kernel(fp_cl_kernel_tiled.info.name), dev, p, out);
        }
    }
    if (st != FLASHPORT_OK) return fp_cl_host->error(st, FP_CL_NAME, "%s", out->reason);
    return FLASHPORT_OK;
}

flashport_status fp_cl_plan_backward(fp_cl_dev *dev, const fp_problem *p, fp_plan *out) {
    memset(out, 0, sizeof *out);
    out->variant = find_kernel(fp_cl_kernel_tiled.info.name);
    flashport_status st = fp_cl_backward_plan(dev->desc, p, out);
    if (st != FLASHPORT_OK) return fp_cl_host->error(st, FP_CL_NAME, "%s", out->reason);
    return FLASHPORT_OK;
}
