/*
 * The register-tiled attention kernel of ladder steps 3 and 4, parameterised by its tile shape.
 *
 * A block is WARPS row groups of 32 lanes (on 64-wide wavefronts two groups share a wave; the
 * shuffles stay within 32 lanes). Group g owns query rows g*RQ .. g*RQ+RQ-1 of the block's
 * BR = WARPS*RQ rows. Per key tile of BC = 32*RC keys, lane t holds the scores of its rows
 * against keys t, t+32, ... in registers, so the online-softmax update happens in registers and
 * the tile's max and sum per row are 32-lane shuffle reductions. Lane t accumulates output
 * columns t, t+32, ... of a slice of BD = 32*RV columns of d (blockIdx.y picks the slice).
 *
 * SHARE_KV_BUFFER makes K chunks and the V tile take turns in one shared buffer, which cuts the
 * block's footprint and so raises occupancy. The turn-taking needs a barrier between the last
 * read of K and the first write of V; the kernel has one, and says where.
 */
#ifndef FP_KERNELS_REGISTER_TILE_CUH
#define FP_KERNELS_REGISTER_TILE_CUH

#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "../common/warp_reduce.cuh"
#include "tile_load.cuh"

#define FP_RT_LANES 32 /* lanes of a row group */
#define FP_RT_DK 32    /* d chunk of the Q K^T product */

template <int WARPS, int RQ, int RC, int RV, bool SHARE_KV_BUFFER> struct fp_register_tile {
    static constexpr int THREADS = WARPS * FP_RT_LANES;
    static constexpr int BR = WARPS * RQ;
    static constexpr int BC = FP_RT_LANES * RC;
    static constexpr int BD = FP_RT_LANES * RV;
    static constexpr int K_STRIDE = FP_RT_DK + 1; /* lanes read K by row: pad to spread banks */
    static constexpr int K_FLOATS = BC * K_STRIDE;
    static constexpr int V_FLOATS = BC * BD;
    static constexpr int KV_FLOATS =
        SHARE_KV_BUFFER ? (K_FLOATS > V_FLOATS ? K_FLOATS : V_FLOATS) : K_FLOATS + V_FLOATS;
    static constexpr size_t SMEM_BYTES = sizeof(float) * (BR * FP_RT_DK + BR * BC + KV_FLOATS);
};

/* acc[i][v] += p[row i][j] * V[j][col v] over the tile's keys. MASKED: some row of the block
 * cannot see some key of the tile; those products are skipped rather than weighted by 0,
 * because a masked key's V may hold NaN and 0 * NaN is NaN. */
template <int RQ, int RV, int BC, int BD, bool MASKED>
__device__ __forceinline__ void fp_rt_accumulate_pv(float (&acc)[RQ][RV], const float *p_rows,
                                                    const float *v_s, int lane, int k0,
                                                    const int (&row_keys)[RQ]) {
#pragma unroll 4
    for (int j = 0; j < BC; j++) {
        float v[RV];
#pragma unroll
        for (int c = 0; c < RV; c++) v[c] = v_s[j * BD + lane + FP_RT_LANES * c];
#pragma unroll
        for (int i = 0; i < RQ; i++) {
            const float p = p_rows[i * BC + j];
            const bool visible = !MASKED || k0 + j < row_keys[i];
#pragma unroll
            for (int c = 0; c < RV; c++) acc[i][c] = visible ? fmaf(p, v[c], acc[i][c]) : acc[i][c];
        }
    }
}

template <typename T, int WARPS, int RQ, int RC, int RV, bool SHARE_KV_BUFFER>
__global__ void __launch_bounds__(WARPS *FP_RT_LANES)
    fp_register_tile_attention(fp_attn_args a) {
    typedef fp_register_tile<WARPS, RQ, RC, RV, SHARE_KV_BUFFER> S;
    __shared__ float q_s[S::BR * FP_RT_DK];
    __shared__ float p_s[S::BR * S::BC];
    __shared__ float kv_s[S::KV_FLOATS];
    float *const k_s = kv_s;
    float *const v_s = SHARE_KV_BUFFER ? kv_s : kv_s + S::K_FLOATS;

    const int tid = threadIdx.x, lane = tid % FP_RT_LANES, group = tid / FP_RT_LANES;
    const int row0 = blockIdx.x * S::BR, col0 = blockIdx.y * S::BD;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    const T *q_block = H.q + (int64_t)row0 * a.qs.seq;
    float *const p_rows = p_s + group * RQ * S::BC;

    const int key_end = fp_block_key_end(a, row0, S::BR);
    const int keys_seen_by_all = fp_visible_keys(a, row0); /* the first row sees the fewest */
    int row_keys[RQ];
    fp_softmax_row st[RQ];
    float acc[RQ][RV];
#pragma unroll
    for (int i = 0; i < RQ; i++) {
        row_keys[i] = fp_visible_keys(a, row0 + group * RQ + i);
        st[i] = fp_softmax_start();
#pragma unroll
        for (int c = 0; c < RV; c++) acc[i][c] = 0.0f;
    }

    for (int k0 = 0; k0 < key_end; k0 += S::BC) {
        const T *k_tile = H.k + (int64_t)k0 * a.ks.seq;
        float s[RQ][RC];
#pragma unroll
        for (int i = 0; i < RQ; i++)
#pragma unroll
            for (int j = 0; j < RC; j++) s[i][j] = 0.0f;

        for (int d0 = 0; d0 < a.d; d0 += FP_RT_DK) {
            fp_stage_tile<T, S::BR, FP_RT_DK, S::THREADS>(q_s, FP_RT_DK, q_block + d0, a.qs.seq,
                                                         a.nq - row0, a.d - d0, tid);
            fp_stage_tile<T, S::BC, FP_RT_DK, S::THREADS>(k_s, S::K_STRIDE, k_tile + d0, a.ks.seq,
                                                         key_end - k0, a.d - d0, tid);
            __syncthreads();
#pragma unroll 8
            for (int kk = 0; kk < FP_RT_DK; kk++) {
                float q[RQ], k[RC];
#pragma unroll
                for (int i = 0; i < RQ; i++) q[i] = q_s[(group * RQ + i) * FP_RT_DK + kk];
#pragma unroll
                for (int j = 0; j < RC; j++)
                    k[j] = k_s[(lane + FP_RT_LANES * j) * S::K_STRIDE + kk];
#pragma unroll
                for (int i = 0; i < RQ; i++)
#pragma unroll
                    for (int j = 0; j < RC; j++) s[i][j] = fmaf(q[i], k[j], s[i][j]);
            }
            /* q_s and k_s are rewritten by the next chunk. After the last chunk this is also
             * the barrier that lets V overwrite the buffer K shares with it. */
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < RQ; i++) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < RC; j++) {
                const int key = k0 + lane + FP_RT_LANES * j;
                s[i][j] = key < row_keys[i] ? s[i][j] * a.scale_log2 : -INFINITY;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            const float alpha = fp_softmax_advance(st[i], fp_group_max<FP_RT_LANES>(tile_max));
            const float base = fp_softmax_base(st[i]);
            float tile_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < RC; j++) {
                const float p = exp2f(s[i][j] - base);
                tile_sum += p;
                p_rows[i * S::BC + lane + FP_RT_LANES * j] = p;
            }
            fp_softmax_add(st[i], fp_group_sum<FP_RT_LANES>(tile_sum));
#pragma unroll
            for (int c = 0; c < RV; c++) acc[i][c] *= alpha;
        }

        fp_stage_tile<T, S::BC, S::BD, S::THREADS>(v_s, S::BD, H.v + (int64_t)k0 * a.vs.seq + col0,
                                                   a.vs.seq, key_end - k0, a.d - col0, tid);
        __syncthreads();
        if (k0 + S::BC <= keys_seen_by_all)
            fp_rt_accumulate_pv<RQ, RV, S::BC, S::BD, false>(acc, p_rows, v_s, lane, k0, row_keys);
        else
            fp_rt_accumulate_pv<RQ, RV, S::BC, S::BD, true>(acc, p_rows, v_s, lane, k0, row_keys);
        __syncthreads(); /* the next tile rewrites p_s and the K/V buffer */
    }

#pragma unroll
    for (int i = 0; i < RQ; i++) {
        const int row = row0 + group * RQ + i;
        if (row >= a.nq) continue;
        const float inv = fp_softmax_inv_sum(st[i]);
#pragma unroll
        for (int c = 0; c < RV; c++) {
            const int col = col0 + lane + FP_RT_LANES * c;
            if (col < a.d) H.o[(int64_t)row * a.os.seq + col] = fp_from_f32<T>(acc[i][c] * inv);
        }
        if (H.lse && blockIdx.y == 0 && lane == 0) H.lse[row] = fp_softmax_lse(st[i]);
    }
}

/* Host, with the variant table's signatures so that a step's entry names them directly: the
 * shape runs any problem whose grid fits (it needs nothing else of the device), and the launch
 * picks the instantiation for the problem's dtype on the grid convention of attention_args.cuh. */
template <int WARPS, int RQ, int RC, int RV, bool SHARE_KV_BUFFER>
static int fp_register_tile_supports(const fp_problem *p, const fp_gpu_device_props *props,
                                     fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)props;
    (void)params;
    return fp_attn_grid_fits(p, fp_register_tile<WARPS, RQ, RC, RV, SHARE_KV_BUFFER>::BD, why,
                             why_len);
}

template <int WARPS, int RQ, int RC, int RV, bool SHARE_KV_BUFFER>
static gpuError_t fp_register_tile_launch(const fp_gpu_launch *L) {
    typedef fp_register_tile<WARPS, RQ, RC, RV, SHARE_KV_BUFFER> S;
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((a.nq + S::BR - 1) / S::BR, (a.d + S::BD - 1) / S::BD,
                    (unsigned)(L->p.batch * L->p.heads_q));
    FP_DISPATCH_DTYPE(L->p.dtype, T,
                      fp_register_tile_attention<T, WARPS, RQ, RC, RV, SHARE_KV_BUFFER>
                      FP_GPU_LAUNCH(grid, S::THREADS, 0, L->stream)(a));
    return gpuGetLastError();
}

#endif /* FP_KERNELS_REGISTER_TILE_CUH */
