#ifndef FP_REFERENCE_PLANNER_H
#define FP_REFERENCE_PLANNER_H
#include "fp_backend.h"
flashport_status fp_reference_plan(const fp_problem *p, fp_op op, int forced, fp_plan *out);
#endif
