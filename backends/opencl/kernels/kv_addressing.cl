/*
 * Where a kernel finds the rows of one sequence, for every way API v2 lays out Q and K/V
 * (flashport.h): dense [batch, heads, seq, d] by strides, packed by cu_seqlens (varlen), and K/V
 * in a paged cache through a block table (build option PAGED=1). A kernel asks for its
 * sequence once, then for the offsets of the rows it touches; nothing else knows the layout.
 */

/* flashport_kv_layout */
#define KV_DENSE  0
#define KV_VARLEN 1
#define KV_PAGED  2

/* How the batch is laid out: the kernel arguments of feature_args.h, gathered. */
typedef struct seq_layout {
    __global const int *cu_q;       /* [batch + 1], q_varlen only */
    __global const int *cu_kv;      /* [batch + 1], KV_VARLEN only */
    __global const int *seqlens_kv; /* [batch], KV_PAGED only */
    int q_varlen, kv_layout;
    int seq_q, seq_kv; /* dense lengths, or the longest sequences */
    int total_q;       /* rows of packed Q */
    int heads_q;
} seq_layout;

/* One sequence: its lengths and the packed rows where its queries and keys start (0 where Q or
 * K/V are not packed). */
typedef struct seq_t {
    int b, nq, nkv, q_row0, kv_row0;
} seq_t;

__attribute__((always_inline)) seq_t sequence(const seq_layout *L, int b) {
    seq_t s = {b, L->seq_q, L->seq_kv, 0, 0};
    if (L->q_varlen) {
        s.q_row0 = L->cu_q[b];
        s.nq = L->cu_q[b + 1] - s.q_row0;
    }
    if (L->kv_layout == KV_VARLEN) {
        s.kv_row0 = L->cu_kv[b];
        s.nkv = L->cu_kv[b + 1] - s.kv_row0;
    } else if (L->kv_layout == KV_PAGED) {
        s.nkv = L->seqlens_kv[b];
    }
    return s;
}

/* First element of query (or output) row i of head h, by that tensor's strides (packed rows
 * have batch stride 0). */
__attribute__((always_inline)) long q_row_offset(const seq_t *s, long sb, long sh, long sn, int h,
                                                 int i) {
    return s->b * sb + h * sh + (long)(s->q_row0 + i) * sn;
}

/* First element of key (or value) row 0 of kv head hk where K/V are dense or packed; the rows
 * that follow are one seq stride apart. */
__attribute__((always_inline)) long kv_first_row_offset(const seq_t *s, long sb, long sh, long sn,
                                                        int hk) {
    return s->b * sb + hk * sh + (long)s->kv_row0 * sn;
}

/* LSE entry of query row i, head h: [batch, heads_q, seq_q], or [heads_q, total_q] packed. */
__attribute__((always_inline)) long lse_index(const seq_layout *L, const seq_t *s, int h, int i) {
    if (L->q_varlen) return (long)h * L->total_q + s->q_row0 + i;
    return ((long)s->b * L->heads_q + h) * L->seq_q + i;
}

#if PAGED
/* The block table: key j of sequence b is row j % page_size of page
 * table[b * max_pages + j / page_size]; the page is what the K and V batch strides multiply. */
typedef struct page_table {
    __global const int *table;
    int page_size, max_pages, num_pages;
} page_table;

/* Offsets of n key rows kb.. of kv head hk (those below nkv) in K and V, for a block staged
 * row by row: each work-item of nt looks up its share of rows once. */
__attribute__((always_inline)) void paged_rows(__local long *k_rows, __local long *v_rows, int n,
                                               const page_table *T, const seq_t *s, int kb, int hk,
                                               long k_sb, long k_sh, long k_sn, long v_sb,
                                               long v_sh, long v_sn, int tid, int nt) {
    for (int r = tid; r < n && kb + r < s->nkv; r += nt) {
        const int j = kb + r, slot = j / T->page_size;
        const int row = j - slot * T->page_size;
        /* A table entry outside the cache (device tables are checked only with FLASHPORT_CHECK=1)
         * reads a wrong page rather than memory outside K and V. */
        const long page = clamp(T->table[(long)s->b * T->max_pages + slot], 0, T->num_pages - 1);
        k_rows[r] = page * k_sb + row * k_sn + hk * k_sh;
        v_rows[r] = page * v_sb + row * v_sn + hk * v_sh;
    }
}
#endif
