/*
 * Where the rows of a tile come from, for the tile loaders of the tensor-core forwards
 * (mma/tile_loader.cuh, tf32x3/tile_load.cuh): a source's at(r) gives the first element of row r
 * of each of the N tensors loaded together (K and V of a key tile share each row's look-up), and
 * origin() a mapped address that zero-size copies name. Loaders ask at() only for rows the
 * tile reads, so a source may read tables there: rows a stride apart, or a paged tile's rows
 * from a table in shared memory filled a barrier earlier. A source whose rows a loader may walk
 * (WALKS: rows a stride apart) also gives step(), and its at() reads nothing.
 */
#ifndef FP_KERNELS_TILE_ROWS_CUH
#define FP_KERNELS_TILE_ROWS_CUH

#include <stdint.h>

#include "kv_addressing.cuh"

/* Row r of each of N tensors. */
template <typename T, int N> struct fp_tile_rows { const T *p[N]; };

/* Rows `stride` elements apart from `base`, per tensor. WALKS: a loader may step from row r to
 * row r + dr by one add (step) rather than ask at() for each row. */
template <typename T, int N> struct fp_strided_rows {
    static constexpr bool WALKS = true;
    const T *base[N];
    int64_t stride[N];

    __device__ __forceinline__ fp_tile_rows<T, N> at(int r) const {
        fp_tile_rows<T, N> x;
#pragma unroll
        for (int i = 0; i < N; ++i) x.p[i] = base[i] + r * stride[i];
        return x;
    }
    __device__ __forceinline__ fp_tile_rows<T, N> step(fp_tile_rows<T, N> x, int dr) const {
#pragma unroll
        for (int i = 0; i < N; ++i) x.p[i] += dr * stride[i];
        return x;
    }
    __device__ __forceinline__ fp_tile_rows<T, N> origin() const {
        fp_tile_rows<T, N> x;
#pragma unroll
        for (int i = 0; i < N; ++i) x.p[i] = base[i];
        return x;
    }
};

/* The K and V rows of a paged key tile (kv head hk), resolved once per row into shared memory
 * and then the loader's source. The loaders copy each row in several chunks, one a thread; had
 * each of those threads looked its rows up in the block table and redone the 64-bit address
 * arithmetic (with D = 128, 16 threads a row: about a hundred instructions per row and thread),
 * a tile's loads would issue about as many instructions as its math. Instead thread r < ROWS
 * resolves row r once (fill), and after the barrier that publishes it every chunk's thread
 * reads both row addresses in one 16-byte shared load (at). */
template <typename T, int ROWS> struct fp_paged_rows {
    static constexpr bool WALKS = false; /* each row is looked up */
    const T *k, *v;                      /* the caches' origins */
    uint64_t *rows;                      /* addresses: K's row r at [2r], V's at [2r + 1] */

    /* Rows [0, n_rows) of the tile from key kb; rows past n_rows are never read. */
    __device__ __forceinline__ void fill(const fp_seq_layout &L, const fp_seq &s,
                                         const flashport_strides &ks, const flashport_strides &vs,
                                         int hk, int kb, int n_rows) const {
        const int r = threadIdx.x;
        if (r < ROWS && r < n_rows) {
            const fp_kv_rows x = fp_kv_row_offsets(L, s, ks, vs, hk, kb + r);
            rows[2 * r] = reinterpret_cast<uint64_t>(k + x.k);
            rows[2 * r + 1] = reinterpret_cast<uint64_t>(v + x.v);
        }
    }

    __device__ __forceinline__ fp_tile_rows<T, 2> at(int r) const {
        const ulonglong2 x = reinterpret_cast<const ulonglong2 *>(rows)[r];
        return {{reinterpret_cast<const T *>(x.x), reinterpret_cast<const T *>(x.y)}};
    }
    __device__ __forceinline__ fp_tile_rows<T, 2> origin() const { return {{k, v}}; }
};

#endif /* FP_KERNELS_TILE_ROWS_CUH */
