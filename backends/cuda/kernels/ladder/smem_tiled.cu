/*
 * Ladder step 2: the baseline's arithmetic, unchanged, with its operands staged in shared
 * memory. A block of 32 query rows x 32 output columns loads each 32 x 32 chunk of Q and K once,
 * with coalesced reads (consecutive threads, consecutive elements), and every thread takes its
 * dot product from shared memory; the V tile is staged the same way. Reductions are still the
 * baseline's shared-memory trees. What this step buys is memory traffic alone.
 */
#include "../../kernel_list.h"
#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "block_reduce.cuh"
#include "tile_load.cuh"

#define SMEM_TILE 32 /* query rows, keys per tile, output columns, and the d chunk */
#define SMEM_STRIDE (SMEM_TILE + 1) /* a padded row: column reads hit 32 different banks */

template <typename T>
__global__ void __launch_bounds__(SMEM_TILE * SMEM_TILE) kernel_smem_tiled(fp_attn_args a) {
    __shared__ float q_s[SMEM_TILE][SMEM_STRIDE];
    __shared__ float k_s[SMEM_TILE][SMEM_STRIDE];
    __shared__ float v_s[SMEM_TILE][SMEM_STRIDE];
    __shared__ float p_s[SMEM_TILE][SMEM_STRIDE];
    __shared__ float reduce_s[SMEM_TILE][SMEM_STRIDE];
    constexpr int THREADS = SMEM_TILE * SMEM_TILE;

    const int c = threadIdx.x, r = threadIdx.y, tid = r * SMEM_TILE + c;
    const int row0 = blockIdx.x * SMEM_TILE, col0 = blockIdx.y * SMEM_TILE;
    const int row = row0 + r, col = col0 + c;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);

    const int key_end = fp_block_key_end(a, row0, SMEM_TILE);
    const int row_keys = row < a.nq ? fp_visible_keys(a, row) : 0;
    const T *q_block = H.q + (int64_t)row0 * a.qs.seq;

    fp_softmax_row st = fp_softmax_start();
    float acc = 0.0f;
    for (int k0 = 0; k0 < key_end; k0 += SMEM_TILE) {
        const T *k_tile = H.k + (int64_t)k0 * a.ks.seq;
        float dot = 0.0f;
        for (int d0 = 0; d0 < a.d; d0 += SMEM_TILE) {
            fp_stage_tile<T, SMEM_TILE, SMEM_TILE, THREADS>(&q_s[0][0], SMEM_STRIDE, q_block + d0,
                                                            a.qs.seq, a.nq - row0, a.d - d0, tid);
            fp_stage_tile<T, SMEM_TILE, SMEM_TILE, THREADS>(&k_s[0][0], SMEM_STRIDE, k_tile + d0,
                                                            a.ks.seq, key_end - k0, a.d - d0, tid);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < SMEM_TILE; i++) dot = fmaf(q_s[r][i], k_s[c][i], dot);
            __syncthreads(); /* the next chunk overwrites q_s and k_s */
        }
        const float s = k0 + c < row_keys ? dot * a.scale_log2 : -INFINITY;
        const float tile_max = fp_block_row_reduce<SMEM_TILE, FP_REDUCE_MAX>(reduce_s, r, c, s);
        const float alpha = fp_softmax_advance(st, tile_max);
        const float p = exp2f(s - fp_softmax_base(st));
        p_s[r][c] = p;
        fp_softmax_add(st, fp_block_row_reduce<SMEM_TILE, FP_REDUCE_SUM>(reduce_s, r, c, p));

        fp_stage_tile<T, SMEM_TILE, SMEM_TILE, THREADS>(&v_s[0][0], SMEM_STRIDE,
                                                        H.v + (int64_t)k0 * a.vs.seq + col0,
                                                        a.vs.seq, key_end - k0, a.d - col0, tid);
        __syncthreads();
        acc *= alpha;
        /* Only the row's visible keys: a masked key's V may hold NaN, and 0 * NaN is NaN. */
        const int n = min(SMEM_TILE, row_keys - k0);
        for (int j = 0; j < n; j++) acc = fmaf(p_s[r][j], v_s[j][c], acc);
        __syncthreads(); /* v_s and p_s are rewritten by the next tile */
    }

    if (row < a.nq && col < a.d)
        H.o[(int64_t)row * a.os.seq + col] = fp_from_f32<T>(acc * fp_softmax_inv_sum(st));
    if (H.lse && row < a.nq && blockIdx.y == 0 && c == 0) H.lse[row] = fp_softmax_lse(st);
}

static int smem_tiled_supports(const fp_problem *p, const fp_gpu_device_props *props,
                               fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)props;
    (void)params;
    return fp_attn_grid_fits(p, SMEM_TILE, why, why_len);
}

static gpuError_t smem_tiled_launch(const fp_gpu_launch *L) {
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((a.nq + SMEM_TILE - 1) / SMEM_TILE, (a.d + SMEM_TILE - 1) / SMEM_TILE,
                    (unsigned)(L->p.batch * L->p.heads_q));
    const dim3 block(SMEM_TILE, SMEM_TILE);
    FP_DISPATCH_DTYPE(L->p.dtype, T,
                      kernel_smem_tiled<T> FP_GPU_LAUNCH(grid, block, 0, L->stream)(a));
    return gpuGetLastError();
}

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_smem_tiled = {
    {"smem_tiled",
     "ladder 2: Q, K and V tiles staged in shared memory with coalesced loads",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    smem_tiled_supports,
    NULL,
    smem_tiled_launch,
};
