/* The reference backend has one variant and takes every valid problem. */
#include <stdio.h>

#include "planner.h"

flashport_status fp_reference_plan(const fp_problem *p, int forced, fp_plan *out) {
    (void)p;
    (void)forced; /* the only variant is index 0 */
    out->variant = 0;
    out->workspace_bytes = 0;
    snprintf(out->reason, sizeof out->reason,
             "the reference backend's only variant; it takes every forward problem");
    return FLASHPORT_OK;
}
