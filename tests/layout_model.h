/* What the host tests of the tensor-core kernels' index maps (tests/cuda_mma_layout,
 * tests/cuda_tf32x3_layout) share: counted checks, the test values placed in a swizzled
 * shared-memory tile, and the check of a tile loader's thread-to-chunk map. Each kernel's own
 * maps come in as function pointers, so that one model serves both element widths. */
#ifndef FP_TEST_LAYOUT_MODEL_H
#define FP_TEST_LAYOUT_MODEL_H

#include <stdio.h>
#include <stdlib.h>

static int failures, checks;

/* Counts the check; prints the first 20 failures with where they are. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond) && failures++ < 20) {                                                          \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

enum { LANES = 32 };

/* Shared memory on the devices the configurations are sized for (sm_90): what one block may
 * opt into, and what an SM has, each block also holding 1 KiB reserved by the system. */
enum { SMEM_PER_BLOCK = 227 * 1024, SMEM_PER_SM = 228 * 1024, SMEM_RESERVED = 1024 };

/* A kernel's swizzle: element offset of element 0 of chunk `chunk` of row `row`. */
typedef int (*swizzle_fn)(int row, int chunk, int chunks_per_row);
/* A tile loader's map: the row thread tid copies in a pass, and its chunk. */
typedef int (*load_row_fn)(int tid, int pass, int chunks_per_row, int threads);
typedef int (*load_chunk_fn)(int tid, int chunks_per_row);

/* Small values that differ along rows and columns and are not affine in either, so that a
 * misplaced element changes a product. */
static int value(int seed, int row, int col) {
    return ((row * 131 + col * 71 + seed * 29) ^ (row * col)) % 7 - 3;
}

/* Writes rows x d values into a swizzled tile of 16-byte chunks of `chunk_elems` elements;
 * checks that every slot is written once. */
static void place_tile(int *smem, int rows, int d, int seed, int chunk_elems, swizzle_fn swizzle) {
    const int cpr = d / chunk_elems;
    char *used = calloc((size_t)rows * d, 1);
    for (int r = 0; r < rows; ++r)
        for (int col = 0; col < d; ++col) {
            const int at = swizzle(r, col / chunk_elems, cpr) + col % chunk_elems;
            EXPECT(at >= 0 && at < rows * d && !used[at], "swizzle d=%d row %d col %d -> %d", d, r,
                   col, at);
            if (at >= 0 && at < rows * d) {
                used[at] = 1;
                smem[at] = value(seed, r, col);
            }
        }
    free(used);
}

/* A tile load covers every chunk once, and each phase of eight 16-byte stores lands in eight
 * different 16-byte bank groups (one wavefront). */
static void check_loader(int rows, int d, int threads, int chunk_elems, load_row_fn load_row,
                         load_chunk_fn load_chunk, swizzle_fn swizzle) {
    const int cpr = d / chunk_elems, passes = rows * cpr / threads;
    EXPECT(threads % cpr == 0 && rows * cpr % threads == 0, "loader d=%d rows %d threads %d", d,
           rows, threads);
    char *hit = calloc((size_t)rows * cpr, 1);
    for (int pass = 0; pass < passes; ++pass)
        for (int phase = 0; phase < threads / 8; ++phase) {
            int seen = 0;
            for (int i = 0; i < 8; ++i) {
                const int tid = 8 * phase + i;
                const int row = load_row(tid, pass, cpr, threads);
                const int chunk = load_chunk(tid, cpr);
                EXPECT(row < rows && !hit[row * cpr + chunk], "load d=%d tid %d pass %d", d, tid,
                       pass);
                if (row < rows) hit[row * cpr + chunk] = 1;
                seen |= 1 << ((swizzle(row, chunk, cpr) / chunk_elems) % 8);
            }
            EXPECT(seen == 0xff, "load d=%d pass %d phase %d bank groups 0x%02x", d, pass, phase,
                   seen);
        }
    for (int i = 0; i < rows * cpr; ++i) EXPECT(hit[i], "load d=%d chunk %d never written", d, i);
    free(hit);
}

#endif /* FP_TEST_LAYOUT_MODEL_H */
