/*
 * Host check of the tensor-core backward's dQ accumulator tiles (backends/cuda/kernels/backward/
 * dq_tiles.h): that the one 16-byte add a lane makes puts each of its m16n8 accumulator values
 * (the PTX ISA's C fragment, restated here) at that element's place in the tile, that the
 * conversion's four 16-byte reads per row pair find the same places, that the 16 rows of a row
 * block zero each tile once, and that the padded rows of every sequence and head, dense and
 * packed, start on a row block and overlap nothing, within the rows the workspace sizes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dq_tiles.h"
#include "check.h"

enum { ROWS = FP_BWD_DQ_TILE_ROWS, COLS = FP_BWD_DQ_TILE_COLS, LANES = 32 };

/* Every element has one place; the accumulator fragment of lane 4 g + c (register r: row
 * g + 8 (r / 2), column 2c + r % 2) is the float4 at the kernels' address. */
static void check_tile(void) {
    int used[FP_BWD_DQ_TILE] = {0};
    for (int r = 0; r < ROWS; ++r)
        for (int col = 0; col < COLS; ++col) {
            const int at = fp_bwd_dq_in_tile(r, col);
            CHECK(at >= 0 && at < FP_BWD_DQ_TILE && !used[at]);
            if (at >= 0 && at < FP_BWD_DQ_TILE) used[at] = 1;
        }
    for (int lane = 0; lane < LANES; ++lane) {
        const int group = lane >> 2, tig = lane % 4;
        const int base = fp_bwd_dq_in_tile(group, 2 * tig);
        CHECK(base % 4 == 0);
        for (int reg = 0; reg < 4; ++reg) {
            const int row = group + 8 * (reg / 2), col = 2 * tig + reg % 2;
            CHECK(fp_bwd_dq_in_tile(row, col) == base + reg);
        }
    }
    int zeroed[FP_BWD_DQ_TILE] = {0};
    for (int r = 0; r < ROWS; ++r)
        for (int k = 0; k < 8; ++k) {
            const int at = fp_bwd_dq_zero_share(r) + k;
            CHECK(at >= 0 && at < FP_BWD_DQ_TILE);
            if (at >= 0 && at < FP_BWD_DQ_TILE) zeroed[at]++;
        }
    for (int i = 0; i < FP_BWD_DQ_TILE; ++i) CHECK(zeroed[i] == 1);
}

/* Every (sequence, head) region of round16(nq) rows starts on a row block, lies within the
 * accumulator, and overlaps no other. */
static void check_sequences(int q_varlen, int batch, int heads_q, const int *nq) {
    int64_t total_q = 0, seq_q = 0;
    for (int b = 0; b < batch; ++b) {
        total_q += nq[b];
        if (nq[b] > seq_q) seq_q = nq[b];
    }
    const int64_t head_rows = fp_bwd_dq_head_rows(q_varlen, batch, seq_q, total_q);
    const int64_t rows = fp_bwd_dq_total_rows(q_varlen, batch, heads_q, head_rows);
    unsigned char *owner = calloc((size_t)rows, 1);
    if (!owner) {
        CHECK(0);
        return;
    }
    int64_t q_row0 = 0;
    for (int b = 0; b < batch; ++b) {
        for (int h = 0; h < heads_q; ++h) {
            const int64_t row0 = fp_bwd_dq_row0(q_varlen, head_rows, heads_q, b, h, q_row0);
            const int64_t end = row0 + fp_bwd_dq_round(nq[b]);
            CHECK(row0 % ROWS == 0);
            CHECK(row0 >= 0 && end <= rows);
            for (int64_t r = row0 < 0 ? 0 : row0; r < end && r < rows; ++r) {
                CHECK(!owner[r]);
                owner[r] = 1;
            }
        }
        q_row0 += nq[b];
    }
    free(owner);
}

int main(void) {
    check_tile();
    static const int one[] = {1}, blocks[] = {16, 32}, odd[] = {17, 17, 17},
                     mixed[] = {0, 1, 15, 16, 17, 0, 31, 33, 100, 2};
    static const struct {
        const int *nq;
        int batch;
    } cases[] = {{one, 1}, {blocks, 2}, {odd, 3}, {mixed, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        for (int q_varlen = 0; q_varlen < 2; ++q_varlen)
            for (int heads_q = 1; heads_q <= 3; ++heads_q)
                check_sequences(q_varlen, cases[i].batch, heads_q, cases[i].nq);
    /* Random packed batches, lengths 0 to 300. */
    srand(7);
    for (int t = 0; t < 200; ++t) {
        int nq[64];
        const int batch = 1 + rand() % 64;
        for (int b = 0; b < batch; ++b) nq[b] = rand() % 301;
        check_sequences(1, batch, 1 + rand() % 4, nq);
    }
    printf("test_bwd_dq_tiles: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
