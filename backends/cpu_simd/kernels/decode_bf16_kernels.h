/*
 * The decode path's scores for bf16 K on vdpbf16ps (kernels_avx512bf16.c): a bf16 K row is
 * multiplied as it lies in memory, 32 values a register, with no widening; Q (float32 rows
 * holding bf16 values, so narrowing them is exact) is narrowed to pairs once per block of
 * rows, in place (decode_prepare_q_bf16). Each instruction adds two products per float32 lane, so a score takes half the
 * instructions of the widening kernel (decode_kernels.h), whose widening and FMAs take most of
 * a core's time when a group has many rows. Sums stay float32; bf16 subnormals count as zero
 * (vdpbf16ps). f32 and f16 K take the widening kernel.
 */

/* 32 bf16 values of a row from column c, or the 16 of a half register with zeros above. */
static inline __attribute__((always_inline)) __m512bh dbf_row(const void *row, int64_t c,
                                                              const int half) {
    const uint16_t *s = (const uint16_t *)row + c;
    return (__m512bh)(half ? _mm512_maskz_loadu_epi16(0xffff, s) : _mm512_loadu_si512(s));
}

/* kernel_ops.h's decode_prepare_q: each float32 row of bf16 K's queries becomes bf16 pairs at
 * its own start, 32 values a chunk with zeros past d in the last, which the row's float32
 * storage holds (d <= dq, d a multiple of 16). Each chunk is read before it is written over,
 * and it is written only below the chunks still to be read. */
static void decode_prepare_q_bf16(float *q, int64_t dq, int rows, flashport_dtype dt, int64_t d) {
    if (dt != FLASHPORT_BF16) return;
    for (int r = 0; r < rows; ++r) {
        float *row = q + r * dq;
        for (int64_t c = 0; c < d; c += 32) {
            const __m512 lo = _mm512_loadu_ps(row + c);
            const __m512 hi = c + 32 > d ? _mm512_setzero_ps() : _mm512_loadu_ps(row + c + 16);
            _mm512_storeu_si512((uint16_t *)row + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* RB rows x KB keys, RB * KB accumulators; each K register feeds RB dot products, each Q
 * register KB. Sums folded as decode_scores_tile folds them. */
static inline __attribute__((always_inline)) void dbf_tile(const float *q, int64_t dq,
                                                           const void *const *k, int64_t d,
                                                           float *st, int64_t ldst, const int RB,
                                                           const int KB) {
    __m512 acc[16];
    for (int i = 0; i < RB * KB; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 32) {
        const int half = c + 32 > d;
        __m512bh y[4];
        for (int jj = 0; jj < KB; ++jj) y[jj] = dbf_row(k[jj], c, half);
        for (int r = 0; r < RB; ++r) {
            const __m512bh x = dbf_row(q + r * dq, c, 0); /* prepared: zeros past d */
            for (int jj = 0; jj < KB; ++jj)
                acc[jj * RB + r] = _mm512_dpbf16_ps(acc[jj * RB + r], x, y[jj]);
        }
    }
    if (RB == 4) {
        for (int jj = 0; jj < KB; ++jj)
            vf_sum4(acc[jj * RB], acc[jj * RB + 1], acc[jj * RB + 2], acc[jj * RB + 3],
                    st + jj * ldst);
    } else if (KB == 4) {
        for (int r = 0; r < RB; ++r) {
            float sums[4];
            vf_sum4(acc[r], acc[RB + r], acc[2 * RB + r], acc[3 * RB + r], sums);
            for (int i = 0; i < 4; ++i) st[i * ldst + r] = sums[i];
        }
    } else {
        for (int jj = 0; jj < KB; ++jj)
            for (int r = 0; r < RB; ++r) st[jj * ldst + r] = vf_sum(acc[jj * RB + r]);
    }
}

/* Keys [j0, j1) in steps of KB; rows four at a time, then the remainder of three or fewer. */
static inline __attribute__((always_inline)) void dbf_keys(const float *q, int64_t dq, int rows,
                                                           const void *const *k, int64_t d, int j0,
                                                           int j1, float *st, int64_t ldst,
                                                           const int KB) {
    for (int j = j0; j + KB <= j1; j += KB) {
        float *out = st + (int64_t)j * ldst;
        int r = 0;
        for (; r + 4 <= rows; r += 4) dbf_tile(q + r * dq, dq, k + j, d, out + r, ldst, 4, KB);
        if (rows - r == 3)
            dbf_tile(q + r * dq, dq, k + j, d, out + r, ldst, 3, KB);
        else if (rows - r == 2)
            dbf_tile(q + r * dq, dq, k + j, d, out + r, ldst, 2, KB);
        else if (rows - r == 1)
            dbf_tile(q + r * dq, dq, k + j, d, out + r, ldst, 1, KB);
    }
}

/* kernel_ops.h's decode_scores: bf16 K on the dot products, four keys a tile (the decode
 * path's calls take four), the rest one by one, with Q as decode_prepare_q_bf16 left it;
 * other dtypes on the widening kernel. */
static void decode_scores_bf16(const float *q, int64_t dq, int rows, const void *const *k,
                               flashport_dtype dt, int64_t d, int keys, float *st, int64_t ldst) {
    if (dt != FLASHPORT_BF16) {
        SIMD_FN(decode_scores)(q, dq, rows, k, dt, d, keys, st, ldst);
        return;
    }
    const int main = keys / 4 * 4;
    dbf_keys(q, dq, rows, k, d, 0, main, st, ldst, 4);
    dbf_keys(q, dq, rows, k, d, main, keys, st, ldst, 1);
}
