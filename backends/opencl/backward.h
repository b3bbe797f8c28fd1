/*
 * The backward pass of the OpenCL backend (kernels/attention_backward.cl): its tiles, its
 * workspace (D = rowsum(dO * O), one f32 per LSE entry) and its three launches. It runs under
 * the tiled variant, which declares FP_FEATURE_BACKWARD; paged K/V and FP8 inputs are declined
 * by name.
 */
#ifndef FP_OPENCL_BACKWARD_H
#define FP_OPENCL_BACKWARD_H

#include <stddef.h>

#include "device_context.h"
#include "fp_backend.h"

/* FLASHPORT_OK with the tile shape in out->kernel_params and the reason, or
 * FLASHPORT_ERROR_UNSUPPORTED (FLASHPORT_ERROR_INVALID_ARGUMENT for a malformed
 * FLASHPORT_OPENCL_BACKWARD_SHAPE) with why in out->reason. Records no error itself. */
flashport_status fp_cl_backward_plan(const fp_cl_device_desc *dev, const fp_problem *p,
                                     fp_plan *out);

/* Queues dQ, dK and dV of the planned problem. */
flashport_status fp_cl_backward_run(fp_cl_dev *dev, const fp_plan *plan, const fp_problem *p,
                                    const fp_args *a);

#endif /* FP_OPENCL_BACKWARD_H */
