/* The oracle's arithmetic: exact attention of one problem in double precision. */
#ifndef FP_REFERENCE_ATTENTION_DOUBLE_H
#define FP_REFERENCE_ATTENTION_DOUBLE_H

#include "fp_backend.h"

/* Computes O (and LSE when args->lse) for every query row of every sequence and head, every
 * forward feature included; packed rows outside every sequence are not written. Returns
 * FLASHPORT_ERROR_OUT_OF_MEMORY when the scratch (Nkv + 2d doubles) cannot be had. */
flashport_status fp_reference_attention(const fp_problem *p, const fp_args *args);

#endif
