/*
 * The micro-kernels of the cpu_simd backend, as a table so that one tile algorithm
 * (attention.c) drives every path: AVX-512F, AVX2 and portable.
 *
 * Layouts (all float32, 32-byte aligned):
 *   - Q of a tile is stored transposed in panels of CS_Q_PANEL rows: element (r, c) at
 *     qp[(r / CS_Q_PANEL) * dq * CS_Q_PANEL + c * CS_Q_PANEL + r % CS_Q_PANEL], so that one
 *     load gives 8 (AVX2) or 16 (AVX-512) rows of one column;
 *   - K and V blocks are rows of dq floats (dq = head_dim rounded up to CS_DIM_STEP, zero past
 *     head_dim); keys past the end of the block are zero rows;
 *   - scores and probabilities are stored transposed too, st[j * ld + r] for key j and row r,
 *     so that the softmax runs down the keys with a register of rows and needs no horizontal
 *     reduction.
 * A tile has a multiple of CS_Q_PANEL rows (so also of CS_PV_ROWS and CS_ROW_STEP) and a key
 * block a multiple of CS_KEY_STEP keys.
 */
#ifndef CS_KERNEL_OPS_H
#define CS_KERNEL_OPS_H

#include <stdint.h>

#include "flashport.h"

/* One AVX register of float32 (AVX-512 masks off the other half). */
#define CS_DIM_STEP 8
/* Rows handled together by the score and softmax kernels: one AVX-512 register, two AVX2
 * registers. */
#define CS_ROW_STEP 16
/* Rows of a Q panel: three registers of rows in the AVX-512 score micro-kernel, two groups of
 * three in the AVX2 one. */
#define CS_Q_PANEL 48
/* Rows of the O += P V micro-kernel. */
#define CS_PV_ROWS 6
/* Key blocks are multiples of this; every path's score micro-kernel takes a number of keys
 * that divides it. */
#define CS_KEY_STEP 16
/* The score kernel sums the head dimension in chunks of this many columns, each chunk in
 * fresh registers, then adds the chunk to the score: a dominant component then meets only a
 * few roundings at the score's magnitude instead of d of them (logits near +-1000). */
#define CS_SCORE_CHUNK 16

/* What turns a block's raw scores s = q . k into the base-2 logits t the softmax works on (t =
 * x log2 e for a natural-log logit x):
 *   t = scale2 * s                                   softcap off
 *   t = cap_out * tanh(cap_in * s)                   softcap on (cap_in = scale / softcap,
 *                                                    cap_out = softcap * log2 e)
 *   t -= slope[r] * |diag[r] - j|                    ALiBi on (slope: the row's slope * log2 e;
 *                                                    diag: the block's key index of the row's
 *                                                    aligned diagonal, i + Nkv - Nq - j0)
 *   t += bias[j * ldst + r]                          bias on (bias * log2 e, laid out as the
 *                                                    scores) */
typedef struct cs_score_mods {
    float scale2;
    float cap_in, cap_out; /* cap_out = 0: no softcap */
    const float *slope;    /* NULL: no ALiBi */
    const float *diag;
    const float *bias; /* NULL: no bias */
} cs_score_mods;

typedef struct cs_kernel_ops {
    const char *name;
    /* dst[0..d) = mul * src[0..d) converted from dtype (f32, f16, bf16, FP8 e4m3 or e5m2);
     * dst[d..dq) = 0. */
    void (*load_row)(const void *src, flashport_dtype dtype, int64_t d, int64_t dq, float mul,
                     float *dst);
    /* dst[0..d) = mul * src[0..d) converted to dtype (f32, f16 or bf16; round to nearest
     * even). */
    void (*store_row)(const float *src, int64_t d, float mul, flashport_dtype dtype, void *dst);
    /* Optional, NULL in the float32 paths, whose tiles hold Q, K and V as laid out above. A
     * path whose products take 16-bit pairs (kernels_avx512bf16.c) keeps the tile's operands
     * in layouts of its own, in the same space, read only by its scores, softmax, pv_rows and
     * pv_rows_ranged:
     *   pack_q: the tile's Q panels at qp from `rows` rows of dq floats (rows r < real; the
     *     others zero);
     *   load_kv: the bf16 rows k and v (d values) of the key at row `row` of the K and V
     *     rings (rows of dq floats); v_next: V's row of the key at row + 1 when the caller has it
     *     (NULL when not); first: this key starts a run of consecutive keys placed together
     *     (the row before holds the previous key, which was placed without it). It may write
     *     into the row before of v_ring, never into another. */
    void (*pack_q)(const float *rows, int real, int n, int64_t dq, float *qp);
    void (*load_kv)(const void *k, const void *v, const void *v_next, int first, int64_t d,
                    int64_t dq, float *k_ring, float *v_ring, int64_t row);
    /* st[j * ldst + r] = q_r . k_j for r < rows (a multiple of CS_ROW_STEP) and at least the
     * keys lo[r] <= j < hi[r] that row r sees (others may be written too; skipping the rest
     * pays where ranges move along the rows, as a window's do over a tile's positions); k has
     * zero rows past the block's keys up to a multiple of CS_KEY_STEP; only the first d
     * columns are read; sums in chunks of CS_SCORE_CHUNK columns. */
    void (*scores)(const float *qp, const float *k, int64_t d, int64_t dq, int rows, const int *lo,
                   const int *hi, float *st, int64_t ldst);
    /* Online-softmax step for rows r < rows (a multiple of CS_ROW_STEP), row r seeing keys
     * lo[r] <= j < hi[r] of the block, with the scores taken as the base-2 logits t of mods
     * (t = scale2 * st without modifiers, scale2 = scale * log2 e so that 2^t is e^(scale * s)):
     * m[r] becomes the running max of t (NaN once a visible score is NaN; -inf while every
     * visible score is -inf), st[j * ldst + r] becomes 2^(t - m) for visible keys (0 where
     * t = -inf; the others' entries are left unspecified: no kernel reads them), alpha[r] =
     * 2^(m_old - m) rescales the row's accumulator (0 when m_old = -inf) and l[r] = l[r] *
     * alpha[r] + sum of the row's new probabilities. */
    void (*softmax)(float *st, int64_t ldst, int rows, const int *lo, const int *hi,
                    const cs_score_mods *mods, float *m, float *l, float *alpha);
    /* For CS_PV_ROWS rows r and columns c < cols (a multiple of CS_DIM_STEP):
     * o_r[c] = alpha[r] * o_r[c] + sum_{j < keys} p[j * ldp + r] * v_j[c]; rows of v and o are
     * dq floats apart. */
    void (*pv_rows)(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols, int keys,
                    const float *alpha, float *o);
    /* The columns a call of pv_rows, pv_rows_ranged or pt_rows takes at most (a multiple of
     * CS_DIM_STEP): the strip of V a call walks, a block's keys deep, stays in L1 while every
     * group of rows takes it. */
    int pv_cols;
    /* pv_rows for a group whose rows see different keys of the block (along a window's edges
     * or the causal diagonal), p and v at the block's key 0: keys a <= j < e, which every row
     * r < n sees, for all CS_PV_ROWS rows, and each row r < n also its keys lo[r] <= j < hi[r]
     * outside [a, e) (none when lo[r] >= hi[r]); no row takes a key it does not see, so a
     * hidden V row holding inf or NaN never reaches it. */
    void (*pv_rows_ranged)(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                           int a, int e, int n, const int *lo, const int *hi, const float *alpha,
                           float *o);
    /* Optional (NULL: the tile algorithm drives pv_rows and pv_rows_ranged, which a table with
     * pv_block may leave NULL): a path whose P V runs on matrix tiles wider than CS_PV_ROWS rows
     * (AMX) takes a block's P V in one call, reading P as its own softmax leaves it (and free to
     * rewrite it: no kernel reads a block's P after its P V):
     * for rows r < real, o_r[c] = alpha[r] * o_r[c] + sum_{lo[r] <= j < hi[r]} p[j * ldp + r] *
     * v_j[c] over the columns c < d (the others are left as they are), p and v at the block's
     * key 0, rows of v and o dq floats apart, with pv_rows_ranged's rule that no row takes a
     * key it does not see. */
    void (*pv_block)(float *p, int64_t ldp, const float *v, int64_t d, int64_t dq, int real,
                     const int *lo, const int *hi, const float *alpha, float *o);
    /* The decode path's kernels (decode.c): a few query rows (a handful of heads times a few
     * positions per KV head) against K and V rows read where they are, through a pointer per
     * key, in their own dtype (f32, f16 or bf16), widened in registers: no converted copy of
     * a block is written, which halves the traffic a memory-bound decode puts on the core.
     * d is a multiple of decode_step, or dt is f32 and d a multiple of CS_DIM_STEP. */
    int decode_step;
    /* NULL, or rewrites query rows r < rows (q + r * dq, d values each) in place into the form
     * decode_scores reads for K of dtype dt: once per block of rows, where decode_scores is
     * called once per few keys. */
    void (*decode_prepare_q)(float *q, int64_t dq, int rows, flashport_dtype dt, int64_t d);
    /* st[j * ldst + r] = q_r . k_j for r < rows (any count) and j < keys; q_r at q + r * dq,
     * zero past d (as decode_prepare_q left it, where the table has one); vector over the head
     * dimension, one horizontal sum per score. */
    void (*decode_scores)(const float *q, int64_t dq, int rows, const void *const *k,
                          flashport_dtype dt, int64_t d, int keys, float *st, int64_t ldst);
    /* 0, or the rows of a panel (a register of them): float32 K's scores of a group's whole
     * panels are decode_scores_panel's, st[j * ldst + r] = q_r . k_j for the panel's rows r
     * and keys j < keys (any count), with the panel's Q at qt[c * decode_panel_rows + r] for
     * columns c < d. */
    int decode_panel_rows;
    void (*decode_scores_panel)(const float *qt, const void *const *k, int64_t d, int keys,
                                float *st, int64_t ldst);
    /* For rows r < rows (at most CS_PV_ROWS) and columns c < d: o_r[c] = alpha[r] * o_r[c] +
     * sum_{j < keys} p[j * ldp + r] * v_j[c]; rows of o are ldo floats apart. */
    void (*decode_pv)(const float *p, int64_t ldp, const void *const *v, flashport_dtype dt,
                      int64_t d, int keys, int rows, const float *alpha, float *o, int64_t ldo);
    /* softmax with P left in float32, as decode_pv reads it (avx512bf16's softmax rounds P to
     * bf16 pairs for its own P V). */
    void (*decode_softmax)(float *st, int64_t ldst, int rows, const int *lo, const int *hi,
                           const cs_score_mods *mods, float *m, float *l, float *alpha);

    /* Backward: the gradients of one block's scores. For rows r < rows (a multiple of
     * CS_ROW_STEP) and keys j < keys (a multiple of CS_KEY_STEP), where row r sees key j
     * (lo[r] <= j < hi[r]), with t the base-2 logit of st[j * ld + r] under mods (as the
     * softmax takes it):
     *   P = 2^(t - lse2[r])                                      into st[j * ld + r]
     *   dS = P (dp[j * ld + r] - dsum[r]) * gscale * g             into dp[j * ld + r]
     * g being d tanh-cap / d its argument, 1 - tanh^2, with a softcap and 1 without; elsewhere
     * both become 0, whatever the entries held (the score kernel leaves them unspecified). */
    void (*grads)(float *st, float *dp, int64_t ld, int rows, int keys, const int *lo,
                  const int *hi, const cs_score_mods *mods, const float *lse2, const float *dsum,
                  float gscale);
    /* For CS_PV_ROWS rows j and columns c < cols (a multiple of CS_DIM_STEP):
     * o_j[c] += sum_{r < n} a[j * lda + r] * x_r[c]; rows of x and o are dq floats apart. The
     * transposed product of pv_rows: dV += P^T dO and dK += dS^T Q over a block's rows. */
    void (*pt_rows)(const float *a, int64_t lda, const float *x, int64_t dq, int64_t cols, int n,
                    float *o);
} cs_kernel_ops;

/* Each path's f32 FMA rate micro-benchmark runs `iterations` rounds of independent FMA chains
 * and returns the number of floating-point operations done (one FMA = 2). The vector paths' read
 * stream sums the n floats at p (n a multiple of 64) with the widest loads the path has, the
 * read bandwidth's micro-benchmark. */
extern const cs_kernel_ops cs_kernels_portable;
double cs_fma_peak_portable(int64_t iterations);
#if defined(CS_HAVE_AVX2_KERNELS)
extern const cs_kernel_ops cs_kernels_avx2;
double cs_fma_peak_avx2(int64_t iterations);
float cs_read_stream_avx2(const float *p, size_t n);
#endif
#if defined(CS_HAVE_AVX512_KERNELS)
extern const cs_kernel_ops cs_kernels_avx512;
double cs_fma_peak_avx512(int64_t iterations);
float cs_read_stream_avx512(const float *p, size_t n);
#endif

#if defined(CS_HAVE_AVX512BF16_KERNELS)
extern const cs_kernel_ops cs_kernels_avx512bf16;
/* The vdpbf16ps rate loop: floating-point operations done (one pair product = 4). */
double cs_bf16_dot_peak(int64_t iterations);
#endif
#if defined(CS_HAVE_AMXBF16_KERNELS)
extern const cs_kernel_ops cs_kernels_amxbf16;
/* The AMX tile-product rate loop: floating-point operations done (one TDPBF16PS = 16384). */
double cs_amx_bf16_peak(int64_t iterations);
#endif

#endif /* CS_KERNEL_OPS_H */
