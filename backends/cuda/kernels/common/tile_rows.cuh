/*
 * Where the rows of a tile come from, for the tile loaders of the tensor-core forwards
 * (mma/tile_loader.cuh, tf32x3/tile_load.cuh): a source's at(r) gives the first element of row r
 * of each of the N tensors loaded together (K and V of a key tile share each row's look-up), and
 * origin() a mapped address that zero-size copies name. Loaders ask at() only for rows the
 * tile reads, so a source may read tables there.
 */
#ifndef FP_KERNELS_TILE_ROWS_CUH
#define FP_KERNELS_TILE_ROWS_CUH

#include <stdint.h>

#include "kv_addressing.cuh"

/* Row r of each of N tensors. */
template <typename T, int N> struct fp_tile_rows { const T *p[N]; };

/* Rows `stride` elements apart from `base`, per tensor. */
template <typename T, int N> struct fp_strided_rows {
    const T *base[N];
    int64_t stride[N];

    __device__ __forceinline__ fp_tile_rows<T, N> at(int r) const {
        fp_tile_rows<T, N> x;
#pragma unroll
        for (int i = 0; i < N; ++i) x.p[i] = base[i] + r * stride[i];
        return x;
    }
    __device__ __forceinline__ fp_tile_rows<T, N> origin() const {
        fp_tile_rows<T, N> x;
#pragma unroll
        for (int i = 0; i < N; ++i) x.p[i] = base[i];
        return x;
    }
};

/* The K and V rows of the key tile from key kb of sequence s, kv head hk, in a paged cache:
 * each row looked up in the block table once for both. */
template <typename T> struct fp_paged_kv_rows {
    const T *k, *v;
    fp_seq_layout seq;
    fp_seq s;
    flashport_strides ks, vs;
    int hk, kb;

    __device__ __forceinline__ fp_tile_rows<T, 2> at(int r) const {
        const fp_kv_rows x = fp_kv_row_offsets(seq, s, ks, vs, hk, kb + r);
        return {{k + x.k, v + x.v}};
    }
    __device__ __forceinline__ fp_tile_rows<T, 2> origin() const { return {{k, v}}; }
};

#endif /* FP_KERNELS_TILE_ROWS_CUH */
