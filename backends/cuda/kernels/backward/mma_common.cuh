/*
 * What the two tensor-core backward kernels (mma_kv_kernel.cuh, mma_q_kernel.cuh) share: the
 * tile sizes; P and dS of one element, the walk over query tiles and the test for tiles that
 * need no mask are tile_math.cuh's, shared with the HIP backend's MFMA backward.
 *
 * Fragment notation as in mma/fragment_layout.h: lane = 4 g + c; accumulator register r of an
 * 8-column tile holds row g + 8 (r / 2), column 2c + r % 2.
 */
#ifndef FP_BACKWARD_MMA_COMMON_CUH
#define FP_BACKWARD_MMA_COMMON_CUH

#include "tile_math.cuh"

/* Key-tile kernel: FP_BWD_MMA_KV_WARPS warps in pairs, each pair owning a share of the block's
 * fp_bwd_mma_kv_keys<D> keys, query tiles of fp_bwd_mma_kv_rows<D, MODS> rows. Eight warps share
 * each Q and dO tile, which halves against four the reads of Q and dO per key and the dQ atomics
 * per key, at the same warps per SM (one block of eight at ~240 registers a thread, where
 * four-warp blocks fit two).
 * Query-tile kernel: FP_BWD_MMA_Q_WARPS warps of 16 rows (FP_BWD_MMA_ROWS a block), key tiles
 * of fp_bwd_mma_q_keys<D> keys. */
#define FP_BWD_MMA_KV_WARPS   8
#define FP_BWD_MMA_KV_THREADS (32 * FP_BWD_MMA_KV_WARPS)

/* Keys a key-tile block owns: 32 a warp pair up to d = 128. At d = 256, dK and dV of 32 keys
 * would take 256 f32 registers a thread (each warp of a pair holds half the head columns), so a
 * pair owns 16 keys there (128 registers). */
template <int D> __host__ __device__ constexpr int fp_bwd_mma_kv_keys() {
    return (D > 128 ? 8 : 16) * FP_BWD_MMA_KV_WARPS;
}

/* Query tiles in flight in the key-tile kernel's cp.async ring: two loads ahead of the one in
 * use, to cover L2 latency with its few warps an SM. At d = 256 a stage of 64 rows of Q and dO
 * takes 64 KB, and only two fit beside K and V. */
template <int D> __host__ __device__ constexpr int fp_bwd_mma_kv_stages() {
    return D > 128 ? 2 : 3;
}

#define FP_BWD_MMA_Q_WARPS   4
#define FP_BWD_MMA_Q_THREADS (32 * FP_BWD_MMA_Q_WARPS)
#define FP_BWD_MMA_ROWS      (16 * FP_BWD_MMA_Q_WARPS)

/* Keys a query-tile block loads a step: 64, or 32 at d = 256, where dQ of a warp's 16 rows
 * already takes 128 f32 registers a thread and two stages of 64 keys would take 128 KB. */
template <int D> __host__ __device__ constexpr int fp_bwd_mma_q_keys() { return D > 128 ? 32 : 64; }

/* Query rows a key-tile step covers. Shared-memory reads are the step's busiest unit, and more
 * rows read each warp's K and V fragments once for more MMAs. S^T and dP^T of BR rows take BR f32
 * registers a thread and dK and dV take D, so the rows are sized to what the head dim leaves, as
 * FlashAttention-2 sizes them (64 rows at d = 128, 128 at d = 64, for 128 keys): both take 192
 * accumulator registers and 0.475 ldmatrix.x4 an MMA (64 rows at d = 64: 0.55). d = 256 takes 64
 * rows for its 64 keys (160 registers, 0.75 ldmatrix.x4 an MMA in S^T and dP^T: a pair's 16 keys
 * are one m-tile, so each Q and dO fragment feeds one m-tile). Score modifiers keep more
 * values live (the exact per-element score) and take half the rows (with the full rows they
 * spill at d = 128). The larger tiles need about 199 KB of shared memory a block, and 211 KB at
 * d = 256 (fp_bwd_mma_kv_smem); where the device has less, backward_mma.cu takes the modifiers'
 * rows without them. */
template <int D, bool MODS> __host__ __device__ constexpr int fp_bwd_mma_kv_rows() {
    return (D > 64 ? 64 : 128) / (MODS ? 2 : 1);
}

/* m-tiles (16 query rows each) of a warp's dQ tile in the key-tile kernel; a warp's share of dQ
 * is BR D / 8 = 1024 values (32 accumulator registers) in both instances without modifiers. Per
 * 16 keys a 32 x 32 tile loads two A and two B fragments for 8 MMAs, a 16 x 64 tile one A and
 * four B. d = 64 takes the first; d = 128 the second, which measured about 1% faster there
 * although it loads more (bench/results/2026-12-05_h100_backward-row-kernels-dq-tiles.md); at
 * d = 64 the second measured 0-1% slower (2026-12-05_h100_backward-dq-fragment-tiles.md). */
template <int D> __host__ __device__ constexpr int fp_bwd_mma_dq_mtiles() { return D > 64 ? 1 : 2; }

#endif /* FP_BACKWARD_MMA_COMMON_CUH */
