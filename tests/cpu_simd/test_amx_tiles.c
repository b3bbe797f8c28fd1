/*
 * The AMX path's host side, on any CPU: amx_scores.h (S = Q K^T on tiles) and amx_pv.h (O =
 * alpha O + P V on tiles) run on a C model of the tile instructions, over operands built through
 * the index maps of bf16_pairs.h (Q panels, the K ring, the V ring; P as the float32 softmax
 * leaves it, which amx_pv.h rounds and pairs itself), and must give every score and every output
 * of a double-precision sum of the same bf16 values; the model refuses the tile shapes the CPU
 * would fault on (A's columns not B's rows, C not A's rows by B's columns, a tile past 16 rows or
 * 64 bytes). 16 V rows of the ring read as the B operand of P V
 * (the VNNI layout: each row a pair of keys) must give O = P V on their own too. Keys and
 * columns the kernels must not read hold NaN, so a read of one shows: past the K ring's head
 * dimension and in the second half of each row's space; P past each row's keys; V of the keys
 * no row sees. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fp_half.h"
#include "kernels/bf16_pairs.h"

/* ---- a C model of the tile unit ---- */

typedef struct tile {
    int rows, colsb;
    uint8_t data[16][64];
} tile;
static tile tiles[8];
static int shape_errors;

static float tile_f32(const tile *t, int m, int n) {
    float x;
    memcpy(&x, &t->data[m][4 * n], sizeof x);
    return x;
}
static float tile_bf16(const tile *t, int m, int e) {
    uint16_t h;
    memcpy(&h, &t->data[m][2 * e], sizeof h);
    return fp_bf16_to_f32(h);
}

static void model_config(const void *cfg) {
    const uint8_t *c = cfg;
    if (c[0] != 1) ++shape_errors; /* palette 1 */
    for (int t = 0; t < 8; ++t) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, sizeof colsb);
        tiles[t].colsb = colsb;
        tiles[t].rows = c[48 + t];
        if (colsb > 64 || c[48 + t] > 16 || colsb % 4) ++shape_errors;
    }
}
static void model_zero(int t) { memset(tiles[t].data, 0, sizeof tiles[t].data); }
static void model_load(int t, const void *base, int64_t stride) {
    if (!tiles[t].rows) ++shape_errors;
    for (int m = 0; m < tiles[t].rows; ++m)
        memcpy(tiles[t].data[m], (const uint8_t *)base + m * stride, (size_t)tiles[t].colsb);
}
static void model_store(int t, void *base, int64_t stride) {
    for (int m = 0; m < tiles[t].rows; ++m)
        memcpy((uint8_t *)base + m * stride, tiles[t].data[m], (size_t)tiles[t].colsb);
}
/* TDPBF16PS: c[m][n] += a[m][2k] b[k][2n] + a[m][2k+1] b[k][2n+1], each product added in float
 * (a product of two bf16 values is exact in float32). */
static void model_dp(int c, int a, int b) {
    tile *C = &tiles[c];
    const tile *A = &tiles[a], *B = &tiles[b];
    if (A->colsb / 4 != B->rows || C->rows != A->rows || C->colsb != B->colsb) {
        ++shape_errors;
        return;
    }
    /* The operands as floats first, the sums in a float array, then back into C's bytes. */
    float x[16][32], y[16][32], z[16][16];
    for (int m = 0; m < 16; ++m) {
        for (int e = 0; e < 32; ++e) {
            x[m][e] = tile_bf16(A, m, e);
            y[m][e] = tile_bf16(B, m, e);
        }
        for (int n = 0; n < 16; ++n) z[m][n] = tile_f32(C, m, n);
    }
    /* n innermost: with k innermost, GCC 12.2 at -O3 gave wrong sums here (right at -O2, and
     * with clang). */
    const int rows = C->rows, cols = C->colsb / 4, pairs = B->rows;
    for (int m = 0; m < rows; ++m)
        for (int k = 0; k < pairs; ++k)
            for (int n = 0; n < cols; ++n) {
                z[m][n] += x[m][2 * k + 1] * y[k][2 * n + 1];
                z[m][n] += x[m][2 * k] * y[k][2 * n];
            }
    memcpy(C->data, z, sizeof z);
}

#define TILE_CONFIG(cfg)            model_config(cfg)
#define TILE_ZERO(t)                model_zero(t)
#define TILE_LOAD(t, base, stride)  model_load(t, base, stride)
#define TILE_DP(c, a, b)            model_dp(c, a, b)
#define TILE_STORE(t, base, stride) model_store(t, base, stride)
#define SIMD_FN(name)               name##_model

/* The union of rows' key ranges, as the kernels' rows_keys (simd_kernels.h). */
static void rows_keys_model(const int *lo, const int *hi, int n, int *j0, int *j1) {
    *j0 = INT32_MAX;
    *j1 = 0;
    for (int i = 0; i < n; ++i)
        if (lo[i] < hi[i]) {
            *j0 = lo[i] < *j0 ? lo[i] : *j0;
            *j1 = hi[i] > *j1 ? hi[i] : *j1;
        }
}

#include "kernels/amx_scores.h"

/* PAIR_P, PAIR_SLOTS and PV_ROW of amx_pv.h in plain C: float32 slots rounded to bf16 pairs,
 * transposed or in place, and one row's keys as pv_row_bf16 takes them (pairs of keys, then an
 * odd last key alone from its low halves). */
static uint32_t pair_of(float first, float second) {
    return (uint32_t)fp_f32_to_bf16(first) | (uint32_t)fp_f32_to_bf16(second) << 16;
}
static void pair_p_model(uint32_t *dst, int64_t ldd, const float *src, int64_t ldp, int m) {
    for (int r = 0; r < m; ++r)
        for (int i = 0; i < 16; ++i)
            dst[r * ldd + i] = pair_of(src[2 * i * ldp + r], src[(2 * i + 1) * ldp + r]);
}
static void pair_slots_model(float *p, int64_t ldp, int j0, int j1, int m) {
    for (int r = 0; r < m; ++r)
        for (int j = j0; j < j1; ++j) {
            const uint32_t w =
                pair_of(p[(int64_t)j * ldp + r], j + 1 < j1 ? p[(int64_t)(j + 1) * ldp + r] : 0.0f);
            memcpy(p + (int64_t)j * ldp + r, &w, sizeof w);
        }
}
static float pair_half(const float *word, int second) {
    uint16_t h[2];
    memcpy(h, word, sizeof h);
    return fp_bf16_to_f32(h[second]);
}
static void pv_row_model(const float *p, int64_t ldp, const float *v, int64_t dq, int64_t cols,
                         int j0, int j1, float *o) {
    for (int64_t c = 0; c < cols; ++c) {
        float acc = o[c];
        int j = j0;
        for (; j + 1 < j1; j += 2)
            acc += pair_half(p + (int64_t)j * ldp, 0) * pair_half(v + (int64_t)j * dq + c, 0) +
                   pair_half(p + (int64_t)j * ldp, 1) * pair_half(v + (int64_t)j * dq + c, 1);
        if (j < j1)
            acc += pair_half(p + (int64_t)j * ldp, 0) * pair_half(v + (int64_t)j * dq + c, 0);
        o[c] = acc;
    }
}
#define PAIR_P(dst, ldd, src, ldp, m)          pair_p_model(dst, ldd, src, ldp, m)
#define PAIR_SLOTS(p, ldp, j0, j1, m)          pair_slots_model(p, ldp, j0, j1, m)
#define PV_ROW(p, ldp, v, dq, cols, j0, j1, o) pv_row_model(p, ldp, v, dq, cols, j0, j1, o)
#include "kernels/amx_pv.h"

/* ---- the checks ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float random_bf16(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return fp_round_bf16((float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0));
}

#define MAX_ROWS 96
#define MAX_KEYS 128
#define MAX_DQ   144

static float q[MAX_ROWS][MAX_DQ], k[MAX_KEYS][MAX_DQ], v[MAX_KEYS][MAX_DQ];
static float qp[MAX_ROWS * MAX_DQ], k_ring[(MAX_KEYS + 16) * MAX_DQ], v_ring[MAX_KEYS * MAX_DQ];
static float st[MAX_KEYS * MAX_ROWS];
static int lo[MAX_ROWS], hi[MAX_ROWS];

static void fill_nan(void *p, size_t bytes) { memset(p, 0xff, bytes); }

/* Scores of `rows` rows against `keys` keys (rows j0 <= j < j1 of the block seen by every row)
 * at head dimension d; returns the failed checks. */
static int check_scores(int rows, int keys, int64_t d, int j0, int j1) {
    const int64_t dq = (d + 7) / 8 * 8;
    for (int r = 0; r < rows; ++r)
        for (int64_t c = 0; c < dq; ++c) q[r][c] = c < d ? random_bf16() : 0.0f;
    for (int j = 0; j < keys; ++j)
        for (int64_t c = 0; c < dq; ++c) k[j][c] = c < d ? random_bf16() : 0.0f;
    /* Q panels and K rows through the maps; every other byte NaN. */
    fill_nan(qp, sizeof qp);
    fill_nan(k_ring, sizeof k_ring);
    uint32_t *qw = (uint32_t *)qp;
    uint16_t *kh = (uint16_t *)k_ring;
    for (int r = 0; r < rows; ++r)
        for (int64_t cp = 0; cp < dq / 2; ++cp)
            qw[cs_pair_q_word(r, cp, dq)] = (uint32_t)fp_f32_to_bf16(q[r][2 * cp]) |
                                            (uint32_t)fp_f32_to_bf16(q[r][2 * cp + 1]) << 16;
    const int padded = (keys + 15) / 16 * 16;
    for (int j = 0; j < padded; ++j)
        for (int64_t c = 0; c < dq; ++c)
            kh[cs_pair_k_half(j, c, dq)] = j < keys ? fp_f32_to_bf16(k[j][c]) : 0;
    for (int r = 0; r < rows; ++r) {
        lo[r] = j0;
        hi[r] = j1;
    }
    fill_nan(st, sizeof st);
    shape_errors = 0;
    memset(tiles, 0, sizeof tiles);
    amx_scores_model(qp, k_ring, d, dq, rows, lo, hi, st, rows);
    int failed = shape_errors != 0;
    double worst = 0.0;
    for (int j = j0; j < j1; ++j)
        for (int r = 0; r < rows; ++r) {
            double want = 0.0, mag = 0.0;
            for (int64_t c = 0; c < d; ++c) {
                want += (double)q[r][c] * k[j][c];
                mag += fabs((double)q[r][c] * k[j][c]);
            }
            const double err = fabs(st[(int64_t)j * rows + r] - want) / (mag + 1e-30);
            worst = err > worst || isnan(err) ? err : worst;
        }
    failed |= !(worst < 1e-5);
    printf("%s scores rows=%d keys=%d d=%lld seen=[%d,%d): worst relative error %.2e, tile "
           "shape errors %d\n",
           failed ? "FAIL" : "ok  ", rows, keys, (long long)d, j0, j1, worst, shape_errors);
    return failed;
}

/* 16 rows of P (row-major bf16, an A tile of 16 key pairs) times 16 key pairs of the V ring
 * read from ring row `row0` (even offsets) as a B tile of 16 columns from column c0. */
static int check_v_tile(int64_t d, int row0, int64_t c0) {
    const int64_t dq = (d + 7) / 8 * 8;
    for (int j = 0; j < 33; ++j)
        for (int64_t c = 0; c < dq; ++c) v[j][c] = c < d ? random_bf16() : 0.0f;
    fill_nan(v_ring, sizeof v_ring);
    uint16_t *vh = (uint16_t *)v_ring;
    /* Key i sits in ring row row0 + i: the low half of its own row's pair, the high half of the
     * row before. */
    for (int i = 0; i < 33; ++i)
        for (int64_t c = 0; c < dq; ++c) {
            vh[cs_pair_v_half(row0 + i, c, 0, dq)] = fp_f32_to_bf16(v[i][c]);
            if (row0 + i > 0) vh[cs_pair_v_half(row0 + i - 1, c, 1, dq)] = fp_f32_to_bf16(v[i][c]);
        }
    float p[16][32];
    uint16_t p_rows[16][32];
    for (int r = 0; r < 16; ++r)
        for (int j = 0; j < 32; ++j) {
            p[r][j] = fabsf(random_bf16());
            p_rows[r][j] = fp_f32_to_bf16(p[r][j]);
        }
    static const uint8_t cfg[64] = {
        1, [16] = 64, [18] = 64, [20] = 64, [48] = 16, [49] = 16, [50] = 16};
    shape_errors = 0;
    model_config(cfg);
    model_zero(0);
    model_load(1, p_rows, sizeof p_rows[0]);
    model_load(2, vh + cs_pair_v_half(row0, c0, 0, dq), 2 * 4 * dq); /* every other ring row */
    model_dp(0, 1, 2);
    float o[16][16];
    model_store(0, o, sizeof o[0]);
    double worst = 0.0;
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
            double want = 0.0, mag = 0.0;
            for (int j = 0; j < 32; ++j) {
                const double x = c0 + c < dq ? (double)p[r][j] * v[j][c0 + c] : 0.0;
                want += x;
                mag += fabs(x);
            }
            const double err = fabs(o[r][c] - want) / (mag + 1e-30);
            worst = err > worst || isnan(err) ? err : worst;
        }
    const int failed = shape_errors != 0 || !(worst < 1e-5);
    printf("%s V as a VNNI B tile: d=%lld ring row %d column %lld: worst relative error %.2e\n",
           failed ? "FAIL" : "ok  ", (long long)d, row0, (long long)c0, worst);
    return failed;
}

/* O = alpha O + P V over a block of `keys` keys for `rows` rows whose ranges are ragged (row r
 * sees [lo_r, hi_r), some rows none), at head dimension d: P in float32 slots, V's ring rows built
 * through the maps, NaN wherever a row must not read (P past a row's keys, V of keys no row
 * sees). */
static float p_val[MAX_ROWS][MAX_KEYS], o_init[MAX_ROWS][MAX_DQ], o_out[MAX_ROWS * MAX_DQ];
static float alpha_in[MAX_ROWS];

static int check_pv(int rows, int keys, int64_t d, int64_t pad, int ragged) {
    const int64_t dq = (d + 7) / 8 * 8 + pad;
    int j_min = keys, j_max = 0;
    for (int r = 0; r < rows; ++r) {
        lo[r] = ragged ? (r * 7) % 23 : 1;
        hi[r] = ragged ? keys - (r * 5) % 19 : keys - 2;
        if (ragged && r % 11 == 5) lo[r] = hi[r] = 0; /* a row that sees nothing */
        if (lo[r] < hi[r]) {
            j_min = lo[r] < j_min ? lo[r] : j_min;
            j_max = hi[r] > j_max ? hi[r] : j_max;
        }
        alpha_in[r] = r % 3 ? 1.0f : 0.5f;
        for (int64_t c = 0; c < dq; ++c) o_init[r][c] = c < d ? random_bf16() : 0.0f;
        for (int j = 0; j < keys; ++j) p_val[r][j] = fabsf(random_bf16());
    }
    for (int j = 0; j < keys; ++j)
        for (int64_t c = 0; c < dq; ++c) v[j][c] = c < d ? random_bf16() : 0.0f;
    fill_nan(st, sizeof st);
    fill_nan(v_ring, sizeof v_ring);
    uint16_t *vh = (uint16_t *)v_ring;
    for (int j = 0; j < keys; ++j)
        for (int64_t c = 0; c < dq; ++c) {
            const uint16_t x = j >= j_min && j < j_max ? fp_f32_to_bf16(v[j][c]) : 0xffffu;
            vh[cs_pair_v_half(j, c, 0, dq)] = x;
            if (j > 0) vh[cs_pair_v_half(j - 1, c, 1, dq)] = x;
        }
    for (int r = 0; r < rows; ++r)
        for (int j = lo[r]; j < hi[r]; ++j) st[(int64_t)j * rows + r] = p_val[r][j];
    for (int r = 0; r < rows; ++r)
        for (int64_t c = 0; c < dq; ++c) o_out[r * dq + c] = o_init[r][c];
    shape_errors = 0;
    memset(tiles, 0, sizeof tiles);
    amx_pv_model(st, rows, v_ring, d, dq, rows, lo, hi, alpha_in, o_out);
    int failed = shape_errors != 0;
    double worst = 0.0;
    for (int r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) {
            double want = (double)alpha_in[r] * o_init[r][c], mag = fabs(want);
            for (int j = lo[r]; j < hi[r]; ++j) {
                const double x = (double)fp_round_bf16(p_val[r][j]) * v[j][c];
                want += x;
                mag += fabs(x);
            }
            const double err = fabs(o_out[r * dq + c] - want) / (mag + 1e-30);
            worst = err > worst || isnan(err) ? err : worst;
        }
    failed |= !(worst < 1e-5);
    printf("%s P V rows=%d keys=%d d=%lld dq=%lld %s: worst relative error %.2e, tile shape "
           "errors %d\n",
           failed ? "FAIL" : "ok  ", rows, keys, (long long)d, (long long)dq,
           ragged ? "ragged" : "common", worst, shape_errors);
    return failed;
}

int main(void) {
    int failures = 0;
    static const int64_t dims[] = {1, 8, 13, 32, 40, 64, 72, 100, 128};
    static const int rows[] = {16, 32, 48, 80, 96};
    static const int keys[] = {1, 16, 37, 128};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; ++a)
        for (size_t b = 0; b < sizeof rows / sizeof rows[0]; ++b)
            for (size_t c = 0; c < sizeof keys / sizeof keys[0]; ++c) {
                const int n = keys[c];
                failures += check_scores(rows[b], n, dims[a], 0, n);
                if (n > 20) failures += check_scores(rows[b], n, dims[a], 17, n - 3);
            }
    /* A B tile of 16 columns needs 16 of them: d >= 16, any even start row (the ring's first
     * row included), any start column of a whole register. */
    static const int64_t v_dims[] = {16, 64, 128};
    for (size_t a = 0; a < sizeof v_dims / sizeof v_dims[0]; ++a)
        for (int row0 = 0; row0 <= 6; row0 += 2)
            for (int64_t c0 = 0; c0 + 16 <= v_dims[a]; c0 += 48)
                failures += check_v_tile(v_dims[a], row0, c0);
    /* P V on tiles: whole and partial groups of 16 rows, whole and partial 16-column tiles,
     * ranges of whole steps of 32 keys and not; rows of exactly the head dimension's dq and of
     * 16 floats more (the tiling's stride at d = 128). */
    static const int64_t pv_dims[] = {8, 16, 40, 64, 72, 128};
    static const int pv_rows[] = {16, 37, 96};
    static const int pv_keys[] = {34, 70, 128};
    for (size_t a = 0; a < sizeof pv_dims / sizeof pv_dims[0]; ++a)
        for (size_t b = 0; b < sizeof pv_rows / sizeof pv_rows[0]; ++b)
            for (size_t c = 0; c < sizeof pv_keys / sizeof pv_keys[0]; ++c)
                for (int ragged = 0; ragged < 2; ++ragged)
                    for (int64_t pad = 0; pad <= 16; pad += 16)
                        failures += check_pv(pv_rows[b], pv_keys[c], pv_dims[a], pad, ragged);
    printf("%s: %d failed checks\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
