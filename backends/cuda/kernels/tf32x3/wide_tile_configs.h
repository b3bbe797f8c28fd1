/*
 * Tile configurations of the wide-head 3xTF32 forward (wide_forward_kernel.cuh), one list for
 * the kernel instances in tensor_core_tf32x3_wide.cu. Plain C.
 *
 * X(D, INDEX, M_TILES, BC, RING):
 *   D        padded head dim (512 or 1024), split across the block's eight warps;
 *   INDEX    the config's number within its D (FLASHPORT_CUDA_TF32X3_WIDE_CONFIG picks it);
 *   M_TILES  slices of 16 query rows a block: every K/V byte brought in from L2 serves 16
 *            M_TILES rows, and O takes D/16 M_TILES registers a lane;
 *   BC       keys a tile (a multiple of 8);
 *   RING     half-tile slots (K or V of one tile) in the load ring, >= 2.
 * Shared memory a block: 4 bytes x (16 M_TILES D + RING BC D + 128 M_TILES BC), within the
 * 227 KiB an sm_90 block may opt into.
 *
 * Why these: at 16 rows a block and 1024 columns the kernel streams 8 KiB of K and V per key
 * for 16 rows and is bound by L2 bandwidth (bench/results); 32 rows halve that traffic but
 * leave room for only two 8-key slots. The defaults are the fastest on the H200 at the
 * write-up's N = d = 1024.
 */
#ifndef FP_TF32X3_WIDE_TILE_CONFIGS_H
#define FP_TF32X3_WIDE_TILE_CONFIGS_H

#define FP_TF32X3_WIDE_CONFIG_LIST(X)                                                          \
    X(512, 0, 2, 16, 3)                                                                        \
    X(512, 1, 1, 32, 2)                                                                        \
    X(1024, 0, 2, 8, 2)                                                                        \
    X(1024, 1, 1, 16, 2)                                                                       \
    X(1024, 2, 1, 8, 3)

#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D512 0
#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D1024 0

#endif /* FP_TF32X3_WIDE_TILE_CONFIGS_H */
