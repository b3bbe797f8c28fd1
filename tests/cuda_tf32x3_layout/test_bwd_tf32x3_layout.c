/*
 * Host check of the 3xTF32 backward's key-tile index maps (backends/cuda/kernels/backward/
 * tf32x3_layout.h, with the forward's tf32x3/fragment_layout.h): for d = 64 and 128 and each of
 * the eight warps, S^T = K Q^T, dV = P^T dO (dK = dS^T Q takes the same maps) and dQ = dS K are
 * replayed through the model of mma.sync m16n8k8 .tf32 exactly as tf32x3_kv_kernel.cuh feeds it
 * and compared with the products computed directly; the P^T / dS^T placement must keep every
 * (key, query) in its own slot of its row, and its 8-byte stores and loads and the 4-byte loads
 * of dQ's operands must be free of bank conflicts, as must the tile loads. The tile sizes are the
 * kernel's (fp_bwd_tf32x3_kv_tile): 64 keys, eight warps in pairs of 16 keys, 32 query rows at d =
 * 128 and 64 at d = 64.
 */
#include <stdio.h>
#include <string.h>

#include "layout_model.h"
#include "mma_tf32_model.h"
#include "tf32x3_layout.h"

enum { BC = 64, WARPS = 8, MAX_BR = 64, MAX_D = 128, MAX_TILES = 8 };

/* 4-byte shared accesses: one wavefront when the 32 lanes take 32 distinct banks. */
static void expect_banks4(const int off[LANES], const char *what, int d) {
    unsigned seen = 0;
    for (int lane = 0; lane < LANES; ++lane) seen |= 1u << (off[lane] % 32);
    EXPECT(seen == 0xffffffffu, "%s d=%d: 4-byte banks 0x%08x", what, d, seen);
}

/* 8-byte shared accesses are served a half warp at a time: its 16 pairs must take 32 banks. */
static void expect_banks8(const int off[LANES], const char *what, int d) {
    for (int h = 0; h < 2; ++h) {
        unsigned seen = 0;
        for (int i = 0; i < 16; ++i) {
            const int o = off[16 * h + i];
            EXPECT(o % 2 == 0, "%s d=%d: offset %d not 8-byte aligned", what, d, o);
            seen |= 3u << (o % 32);
        }
        EXPECT(seen == 0xffffffffu, "%s d=%d: half %d banks 0x%08x", what, d, h, seen);
    }
}

static int sK[BC * MAX_D], sQ[MAX_BR * MAX_D], sP[BC * FP_BWD_TF32_PT_LD(MAX_BR)];

/* P^T [key][query] through fp_bwd_tf32_pt_at: each slot once, within its key's row. */
static void place_pt(int br, int ld) {
    static char used[BC * FP_BWD_TF32_PT_LD(MAX_BR)];
    memset(used, 0, sizeof used);
    for (int key = 0; key < BC; ++key)
        for (int q = 0; q < br; ++q) {
            const int at = fp_bwd_tf32_pt_at(key, q, ld);
            EXPECT(at >= key * ld && at < key * ld + br && !used[at], "P^T key %d query %d -> %d",
                   key, q, at);
            if (at >= 0 && at < BC * ld) {
                used[at] = 1;
                sP[at] = value(3, key, q);
            }
        }
}

static double dot_d(int seed_a, int ra, int seed_b, int rb, int d) {
    double sum = 0.0;
    for (int col = 0; col < d; ++col) sum += value(seed_a, ra, col) * value(seed_b, rb, col);
    return sum;
}

/* S^T = K Q^T of warp (kg, half): K rows as A, Q rows as B, both by fp_tf32_qk_chunk. */
static void check_st(int d, int br, int kg, int half) {
    const int cpr = d / 4, qh = br / 2, ld = FP_BWD_TF32_PT_LD(br);
    static double st[MAX_TILES][LANES][4];
    memset(st, 0, sizeof st);
    for (int u = 0; u < d / 32; ++u)
        for (int hf = 0; hf < 2; ++hf)
            for (int step = 0; step < 2; ++step)
                for (int nt = 0; nt < qh / 8; ++nt) {
                    double a[LANES][4], b[LANES][2];
                    for (int lane = 0; lane < LANES; ++lane) {
                        const int chunk = fp_tf32_qk_chunk(lane, u, hf), g = lane >> 2;
                        const int *x0 = sK + fp_tf32_swizzle(16 * kg + g, chunk, cpr);
                        const int *x1 = sK + fp_tf32_swizzle(16 * kg + g + 8, chunk, cpr);
                        const int *q = sQ + fp_tf32_swizzle(half * qh + 8 * nt + g, chunk, cpr);
                        a[lane][0] = x0[2 * step];
                        a[lane][1] = x1[2 * step];
                        a[lane][2] = x0[2 * step + 1];
                        a[lane][3] = x1[2 * step + 1];
                        b[lane][0] = q[2 * step];
                        b[lane][1] = q[2 * step + 1];
                    }
                    model_mma(st[nt], a, b);
                }
    for (int nt = 0; nt < qh / 8; ++nt) {
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) {
                const int key = 16 * kg + (lane >> 2) + 8 * (r >> 1);
                const int q = half * qh + 8 * nt + 2 * (lane & 3) + (r & 1);
                EXPECT(st[nt][lane][r] == dot_d(1, key, 2, q, d),
                       "S^T d=%d warp %d/%d n-tile %d lane %d reg %d", d, kg, half, nt, lane, r);
            }
        /* The accumulators' 8-byte stores into P^T, rows g and g + 8. */
        for (int i = 0; i < 2; ++i) {
            int off[LANES];
            for (int lane = 0; lane < LANES; ++lane)
                off[lane] = fp_bwd_tf32_pt_at(16 * kg + (lane >> 2) + 8 * i,
                                              half * qh + 8 * nt + 2 * (lane & 3), ld);
            expect_banks8(off, "P^T store", d);
        }
    }
}

/* dV = P^T dO of warp (kg, half), dO standing in as Q's tile: A pairs of P^T, B by
 * fp_tf32_v_chunk, columns permuted as fp_tf32_o_col. */
static void check_dv(int d, int br, int kg, int half) {
    const int cpr = d / 4, dh = d / 2, ld = FP_BWD_TF32_PT_LD(br);
    static double dv[MAX_TILES][LANES][4];
    memset(dv, 0, sizeof dv);
    for (int t = 0; t < br / 8; ++t) {
        double a[LANES][4];
        int off0[LANES], off1[LANES];
        for (int lane = 0; lane < LANES; ++lane) {
            const int qk = 8 * t + fp_tf32_pv_key(lane, 0), g = lane >> 2;
            off0[lane] = fp_bwd_tf32_pt_at(16 * kg + g, qk, ld);
            off1[lane] = fp_bwd_tf32_pt_at(16 * kg + g + 8, qk, ld);
            a[lane][0] = sP[off0[lane]];
            a[lane][1] = sP[off1[lane]];
            a[lane][2] = sP[off0[lane] + 1];
            a[lane][3] = sP[off1[lane] + 1];
        }
        expect_banks8(off0, "P^T load", d);
        expect_banks8(off1, "P^T load", d);
        for (int wl = 0; wl < dh / 32; ++wl)
            for (int e = 0; e < 4; ++e) {
                double b[LANES][2];
                for (int lane = 0; lane < LANES; ++lane) {
                    const int qk = 8 * t + fp_tf32_pv_key(lane, 0);
                    const int chunk = fp_tf32_v_chunk(lane, half * dh / 32 + wl);
                    b[lane][0] = sQ[fp_tf32_swizzle(qk, chunk, cpr) + e];
                    b[lane][1] = sQ[fp_tf32_swizzle(qk + 1, chunk, cpr) + e];
                }
                model_mma(dv[4 * wl + e], a, b);
            }
    }
    for (int dt = 0; dt < dh / 8; ++dt)
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) {
                const int key = 16 * kg + (lane >> 2) + 8 * (r >> 1);
                const int col = half * dh + fp_tf32_o_col(lane, dt, r);
                double want = 0.0;
                for (int q = 0; q < br; ++q) want += value(3, key, q) * value(2, q, col);
                EXPECT(dv[dt][lane][r] == want, "dV d=%d warp %d/%d n-tile %d lane %d reg %d", d,
                       kg, half, dt, lane, r);
            }
}

/* dQ = dS K of a warp tile (16 queries from row0, columns from col0): A one float a lane from
 * dS^T (P^T's placement), B one float a lane from K's swizzled tile. */
static void check_dq(int d, int br, int row0, int col0, int tiles) {
    const int cpr = d / 4, ld = FP_BWD_TF32_PT_LD(br);
    static double dq[MAX_TILES][LANES][4];
    memset(dq, 0, sizeof dq);
    for (int t = 0; t < BC / 8; ++t) {
        double a[LANES][4];
        int off[4][LANES];
        for (int lane = 0; lane < LANES; ++lane) {
            const int kk = 8 * t + fp_tf32_pv_key(lane, 0), qr = row0 + (lane >> 2);
            off[0][lane] = fp_bwd_tf32_pt_at(kk, qr, ld);
            off[1][lane] = fp_bwd_tf32_pt_at(kk, qr + 8, ld);
            off[2][lane] = fp_bwd_tf32_pt_at(kk + 1, qr, ld);
            off[3][lane] = fp_bwd_tf32_pt_at(kk + 1, qr + 8, ld);
            for (int r = 0; r < 4; ++r) a[lane][r] = sP[off[r][lane]];
        }
        for (int r = 0; r < 4; ++r) expect_banks4(off[r], "dS^T as A of dQ", d);
        for (int nt = 0; nt < tiles; ++nt) {
            double b[LANES][2];
            int ob[2][LANES];
            for (int lane = 0; lane < LANES; ++lane) {
                const int kk = 8 * t + fp_tf32_pv_key(lane, 0), col = col0 + 8 * nt + (lane >> 2);
                ob[0][lane] = fp_bwd_tf32_elem(kk, col, cpr);
                ob[1][lane] = fp_bwd_tf32_elem(kk + 1, col, cpr);
                b[lane][0] = sK[ob[0][lane]];
                b[lane][1] = sK[ob[1][lane]];
            }
            expect_banks4(ob[0], "K as B of dQ", d);
            expect_banks4(ob[1], "K as B of dQ", d);
            model_mma(dq[nt], a, b);
        }
    }
    for (int nt = 0; nt < tiles; ++nt)
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) {
                const int q = row0 + (lane >> 2) + 8 * (r >> 1);
                const int col = col0 + 8 * nt + 2 * (lane & 3) + (r & 1);
                double want = 0.0;
                for (int key = 0; key < BC; ++key) want += value(3, key, q) * value(1, key, col);
                EXPECT(dq[nt][lane][r] == want, "dQ d=%d rows %d cols %d n-tile %d lane %d reg %d",
                       d, row0, col0, nt, lane, r);
            }
}

static void check_dim(int d) {
    const int br = d > 64 ? 32 : 64, ld = FP_BWD_TF32_PT_LD(br);
    place_tile(sK, BC, d, 1, 4, fp_tf32_swizzle);
    place_tile(sQ, br, d, 2, 4, fp_tf32_swizzle);
    place_pt(br, ld);
    /* The loads of the key tile and of a query tile by the block's threads. */
    check_loader(BC, d, 32 * WARPS, 4, fp_tf32_load_row, fp_tf32_load_chunk, fp_tf32_swizzle);
    check_loader(br, d, 32 * WARPS, 4, fp_tf32_load_row, fp_tf32_load_chunk, fp_tf32_swizzle);
    const int row_tiles = br / 16, cols = d / (WARPS / row_tiles);
    for (int warp = 0; warp < WARPS; ++warp) {
        check_st(d, br, warp >> 1, warp & 1);
        check_dv(d, br, warp >> 1, warp & 1);
        check_dq(d, br, 16 * (warp % row_tiles), warp / row_tiles * cols, cols / 8);
    }
}

int main(void) {
    check_dim(64);
    check_dim(128);
    printf("test_bwd_tf32x3_layout: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
