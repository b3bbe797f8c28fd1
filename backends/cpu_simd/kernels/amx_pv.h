/*
 * O = alpha O + P V of the bf16 tile path on AMX tiles, a block's rows 16 at a time, reading the
 * V ring of bf16_pairs.h and the softmax's float32 P:
 *   - A is 16 rows of P over 16 key pairs. The softmax leaves P in float32 and transposed (slot
 *     j of row r holds p_j), so each step's 32 slots, from the group's first common key, are
 *     rounded to bf16, paired and transposed into rows first (PAIR_P, 16 x 16 words at a time):
 *     one pass over P where a pairing pass and a transposition took two;
 *   - B is 16 key pairs of 16 columns: ring rows of every other key as they lie (each row's
 *     word c is the pair (v_R[c], v_R+1[c]), the VNNI layout), rows 2 dq words apart;
 *   - C is 16 rows x 16 columns of O, loaded from and stored back into O's rows.
 * Only whole steps of 16 key pairs that every row of the group sees go through the tiles: a
 * row's keys outside them (along a window's edges or the causal diagonal, and the last few of
 * its range) and the columns past the last whole 16 take the vector kernel row by row
 * (PV_ROW), so that no row ever reads a key it does not see (0 * NaN from a hidden V row would
 * reach it). Those keys' slots are paired in place first for the group's 16 rows at once
 * (PAIR_SLOTS), after the tiles have read theirs.
 *
 * Written over the tile operations of amx_scores.h (TILE_CONFIG, TILE_LOAD, TILE_DP,
 * TILE_STORE) and three more that the includer provides, so that a host test runs it anywhere:
 *   PAIR_P(dst, ldd, src, ldp, m)          dst[r * ldd + i] = the pair of bf16(src[2 i ldp + r])
 *                                          and bf16(src[(2 i + 1) ldp + r]) for i < 16 and
 *                                          r < m <= 16 (round to nearest even)
 *   PAIR_SLOTS(p, ldp, j0, j1, m)          slots j0 <= j < j1 of rows r < m (at p + j ldp + r)
 *                                          become the pairs (bf16(p_j), bf16(p_j+1)), p_j1 = 0
 *   PV_ROW(p, ldp, v, dq, cols, j0, j1, o) one row's o[c] += sum of p_j v_j[c] over keys
 *                                          [j0, j1), c < cols, from those pairs (pv_row_bf16)
 * The includer also provides SIMD_FN(rows_keys) (simd_kernels.h), as for amx_scores.h.
 * Tiles: 0..3 accumulate 64 columns of O; 4 and 7 are A, 5 and 6 B, over 16 key pairs.
 */
#ifndef CS_AMX_PV_H
#define CS_AMX_PV_H

#include <stdint.h>
#include <string.h>

#include "amx_scores.h"

#define CS_AMX_PV_COLS  16 /* columns of O in a C tile */
#define CS_AMX_PV_TILES 4  /* C tiles along O's columns */
#define CS_AMX_PV_PAIRS 64 /* key pairs transposed at once (a block of 128 keys) */

/* The configuration for groups of m rows: C tiles 0..3 and A tiles 4 and 7 of m rows, B tiles
 * 5 and 6 of 16 key pairs. Tiles are not renamed: a load into a tile waits for the product
 * reading it, so consecutive products read alternate A and B tiles and each load overlaps the
 * product before it. */
static inline void cs_amx_pv_config_for(int m, cs_amx_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg->rows[t] = t == 5 || t == 6 ? CS_AMX_PAIRS : (uint8_t)m;
        cfg->colsb[t] = 64;
    }
}

/* One step of 16 key pairs into C tiles t < tiles, A in tile a (loaded from a_at), B from V's
 * pair rows at vp alternating between tiles 5 and 6. */
#define CS_AMX_PV_STEP(a, a_at, vp, tiles, a_stride, v_stride)                                     \
    do {                                                                                           \
        TILE_LOAD(a, a_at, a_stride);                                                              \
        TILE_LOAD(5, vp, v_stride);                                                                \
        if ((tiles) > 1) TILE_LOAD(6, (vp) + CS_AMX_PV_COLS, v_stride);                            \
        TILE_DP(0, a, 5);                                                                          \
        if ((tiles) > 1) TILE_DP(1, a, 6);                                                         \
        if ((tiles) > 2) TILE_LOAD(5, (vp) + 2 * CS_AMX_PV_COLS, v_stride);                        \
        if ((tiles) > 3) TILE_LOAD(6, (vp) + 3 * CS_AMX_PV_COLS, v_stride);                        \
        if ((tiles) > 2) TILE_DP(2, a, 5);                                                         \
        if ((tiles) > 3) TILE_DP(3, a, 6);                                                         \
    } while (0)

/* C tiles t < tiles of 16 rows of O at oc += A (the group's transposed P, kn pairs) . B (V's
 * pair rows from vk, 16 columns a tile). */
static inline void SIMD_FN(amx_pv_tiles)(const uint32_t *a_rows, const float *vk, int64_t dq,
                                         int kn, int tiles, float *oc) {
    const int64_t v_stride = 2 * 4 * dq, o_stride = 4 * dq, a_stride = 4 * CS_AMX_PV_PAIRS;
    TILE_LOAD(0, oc, o_stride);
    if (tiles > 1) TILE_LOAD(1, oc + CS_AMX_PV_COLS, o_stride);
    if (tiles > 2) TILE_LOAD(2, oc + 2 * CS_AMX_PV_COLS, o_stride);
    if (tiles > 3) TILE_LOAD(3, oc + 3 * CS_AMX_PV_COLS, o_stride);
    for (int i = 0; i < kn; i += 2 * CS_AMX_PAIRS) {
        const float *vp = vk + (int64_t)2 * i * dq;
        CS_AMX_PV_STEP(4, a_rows + i, vp, tiles, a_stride, v_stride);
        if (i + CS_AMX_PAIRS == kn) break;
        CS_AMX_PV_STEP(7, a_rows + i + CS_AMX_PAIRS, vp + (int64_t)2 * CS_AMX_PAIRS * dq, tiles,
                       a_stride, v_stride);
    }
    TILE_STORE(0, oc, o_stride);
    if (tiles > 1) TILE_STORE(1, oc + CS_AMX_PV_COLS, o_stride);
    if (tiles > 2) TILE_STORE(2, oc + 2 * CS_AMX_PV_COLS, o_stride);
    if (tiles > 3) TILE_STORE(3, oc + 3 * CS_AMX_PV_COLS, o_stride);
}

/* Columns c < d of the block's rows r < real (O rows dq floats apart, P's float32 slots ldp
 * floats apart, p and v at the block's key 0), each over its keys lo[r] <= j < hi[r] (none when
 * lo[r] >= hi[r]), after O's row is rescaled by alpha[r]. A group of 16 rows at a time over every
 * column: with columns outermost (a strip of V in L1 for every group, P transposed for all groups
 * first) it measured slower. */
static void SIMD_FN(amx_pv)(float *p, int64_t ldp, const float *v, int64_t d, int64_t dq, int real,
                            const int *lo, const int *hi, const float *alpha, float *o) {
    const int64_t tiled = d / CS_AMX_PV_COLS * CS_AMX_PV_COLS; /* columns on tiles */
    uint32_t a_rows[CS_AMX_ROWS * CS_AMX_PV_PAIRS];
    int config_m = 0;
    for (int g = 0; g < real; g += CS_AMX_ROWS) {
        const int m = real - g < CS_AMX_ROWS ? real - g : CS_AMX_ROWS;
        float *og = o + (int64_t)g * dq;
        int a = 0, e = INT32_MAX;
        for (int r = g; r < g + m; ++r) {
            /* Past a row's first blocks its maximum seldom moves: most rows skip the pass. */
            if (alpha[r] != 1.0f)
                for (int64_t c = 0; c < d; ++c) o[(int64_t)r * dq + c] *= alpha[r];
            a = lo[r] > a ? lo[r] : a;
            e = hi[r] < e ? hi[r] : e;
        }
        /* On tiles: keys [a, a + 2 pairs), whole steps of 16 pairs. */
        const int pairs = e > a && tiled ? (e - a) / (2 * CS_AMX_PAIRS) * CS_AMX_PAIRS : 0;
        if (pairs && m != config_m) {
            cs_amx_config cfg;
            cs_amx_pv_config_for(m, &cfg);
            TILE_CONFIG(&cfg);
            config_m = m;
        }
        for (int k0 = 0; k0 < pairs; k0 += CS_AMX_PV_PAIRS) {
            const int kn = pairs - k0 < CS_AMX_PV_PAIRS ? pairs - k0 : CS_AMX_PV_PAIRS;
            const float *pk = p + (int64_t)(a + 2 * k0) * ldp + g;
            for (int i = 0; i < kn; i += CS_AMX_PAIRS)
                PAIR_P(a_rows + i, CS_AMX_PV_PAIRS, pk + (int64_t)2 * i * ldp, ldp, m);
            const float *vk = v + (int64_t)(a + 2 * k0) * dq;
            for (int64_t c0 = 0; c0 < tiled; c0 += CS_AMX_PV_TILES * CS_AMX_PV_COLS) {
                const int64_t left = (tiled - c0) / CS_AMX_PV_COLS;
                SIMD_FN(amx_pv_tiles)
                (a_rows, vk + c0, dq, kn, left < CS_AMX_PV_TILES ? (int)left : CS_AMX_PV_TILES,
                 og + c0);
            }
        }
        /* Each row's keys outside the tiles' pairs; the columns past them over all its keys. */
        const int mid = a + 2 * pairs;
        int j0, j1;
        SIMD_FN(rows_keys)(lo + g, hi + g, m, &j0, &j1);
        if (!pairs || tiled < d) {
            PAIR_SLOTS(p + g, ldp, j0, j1, m);
        } else {
            PAIR_SLOTS(p + g, ldp, j0, a, m);
            PAIR_SLOTS(p + g, ldp, mid, j1, m);
        }
        for (int r = g; r < g + m; ++r) {
            if (lo[r] >= hi[r]) continue;
            float *orow = o + (int64_t)r * dq;
            const float *pr = p + r;
            if (!pairs) {
                PV_ROW(pr, ldp, v, dq, d, lo[r], hi[r], orow);
                continue;
            }
            if (lo[r] < a) PV_ROW(pr, ldp, v, dq, tiled, lo[r], a, orow);
            if (mid < hi[r]) PV_ROW(pr, ldp, v, dq, tiled, mid, hi[r], orow);
            if (tiled < d) PV_ROW(pr, ldp, v + tiled, dq, d - tiled, lo[r], hi[r], orow + tiled);
        }
    }
}

#endif /* CS_AMX_PV_H */
