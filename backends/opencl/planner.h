/* The OpenCL backend's variant table and its one planning function. */
#ifndef FP_OPENCL_PLANNER_H
#define FP_OPENCL_PLANNER_H

#include "device_context.h"
#include "fp_backend.h"
#include "kernel_table.h"

/* The variants in kernel_list.h order; fp_backend.variants mirrors it index for index. */
int fp_cl_kernel_count(void);
const fp_cl_kernel *fp_cl_kernel_at(int index);

/* Which variant runs p on dev (forced >= 0: only that one), with its parameters in the plan;
 * else the status, recorded as the thread's error, with the reason in out->reason. */
flashport_status fp_cl_plan(fp_cl_dev *dev, const fp_problem *p, int forced, fp_plan *out);

/* The backward pass, which runs under the tiled variant (backward.h), with its parameters in the
 * plan; else as fp_cl_plan. */
flashport_status fp_cl_plan_backward(fp_cl_dev *dev, const fp_problem *p, fp_plan *out);

#endif /* FP_OPENCL_PLANNER_H */
