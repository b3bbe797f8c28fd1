/*
 * What an attention kernel receives, passed by value, and the index arithmetic every kernel
 * shares: which (batch, query head, kv head) a block works on, where a head's rows start, and
 * how far each query row may look under the bottom-right causal mask.
 *
 * Grid convention of the kernels that use fp_attn_head(): blockIdx.z = batch * Hq + query head.
 */
#ifndef FP_KERNELS_ATTENTION_ARGS_CUH
#define FP_KERNELS_ATTENTION_ARGS_CUH

#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "../../kernel_table.h"
#include "online_softmax.cuh"

#define FP_GRID_Z_MAX 65535 /* also the limit of gridDim.y */

struct fp_attn_args {
    const void *q, *k, *v;
    void *o;
    float *lse; /* NULL: not requested */
    flashport_strides qs, ks, vs, os;
    int heads_q;
    int group; /* Hq / Hkv: query heads per kv head */
    int nq, nkv, d;
    int causal;
    int causal_offset; /* Nkv - Nq: key j is visible to query i when j <= i + causal_offset */
    float scale_log2;  /* scale * log2(e) */
};

static inline fp_attn_args fp_attn_args_make(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    fp_attn_args a;
    a.q = L->q;
    a.k = L->k;
    a.v = L->v;
    a.o = L->o;
    a.lse = L->lse;
    a.qs = p->q;
    a.ks = p->k;
    a.vs = p->v;
    a.os = p->o;
    a.heads_q = (int)p->heads_q;
    a.group = (int)(p->heads_q / p->heads_kv);
    a.nq = (int)p->seq_q;
    a.nkv = (int)p->seq_kv;
    a.d = (int)p->head_dim;
    a.causal = p->causal != 0;
    a.causal_offset = (int)(p->seq_kv - p->seq_q);
    a.scale_log2 = p->scale * FP_LOG2E;
    return a;
}

/* Host check shared by every kernel's supports(): the sizes (packed row counts included) fit
 * the kernels' int index arithmetic with room to spare, and B * Hq fits the grid dimension (y or z)
 * that enumerates it. Returns 1, or 0 with the reason. */
static inline int fp_attn_sizes_fit(const fp_problem *p, char *why, size_t why_len) {
    if (p->seq_q > INT_MAX / 2 || p->seq_kv > INT_MAX / 2 || p->head_dim > INT_MAX / 2) {
        snprintf(why, why_len, "sequence lengths and head_dim must stay below 2^30");
        return 0;
    }
    if ((p->q_varlen && p->total_q > INT_MAX / 2) ||
        (p->kv_layout == FLASHPORT_KV_VARLEN && p->total_kv > INT_MAX / 2)) {
        snprintf(why, why_len, "packed rows (total_q, total_kv) must stay below 2^30");
        return 0;
    }
    if (p->batch * p->heads_q > FP_GRID_Z_MAX) {
        snprintf(why, why_len, "batch*heads_q = %lld exceeds the grid limit of %d",
                 (long long)(p->batch * p->heads_q), FP_GRID_Z_MAX);
        return 0;
    }
    return 1;
}

/* Whether p asks for an API v2 feature the prefill kernels implement (FP_GPU_FEATURES_NO_FP8):
 * the kernels that keep separate instances for dense problems pick their general ones. */
static inline int fp_attn_general(const fp_problem *p) {
    return (fp_problem_features(p, FP_OP_FORWARD) & FP_GPU_FEATURES_NO_FP8) != 0;
}

/* The instance a kernel compiled five ways runs p on. Dense problems take one in which every
 * feature is folded away but sinks, which every instance takes where the rows' softmax state
 * starts (online_softmax_rows.cuh), at no cost in the tile loop. A paged cache alone (Q dense,
 * no window), the prefill of a serving batch, changes only where K/V rows are read: it takes
 * the dense instance with the paged look-up compiled in, and keeps the dense instance's
 * registers. The score modifiers (softcap, ALiBi, bias) touch every score; the other features
 * (varlen and paged layouts together, windows) only move a block's bounds and mask the tiles at
 * its edges, so they take an instance without the modifiers' code, whose registers the tiles
 * keep. Softcap and ALiBi on a dense layout (Gemma 2's global layers, ALiBi models' prefill)
 * take the dense instance with those two modifiers compiled in, which keeps the dense
 * instance's tiles where the instance with every feature spills at them. */
enum fp_attn_instance {
    FP_ATTN_DENSE,
    FP_ATTN_PAGED,
    FP_ATTN_SOFTCAP_ALIBI,
    FP_ATTN_MASKED,
    FP_ATTN_MODIFIED
};

static inline enum fp_attn_instance fp_attn_instance_of(const fp_problem *p) {
    const unsigned f =
        fp_problem_features(p, FP_OP_FORWARD) & FP_GPU_FEATURES_NO_FP8 & ~FP_FEATURE_SINKS;
    if (f && !(f & ~(FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI))) return FP_ATTN_SOFTCAP_ALIBI;
    if (f & (FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS)) return FP_ATTN_MODIFIED;
    if (f == FP_FEATURE_PAGED) return FP_ATTN_PAGED;
    return f ? FP_ATTN_MASKED : FP_ATTN_DENSE;
}

/* Writes the names of p's API v2 features that the prefill kernels implement, comma-separated,
 * into buf (a decline that depends on them names them); returns the characters written. */
static inline size_t fp_attn_feature_names(const fp_problem *p, char *buf, size_t len) {
    const unsigned f = fp_problem_features(p, FP_OP_FORWARD) & FP_GPU_FEATURES_NO_FP8;
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (unsigned bit = 1; bit & FP_FEATURES_ALL; bit <<= 1)
        if ((f & bit) && used < len)
            used += snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                             fp_feature_name(bit));
    return used;
}

/* Host check of kernels whose general instances load rows with 16-byte cp.async: the Q, K and V
 * strides of a general problem must be multiples of `elems` elements. Returns 1, or 0 with a
 * reason that names the problem's features (without them the dense path runs it). */
static inline int fp_attn_general_strides_fit(const fp_problem *p, int64_t elems, char *why,
                                              size_t why_len) {
    const flashport_strides *st[3] = {&p->q, &p->k, &p->v};
    int fit = 1;
    for (int t = 0; t < 3; t++)
        fit =
            fit && st[t]->batch % elems == 0 && st[t]->head % elems == 0 && st[t]->seq % elems == 0;
    if (fit || !fp_attn_general(p)) return 1;
    const size_t used = fp_attn_feature_names(p, why, why_len);
    if (used < why_len)
        snprintf(why + used, why_len - used,
                 ": these need Q, K and V strides in multiples of %lld elements (16-byte rows "
                 "for cp.async)",
                 (long long)elems);
    return 0;
}

/* The same for kernels on this grid convention (blockIdx.y = block of `cols_per_block` output
 * columns of d), which also need the column blocks to fit the grid. */
static inline int fp_attn_grid_fits(const fp_problem *p, int cols_per_block, char *why,
                                    size_t why_len) {
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if ((p->head_dim + cols_per_block - 1) / cols_per_block > FP_GRID_Z_MAX) {
        snprintf(why, why_len, "head_dim = %lld needs more than %d column blocks",
                 (long long)p->head_dim, FP_GRID_Z_MAX);
        return 0;
    }
    return 1;
}

/* One (batch, query head): the first element of each tensor's head, and its LSE row. */
template <typename T> struct fp_attn_head {
    const T *q, *k, *v;
    T *o;
    float *lse; /* NULL: not requested */
};

template <typename T>
__device__ __forceinline__ fp_attn_head<T> fp_attn_head_of(const fp_attn_args &a, int bh) {
    int b = bh / a.heads_q, h = bh % a.heads_q, hkv = h / a.group;
    fp_attn_head<T> H;
    H.q = (const T *)a.q + b * a.qs.batch + h * a.qs.head;
    H.k = (const T *)a.k + b * a.ks.batch + hkv * a.ks.head;
    H.v = (const T *)a.v + b * a.vs.batch + hkv * a.vs.head;
    H.o = (T *)a.o + b * a.os.batch + h * a.os.head;
    H.lse = a.lse ? a.lse + (int64_t)bh * a.nq : (float *)0;
    return H;
}

/* Keys [0, n) that query row `row` may see: all of them, or under the causal mask those with
 * j <= row + Nkv - Nq (possibly none). */
__device__ __forceinline__ int fp_visible_keys(const fp_attn_args &a, int row) {
    if (!a.causal) return a.nkv;
    int n = row + a.causal_offset + 1;
    return n < 0 ? 0 : (n > a.nkv ? a.nkv : n);
}

/* Keys any row of [row0, row0 + rows) may see: the loop bound of a block's key tiles, so that
 * tiles wholly above the causal diagonal are never visited. */
__device__ __forceinline__ int fp_block_key_end(const fp_attn_args &a, int row0, int rows) {
    int last = row0 + rows - 1;
    if (last > a.nq - 1) last = a.nq - 1;
    return fp_visible_keys(a, last);
}

#endif /* FP_KERNELS_ATTENTION_ARGS_CUH */
