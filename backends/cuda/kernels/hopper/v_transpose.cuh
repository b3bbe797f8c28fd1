/*
 * The FP8 forward's pre-pass: V [batch][keys][heads_kv][D] (any strides of whole 16-byte rows)
 * -> V^T [batch][heads_kv][D][keys_pad], keys_pad = Nkv rounded up to the 128-key tile, the
 * keys of each 16 renumbered as fragment_layout.h's fp_hopper_vt_key says and keys past Nkv
 * zero. 8-bit wgmma reads its B operand K-major only, so P V needs V with the keys contiguous;
 * the renumbering lets P's e4m3 operand be packed from the S accumulators without moving bytes
 * between threads. Zeros past Nkv meet P = 0 (masked keys), never a stray NaN.
 *
 * One block per 128 keys of one (batch, kv head): the rows in by 16-byte loads, the bytes
 * through shared memory, V^T's rows out by 16-byte stores. It reads and writes V's bytes once
 * each, against the forward's N / 128 passes over K and V per head.
 */
#ifndef FP_HOPPER_V_TRANSPOSE_CUH
#define FP_HOPPER_V_TRANSPOSE_CUH

#include <stdint.h>

#include "../../kernel_table.h"
#include "fragment_layout.h"

#define FP_HOPPER_VT_KEYS    128 /* keys of a block: the forward's key tile */
#define FP_HOPPER_VT_THREADS 256

template <int D>
__global__ void __launch_bounds__(FP_HOPPER_VT_THREADS)
    fp_hopper_v_transpose(const uint8_t *v, flashport_strides vs, int nkv, int heads_kv,
                          int keys_pad, uint8_t *vt) {
    constexpr int KEYS = FP_HOPPER_VT_KEYS, CHUNKS = D / 16, PITCH = D + 16;
    __shared__ __align__(16) uint8_t tile[KEYS * PITCH];
    const int key0 = blockIdx.x * KEYS;
    const int b = blockIdx.y / heads_kv, hk = blockIdx.y % heads_kv;
    const uint8_t *src = v + (int64_t)b * vs.batch + (int64_t)hk * vs.head;
    for (int c = threadIdx.x; c < KEYS * CHUNKS; c += FP_HOPPER_VT_THREADS) {
        const int key = c / CHUNKS, chunk = c % CHUNKS;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (key0 + key < nkv)
            x = *reinterpret_cast<const uint4 *>(src + (int64_t)(key0 + key) * vs.seq + 16 * chunk);
        *reinterpret_cast<uint4 *>(tile + key * PITCH + 16 * chunk) = x;
    }
    __syncthreads();
    uint8_t *dst = vt + (int64_t)blockIdx.y * D * keys_pad + key0;
    for (int c = threadIdx.x; c < D * (KEYS / 16); c += FP_HOPPER_VT_THREADS) {
        const int row = c / (KEYS / 16), col0 = 16 * (c % (KEYS / 16));
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = 0;
#pragma unroll
            for (int e = 0; e < 4; ++e)
                w[i] |= (uint32_t)tile[fp_hopper_vt_key(col0 + 4 * i + e) * PITCH + row] << (8 * e);
        }
        *reinterpret_cast<uint4 *>(dst + (int64_t)row * keys_pad + col0) =
            make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Keys of V^T's rows: Nkv rounded up to the tile. */
static inline int64_t fp_hopper_vt_keys(int64_t nkv) {
    return (nkv + FP_HOPPER_VT_KEYS - 1) / FP_HOPPER_VT_KEYS * FP_HOPPER_VT_KEYS;
}

#endif /* FP_HOPPER_V_TRANSPOSE_CUH */
