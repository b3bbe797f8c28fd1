/*
 * Ladder step 4: a wider register tile with buffer reuse. Each thread keeps 4 query rows x
 * 2 keys of scores and 4 x 4 outputs: twice step 3's outputs per thread, so each value read
 * from shared memory feeds more FMAs. K chunks and the V tile take turns in one shared buffer,
 * which shrinks the block's shared memory by 18% and lets more blocks share an SM. The
 * turn-taking is guarded by a barrier between the last read of K and the first write of V (the
 * write-up's kernels 4 and 5 reused their buffer without one: a race). The kernel itself is
 * register_tile.cuh; this file picks its shape.
 */
#include "../../kernel_list.h"
#include "register_tile.cuh"

/* 4 row groups x 4 rows = 16 query rows, 64 keys per tile, 128 output columns per block. */
#define WRT_WARPS 4
#define WRT_ROWS 4
#define WRT_KEYS 2
#define WRT_COLS 4
FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_wide_register_tile = {
    {"wide_register_tile",
     "ladder 4: wider register tiles (4x2 scores, 4x4 outputs), K and V share one buffer",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    fp_register_tile_supports<WRT_WARPS, WRT_ROWS, WRT_KEYS, WRT_COLS, true>,
    NULL,
    fp_register_tile_launch<WRT_WARPS, WRT_ROWS, WRT_KEYS, WRT_COLS, true>,
};
