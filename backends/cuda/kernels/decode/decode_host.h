/*
 * Host side shared by the decode variants (decode.cu on the CUDA cores, decode_mma.cu on the
 * tensor cores): the checks both make, how the keys are split across blocks, and the kernel
 * arguments. A variant adds its own dtypes, head dims and rows per block.
 */
#ifndef FP_DECODE_HOST_H
#define FP_DECODE_HOST_H

#include <limits.h>
#include <stdio.h>

#include "../common/attention_args.cuh"
#include "../common/smem_limit.cuh"
#include "../split_kv.h"
#include "decode_kernel.cuh"

/* Speculative decoding verifies a handful of tokens; longer query runs are prefill. */
#define FP_DECODE_MAX_QUERIES 16
/* Batches of mixed lengths (fp_decode_share): up to this many waves of blocks, while the
 * longest sequence's splits keep at least FP_DECODE_MIXED_MIN_KEYS keys. */
#define FP_DECODE_MIXED_WAVES    4
#define FP_DECODE_MIXED_MIN_KEYS 2048

static inline int fp_decode_elem_bytes(flashport_dtype t) { return (int)fp_dtype_size(t); }

/* Keys the rows of one sequence can see at most: all of them, or a window's width. */
static inline int64_t fp_decode_visible_span(const fp_problem *p) {
    int64_t span = p->seq_kv, w = -1;
    if (p->window_left >= 0 && p->window_right >= 0 && !p->causal)
        w = p->window_left + p->window_right + p->seq_q;
    else if (p->window_left >= 0)
        w = p->window_left + p->seq_q;
    return w >= 0 && w < span ? w : span;
}

/* The checks of every decode variant: Nq, the 16-byte alignment of K and V rows that the
 * 16-byte copies need, and sizes that fit the kernels' int arithmetic. */
static inline int fp_decode_common_support(const fp_problem *p, const fp_gpu_device_props *props,
                                           const char *name, char *why, size_t why_len) {
    if (FP_GPU_CUDA && props->cc_major < 8) {
        snprintf(why, why_len, "needs cp.async (compute capability 8.0 or newer)");
        return 0;
    }
    if (p->seq_q > FP_DECODE_MAX_QUERIES) {
        snprintf(why, why_len, "%s takes up to %d query rows per sequence, not %lld", name,
                 FP_DECODE_MAX_QUERIES, (long long)p->seq_q);
        return 0;
    }
    const int64_t n = 16 / fp_decode_elem_bytes(p->dtype);
    const flashport_strides *st[2] = {&p->k, &p->v};
    for (int t = 0; t < 2; t++)
        if (st[t]->batch % n || st[t]->seq % n || st[t]->head % n) {
            snprintf(why, why_len, "K and V strides must be multiples of %lld elements (16 bytes)",
                     (long long)n);
            return 0;
        }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if (p->q_varlen && p->total_q > INT_MAX / 2) {
        snprintf(why, why_len, "total_q must stay below 2^30");
        return 0;
    }
    return 1;
}

/* Rows chunks and splits for blocks of `rows` rows. Sequences of one length (dense K/V): as
 * many blocks as one wave of blocks_per_sm per SM holds, rounded down, since one block more
 * than the GPU holds at once costs a whole second wave. Sequences whose lengths the host cannot
 * see (varlen and paged tables live on the device): up to FP_DECODE_MIXED_WAVES waves, so that
 * the blocks of short sequences finish early and the SMs take up the splits of the long ones,
 * as long as the splits stay long enough to repay their start and merge. No split is shorter
 * than FP_DECODE_MIN_TILES_PER_SPLIT tiles of the span, and packed Q is not split. Returns 0
 * with the reason when the grid would not fit one launch. */
static inline int fp_decode_share(const fp_problem *p, const fp_gpu_device_props *props, int rows,
                                  int tile_keys, int blocks_per_sm, fp_decode_params *d, char *why,
                                  size_t why_len) {
    d->rows = rows;
    const int64_t group_rows = p->heads_q / p->heads_kv * p->seq_q;
    d->row_chunks = (int)((group_rows + rows - 1) / rows);
    const int64_t units = p->batch * p->heads_kv * d->row_chunks;
    const int64_t target = (int64_t)(props->sm_count > 0 ? props->sm_count : 1) * blocks_per_sm;
    const int64_t span = fp_decode_visible_span(p);
    int64_t splits = target / units;
    const int mixed = p->q_varlen || p->kv_layout != FLASHPORT_KV_DENSE;
    if (mixed) {
        int64_t more = FP_DECODE_MIXED_WAVES * target / units;
        if (more > span / FP_DECODE_MIXED_MIN_KEYS) more = span / FP_DECODE_MIXED_MIN_KEYS;
        if (more > splits) splits = more;
    }
    const int64_t most = span / (FP_DECODE_MIN_TILES_PER_SPLIT * tile_keys);
    if (splits > most) splits = most;
    if (p->q_varlen) splits = 1; /* packed Q is not split (fp_split_kv_takes says why) */
    d->splits = splits < 1 ? 1 : (int)splits;
    if (units * d->splits > INT_MAX) {
        snprintf(why, why_len, "batch*heads_kv = %lld is more blocks than one launch takes",
                 (long long)(p->batch * p->heads_kv));
        return 0;
    }
    return 1;
}

static inline size_t fp_decode_workspace(const fp_problem *p, const fp_gpu_kernel_params *params) {
    return fp_split_kv_workspace(p, params->decode.splits);
}

static inline fp_decode_args fp_decode_args_make(const fp_gpu_launch *L, int tile_keys) {
    const fp_problem *p = &L->p;
    const fp_args *x = L->args;
    fp_decode_args a;
    a.q = L->q;
    a.k = L->k;
    a.v = L->v;
    a.o = L->o;
    a.lse = L->lse;
    a.qs = p->q;
    a.ks = p->k;
    a.vs = p->v;
    a.os = p->o;
    a.out_dtype = p->out_dtype;
    a.seq = fp_seq_layout_make(p, x);
    a.mods = fp_score_mods_make(p, x);
    a.descale = p->descale;
    const int64_t blk = p->descale == FLASHPORT_DESCALE_BLOCK ? p->descale_block : 1;
    /* Block counts as seq / block rounded up, without the overflow of seq + block - 1. */
    a.descale_block = (int)(blk < INT_MAX ? blk : INT_MAX);
    a.q_blocks = (int)(p->seq_q / blk + (p->seq_q % blk != 0));
    a.kv_blocks = (int)(p->seq_kv / blk + (p->seq_kv % blk != 0));
    a.q_descale = (const float *)x->q_descale;
    a.k_descale = (const float *)x->k_descale;
    a.v_descale = (const float *)x->v_descale;
    a.heads_kv = (int)p->heads_kv;
    a.group = (int)(p->heads_q / p->heads_kv);
    a.row_chunks = L->params->decode.row_chunks;
    a.splits = L->params->decode.splits;
    a.tile_keys = tile_keys;
    a.part_rows = fp_split_kv_rows(p);
    a.part_o = (float *)L->workspace;
    a.part_ml =
        a.splits > 1 ? (float *)((char *)L->workspace + fp_split_kv_ml_offset(p, a.splits)) : NULL;
    return a;
}

/* Enqueues KERNEL over the decode grid of L, then the merge of the splits when there are more
 * than one. Decode is a few microseconds of work between a call's other kernels, so where the
 * GPU allows it the kernel is launched overlapped with the one before it on the stream
 * (vendors/cuda.h): its blocks are placed while that kernel finishes and wait in the kernel
 * for its output. The kernel and the merge ask for one carveout, so that an SM can hold both. */
template <auto KERNEL, size_t SMEM>
static inline gpuError_t fp_decode_launch(const fp_gpu_launch *L, int tile_keys) {
    gpuError_t e = fp_raise_smem_limit<KERNEL, SMEM>();
    if (e == gpuSuccess) e = fp_prefer_shared_carveout<KERNEL>();
    if (e != gpuSuccess) return e;
    const fp_decode_args a = fp_decode_args_make(L, tile_keys);
    const unsigned blocks = (unsigned)(L->p.batch * L->p.heads_kv * a.row_chunks * a.splits);
    e = fp_gpu_launch_overlapped(L->props->cc_major >= 9, KERNEL, dim3(blocks),
                                 dim3(FP_DECODE_THREADS), SMEM, L->stream, a);
    if (e != gpuSuccess || a.splits == 1) return e;
    return fp_split_kv_merge(L, a.splits);
}

#endif /* FP_DECODE_HOST_H */
