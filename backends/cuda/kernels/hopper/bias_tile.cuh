/*
 * The additive bias of hopper/forward_kernel.cuh's tiles, as the start of S's accumulators
 * (common/score_mods.cuh, fp_bias_in_accumulators): register i of a consumer thread starts at
 * bias / scale of row fp_hopper_acc_row(tid, 0) + 8 ((i / 2) % 2) and key
 * fp_hopper_acc_col(tid, 0) + 8 (i / 4) + i % 2, pairs of adjacent keys 8 apart.
 *
 * Staged: a thread copies its own pairs of tile t + 1 by cp.async into its own slots of shared
 * memory while tile t computes, and reads them back just before tile t + 1's dot products; no
 * other thread touches its slots, so no barrier is needed. Loading them from global memory at
 * that point instead left the GEMMs waiting on a round trip to L2 every tile. Staging takes
 * keys in unit stride with every pair aligned (fp_hopper_bias_stageable), the case of
 * torch-style masks; other layouts are read directly (fp_hopper_bias_load). Keys past Nkv start
 * at 0 (the mask sets them, and every key a row does not see, to -inf); rows past Nq, computed
 * and never stored, read the last row's bias. A bias that does not vary with the query
 * (a key-padding mask) is read once for both of a thread's rows.
 */
#ifndef FP_HOPPER_BIAS_TILE_CUH
#define FP_HOPPER_BIAS_TILE_CUH

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/ptx.cuh"
#include "../common/score_mods.cuh"
#include "fragment_layout.h"

/* Shared memory of the staged bias of one tile of BC keys: a slot of 8 bytes (a pair, of any
 * element type) per pair and row half of each of THREADS consumer threads. */
template <int BC_, int THREADS> struct fp_hopper_bias_slots {
    static constexpr int BC = BC_;
    static constexpr int PAIRS = BC / 8; /* per row of a thread */
    static constexpr uint32_t BYTES = (uint32_t)PAIRS * 2 * THREADS * 8;
    /* Offset of thread ct's first slot, and of its slot (n, half) from there; consecutive
     * threads take consecutive slots, so that a warp's reads are conflict-free. */
    static __device__ __forceinline__ uint32_t first(int ct) { return 8u * ct; }
    static __device__ __forceinline__ uint32_t at(int n, int half) {
        return 8u * THREADS * (2 * n + half);
    }
};

/* Whether the block's bias tiles can be staged: keys in unit stride and every pair two
 * elements aligned, which holds for all rows when the query stride is even (or 0), the
 * head's first entry plus the block's first key is even, and the base is pair-aligned. */
__device__ __forceinline__ bool fp_hopper_bias_stageable(const fp_score_mods &m,
                                                         int64_t head_offset, int k_begin) {
    const int pair_bytes = 2 * (m.bias_dtype == FLASHPORT_F32 ? 4 : 2);
    return m.bias_key == 1 && m.bias_query % 2 == 0 && (head_offset + k_begin) % 2 == 0 &&
           (uintptr_t)m.bias % pair_bytes == 0;
}

/* Issues (and commits as one group) the copies of the tile at key kb into the thread's slots;
 * `edge`: the tile may reach past Nkv. */
template <typename B, typename S>
__device__ __forceinline__ void
fp_hopper_bias_stage_as(unsigned char *slots, const fp_score_mods &m, int64_t head_offset, int nq,
                        int nkv, int tid, int row0, int kb, bool edge) {
    const int row = row0 + fp_hopper_acc_row(tid, 0), key = kb + fp_hopper_acc_col(tid, 0);
    const B *const first = static_cast<const B *>(m.bias) + head_offset + key;
    const int halves = m.bias_query == 0 ? 1 : 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        if (half >= halves) break;
        const B *const p = first + (int64_t)fp_bias_row_clamped(row + 8 * half, nq) * m.bias_query;
#pragma unroll
        for (int n = 0; n < S::PAIRS; ++n) {
            const int valid = edge ? min(max(nkv - (key + 8 * n), 0), 2) : 2;
            const void *src = valid ? static_cast<const void *>(p + 8 * n) : m.bias;
            const uint32_t dst = fp_smem_addr(slots + S::at(n, half));
            if (sizeof(B) == 4)
                fp_cp_async_8(dst, src, valid * 4);
            else
                fp_cp_async_4(dst, src, valid * 2);
        }
    }
    fp_cp_async_commit();
}

template <typename S>
__device__ __forceinline__ void fp_hopper_bias_stage(unsigned char *slots, const fp_score_mods &m,
                                                     int64_t head_offset, int nq, int nkv, int tid,
                                                     int row0, int kb, bool edge) {
    switch (m.bias_dtype) {
    case FLASHPORT_F16:
        fp_hopper_bias_stage_as<__half, S>(slots, m, head_offset, nq, nkv, tid, row0, kb, edge);
        break;
    case FLASHPORT_BF16:
        fp_hopper_bias_stage_as<__nv_bfloat16, S>(slots, m, head_offset, nq, nkv, tid, row0, kb,
                                                  edge);
        break;
    default: fp_hopper_bias_stage_as<float, S>(slots, m, head_offset, nq, nkv, tid, row0, kb, edge);
    }
}

/* The pair in a slot, as floats. */
template <typename B>
__device__ __forceinline__ void fp_hopper_bias_slot_pair(const unsigned char *slot, float *b0,
                                                         float *b1) {
    if (sizeof(B) == 4) {
        const float2 v = *reinterpret_cast<const float2 *>(slot);
        *b0 = v.x;
        *b1 = v.y;
    } else {
        const B *v = reinterpret_cast<const B *>(slot);
        *b0 = fp_to_f32(v[0]);
        *b1 = fp_to_f32(v[1]);
    }
}

/* The start of S from the thread's slots, once its copies have landed. */
template <typename B, typename S>
__device__ __forceinline__ void fp_hopper_bias_unstage_as(float (&s)[S::BC / 2],
                                                          const unsigned char *slots,
                                                          float inv_scale, bool one_row) {
    fp_cp_async_wait<0>();
#pragma unroll
    for (int n = 0; n < S::PAIRS; ++n) {
        float b0, b1;
        fp_hopper_bias_slot_pair<B>(slots + S::at(n, 0), &b0, &b1);
        s[4 * n] = b0 * inv_scale;
        s[4 * n + 1] = b1 * inv_scale;
        if (!one_row) fp_hopper_bias_slot_pair<B>(slots + S::at(n, 1), &b0, &b1);
        s[4 * n + 2] = b0 * inv_scale;
        s[4 * n + 3] = b1 * inv_scale;
    }
}

template <typename S>
__device__ __forceinline__ void fp_hopper_bias_unstage(float (&s)[S::BC / 2],
                                                       const unsigned char *slots,
                                                       const fp_score_mods &m, float inv_scale) {
    const bool one_row = m.bias_query == 0;
    switch (m.bias_dtype) {
    case FLASHPORT_F16: fp_hopper_bias_unstage_as<__half, S>(s, slots, inv_scale, one_row); break;
    case FLASHPORT_BF16:
        fp_hopper_bias_unstage_as<__nv_bfloat16, S>(s, slots, inv_scale, one_row);
        break;
    default: fp_hopper_bias_unstage_as<float, S>(s, slots, inv_scale, one_row);
    }
}

/* The start of S read straight from global memory, for layouts that cannot be staged. */
template <typename B, int BC>
__device__ __forceinline__ void fp_hopper_bias_load_as(float (&s)[BC / 2], const fp_score_mods &m,
                                                       float inv_scale, int64_t head_offset, int nq,
                                                       int nkv, int tid, int row0, int kb) {
    const B *const bias = static_cast<const B *>(m.bias) + head_offset;
    const int row = row0 + fp_hopper_acc_row(tid, 0), key = kb + fp_hopper_acc_col(tid, 0);
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
        const int r = fp_bias_row_clamped(row + 8 * ((i / 2) % 2), nq);
        const int k = key + 8 * (i / 4) + i % 2;
        s[i] = k < nkv ? inv_scale *
                             fp_to_f32(bias[(int64_t)r * m.bias_query + (int64_t)k * m.bias_key])
                       : 0.0f;
    }
}

template <int BC>
__device__ __forceinline__ void fp_hopper_bias_load(float (&s)[BC / 2], const fp_score_mods &m,
                                                    float inv_scale, int64_t head_offset, int nq,
                                                    int nkv, int tid, int row0, int kb) {
    switch (m.bias_dtype) {
    case FLASHPORT_F16:
        fp_hopper_bias_load_as<__half, BC>(s, m, inv_scale, head_offset, nq, nkv, tid, row0, kb);
        break;
    case FLASHPORT_BF16:
        fp_hopper_bias_load_as<__nv_bfloat16, BC>(s, m, inv_scale, head_offset, nq, nkv, tid, row0,
                                                  kb);
        break;
    default:
        fp_hopper_bias_load_as<float, BC>(s, m, inv_scale, head_offset, nq, nkv, tid, row0, kb);
    }
}

#endif /* FP_HOPPER_BIAS_TILE_CUH */
