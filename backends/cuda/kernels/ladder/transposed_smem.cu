/*
 * Ladder step 6: Q and K chunks stored transposed in shared memory ([depth][row]), so that at
 * each depth a thread reads its 4 query rows and its 4 keys as one float4 each, and the 16 lanes
 * of a row group read 16 consecutive float4 of K (no bank conflict) while Q is a broadcast. The
 * transposition happens once, on the store, with a slot mapping whose stores also hit 32
 * distinct banks. Small block tiles (32 query rows, 64 keys) with big per-thread register tiles
 * (4 x 4 scores, 4 x 16 outputs) keep 16 FMAs per pair of shared loads in the score loop and 64
 * per five in the P.V loop. Loads and compute still alternate, separated by barriers; step 7
 * overlaps them.
 *
 * Shared memory: one Q/K chunk (13 KiB), one V chunk (up to 16 KiB), P (9 KiB).
 */
#include "../../kernel_list.h"
#include "vector_tiles.cuh"

using namespace fp_vt;

template <typename T, int RW>
__global__ void __launch_bounds__(THREADS) kernel_transposed_smem(fp_attn_args a, bool vec_q,
                                                                   bool vec_k, bool vec_v,
                                                                   bool vec_o) {
    __shared__ __align__(16) float qk_s[QK_CHUNK_FLOATS];
    __shared__ __align__(16) float v_s[VK * TX * RW];
    __shared__ __align__(16) float p_s[BK * P_STRIDE];

    const int row0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest causal rows first */
    const int col0 = blockIdx.y * TX * RW;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    const int key_end = fp_block_key_end(a, row0, BQ);

    tile_state<RW> t;
    start_state(t);
    for (int key0 = 0; key0 < key_end; key0 += BK) {
        clear_scores(t);
        for (int d0 = 0; d0 < a.d; d0 += BD) {
            qk_chunk c;
            fetch_qk(c, H, a, row0, key0, d0, vec_q, vec_k);
            commit_qk(c, qk_s);
            __syncthreads();
            qk_step(t, qk_s);
            __syncthreads(); /* the next chunk overwrites qk_s */
        }
        /* p_s was last read before the final barrier of the previous tile. */
        softmax_step(t, a, row0, key0, p_s);
        for (int kv0 = 0; kv0 < BK && key0 + kv0 < key_end; kv0 += VK) {
            v_chunk<RW> c;
            fetch_v(c, H.v, a.vs.seq, a, key0 + kv0, col0, vec_v);
            commit_v(c, v_s);
            __syncthreads(); /* also publishes p_s */
            pv_chunk(t, p_s, v_s, kv0, a, row0, key0 + kv0);
            __syncthreads(); /* the next chunk overwrites v_s, the next tile p_s */
        }
    }
    write_output(t, a, H, row0, col0, vec_o);
}

struct transposed_smem_kernels {
    template <typename T, int RW> static tile_kernel get() { return kernel_transposed_smem<T, RW>; }
};

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_transposed_smem = {
    {"transposed_smem",
     "ladder 6: Q and K chunks transposed in shared memory (conflict-free float4 reads), "
     "4x4 score and 4x16 output register tiles per thread",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    tiles_supports,
    NULL,
    tiles_launch<transposed_smem_kernels>,
};
