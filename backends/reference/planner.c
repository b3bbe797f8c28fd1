/* The reference backend has one variant. It takes every valid forward problem, and every
 * backward problem but those of a paged cache or FP8 inputs: their gradients would land in a
 * page pool or in FP8 tensors, which no training step differentiates. */
#include <stdio.h>

#include "planner.h"

flashport_status fp_reference_plan(const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    (void)forced; /* the only variant is index 0 */
    out->variant = 0;
    out->workspace_bytes = 0;
    if (op == FP_OP_BACKWARD) {
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
        snprintf(out->reason, sizeof out->reason,
                 "the reference backend's only variant; its backward pass accumulates dK and dV "
                 "in double");
        return FLASHPORT_OK;
    }
    snprintf(out->reason, sizeof out->reason,
             "the reference backend's only variant; it takes every forward problem");
    return FLASHPORT_OK;
}
