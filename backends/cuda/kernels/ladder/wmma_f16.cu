/*
 * Ladder step 8: the two products on tensor cores through WMMA, 16x16x16 tiles with 16-bit
 * operands and float32 accumulation. f32 and f16 problems use f16 operands (f32 inputs are
 * rounded to f16 on load, hence this variant's F16 precision class); bf16 problems use bf16.
 *
 * A block is 4 warps, 64 query rows (16 per warp) x 128 output columns, over key tiles of 64.
 * Per tile each warp accumulates its 16 x 64 scores in four f32 fragments over 64-wide chunks
 * of d staged in shared memory, stores them, and runs the online softmax on them in f32 (two
 * lanes per row; masked and padding keys are -inf, out of the max and the sum), writing P as
 * 16-bit operands. Its eight output fragments are rescaled by each row's alpha and P.V is
 * accumulated into them. WMMA does not say which row and column a fragment element holds, so
 * each warp learns it once by loading fragments of matrices that hold their own row and column
 * indices; the rescaling, the masked products and the epilogue use that map.
 *
 * A masked key's P is 0, but its V may be NaN and a tensor-core 0 * NaN is NaN, so the 16-key
 * steps that some rows of a warp may not see (the causal diagonal) are done with scalar FMAs
 * that skip those keys; steps no row sees are skipped.
 *
 * Shared memory: Q and K chunks (18 KiB, reused for the V tile after a barrier), the warps'
 * scores (17 KiB) and P (9 KiB).
 */
#include <mma.h>

#include "../../kernel_list.h"
#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "../common/online_softmax.cuh"
#include "../common/warp_reduce.cuh"
#include "vector_tiles.cuh"

/* Named, not anonymous: the emulated tests compile several kernel files as one unit. */
namespace fp_wmma_f16 {

using namespace nvcuda;

constexpr int M = 16; /* WMMA tile: M x M x M */
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int BQ = WARPS * M;          /* 64 query rows, 16 per warp */
constexpr int BK = 64;                 /* keys per tile */
constexpr int DC = 64;                 /* d chunk of the scores */
constexpr int BW = 128;                /* output columns per block */
constexpr int S_FRAGS = BK / M;        /* 4 score fragments per warp */
constexpr int O_FRAGS = BW / M;        /* 8 output fragments per warp */
constexpr int QK_LD = DC + 8;          /* 16-bit elements per staged Q/K row */
constexpr int V_LD = BW + 8;           /* 16-bit elements per staged V row */
constexpr int S_LD = BK + 4;           /* floats per score row */
constexpr int P_LD = BK + 8;           /* 16-bit elements per P row */

/* nvcuda::wmma is CUDA's; a HIP build leaves this file out (rocWMMA would be its own variant). */
static_assert(FP_WARP_SIZE == 32, "WMMA fragments are warp-wide on 32-lane warps");

/* 16-bit operand type of each storage type. */
template <typename T> struct operand { typedef gpuHalf type; };
template <> struct operand<gpuBFloat16> { typedef gpuBFloat16 type; };

typedef wmma::fragment<wmma::accumulator, M, M, M, float> acc_frag;

/* Bytes of each shared region; every offset stays a multiple of 32 as WMMA requires. */
constexpr int Q_BYTES = BQ * QK_LD * 2;
constexpr int K_BYTES = BK * QK_LD * 2;
constexpr int V_BYTES = BK * V_LD * 2;
constexpr int QKV_BYTES = Q_BYTES + K_BYTES > V_BYTES ? Q_BYTES + K_BYTES : V_BYTES;
constexpr int S_BYTES = WARPS * M * S_LD * 4;
constexpr int P_BYTES = WARPS * M * P_LD * 2;
constexpr int ROW_BYTES = WARPS * M * 4;
static_assert(Q_BYTES % 32 == 0 && QKV_BYTES % 32 == 0 && S_BYTES % 32 == 0 &&
                  P_BYTES % 32 == 0, "WMMA pointers must be 32-byte aligned");

/* Stages rows x cols elements (cols a multiple of 4) of a row-major tensor as 16-bit operands,
 * zero outside [0, rows_valid) x [0, d); reads nothing there. */
template <typename T, typename OP, int ROWS, int COLS>
__device__ __forceinline__ void stage(OP *dst, int ld, const T *src, int64_t src_ld,
                                      int rows_valid, int col0, int d, bool vec) {
    constexpr int SLOTS = ROWS * COLS / 4;
#pragma unroll 4
    for (int slot = threadIdx.x; slot < SLOTS; slot += THREADS) {
        const int r = slot / (COLS / 4), c = (slot % (COLS / 4)) * 4;
        const bool ok = r < rows_valid;
        const float4 f = fp_vt::load4_guarded(ok ? src + r * src_ld : src, ok, col0 + c, d, vec);
        OP *p = dst + r * ld + c;
        p[0] = fp_from_f32<OP>(f.x);
        p[1] = fp_from_f32<OP>(f.y);
        p[2] = fp_from_f32<OP>(f.z);
        p[3] = fp_from_f32<OP>(f.w);
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS) kernel_wmma_f16(fp_attn_args a, bool vec_q, bool vec_k,
                                                           bool vec_v) {
    typedef typename operand<T>::type OP;
    __shared__ __align__(128) unsigned char smem[QKV_BYTES + S_BYTES + P_BYTES + ROW_BYTES];
    OP *const q_s = reinterpret_cast<OP *>(smem);
    OP *const k_s = reinterpret_cast<OP *>(smem + Q_BYTES);
    OP *const v_s = reinterpret_cast<OP *>(smem); /* takes the Q/K space's turn, see barriers */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *const s_w = reinterpret_cast<float *>(smem + QKV_BYTES) + warp * M * S_LD;
    OP *const p_w = reinterpret_cast<OP *>(smem + QKV_BYTES + S_BYTES) + warp * M * P_LD;
    float *const row_w = reinterpret_cast<float *>(smem + QKV_BYTES + S_BYTES + P_BYTES) + warp * M;

    const int row0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest causal rows first */
    const int col0 = blockIdx.y * BW;
    const int wrow0 = row0 + warp * M;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    const int key_end = fp_block_key_end(a, row0, BQ);
    const int seen_by_all = fp_visible_keys(a, wrow0);   /* the warp's first row sees fewest */
    const int seen_by_any = fp_visible_keys(a, wrow0 + M - 1);

    /* Which row and column of a 16 x 16 accumulator each of this lane's elements is. */
    acc_frag row_of, col_of;
    for (int i = lane; i < M * M; i += 32) s_w[(i / M) * S_LD + i % M] = (float)(i / M);
    __syncwarp();
    wmma::load_matrix_sync(row_of, s_w, S_LD, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < M * M; i += 32) s_w[(i / M) * S_LD + i % M] = (float)(i % M);
    __syncwarp();
    wmma::load_matrix_sync(col_of, s_w, S_LD, wmma::mem_row_major);

    /* Two lanes per row: lane 2r+h takes keys h, h+2, ... of row r. */
    const int my_row = lane / 2, half = lane % 2;
    const int my_keys = fp_visible_keys(a, wrow0 + my_row);
    fp_softmax_row st = fp_softmax_start();

    acc_frag o[O_FRAGS];
#pragma unroll
    for (int n = 0; n < O_FRAGS; ++n) wmma::fill_fragment(o[n], 0.0f);

    for (int key0 = 0; key0 < key_end; key0 += BK) {
        acc_frag s[S_FRAGS];
#pragma unroll
        for (int n = 0; n < S_FRAGS; ++n) wmma::fill_fragment(s[n], 0.0f);
        for (int d0 = 0; d0 < a.d; d0 += DC) {
            __syncthreads(); /* the previous chunk, or the previous tile's V, has been read */
            stage<T, OP, BQ, DC>(q_s, QK_LD, H.q + row0 * a.qs.seq, a.qs.seq, a.nq - row0, d0,
                                 a.d, vec_q);
            stage<T, OP, BK, DC>(k_s, QK_LD, H.k + key0 * a.ks.seq, a.ks.seq, key_end - key0, d0,
                                 a.d, vec_k);
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < DC; kk += M) {
                wmma::fragment<wmma::matrix_a, M, M, M, OP, wmma::row_major> qf;
                wmma::load_matrix_sync(qf, q_s + warp * M * QK_LD + kk, QK_LD);
#pragma unroll
                for (int n = 0; n < S_FRAGS; ++n) {
                    wmma::fragment<wmma::matrix_b, M, M, M, OP, wmma::col_major> kf;
                    wmma::load_matrix_sync(kf, k_s + n * M * QK_LD + kk, QK_LD);
                    wmma::mma_sync(s[n], qf, kf, s[n]);
                }
            }
        }
#pragma unroll
        for (int n = 0; n < S_FRAGS; ++n)
            wmma::store_matrix_sync(s_w + n * M, s[n], S_LD, wmma::mem_row_major);
        __syncwarp();

        /* Online softmax of the warp's rows, in f32. */
        const float *srow = s_w + my_row * S_LD;
        float tile_max = -INFINITY;
        for (int j = half; j < BK; j += 2)
            if (key0 + j < my_keys) tile_max = fmaxf(tile_max, srow[j] * a.scale_log2);
        const float alpha = fp_softmax_advance(st, fp_group_max<2>(tile_max));
        const float base = fp_softmax_base(st);
        float sum = 0.0f;
        for (int j = half; j < BK; j += 2) {
            const float p = key0 + j < my_keys ? exp2f(srow[j] * a.scale_log2 - base) : 0.0f;
            p_w[my_row * P_LD + j] = fp_from_f32<OP>(p);
            sum += p; /* unrounded, so that the LSE keeps f32 accuracy */
        }
        fp_softmax_add(st, fp_group_sum<2>(sum));
        if (half == 0) row_w[my_row] = alpha;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < O_FRAGS; ++n)
#pragma unroll
            for (int e = 0; e < o[n].num_elements; ++e) o[n].x[e] *= row_w[(int)row_of.x[e]];

        __syncthreads(); /* every warp is done with the Q/K chunk that V overwrites */
        stage<T, OP, BK, BW>(v_s, V_LD, H.v + key0 * a.vs.seq, a.vs.seq, key_end - key0, col0,
                             a.d, vec_v);
        __syncthreads();

        for (int kk = 0; kk < BK; kk += M) {
            const int kb = key0 + kk;
            if (kb >= seen_by_any) break; /* no row of the warp sees these keys or later ones */
            if (min(kb + M, a.nkv) <= seen_by_all) {
                wmma::fragment<wmma::matrix_a, M, M, M, OP, wmma::row_major> pf;
                wmma::load_matrix_sync(pf, p_w + kk, P_LD);
#pragma unroll
                for (int n = 0; n < O_FRAGS; ++n) {
                    wmma::fragment<wmma::matrix_b, M, M, M, OP, wmma::row_major> vf;
                    wmma::load_matrix_sync(vf, v_s + kk * V_LD + n * M, V_LD);
                    wmma::mma_sync(o[n], pf, vf, o[n]);
                }
            } else {
                /* The diagonal: each element adds only the keys its row sees. */
#pragma unroll
                for (int n = 0; n < O_FRAGS; ++n)
#pragma unroll
                    for (int e = 0; e < o[n].num_elements; ++e) {
                        const int r = (int)row_of.x[e], c = n * M + (int)col_of.x[e];
                        const int n_keys = min(fp_visible_keys(a, wrow0 + r) - kb, M);
                        float acc = o[n].x[e];
                        for (int k = 0; k < n_keys; ++k)
                            acc = fmaf(fp_to_f32(p_w[r * P_LD + kk + k]),
                                       fp_to_f32(v_s[(kk + k) * V_LD + c]), acc);
                        o[n].x[e] = acc;
                    }
            }
        }
    }

    /* Normalise and write the lane's elements of O; the row's first lane writes its LSE. */
    __syncwarp();
    if (half == 0) row_w[my_row] = fp_softmax_inv_sum(st);
    __syncwarp();
#pragma unroll
    for (int n = 0; n < O_FRAGS; ++n)
#pragma unroll
        for (int e = 0; e < o[n].num_elements; ++e) {
            const int r = (int)row_of.x[e], c = col0 + n * M + (int)col_of.x[e];
            if (wrow0 + r < a.nq && c < a.d)
                H.o[(wrow0 + r) * a.os.seq + c] = fp_from_f32<T>(o[n].x[e] * row_w[r]);
        }
    if (H.lse && blockIdx.y == 0 && half == 0 && wrow0 + my_row < a.nq)
        H.lse[wrow0 + my_row] = fp_softmax_lse(st);
}

int wmma_f16_supports(const fp_problem *p, const fp_gpu_device_props *props,
                      fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)params;
    if (props->cc_major < 8) {
        snprintf(why, why_len, "WMMA with bf16 and f16 operands needs compute capability 8.0+ "
                               "(device is %d.%d)", props->cc_major, props->cc_minor);
        return 0;
    }
    return fp_attn_grid_fits(p, BW, why, why_len);
}

template <typename T> gpuError_t wmma_f16_run(const fp_gpu_launch *L) {
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((unsigned)((a.nq + BQ - 1) / BQ), (unsigned)((a.d + BW - 1) / BW),
                    (unsigned)(L->p.batch * L->p.heads_q));
    const bool vec = a.d % 4 == 0;
    kernel_wmma_f16<T> FP_GPU_LAUNCH(grid, THREADS, 0, L->stream)(
        a, vec && fp_vt::tensor_vec4(L->q, L->p.q, sizeof(T)),
        vec && fp_vt::tensor_vec4(L->k, L->p.k, sizeof(T)),
        vec && fp_vt::tensor_vec4(L->v, L->p.v, sizeof(T)));
    return gpuGetLastError();
}

gpuError_t wmma_f16_launch(const fp_gpu_launch *L) {
    gpuError_t err = gpuSuccess;
    FP_DISPATCH_DTYPE(L->p.dtype, T, err = wmma_f16_run<T>(L));
    return err;
}

} /* namespace fp_wmma_f16 */

const fp_gpu_kernel fp_kernel_wmma_f16 = {
    {"wmma_f16",
     "ladder 8: WMMA tensor cores 16x16x16, f16 operands (bf16 for bf16), f32 scores and "
     "accumulators",
     FP_PRECISION_F16, FP_FEATURES_NONE},
    fp_wmma_f16::wmma_f16_supports,
    NULL,
    fp_wmma_f16::wmma_f16_launch,
};
