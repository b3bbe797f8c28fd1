/* The oracle's backward pass: dQ, dK and dV of one problem in double precision. */
#ifndef FP_REFERENCE_ATTENTION_BACKWARD_H
#define FP_REFERENCE_ATTENTION_BACKWARD_H

#include "fp_backend.h"

/* From Q, K, V, O, dO and the forward's LSE, writes dQ, dK and dV of every row of every
 * sequence (packed rows outside every sequence are not written), every feature but paged K/V
 * and FP8 inputs, which the planner declines. Returns FLASHPORT_ERROR_OUT_OF_MEMORY when the
 * scratch (2 * Nkv * d + 5 * d doubles for the longest sequence) cannot be had. */
flashport_status fp_reference_attention_backward(const fp_problem *p, const fp_args *args);

#endif
