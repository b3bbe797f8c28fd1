/*
 * FlashAttention-2 forward on the CUDA cores in exact float32 (no tf32), shared by the
 * fa2_f32 and fa2_f32_split_kv variants. f16 and bf16 inputs are converted on load; all
 * arithmetic is float32.
 *
 * One block of 256 threads owns BR query rows of one (batch, query head) and the whole head
 * dimension (padded to D, a multiple of 4; padding columns are zero and cost only FLOPs). It
 * walks the key tiles of its range, BC keys at a time, in three barrier-separated phases:
 *
 *   A  S = Q K^T on the unscaled inputs. Each thread computes an SR x SC register tile of S
 *      over D/KS of the head dimension, four columns of d at a time with float4 shared-memory
 *      reads; when KS > 1 the KS partial tiles are summed in phase B (small tiles at large d
 *      keep register blocking this way instead of shrinking to one score per thread).
 *   B  Online softmax, TPR = 256/BR threads per row: S times scale*log2(e) (one rounding of
 *      the finished dot product; scaling Q before the products rounds every element of Q and
 *      costs 1e-4 of relative error at logits near 1000), masking, the tile's row maximum by
 *      shuffles, rescale factor alpha (to shared memory, for phase C), P = exp2(S - m) written
 *      back over S, and each thread's share of the row sum, kept in registers and reduced once
 *      at the end.
 *   C  O = alpha O + P V. Each thread owns an OR x OC register tile of O (rows strided by
 *      BR/OR, float4 column groups strided by D/OC) and reads P and V with float4 loads.
 *
 * Shared memory: Q [BR][D+4], K [BC][D+4], V [BC][D], S/P KS x [BR][BC+PPAD], alpha [BR].
 * The row paddings make the strided float4 reads of Q and K rows and the scalar writes of S
 * fall into distinct banks. K of the next tile is loaded (cp.async for aligned f32) while
 * phases B and C run, V of the next tile while phases A and B run.
 *
 * Masks: a block visits only the key tiles some row of it sees (causal and sliding windows,
 * common/score_mods.cuh), so a window costs its width; tiles that every row sees whole take no
 * mask, the others are masked. A key a row does not see gets P = -0.0 rather than the +0.0
 * that a -inf score (bias) or an underflow gives, and on masked tiles phase C skips exactly
 * those: 0 * NaN is NaN, so a NaN or inf in an invisible value row reaches no output, while
 * one in a visible row reaches every output that sees it, whatever its probability. Keys past
 * Nkv are zero-filled and masked. Softcap, ALiBi and bias take every score through
 * fp_score_log2 (all tiles); sinks join each row's sum before the division (split 0 only).
 *
 * Layouts: Q, O and the LSE through common/kv_addressing.cuh (dense or packed), K and V rows
 * likewise (dense, packed, or looked up in a paged cache's block table row by row as a tile is
 * staged). The grid covers the longest sequence; blocks past a sequence's end exit.
 *
 * Split-KV: blockIdx.y picks a range of keys_per_split keys (a multiple of BC); the block
 * writes its normalised partial O and (m, l) to the workspace laid out as split_kv.h says,
 * and fp_split_kv_merge combines them.
 */
#ifndef FP_KERNELS_FA2_F32_CUH
#define FP_KERNELS_FA2_F32_CUH

#include <stdint.h>

#include "common/attention_args.cuh"
#include "common/dtype.cuh"
#include "common/kv_addressing.cuh"
#include "common/online_softmax.cuh"
#include "common/score_mods.cuh"
#include "common/smem_fits.h"
#include "common/smem_limit.cuh"
#include "common/warp_reduce.cuh"
#include "split_kv.h"

/* Where PTX is compiled: the HIP build and nvcc's host pass take the plain copies below. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#include "common/ptx.cuh"
#endif

namespace fa2_f32 {

constexpr int THREADS = 256;
constexpr int MAX_HEAD_DIM = 1024;

template <int D_, int BR_, int BC_, int SR_, int SC_, int KS_, int OR_, int OC_, int PPAD_,
          int MIN_BLOCKS_, int UNROLL_>
struct config {
    static constexpr int D = D_, BR = BR_, BC = BC_;
    static constexpr int SR = SR_, SC = SC_, KS = KS_; /* phase A register tile, d slices */
    static constexpr int OR = OR_, OC = OC_;           /* phase C register tile */
    static constexpr int MIN_BLOCKS = MIN_BLOCKS_;     /* blocks per SM the registers allow */
    /* 2: the inner loops are unrolled twice, so that loads of the next step overlap this
     * step's FMAs; 1 where that would spill (under the 128-register cap of two blocks per SM,
     * or next to a 128-register O tile). */
    static constexpr int UNROLL = UNROLL_;

    static constexpr int QS = D + 4; /* row stride of Q and K in shared memory */
    static constexpr int VS = D;     /* V rows are only read whole, float4 by float4 */
    static constexpr int PS = BC + PPAD_;
    static constexpr int NSR = BR / SR, NSC = BC / SC, SLICE = NSR * NSC, DS = D / KS;
    static constexpr int NOR = BR / OR, NCG = D / OC;
    static constexpr int TPR = THREADS / BR, EPT = BC / TPR; /* phase B: threads, scores per row */
    static constexpr int PW = EPT % 4 == 0 ? 4 : 1;          /* phase B access width */

    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + BR * QS;
    static constexpr int V_OFF = K_OFF + BC * QS;
    static constexpr int S_OFF = V_OFF + BC * VS;
    static constexpr int ALPHA_OFF = S_OFF + KS * BR * PS;
    static constexpr size_t SMEM_BYTES = (size_t)(ALPHA_OFF + BR) * sizeof(float);

    static_assert(SLICE * KS == THREADS, "phase A must use every thread once");
    static_assert(DS % 4 == 0 && D % 4 == 0, "d slices are read four floats at a time");
    static_assert(NOR * NCG == THREADS && OC % 4 == 0 && BR % OR == 0, "phase C tiling");
    static_assert(TPR <= FP_WARP_SIZE && (TPR & (TPR - 1)) == 0 && BC % TPR == 0,
                  "phase B rows live inside one warp");
    static_assert(BC % 4 == 0 && PS % 4 == 0, "P rows are read as float4");
};

/* Head-dimension classes: d is padded up to the first D that holds it. Fields: D, BR, BC,
 * SR, SC, KS, OR, OC, PPAD, MIN_BLOCKS, UNROLL. Shared memory: 104 KiB at D = 64 (two blocks
 * per SM on sm_90), 149-217 KiB for the others (one block per SM), 51 KiB for few rows. */
typedef config<64, 128, 64, 4, 8, 1, 4, 8, 8, 2, 1> cfg_d64;
typedef config<128, 128, 64, 4, 8, 1, 8, 8, 8, 1, 2> cfg_d128;
typedef config<256, 64, 32, 4, 8, 4, 8, 8, 4, 1, 2> cfg_d256;
typedef config<512, 32, 16, 4, 4, 8, 8, 8, 4, 1, 2> cfg_d512;
typedef config<1024, 32, 8, 4, 4, 16, 8, 16, 4, 1, 1> cfg_d1024;
/* Few query rows (decoding): 16-row blocks waste 8x less work on absent rows than 128-row ones;
 * the keys are then split across blocks (fa2_f32_split_kv) to fill the GPU. */
constexpr int FEW_ROWS = 16;
typedef config<128, 16, 32, 2, 4, 4, 2, 4, 8, 2, 2> cfg_few_rows_d128;

/* Calls f with the config type for p (head_dim <= MAX_HEAD_DIM). */
template <typename F> auto with_config(const fp_problem *p, F &&f) {
    const int64_t d = p->head_dim;
    if (p->seq_q <= FEW_ROWS && d <= 128) return f(cfg_few_rows_d128());
    if (d <= 64) return f(cfg_d64());
    if (d <= 128) return f(cfg_d128());
    if (d <= 256) return f(cfg_d256());
    if (d <= 512) return f(cfg_d512());
    return f(cfg_d1024());
}

struct split_args {
    float *part_o; /* NULL: not split, the block writes O and LSE itself */
    float2 *part_ml;
    int keys_per_split;
    int64_t rows; /* rows of one split's partials, numbered as the LSE */
};

/* What the kernel knows beyond fp_attn_args: the layouts of Q and K/V and the masks and
 * modifiers. */
struct features {
    fp_seq_layout seq;
    fp_score_mods mods;
};

/* Rows of a K or V tile: `stride` apart from `base` (dense, packed), or looked up key by key in
 * a paged cache (keys kb + r of sequence s, kv head hk). at(r) is only asked for rows the tile
 * reads. */
template <typename T> struct tile_rows {
    const T *base; /* dense: the tile's first row; paged: the cache */
    int64_t stride;
    bool paged;
    fp_seq_layout seq;
    fp_seq s;
    flashport_strides st;
    int hk, kb;

    __device__ __forceinline__ const T *at(int r) const {
        if (!paged) return base + r * stride;
        return base + fp_kv_offset(st, fp_kv_locate(seq, s, kb + r), hk);
    }
};

/* ---- asynchronous copies (cp.async on sm_80+, plain copies elsewhere) ------------------- */

__device__ __forceinline__ void copy16_async(float *dst, const float *src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fp_cp_async_16(fp_smem_addr(dst), src, valid ? 16 : 0);
#else
    *(float4 *)dst = valid ? *(const float4 *)src : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

__device__ __forceinline__ void copy4_async(float *dst, const float *src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fp_cp_async_4(fp_smem_addr(dst), src, valid ? 4 : 0);
#else
    *dst = valid ? *src : 0.0f;
#endif
}

__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fp_cp_async_commit();
#endif
}

/* Waits until at most one committed group is still in flight. */
__device__ __forceinline__ void async_wait_all_but_one() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fp_cp_async_wait<1>();
#endif
}

/* Stages rows [0, ROWS) x cols [0, D) of a tensor tile into shared memory (row stride
 * dst_stride), zero outside rows_valid x d. f32 goes through cp.async (16-byte copies when
 * vec16, else 4-byte ones); f16/bf16 are converted through registers. */
template <typename CFG, int ROWS, typename T>
__device__ __forceinline__ void stage_tile(float *dst, int dst_stride, const tile_rows<T> &src,
                                           int rows_valid, int d, bool vec16, int tid) {
    (void)vec16;
    if constexpr (sizeof(T) == sizeof(float)) {
        if (vec16) {
            constexpr int CH = CFG::D / 4, N = ROWS * CH;
            for (int idx = tid; idx < N; idx += THREADS) {
                int r = idx / CH, c = (idx % CH) * 4;
                bool ok = r < rows_valid && c < d;
                copy16_async(dst + r * dst_stride + c, ok ? src.at(r) + c : src.base, ok);
            }
            return;
        }
        constexpr int N = ROWS * CFG::D;
        for (int idx = tid; idx < N; idx += THREADS) {
            int r = idx / CFG::D, c = idx % CFG::D;
            bool ok = r < rows_valid && c < d;
            copy4_async(dst + r * dst_stride + c, ok ? src.at(r) + c : src.base, ok);
        }
    } else {
        constexpr int N = ROWS * CFG::D;
        for (int idx = tid; idx < N; idx += THREADS) {
            int r = idx / CFG::D, c = idx % CFG::D;
            dst[r * dst_stride + c] = (r < rows_valid && c < d) ? fp_to_f32(src.at(r)[c]) : 0.0f;
        }
    }
}

/* Phase A: this thread's SR x SC scores over its slice of d, into its S slab. */
template <typename CFG>
__device__ __forceinline__ void scores(const float *sQ, const float *sK, float *sS, int tid) {
    const int ks = tid / CFG::SLICE, u = tid % CFG::SLICE;
    const int cg = u % CFG::NSC, rg = u / CFG::NSC;
    const float *qp = sQ + rg * CFG::QS + ks * CFG::DS;
    const float *kp = sK + cg * CFG::QS + ks * CFG::DS;
    float s[CFG::SR][CFG::SC];
#pragma unroll
    for (int i = 0; i < CFG::SR; i++)
#pragma unroll
        for (int j = 0; j < CFG::SC; j++) s[i][j] = 0.0f;

#pragma unroll CFG::UNROLL
    for (int k = 0; k < CFG::DS; k += 4) {
        float4 qf[CFG::SR];
#pragma unroll
        for (int i = 0; i < CFG::SR; i++)
            qf[i] = *(const float4 *)(qp + i * CFG::NSR * CFG::QS + k);
#pragma unroll
        for (int j = 0; j < CFG::SC; j++) {
            float4 kf = *(const float4 *)(kp + j * CFG::NSC * CFG::QS + k);
#pragma unroll
            for (int i = 0; i < CFG::SR; i++) {
                s[i][j] = fmaf(qf[i].x, kf.x, s[i][j]);
                s[i][j] = fmaf(qf[i].y, kf.y, s[i][j]);
                s[i][j] = fmaf(qf[i].z, kf.z, s[i][j]);
                s[i][j] = fmaf(qf[i].w, kf.w, s[i][j]);
            }
        }
    }
    float *slab = sS + ks * CFG::BR * CFG::PS;
#pragma unroll
    for (int i = 0; i < CFG::SR; i++)
#pragma unroll
        for (int j = 0; j < CFG::SC; j++)
            slab[(rg + i * CFG::NSR) * CFG::PS + cg + j * CFG::NSC] = s[i][j];
}

/* How phase B forms a tile's scores: every key seen (FULL), keys outside the row's
 * [lo, hi) masked (MASKED), or masked and modified (MODIFIED). */
enum tile_kind { FULL, MASKED, MODIFIED };

/* The row of phase B: its index in its sequence and the keys [lo, hi) it sees. */
struct score_row {
    int i, lo, hi;
};

/* Phase B for row r, part h of TPR: folds the tile (keys k0..) into the row state, writes P
 * over slab 0 and returns alpha. Keys the row does not see get P = -0.0 (phase C's guard). */
template <typename CFG, tile_kind KIND>
__device__ __forceinline__ float softmax_tile(float *sS, int r, int h, int k0, const score_row &sr,
                                              const fp_score_mods &mods, int b, int hq, int nq,
                                              int nkv, float scale_log2, fp_softmax_row &row) {
    constexpr int W = CFG::PW, NCH = CFG::EPT / W;
    float x[CFG::EPT];
    float *prow = sS + r * CFG::PS;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int c = (h + CFG::TPR * i) * W;
        float v[W];
#pragma unroll
        for (int e = 0; e < W; e++) v[e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < CFG::KS; ks++) {
            const float *src = prow + ks * CFG::BR * CFG::PS + c;
            if constexpr (W == 4) {
                float4 t = *(const float4 *)src;
                v[0] += t.x, v[1] += t.y, v[2] += t.z, v[3] += t.w;
            } else {
                v[0] += src[0];
            }
        }
#pragma unroll
        for (int e = 0; e < W; e++) {
            const int j = k0 + c + e;
            if (KIND != FULL && (j < sr.lo || j >= sr.hi))
                x[i * W + e] = -INFINITY;
            else if (KIND == MODIFIED)
                x[i * W + e] = fp_score_log2(mods, v[e], b, hq, sr.i, j, nq, nkv);
            else
                x[i * W + e] = v[e] * scale_log2;
        }
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < CFG::EPT; i++) tile_max = fmaxf(tile_max, x[i]);
    tile_max = fp_group_max<CFG::TPR>(tile_max);
    const float alpha = fp_softmax_advance(row, tile_max);
    const float base = fp_softmax_base(row);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < CFG::EPT; i++) {
        x[i] = exp2f(x[i] - base);
        sum += x[i];
    }
    fp_softmax_add(row, sum);
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int c = (h + CFG::TPR * i) * W;
        if (KIND != FULL)
#pragma unroll
            for (int e = 0; e < W; e++)
                if (k0 + c + e < sr.lo || k0 + c + e >= sr.hi) x[i * W + e] = -0.0f;
        if constexpr (W == 4)
            *(float4 *)(prow + c) = make_float4(x[i * 4], x[i * 4 + 1], x[i * 4 + 2], x[i * 4 + 3]);
        else
            prow[c] = x[i];
    }
    return alpha;
}

/* Phase C: o = alpha o + P V over one key tile. GUARD skips the keys phase B marked unseen
 * (P = -0.0), so that a NaN or inf in a value row the query cannot see does not reach its
 * output. */
template <typename CFG, bool GUARD>
__device__ __forceinline__ void accumulate_pv(float (&o)[CFG::OR][CFG::OC], const float *sS,
                                              const float *sV, const float *sAlpha, int tid) {
    const int ocg = tid % CFG::NCG, org = tid / CFG::NCG;
#pragma unroll
    for (int i = 0; i < CFG::OR; i++) {
        const float a = sAlpha[org + i * CFG::NOR];
#pragma unroll
        for (int c = 0; c < CFG::OC; c++) o[i][c] *= a;
    }
    const float *pp = sS + org * CFG::PS;
    const float *vp = sV + 4 * ocg;
#pragma unroll CFG::UNROLL
    for (int j = 0; j < CFG::BC; j += 4) {
        float4 pf[CFG::OR];
#pragma unroll
        for (int i = 0; i < CFG::OR; i++)
            pf[i] = *(const float4 *)(pp + i * CFG::NOR * CFG::PS + j);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            float4 vf[CFG::OC / 4];
#pragma unroll
            for (int g = 0; g < CFG::OC / 4; g++)
                vf[g] = *(const float4 *)(vp + (j + jj) * CFG::VS + 4 * CFG::NCG * g);
#pragma unroll
            for (int i = 0; i < CFG::OR; i++) {
                const float p = jj == 0 ? pf[i].x : jj == 1 ? pf[i].y : jj == 2 ? pf[i].z : pf[i].w;
#pragma unroll
                for (int g = 0; g < CFG::OC / 4; g++) {
                    float *oo = &o[i][4 * g];
                    if (GUARD && __float_as_uint(p) == 0x80000000u) continue;
                    oo[0] = fmaf(p, vf[g].x, oo[0]);
                    oo[1] = fmaf(p, vf[g].y, oo[1]);
                    oo[2] = fmaf(p, vf[g].z, oo[2]);
                    oo[3] = fmaf(p, vf[g].w, oo[3]);
                }
            }
        }
    }
}

/* Blocks per SM the kernel's registers are capped for. f16/bf16 need a few more registers for
 * the conversions and are not the fast path here (tensor cores take them), so they run one
 * block per SM rather than spill; so does everything before sm_90, whose 164 KiB of shared
 * memory per SM holds only one block of any configuration. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FA2_F32_MIN_BLOCKS(CFG, T) 1
#else
#define FA2_F32_MIN_BLOCKS(CFG, T) (sizeof(T) == sizeof(float) ? CFG::MIN_BLOCKS : 1)
#endif

template <typename CFG, typename T>
__global__ void __launch_bounds__(THREADS, FA2_F32_MIN_BLOCKS(CFG, T))
    forward_kernel(fp_attn_args a, features f, split_args sp, int vec16) {
    extern __shared__ float4 smem_f4[];
    float *smem = (float *)smem_f4;
    float *sQ = smem + CFG::Q_OFF, *sK = smem + CFG::K_OFF, *sV = smem + CFG::V_OFF;
    float *sS = smem + CFG::S_OFF, *sAlpha = smem + CFG::ALPHA_OFF;
    const int tid = threadIdx.x;
    const fp_score_mods &mods = f.mods;

    /* Highest query tiles first: under the causal mask they have the most keys. */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * CFG::BR;
    const int bh = blockIdx.z;
    const int b = bh / a.heads_q, h = bh % a.heads_q, hk = h / a.group;
    const fp_seq s = fp_sequence(f.seq, b);
    /* The grid covers the longest sequence; blocks past a shorter one's end have no rows. */
    if (q0 >= s.nq) return;

    /* The key tiles some row of the block sees, within the split; tiles every row sees whole
     * need no mask. */
    const int rows_valid = min(CFG::BR, s.nq - q0);
    const int split_lo = sp.part_o ? (int)blockIdx.y * sp.keys_per_split : 0;
    const int kv_end = sp.part_o ? min(s.nkv, split_lo + sp.keys_per_split) : s.nkv;
    const fp_span_keys span = fp_visible_span(mods, q0, q0 + rows_valid - 1, s.nq, s.nkv, kv_end);
    const int kv_begin = max(split_lo, span.lo);
    const int n_tiles = span.hi > kv_begin ? (span.hi - kv_begin + CFG::BC - 1) / CFG::BC : 0;
    /* Softcap, ALiBi and bias touch every score: every tile takes the modified path. */
    const bool modified = fp_score_mods_any(mods);

    const T *gQ = (const T *)a.q + fp_q_offset(a.qs, s, h, q0);
    for (int idx = tid; idx < CFG::BR * CFG::D; idx += THREADS) {
        int r = idx / CFG::D, c = idx % CFG::D;
        sQ[r * CFG::QS + c] =
            (r < rows_valid && c < a.d) ? fp_to_f32(gQ[(int64_t)r * a.qs.seq + c]) : 0.0f;
    }
    const bool paged = f.seq.kv == FLASHPORT_KV_PAGED;
    /* Dense and packed rows are a stride apart from key 0's (not looked up when paged: an
     * empty sequence's first table entry is not read). */
    const fp_kv_rows kv0 =
        paged ? fp_kv_rows{0, 0} : fp_kv_row_offsets(f.seq, s, a.ks, a.vs, hk, 0);
    auto k_rows = [&](int kb) {
        return tile_rows<T>{(const T *)a.k + (paged ? 0 : kv0.k + (int64_t)kb * a.ks.seq),
                            a.ks.seq,
                            paged,
                            f.seq,
                            s,
                            a.ks,
                            hk,
                            kb};
    };
    auto v_rows = [&](int kb) {
        return tile_rows<T>{(const T *)a.v + (paged ? 0 : kv0.v + (int64_t)kb * a.vs.seq),
                            a.vs.seq,
                            paged,
                            f.seq,
                            s,
                            a.vs,
                            hk,
                            kb};
    };
    if (n_tiles > 0) {
        stage_tile<CFG, CFG::BC>(sK, CFG::QS, k_rows(kv_begin), kv_end - kv_begin, a.d, vec16, tid);
        async_commit();
        stage_tile<CFG, CFG::BC>(sV, CFG::VS, v_rows(kv_begin), kv_end - kv_begin, a.d, vec16, tid);
        async_commit();
    }

    const int srow = tid / CFG::TPR, spart = tid % CFG::TPR; /* phase B: row and part */
    score_row sr;
    sr.i = q0 + srow;
    fp_visible_keys(mods, sr.i, s.nq, s.nkv, &sr.lo, &sr.hi);
    /* Rows past the sequence see nothing: no bias or table of theirs is read. */
    sr.hi = srow < rows_valid ? min(sr.hi, kv_end) : sr.lo;
    fp_softmax_row row = fp_softmax_start();
    float o[CFG::OR][CFG::OC];
#pragma unroll
    for (int i = 0; i < CFG::OR; i++)
#pragma unroll
        for (int c = 0; c < CFG::OC; c++) o[i][c] = 0.0f;

    for (int t = 0; t < n_tiles; t++) {
        const int k0 = kv_begin + t * CFG::BC;
        const bool masked = modified || k0 < span.full_lo || k0 + CFG::BC > span.full_hi;
        const bool more = t + 1 < n_tiles;
        async_wait_all_but_one(); /* K of this tile has landed */
        __syncthreads();
        scores<CFG>(sQ, sK, sS, tid);
        __syncthreads(); /* S complete, K free */
        if (more)
            stage_tile<CFG, CFG::BC>(sK, CFG::QS, k_rows(k0 + CFG::BC), kv_end - k0 - CFG::BC, a.d,
                                     vec16, tid);
        async_commit();
        float alpha;
        if (modified)
            alpha = softmax_tile<CFG, MODIFIED>(sS, srow, spart, k0, sr, mods, b, h, s.nq, s.nkv,
                                                a.scale_log2, row);
        else if (masked)
            alpha = softmax_tile<CFG, MASKED>(sS, srow, spart, k0, sr, mods, b, h, s.nq, s.nkv,
                                              a.scale_log2, row);
        else
            alpha = softmax_tile<CFG, FULL>(sS, srow, spart, k0, sr, mods, b, h, s.nq, s.nkv,
                                            a.scale_log2, row);
        if (spart == 0) sAlpha[srow] = alpha;
        async_wait_all_but_one(); /* V of this tile has landed */
        __syncthreads();
        if (masked)
            accumulate_pv<CFG, true>(o, sS, sV, sAlpha, tid);
        else
            accumulate_pv<CFG, false>(o, sS, sV, sAlpha, tid);
        __syncthreads(); /* P and V free */
        if (more)
            stage_tile<CFG, CFG::BC>(sV, CFG::VS, v_rows(k0 + CFG::BC), kv_end - k0 - CFG::BC, a.d,
                                     vec16, tid);
        async_commit();
    }

    /* Row totals: O's factor over l (0 for a row that saw no key) to shared memory for the O
     * owners. The sink joins the sum as a key with a zero value, in split 0 only. */
    row.l = fp_group_sum<CFG::TPR>(row.l);
    const bool row_ok = srow < rows_valid;
    if (spart == 0) {
        const float keep =
            mods.sinks && blockIdx.y == 0 ? fp_sink_fold(mods, h, &row.m, &row.l) : 1.0f;
        sAlpha[srow] = keep * fp_softmax_inv_sum(row);
        if (row_ok) {
            const int64_t at = fp_lse_index(f.seq, s, h, q0 + srow);
            if (sp.part_o) {
                sp.part_ml[blockIdx.y * sp.rows + at] = make_float2(row.m, row.l);
            } else if (a.lse) {
                a.lse[at] = fp_softmax_lse(row);
            }
        }
    }
    __syncthreads();

    const int ocg = tid % CFG::NCG, org = tid / CFG::NCG;
#pragma unroll
    for (int i = 0; i < CFG::OR; i++) {
        const int r = org + i * CFG::NOR;
        if (r >= rows_valid) continue;
        const float inv = sAlpha[r];
        if (sp.part_o) {
            float *dst =
                sp.part_o + (blockIdx.y * sp.rows + fp_lse_index(f.seq, s, h, q0 + r)) * a.d;
#pragma unroll
            for (int g = 0; g < CFG::OC / 4; g++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 4 * (ocg + CFG::NCG * g) + e;
                    if (c < a.d) dst[c] = o[i][4 * g + e] * inv;
                }
        } else {
            T *dst = (T *)a.o + fp_q_offset(a.os, s, h, q0 + r);
#pragma unroll
            for (int g = 0; g < CFG::OC / 4; g++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 4 * (ocg + CFG::NCG * g) + e;
                    if (c < a.d) dst[c] = fp_from_f32<T>(o[i][4 * g + e] * inv);
                }
        }
    }
}

/* ---- host side --------------------------------------------------------------------------- */

inline size_t smem_bytes(const fp_problem *p) {
    return with_config(p, [](auto cfg) { return decltype(cfg)::SMEM_BYTES; });
}

inline int block_rows(const fp_problem *p) {
    return with_config(p, [](auto cfg) { return decltype(cfg)::BR; });
}

inline int block_cols(const fp_problem *p) {
    return with_config(p, [](auto cfg) { return decltype(cfg)::BC; });
}

/* Checks shared by both variants; 1, or 0 with the reason. */
inline int supports_common(const fp_problem *p, const fp_gpu_device_props *props, char *why,
                           size_t why_len) {
    if (p->head_dim > MAX_HEAD_DIM) {
        snprintf(why, why_len, "head_dim %lld exceeds %d", (long long)p->head_dim, MAX_HEAD_DIM);
        return 0;
    }
    if (!fp_attn_grid_fits(p, MAX_HEAD_DIM, why, why_len)) return 0; /* all of d in one block */
    const int64_t q_tiles = (p->seq_q + block_rows(p) - 1) / block_rows(p);
    if (q_tiles > INT_MAX) {
        snprintf(why, why_len, "too many query tiles for the grid");
        return 0;
    }
    return fp_smem_fits(smem_bytes(p), props, why, why_len);
}

/* 16-byte copies need 16-byte aligned rows: base pointers and every stride in whole float4s. */
inline bool rows_are_float4(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    if (p->dtype != FLASHPORT_F32 || p->head_dim % 4) return false;
    const flashport_strides *s[2] = {&p->k, &p->v};
    for (int i = 0; i < 2; i++)
        if (s[i]->batch % 4 || s[i]->head % 4 || s[i]->seq % 4) return false;
    return ((uintptr_t)L->k % 16 == 0) && ((uintptr_t)L->v % 16 == 0);
}

template <typename CFG, typename T>
gpuError_t launch_typed(const fp_gpu_launch *L, const split_args &sp, int splits) {
    const fp_problem *p = &L->p;
    gpuError_t err = fp_raise_smem_limit<forward_kernel<CFG, T>, CFG::SMEM_BYTES>();
    if (err != gpuSuccess) return err;
    dim3 grid((unsigned)((p->seq_q + CFG::BR - 1) / CFG::BR), (unsigned)splits,
              (unsigned)(p->batch * p->heads_q));
    features f;
    f.seq = fp_seq_layout_make(p, L->args);
    f.mods = fp_score_mods_make(p, L->args);
    forward_kernel<CFG, T> FP_GPU_LAUNCH(grid, THREADS, CFG::SMEM_BYTES, L->stream)(
        fp_attn_args_make(L), f, sp, rows_are_float4(L) ? 1 : 0);
    return gpuGetLastError();
}

/* Enqueues the forward; split (NULL: one pass) shares the keys out in whole tiles of
 * block_cols(p), writes the partials to L->workspace (split_kv.h layout) and merges them. */
inline gpuError_t launch(const fp_gpu_launch *L, const fp_split_kv_params *split) {
    const fp_problem *p = &L->p;
    split_args sp = {0, 0, 0, 0};
    const int splits = split ? split->splits : 1;
    if (splits > 1) {
        sp.part_o = (float *)L->workspace;
        sp.part_ml = (float2 *)((char *)L->workspace + fp_split_kv_ml_offset(p, splits));
        sp.keys_per_split = split->keys_per_split;
        sp.rows = fp_split_kv_rows(p);
    }
    gpuError_t err = gpuSuccess;
    with_config(p, [&](auto cfg) {
        typedef decltype(cfg) C;
        FP_DISPATCH_DTYPE(p->dtype, T, err = (launch_typed<C, T>)(L, sp, splits));
        return 0;
    });
    if (err != gpuSuccess || splits < 2) return err;
    return fp_split_kv_merge(L, splits);
}

} // namespace fa2_f32

#endif /* FP_KERNELS_FA2_F32_CUH */
