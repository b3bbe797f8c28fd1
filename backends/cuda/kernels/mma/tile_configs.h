/*
 * The tile configurations the tensor-core forward is compiled for: a few candidates per padded
 * head dim, one list shared by the kernel (mma/flash_forward_kernel.cuh turns each entry into a
 * compile-time config and tensor_core_mma.cu into a kernel instance) and by the host test of the
 * index maps (tests/cuda_mma_layout), which replays every entry. Plain C, so that the test needs
 * no CUDA compiler.
 *
 * X(D, INDEX, WARPS, M_TILES, BC, STAGES, Q_IN_REGS, MIN_BLOCKS):
 *   D          padded head dim (64, 128, 256);
 *   INDEX      the config's number within its D, 0 upwards (FLASHPORT_CUDA_TC_CONFIG picks it);
 *   WARPS x M_TILES x 16 = 128 query rows a block, each warp owning M_TILES 16-row slices;
 *   BC         keys a tile (a multiple of 16);
 *   STAGES     K/V tiles in flight in the cp.async ring (>= 2);
 *   Q_IN_REGS  1: Q fragments loaded once into registers; 0: re-read from shared memory with
 *              ldmatrix for every key tile (costs shared-memory bandwidth, saves D/4 * M_TILES
 *              registers);
 *   MIN_BLOCKS blocks an SM for __launch_bounds__ (caps registers at 64K / (MIN_BLOCKS * 32 *
 *              WARPS)). At 255 registers the two-slice configs with 64 keys or more spill a
 *              few words (ptxas -v); the sweep measured them faster than every spill-free
 *              config regardless.
 * Shared memory a block: 2 bytes x D x (128 + STAGES x 2 x BC), and in the kernels for API v2
 * features also 32 x BC bytes of paged row addresses and a few words of tile bounds (static).
 *
 * Why two slices a warp where registers allow: each K and V fragment read from shared memory
 * then feeds two mma instead of one, which halves the ldmatrix traffic per FLOP; with one slice
 * that traffic, not the tensor cores, bounds the kernel. Larger BC spreads each tile's fixed
 * costs (barrier, row max/sum shuffles, rescale of O) over more keys and reuses each Q fragment
 * read for more keys, at BC/2 * M_TILES registers for S and 4 x BC x D bytes of shared memory
 * a stage.
 */
#ifndef FP_MMA_TILE_CONFIGS_H
#define FP_MMA_TILE_CONFIGS_H

#define FP_TC_CONFIG_LIST(X)                                                                       \
    X(64, 0, 4, 2, 64, 3, 1, 2)                                                                    \
    X(64, 1, 4, 2, 96, 3, 0, 2)                                                                    \
    X(64, 2, 4, 2, 128, 2, 0, 2)                                                                   \
    X(128, 0, 4, 2, 32, 3, 0, 2)                                                                   \
    X(128, 1, 4, 2, 48, 3, 0, 2)                                                                   \
    X(128, 2, 4, 2, 64, 2, 0, 2)                                                                   \
    X(256, 0, 8, 1, 32, 2, 0, 1)                                                                   \
    X(256, 1, 8, 1, 64, 2, 0, 1)

/* The config each padded head dim runs when FLASHPORT_CUDA_TC_CONFIG is not set, by kernel
 * instance (flash_forward_kernel.cuh): dense problems the fastest of scripts/tc-sweep.sh on the
 * H200 (bf16, N = 16384, causal and not); problems with features the fastest for their
 * instance (bf16, N = 4096, causal): a paged cache alone (16-row pages), softcap or ALiBi on a
 * dense layout (the dense defaults again), the masked instance (a window, or paged K/V with
 * other features), whose extra live values make the larger tiles spill, and the modified
 * instance (a bias, or softcap and ALiBi beside other features), 64-key tiles at d = 64 and
 * d = 128 (bench/results). */
#define FP_TC_DEFAULT_CONFIG_D64  1
#define FP_TC_DEFAULT_CONFIG_D128 2
#define FP_TC_DEFAULT_CONFIG_D256 1
#define FP_TC_PAGED_CONFIG_D64    2
#define FP_TC_PAGED_CONFIG_D128   2
#define FP_TC_PAGED_CONFIG_D256   1
#define FP_TC_SOFTCAP_ALIBI_CONFIG_D64  1
#define FP_TC_SOFTCAP_ALIBI_CONFIG_D128 2
#define FP_TC_SOFTCAP_ALIBI_CONFIG_D256 1
#define FP_TC_MASKED_CONFIG_D64   2
#define FP_TC_MASKED_CONFIG_D128  1
#define FP_TC_MASKED_CONFIG_D256  1
#define FP_TC_MODIFIED_CONFIG_D64  0
#define FP_TC_MODIFIED_CONFIG_D128 2
#define FP_TC_MODIFIED_CONFIG_D256 1

/* The masked instance on a narrow window (its left + right + 1 keys at most
 * FP_TC_NARROW_WINDOW_KEYS, causal counting as right = 0): the fewest keys a tile at d = 64 and
 * d = 128, which measured 5-24% faster than the masked defaults on bands of 128 to 1025 keys,
 * level at d = 128 and 5% slower at d = 64 on 2048; at d = 256 the default stands
 * (bench/results). */
#define FP_TC_NARROW_WINDOW_KEYS 1536
#define FP_TC_NARROW_WINDOW_CONFIG_D64  0
#define FP_TC_NARROW_WINDOW_CONFIG_D128 0
#define FP_TC_NARROW_WINDOW_CONFIG_D256 1

#endif /* FP_MMA_TILE_CONFIGS_H */
