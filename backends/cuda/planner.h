/* The CUDA backend's variant table and its one planning function. */
#ifndef FP_CUDA_PLANNER_H
#define FP_CUDA_PLANNER_H

#include "kernel_table.h"

/* The linked variants in kernel_list.h order; fp_backend.variants mirrors it index for index. */
int fp_gpu_kernel_count(void);
const fp_gpu_kernel *fp_gpu_kernel_at(int index);

/* Which variant runs operation op of p: `forced` >= 0 takes only that one; otherwise the
 * preferred variant for the operation, dtype and grid, the forward falling back along the
 * ladder. FLASHPORT_ERROR_UNSUPPORTED with the reason in out->reason when nothing can. */
flashport_status fp_gpu_plan(const fp_gpu_device_props *props, const fp_problem *p, fp_op op,
                             int forced, fp_plan *out);

#endif /* FP_CUDA_PLANNER_H */
