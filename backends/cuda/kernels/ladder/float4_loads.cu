/*
 * Ladder step 5: step 4's block (4 row groups of 32 lanes, 4 query rows x 2 keys of scores and
 * 4 x 4 outputs per thread, 16 rows x 64 keys x 128 output columns per block, K and V taking
 * turns in one buffer) with every global and shared access four elements wide. Q, K and V reach
 * shared memory as float4 (one 16-byte load per thread where step 4 made four), the scores read
 * Q and K as float4 along d, P.V reads P as float4 along the keys and V as float4 along the
 * columns, so a lane's four output columns become consecutive (lane*4 ...) instead of strided.
 * The tiles stay row-major as in step 4: K rows are padded to 36 floats so the 16-byte reads of
 * eight lanes (one shared-memory phase) land in eight different bank groups.
 *
 * Needs d and every stride to be multiples of 4 (supports() says so otherwise). The tensors'
 * addresses, which supports() cannot see, should be aligned to four elements; a misaligned one
 * is still computed correctly, with scalar accesses.
 *
 * Shared memory: Q chunk 2 KiB, the K/V buffer 32 KiB, P 4 KiB.
 */
#include "../../kernel_list.h"
#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "../common/online_softmax.cuh"
#include "../common/warp_reduce.cuh"
#include "vector_tiles.cuh"

/* Named, not anonymous: the emulated tests compile several kernel files as one unit. */
namespace fp_float4_loads {

constexpr int LANES = 32; /* lanes of a row group; two groups share a 64-wide wavefront */
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * LANES;
constexpr int RQ = 4;              /* query rows per group */
constexpr int RC = 2;              /* keys per lane per tile: lane, lane + 32 */
constexpr int BR = WARPS * RQ;     /* 16 query rows per block */
constexpr int BC = LANES * RC;     /* 64 keys per tile */
constexpr int BW = LANES * 4;      /* 128 output columns per block, 4 consecutive per lane */
constexpr int DK = 32;             /* d chunk of the scores */
constexpr int K_STRIDE = DK + 4;   /* padded K row: eight lanes' float4 hit eight bank groups */
constexpr int K_FLOATS = BC * K_STRIDE;
constexpr int V_FLOATS = BC * BW;
constexpr int KV_FLOATS = K_FLOATS > V_FLOATS ? K_FLOATS : V_FLOATS;

static_assert(THREADS == BR * DK / 4, "one float4 of the Q chunk per thread");
static_assert(LANES <= FP_WARP_SIZE && FP_WARP_SIZE % LANES == 0, "a row group sits in a warp");

/* acc[i][c] += P[row i][keys] . V[keys][lane*4 + c]; MASKED skips the keys a row may not see
 * (their P is 0 but their V may be NaN, and 0 * NaN is NaN). */
template <bool MASKED>
__device__ __forceinline__ void accumulate_pv(float (&acc)[RQ][4], const float *p_rows,
                                              const float *v_s, int lane, int k0,
                                              const int (&row_keys)[RQ]) {
#pragma unroll 2
    for (int j4 = 0; j4 < BC; j4 += 4) {
        float4 v[4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
            v[jj] = *reinterpret_cast<const float4 *>(&v_s[(j4 + jj) * BW + lane * 4]);
#pragma unroll
        for (int i = 0; i < RQ; ++i) {
            const float4 p4 = *reinterpret_cast<const float4 *>(&p_rows[i * BC + j4]);
            const float p[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                if (MASKED && k0 + j4 + jj >= row_keys[i]) continue;
                acc[i][0] = fmaf(p[jj], v[jj].x, acc[i][0]);
                acc[i][1] = fmaf(p[jj], v[jj].y, acc[i][1]);
                acc[i][2] = fmaf(p[jj], v[jj].z, acc[i][2]);
                acc[i][3] = fmaf(p[jj], v[jj].w, acc[i][3]);
            }
        }
    }
}

/* vec: every tensor is aligned for four-element access (checked at launch). */
template <typename T>
__global__ void __launch_bounds__(THREADS) kernel_float4_loads(fp_attn_args a, bool vec) {
    __shared__ __align__(16) float q_s[BR * DK];
    __shared__ __align__(16) float kv_s[KV_FLOATS];
    __shared__ __align__(16) float p_s[BR * BC];
    float *const k_s = kv_s, *const v_s = kv_s;

    const int tid = threadIdx.x, lane = tid % LANES, group = tid / LANES;
    const int row0 = (gridDim.x - 1 - blockIdx.x) * BR; /* longest causal rows first */
    const int col0 = blockIdx.y * BW;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    float *const p_rows = p_s + group * RQ * BC;

    const int key_end = fp_block_key_end(a, row0, BR);
    const int keys_seen_by_all = fp_visible_keys(a, row0); /* the first row sees the fewest */
    int row_keys[RQ];
    fp_softmax_row st[RQ];
    float acc[RQ][4];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        row_keys[i] = fp_visible_keys(a, row0 + group * RQ + i);
        st[i] = fp_softmax_start();
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][c] = 0.0f;
    }

    for (int k0 = 0; k0 < key_end; k0 += BC) {
        float s[RQ][RC];
#pragma unroll
        for (int i = 0; i < RQ; ++i)
#pragma unroll
            for (int j = 0; j < RC; ++j) s[i][j] = 0.0f;

        for (int d0 = 0; d0 < a.d; d0 += DK) {
            { /* Q chunk: one float4 per thread, eight per row */
                const int row = row0 + tid / (DK / 4), col = d0 + (tid % (DK / 4)) * 4;
                const bool ok = row < a.nq;
                *reinterpret_cast<float4 *>(&q_s[tid * 4]) =
                    fp_vt::load4_guarded(ok ? H.q + row * a.qs.seq : H.q, ok, col, a.d, vec);
            }
#pragma unroll
            for (int n = 0; n < BC * DK / 4 / THREADS; ++n) {
                const int slot = tid + n * THREADS, r = slot / (DK / 4), c4 = slot % (DK / 4);
                const int key = k0 + r;
                const bool ok = key < key_end;
                *reinterpret_cast<float4 *>(&k_s[r * K_STRIDE + c4 * 4]) = fp_vt::load4_guarded(
                    ok ? H.k + key * a.ks.seq : H.k, ok, d0 + c4 * 4, a.d, vec);
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < DK; kk += 4) {
                float4 q[RQ], k[RC];
#pragma unroll
                for (int i = 0; i < RQ; ++i)
                    q[i] = *reinterpret_cast<const float4 *>(&q_s[(group * RQ + i) * DK + kk]);
#pragma unroll
                for (int j = 0; j < RC; ++j)
                    k[j] = *reinterpret_cast<const float4 *>(
                        &k_s[(lane + LANES * j) * K_STRIDE + kk]);
#pragma unroll
                for (int i = 0; i < RQ; ++i)
#pragma unroll
                    for (int j = 0; j < RC; ++j) {
                        s[i][j] = fmaf(q[i].x, k[j].x, s[i][j]);
                        s[i][j] = fmaf(q[i].y, k[j].y, s[i][j]);
                        s[i][j] = fmaf(q[i].z, k[j].z, s[i][j]);
                        s[i][j] = fmaf(q[i].w, k[j].w, s[i][j]);
                    }
            }
            /* q_s and k_s are rewritten by the next chunk; after the last chunk this barrier
             * also lets V overwrite the buffer K shares with it. */
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < RQ; ++i) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < RC; ++j) {
                const int key = k0 + lane + LANES * j;
                s[i][j] = key < row_keys[i] ? s[i][j] * a.scale_log2 : -INFINITY;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            const float alpha = fp_softmax_advance(st[i], fp_group_max<LANES>(tile_max));
            const float base = fp_softmax_base(st[i]);
            float tile_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < RC; ++j) {
                const float p = exp2f(s[i][j] - base);
                tile_sum += p;
                p_rows[i * BC + lane + LANES * j] = p;
            }
            fp_softmax_add(st[i], fp_group_sum<LANES>(tile_sum));
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][c] *= alpha;
        }

#pragma unroll 4
        for (int n = 0; n < BC * BW / 4 / THREADS; ++n) {
            const int slot = tid + n * THREADS, r = slot / (BW / 4), c4 = slot % (BW / 4);
            const int key = k0 + r;
            const bool ok = key < key_end;
            *reinterpret_cast<float4 *>(&v_s[r * BW + c4 * 4]) = fp_vt::load4_guarded(
                ok ? H.v + key * a.vs.seq : H.v, ok, col0 + c4 * 4, a.d, vec);
        }
        __syncthreads(); /* publishes v_s and p_s */
        if (k0 + BC <= keys_seen_by_all)
            accumulate_pv<false>(acc, p_rows, v_s, lane, k0, row_keys);
        else
            accumulate_pv<true>(acc, p_rows, v_s, lane, k0, row_keys);
        __syncthreads(); /* the next tile rewrites p_s and the K/V buffer */
    }

    const int col = col0 + lane * 4;
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        const int row = row0 + group * RQ + i;
        if (row >= a.nq) continue;
        const float inv = fp_softmax_inv_sum(st[i]);
        if (col < a.d) {
            T *o = H.o + row * a.os.seq + col;
            if (vec) {
                fp_vt::store4(o, make_float4(acc[i][0] * inv, acc[i][1] * inv, acc[i][2] * inv,
                                             acc[i][3] * inv));
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) o[c] = fp_from_f32<T>(acc[i][c] * inv);
            }
        }
        if (H.lse && blockIdx.y == 0 && lane == 0) H.lse[row] = fp_softmax_lse(st[i]);
    }
}

bool strides_vec4(const flashport_strides &s) {
    return s.batch % 4 == 0 && s.head % 4 == 0 && s.seq % 4 == 0;
}

int float4_loads_supports(const fp_problem *p, const fp_gpu_device_props *props,
                          fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)props;
    (void)params;
    if (p->head_dim % 4 != 0) {
        snprintf(why, why_len, "float4 loads need head_dim a multiple of 4 (got %lld)",
                 (long long)p->head_dim);
        return 0;
    }
    if (!strides_vec4(p->q) || !strides_vec4(p->k) || !strides_vec4(p->v) || !strides_vec4(p->o)) {
        snprintf(why, why_len, "float4 loads need every stride of Q, K, V and O a multiple of 4");
        return 0;
    }
    return fp_attn_grid_fits(p, BW, why, why_len);
}

template <typename T> gpuError_t float4_loads_run(const fp_gpu_launch *L) {
    /* A buffer wrapped at an odd offset breaks the alignment supports() cannot see; it is
     * still computed, with four scalar accesses per float4. */
    const bool vec = fp_vt::tensor_vec4(L->q, L->p.q, sizeof(T)) &&
                     fp_vt::tensor_vec4(L->k, L->p.k, sizeof(T)) &&
                     fp_vt::tensor_vec4(L->v, L->p.v, sizeof(T)) &&
                     fp_vt::tensor_vec4(L->o, L->p.o, sizeof(T));
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((unsigned)((a.nq + BR - 1) / BR), (unsigned)((a.d + BW - 1) / BW),
                    (unsigned)(L->p.batch * L->p.heads_q));
    kernel_float4_loads<T> FP_GPU_LAUNCH(grid, THREADS, 0, L->stream)(a, vec);
    return gpuGetLastError();
}

gpuError_t float4_loads_launch(const fp_gpu_launch *L) {
    gpuError_t err = gpuSuccess;
    FP_DISPATCH_DTYPE(L->p.dtype, T, err = float4_loads_run<T>(L));
    return err;
}

} /* namespace fp_float4_loads */

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_float4_loads = {
    {"float4_loads",
     "ladder 5: step 4's tiles with float4 global and shared-memory access (d % 4 == 0)",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    fp_float4_loads::float4_loads_supports,
    NULL,
    fp_float4_loads::float4_loads_launch,
};
