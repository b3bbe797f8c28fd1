/*
 * The tile configuration of the 3xTF32 forward for each padded head dim, one list shared by the
 * kernel (tensor_core_tf32x3.cu makes each entry a kernel instance) and by the host test of the
 * index maps (tests/cuda_tf32x3_layout), which replays every entry. Plain C.
 *
 * X(D, WARPS, BC, STAGES, MIN_BLOCKS):
 *   D          padded head dim (64, 128, 256; a multiple of 32 for the swizzle);
 *   WARPS      warps a block, each owning 16 query rows, so a block has 16 x WARPS rows;
 *   BC         keys a tile (a multiple of 8);
 *   STAGES     K/V tiles in flight in the cp.async ring (>= 2);
 *   MIN_BLOCKS blocks an SM for __launch_bounds__.
 * Shared memory a block: 4 bytes x D x (16 WARPS + STAGES x 2 x BC).
 *
 * Why these: f32 tiles take twice the bytes of f16 ones, and every operand is split in
 * registers (3 ALU instructions an element), so the sizes trade shared memory (blocks an SM)
 * against registers (O is D/2 of them a lane). Untuned starting points.
 */
#ifndef FP_TF32X3_TILE_CONFIGS_H
#define FP_TF32X3_TILE_CONFIGS_H

#define FP_TF32X3_CONFIG_LIST(X)                                                               \
    X(64, 8, 32, 3, 2)                                                                         \
    X(128, 4, 32, 2, 2)                                                                        \
    X(256, 4, 16, 2, 1)

#endif /* FP_TF32X3_TILE_CONFIGS_H */
