/*
 * Host check of the 3xTF32 Hopper forward's index maps (backends/cuda/kernels/hopper/
 * tf32_layout.h, with fragment_layout.h's descriptors) against a model of wgmma's .tf32 forms
 * written here from the PTX ISA:
 *
 *   - wgmma reads a K-major operand through its descriptor by the canonical 128-byte-swizzle
 *     layout with T = 4 32-bit elements: ((8,m),(T,2k)):((8T,SBO),(1,T)), then swaps address
 *     bits 4-6 with the XOR of bits 7-9; .tf32 has no other layout for shared operands;
 *   - m64nNk8 register fragments: accumulator d_i of thread t (warp w, lane l) at row
 *     16w + l/4 + 8((i/2)%2), column 8(i/4) + 2(l%4) + i%2; A element a_j at row
 *     16w + l/4 + 8(j%2), column l%4 + 4(j/2);
 *   - the tensor core reads the 19 high bits of each 32-bit operand (a tf32).
 *
 * One consumer warpgroup's S = Q K^T and O = P V are replayed in double through the kernel's
 * split tiles (written where the kernel's split pass writes them), its descriptors and k-steps,
 * its S-to-P register map and V^T's key order, three products each (small*big, big*small,
 * big*big), for both head dims with their key tiles and both warpgroups, and compared with the
 * plain f32 products: a misplaced element costs O(1) relative error, the split about 2^-20.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "layout_model.h"
#include "tf32_layout.h"

enum { BR = 128, WG_ROWS = 64, WG_THREADS = 128, MAX_BC = 64, MAX_D = 128 };

/* ---- model of the split and of wgmma ------------------------------------------------- */

/* Shared memory as 32-bit cells, addressed in bytes; NaN where nothing was written. */
static float smem[(2 * BR + 4 * MAX_BC) * MAX_D + 1024];

static float tf32_big(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}
static float tf32_small(float x) { return x - tf32_big(x); }
/* What the tensor core takes of an operand word. */
static double tf32_read(float x) { return (double)tf32_big(x); }

static uint32_t swizzle128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

/* Element (mn, k) of a K-major .tf32 operand (k < 8). */
static float model_read_k_major(uint64_t d, int mn, int k) {
    const uint32_t start = (uint32_t)(d & 0x3FFF) << 4, sbo = (uint32_t)((d >> 32) & 0x3FFF) << 4;
    EXPECT((d >> 62) == 1, "descriptor layout %u, want 128-byte swizzle", (unsigned)(d >> 62));
    const uint32_t addr =
        start + (uint32_t)(mn % 8) * 128 + (uint32_t)k * 4 + (uint32_t)(mn / 8) * sbo;
    return smem[swizzle128(addr) / 4];
}

static int model_acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2); }
static int model_acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }
static int model_a_row(int t, int j) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2); }
static int model_a_col(int t, int j) { return t % 4 + 4 * (j / 2); }

/* ---- the check ----------------------------------------------------------------------- */

static float Q[BR * MAX_D], K[MAX_BC * MAX_D], V[MAX_BC * MAX_D];

static uint32_t rng = 2463534242u;
/* Values with full 24-bit significands, so that every small half is non-zero. */
static float rand_value(void) {
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return (float)((double)rng / 4294967296.0 * 2.0 - 1.0);
}

/* The split pass: element (r, c) of a tile of `rows` rows as big and small tiles. */
static void split_store(uint32_t big, uint32_t small, int rows, int r, int c, float x) {
    const uint32_t at = fp_hopper_tf32_tile_offset(rows, r, c);
    smem[(big + at) / 4] = tf32_big(x);
    smem[(small + at) / 4] = tf32_small(x);
}

/* Every offset of a rows x cols tile lies inside it, 4-aligned, and is hit once. */
static void check_tile_bijective(int rows, int cols) {
    static unsigned char hit[MAX_D * MAX_D];
    memset(hit, 0, sizeof hit);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const uint32_t at = fp_hopper_tf32_tile_offset(rows, r, c);
            EXPECT(at % 4 == 0 && at < (uint32_t)(rows * cols * 4) && !hit[at / 4],
                   "tile %dx%d offset of (%d,%d) = %u", rows, cols, r, c, at);
            if (at < (uint32_t)(rows * cols * 4)) hit[at / 4] = 1;
        }
}

/* |got - want| within the 3xTF32 bound, relative to the sum of |terms|. */
static int close_enough(double got, double want, double magnitude) {
    return fabs(got - want) <= ldexp(magnitude, -18);
}

/* Head dim d with key tiles of BC keys, as the kernel instance of d is built. */
static void check_head_dim(int d, int BC) {
    for (int i = 0; i < BR * d; ++i) Q[i] = rand_value();
    for (int i = 0; i < BC * d; ++i) K[i] = rand_value(), V[i] = rand_value();
    check_tile_bijective(WG_ROWS, d);
    check_tile_bijective(BC, d);
    check_tile_bijective(d, BC);
    for (int k = 0; k < BC; ++k)
        EXPECT(fp_hopper_tf32_vt_key(fp_hopper_tf32_vt_col(k)) == k, "V^T key order of key %d", k);

    /* The kernel's plan: per warpgroup a big and a small Q tile of 64 rows, then K's and V^T's
     * big and small tiles, from a 1024-aligned base that is not 0. */
    const uint32_t q_tile = (uint32_t)WG_ROWS * d * 4, kv_tile = (uint32_t)BC * d * 4;
    const uint32_t sQ = 1024, sK = sQ + 4 * q_tile, sV = sK + 2 * kv_tile;
    for (size_t i = 0; i < sizeof smem / sizeof smem[0]; ++i) smem[i] = NAN;
    for (int r = 0; r < BR; ++r)
        for (int c = 0; c < d; ++c) {
            const uint32_t big = sQ + 2 * (uint32_t)(r / WG_ROWS) * q_tile;
            split_store(big, big + q_tile, WG_ROWS, r % WG_ROWS, c, Q[r * d + c]);
        }
    for (int k = 0; k < BC; ++k)
        for (int c = 0; c < d; ++c) {
            split_store(sK, sK + kv_tile, BC, k, c, K[k * d + c]);
            split_store(sV, sV + kv_tile, d, c, fp_hopper_tf32_vt_col(k), V[k * d + c]);
        }

    for (int wg = 0; wg < 2; ++wg) {
        /* S = Q K^T: three products through the descriptors, k8-step by k8-step. */
        static double S[WG_ROWS][MAX_BC];
        memset(S, 0, sizeof S);
        const uint32_t q_big = sQ + 2 * (uint32_t)wg * q_tile;
        for (int term = 0; term < 3; ++term)
            for (int kk = 0; kk < d / 8; ++kk) {
                const uint32_t a = term == 0 ? q_big + q_tile : q_big;
                const uint32_t b = term == 1 ? sK + kv_tile : sK;
                const uint64_t da = fp_hopper_desc_step(fp_hopper_desc_k_major(a),
                                                        fp_hopper_k_major_step(WG_ROWS, kk));
                const uint64_t db =
                    fp_hopper_desc_step(fp_hopper_desc_k_major(b), fp_hopper_k_major_step(BC, kk));
                for (int m = 0; m < WG_ROWS; ++m)
                    for (int n = 0; n < BC; ++n)
                        for (int k = 0; k < 8; ++k)
                            S[m][n] += tf32_read(model_read_k_major(da, m, k)) *
                                       tf32_read(model_read_k_major(db, n, k));
            }
        for (int m = 0; m < WG_ROWS; ++m)
            for (int n = 0; n < BC; ++n) {
                double want = 0, mag = 0;
                for (int c = 0; c < d; ++c) {
                    const double p = (double)Q[(WG_ROWS * wg + m) * d + c] * K[n * d + c];
                    want += p;
                    mag += fabs(p);
                }
                EXPECT(close_enough(S[m][n], want, mag), "d=%d wg=%d S(%d,%d) = %.9g, want %.9g", d,
                       wg, m, n, S[m][n], want);
            }

        /* The accumulator fragment, as f32 registers; P = S here. */
        static float acc[WG_THREADS][MAX_BC / 2];
        for (int t = 0; t < WG_THREADS; ++t)
            for (int i = 0; i < BC / 2; ++i) {
                EXPECT(fp_hopper_acc_row(t, i) == model_acc_row(t, i) &&
                           fp_hopper_acc_col(t, i) == model_acc_col(t, i),
                       "accumulator map of thread %d register %d", t, i);
                acc[t][i] = (float)S[model_acc_row(t, i)][model_acc_col(t, i)];
            }

        /* O = P V: A split from the registers the kernel takes, B through the V^T tiles. */
        static double O[WG_ROWS][MAX_D];
        memset(O, 0, sizeof O);
        for (int kk = 0; kk < BC / 8; ++kk) {
            static float A_big[WG_ROWS][8], A_small[WG_ROWS][8];
            for (int t = 0; t < WG_THREADS; ++t)
                for (int j = 0; j < 4; ++j) {
                    EXPECT(fp_hopper_tf32_a_row(t, j) == model_a_row(t, j) &&
                               fp_hopper_tf32_a_col(t, j) == model_a_col(t, j),
                           "A map of thread %d register %d", t, j);
                    const float x = acc[t][fp_hopper_tf32_p_source(kk, j)];
                    A_big[model_a_row(t, j)][model_a_col(t, j)] = tf32_big(x);
                    A_small[model_a_row(t, j)][model_a_col(t, j)] = tf32_small(x);
                }
            for (int term = 0; term < 3; ++term) {
                const uint32_t b = term == 1 ? sV + kv_tile : sV;
                const uint64_t db =
                    fp_hopper_desc_step(fp_hopper_desc_k_major(b), fp_hopper_k_major_step(d, kk));
                for (int m = 0; m < WG_ROWS; ++m)
                    for (int n = 0; n < d; ++n)
                        for (int k = 0; k < 8; ++k)
                            O[m][n] += tf32_read(term == 0 ? A_small[m][k] : A_big[m][k]) *
                                       tf32_read(model_read_k_major(db, n, k));
            }
        }
        for (int m = 0; m < WG_ROWS; ++m)
            for (int n = 0; n < d; ++n) {
                double want = 0, mag = 0;
                for (int k = 0; k < BC; ++k) {
                    const double p = (double)(float)S[m][k] * V[k * d + n];
                    want += p;
                    mag += fabs(p);
                }
                EXPECT(close_enough(O[m][n], want, mag), "d=%d wg=%d O(%d,%d) = %.9g, want %.9g", d,
                       wg, m, n, O[m][n], want);
            }
    }
}

int main(void) {
    check_head_dim(64, 64);
    check_head_dim(128, 32);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
