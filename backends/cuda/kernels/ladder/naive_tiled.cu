/*
 * Ladder step 1, the baseline: one thread per output element O[row, col], a block of 32 query
 * rows x 32 output columns, key tiles of 32. Nothing is staged on chip: each thread computes its
 * row's score against one key of the tile with a full dot product read straight from global
 * memory, the block reduces the tile's per-row maximum and sum through shared memory, and each
 * thread folds the tile into its one output element. Every block of output columns recomputes
 * the whole of Q K^T, which is what the later steps of the ladder remove, piece by piece.
 */
#include "../../kernel_list.h"
#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "block_reduce.cuh"

#define NAIVE_TILE 32 /* query rows, keys per tile, and output columns of one block */

template <typename T>
__global__ void __launch_bounds__(NAIVE_TILE * NAIVE_TILE) kernel_naive_tiled(fp_attn_args a) {
    __shared__ float p_s[NAIVE_TILE][NAIVE_TILE + 1];
    __shared__ float reduce_s[NAIVE_TILE][NAIVE_TILE + 1];

    /* Each warp covers 4 rows x 8 keys (or columns) rather than 1 x 32, so a warp's loads touch
     * 4 + 8 cache lines instead of 1 + 32. */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = lane % 8 + 8 * (warp % 4);
    const int r = lane / 8 + 4 * (warp / 4);
    const int row0 = blockIdx.x * NAIVE_TILE;
    const int row = row0 + r, col = blockIdx.y * NAIVE_TILE + c;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);

    const int key_end = fp_block_key_end(a, row0, NAIVE_TILE);
    const int row_keys = row < a.nq ? fp_visible_keys(a, row) : 0;
    const T *q_row = H.q + (int64_t)row * a.qs.seq;

    fp_softmax_row st = fp_softmax_start();
    float acc = 0.0f;
    for (int k0 = 0; k0 < key_end; k0 += NAIVE_TILE) {
        const int key = k0 + c;
        float s = -INFINITY; /* masked and padding keys stay out of the max and the sum */
        if (key < row_keys) {
            const T *k_row = H.k + (int64_t)key * a.ks.seq;
            float dot = 0.0f;
            for (int i = 0; i < a.d; i++) dot = fmaf(fp_to_f32(q_row[i]), fp_to_f32(k_row[i]), dot);
            s = dot * a.scale_log2;
        }
        const float tile_max = fp_block_row_reduce<NAIVE_TILE, FP_REDUCE_MAX>(reduce_s, r, c, s);
        const float alpha = fp_softmax_advance(st, tile_max);
        const float p = exp2f(s - fp_softmax_base(st));
        p_s[r][c] = p;
        fp_softmax_add(st, fp_block_row_reduce<NAIVE_TILE, FP_REDUCE_SUM>(reduce_s, r, c, p));

        acc *= alpha;
        if (col < a.d) {
            const int n = min(NAIVE_TILE, row_keys - k0);
            for (int j = 0; j < n; j++)
                acc = fmaf(p_s[r][j], fp_to_f32(H.v[(int64_t)(k0 + j) * a.vs.seq + col]), acc);
        }
        __syncthreads(); /* p_s is rewritten by the next tile */
    }

    if (row < a.nq && col < a.d)
        H.o[(int64_t)row * a.os.seq + col] = fp_from_f32<T>(acc * fp_softmax_inv_sum(st));
    if (H.lse && row < a.nq && blockIdx.y == 0 && c == 0) H.lse[row] = fp_softmax_lse(st);
}

static int naive_tiled_supports(const fp_problem *p, const fp_gpu_device_props *props,
                                fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)props;
    (void)params;
    return fp_attn_grid_fits(p, NAIVE_TILE, why, why_len);
}

static gpuError_t naive_tiled_launch(const fp_gpu_launch *L) {
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((a.nq + NAIVE_TILE - 1) / NAIVE_TILE, (a.d + NAIVE_TILE - 1) / NAIVE_TILE,
                    (unsigned)(L->p.batch * L->p.heads_q));
    FP_DISPATCH_DTYPE(L->p.dtype, T,
                      kernel_naive_tiled<T> FP_GPU_LAUNCH(grid, NAIVE_TILE * NAIVE_TILE, 0,
                                                          L->stream)(a));
    return gpuGetLastError();
}

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_naive_tiled = {
    {"naive_tiled",
     "ladder 1: one thread per output element, unstaged global reads, shared-memory reductions",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    naive_tiled_supports,
    NULL,
    naive_tiled_launch,
};
