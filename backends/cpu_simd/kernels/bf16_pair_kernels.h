/*
 * The bf16 products of the tile path on AVX512-BF16 (vdpbf16ps), which multiplies pairs of bf16
 * values and adds both products to a float32 lane: twice the multiply-adds of an f32 FMA per
 * instruction. Included after simd_avx512.h and simd_kernels.h (SIMD_OWN_PRODUCTS) by the files
 * built with -mavx512bf16 -mavx512bw: kernels_avx512bf16.c, and kernels_amxbf16.c, whose AMX
 * tiles read the same layouts (bf16_pairs.h gives their index maps).
 *
 * vdpbf16ps sums along the pairs, so the pairs run along each product's reduction:
 *   - S = Q K^T sums over the head dimension. Q's panels hold pairs of adjacent columns:
 *     element (r, c) is half c % 2 of 32-bit word (c / 2) * CS_Q_PANEL + r % CS_Q_PANEL of
 *     the panel, so one load gives 16 rows of a column pair. A K row is its dq bf16 values in
 *     order (the first half of its float32 row's space): adjacent columns are already a pair,
 *     broadcast as one 32-bit word. Q is packed once per tile, K once per visit of the ring;
 *   - O += P V sums over the keys. Row R of the V ring holds, for each column c, the pair
 *     (v_R[c], v_R+1[c]) in one 32-bit word: every row starts a pair, so a group of rows may
 *     begin its keys anywhere. Converting key R writes the low halves of its own row and the
 *     high halves of row R - 1 (the whole of its row with key R + 1 of the same run, which then
 *     leaves row R alone). After the softmax, P is rounded to bf16 in place, each
 *     score's 32-bit slot j then holding the pair (p_j, p_j+1) of its row, as GPU FlashAttention
 *     rounds P to the input type before its P V product. A run of an odd number of keys ends
 *     on one key taken alone, in float32 from its bf16 values, so that no product ever reads
 *     a key its row does not see (0 * NaN from a hidden V row would reach it).
 * Every accumulator is float32; vdpbf16ps rounds each addition to nearest even and treats bf16
 * subnormals as zero. An includer with scores of its own (AMX tiles) defines BF16_OWN_SCORES, and
 * one whose P V takes P in float32 (AMX tiles again) BF16_OWN_PV: the pairing softmax and the
 * group kernels that read paired P are then not compiled.
 */
#ifndef CS_BF16_PAIR_KERNELS_H
#define CS_BF16_PAIR_KERNELS_H

#include "bf16_pairs.h"

/* A 32-bit word of two bf16 values (any alignment, any effective type). */
static inline int32_t pair_at(const void *p) {
    int32_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

/* The bf16 bits (rounded to nearest even) of 16 floats, zero-extended into 32-bit lanes. */
static inline __m512i bf16_lanes(__m512 x) {
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
}

/* The low bf16 of each 32-bit pair (the pair's first key) as a float. */
static inline __m512 low_as_f32(__m512i pairs) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
}

/* 16 x 16 words transposed in registers, word i of x[r] becoming word r of x[i]: two rounds of
 * unpacks within 128-bit lanes, then two of 128-bit lane shuffles. */
static inline void transpose_16x16_words(__m512i x[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* x[i + k]: 128-bit lane L holds words i..i+3 of row 4 L + k. */
    for (int i = 0; i < 16; i += 4) {
        x[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        x[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        x[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        x[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* Row 4 L + k gathers lane L of x[k], x[4 + k], x[8 + k] and x[12 + k]. */
    for (int k = 0; k < 4; ++k) {
        const __m512i v0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0x88);
        const __m512i w0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0xdd);
        const __m512i v1 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0xdd);
        t[k] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        t[8 + k] = _mm512_shuffle_i32x4(v0, v1, 0xdd);
        t[4 + k] = _mm512_shuffle_i32x4(w0, w1, 0x88);
        t[12 + k] = _mm512_shuffle_i32x4(w0, w1, 0xdd);
    }
    for (int i = 0; i < 16; ++i) x[i] = t[i];
}

/* 16 rows x 16 column pairs at a time: each row's 32 floats rounded to 16 pair words by one
 * vcvtne2ps2bf16 (round to nearest even, as fp_f32_to_bf16; it reads subnormal floats as zero,
 * which the products do with bf16 subnormals anyway), then transposed into the panels' order. */
static void pack_q_bf16(const float *rows, int real, int n, int64_t dq, float *qp) {
    uint32_t *words = (uint32_t *)qp;
    const int64_t pairs = dq / 2;
    for (int r0 = 0; r0 < n; r0 += VL)
        for (int64_t cp0 = 0; cp0 < pairs; cp0 += VL) {
            const int np = pairs - cp0 < VL ? (int)(pairs - cp0) : VL;
            const __mmask16 low = vlanes_first(2 * np),
                            high = 2 * np > VL ? vlanes_first(2 * np - VL) : 0;
            __m512i x[16];
            for (int i = 0; i < VL; ++i) {
                const float *src = rows + (int64_t)(r0 + i) * dq + 2 * cp0;
                x[i] = r0 + i < real
                           ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high, src + VL),
                                                          _mm512_maskz_loadu_ps(low, src))
                           : _mm512_setzero_si512();
            }
            transpose_16x16_words(x);
            for (int i = 0; i < np; ++i)
                _mm512_storeu_si512(words + cs_pair_q_word(r0, cp0 + i, dq), x[i]);
        }
}

/* 16 bf16 values of a row from column c (zero past d, which c may pass where the rows are
 * longer than the head dimension; masked lanes are not read). */
static inline __m256i row16(const uint16_t *s, int64_t c, int64_t d) {
    const __mmask32 n = d - c >= VL ? 0xffffu : d > c ? (__mmask32)((1u << (d - c)) - 1u) : 0u;
    return _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(n, s + c));
}

static void load_kv_bf16(const void *k, const void *v, const void *v_next, int first, int64_t d,
                         int64_t dq, float *k_ring, float *v_ring, int64_t row) {
    uint16_t *kr = (uint16_t *)(k_ring + row * dq);
    float *own = v_ring + row * dq, *prev = first && row > 0 ? own - dq : NULL;
    /* Steps of 16 columns; the last may be 8 (dq is a multiple of 8): K's store of 16 then
     * stays inside its row's space of 2 dq bf16, V's are masked to dq. With the next key's row
     * at hand, this row's pairs are whole: one store, no merge. */
    for (int64_t c = 0; c < dq; c += VL) {
        _mm256_storeu_si256((__m256i *)(kr + c), row16((const uint16_t *)k, c, d));
        const __m512i x = _mm512_cvtepu16_epi32(row16((const uint16_t *)v, c, d));
        const __mmask32 words = dq - c >= VL ? 0xffffffffu : 0xffffu;
        if (v_next) {
            const __m512i y = _mm512_cvtepu16_epi32(row16((const uint16_t *)v_next, c, d));
            _mm512_mask_storeu_epi16(own + c, words, _mm512_or_si512(x, _mm512_slli_epi32(y, 16)));
        } else {
            _mm512_mask_storeu_epi16(own + c, words & 0x55555555u, x);
        }
        if (prev) _mm512_mask_storeu_epi16(prev + c, words & 0xaaaaaaaau, _mm512_slli_epi32(x, 16));
    }
}

#if !defined(BF16_OWN_SCORES)
/* RV registers of rows x SIMD_SCORE_KEYS keys over the column pairs [0, pairs), in chunks of
 * CS_SCORE_CHUNK pairs (32 columns): vdpbf16ps rounds after each of its two products, so a
 * chunk meets 32 roundings, as many as 32 columns of the float32 kernel would and twice its
 * chunk's, still far below the bf16 inputs' own 2^-9; against chunks of 16 columns, half the
 * stores and reloads of the partial scores, 2-4% faster at d = 128 (one thread, Zen 5). Per
 * pair, RV loads of Q and one broadcast of K per key feed RV * SIMD_SCORE_KEYS dot products of
 * two columns each. */
static inline __attribute__((always_inline)) void scores_tile_bf16(const uint32_t *qp,
                                                                   const float *k, int64_t pairs,
                                                                   int64_t dq, float *st,
                                                                   int64_t ldst, const int RV) {
    for (int64_t c0 = 0; c0 < pairs; c0 += CS_SCORE_CHUNK) {
        const int64_t c1 = c0 + CS_SCORE_CHUNK < pairs ? c0 + CS_SCORE_CHUNK : pairs;
        __m512 acc[SIMD_SCORE_KEYS][SCORE_RV];
        for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj)
            for (int rv = 0; rv < RV; ++rv) acc[jj][rv] = _mm512_setzero_ps();
        for (int64_t c = c0; c < c1; ++c) {
            __m512i x[SCORE_RV];
            for (int rv = 0; rv < RV; ++rv)
                x[rv] = _mm512_loadu_si512(qp + c * CS_Q_PANEL + VL * rv);
            for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj) {
                const __m512i y =
                    _mm512_set1_epi32(pair_at((const uint16_t *)(k + jj * dq) + 2 * c));
                for (int rv = 0; rv < RV; ++rv)
                    acc[jj][rv] = _mm512_dpbf16_ps(acc[jj][rv], as_bh(x[rv]), as_bh(y));
            }
        }
        for (int jj = 0; jj < SIMD_SCORE_KEYS; ++jj)
            for (int rv = 0; rv < RV; ++rv) {
                float *out = st + (int64_t)jj * ldst + VL * rv;
                vf_storeu(out, c0 == 0 ? acc[jj][rv] : vf_add(vf_loadu(out), acc[jj][rv]));
            }
    }
}

/* The float32 kernel's walk (simd_kernels.h): per step of keys, only the registers of rows
 * that see one of them. */
static void scores_bf16(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                        const int *lo, const int *hi, float *st, int64_t ldst) {
    const int64_t pairs = (d + 1) / 2; /* Q and K are zero past d */
    for (int r = 0; r < rows; r += SCORE_RV * VL) {
        const uint32_t *tile =
            (const uint32_t *)(qp + (int64_t)(r / CS_Q_PANEL) * dq * CS_Q_PANEL) + r % CS_Q_PANEL;
        const int regs = (rows - r) / VL < SCORE_RV ? (rows - r) / VL : SCORE_RV;
        int a[SCORE_RV], e[SCORE_RV], j0 = INT32_MAX, j1 = 0;
        for (int g = 0; g < regs; ++g) {
            SIMD_FN(rows_keys)(lo + r + g * VL, hi + r + g * VL, VL, &a[g], &e[g]);
            j0 = a[g] < j0 ? a[g] : j0;
            j1 = e[g] > j1 ? e[g] : j1;
        }
        for (int j = j1 ? j0 / SIMD_SCORE_KEYS * SIMD_SCORE_KEYS : 0; j < j1;
             j += SIMD_SCORE_KEYS) {
            int g0 = 0, g1 = regs;
            while (g0 < g1 && (a[g0] >= j + SIMD_SCORE_KEYS || e[g0] <= j)) ++g0;
            while (g1 > g0 && (a[g1 - 1] >= j + SIMD_SCORE_KEYS || e[g1 - 1] <= j)) --g1;
            const uint32_t *q = tile + g0 * VL;
            const float *kj = k + (int64_t)j * dq;
            float *out = st + (int64_t)j * ldst + r + g0 * VL;
            if (g1 - g0 == 3)
                scores_tile_bf16(q, kj, pairs, dq, out, ldst, 3);
            else if (g1 - g0 == 2)
                scores_tile_bf16(q, kj, pairs, dq, out, ldst, 2);
            else if (g1 - g0 == 1)
                scores_tile_bf16(q, kj, pairs, dq, out, ldst, 1);
        }
    }
}
#endif

/* The float32 probabilities of slots [j0, j1) of the rows `rows` masks (of the 16 from p) rounded
 * to bf16 in place: slot j becomes the pair (p_j, p_j+1), p_j+1 = 0 past j1. Slot j is written
 * after p_j+1 is read, so one pass down the keys suffices. */
static void pair_slots_bf16(float *p, int64_t ldp, int j0, int j1, __mmask16 rows) {
    if (j1 <= j0) return;
    __m512i cur = bf16_lanes(_mm512_maskz_loadu_ps(rows, p + (int64_t)j0 * ldp));
    for (int j = j0; j < j1; ++j) {
        float *sj = p + (int64_t)j * ldp;
        const __m512i next =
            j + 1 < j1 ? bf16_lanes(_mm512_maskz_loadu_ps(rows, sj + ldp)) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(sj, rows, _mm512_or_si512(cur, _mm512_slli_epi32(next, 16)));
        cur = next;
    }
}

#if !defined(BF16_OWN_PV)
/* The float32 softmax, then each register of rows' P over the keys it sees paired in place. */
static void softmax_bf16(float *st, int64_t ldst, int rows, const int *lo, const int *hi,
                         const cs_score_mods *mods, float *m, float *l, float *alpha) {
    SIMD_FN(softmax)(st, ldst, rows, lo, hi, mods, m, l, alpha);
    for (int r = 0; r < rows; r += VL) {
        int j0, j1;
        SIMD_FN(rows_keys)(lo + r, hi + r, VL, &j0, &j1);
        pair_slots_bf16(st + r, ldst, j0, j1, (__mmask16)0xffff); /* none: j1 <= j0 */
    }
}

/* CS_PV_ROWS rows x 2 registers of columns in registers over the keys: per pair of keys, two
 * loads of V pairs and CS_PV_ROWS broadcasts of P pairs feed 2 * CS_PV_ROWS dot products; an
 * odd last key is taken alone in float32. The strip's last columns take one register at a
 * time, masked where it is half a register. */
static void pv_rows_bf16(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                         int keys, const float *alpha, float *o) {
    int64_t c = 0;
    for (; c + 2 * VL <= cols; c += 2 * VL) {
        __m512 acc[CS_PV_ROWS][2];
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            const __m512 a = _mm512_set1_ps(alpha[r]);
            acc[r][0] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * dq + c));
            acc[r][1] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * dq + c + VL));
        }
        int j = 0;
        for (; j + 1 < keys; j += 2) {
            const float *vj = v + (int64_t)j * dq + c, *pj = p + (int64_t)j * ldp;
            const __m512bh v0 = as_bh(_mm512_loadu_si512(vj));
            const __m512bh v1 = as_bh(_mm512_loadu_si512(vj + VL));
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const __m512bh pr = as_bh(_mm512_set1_epi32(pair_at(pj + r)));
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pr, v0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pr, v1);
            }
        }
        if (j < keys) {
            const float *vj = v + (int64_t)j * dq + c, *pj = p + (int64_t)j * ldp;
            const __m512 v0 = low_as_f32(_mm512_loadu_si512(vj));
            const __m512 v1 = low_as_f32(_mm512_loadu_si512(vj + VL));
            for (int r = 0; r < CS_PV_ROWS; ++r) {
                const __m512 pr = low_as_f32(_mm512_set1_epi32(pair_at(pj + r)));
                acc[r][0] = _mm512_fmadd_ps(pr, v0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(pr, v1, acc[r][1]);
            }
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) {
            _mm512_storeu_ps(o + r * dq + c, acc[r][0]);
            _mm512_storeu_ps(o + r * dq + c + VL, acc[r][1]);
        }
    }
    for (; c < cols; c += VL) {
        const __mmask16 n = vlanes_first(cols - c);
        __m512 acc[CS_PV_ROWS];
        for (int r = 0; r < CS_PV_ROWS; ++r)
            acc[r] =
                _mm512_mul_ps(_mm512_set1_ps(alpha[r]), _mm512_maskz_loadu_ps(n, o + r * dq + c));
        int j = 0;
        for (; j + 1 < keys; j += 2) {
            const __m512bh v0 = as_bh(_mm512_maskz_loadu_epi32(n, v + (int64_t)j * dq + c));
            for (int r = 0; r < CS_PV_ROWS; ++r)
                acc[r] = _mm512_dpbf16_ps(
                    acc[r], as_bh(_mm512_set1_epi32(pair_at(p + (int64_t)j * ldp + r))), v0);
        }
        if (j < keys) {
            const __m512 v0 = low_as_f32(_mm512_maskz_loadu_epi32(n, v + (int64_t)j * dq + c));
            for (int r = 0; r < CS_PV_ROWS; ++r)
                acc[r] = _mm512_fmadd_ps(
                    low_as_f32(_mm512_set1_epi32(pair_at(p + (int64_t)j * ldp + r))), v0, acc[r]);
        }
        for (int r = 0; r < CS_PV_ROWS; ++r) _mm512_mask_storeu_ps(o + r * dq + c, n, acc[r]);
    }
}

#endif

/* One row's columns [c, c + 16 R) (masked to cols) over keys [j0, j1), P paired: R registers
 * of the row share each broadcast of P's pair and run as R independent chains of vdpbf16ps; an
 * odd last key is taken alone in float32 from its bf16 values. */
static inline __attribute__((always_inline)) void pv_row_strip_bf16(const float *p, int64_t ldp,
                                                                    const float *v, int64_t dq,
                                                                    int64_t c, int64_t cols, int j0,
                                                                    int j1, float *o, const int R) {
    __m512 acc[4];
    __mmask16 n[4];
    for (int u = 0; u < R; ++u) {
        n[u] = vlanes_first(cols - c - VL * u);
        acc[u] = _mm512_maskz_loadu_ps(n[u], o + c + VL * u);
    }
    int j = j0;
    for (; j + 1 < j1; j += 2) {
        const __m512bh pj = as_bh(_mm512_set1_epi32(pair_at(p + (int64_t)j * ldp)));
        const float *vj = v + (int64_t)j * dq + c;
        for (int u = 0; u < R; ++u)
            acc[u] =
                _mm512_dpbf16_ps(acc[u], pj, as_bh(_mm512_maskz_loadu_epi32(n[u], vj + VL * u)));
    }
    if (j < j1) {
        const __m512 pj = low_as_f32(_mm512_set1_epi32(pair_at(p + (int64_t)j * ldp)));
        const float *vj = v + (int64_t)j * dq + c;
        for (int u = 0; u < R; ++u)
            acc[u] = _mm512_fmadd_ps(pj, low_as_f32(_mm512_maskz_loadu_epi32(n[u], vj + VL * u)),
                                     acc[u]);
    }
    for (int u = 0; u < R; ++u) _mm512_mask_storeu_ps(o + c + VL * u, n[u], acc[u]);
}

/* One row's o[c] += p_j v_j[c] over keys [j0, j1), c < cols, P paired (pair_slots_bf16): up to
 * four registers of columns at a time, so that the chains of a row's few keys overlap. */
static void pv_row_bf16(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                        int j0, int j1, float *o) {
    for (int64_t c = 0; c < cols; c += 4 * VL) {
        const int64_t left = cols - c;
        if (left > 3 * VL)
            pv_row_strip_bf16(p, ldp, v, dq, c, cols, j0, j1, o, 4);
        else if (left > 2 * VL)
            pv_row_strip_bf16(p, ldp, v, dq, c, cols, j0, j1, o, 3);
        else if (left > VL)
            pv_row_strip_bf16(p, ldp, v, dq, c, cols, j0, j1, o, 2);
        else
            pv_row_strip_bf16(p, ldp, v, dq, c, cols, j0, j1, o, 1);
    }
}

#if !defined(BF16_OWN_PV)
/* Keys [a, e) for every row by pv_rows_bf16 (the pair layouts start a pair at every key), then
 * each row r < n its own keys outside them, row by row: no row takes a key it does not see. */
static void pv_rows_ranged_bf16(const float *p, int64_t ldp, const float *v, int64_t dq,
                                int64_t cols, int a, int e, int n, const int *lo, const int *hi,
                                const float *alpha, float *o) {
    pv_rows_bf16(p + (int64_t)a * ldp, ldp, v + (int64_t)a * dq, dq, cols, e - a, alpha, o);
    for (int r = 0; r < n; ++r) {
        if (lo[r] >= hi[r]) continue;
        const int below = hi[r] < a ? hi[r] : a, above = lo[r] > e ? lo[r] : e;
        if (lo[r] < below) pv_row_bf16(p + r, ldp, v, dq, cols, lo[r], below, o + (int64_t)r * dq);
        if (above < hi[r]) pv_row_bf16(p + r, ldp, v, dq, cols, above, hi[r], o + (int64_t)r * dq);
    }
}
#endif

#endif /* CS_BF16_PAIR_KERNELS_H */
