/*
 * Index maps of the tensor-core backward's f32 dQ accumulator (fast mode), in fragment tiles:
 * each sequence and head owns whole tiles of 16 query rows by 8 head columns (512 bytes), and
 * inside a tile the four values an mma.sync m16n8 accumulator gives lane 4 g + c (rows g and
 * g + 8, columns 2c and 2c + 1, in register order) lie together as one float4. A warp then adds
 * a whole tile by one 16-byte atomic a lane into four contiguous 128-byte lines, where a
 * row-major accumulator takes two 8-byte atomics a lane into eight lines, one 32-byte sector
 * each: a quarter of the L2 requests for the same bytes.
 *
 * Tiles follow each other row block by row block, the D / 8 tiles of a row block in column
 * order. Rows are padded to whole row blocks, by sequence:
 *   dense Q:  [batch, heads_q, round16(seq_q)] rows;
 *   packed Q: [heads_q, head_rows] rows, sequence b from round16(q_row0 + 15 b), which leaves
 *             every earlier sequence its padded rows.
 * Plain integer functions, compiled for the device by the kernels (dq_tiles.cuh) and for the
 * host by tests/cuda_mma_layout, which checks them against the accumulator's fragment layout.
 */
#ifndef FP_BACKWARD_DQ_TILES_H
#define FP_BACKWARD_DQ_TILES_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIP__)
#define FP_BWD_DQ_INDEX static inline __host__ __device__
#else
#define FP_BWD_DQ_INDEX static inline
#endif

#define FP_BWD_DQ_TILE_ROWS 16
#define FP_BWD_DQ_TILE_COLS 8
#define FP_BWD_DQ_TILE      (FP_BWD_DQ_TILE_ROWS * FP_BWD_DQ_TILE_COLS)

FP_BWD_DQ_INDEX int64_t fp_bwd_dq_round(int64_t rows) {
    return (rows + FP_BWD_DQ_TILE_ROWS - 1) / FP_BWD_DQ_TILE_ROWS * FP_BWD_DQ_TILE_ROWS;
}

/* Padded rows a head owns: of its one sequence (dense Q), or of all of them (packed Q). */
FP_BWD_DQ_INDEX int64_t fp_bwd_dq_head_rows(int q_varlen, int64_t batch, int64_t seq_q,
                                            int64_t total_q) {
    return q_varlen ? fp_bwd_dq_round(total_q + (FP_BWD_DQ_TILE_ROWS - 1) * (batch + 1))
                    : fp_bwd_dq_round(seq_q);
}

/* Rows of the whole accumulator. */
FP_BWD_DQ_INDEX int64_t fp_bwd_dq_total_rows(int q_varlen, int64_t batch, int64_t heads_q,
                                             int64_t head_rows) {
    return (q_varlen ? 1 : batch) * heads_q * head_rows;
}

/* First padded row of sequence b (whose packed rows start at q_row0), head h. */
FP_BWD_DQ_INDEX int64_t fp_bwd_dq_row0(int q_varlen, int64_t head_rows, int heads_q, int b, int h,
                                       int64_t q_row0) {
    return q_varlen ? h * head_rows + fp_bwd_dq_round(q_row0 + (FP_BWD_DQ_TILE_ROWS - 1) * b)
                    : ((int64_t)b * heads_q + h) * head_rows;
}

/* Float offset of row r, column col (r < 16, col < 8) in its tile: the float4 of lane
 * 4 (r % 8) + col / 2 holds (r % 8, even col), (r % 8, odd col), (r % 8 + 8, even col),
 * (r % 8 + 8, odd col). */
FP_BWD_DQ_INDEX int fp_bwd_dq_in_tile(int r, int col) {
    return 4 * (4 * (r % 8) + col / 2) + 2 * (r / 8) + col % 2;
}

/* The 8 floats from this offset are those row r of a row block zeroes in each of its tiles:
 * the 16 rows' shares cover a tile once. */
FP_BWD_DQ_INDEX int fp_bwd_dq_zero_share(int r) { return 16 * (r % 8) + 8 * (r / 8); }

#endif /* FP_BACKWARD_DQ_TILES_H */
