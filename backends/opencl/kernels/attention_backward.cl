/*
 * The backward pass of exact attention (OpenCL C 1.2): dQ, dK and dV from Q, K, V, O, dO and the
 * forward's LSE, recomputing the probabilities block by block (no N x N storage), for the
 * forward features the backward covers (flashport.h): windows and causal masks, softcap (with
 * its chain rule), ALiBi, additive bias (no gradient to it), sinks (carried by the LSE), GQA
 * and packed (varlen) Q and K/V. Where rows are (kv_addressing.cl), what elements are worth
 * (dtype.cl) and what happens to a score (score_mods.cl) come from the forward's headers.
 *
 * Three kernels of one program, queued in this order:
 *   attention_backward_rowsum  D = rowsum(dO * O), one work-item per query row, f32, into a
 *                              workspace laid out as the LSE;
 *   attention_backward_dkdv    one work-group per (BC keys, kv head, batch, DV columns): for
 *                              each query head of the group in order, and each block of BR query
 *                              rows that sees one of its keys, S = Q K^T and dP = dO V^T (over
 *                              the whole head dim, KC columns at a time through local memory),
 *                              P = exp(S - LSE), dS = P (dP - D) (times the softcap's slope),
 *                              then dV += P^T dO and dK += dS^T Q on its columns, in registers;
 *   attention_backward_dq      one work-group per (BR query rows, head, batch, DV columns):
 *                              the same S, dP, P and dS for each block of keys the rows see,
 *                              then dQ += dS K.
 * Every sum runs in a fixed order in one work-group, without atomics (OpenCL 1.2 has no float
 * atomics): the results are the same bits on every run. Heads wider than DV are split into
 * column slices, each recomputing the scores, as in the forward's tiled kernel; a slice's
 * columns past the head dim are neither staged nor summed, so that one DV serves narrower
 * heads at the cost of idle accumulators only.
 *
 * The score tile: work-item (tr, tc) holds S and dP for rows tr + i*RT (i < TM) and the four
 * consecutive keys 4*tc.. as float4s, K and V staged transposed (head dim by key) so that one
 * float4 load gives four keys. The output tiles: work-item (orow, ocg) holds OM rows (keys
 * for dK/dV, queries for dQ) orow + i*(rows/OM) and float4 groups of columns ocg + g*(groups
 * of work-items across the columns). Vector arithmetic keeps the instruction count low where
 * a compiler vectorises nothing (PoCL with -cl-opt-disable).
 *
 * Scores stay unscaled with the sign of the scale moved into Q, as in the forward: for
 * u = scale * q.k = |scale| * (sign q).k, dK = |scale| sum dS (sign q), dQ = scale sum dS k.
 *
 * Build options (all required): BR BC TM KC VC DV OM, DTYPE and ODTYPE (dtype.cl, not FP8) and
 * PAGED=0 (kv_addressing.cl). Every feature is a runtime argument. Accumulation is f32.
 */

#define CT           (BC / 4)         /* work-items across the keys of the score tile */
#define RT           (BR / TM)        /* work-items across its rows */
#define NT           (RT * CT)        /* work-group size */
#define KC_PAD       (KC + 4)         /* row stride of staged Q and dO */
#define KT           (BC + 4)         /* row stride of staged K^T and V^T */
#define PS           (BC + 4)         /* row stride of P and dS */
#define NKR          (BC / OM)        /* dK/dV: work-items across the keys */
#define KCG          (NT / NKR)       /* dK/dV: work-items across the column groups */
#define KOG          (DV / (4 * KCG)) /* dK/dV: float4 column groups per work-item */
#define NQR          (BR / OM)        /* dQ: work-items across the rows */
#define QCG          (NT / NQR)       /* dQ: work-items across the column groups */
#define QOG          (DV / (4 * QCG)) /* dQ: float4 column groups per work-item */
#define SCORE_FLOATS (2 * BR * KC_PAD + 2 * KC * KT)
#define SLICE_FLOATS (2 * VC * DV)
#define STAGE_FLOATS (SCORE_FLOATS > SLICE_FLOATS ? SCORE_FLOATS : SLICE_FLOATS)

#include "dtype.cl"
#include "kv_addressing.cl"
#include "score_mods.cl"

#if PAGED || FP8
#error "the backward pass reads neither a paged cache nor FP8 inputs"
#endif
#if BR % TM || BC % 4 || BC % OM || BR % OM || NT % NKR || NT % NQR || DV % (4 * KCG) ||           \
    DV % (4 * QCG) || BR % VC || BC % VC || KC % 4 || NT % KC
#error                                                                                             \
    "tile shape: TM|BR, 4|BC, OM|BR, OM|BC, (BC/OM)|NT, (BR/OM)|NT, 4*groups|DV, VC|BR, VC|BC, KC|NT"
#endif

/* The float4 at float offset i (a multiple of 4) of a local array. */
#define LOCAL4(base, i) (*(__local float4 *)((base) + (i)))

/* Stages KC columns from c0 of n_rows rows at x (`stride` apart, the first `rows` present,
 * columns below d present), times factor, into dst (row stride dst_stride), zero elsewhere;
 * transposed (column c of row r at dst[c * dst_stride + r]) when transpose. Each work-item
 * keeps one column and steps over rows, which spares a division per element (PoCL without
 * its optimizer spends as long on those as on the products). */
__attribute__((always_inline)) void stage_chunk(__local float *dst, int dst_stride, int n_rows,
                                                __global const storage_t *x, long stride, int rows,
                                                int c0, int d, float factor, int transpose,
                                                int tid) {
    const int c = tid % KC, present = c0 + c < d;
    for (int r = tid / KC; r < n_rows; r += NT / KC)
        dst[transpose ? c * dst_stride + r : r * dst_stride + c] =
            (r < rows && present) ? LOAD(x, r * stride + c0 + c) * factor : 0.0f;
}

/* Stages columns c0..c0+n_cols-1 of VC rows at x (as stage_chunk, not transposed) into dst (row
 * stride DV): the work-items step along each row. */
__attribute__((always_inline)) void stage_slice(__local float *dst, int n_cols,
                                                __global const storage_t *x, long stride, int rows,
                                                int c0, int d, float factor, int tid) {
    for (int r = 0; r < VC; r++)
        for (int c = tid; c < n_cols; c += NT)
            dst[r * DV + c] =
                (r < rows && c0 + c < d) ? LOAD(x, r * stride + c0 + c) * factor : 0.0f;
}

/* The rows of one block of queries and one block of keys, with their strides and counts. */
typedef struct block_rows {
    __global const storage_t *q, *d_o, *k, *v;
    long q_sn, o_sn, k_sn, v_sn;
    int q_rows, kv_rows; /* rows present: queries, keys */
} block_rows;

/* s = (sign Q) K^T and dp = dO V^T of the block, over the whole head dim, KC columns at a time
 * through local memory. Begins with a barrier: the previous readers of stage are done. */
__attribute__((always_inline)) void block_products(float4 s[TM], float4 dp[TM],
                                                   __local float *stage, const block_rows *B, int d,
                                                   float q_sign, int tid) {
    const int tr = tid / CT, tc = tid % CT;
    __local float *qs = stage, *dos = stage + BR * KC_PAD;
    __local float *kt = stage + 2 * BR * KC_PAD, *vt = kt + KC * KT;
    for (int i = 0; i < TM; i++) s[i] = dp[i] = (float4)(0.0f);
    for (int c0 = 0; c0 < d; c0 += KC) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_chunk(qs, KC_PAD, BR, B->q, B->q_sn, B->q_rows, c0, d, q_sign, 0, tid);
        stage_chunk(dos, KC_PAD, BR, B->d_o, B->o_sn, B->q_rows, c0, d, 1.0f, 0, tid);
        stage_chunk(kt, KT, BC, B->k, B->k_sn, B->kv_rows, c0, d, 1.0f, 1, tid);
        stage_chunk(vt, KT, BC, B->v, B->v_sn, B->kv_rows, c0, d, 1.0f, 1, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < KC; c++) {
            const float4 k4 = LOCAL4(kt, c * KT + 4 * tc), v4 = LOCAL4(vt, c * KT + 4 * tc);
            for (int i = 0; i < TM; i++) {
                s[i] = fma((float4)(qs[(tr + i * RT) * KC_PAD + c]), k4, s[i]);
                dp[i] = fma((float4)(dos[(tr + i * RT) * KC_PAD + c]), v4, dp[i]);
            }
        }
    }
}

/* What the probabilities of a block need besides its products. */
typedef struct block_where {
    int r0, k0;       /* its first query row and first key in the sequence */
    int nq, nkv;      /* the sequence's lengths */
    int wl, wr;       /* the window (causal: wr = 0), -1 unbounded */
    int modified;     /* softcap, ALiBi or bias */
    float scale_log2; /* |scale| log2(e), for unmodified scores */
} block_where;

/* P = exp(S - LSE) and dS = P (dP - D) times the softcap's slope into ps and dss, 0 where a key
 * is hidden or past the sequence, or the row is past it or saw no key (LSE = -inf). row_lse2
 * holds the rows' LSE times log2(e), row_d their D. */
__attribute__((always_inline)) void probabilities(const float4 s[TM], const float4 dp[TM],
                                                  __local float *ps, __local float *dss,
                                                  __local const float *row_lse2,
                                                  __local const float *row_d, const block_where *W,
                                                  const score_mods *mods, int tid) {
    const int tr = tid / CT, tc = tid % CT;
    const int key0 = W->k0 + 4 * tc;
    const int4 keys4 = (int4)(key0) + (int4)(0, 1, 2, 3);
    /* Keys past the sequence are scored as the last one (and never used), so that every read
     * stays in bounds. */
    const int last = W->nkv - 1;
    for (int i = 0; i < TM; i++) {
        const int lr = tr + i * RT;
        /* Likewise rows past the sequence. */
        const int row = min(W->r0 + lr, W->nq - 1), diag = row + (W->nkv - W->nq);
        const int2 keys = visible_keys(row, W->nq, W->nkv, W->wl, W->wr);
        const float lse2 = row_lse2[lr];
        const int live = W->r0 + lr < W->nq && lse2 != -INFINITY;
        const int4 visible =
            (int4)(live ? -1 : 0) & (keys4 >= (int4)(keys.x)) & (keys4 < (int4)(keys.y));
        float4 s2 = s[i] * W->scale_log2, slope = (float4)(1.0f);
        if (W->modified) {
            const float4 x = s[i];
            s2 = (float4)(score_log2(mods, x.x, row, diag, min(key0, last)),
                          score_log2(mods, x.y, row, diag, min(key0 + 1, last)),
                          score_log2(mods, x.z, row, diag, min(key0 + 2, last)),
                          score_log2(mods, x.w, row, diag, min(key0 + 3, last)));
            slope = (float4)(score_slope(mods, x.x), score_slope(mods, x.y), score_slope(mods, x.z),
                             score_slope(mods, x.w));
        }
        const float4 p = select((float4)(0.0f), exp2(s2 - lse2), visible);
        LOCAL4(ps, lr * PS + 4 * tc) = p;
        LOCAL4(dss, lr * PS + 4 * tc) =
            select((float4)(0.0f), p * (dp[i] - row_d[lr]) * slope, visible);
    }
}

/* Loads the LSE (times log2(e)) and D of the BR rows from r0 of head h; -inf and 0 past the
 * sequence. */
__attribute__((always_inline)) void row_statistics(__local float *row_lse2, __local float *row_d,
                                                   __global const float *lse,
                                                   __global const float *dsum, const seq_layout *L,
                                                   const seq_t *seq, int h, int r0, int tid) {
    for (int r = tid; r < BR; r += NT) {
        const int row = r0 + r;
        const long at = lse_index(L, seq, h, min(row, seq->nq - 1));
        row_lse2[r] = row < seq->nq ? lse[at] * M_LOG2E_F : -INFINITY;
        row_d[r] = row < seq->nq ? dsum[at] : 0.0f;
    }
}

/* The arguments every backward kernel takes (backward.c sets them), then the API v2 ones in
 * feature_args.h's order. */
#define BACKWARD_ARGS                                                                              \
    __global const storage_t *q, __global const storage_t *k, __global const storage_t *v,         \
        __global const storage_t *o, __global const storage_t *d_o, __global const float *lse,     \
        __global float *dsum, __global out_t *dq, __global out_t *dk, __global out_t *dv,          \
        int seq_q, int seq_kv, int d, int heads_q, int group, int n_slices, int causal,            \
        float q_sign, float scale_log2, long q_sb, long q_sh, long q_sn, long k_sb, long k_sh,     \
        long k_sn, long v_sb, long v_sh, long v_sn, long o_sb, long o_sh, long o_sn,               \
        __global const int *cu_seqlens_q, __global const int *cu_seqlens_kv,                       \
        __global const int *seqlens_kv, __global const int *block_table, int q_varlen,             \
        int kv_layout, int total_q, int page_size, int max_pages, int num_pages, int window_left,  \
        int window_right, float scale_abs, float softcap, int alibi,                               \
        __global const float *alibi_slopes, int bias_dtype, __global const uchar *bias,            \
        long bias_sb, long bias_sh, long bias_sq, long bias_sk, int has_sinks,                     \
        __global const float *sinks, __global const float *q_descale,                              \
        __global const float *k_descale, __global const float *v_descale, int descale_block,       \
        int q_descale_blocks, int kv_descale_blocks

#define SEQ_LAYOUT                                                                                 \
    {                                                                                              \
        cu_seqlens_q, cu_seqlens_kv, seqlens_kv, q_varlen, kv_layout, seq_q, seq_kv, total_q,      \
            heads_q                                                                                \
    }

/* D = rowsum(dO * O) of row get_global_id(0) of head get_global_id(1) of batch get_global_id(2). */
__kernel void attention_backward_rowsum(BACKWARD_ARGS) {
    const int row = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    const seq_layout L = SEQ_LAYOUT;
    const seq_t seq = sequence(&L, b);
    if (row >= seq.nq) return;
    __global const storage_t *orow = o + q_row_offset(&seq, o_sb, o_sh, o_sn, h, row);
    __global const storage_t *dorow = d_o + q_row_offset(&seq, o_sb, o_sh, o_sn, h, row);
    float sum = 0.0f;
    for (int c = 0; c < d; c++) sum = fma(LOAD(dorow, c), LOAD(orow, c), sum);
    dsum[lse_index(&L, &seq, h, row)] = sum;
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attention_backward_dkdv(BACKWARD_ARGS) {
    __local float4 stage4[STAGE_FLOATS / 4], ps4[BR * PS / 4], dss4[BR * PS / 4];
    __local float row_lse2[BR], row_d[BR];
    __local float *stage = (__local float *)stage4, *ps = (__local float *)ps4,
                  *dss = (__local float *)dss4;

    const int tid = (int)get_local_id(0);
    const int orow = tid / KCG, ocg = tid % KCG;
    const int k0 = (int)get_group_id(0) * BC, hk = (int)get_group_id(1);
    const int b = (int)get_group_id(2) / n_slices, dv0 = (int)get_group_id(2) % n_slices * DV;
    const seq_layout L = SEQ_LAYOUT;
    const seq_t seq = sequence(&L, b);
    const int nq = seq.nq, nkv = seq.nkv;
    if (k0 >= nkv) return; /* a tile past its sequence's keys (varlen): the group leaves */

    const int wl = window_left, wr = causal ? 0 : window_right;
    const long k_first = kv_first_row_offset(&seq, k_sb, k_sh, k_sn, hk) + (long)k0 * k_sn;
    const long v_first = kv_first_row_offset(&seq, v_sb, v_sh, v_sn, hk) + (long)k0 * v_sn;
    block_rows B = {q, d_o, k + k_first, v + v_first, q_sn, o_sn, k_sn, v_sn, 0, nkv - k0};
    block_where W = {0,         k0, nq, nkv, wl, wr, softcap > 0.0f || alibi || bias_dtype >= 0,
                     scale_log2};
    __local float *xs = stage, *ys = stage + VC * DV; /* dO and Q rows, this slice's columns */
    /* The slice's columns within the head dim, and rounded up to whole float4 groups. */
    const int cols = min(DV, d - dv0), cols4 = (cols + 3) / 4 * 4;

    float4 acc_k[OM][KOG], acc_v[OM][KOG];
    for (int i = 0; i < OM; i++)
        for (int g = 0; g < KOG; g++) acc_k[i][g] = acc_v[i][g] = (float4)(0.0f);

    /* The query heads of the group in order, and of each the blocks of rows that see a key of
     * the tile: rows see nondecreasing key ranges, so a block's keys run from its first row's
     * first to its last row's end. */
    const int k_end = min(k0 + BC, nkv);
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        const score_mods mods =
            score_mods_of(scale_abs, softcap, alibi, alibi_slopes, bias_dtype, bias, bias_sb,
                          bias_sh, bias_sq, bias_sk, b, h, heads_q);
        for (int r0 = 0; r0 < nq; r0 += BR) {
            const int2 first = visible_keys(r0, nq, nkv, wl, wr);
            const int2 last = visible_keys(min(r0 + BR, nq) - 1, nq, nkv, wl, wr);
            if (last.y <= k0 || first.x >= k_end) continue;
            const long q_first = q_row_offset(&seq, q_sb, q_sh, q_sn, h, r0);
            const long o_first = q_row_offset(&seq, o_sb, o_sh, o_sn, h, r0);
            B.q = q + q_first;
            B.d_o = d_o + o_first;
            B.q_rows = nq - r0;
            W.r0 = r0;
            /* The previous block's readers of the row statistics passed the barriers of its
             * dV and dK sums. */
            row_statistics(row_lse2, row_d, lse, dsum, &L, &seq, h, r0, tid);
            float4 s[TM], dp[TM];
            block_products(s, dp, stage, &B, d, q_sign, tid);
            probabilities(s, dp, ps, dss, row_lse2, row_d, &W, &mods, tid);
            for (int r1 = 0; r1 < BR; r1 += VC) {
                barrier(CLK_LOCAL_MEM_FENCE);
                stage_slice(xs, cols4, d_o + (o_first + (long)r1 * o_sn), o_sn, nq - r0 - r1, dv0,
                            d, 1.0f, tid);
                stage_slice(ys, cols4, q + (q_first + (long)r1 * q_sn), q_sn, nq - r0 - r1, dv0, d,
                            q_sign, tid);
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int rr = 0; rr < VC; rr++) {
                    float p[OM], g[OM];
                    for (int i = 0; i < OM; i++) {
                        p[i] = ps[(r1 + rr) * PS + orow + i * NKR];
                        g[i] = dss[(r1 + rr) * PS + orow + i * NKR];
                    }
                    for (int u = 0; u < KOG && 4 * (ocg + u * KCG) < cols; u++) {
                        const float4 x = LOCAL4(xs, rr * DV + 4 * (ocg + u * KCG));
                        const float4 y = LOCAL4(ys, rr * DV + 4 * (ocg + u * KCG));
                        for (int i = 0; i < OM; i++) {
                            acc_v[i][u] = fma((float4)(p[i]), x, acc_v[i][u]);
                            acc_k[i][u] = fma((float4)(g[i]), y, acc_k[i][u]);
                        }
                    }
                }
            }
        }
    }

    const long dk_first = kv_first_row_offset(&seq, k_sb, k_sh, k_sn, hk);
    const long dv_first = kv_first_row_offset(&seq, v_sb, v_sh, v_sn, hk);
    for (int i = 0; i < OM; i++) {
        const int key = k0 + orow + i * NKR;
        if (key >= nkv) continue;
        for (int u = 0; u < KOG; u++) {
            const float4 gk = acc_k[i][u] * scale_abs, gv = acc_v[i][u];
            const float lanes_k[4] = {gk.x, gk.y, gk.z, gk.w},
                        lanes_v[4] = {gv.x, gv.y, gv.z, gv.w};
            for (int e = 0; e < 4; e++) {
                const int col = dv0 + 4 * (ocg + u * KCG) + e;
                if (col >= d) continue;
                STORE(dk, dk_first + (long)key * k_sn + col, lanes_k[e]);
                STORE(dv, dv_first + (long)key * v_sn + col, lanes_v[e]);
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void attention_backward_dq(BACKWARD_ARGS) {
    __local float4 stage4[STAGE_FLOATS / 4], ps4[BR * PS / 4], dss4[BR * PS / 4];
    __local float row_lse2[BR], row_d[BR];
    __local float *stage = (__local float *)stage4, *ps = (__local float *)ps4,
                  *dss = (__local float *)dss4;

    const int tid = (int)get_local_id(0);
    const int orow = tid / QCG, ocg = tid % QCG;
    /* The heaviest causal tiles (the last rows) start first. */
    const int r0 = (int)(get_num_groups(0) - 1 - get_group_id(0)) * BR;
    const int h = (int)get_group_id(1), hk = h / group;
    const int b = (int)get_group_id(2) / n_slices, dv0 = (int)get_group_id(2) % n_slices * DV;
    const seq_layout L = SEQ_LAYOUT;
    const seq_t seq = sequence(&L, b);
    const int nq = seq.nq, nkv = seq.nkv;
    if (r0 >= nq) return; /* a tile past its sequence's queries (varlen): the group leaves */

    /* The keys the tile's rows see: from its first row's first key to its last row's end. */
    const int wl = window_left, wr = causal ? 0 : window_right;
    const int kv_begin = visible_keys(r0, nq, nkv, wl, wr).x / BC * BC;
    const int kv_end = visible_keys(min(r0 + BR, nq) - 1, nq, nkv, wl, wr).y;
    const long k_first = kv_first_row_offset(&seq, k_sb, k_sh, k_sn, hk);
    const long v_first = kv_first_row_offset(&seq, v_sb, v_sh, v_sn, hk);
    block_rows B = {q + q_row_offset(&seq, q_sb, q_sh, q_sn, h, r0),
                    d_o + q_row_offset(&seq, o_sb, o_sh, o_sn, h, r0),
                    k,
                    v,
                    q_sn,
                    o_sn,
                    k_sn,
                    v_sn,
                    nq - r0,
                    0};
    block_where W = {r0,        0, nq, nkv, wl, wr, softcap > 0.0f || alibi || bias_dtype >= 0,
                     scale_log2};
    const score_mods mods = score_mods_of(scale_abs, softcap, alibi, alibi_slopes, bias_dtype, bias,
                                          bias_sb, bias_sh, bias_sq, bias_sk, b, h, heads_q);
    __local float *ks = stage; /* K rows, this slice's columns */
    /* The slice's columns within the head dim, and rounded up to whole float4 groups. */
    const int cols = min(DV, d - dv0), cols4 = (cols + 3) / 4 * 4;

    row_statistics(row_lse2, row_d, lse, dsum, &L, &seq, h, r0, tid);
    float4 acc[OM][QOG];
    for (int i = 0; i < OM; i++)
        for (int g = 0; g < QOG; g++) acc[i][g] = (float4)(0.0f);

    for (int kb = kv_begin; kb < kv_end; kb += BC) {
        B.k = k + (k_first + (long)kb * k_sn);
        B.v = v + (v_first + (long)kb * v_sn);
        B.kv_rows = nkv - kb;
        W.k0 = kb;
        float4 s[TM], dp[TM];
        block_products(s, dp, stage, &B, d, q_sign, tid);
        probabilities(s, dp, ps, dss, row_lse2, row_d, &W, &mods, tid);
        for (int k1 = 0; k1 < BC && kb + k1 < kv_end; k1 += VC) {
            barrier(CLK_LOCAL_MEM_FENCE);
            stage_slice(ks, cols4, k + (k_first + (long)(kb + k1) * k_sn), k_sn, nkv - kb - k1, dv0,
                        d, 1.0f, tid);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < VC; kk++) {
                float g[OM];
                for (int i = 0; i < OM; i++) g[i] = dss[(orow + i * NQR) * PS + k1 + kk];
                for (int u = 0; u < QOG && 4 * (ocg + u * QCG) < cols; u++) {
                    const float4 x = LOCAL4(ks, kk * DV + 4 * (ocg + u * QCG));
                    for (int i = 0; i < OM; i++) acc[i][u] = fma((float4)(g[i]), x, acc[i][u]);
                }
            }
        }
    }

    const float dq_scale = q_sign * scale_abs;
    for (int i = 0; i < OM; i++) {
        const int lr = orow + i * NQR;
        if (r0 + lr >= nq) continue;
        const long first = q_row_offset(&seq, q_sb, q_sh, q_sn, h, r0 + lr);
        for (int u = 0; u < QOG; u++) {
            const float4 x = acc[i][u] * dq_scale;
            const float lanes[4] = {x.x, x.y, x.z, x.w};
            for (int e = 0; e < 4; e++) {
                const int col = dv0 + 4 * (ocg + u * QCG) + e;
                if (col < d) STORE(dq, first + col, lanes[e]);
            }
        }
    }
}
