/*
 * The backward's workspace and the two small kernels around the main ones, shared by every
 * backward variant:
 *   - preprocessing, before: D_i = dO_i . O_i and the LSE in the log2 domain per row, and in
 *     fast mode the f32 dQ accumulator zeroed;
 *   - conversion, after (fast mode): dQ = scale * accumulator in the output type, written by the
 *     q strides to the rows of each sequence only.
 * Layout: lse_log2 [rows] and delta [rows], rows numbered as the LSE (fp_lse_index), then in
 * fast mode the dQ accumulator of fp_bwd_dq_rows rows of d (dq_tiles.cuh), each 256-byte
 * aligned. Nothing is N x N: the workspace is O(rows * d), like the gradients themselves.
 */
#ifndef FP_BACKWARD_WORKSPACE_CUH
#define FP_BACKWARD_WORKSPACE_CUH

#include <math.h>

#include "../common/dtype.cuh"
#include "../common/smem_limit.cuh"
#include "../common/warp_reduce.cuh"
#include "dq_tiles.cuh"
#include "params.h"

#define FP_BWD_ROW_WARPS 4  /* warps of a preprocessing or conversion block */
#define FP_BWD_ROWS      16 /* rows of a preprocessing or conversion block */

static inline size_t fp_bwd_align(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* Rows of the per-row workspace arrays: as many as LSE entries. */
static inline int64_t fp_bwd_rows(const fp_problem *p) {
    return p->q_varlen ? p->heads_q * p->total_q : p->batch * p->heads_q * p->seq_q;
}

/* Every backward variant's workspace(): the per-row arrays, and in fast mode the f32 dQ
 * accumulator in fragment tiles. */
static inline size_t fp_bwd_workspace_bytes(const fp_problem *p, const fp_gpu_kernel_params *) {
    const size_t rows = (size_t)fp_bwd_rows(p);
    const size_t per_row = 2 * fp_bwd_align(rows * sizeof(float));
    return per_row +
           (p->deterministic ? 0 : fp_bwd_align((size_t)fp_bwd_dq_rows(p) * p->head_dim * 4));
}

static inline fp_bwd_params fp_bwd_params_make(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    fp_bwd_params a;
    a.q = L->q;
    a.k = L->k;
    a.v = L->v;
    a.o = L->o;
    a.d_o = L->args->d_o;
    a.d_q = L->args->d_q;
    a.d_k = L->args->d_k;
    a.d_v = L->args->d_v;
    a.lse = L->lse;
    a.qs = p->q;
    a.ks = p->k;
    a.vs = p->v;
    a.os = p->o;
    a.seq = fp_seq_layout_make(p, L->args);
    a.mods = fp_score_mods_make(p, L->args);
    a.group = (int)(p->heads_q / p->heads_kv);
    a.d = (int)p->head_dim;
    a.scale_log2 = p->scale * FP_LOG2E;
    const size_t rows = (size_t)fp_bwd_rows(p);
    char *ws = static_cast<char *>(L->workspace);
    a.lse_log2 = reinterpret_cast<float *>(ws);
    a.delta = reinterpret_cast<float *>(ws + fp_bwd_align(rows * sizeof(float)));
    a.dq_acc = p->deterministic
                   ? NULL
                   : reinterpret_cast<float *>(ws + 2 * fp_bwd_align(rows * sizeof(float)));
    a.dq_head_rows = fp_bwd_dq_head_rows(p);
    return a;
}

/* One warp a row: grid (ceil(seq_q / FP_BWD_ROWS), batch * heads_q), any T, head dim and
 * strides (backward_f32). One lane sums D = dO . O by FMAs in column order, the order in which
 * the f32 kernels sum dP = dO . v, so that where O is a single row of V (a row that sees one
 * key) dP - D is exactly 0, as it is in exact arithmetic, instead of a rounding residue that dQ
 * and dK would carry. */
template <typename T> __global__ void fp_bwd_preprocess_kernel(const fp_bwd_params a) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q;
    const fp_seq s = fp_sequence(a.seq, b);
    for (int i = blockIdx.x * FP_BWD_ROWS + warp;
         i < min(s.nq, (int)(blockIdx.x + 1) * FP_BWD_ROWS); i += FP_BWD_ROW_WARPS) {
        const int64_t row = fp_lse_index(a.seq, s, h, i);
        if (lane == 0) {
            const T *o = static_cast<const T *>(a.o) + fp_q_offset(a.os, s, h, i);
            const T *d_o = static_cast<const T *>(a.d_o) + fp_q_offset(a.os, s, h, i);
            float dot = 0.0f;
            for (int c = 0; c < a.d; ++c) dot = fmaf(fp_to_f32(d_o[c]), fp_to_f32(o[c]), dot);
            const float lse = a.lse[row];
            a.delta[row] = dot;
            a.lse_log2[row] = lse == -INFINITY ? INFINITY : lse * FP_LOG2E;
        }
        if (a.dq_acc)
            for (int c = lane; c < a.d; c += 32) a.dq_acc[row * a.d + c] = 0.0f;
    }
}

/* Fast mode's last step, on the same grid. */
template <typename T> __global__ void fp_bwd_convert_dq_kernel(const fp_bwd_params a) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q;
    const fp_seq s = fp_sequence(a.seq, b);
    for (int i = blockIdx.x * FP_BWD_ROWS + warp;
         i < min(s.nq, (int)(blockIdx.x + 1) * FP_BWD_ROWS); i += FP_BWD_ROW_WARPS) {
        const float *acc = a.dq_acc + fp_lse_index(a.seq, s, h, i) * a.d;
        T *dq = static_cast<T *>(a.d_q) + fp_q_offset(a.qs, s, h, i);
        for (int c = lane; c < a.d; c += 32) dq[c] = fp_from_f32<T>(acc[c] * a.mods.scale);
    }
}

/* The same two steps for rows of D values in whole, 16-byte aligned chunks (EPC values: 8 of a
 * 16-bit T, the f16/bf16 tensor-core backward's rows; 4 of f32, the 3xTF32 backward's) and the
 * accumulator in fragment tiles, on the same grid: a block's 16 rows are one row block of tiles.
 * Preprocessing takes D / EPC lanes a row, so that a warp reads whole rows by 16-byte accesses,
 * 32 / (D / EPC) of them at once, where the kernels above move 2 or 4 bytes a lane per access;
 * it zeroes the block's tiles whole, padding rows included. D is summed in any order: the
 * tensor-core kernels' dP comes from products of their own order. A head dim d below D (a
 * multiple of 8, run on the next instance up) leaves the chunks past d out: their lanes add 0
 * and own no tiles. */
template <typename T, int D> struct fp_bwd_row_chunks {
    static constexpr int EPC = 16 / (int)sizeof(T);
    static_assert((sizeof(T) == 2 || sizeof(T) == 4) && D % 8 == 0 && 32 % (D / EPC) == 0,
                  "whole 16-byte chunks of 16- or 32-bit values, whole rows a warp");
    static_assert(FP_BWD_ROWS == FP_BWD_DQ_TILE_ROWS,
                  "a block's rows are one row block of accumulator tiles");
    static constexpr int CPR = D / EPC, AT_ONCE = 32 / CPR;
    static constexpr int CPT = FP_BWD_DQ_TILE_COLS / EPC; /* chunks a row of a tile: 1 or 2 */
};

template <typename T, int D>
__global__ void fp_bwd_preprocess_chunks_kernel(const fp_bwd_params a) {
    using R = fp_bwd_row_chunks<T, D>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunk = lane % R::CPR;
    const bool chunk_in = R::EPC * chunk < a.d;
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q;
    const fp_seq s = fp_sequence(a.seq, b);
    const int first = blockIdx.x * FP_BWD_ROWS;
    if (first >= s.nq) return;
    const int end = min(s.nq, first + FP_BWD_ROWS);
    /* Every row of the block (those past the sequence zero their share of the tiles); the bound
     * is the warp's, so that every lane reaches the row sum's shuffles. */
    for (int i0 = first + warp * R::AT_ONCE; i0 < first + FP_BWD_ROWS;
         i0 += FP_BWD_ROW_WARPS * R::AT_ONCE) {
        const int i = i0 + lane / R::CPR;
        float dot = 0.0f;
        if (i < end && chunk_in) {
            const int64_t at = fp_q_offset(a.os, s, h, i) + R::EPC * chunk;
            const uint4 o = *reinterpret_cast<const uint4 *>(static_cast<const T *>(a.o) + at);
            const uint4 d_o = *reinterpret_cast<const uint4 *>(static_cast<const T *>(a.d_o) + at);
            const T *oe = reinterpret_cast<const T *>(&o), *de = reinterpret_cast<const T *>(&d_o);
#pragma unroll
            for (int k = 0; k < R::EPC; ++k) dot = fmaf(fp_to_f32(de[k]), fp_to_f32(oe[k]), dot);
        }
        dot = fp_group_sum<R::CPR>(dot);
        if (a.dq_acc && chunk_in) {
            /* Row r's 8 floats of each tile: both float4 of tile `chunk` (16-bit rows), or
             * float4 chunk % 2 of tile chunk / 2 (f32 rows). */
            const int r = i - first;
            float4 *acc =
                reinterpret_cast<float4 *>(fp_bwd_dq_tile(a, s, h, blockIdx.x, chunk / R::CPT) +
                                           fp_bwd_dq_zero_share(r)) +
                chunk % R::CPT;
            if (R::CPT == 1)
                acc[0] = acc[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            else
                acc[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (i >= end || chunk != 0) continue;
        const int64_t row = fp_lse_index(a.seq, s, h, i);
        const float lse = a.lse[row];
        a.delta[row] = dot;
        a.lse_log2[row] = lse == -INFINITY ? INFINITY : lse * FP_LOG2E;
    }
}

/* Conversion: a thread a (row pair g, g + 8; 8 columns) of the block's row block, which lie
 * together as 64 bytes of one tile: four 16-byte loads, and 8 / EPC 16-byte stores a row. */
template <typename T, int D>
__global__ void fp_bwd_convert_dq_chunks_kernel(const fp_bwd_params a) {
    using R = fp_bwd_row_chunks<T, D>;
    constexpr int TILES = D / FP_BWD_DQ_TILE_COLS; /* tiles a row block */
    const int b = blockIdx.y / a.seq.heads_q, h = blockIdx.y % a.seq.heads_q;
    const fp_seq s = fp_sequence(a.seq, b);
    const int first = blockIdx.x * FP_BWD_ROWS;
    if (first >= s.nq) return;
    for (int u = threadIdx.x; u < 8 * TILES; u += blockDim.x) {
        const int col8 = u % TILES, g = u / TILES;
        if (8 * col8 >= a.d) continue; /* columns past a head dim below D */
        const float *tile = fp_bwd_dq_tile(a, s, h, blockIdx.x, col8);
        /* x[c]: columns 2c, 2c + 1 of row g, then of row g + 8 (contiguous in c). */
        float4 x[4];
#pragma unroll
        for (int c = 0; c < 4; ++c)
            x[c] = *reinterpret_cast<const float4 *>(tile + fp_bwd_dq_in_tile(g, 2 * c));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = first + g + 8 * i;
            if (row >= s.nq) break;
            uint4 out[R::CPT];
            T *oe = reinterpret_cast<T *>(out);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                oe[2 * c] = fp_from_f32<T>((i ? x[c].z : x[c].x) * a.mods.scale);
                oe[2 * c + 1] = fp_from_f32<T>((i ? x[c].w : x[c].y) * a.mods.scale);
            }
            uint4 *const to = reinterpret_cast<uint4 *>(static_cast<T *>(a.d_q) +
                                                        fp_q_offset(a.qs, s, h, row) + 8 * col8);
#pragma unroll
            for (int k = 0; k < R::CPT; ++k) to[k] = out[k];
        }
    }
}

/* Enqueues one of the four per-row kernels above on their grid. Nothing for packed Q without
 * rows (seq_q = max_seqlen_q = 0): an empty grid is a launch error. */
template <auto KERNEL>
static gpuError_t fp_bwd_rows_launch(const fp_gpu_launch *L, const fp_bwd_params &a) {
    if (L->p.seq_q == 0) return gpuSuccess;
    const dim3 grid((unsigned)((L->p.seq_q + FP_BWD_ROWS - 1) / FP_BWD_ROWS),
                    (unsigned)(L->p.batch * L->p.heads_q));
    KERNEL FP_GPU_LAUNCH(grid, 32 * FP_BWD_ROW_WARPS, 0, L->stream)(a);
    return gpuGetLastError();
}

/* Enqueues KERNEL on grid with SMEM bytes of dynamic shared memory, raising its limit first;
 * an empty grid (no keys, or packed Q without rows) launches nothing. */
template <auto KERNEL, size_t SMEM>
static gpuError_t fp_bwd_launch(dim3 grid, int threads, gpuStream_t stream,
                                const fp_bwd_params &a) {
    if (grid.x == 0) return gpuSuccess;
    const gpuError_t e = fp_raise_smem_limit<KERNEL, SMEM>();
    if (e != gpuSuccess) return e;
    KERNEL FP_GPU_LAUNCH(grid, threads, SMEM, stream)(a);
    return gpuGetLastError();
}

#endif /* FP_BACKWARD_WORKSPACE_CUH */
