/*
 * Ladder step 3: register tiling with warp-shuffle reductions. Each thread keeps a 2 x 2 tile
 * of scores (2 query rows x 2 keys) and a 2 x 4 tile of outputs in registers, so the
 * online-softmax update never leaves registers, and a tile's row max and sum are 32-lane
 * shuffles with no barrier, where step 2 needed a barrier at every halving of its tree. The
 * independent FMA chains of the register tile are the rest of the gain. The kernel itself is
 * register_tile.cuh; this file picks its shape.
 */
#include "../../kernel_list.h"
#include "register_tile.cuh"

/* 8 row groups x 2 rows = 16 query rows, 64 keys per tile, 128 output columns per block. */
#define RT_WARPS 8
#define RT_ROWS 2
#define RT_KEYS 2
#define RT_COLS 4
FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_register_tiled = {
    {"register_tiled",
     "ladder 3: per-thread register tiles (2x2 scores, 2x4 outputs), warp-shuffle reductions",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    fp_register_tile_supports<RT_WARPS, RT_ROWS, RT_KEYS, RT_COLS, false>,
    NULL,
    fp_register_tile_launch<RT_WARPS, RT_ROWS, RT_KEYS, RT_COLS, false>,
};
