/*
 * Host check of the Hopper forward's index maps (backends/cuda/kernels/hopper/fragment_layout.h)
 * against a model of TMA and wgmma written here from the PTX ISA and the CUDA driver's
 * description of 128-byte swizzle:
 *
 *   - TMA with CU_TENSOR_MAP_SWIZZLE_128B writes box row r (128 bytes) at r * 128 from a
 *     1024-byte aligned destination, its 16-byte chunk c at chunk c ^ (r % 8);
 *   - wgmma reads an operand through a descriptor by the canonical layouts of the ISA
 *     (128-byte swizzle; T = 8 16-bit elements): K-major ((8,m),(T,2k)):((8T,SBO),(1,T)),
 *     MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), then swaps address bits 4-6 with the
 *     XOR of bits 7-9 (Swizzle<3,4,3> on byte addresses);
 *   - the m64nNk16 register fragments: accumulator d_i of thread t (warp w, lane l) at row
 *     16w + l/4 + 8((i/2)%2), column 8(i/4) + 2(l%4) + i%2; A elements a_0..a_7 at rows
 *     16w + l/4 (+8 for a_2, a_3, a_6, a_7), columns 2(l%4) + (0, 1) (+8 for a_4..a_7).
 *
 * One consumer warpgroup's S = Q K^T and O = P V are replayed on small integers (exact in
 * double) through the kernel's descriptors and its S-to-P register map, for every head dim
 * (with its key tile) and both warpgroups of the block, and compared with plain products.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fragment_layout.h"
#include "layout_model.h"

enum { BR = 128, MAX_BC = 128, WG_ROWS = 64, WG_THREADS = 128, MAX_D = 256 };

/* ---- model of TMA and wgmma ------------------------------------------------------------ */

/* Shared memory as 16-bit cells, addressed in bytes; tiles sit 1024-aligned from 0. */
static int smem[(BR + 2 * MAX_BC) * MAX_D + 4096];

/* TMA: box of 64 columns x rows, from matrix `m` (rows x cols, row-major), columns
 * [col0, col0 + 64), to byte address dst. */
static void model_tma_box(uint32_t dst, const int *m, int cols, int rows, int col0) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 64; ++c) {
            const uint32_t chunk = (uint32_t)(c / 8) ^ (uint32_t)(r % 8);
            const uint32_t byte = dst + (uint32_t)r * 128 + chunk * 16 + (uint32_t)(c % 8) * 2;
            smem[byte / 2] = m[r * cols + col0 + c];
        }
}

static uint32_t swizzle128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

typedef struct {
    uint32_t start, lbo, sbo, layout;
} desc_fields;

static desc_fields decode_desc(uint64_t d) {
    desc_fields f;
    f.start = (uint32_t)(d & 0x3FFF) << 4;
    f.lbo = (uint32_t)((d >> 16) & 0x3FFF) << 4;
    f.sbo = (uint32_t)((d >> 32) & 0x3FFF) << 4;
    f.layout = (uint32_t)(d >> 62);
    return f;
}

/* Element (mn, k) of a K-major operand (mn < 64 or N, k < 16). */
static int model_read_k_major(uint64_t d, int mn, int k) {
    const desc_fields f = decode_desc(d);
    EXPECT(f.layout == 1, "K-major descriptor layout %u, want 128-byte swizzle", f.layout);
    const uint32_t elems = (uint32_t)(mn % 8) * 64 + (uint32_t)(k % 8) + (uint32_t)(k / 8) * 8;
    const uint32_t addr = f.start + elems * 2 + (uint32_t)(mn / 8) * f.sbo;
    return smem[swizzle128(addr) / 2];
}

/* Element (k, n) of an N-major operand (k < 16, n < N). */
static int model_read_n_major(uint64_t d, int k, int n) {
    const desc_fields f = decode_desc(d);
    EXPECT(f.layout == 1, "N-major descriptor layout %u, want 128-byte swizzle", f.layout);
    const uint32_t elems = (uint32_t)(n % 64) + (uint32_t)(k % 8) * 64;
    const uint32_t addr =
        f.start + elems * 2 + (uint32_t)(n / 64) * f.lbo + (uint32_t)(k / 8) * f.sbo;
    return smem[swizzle128(addr) / 2];
}

static int model_acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2); }
static int model_acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }
/* A element a_e (e = 0..7) of thread t. */
static int model_a_row(int t, int e) {
    return 16 * (t / 32) + (t % 32) / 4 + ((e / 2) % 2 ? 8 : 0);
}
static int model_a_col(int t, int e) { return 2 * (t % 4) + e % 2 + (e >= 4 ? 8 : 0); }

/* ---- the check ------------------------------------------------------------------------- */

static int Q[BR * MAX_D], K[MAX_BC * MAX_D], V[MAX_BC * MAX_D];

typedef int (*read_k_major_fn)(uint64_t desc, int mn, int k);

/* S = Q K^T of warpgroup wg through the kernel's K-major descriptors, in k-steps of `step`
 * elements read by `read`, checked against the plain product of Q (BR x d) and K (BC x d). */
static void check_scores(double S[WG_ROWS][MAX_BC], read_k_major_fn read, int step, uint32_t sQ,
                         uint32_t sK, int wg, int d, int BC) {
    const uint32_t sQ_wg = sQ + (uint32_t)wg * WG_ROWS * 128;
    memset(S, 0, sizeof(double) * WG_ROWS * MAX_BC);
    for (int kk = 0; kk < d / step; ++kk) {
        const uint64_t da =
            fp_hopper_desc_step(fp_hopper_desc_k_major(sQ_wg), fp_hopper_k_major_step(BR, kk));
        const uint64_t db =
            fp_hopper_desc_step(fp_hopper_desc_k_major(sK), fp_hopper_k_major_step(BC, kk));
        for (int m = 0; m < WG_ROWS; ++m)
            for (int n = 0; n < BC; ++n)
                for (int k = 0; k < step; ++k) S[m][n] += (double)read(da, m, k) * read(db, n, k);
    }
    for (int m = 0; m < WG_ROWS; ++m)
        for (int n = 0; n < BC; ++n) {
            double want = 0;
            for (int c = 0; c < d; ++c)
                want += (double)Q[(WG_ROWS * wg + m) * d + c] * K[n * d + c];
            EXPECT(S[m][n] == want, "k-step %d d=%d wg=%d S(%d,%d) = %g, want %g", step, d, wg, m,
                   n, S[m][n], want);
        }
}

/* Head dim d with key tiles of BC keys, as the kernel instance of d is built. */
static void check_head_dim(int d, int BC) {
    for (int r = 0; r < BR; ++r)
        for (int c = 0; c < d; ++c) Q[r * d + c] = value(1, r, c);
    for (int r = 0; r < BC; ++r)
        for (int c = 0; c < d; ++c) {
            K[r * d + c] = value(2, r, c);
            V[r * d + c] = value(3, r, c);
        }
    /* Q, then one K and one V stage, panels of 64 columns, from a 1024-aligned base that is not
     * 0, as the kernel's dynamic window gives. */
    const uint32_t sQ = 2048, sK = sQ + (uint32_t)BR * d * 2, sV = sK + (uint32_t)BC * d * 2;
    memset(smem, 0x7f, sizeof smem);
    for (int p = 0; p < d / 64; ++p) {
        model_tma_box(sQ + (uint32_t)p * BR * 128, Q, d, BR, 64 * p);
        model_tma_box(sK + (uint32_t)p * BC * 128, K, d, BC, 64 * p);
        model_tma_box(sV + (uint32_t)p * BC * 128, V, d, BC, 64 * p);
    }
    /* The kernel's own statement of the placement agrees with TMA's. */
    for (int r = 0; r < BR; ++r)
        for (int c = 0; c < d; ++c)
            EXPECT(smem[(sQ + fp_hopper_tile_offset(BR, r, c)) / 2] == Q[r * d + c],
                   "d=%d tile offset of Q(%d,%d)", d, r, c);

    for (int wg = 0; wg < 2; ++wg) {
        /* S = Q K^T through the descriptors, k-step by k-step. */
        static double S[WG_ROWS][MAX_BC];
        check_scores(S, model_read_k_major, 16, sQ, sK, wg, d, BC);
        /* The accumulator fragment, and the kernel's map of it onto P's A operand: P = S here. */
        static double acc[WG_THREADS][MAX_BC / 2];
        for (int t = 0; t < WG_THREADS; ++t)
            for (int i = 0; i < BC / 2; ++i) {
                EXPECT(fp_hopper_acc_row(t, i) == model_acc_row(t, i) &&
                           fp_hopper_acc_col(t, i) == model_acc_col(t, i),
                       "accumulator map of thread %d register %d", t, i);
                acc[t][i] = S[model_acc_row(t, i)][model_acc_col(t, i)];
            }
        /* O = P V: A from the registers the kernel packs, B through the N-major descriptors. */
        static double O[WG_ROWS][MAX_D];
        memset(O, 0, sizeof O);
        for (int kk = 0; kk < BC / 16; ++kk) {
            const uint64_t db =
                fp_hopper_desc_step(fp_hopper_desc_n_major(sV, BC), fp_hopper_n_major_step(kk));
            static double A[WG_ROWS][16];
            for (int t = 0; t < WG_THREADS; ++t)
                for (int j = 0; j < 4; ++j)
                    for (int e = 0; e < 2; ++e) {
                        const int el = 2 * j + e; /* register j holds a_{2j}, a_{2j+1} */
                        EXPECT(fp_hopper_a_row(t, j) == model_a_row(t, el) &&
                                   fp_hopper_a_col(t, j, e) == model_a_col(t, el),
                               "A map of thread %d register %d half %d", t, j, e);
                        A[model_a_row(t, el)][model_a_col(t, el)] =
                            acc[t][fp_hopper_p_source(kk, j, e)];
                    }
            for (int m = 0; m < WG_ROWS; ++m)
                for (int n = 0; n < d; ++n)
                    for (int k = 0; k < 16; ++k) O[m][n] += A[m][k] * model_read_n_major(db, k, n);
        }
        for (int m = 0; m < WG_ROWS; ++m)
            for (int n = 0; n < d; ++n) {
                double want = 0;
                for (int k = 0; k < BC; ++k) want += S[m][k] * V[k * d + n];
                EXPECT(O[m][n] == want, "d=%d wg=%d O(%d,%d) = %g, want %g", d, wg, m, n, O[m][n],
                       want);
            }
    }
}

/* ---- FP8: 8-bit operands, k-steps of 32 ---------------------------------------------- */

/* Shared memory as 8-bit cells. */
static int smem8[(BR + 2 * MAX_BC) * MAX_D + 4096];

/* TMA, 1-byte elements: box of 128 columns x rows, as model_tma_box. */
static void model_tma_box8(uint32_t dst, const int *m, int cols, int rows, int col0) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 128; ++c) {
            const uint32_t chunk = (uint32_t)(c / 16) ^ (uint32_t)(r % 8);
            smem8[dst + (uint32_t)r * 128 + chunk * 16 + (uint32_t)(c % 16)] =
                m[r * cols + col0 + c];
        }
}

/* Element (mn, k) of an 8-bit K-major operand (k < 32): T = 16 elements of 16 bytes. */
static int model_read_k_major8(uint64_t d, int mn, int k) {
    const desc_fields f = decode_desc(d);
    EXPECT(f.layout == 1, "K-major descriptor layout %u, want 128-byte swizzle", f.layout);
    const uint32_t addr =
        f.start + (uint32_t)(mn % 8) * 128 + (uint32_t)k + (uint32_t)(mn / 8) * f.sbo;
    return smem8[swizzle128(addr)];
}

/* 8-bit A element a_e (e = 0..15) of thread t (m64nNk32, as mma.m16n8k32 per warp). */
static int model_a8_row(int t, int e) {
    return 16 * (t / 32) + (t % 32) / 4 + ((e / 4) % 2 ? 8 : 0);
}
static int model_a8_col(int t, int e) { return 4 * (t % 4) + e % 4 + (e >= 8 ? 16 : 0); }

/* The FP8 instance (d = 128, 128-key tiles): S = Q K^T with k-steps of 32 bytes, and O = P V
 * with P from the accumulators through fp_hopper_p8_source and V^T's columns renumbered by
 * fp_hopper_vt_key, as the pre-pass writes them. */
static void check_fp8(void) {
    enum { D = 128, BC = 128 };
    static int VT[D * BC];
    for (int r = 0; r < BR; ++r)
        for (int c = 0; c < D; ++c) Q[r * D + c] = value(1, r, c);
    for (int r = 0; r < BC; ++r)
        for (int c = 0; c < D; ++c) {
            K[r * D + c] = value(2, r, c);
            V[r * D + c] = value(3, r, c);
        }
    for (int n = 0; n < D; ++n)
        for (int c = 0; c < BC; ++c) VT[n * BC + c] = V[fp_hopper_vt_key(c) * D + n];
    const uint32_t sQ = 2048, sK = sQ + BR * D, sV = sK + BC * D;
    memset(smem8, 0x7f, sizeof smem8);
    model_tma_box8(sQ, Q, D, BR, 0);
    model_tma_box8(sK, K, D, BC, 0);
    model_tma_box8(sV, VT, BC, D, 0);
    for (int wg = 0; wg < 2; ++wg) {
        static double S[WG_ROWS][MAX_BC];
        check_scores(S, model_read_k_major8, 32, sQ, sK, wg, D, BC);
        static double acc[WG_THREADS][BC / 2];
        for (int t = 0; t < WG_THREADS; ++t)
            for (int i = 0; i < BC / 2; ++i)
                acc[t][i] = S[model_acc_row(t, i)][model_acc_col(t, i)];
        static double O[WG_ROWS][D];
        memset(O, 0, sizeof O);
        for (int kk = 0; kk < BC / 32; ++kk) {
            const uint64_t db =
                fp_hopper_desc_step(fp_hopper_desc_k_major(sV), fp_hopper_k_major_step(D, kk));
            static double A[WG_ROWS][32];
            for (int t = 0; t < WG_THREADS; ++t)
                for (int j = 0; j < 4; ++j)
                    for (int e = 0; e < 4; ++e) {
                        const int el = 4 * j + e; /* register j holds a_{4j} .. a_{4j+3} */
                        EXPECT(fp_hopper_a8_row(t, j) == model_a8_row(t, el) &&
                                   fp_hopper_a8_col(t, j, e) == model_a8_col(t, el),
                               "8-bit A map of thread %d register %d byte %d", t, j, e);
                        A[model_a8_row(t, el)][model_a8_col(t, el)] =
                            acc[t][fp_hopper_p8_source(kk, j, e)];
                    }
            for (int m = 0; m < WG_ROWS; ++m)
                for (int n = 0; n < D; ++n)
                    for (int k = 0; k < 32; ++k) O[m][n] += A[m][k] * model_read_k_major8(db, n, k);
        }
        for (int m = 0; m < WG_ROWS; ++m)
            for (int n = 0; n < D; ++n) {
                double want = 0;
                for (int k = 0; k < BC; ++k) want += S[m][k] * V[k * D + n];
                EXPECT(O[m][n] == want, "fp8 wg=%d O(%d,%d) = %g, want %g", wg, m, n, O[m][n],
                       want);
            }
    }
}

int main(void) {
    check_head_dim(64, 128);
    check_head_dim(128, 128);
    check_head_dim(256, 64);
    check_fp8();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
