/*
 * Exact attention, O = softmax(scale * Q K^T + masks and modifiers) V, with the online softmax
 * (OpenCL C 1.2), for every API v2 forward feature (flashport.h): sliding windows and causal
 * masks, softcap, ALiBi, additive bias, sinks, packed (varlen) Q and K/V, paged K/V and FP8
 * inputs. Where K/V are (kv_addressing.cl), what each element is worth (dtype.cl) and what
 * happens to a score (score_mods.cl) each live in one header.
 *
 * One work-group of NT work-items owns BR query rows of one (batch, query head, slice of DV
 * output columns) and streams the keys in blocks of BC, in three barrier-separated phases:
 *
 *   scores   S = Q K^T. Work-item (tr, tc) holds a TM x TN register tile of S (rows tr + i*RT,
 *            keys tc + j*CT). K goes through local memory KC head-dim columns at a time; Q
 *            either stays resident in local memory for the whole walk (QR=1, when it fits) or
 *            is staged beside K chunk by chunk (QR=0). Reads are float4 along the head dim.
 *   softmax  the row maxima of the block are combined across the CT work-items of a row
 *            through local memory; P = exp2(S*c - m*c) goes to local memory, the rescale
 *            factor of each row too, and each work-item keeps its share of the row sums in
 *            registers (combined once, at the end).
 *   values   O = alpha O + P V. The output tile is mapped independently of the score tile:
 *            work-item (org, ocg) holds OM rows (org + i*NOR) x OCN columns (float4 groups
 *            ocg + g*NCG), so that the accumulators stay few per work-item while the reads
 *            stay float4: P along the keys, V (staged VC rows at a time, row-major) along d.
 *
 * When PF=1 the next K chunk (and Q chunk when QR=0) is loaded from global memory into private
 * registers before the current one is multiplied, so the loads overlap the arithmetic
 * (OpenCL 1.2 has no asynchronous copy the GPU accelerates).
 *
 * Scores stay unscaled (Q times the sign of the scale, which is exact). The exponent is one
 * fused multiply-add, s*c - mc with c = |scale|*log2(e) and mc the row maximum times c,
 * rounded once: every probability of a row shares that rounded mc, and the rescale factors
 * use the same rounded values, so its rounding cancels from O and from the LSE. With score
 * modifiers the scores are scaled and modified first, in the log2 domain, and c is 1.
 *
 * Windows: each row sees one range of keys, and the ranges of later rows start and end no
 * earlier, so a tile walks only the blocks between its first row's first key and its last
 * row's last: the cost follows the window, not the sequence. Only blocks that cross an edge
 * of some row's range are masked.
 *
 * Build options (all required): BR BC TM TN KC VC DV OM QR DQ PF UR WIDE VEC, the dtypes DTYPE
 * and ODTYPE (dtype.cl) and PAGED (kv_addressing.cl). DQ is the head dim rounded up to KC (the
 * resident Q width when QR=1); WIDE=1 computes offsets inside a tile in 64 bits; VEC=1 (float
 * only) loads four elements at a time. The other features are runtime arguments that a
 * problem without them pays for with a few uniform branches per block of keys (windows,
 * score modifiers) or per work-group (varlen, sinks). Accumulation is float32 throughout.
 */

#define CT     (BC / TN)  /* work-items across the keys of a block */
#define RT     (BR / TM)  /* work-items across the rows of the score tile */
#define NT     (RT * CT)  /* work-group size */
#define NOR    (BR / OM)  /* work-items across the rows of the output tile */
#define NCG    (NT / NOR) /* work-items across the output columns */
#define OCN    (DV / NCG) /* output columns per work-item */
#define OG     (OCN / 4)  /* float4 column groups per work-item */
#define KC_PAD (KC + 4)
#define PS     (BC + 8) /* row stride of P: rows 8 banks apart */
#define CT_PAD (CT + 1)
#define QS     (DQ + 4) /* row stride of the resident Q */
#if QR
#define QK_FLOATS (BC * KC_PAD)
#else
#define QK_FLOATS ((BR + BC) * KC_PAD)
#endif
#define V_FLOATS     (VC * DV)
#define STAGE_FLOATS (QK_FLOATS > V_FLOATS ? QK_FLOATS : V_FLOATS)
/* Chunk elements each work-item loads: Q (when staged per chunk) and K. */
#define K_PER_ITEM ((BC * KC + NT - 1) / NT)
#define Q_PER_ITEM ((BR * KC + NT - 1) / NT)

#include "dtype.cl"
#include "kv_addressing.cl"
#include "score_mods.cl"

#if PF && PAGED
#error "PF=1 prefetches the next block's rows before the block table is read for it"
#endif

#if BR % TM || BC % TN || BR % OM || NT % NOR || DV % (4 * NCG) || BC % VC || KC % 4 || VC % 4 ||  \
    DQ % KC
#error "tile shape: TM|BR, TN|BC, OM|BR, (BR/OM)|NT, 4*NT/(BR/OM) | DV, VC|BC, KC|DQ, KC, VC % 4"
#endif

/* Offsets inside one tile of rows: int when every tile's extent fits (WIDE=0, the planner's
 * choice from the strides), which keeps the address arithmetic in 32-bit registers. */
#if WIDE
typedef long index_t;
#else
typedef int index_t;
#endif

/* UR=1 asks for full unrolling of the loops over register tiles, which keeps the tiles in
 * registers where a compiler would not unroll them by itself; CPU compilers (PoCL) build far
 * faster without it. */
#if UR
#define UNROLLED _Pragma("unroll")
#else
#define UNROLLED
#endif

/* The float4 at float offset i (a multiple of 4) of a local array. */
#define LOCAL4(base, i) (*(__local float4 *)((base) + (i)))

/* Element e of the KC-column chunk at column c0 of the rows that start at x (row stride
 * `stride`, the first `rows` of them present, each times its factor in rs); 0 outside. */
__attribute__((always_inline)) float chunk_element(__global const storage_t *x, index_t stride,
                                                   int rows, int c0, int d, int e, row_scale rs) {
    const int r = e / KC, c = c0 + e % KC;
    return (r < rows && c < d) ? LOAD(x, r * stride + c) * ROW_FACTOR(rs, r) : 0.0f;
}

#if VEC
/* Four consecutive elements at offset i (a multiple of 4) of a 16-byte aligned float tensor. */
#define LOAD4(p, i) (((__global const float4 *)(p))[(i) / 4])
#endif

/* Stages n_rows x n_cols elements, columns c0.. of the rows of x whose first elements are at
 * ROW(r) (the first `rows` of them present, columns below d present), each row times its
 * factor in rs, into dst (row stride dst_stride), zero elsewhere. VEC=1 (float, every stride
 * and d multiples of 4) moves four columns per load. */
#if VEC
#define STAGE_ROWS(ROW)                                                                            \
    const int quads = n_cols / 4;                                                                  \
    for (int e = tid; e < n_rows * quads; e += NT) {                                               \
        const int r = e / quads, c = 4 * (e % quads);                                              \
        LOCAL4(dst, r *dst_stride + c) = (r < rows && c0 + c < d)                                  \
                                             ? LOAD4(x, ROW(r) + c0 + c) * ROW_FACTOR(rs, r)       \
                                             : (float4)(0.0f);                                     \
    }
#else
#define STAGE_ROWS(ROW)                                                                            \
    for (int e = tid; e < n_rows * n_cols; e += NT) {                                              \
        const int r = e / n_cols, c = e % n_cols;                                                  \
        dst[r * dst_stride + c] =                                                                  \
            (r < rows && c0 + c < d) ? LOAD(x, ROW(r) + c0 + c) * ROW_FACTOR(rs, r) : 0.0f;        \
    }
#endif

/* Rows `stride` elements apart. */
__attribute__((always_inline)) void stage_rows(__local float *dst, int dst_stride, int n_rows,
                                               int n_cols, __global const storage_t *x,
                                               index_t stride, int rows, int c0, int d,
                                               row_scale rs, int tid) {
#define STRIDED_ROW(r) ((r)*stride)
    STAGE_ROWS(STRIDED_ROW)
#undef STRIDED_ROW
}

#if PAGED
/* Rows wherever the block table put them: row r at row_at[r] (kv_addressing.cl). */
__attribute__((always_inline)) void stage_table_rows(__local float *dst, int dst_stride, int n_rows,
                                                     int n_cols, __global const storage_t *x,
                                                     __local const long *row_at, int rows, int c0,
                                                     int d, row_scale rs, int tid) {
#define TABLE_ROW(r) row_at[r]
    STAGE_ROWS(TABLE_ROW)
#undef TABLE_ROW
}
#endif

/* acc += P V over VC keys. With guard, key u of step kk counts for row i only when
 * lo[i] <= u + kk < hi[i] (its window, relative to the first of these keys); otherwise every
 * key counts. */
__attribute__((always_inline)) void accumulate_pv(float acc[OM][OCN], __local const float *prow,
                                                  __local const float *vcol, const int guard,
                                                  const int *lo, const int *hi) {
    for (int kk = 0; kk < VC; kk += 4) {
        float4 pf[OM];
        UNROLLED
        for (int i = 0; i < OM; i++) pf[i] = LOCAL4(prow, i * NOR * PS + kk);
        UNROLLED
        for (int u = 0; u < 4; u++) {
            float4 vf[OG];
            UNROLLED
            for (int g = 0; g < OG; g++) vf[g] = LOCAL4(vcol, (kk + u) * DV + 4 * NCG * g);
            UNROLLED
            for (int i = 0; i < OM; i++) {
                const float p = u == 0 ? pf[i].x : u == 1 ? pf[i].y : u == 2 ? pf[i].z : pf[i].w;
                const int visible = !guard || (kk + u >= lo[i] && kk + u < hi[i]);
                UNROLLED
                for (int g = 0; g < OG; g++) {
                    float *a = &acc[i][4 * g];
                    a[0] = visible ? fma(p, vf[g].x, a[0]) : a[0];
                    a[1] = visible ? fma(p, vf[g].y, a[1]) : a[1];
                    a[2] = visible ? fma(p, vf[g].z, a[2]) : a[2];
                    a[3] = visible ? fma(p, vf[g].w, a[3]) : a[3];
                }
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void attention_tiled(
    __global const storage_t *q, __global const storage_t *k, __global const storage_t *v,
    __global out_t *o, __global float *lse, int has_lse, int seq_q, int seq_kv, int d, int heads_q,
    int group, int n_slices, int causal, float q_sign, float scale_log2, long q_sb, long q_sh,
    long q_sn, long k_sb, long k_sh, long k_sn, long v_sb, long v_sh, long v_sn, long o_sb,
    long o_sh, long o_sn,
    /* API v2, in feature_args.h's order */
    __global const int *cu_seqlens_q, __global const int *cu_seqlens_kv,
    __global const int *seqlens_kv, __global const int *block_table, int q_varlen, int kv_layout,
    int total_q, int page_size, int max_pages, int num_pages, int window_left, int window_right,
    float scale_abs, float softcap, int alibi, __global const float *alibi_slopes, int bias_dtype,
    __global const uchar *bias, long bias_sb, long bias_sh, long bias_sq, long bias_sk,
    int has_sinks, __global const float *sinks, __global const float *q_descale,
    __global const float *k_descale, __global const float *v_descale, int descale_block,
    int q_descale_blocks, int kv_descale_blocks) {
    __local float4 stage4[STAGE_FLOATS / 4];
    __local float4 ps4[BR * PS / 4];
    __local float red[BR * CT_PAD];
    __local float row_value[BR]; /* per block: alpha; at the end: the scaled row maximum */
    __local float *stage = (__local float *)stage4;
    __local float *ps = (__local float *)ps4;
#if QR
    __local float4 qres4[BR * QS / 4];
    __local float *qres = (__local float *)qres4;
    __local float *ks = stage; /* [BC][KC_PAD] */
#else
    __local float *qs = stage;               /* [BR][KC_PAD] */
    __local float *ks = stage + BR * KC_PAD; /* [BC][KC_PAD] */
#endif
    __local float *vs = stage; /* [VC][DV] */
#if PAGED
    __local long k_rows[BC], v_rows[BC]; /* where the block's keys are, looked up per block */
#endif

    const int tid = (int)get_local_id(0);
    const int tr = tid / CT, tc = tid % CT;     /* score tile */
    const int org = tid / NCG, ocg = tid % NCG; /* output tile */
    /* The heaviest causal tiles (the last rows) start first. */
    const int tile = (int)(get_num_groups(0) - 1 - get_group_id(0));
    const int h = (int)get_group_id(1), hk = h / group;
    const int b = (int)get_group_id(2) / n_slices;
    const int slice = (int)get_group_id(2) % n_slices;
    const int r0 = tile * BR;
    const int dv0 = slice * DV;

    const seq_layout L = {cu_seqlens_q, cu_seqlens_kv, seqlens_kv, q_varlen, kv_layout,
                          seq_q,        seq_kv,        total_q,    heads_q};
    const seq_t seq = sequence(&L, b);
    const int nq = seq.nq, nkv = seq.nkv;
    if (r0 >= nq) return; /* a tile past its sequence's queries (varlen): the group leaves */

    /* The window (causal: right 0), aligned bottom-right per sequence. Rows see nondecreasing
     * key ranges, so the tile's keys run from its first row's first key to its last row's
     * end, and a block between the last row's first key and the first row's end is visible to
     * every row: only the blocks that cross either edge (or the end of the keys) are masked.
     * Blocks outside the tile's range are skipped whole. */
    const int wl = window_left, wr = causal ? 0 : window_right;
    const int windowed = wl >= 0 || wr >= 0;
    const int2 first_keys = visible_keys(r0, nq, nkv, wl, wr);
    const int2 last_keys = visible_keys(min(r0 + BR, nq) - 1, nq, nkv, wl, wr);
    const int kv_begin = first_keys.x / BC * BC, kv_end = last_keys.y;
    const int open_lo = last_keys.x, open_hi = first_keys.y;

    /* The Q and O rows of this tile; the K and V rows of this (sequence, kv head). */
    __global const storage_t *qt = q + q_row_offset(&seq, q_sb, q_sh, q_sn, h, r0);
    __global out_t *ot = o + (q_row_offset(&seq, o_sb, o_sh, o_sn, h, r0) + dv0);
#if PAGED
    const page_table T = {block_table, page_size, max_pages, num_pages};
#else
    __global const storage_t *kh = k + kv_first_row_offset(&seq, k_sb, k_sh, k_sn, hk);
    __global const storage_t *vh = v + kv_first_row_offset(&seq, v_sb, v_sh, v_sn, hk);
#endif
    const index_t qsn = (index_t)q_sn, ksn = (index_t)k_sn, vsn = (index_t)v_sn,
                  osn = (index_t)o_sn;
    const int q_rows = nq - r0;
    /* Q carries the sign of the scale (and its descale); K and V their descales. */
    const row_scale q_rs = make_row_scale(
        q_sign, q_descale, ((long)b * heads_q + h) * q_descale_blocks, r0, descale_block);
    const long kv_ds_base = ((long)b * (heads_q / group) + hk) * kv_descale_blocks;
#define K_SCALE(pos0) make_row_scale(1.0f, k_descale, kv_ds_base, (pos0), descale_block)
#define V_SCALE(pos0) make_row_scale(1.0f, v_descale, kv_ds_base, (pos0), descale_block)
/* Stages VC rows of V from key kb + v0 on, the columns of this slice. */
#if PAGED
#define STAGE_V(kb, v0)                                                                            \
    stage_table_rows(vs, DV, VC, DV, v + dv0, v_rows + (v0), nkv - (kb) - (v0), 0, d - dv0,        \
                     V_SCALE((kb) + (v0)), tid)
#else
#define STAGE_V(kb, v0)                                                                            \
    stage_rows(vs, DV, VC, DV, vh + ((long)((kb) + (v0)) * v_sn + dv0), vsn, nkv - (kb) - (v0), 0, \
               d - dv0, V_SCALE((kb) + (v0)), tid)
#endif

    /* With modifiers, scores are scaled and modified in the log2 domain, and the softmax
     * below takes them as they are. */
    const int modified = softcap > 0.0f || alibi || bias_dtype >= 0;
    const float exp_c = modified ? 1.0f : scale_log2;

#if QR
    stage_rows(qres, QS, BR, DQ, qt, qsn, q_rows, 0, d, q_rs, tid);
#endif

    float mc[TM], lsum[TM], acc[OM][OCN];
    UNROLLED
    for (int i = 0; i < TM; i++) {
        mc[i] = -INFINITY;
        lsum[i] = 0.0f;
    }
    UNROLLED
    for (int i = 0; i < OM; i++) UNROLLED
    for (int c = 0; c < OCN; c++) acc[i][c] = 0.0f;

#if PF
    float k_next[K_PER_ITEM];
#if !QR
    float q_next[Q_PER_ITEM];
#endif
    if (kv_begin < kv_end) {
        UNROLLED
        for (int u = 0; u < K_PER_ITEM; u++) {
            const int e = tid + u * NT;
            k_next[u] = e < BC * KC ? chunk_element(kh + (long)kv_begin * k_sn, ksn, nkv - kv_begin,
                                                    0, d, e, K_SCALE(kv_begin))
                                    : 0.0f;
        }
#if !QR
        UNROLLED
        for (int u = 0; u < Q_PER_ITEM; u++) {
            const int e = tid + u * NT;
            q_next[u] = e < BR * KC ? chunk_element(qt, qsn, q_rows, 0, d, e, q_rs) : 0.0f;
        }
#endif
    }
#endif

    for (int kb = kv_begin; kb < kv_end; kb += BC) {
#if PAGED
        /* Read after the first barrier below; the last readers of the previous block's rows
         * (its V stages) are behind a barrier every work-item has passed. */
        paged_rows(k_rows, v_rows, BC, &T, &seq, kb, hk, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, tid,
                   NT);
#else
        /* The K rows of this block. */
        __global const storage_t *kb_rows = kh + (long)kb * k_sn;
#endif
        float s[TM][TN];
        UNROLLED
        for (int i = 0; i < TM; i++) UNROLLED
        for (int j = 0; j < TN; j++) s[i][j] = 0.0f;

        for (int c0 = 0; c0 < d; c0 += KC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous readers of the stage are done */
#if PF
            UNROLLED
            for (int u = 0; u < K_PER_ITEM; u++) {
                const int e = tid + u * NT;
                if (e < BC * KC) ks[(e / KC) * KC_PAD + e % KC] = k_next[u];
            }
#if !QR
            UNROLLED
            for (int u = 0; u < Q_PER_ITEM; u++) {
                const int e = tid + u * NT;
                if (e < BR * KC) qs[(e / KC) * KC_PAD + e % KC] = q_next[u];
            }
#endif
            /* The chunk after this one: the next columns, or the first of the next block. */
            const int last_chunk = c0 + KC >= d;
            const int nc0 = last_chunk ? 0 : c0 + KC;
            const int nkb = last_chunk ? kb + BC : kb;
            if (nkb < kv_end) {
                UNROLLED
                for (int u = 0; u < K_PER_ITEM; u++) {
                    const int e = tid + u * NT;
                    k_next[u] = e < BC * KC ? chunk_element(kh + (long)nkb * k_sn, ksn, nkv - nkb,
                                                            nc0, d, e, K_SCALE(nkb))
                                            : 0.0f;
                }
#if !QR
                UNROLLED
                for (int u = 0; u < Q_PER_ITEM; u++) {
                    const int e = tid + u * NT;
                    q_next[u] =
                        e < BR * KC ? chunk_element(qt, qsn, q_rows, nc0, d, e, q_rs) : 0.0f;
                }
#endif
            }
#else
#if PAGED
            stage_table_rows(ks, KC_PAD, BC, KC, k, k_rows, nkv - kb, c0, d, K_SCALE(kb), tid);
#else
            stage_rows(ks, KC_PAD, BC, KC, kb_rows, ksn, nkv - kb, c0, d, K_SCALE(kb), tid);
#endif
#if !QR
            stage_rows(qs, KC_PAD, BR, KC, qt, qsn, q_rows, c0, d, q_rs, tid);
#endif
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
#if QR
            __local const float *qrow = qres + tr * QS + c0;
#define Q_STRIDE QS
#else
            __local const float *qrow = qs + tr * KC_PAD;
#define Q_STRIDE KC_PAD
#endif
            __local const float *krow = ks + tc * KC_PAD;
            for (int c = 0; c < KC; c += 4) {
                float4 qv[TM];
                UNROLLED
                for (int i = 0; i < TM; i++) qv[i] = LOCAL4(qrow, i * RT * Q_STRIDE + c);
                UNROLLED
                for (int j = 0; j < TN; j++) {
                    const float4 kv = LOCAL4(krow, j * CT * KC_PAD + c);
                    UNROLLED
                    for (int i = 0; i < TM; i++) {
                        s[i][j] = fma(qv[i].x, kv.x, s[i][j]);
                        s[i][j] = fma(qv[i].y, kv.y, s[i][j]);
                        s[i][j] = fma(qv[i].z, kv.z, s[i][j]);
                        s[i][j] = fma(qv[i].w, kv.w, s[i][j]);
                    }
                }
            }
#undef Q_STRIDE
        }

        if (modified) {
            const score_mods mods =
                score_mods_of(scale_abs, softcap, alibi, alibi_slopes, bias_dtype, bias, bias_sb,
                              bias_sh, bias_sq, bias_sk, b, h, heads_q);
            /* Rows past the sequence's queries and keys past its keys are scored as the last
             * ones (their scores are never used), so that every read stays in bounds. */
            UNROLLED
            for (int i = 0; i < TM; i++) {
                const int row = min(r0 + tr + i * RT, nq - 1);
                UNROLLED
                for (int j = 0; j < TN; j++)
                    s[i][j] = score_log2(&mods, s[i][j], row, row + (nkv - nq),
                                         min(kb + tc + j * CT, nkv - 1));
            }
        }

        /* Only blocks crossing the end of the keys or an edge of the window need a mask. */
        const int masked = kb < open_lo || kb + BC > open_hi;
        if (masked) {
            UNROLLED
            for (int i = 0; i < TM; i++) {
                const int2 keys = visible_keys(r0 + tr + i * RT, nq, nkv, wl, wr);
                UNROLLED
                for (int j = 0; j < TN; j++) {
                    const int key = kb + tc + j * CT;
                    if (key < keys.x || key >= keys.y) s[i][j] = -INFINITY;
                }
            }
        }

        /* fmax ignores NaN, so a NaN score reaches the row's sum (and output) through p,
         * while the running maximum stays usable for the other scores. */
        UNROLLED
        for (int i = 0; i < TM; i++) {
            float mx = s[i][0];
            UNROLLED
            for (int j = 1; j < TN; j++) mx = fmax(mx, s[i][j]);
            red[(tr + i * RT) * CT_PAD + tc] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* maxima visible; every reader of K is done */
        UNROLLED
        for (int i = 0; i < TM; i++) {
            const int row = tr + i * RT;
            float mx = -INFINITY;
            UNROLLED
            for (int t = 0; t < CT; t++) mx = fmax(mx, red[row * CT_PAD + t]);
            const float mc_new = fmax(mc[i], mx * exp_c);
            /* A row that has seen no visible key yet keeps mc = -inf; subtracting 0 instead
             * gives p = 0 for its masked scores rather than NaN from -inf - -inf. */
            const float base = mc_new == -INFINITY ? 0.0f : mc_new;
            const float alpha = exp2(mc[i] - base);
            mc[i] = mc_new;
            float sum = 0.0f;
            UNROLLED
            for (int j = 0; j < TN; j++) {
                const float p = exp2(fma(s[i][j], exp_c, -base));
                ps[row * PS + tc + j * CT] = p;
                sum += p;
            }
            lsum[i] = fma(lsum[i], alpha, sum);
            if (tc == 0) row_value[row] = alpha;
        }
        /* V goes where K was: every work-item has passed the barrier after its scores. */
        STAGE_V(kb, 0);
        barrier(CLK_LOCAL_MEM_FENCE);
        UNROLLED
        for (int i = 0; i < OM; i++) {
            const float alpha = row_value[org + i * NOR];
            UNROLLED
            for (int c = 0; c < OCN; c++) acc[i][c] *= alpha;
        }

        /* In blocks an edge of the window crosses, hidden keys are skipped rather than
         * multiplied by p = 0, so that a NaN in a hidden V row does not reach rows that cannot
         * see it. (Keys past the end are staged as zeros.) */
        const int guarded = masked && windowed;
        for (int v0 = 0; v0 < BC && kb + v0 < kv_end; v0 += VC) {
            if (v0 > 0) {
                barrier(CLK_LOCAL_MEM_FENCE);
                STAGE_V(kb, v0);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            __local const float *prow = ps + org * PS + v0;
            __local const float *vcol = vs + 4 * ocg;
            int lo[OM], hi[OM];
            if (guarded) {
                UNROLLED
                for (int i = 0; i < OM; i++) {
                    const int2 keys = visible_keys(r0 + org + i * NOR, nq, nkv, wl, wr);
                    lo[i] = keys.x - (kb + v0);
                    hi[i] = keys.y - (kb + v0);
                }
                accumulate_pv(acc, prow, vcol, 1, lo, hi);
            } else {
                accumulate_pv(acc, prow, vcol, 0, lo, hi);
            }
        }
    }

    /* Row sums and maxima from the score tiles to the output tiles. */
    barrier(CLK_LOCAL_MEM_FENCE);
    UNROLLED
    for (int i = 0; i < TM; i++) {
        const int row = tr + i * RT;
        red[row * CT_PAD + tc] = lsum[i];
        if (tc == 0) row_value[row] = mc[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    UNROLLED
    for (int i = 0; i < OM; i++) {
        const int lr = org + i * NOR;
        const int row = r0 + lr;
        if (row >= nq) continue;
        float l = 0.0f, m = row_value[lr], o_factor = 1.0f;
        UNROLLED
        for (int t = 0; t < CT; t++) l += red[lr * CT_PAD + t];
        if (has_sinks) add_sink(sinks[h], &m, &l, &o_factor);
        /* l = 0: no visible key, O = 0 and LSE = -inf. A NaN l keeps the row NaN. */
        const float inv_l = l == 0.0f ? 0.0f : o_factor / l;
        UNROLLED
        for (int g = 0; g < OG; g++) UNROLLED
        for (int u = 0; u < 4; u++) {
            const int col = 4 * (ocg + g * NCG) + u;
            if (dv0 + col < d) STORE(ot, lr * osn + col, acc[i][4 * g + u] * inv_l);
        }
        if (has_lse && slice == 0 && ocg == 0)
            lse[lse_index(&L, &seq, h, row)] = l == 0.0f ? -INFINITY : fma(m, M_LN2_F, log(l));
    }
}
