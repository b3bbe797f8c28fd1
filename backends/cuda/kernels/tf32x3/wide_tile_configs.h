/*
 * Tile configurations of the wide-head 3xTF32 forward (wide_forward_kernel.cuh), one list for
 * the kernel instances in tensor_core_tf32x3_wide.cu. Plain C.
 *
 * X(D, INDEX, M_TILES, BC):
 *   D        padded head dim (512 or 1024), split across the block's eight warps;
 *   INDEX    the config's number within its D (FLASHPORT_CUDA_TF32X3_WIDE_CONFIG picks it);
 *   M_TILES  slices of 16 query rows a block: every K/V byte brought in from L2 serves 16
 *            M_TILES rows, and O takes D/16 M_TILES registers a lane;
 *   BC       keys a tile (a multiple of 8).
 * Shared memory a block: 4 bytes x (16 M_TILES D + 4 BC D + 256 M_TILES BC) (Q, four half-tile
 * slots, two partial-score buffers), within the 227 KiB an sm_90 block may opt into.
 *
 * Why these: the four slots at d = 1024 leave room for 16 rows and 8-key tiles only; at
 * d = 512 there is room for 32 rows. The defaults are the fastest on the H200
 * (scripts/gpu-run.sh wide-sweep; bench/results).
 */
#ifndef FP_TF32X3_WIDE_TILE_CONFIGS_H
#define FP_TF32X3_WIDE_TILE_CONFIGS_H

#define FP_TF32X3_WIDE_CONFIG_LIST(X)                                                          \
    X(512, 0, 2, 16)                                                                           \
    X(512, 1, 1, 16)                                                                           \
    X(1024, 0, 1, 8)

#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D512 0
#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D1024 0

#endif /* FP_TF32X3_WIDE_TILE_CONFIGS_H */
