/*
 * Per-thread scratch of the cpu_simd paths (forward tiles, decode, backward): the integer
 * helpers their sizing shares, and cs_scratch_place, which lays out one array after another,
 * each on a cache line of its own so that no two threads' arrays, and no two arrays of one
 * thread, share a line.
 */
#ifndef CS_SCRATCH_H
#define CS_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#define CS_SCRATCH_ALIGN 64 /* bytes of a cache line */

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* The offset of an array of n elements of elem_size bytes placed at *at; advances *at past it,
 * rounded up to a cache line. */
static inline size_t cs_scratch_place(size_t *at, int64_t n, size_t elem_size) {
    const size_t offset = *at;
    *at += (size_t)round_up(n * (int64_t)elem_size, CS_SCRATCH_ALIGN);
    return offset;
}

#endif /* CS_SCRATCH_H */
