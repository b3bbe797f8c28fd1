/*
 * The tensor-core backward's dQ accumulator tiles (dq_tiles.h) on the device: the tile of a
 * sequence, head and row block, its size for a problem, and the add of one accumulator
 * fragment. The backward_f32 kernels keep their accumulator by LSE rows (fp_lse_index) in the
 * same workspace, which fp_bwd_dq_rows sizes for either.
 */
#ifndef FP_BACKWARD_DQ_TILES_CUH
#define FP_BACKWARD_DQ_TILES_CUH

#include "dq_tiles.h"
#include "params.h"

static inline int64_t fp_bwd_dq_head_rows(const fp_problem *p) {
    return fp_bwd_dq_head_rows(p->q_varlen, p->batch, p->seq_q, p->total_q);
}

/* Rows of the whole accumulator (at least the LSE's). */
static inline int64_t fp_bwd_dq_rows(const fp_problem *p) {
    return fp_bwd_dq_total_rows(p->q_varlen, p->batch, p->heads_q, fp_bwd_dq_head_rows(p));
}

/* The tile of rows [16 t, 16 t + 16) and head columns [8 col8, 8 col8 + 8) of sequence s,
 * head h. */
__device__ __forceinline__ float *fp_bwd_dq_tile(const fp_bwd_params &a, const fp_seq &s, int h,
                                                 int t, int col8) {
    const int64_t row0 =
        fp_bwd_dq_row0(a.seq.q_varlen, a.dq_head_rows, a.seq.heads_q, s.b, h, s.q_row0);
    return a.dq_acc + (row0 + (int64_t)FP_BWD_DQ_TILE_ROWS * t) * a.d +
           (int64_t)FP_BWD_DQ_TILE * col8;
}

/* Adds an m16n8 accumulator fragment x (lane 4 g + c, register order) to its tile: one vector
 * atomic where the target has it (sm_90), four scalar ones before. */
__device__ __forceinline__ void fp_bwd_dq_tile_add(float *tile, int lane, const float (&x)[4]) {
    float *const at = tile + fp_bwd_dq_in_tile(lane / 4, 2 * (lane % 4));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(at), make_float4(x[0], x[1], x[2], x[3]));
#else
    for (int r = 0; r < 4; ++r) atomicAdd(at + r, x[r]);
#endif
}

#endif /* FP_BACKWARD_DQ_TILES_CUH */
