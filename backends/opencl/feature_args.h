/*
 * The API v2 arguments of the OpenCL kernels that implement features (fp_variant.features not
 * 0): they follow the arguments every kernel takes (backend.c), in this order, which the
 * kernels' signatures repeat:
 *
 *   cu_seqlens_q, cu_seqlens_kv, seqlens_kv, block_table        buffers (NULL when unused)
 *   int q_varlen, kv_layout, total_q, page_size, max_pages, num_pages
 *   int window_left, window_right                  -1: unbounded; both clamped to 2^31-1
 *   float |scale|, softcap
 *   int alibi (flashport_alibi), alibi_slopes
 *   int bias_dtype (-1: no bias), bias, long bias strides (batch, head, query, key)
 *   int has_sinks, sinks
 *   q_descale, k_descale, v_descale, int descale_block, q_descale_blocks, kv_descale_blocks
 *                                                  per tensor: block 2^31-1, 0 blocks
 *
 * Sizes reach the kernels as int: fp_cl_feature_sizes_fit says whether they fit.
 */
#ifndef FP_OPENCL_FEATURE_ARGS_H
#define FP_OPENCL_FEATURE_ARGS_H

#include "cl_loader.h"
#include "fp_backend.h"

/* 1 when the problem's varlen and paged sizes fit the kernels' int arguments; else 0 and why. */
int fp_cl_feature_sizes_fit(const fp_problem *p, char *why, size_t why_len);

/* Sets the feature arguments of kernel from index first on. */
flashport_status fp_cl_set_feature_args(const fp_cl_api *cl, cl_kernel kernel, cl_uint first,
                                        const fp_problem *p, const fp_args *a);

#endif /* FP_OPENCL_FEATURE_ARGS_H */
