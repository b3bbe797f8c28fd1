/*
 * S = Q K^T of the bf16 tile path on AMX tiles, reading the layouts of bf16_pairs.h in place:
 * it computes S^T = K Q^T, whose A operand is 16 K rows (plain bf16 rows) and whose B operand
 * is 16 column pairs of 16 Q rows (the Q panels, already in the VNNI pair layout), so that each
 * C tile of 16 keys x 16 rows is stored straight into the transposed scores the softmax reads.
 *
 * Written over five operations so that the same code runs on the CPU's tiles
 * (kernels_amxbf16.c: the _tile_* intrinsics) and on a C model of them in a host test that
 * runs anywhere (tests/cpu_simd/test_amx_tiles.c):
 *   TILE_CONFIG(cfg)              load a cs_amx_config
 *   TILE_ZERO(t)                  zero tile t
 *   TILE_LOAD(t, base, stride)    rows of tile t from base, stride bytes apart
 *   TILE_DP(c, a, b)              tile c += a . b over bf16 pairs (TDPBF16PS)
 *   TILE_STORE(t, base, stride)   rows of tile t to base
 * Tiles: 0..2 accumulate the three 16-row registers of a Q panel; 3 and 4 are K and Q over 32
 * columns; 5 and 6 the same over the head dimension's last rem < 16 column pairs.
 * The includer provides SIMD_FN(rows_keys) (simd_kernels.h) and bf16_pairs.h.
 */
#ifndef CS_AMX_SCORES_H
#define CS_AMX_SCORES_H

#include <stdint.h>
#include <string.h>

/* The tile configuration (palette 1) as LDTILECFG reads it: 64 bytes. */
typedef struct cs_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of each tile */
    uint8_t rows[16];
} cs_amx_config;

#define CS_AMX_KEYS  16 /* keys of a C tile (its rows) */
#define CS_AMX_ROWS  16 /* Q rows of a C tile (its 16 float32 columns) */
#define CS_AMX_PAIRS 16 /* column pairs of one TDPBF16PS (64 bytes of an A row) */

/* The configuration for a head dimension of `pairs` column pairs. */
static inline void cs_amx_config_for(int64_t pairs, cs_amx_config *cfg) {
    const int rem = (int)(pairs % CS_AMX_PAIRS);
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 5; ++t) {
        cfg->rows[t] = 16;
        cfg->colsb[t] = 64;
    }
    if (rem) {
        cfg->rows[5] = CS_AMX_KEYS; /* K: 16 keys x rem pairs */
        cfg->colsb[5] = (uint16_t)(4 * rem);
        cfg->rows[6] = (uint8_t)rem; /* Q: rem pairs x 16 rows */
        cfg->colsb[6] = 64;
    }
}

/* C tile g += K (tile 3 or 5) . Q of the panel's register g (tile 4 or 6), over one chunk of
 * column pairs starting at cp. */
#define CS_AMX_GROUP(g, a, b, q_at, stride)                                                        \
    do {                                                                                           \
        TILE_LOAD(b, q_at + g * CS_AMX_ROWS, stride);                                              \
        TILE_DP(g, a, b);                                                                          \
    } while (0)

static void SIMD_FN(amx_scores)(const float *qp, const float *k, int64_t d, int64_t dq, int rows,
                                const int *lo, const int *hi, float *st, int64_t ldst) {
    const int64_t pairs = (d + 1) / 2; /* Q and K are zero past d */
    const int64_t full = pairs / CS_AMX_PAIRS * CS_AMX_PAIRS;
    cs_amx_config cfg;
    cs_amx_config_for(pairs, &cfg);
    TILE_CONFIG(&cfg);
    const uint16_t *kh = (const uint16_t *)k;
    const uint32_t *qw = (const uint32_t *)qp;
    const int64_t k_stride = 4 * dq, q_stride = 4 * CS_Q_PANEL;
    for (int r = 0; r < rows; r += CS_Q_PANEL) {
        const int regs = (rows - r) / CS_AMX_ROWS < 3 ? (rows - r) / CS_AMX_ROWS : 3;
        int j0, j1;
        SIMD_FN(rows_keys)(lo + r, hi + r, regs * CS_AMX_ROWS, &j0, &j1);
        for (int j = j1 ? j0 / CS_AMX_KEYS * CS_AMX_KEYS : 0; j < j1; j += CS_AMX_KEYS) {
            TILE_ZERO(0);
            TILE_ZERO(1);
            TILE_ZERO(2);
            for (int64_t cp = 0; cp < pairs; cp += CS_AMX_PAIRS) {
                const int last = cp == full; /* the remainder's tiles */
                const uint32_t *q_at = qw + cs_pair_q_word(r, cp, dq);
                if (last)
                    TILE_LOAD(5, kh + cs_pair_k_half(j, 2 * cp, dq), k_stride);
                else
                    TILE_LOAD(3, kh + cs_pair_k_half(j, 2 * cp, dq), k_stride);
                for (int g = 0; g < regs; ++g) {
                    if (g == 0 && last) CS_AMX_GROUP(0, 5, 6, q_at, q_stride);
                    if (g == 0 && !last) CS_AMX_GROUP(0, 3, 4, q_at, q_stride);
                    if (g == 1 && last) CS_AMX_GROUP(1, 5, 6, q_at, q_stride);
                    if (g == 1 && !last) CS_AMX_GROUP(1, 3, 4, q_at, q_stride);
                    if (g == 2 && last) CS_AMX_GROUP(2, 5, 6, q_at, q_stride);
                    if (g == 2 && !last) CS_AMX_GROUP(2, 3, 4, q_at, q_stride);
                }
            }
            float *out = st + (int64_t)j * ldst + r;
            TILE_STORE(0, out, 4 * ldst);
            if (regs > 1) TILE_STORE(1, out + CS_AMX_ROWS, 4 * ldst);
            if (regs > 2) TILE_STORE(2, out + 2 * CS_AMX_ROWS, 4 * ldst);
        }
    }
}

#endif /* CS_AMX_SCORES_H */
