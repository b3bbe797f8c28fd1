/*
 * The tile configuration of the 3xTF32 forward for each padded head dim, one list shared by the
 * kernel (tensor_core_tf32x3.cu makes each entry a kernel instance) and by the host test of the
 * index maps (tests/cuda_tf32x3_layout), which replays every entry. Plain C.
 *
 * X(D, INDEX, WARPS, M_TILES, BC, STAGES, MIN_BLOCKS):
 *   D          padded head dim (64, 128, 256; a multiple of 32 for the swizzle);
 *   INDEX      the config's number within its D, 0 upwards (FLASHPORT_CUDA_TF32X3_CONFIG picks
 *              it, for tuning);
 *   WARPS x M_TILES x 16 query rows a block, each warp owning M_TILES slices of 16 rows (two
 *              slices halve the shared loads and operand splits of K and V per product, at
 *              twice the registers for O and S);
 *   BC         keys a tile (a multiple of 8);
 *   STAGES     K/V tiles in flight in the cp.async ring (>= 2);
 *   MIN_BLOCKS blocks an SM for __launch_bounds__ (caps registers at 64K / (MIN_BLOCKS * 32 *
 *              WARPS); the entries stay spill-free under that cap except d = 128 index 3,
 *              which spills a few words, ptxas -v).
 * Shared memory a block: 4 bytes x D x (16 WARPS M_TILES + STAGES x 2 x BC).
 *
 * Why these: f32 tiles take twice the bytes of f16 ones, and every operand is split in
 * registers, so the sizes trade shared memory (blocks an SM) against registers (O is D/2 of
 * them a lane, the split K fragments of one column chunk BC). The defaults are the fastest of
 * KERNEL=tensor_core_tf32x3 scripts/tc-sweep.sh on the H200 (f32, N = 4096; bench/results);
 * at d = 128 config 2 (one 8-warp block an SM) ran within 1% of config 0 in the last sweep
 * (59.1 against 58.4 TFLOP/s), inside the run-to-run spread, and config 0 stays.
 */
#ifndef FP_TF32X3_TILE_CONFIGS_H
#define FP_TF32X3_TILE_CONFIGS_H

#define FP_TF32X3_CONFIG_LIST(X)                                                                   \
    X(64, 0, 4, 1, 32, 3, 3)                                                                       \
    X(64, 1, 4, 1, 64, 2, 2)                                                                       \
    X(64, 2, 8, 1, 32, 2, 1)                                                                       \
    X(64, 3, 4, 2, 32, 2, 2)                                                                       \
    X(128, 0, 4, 1, 32, 2, 2)                                                                      \
    X(128, 1, 4, 1, 16, 3, 2)                                                                      \
    X(128, 2, 8, 1, 32, 2, 1)                                                                      \
    X(128, 3, 4, 2, 16, 2, 2)                                                                      \
    X(256, 0, 4, 1, 16, 2, 1)

/* The config each padded head dim runs when FLASHPORT_CUDA_TF32X3_CONFIG is not set. */
#define FP_TF32X3_DEFAULT_CONFIG_D64  3
#define FP_TF32X3_DEFAULT_CONFIG_D128 0
#define FP_TF32X3_DEFAULT_CONFIG_D256 0

#endif /* FP_TF32X3_TILE_CONFIGS_H */
