/*
 * Ladder step 7: step 6's tiles and layouts, with two shared-memory stage buffers so that the
 * global loads of the next stage are in flight while the current stage computes. A block's work
 * is one stream of stages per key tile: ceil(d/32) Q/K chunks, then up to four V chunks. At every
 * stage each thread issues the loads of the following stage into registers, computes on the
 * current buffer, then stores the registers into the other buffer; one barrier per stage then
 * both publishes the new buffer and retires the old one. The stream runs across the phase
 * boundaries too: the first V chunk loads during the last Q/K chunk (and the softmax step), the
 * next tile's first Q/K chunk during the last V chunk, so no stage waits on memory alone.
 *
 * Shared memory: two stage buffers of max(Q/K chunk, V chunk) (up to 2 x 16 KiB) and P (9 KiB).
 */
#include "../../kernel_list.h"
#include "vector_tiles.cuh"

using namespace fp_vt;

template <int RW> struct stage_size {
    static constexpr int V_FLOATS = VK * TX * RW;
    static constexpr int FLOATS = V_FLOATS > QK_CHUNK_FLOATS ? V_FLOATS : QK_CHUNK_FLOATS;
};

template <typename T, int RW>
__global__ void __launch_bounds__(THREADS) kernel_double_buffered(fp_attn_args a, bool vec_q,
                                                                   bool vec_k, bool vec_v,
                                                                   bool vec_o) {
    constexpr int STAGE = stage_size<RW>::FLOATS;
    __shared__ __align__(16) float stage_s[2 * STAGE];
    __shared__ __align__(16) float p_s[BK * P_STRIDE];

    const int row0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest causal rows first */
    const int col0 = blockIdx.y * TX * RW;
    const fp_attn_head<T> H = fp_attn_head_of<T>(a, blockIdx.z);
    const int key_end = fp_block_key_end(a, row0, BQ);

    tile_state<RW> t;
    start_state(t);
    qk_chunk cq;
    v_chunk<RW> cv;
    int cur = 0; /* stage buffer being computed on; the loads go to the other one */
    if (key_end > 0) {
        fetch_qk(cq, H, a, row0, 0, 0, vec_q, vec_k);
        commit_qk(cq, stage_s);
    }
    __syncthreads();

    for (int key0 = 0; key0 < key_end; key0 += BK) {
        clear_scores(t);
        int d0 = 0;
        for (; d0 + BD < a.d; d0 += BD) {
            fetch_qk(cq, H, a, row0, key0, d0 + BD, vec_q, vec_k);
            qk_step(t, stage_s + cur * STAGE);
            commit_qk(cq, stage_s + (cur ^ 1) * STAGE);
            __syncthreads();
            cur ^= 1;
        }
        /* Last Q/K chunk: the tile's first V chunk loads meanwhile. p_s was last read before the
         * final barrier of the previous tile. */
        fetch_v(cv, H.v, a.vs.seq, a, key0, col0, vec_v);
        qk_step(t, stage_s + cur * STAGE);
        softmax_step(t, a, row0, key0, p_s);
        commit_v(cv, stage_s + (cur ^ 1) * STAGE);
        __syncthreads(); /* also publishes p_s */
        cur ^= 1;

        const int kv_end = min(BK, key_end - key0);
        int kv0 = 0;
        for (; kv0 + VK < kv_end; kv0 += VK) {
            fetch_v(cv, H.v, a.vs.seq, a, key0 + kv0 + VK, col0, vec_v);
            pv_chunk(t, p_s, stage_s + cur * STAGE, kv0, a, row0, key0 + kv0);
            commit_v(cv, stage_s + (cur ^ 1) * STAGE);
            __syncthreads();
            cur ^= 1;
        }
        /* Last V chunk: the next tile's first Q/K chunk loads meanwhile. */
        const bool more = key0 + BK < key_end;
        if (more) fetch_qk(cq, H, a, row0, key0 + BK, 0, vec_q, vec_k);
        pv_chunk(t, p_s, stage_s + cur * STAGE, kv0, a, row0, key0 + kv0);
        if (more) commit_qk(cq, stage_s + (cur ^ 1) * STAGE);
        __syncthreads(); /* the next tile rewrites p_s and this buffer */
        cur ^= 1;
    }
    write_output(t, a, H, row0, col0, vec_o);
}

struct double_buffered_kernels {
    template <typename T, int RW> static tile_kernel get() { return kernel_double_buffered<T, RW>; }
};

FP_KERNEL_ENTRY fp_gpu_kernel fp_kernel_double_buffered = {
    {"double_buffered",
     "ladder 7: step 6 with two shared-memory stage buffers, next loads overlapping compute",
     FP_PRECISION_NATIVE, FP_FEATURES_NONE},
    tiles_supports,
    NULL,
    tiles_launch<double_buffered_kernels>,
};
