/* The API v2 arguments of the feature-implementing OpenCL kernels (feature_args.h). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "feature_args.h"
#include "host.h"

static cl_mem as_mem(const void *handle) { return (cl_mem)(void *)(uintptr_t)handle; }

/* A window side, or a descale block, as int: wider than any sequence means the same. */
static cl_int clamp_int(int64_t x) { return x > INT_MAX ? INT_MAX : (cl_int)x; }

int fp_cl_feature_sizes_fit(const fp_problem *p, char *why, size_t why_len) {
    const int64_t sizes[3] = {p->q_varlen ? p->total_q : 0,
                              p->kv_layout == FLASHPORT_KV_VARLEN ? p->total_kv : 0,
                              p->kv_layout == FLASHPORT_KV_PAGED ? p->max_pages_per_seq : 0};
    static const char *const names[3] = {"total_q", "total_kv", "max_pages_per_seq"};
    for (int i = 0; i < 3; i++)
        if (sizes[i] > INT_MAX) {
            snprintf(why, why_len, "%s above 2^31-1 is not supported by the OpenCL kernels",
                     names[i]);
            return 0;
        }
    return 1;
}

flashport_status fp_cl_set_feature_args(const fp_cl_api *cl, cl_kernel kernel, cl_uint first,
                                        const fp_problem *p, const fp_args *a) {
    const cl_mem cu_q = as_mem(a->cu_seqlens_q), cu_kv = as_mem(a->cu_seqlens_kv),
                 seqlens_kv = as_mem(a->seqlens_kv), table = as_mem(a->block_table),
                 slopes = as_mem(a->alibi_slopes), bias = as_mem(a->bias), sinks = as_mem(a->sinks),
                 q_ds = as_mem(a->q_descale), k_ds = as_mem(a->k_descale),
                 v_ds = as_mem(a->v_descale);
    const cl_int q_varlen = p->q_varlen != 0, kv_layout = (cl_int)p->kv_layout;
    const cl_int total_q = p->q_varlen ? (cl_int)p->total_q : 0;
    const int paged = p->kv_layout == FLASHPORT_KV_PAGED;
    /* Keys sit below 2^31-1, so a wider page holds them all as one of 2^31-1 rows does. */
    const cl_int page_size = paged ? clamp_int(p->page_size) : 1;
    const cl_int max_pages = paged ? (cl_int)p->max_pages_per_seq : 0;
    /* Table entries are int32: a larger cache is addressed the same. */
    const cl_int num_pages = paged ? clamp_int(p->num_pages) : 0;
    const cl_int window_left = clamp_int(p->window_left), window_right = clamp_int(p->window_right);
    const cl_float scale_abs = fabsf(p->scale), softcap = p->softcap;
    const cl_int alibi = (cl_int)p->alibi;
    const cl_int bias_dtype = p->bias.enabled ? (cl_int)p->bias.dtype : -1;
    const cl_long bias_strides[4] = {p->bias.batch, p->bias.head, p->bias.query, p->bias.key};
    const cl_int has_sinks = p->sinks != 0;
    /* Per tensor: one factor, position / 2^31-1 = 0 for every position. */
    const int per_block = p->descale == FLASHPORT_DESCALE_BLOCK;
    const cl_int descale_block = per_block ? clamp_int(p->descale_block) : INT_MAX;
    const cl_int q_blocks =
        per_block ? (cl_int)((p->seq_q + descale_block - 1) / descale_block) : 0;
    const cl_int kv_blocks =
        per_block ? (cl_int)((p->seq_kv + descale_block - 1) / descale_block) : 0;

    struct {
        size_t size;
        const void *value;
    } args[] = {{sizeof cu_q, &cu_q},
                {sizeof cu_kv, &cu_kv},
                {sizeof seqlens_kv, &seqlens_kv},
                {sizeof table, &table},
                {sizeof q_varlen, &q_varlen},
                {sizeof kv_layout, &kv_layout},
                {sizeof total_q, &total_q},
                {sizeof page_size, &page_size},
                {sizeof max_pages, &max_pages},
                {sizeof num_pages, &num_pages},
                {sizeof window_left, &window_left},
                {sizeof window_right, &window_right},
                {sizeof scale_abs, &scale_abs},
                {sizeof softcap, &softcap},
                {sizeof alibi, &alibi},
                {sizeof slopes, &slopes},
                {sizeof bias_dtype, &bias_dtype},
                {sizeof bias, &bias},
                {sizeof bias_strides[0], &bias_strides[0]},
                {sizeof bias_strides[1], &bias_strides[1]},
                {sizeof bias_strides[2], &bias_strides[2]},
                {sizeof bias_strides[3], &bias_strides[3]},
                {sizeof has_sinks, &has_sinks},
                {sizeof sinks, &sinks},
                {sizeof q_ds, &q_ds},
                {sizeof k_ds, &k_ds},
                {sizeof v_ds, &v_ds},
                {sizeof descale_block, &descale_block},
                {sizeof q_blocks, &q_blocks},
                {sizeof kv_blocks, &kv_blocks}};
    for (cl_uint i = 0; i < sizeof args / sizeof args[0]; i++) {
        cl_int err = cl->clSetKernelArg(kernel, first + i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) return fp_cl_fail(err, "clSetKernelArg (feature arguments)");
    }
    return FLASHPORT_OK;
}
