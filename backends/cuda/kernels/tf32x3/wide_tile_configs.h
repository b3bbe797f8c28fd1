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
 * Why these: the barriers and the cross-warp score exchange are paid once a tile, so wider key
 * tiles win over more rows or deeper rings at d = 1024: on the H200 at the write-up's
 * N = d = 1024, config 1 ran in 0.149 ms, config 0 (32 rows, 8-key tiles) in 0.153 ms and
 * config 2 (three 8-key slots) in 0.169 ms (with Q in fragment order; before it 0.154, 0.168
 * and 0.183 ms, and a one-barrier schedule with four 8-key slots 0.172 ms). At d = 512
 * (B = H = 4, N = 4096) config 0 ran 14.3 ms, config 1 16.4 ms.
 */
#ifndef FP_TF32X3_WIDE_TILE_CONFIGS_H
#define FP_TF32X3_WIDE_TILE_CONFIGS_H

#define FP_TF32X3_WIDE_CONFIG_LIST(X)                                                              \
    X(512, 0, 2, 16, 3)                                                                            \
    X(512, 1, 1, 32, 2)                                                                            \
    X(1024, 0, 2, 8, 2)                                                                            \
    X(1024, 1, 1, 16, 2)                                                                           \
    X(1024, 2, 1, 8, 3)

#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D512  0
#define FP_TF32X3_WIDE_DEFAULT_CONFIG_D1024 1

#endif /* FP_TF32X3_WIDE_TILE_CONFIGS_H */
