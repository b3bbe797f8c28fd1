/*
 * Split-KV workspace sizing, split choice and the merge of the partial results (split_kv.h).
 *
 * The merge runs one block per query row. Its threads are MERGE_GROUPS groups of 32 lanes (a
 * warp on NVIDIA, half a wave on CDNA, so the launch shape needs no wave size on the host):
 * group g takes splits g, g + MERGE_GROUPS, ..., and each lane a strided set of columns, so
 * the loads of every split are in flight together. A merge is a chain of dependent loads when
 * one group walks all the splits (a memory latency per split: decode's tens of splits cost
 * tens of microseconds that way); here it is a handful of latencies whatever the split count.
 * The groups' sums meet in shared memory, a chunk of columns at a time, so registers and shared
 * memory stay bounded for any d.
 */
#include <math.h>
#include <stdio.h>

#include "common/dtype.cuh"
#include "common/online_softmax.cuh"
#include "common/warp_reduce.cuh"
#include "split_kv.h"

namespace {

constexpr int MERGE_LANES = 32;  /* lanes per group; fits the wave of every target */
constexpr int MERGE_GROUPS = 8;  /* groups per block, each summing its share of the splits */
constexpr int MERGE_COLS_PER_LANE = 8;
constexpr int MERGE_CHUNK = MERGE_LANES * MERGE_COLS_PER_LANE; /* columns per pass */
constexpr int MERGE_THREADS = MERGE_LANES * MERGE_GROUPS;

struct merge_args {
    const float *part_o;  /* [splits][rows][d] */
    const float *part_ml; /* [splits][rows][2] */
    void *o;
    float *lse;
    flashport_strides os;
    int64_t rows;
    int heads_q, nq, d, splits;
    int q_varlen; /* rows are (head, packed query row): h * total_q + t */
    int64_t total_q;
};

/* The block's maximum (IS_MAX) or sum of v: within each group by shuffles, then across the
 * groups through red[MERGE_GROUPS]. Every thread gets the result. */
template <bool IS_MAX> __device__ float merge_block_reduce(float v, float *red) {
    const int lane = threadIdx.x % MERGE_LANES, group = threadIdx.x / MERGE_LANES;
    v = IS_MAX ? fp_group_max<MERGE_LANES>(v) : fp_group_sum<MERGE_LANES>(v);
    __syncthreads(); /* red may still be read by the previous reduction */
    if (lane == 0) red[group] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int g = 1; g < MERGE_GROUPS; g++) r = IS_MAX ? fmaxf(r, red[g]) : r + red[g];
    return r;
}

template <typename T>
__global__ void __launch_bounds__(MERGE_THREADS) split_kv_merge_kernel(merge_args a) {
    __shared__ float sums[MERGE_GROUPS][MERGE_CHUNK];
    __shared__ float red[MERGE_GROUPS];
    const int lane = threadIdx.x % MERGE_LANES, group = threadIdx.x / MERGE_LANES;
    const int64_t row = blockIdx.x;

    const float2 *ml = (const float2 *)a.part_ml;
    float m_max = -INFINITY;
    for (int s = threadIdx.x; s < a.splits; s += MERGE_THREADS)
        m_max = fmaxf(m_max, ml[s * a.rows + row].x);
    m_max = merge_block_reduce<true>(m_max, red);
    /* -inf - (-inf) would be NaN; when no split saw a key every weight is 0 anyway. */
    const float base = m_max == -INFINITY ? 0.0f : m_max;

    float total = 0.0f;
    for (int s = threadIdx.x; s < a.splits; s += MERGE_THREADS) {
        const float2 v = ml[s * a.rows + row];
        total += v.y * exp2f(v.x - base);
    }
    total = merge_block_reduce<false>(total, red);
    const float inv_total = total == 0.0f ? 0.0f : 1.0f / total;

    T *o = (T *)a.o;
    if (a.q_varlen) {
        o += row / a.total_q * a.os.head + row % a.total_q * a.os.seq;
    } else {
        const int64_t b = row / ((int64_t)a.heads_q * a.nq);
        const int64_t h = (row / a.nq) % a.heads_q, i = row % a.nq;
        o += b * a.os.batch + h * a.os.head + i * a.os.seq;
    }

    for (int c0 = 0; c0 < a.d; c0 += MERGE_CHUNK) {
        float acc[MERGE_COLS_PER_LANE];
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++) acc[k] = 0.0f;
#pragma unroll 2
        for (int s = group; s < a.splits; s += MERGE_GROUPS) {
            const float2 v = ml[s * a.rows + row];
            /* A split without keys has m = -inf, l = 0 and part_o = 0: its weight is exactly 0
             * (exp2(-inf) = 0, and base is finite), so 0 * part_o adds nothing. */
            const float w = v.y * exp2f(v.x - base) * inv_total;
            const float *po = a.part_o + (s * a.rows + row) * a.d;
#pragma unroll
            for (int k = 0; k < MERGE_COLS_PER_LANE; k++) {
                const int c = c0 + k * MERGE_LANES + lane;
                if (c < a.d) acc[k] = fmaf(w, po[c], acc[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++) sums[group][k * MERGE_LANES + lane] = acc[k];
        __syncthreads();
        for (int c = threadIdx.x; c < MERGE_CHUNK && c0 + c < a.d; c += MERGE_THREADS) {
            float sum = 0.0f;
#pragma unroll
            for (int g = 0; g < MERGE_GROUPS; g++) sum += sums[g][c];
            o[c0 + c] = fp_from_f32<T>(sum);
        }
        __syncthreads(); /* sums is rewritten by the next chunk */
    }
    if (a.lse && threadIdx.x == 0)
        a.lse[row] = total == 0.0f ? -INFINITY : (m_max + log2f(total)) * FP_LN2;
}

template <typename T> void launch_merge(const merge_args &a, gpuStream_t stream) {
    split_kv_merge_kernel<T> FP_GPU_LAUNCH((unsigned)a.rows, MERGE_THREADS, 0, stream)(a);
}

size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

} // namespace

/* Rows are numbered as the LSE is: [batch, heads_q, seq_q], or [heads_q, total_q] packed. */
int64_t fp_split_kv_rows(const fp_problem *p) {
    return p->q_varlen ? p->heads_q * p->total_q : p->batch * p->heads_q * p->seq_q;
}

int fp_split_kv_takes(const fp_problem *p, char *why, size_t why_len) {
    if (!p->q_varlen) return 1;
    snprintf(why, why_len,
             "%s with packed Q: the split merge would write packed rows of no "
             "sequence, so the unsplit form takes it",
             fp_feature_name(FP_FEATURE_VARLEN));
    return 0;
}

size_t fp_split_kv_ml_offset(const fp_problem *p, int splits) {
    return align16((size_t)splits * (size_t)fp_split_kv_rows(p) * (size_t)p->head_dim *
                   sizeof(float));
}

size_t fp_split_kv_workspace(const fp_problem *p, int splits) {
    if (splits < 2) return 0;
    return fp_split_kv_ml_offset(p, splits) +
           (size_t)splits * (size_t)fp_split_kv_rows(p) * 2 * sizeof(float);
}

size_t fp_split_kv_kernel_workspace(const fp_problem *p, const fp_gpu_kernel_params *params) {
    return fp_split_kv_workspace(p, params->split_kv.splits);
}

int fp_split_kv_choose(const fp_problem *p, const fp_gpu_device_props *props, int block_rows,
                       int min_keys_per_split) {
    const int64_t sms = props->sm_count > 0 ? props->sm_count : 1;
    const int64_t blocks = p->batch * p->heads_q * ((p->seq_q + block_rows - 1) / block_rows);
    const int64_t target = 2 * sms;
    if (blocks >= target || min_keys_per_split < 1) return 1;
    int64_t most = (target + blocks - 1) / blocks;
    if (most > p->seq_kv / min_keys_per_split) most = p->seq_kv / min_keys_per_split;
    /* Time goes as (waves of blocks) x (keys per block): ceil(blocks*s/sms) / s. Take the
     * fewest splits that reach the least, so that a third, mostly idle wave is never paid for
     * and the merge stays small. */
    int64_t best = 1;
    for (int64_t s = 2; s <= most; s++) {
        const int64_t waves = (blocks * s + sms - 1) / sms,
                      best_waves = (blocks * best + sms - 1) / sms;
        if (waves * best < best_waves * s) best = s;
    }
    return (int)best;
}

fp_split_kv_params fp_split_kv_share(const fp_problem *p, int splits, int key_tile) {
    fp_split_kv_params s = {};
    const int64_t per = (p->seq_kv + splits - 1) / splits;
    s.keys_per_split = (int)((per + key_tile - 1) / key_tile * key_tile);
    s.splits = (int)((p->seq_kv + s.keys_per_split - 1) / s.keys_per_split);
    return s;
}

gpuError_t fp_split_kv_merge(const fp_gpu_launch *L, int splits) {
    const fp_problem *p = &L->p;
    merge_args a;
    a.part_o = (const float *)L->workspace;
    a.part_ml = (const float *)((const char *)L->workspace + fp_split_kv_ml_offset(p, splits));
    a.o = L->o;
    a.lse = L->lse;
    a.os = p->o;
    a.rows = fp_split_kv_rows(p);
    a.heads_q = (int)p->heads_q;
    a.nq = (int)p->seq_q;
    a.d = (int)p->head_dim;
    a.splits = splits;
    a.q_varlen = p->q_varlen;
    a.total_q = p->total_q;
    FP_DISPATCH_DTYPE(p->out_dtype, T, launch_merge<T>(a, L->stream));
    return gpuGetLastError();
}
