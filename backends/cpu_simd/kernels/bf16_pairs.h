/*
 * Index maps of the bf16 paths' operands in a tile's scratch (bf16_pair_kernels.h says why they
 * are laid out so), in plain C so that a host test can build and read them on any CPU:
 *   - Q: panels of CS_Q_PANEL rows, each 32-bit word a pair of adjacent columns of one row;
 *   - K: ring row j holds the key's dq bf16 values in order, rows of dq floats apart;
 *   - V: ring row R holds, per column, the pair (v_R, v_R+1) in one 32-bit word;
 *   - P (avx512bf16): score slot (j, r) holds the pair (p_j, p_j+1) of row r; amxbf16 keeps P
 *     in float32 and pairs it as its tiles take it (amx_pv.h).
 * Read as AMX operands (amx_scores.h): 16 K rows from an even column are an A tile (rows of
 * 4 dq bytes apart, 32 columns per 64-byte row), 16 column pairs of 16 Q rows are a B tile in
 * the VNNI layout (rows CS_Q_PANEL words apart), and 16 V rows of even offset (rows 2 dq words
 * apart) are a B tile of P V in that layout too.
 */
#ifndef CS_BF16_PAIRS_H
#define CS_BF16_PAIRS_H

#include <stdint.h>

#include "kernel_ops.h"

/* 32-bit word of the Q panels (from the tile's qp) holding columns 2 cp and 2 cp + 1 of row r. */
static inline int64_t cs_pair_q_word(int64_t r, int64_t cp, int64_t dq) {
    return (r / CS_Q_PANEL) * dq * CS_Q_PANEL + cp * CS_Q_PANEL + r % CS_Q_PANEL;
}

/* 16-bit element of the K ring (from its first row) holding column c of ring row j's key. */
static inline int64_t cs_pair_k_half(int64_t j, int64_t c, int64_t dq) { return j * 2 * dq + c; }

/* 16-bit element of the V ring holding column c of the key in ring row `row` + `second`
 * (second: 0 or 1), in ring row `row`'s pair. */
static inline int64_t cs_pair_v_half(int64_t row, int64_t c, int second, int64_t dq) {
    return row * 2 * dq + 2 * c + second;
}

#endif /* CS_BF16_PAIRS_H */
