/*
 * Split-KV workspace sizing, split choice and the merge of the partial results (split_kv.h).
 *
 * The merge runs one group of 32 lanes per query row (a warp on NVIDIA, half a wave on CDNA, so
 * the launch shape needs no wave size on the host). The group first finds the row's overall
 * maximum M and the total weight sum_s l_s 2^(m_s - M) with the lanes sharing out the splits,
 * then sums the weighted partial outputs a chunk of columns at a time, so registers stay bounded
 * for any d.
 */
#include <math.h>
#include <stdio.h>

#include "common/dtype.cuh"
#include "common/online_softmax.cuh"
#include "common/warp_reduce.cuh"
#include "split_kv.h"

namespace {

constexpr int MERGE_LANES = 32;        /* lanes per row; fits the wave of every target */
constexpr int MERGE_ROWS = 4;          /* rows per block */
constexpr int MERGE_COLS_PER_LANE = 8; /* columns each lane accumulates per pass over splits */

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

template <typename T>
__global__ void __launch_bounds__(MERGE_ROWS *MERGE_LANES) split_kv_merge_kernel(merge_args a) {
    const int lane = threadIdx.x % MERGE_LANES;
    const int64_t row = (int64_t)blockIdx.x * MERGE_ROWS + threadIdx.x / MERGE_LANES;
    if (row >= a.rows) return;

    const float2 *ml = (const float2 *)a.part_ml;
    float m_max = -INFINITY;
    for (int s = lane; s < a.splits; s += MERGE_LANES) m_max = fmaxf(m_max, ml[s * a.rows + row].x);
    m_max = fp_group_max<MERGE_LANES>(m_max);
    /* -inf - (-inf) would be NaN; when no split saw a key every weight is 0 anyway. */
    const float base = m_max == -INFINITY ? 0.0f : m_max;

    float total = 0.0f;
    for (int s = lane; s < a.splits; s += MERGE_LANES) {
        float2 v = ml[s * a.rows + row];
        total += v.y * exp2f(v.x - base);
    }
    total = fp_group_sum<MERGE_LANES>(total);
    const float inv_total = total == 0.0f ? 0.0f : 1.0f / total;

    T *o = (T *)a.o;
    if (a.q_varlen) {
        o += row / a.total_q * a.os.head + row % a.total_q * a.os.seq;
    } else {
        const int64_t b = row / ((int64_t)a.heads_q * a.nq);
        const int64_t h = (row / a.nq) % a.heads_q, i = row % a.nq;
        o += b * a.os.batch + h * a.os.head + i * a.os.seq;
    }

    constexpr int CHUNK = MERGE_LANES * MERGE_COLS_PER_LANE;
    for (int c0 = 0; c0 < a.d; c0 += CHUNK) {
        float acc[MERGE_COLS_PER_LANE];
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++) acc[k] = 0.0f;
            /* Unrolled and without branches, so that the loads of several splits are in flight at
             * once: with tens of splits a serial chain of loads is what the merge would cost. */
#pragma unroll 8
        for (int s = 0; s < a.splits; s++) {
            const float2 v = ml[s * a.rows + row];
            /* A split without keys has m = -inf, l = 0 and part_o = 0: its weight is exactly 0
             * (exp2(-inf) = 0, and base is finite), so 0 * part_o adds nothing. */
            const float w = v.y * exp2f(v.x - base) * inv_total;
            const float *po = a.part_o + (s * a.rows + row) * a.d;
#pragma unroll
            for (int k = 0; k < MERGE_COLS_PER_LANE; k++) {
                int c = c0 + k * MERGE_LANES + lane;
                if (c < a.d) acc[k] = fmaf(w, po[c], acc[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++) {
            int c = c0 + k * MERGE_LANES + lane;
            if (c < a.d) o[c] = fp_from_f32<T>(acc[k]);
        }
    }
    if (a.lse && lane == 0)
        a.lse[row] = total == 0.0f ? -INFINITY : (m_max + log2f(total)) * FP_LN2;
}

template <typename T> void launch_merge(const merge_args &a, gpuStream_t stream) {
    unsigned grid = (unsigned)((a.rows + MERGE_ROWS - 1) / MERGE_ROWS);
    split_kv_merge_kernel<T> FP_GPU_LAUNCH(grid, MERGE_ROWS * MERGE_LANES, 0, stream)(a);
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
