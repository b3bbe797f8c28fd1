/*
 * Where the Hopper forward keeps each element: its shared-memory tiles (as TMA writes them with
 * 128-byte swizzle), the wgmma shared-memory descriptors that read them back, and which
 * accumulator and A-operand registers of a warpgroup hold which element (PTX ISA, "Register
 * Fragments and Shared Memory Matrix Layouts" for wgmma.mma_async.m64nNk16). Plain host and
 * device functions, so that tests/cuda_hopper_layout checks them on the CPU.
 *
 * Shared-memory tile: R rows (queries or keys) of D 16-bit columns, D a multiple of 64, stored as
 * D / 64 column panels of R rows x 128 bytes, panel p holding columns [64p, 64p + 64). Each
 * panel is one TMA box; with CU_TENSOR_MAP_SWIZZLE_128B the box puts the 16-byte unit u of row r
 * at unit u ^ (r % 8) of that row, which is the Swizzle<3,4,3> pattern wgmma undoes when the
 * panel starts on a 1024-byte boundary (each 8-row group is one 1024-byte swizzle atom).
 *
 * Descriptors (64 bits): start address >> 4 in bits 0-13, leading-dimension byte offset >> 4 in
 * 16-29, stride-dimension byte offset >> 4 in 32-45, base offset 0 (atoms 1024-aligned) in
 * 49-51, layout 1 = 128-byte swizzle in 62-63.
 *   - K-major operand (Q as A and K as B of S = Q K^T; rows M or N, columns K): the k-step kk
 *     (columns [16kk, 16kk + 16), 32 bytes) starts in panel kk / 4 at byte 32 (kk % 4) of its
 *     first row (rows: the panel height, the whole tile's rows even where an operand is a
 *     64-row slice of it); the hardware adds the row offsets and then applies the swizzle to the
 * whole address, so the advance inside an atom is a plain add. SBO = 1024 (8-row groups); LBO is
 *     unused for swizzled K-major layouts and encoded as 1.
 *   - N-major operand (V as B of O = P V; rows K = keys, columns N = head dim): the k-step kk
 *     (keys [16kk, 16kk + 16)) starts at row 16kk of panel 0; SBO = 1024 (next 8 keys), LBO =
 *     the panel size R * 128 (next 64 columns of N).
 *
 * Accumulator of m64nNk16 (f32, N / 2 registers a thread): thread t of the warpgroup, warp
 * w = t / 32, lane l; register i holds row 16w + l / 4 + 8 ((i / 2) % 2) and column
 * 8 (i / 4) + 2 (l % 4) + i % 2 -- the mma.sync m16n8 layout, one n8 block per 4 registers.
 * A operand from registers (4 registers of two 16-bit elements): register j, half e holds row
 * 16w + l / 4 + 8 (j % 2) and column 2 (l % 4) + 8 (j / 2) + e. So the accumulator registers
 * [8kk, 8kk + 8) of S, packed in pairs, are exactly the A operand of P's k-step kk.
 */
#ifndef FP_HOPPER_FRAGMENT_LAYOUT_H
#define FP_HOPPER_FRAGMENT_LAYOUT_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FP_HOPPER_HD __host__ __device__ __forceinline__
#else
#define FP_HOPPER_HD static inline
#endif

#define FP_HOPPER_PANEL_COLS   64   /* 16-bit columns of one 128-byte swizzled row */
#define FP_HOPPER_ATOM_BYTES   1024 /* one 8-row swizzle atom */
#define FP_HOPPER_LAYOUT_SW128 1ull

/* Byte offset of element (row, col) in a tile of `rows` rows, as TMA's 128-byte swizzle
 * writes it. */
FP_HOPPER_HD uint32_t fp_hopper_tile_offset(int rows, int row, int col) {
    const uint32_t panel = (uint32_t)(col / FP_HOPPER_PANEL_COLS);
    const uint32_t unit = (uint32_t)((col % FP_HOPPER_PANEL_COLS) / 8) ^ (uint32_t)(row % 8);
    return panel * (uint32_t)rows * 128u + (uint32_t)row * 128u + unit * 16u +
           (uint32_t)(col % 8) * 2u;
}

FP_HOPPER_HD uint64_t fp_hopper_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (FP_HOPPER_LAYOUT_SW128 << 62);
}

/* Descriptor of a K-major tile at tile_addr (its k-step 0), and the bytes from there to the
 * start of k-step kk in a tile of `rows` rows. */
FP_HOPPER_HD uint64_t fp_hopper_desc_k_major(uint32_t tile_addr) {
    return fp_hopper_desc(tile_addr, 16u, FP_HOPPER_ATOM_BYTES);
}
FP_HOPPER_HD uint32_t fp_hopper_k_major_step(int rows, int kk) {
    return (uint32_t)(kk / 4) * (uint32_t)rows * 128u + (uint32_t)(kk % 4) * 32u;
}

/* Descriptor of an N-major tile at tile_addr with `rows` (= K) rows (its k-step 0), and the
 * bytes from there to the start of k-step kk. */
FP_HOPPER_HD uint64_t fp_hopper_desc_n_major(uint32_t tile_addr, int rows) {
    return fp_hopper_desc(tile_addr, (uint32_t)rows * 128u, FP_HOPPER_ATOM_BYTES);
}
FP_HOPPER_HD uint32_t fp_hopper_n_major_step(int kk) { return (uint32_t)kk * 16u * 128u; }

/* The descriptor `bytes` further on: an add to the start-address field alone, so that the
 * kernels build a tile's descriptor once and step it with constants. Valid while the address
 * stays inside shared memory's 256 KB window (the field cannot carry into the next one). */
FP_HOPPER_HD uint64_t fp_hopper_desc_step(uint64_t desc, uint32_t bytes) {
    return desc + (bytes >> 4);
}

/* Accumulator register i of warpgroup thread t: its row (0..63) and column. */
FP_HOPPER_HD int fp_hopper_acc_row(int t, int i) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
FP_HOPPER_HD int fp_hopper_acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

/* A-operand register j (0..3), half e (0 low, 1 high) of warpgroup thread t: row and column
 * within the 64 x 16 k-step. */
FP_HOPPER_HD int fp_hopper_a_row(int t, int j) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
}
FP_HOPPER_HD int fp_hopper_a_col(int t, int j, int e) { return 2 * (t % 4) + 8 * (j / 2) + e; }

/* The S accumulator register that becomes half e of A register j of P's k-step kk. */
FP_HOPPER_HD int fp_hopper_p_source(int kk, int j, int e) { return 8 * kk + 2 * j + e; }

/*
 * FP8 (m64nNk32, 8-bit operands). A from registers: 4 registers of four 8-bit elements; byte e
 * of register j of thread t holds row 16w + l / 4 + 8 (j % 2) and column 4 (l % 4) + e +
 * 16 (j / 2) -- not where the S accumulators hold their keys (a quad's thread holds keys
 * 2 (l % 4) + {0, 1} of each n8 block). Rather than moving bytes between threads, the keys of P
 * V's k dimension are renumbered: column c of a k-step stands for key fp_hopper_vt_key(c), the
 * key that the accumulator register fp_hopper_p8_source(kk, j, e) of the same thread holds.
 * The V^T tile that the pre-pass writes (v_transpose.cuh) puts that key's values in column c,
 * so the product sums the same (P, V) pairs. The permutation acts within each 16 keys.
 */
FP_HOPPER_HD int fp_hopper_a8_row(int t, int j) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
}
FP_HOPPER_HD int fp_hopper_a8_col(int t, int j, int e) { return 4 * (t % 4) + e + 16 * (j / 2); }
FP_HOPPER_HD int fp_hopper_vt_key(int col) {
    return (col & ~15) + 2 * ((col & 15) >> 2) + (col & 1) + 8 * ((col >> 1) & 1);
}
FP_HOPPER_HD int fp_hopper_p8_source(int kk, int j, int e) {
    return 16 * kk + 8 * (j / 2) + 4 * (e / 2) + 2 * (j % 2) + e % 2;
}

#endif /* FP_HOPPER_FRAGMENT_LAYOUT_H */
