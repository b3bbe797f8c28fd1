/* The oracle's arithmetic: exact attention of one problem in double precision. */
#ifndef FP_REFERENCE_ATTENTION_DOUBLE_H
#define FP_REFERENCE_ATTENTION_DOUBLE_H

#include "fp_backend.h"

/* Computes O (and LSE when args->lse) for every (batch, head, query row). Returns
 * FLASHPORT_ERROR_OUT_OF_MEMORY when the per-row scratch (Nkv + d doubles) cannot be had. */
flashport_status fp_reference_attention(const fp_problem *p, const fp_args *args);

#endif
