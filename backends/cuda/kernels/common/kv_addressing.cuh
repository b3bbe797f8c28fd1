/*
 * Where a kernel finds the rows of one sequence, for every way API v2 lays out Q and K/V
 * (flashport.h): dense [batch, heads, seq, d] by strides, packed by cu_seqlens (varlen), and K/V
 * in a paged cache through a block table. Kernels ask for a sequence's lengths and first rows
 * once, then for the element offset of each row they touch; nothing else in a kernel knows the
 * layout.
 */
#ifndef FP_KERNELS_KV_ADDRESSING_CUH
#define FP_KERNELS_KV_ADDRESSING_CUH

#include <stdint.h>

#include "../../kernel_table.h"

struct fp_seq_layout {
    int q_varlen;               /* Q and O packed by cu_seqlens_q */
    int total_q;                /* rows of packed Q */
    flashport_kv_layout kv;     /* dense, varlen or paged */
    const int32_t *cu_q;        /* [batch + 1], q_varlen only */
    const int32_t *cu_kv;       /* [batch + 1], FLASHPORT_KV_VARLEN only */
    const int32_t *seqlens_kv;  /* [batch], paged only */
    const int32_t *block_table; /* [batch, max_pages_per_seq], paged only */
    int page_size, max_pages_per_seq;
    int page_shift;    /* log2(page_size) when a power of two, else -1 */
    int seq_q, seq_kv; /* dense lengths, or the maxima */
    int heads_q;
};

/* One sequence: its lengths and the packed rows where its queries and keys start (0 where Q or
 * K/V are not packed). */
struct fp_seq {
    int b, nq, nkv, q_row0, kv_row0;
};

static inline fp_seq_layout fp_seq_layout_make(const fp_problem *p, const fp_args *a) {
    fp_seq_layout s;
    s.q_varlen = p->q_varlen;
    s.total_q = (int)p->total_q;
    s.kv = p->kv_layout;
    s.cu_q = (const int32_t *)a->cu_seqlens_q;
    s.cu_kv = (const int32_t *)a->cu_seqlens_kv;
    s.seqlens_kv = (const int32_t *)a->seqlens_kv;
    s.block_table = (const int32_t *)a->block_table;
    s.page_size = (int)p->page_size;
    s.max_pages_per_seq = (int)p->max_pages_per_seq;
    s.page_shift = -1;
    for (int sh = 0; sh < 31; sh++)
        if ((int64_t)1 << sh == p->page_size) s.page_shift = sh;
    s.seq_q = (int)p->seq_q;
    s.seq_kv = (int)p->seq_kv;
    s.heads_q = (int)p->heads_q;
    return s;
}

__device__ __forceinline__ fp_seq fp_sequence(const fp_seq_layout &L, int b) {
    fp_seq s = {b, L.seq_q, L.seq_kv, 0, 0};
    if (L.q_varlen) {
        s.q_row0 = L.cu_q[b];
        s.nq = L.cu_q[b + 1] - s.q_row0;
    }
    if (L.kv == FLASHPORT_KV_VARLEN) {
        s.kv_row0 = L.cu_kv[b];
        s.nkv = L.cu_kv[b + 1] - s.kv_row0;
    } else if (L.kv == FLASHPORT_KV_PAGED) {
        s.nkv = L.seqlens_kv[b];
    }
    return s;
}

/* The query block and (batch, query head) of this block, for kernels whose grid is gridDim.x
 * query blocks by gridDim.y (batch, head) pairs. Causal blocks near the bottom do the most work,
 * so each (batch, head) starts them first. With packed Q of varied lengths, the highest query
 * blocks exist only in the longest sequences, and the default order would start a sequence's
 * blocks by its place in the batch, so that a long one late in the batch runs alone at the
 * end: there the grid is walked query block by query block, highest first, across all pairs
 * (longest work first), and short sequences fill the tail. */
struct fp_grid_block {
    int m, bh;
};

__device__ __forceinline__ fp_grid_block fp_grid_block_of(const fp_seq_layout &L, bool causal) {
    fp_grid_block g;
    if (L.q_varlen) {
        const uint64_t at = (uint64_t)blockIdx.y * gridDim.x + blockIdx.x;
        g.m = (int)(gridDim.x - 1 - at / gridDim.y);
        g.bh = (int)(at % gridDim.y);
    } else {
        g.m = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
        g.bh = (int)blockIdx.y;
    }
    return g;
}

/* First element of query (or output) row i of head h, by that tensor's strides. */
__device__ __forceinline__ int64_t fp_q_offset(const flashport_strides &st, const fp_seq &s, int h,
                                               int i) {
    return (int64_t)s.b * st.batch + (int64_t)h * st.head + (int64_t)(s.q_row0 + i) * st.seq;
}

/* Where key row j of a sequence lives, apart from the head: the index its tensor's batch stride
 * multiplies (the batch, or for a paged cache the page from the block table) and its row. K and
 * V share it, so a kernel looks each key up once. */
struct fp_kv_place {
    int64_t outer;
    int row;
};

__device__ __forceinline__ fp_kv_place fp_kv_locate(const fp_seq_layout &L, const fp_seq &s,
                                                    int j) {
    fp_kv_place at;
    if (L.kv == FLASHPORT_KV_PAGED) {
        const int slot = L.page_shift >= 0 ? j >> L.page_shift : j / L.page_size;
        at.row = L.page_shift >= 0 ? j & (L.page_size - 1) : j - slot * L.page_size;
        at.outer = L.block_table[(int64_t)s.b * L.max_pages_per_seq + slot];
    } else {
        at.outer = s.b;
        at.row = s.kv_row0 + j;
    }
    return at;
}

/* Whether a sequence's key rows lie a constant stride apart (dense or packed K/V), so that
 * row j + n is n times the seq stride past row j; a paged cache's rows are not. */
__device__ __forceinline__ bool fp_kv_strided(const fp_seq_layout &L) {
    return L.kv != FLASHPORT_KV_PAGED;
}

/* First element of a located key (or value) row of kv head hk. */
__device__ __forceinline__ int64_t fp_kv_offset(const flashport_strides &st, const fp_kv_place &at,
                                                int hk) {
    return at.outer * st.batch + (int64_t)at.row * st.seq + (int64_t)hk * st.head;
}

/* The first elements of key j's K and V rows of kv head hk, from one look-up of its place:
 * what a tile loader needs for each row it copies. */
struct fp_kv_rows {
    int64_t k, v;
};

__device__ __forceinline__ fp_kv_rows fp_kv_row_offsets(const fp_seq_layout &L, const fp_seq &s,
                                                        const flashport_strides &ks,
                                                        const flashport_strides &vs, int hk,
                                                        int j) {
    const fp_kv_place at = fp_kv_locate(L, s, j);
    fp_kv_rows r;
    r.k = fp_kv_offset(ks, at, hk);
    r.v = fp_kv_offset(vs, at, hk);
    return r;
}

/* Index of the LSE entry of query row i, head h: [batch, heads_q, seq_q], or [heads_q, total_q]
 * for packed Q. Split-KV workspaces number their rows the same way. */
__device__ __forceinline__ int64_t fp_lse_index(const fp_seq_layout &L, const fp_seq &s, int h,
                                                int i) {
    if (L.q_varlen) return (int64_t)h * L.total_q + s.q_row0 + i;
    return ((int64_t)s.b * L.heads_q + h) * L.seq_q + i;
}

#endif /* FP_KERNELS_KV_ADDRESSING_CUH */
