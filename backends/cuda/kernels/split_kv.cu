/*
 * Split-KV workspace sizing, split choice and the merge of the partial results (split_kv.h).
 *
 * The merge runs one block per query row. Its threads are MERGE_GROUPS groups of 32 lanes (a
 * warp on NVIDIA, half a wave on CDNA, so the launch shape needs no wave size on the host):
 * group g takes splits g, g + MERGE_GROUPS, ..., and each lane a strided set of columns. A
 * merge is a chain of dependent loads when one group walks all the splits, or when the maxima
 * are reduced before the columns are read: decode's tens of splits cost tens of microseconds
 * the first way. Here each group keeps an online softmax over its own splits, loading a
 * split's (m, l) and columns together, so the whole merge waits about one memory latency per
 * four splits of a group; the groups' results meet in shared memory, a chunk of columns at a
 * time, so registers and shared memory stay bounded for any d.
 */
#include <math.h>
#include <stdio.h>

#include "common/dtype.cuh"
#include "common/online_softmax.cuh"
#include "common/smem_limit.cuh"
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

template <typename T>
__global__ void __launch_bounds__(MERGE_THREADS) split_kv_merge_kernel(merge_args a) {
    __shared__ float sums[MERGE_GROUPS][MERGE_CHUNK];
    __shared__ float group_m[MERGE_GROUPS], group_l[MERGE_GROUPS];
    const int lane = threadIdx.x % MERGE_LANES, group = threadIdx.x / MERGE_LANES;
    const int64_t row = blockIdx.x;
    /* The kernel after this one may be scheduled now (when launched overlapped) and waits for
     * this one's output itself; this one waits for the split kernel's partials. */
    fp_grid_release_next();
    fp_grid_wait_prior();

    T *o = (T *)a.o;
    if (a.q_varlen) {
        o += row / a.total_q * a.os.head + row % a.total_q * a.os.seq;
    } else {
        const int64_t b = row / ((int64_t)a.heads_q * a.nq);
        const int64_t h = (row / a.nq) % a.heads_q, i = row % a.nq;
        o += b * a.os.batch + h * a.os.head + i * a.os.seq;
    }

    const float2 *ml = (const float2 *)a.part_ml;
    float m_all = -INFINITY, l_all = 0.0f;
    for (int c0 = 0; c0 < a.d; c0 += MERGE_CHUNK) {
        /* The group's splits with an online softmax of their own: a split's (m, l) and its
         * columns are loaded together, so one memory latency (per four splits) is all the
         * group waits for, whatever the order of the maxima. part_o is each split's
         * normalised output, weighted here by its l. */
        float m = -INFINITY, l = 0.0f, acc[MERGE_COLS_PER_LANE];
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++) acc[k] = 0.0f;
#pragma unroll 4
        for (int s = group; s < a.splits; s += MERGE_GROUPS) {
            const float2 v = ml[s * a.rows + row];
            const float *po = a.part_o + (s * a.rows + row) * a.d;
            float x[MERGE_COLS_PER_LANE];
#pragma unroll
            for (int k = 0; k < MERGE_COLS_PER_LANE; k++) {
                const int c = c0 + k * MERGE_LANES + lane;
                x[k] = c < a.d ? po[c] : 0.0f;
            }
            /* A split without keys has l = 0 (and m = -inf): it adds nothing. */
            if (v.y == 0.0f) continue;
            if (v.x > m) {
                const float shrink = exp2f(m - v.x); /* 0 while m is -inf */
                l *= shrink;
#pragma unroll
                for (int k = 0; k < MERGE_COLS_PER_LANE; k++) acc[k] *= shrink;
                m = v.x;
            }
            const float w = v.y * exp2f(v.x - m);
            l += w;
#pragma unroll
            for (int k = 0; k < MERGE_COLS_PER_LANE; k++) acc[k] = fmaf(w, x[k], acc[k]);
        }
        if (lane == 0) {
            group_m[group] = m;
            group_l[group] = l;
        }
        __syncthreads();
        m_all = group_m[0];
#pragma unroll
        for (int g = 1; g < MERGE_GROUPS; g++) m_all = fmaxf(m_all, group_m[g]);
        /* -inf - (-inf) would be NaN; when no split saw a key every weight is 0 anyway. */
        const float base = m_all == -INFINITY ? 0.0f : m_all;
        l_all = 0.0f;
#pragma unroll
        for (int g = 0; g < MERGE_GROUPS; g++) l_all += group_l[g] * exp2f(group_m[g] - base);
        const float mine = l_all == 0.0f ? 0.0f : exp2f(m - base) / l_all;
#pragma unroll
        for (int k = 0; k < MERGE_COLS_PER_LANE; k++)
            sums[group][k * MERGE_LANES + lane] = acc[k] * mine;
        __syncthreads();
        for (int c = threadIdx.x; c < MERGE_CHUNK && c0 + c < a.d; c += MERGE_THREADS) {
            float sum = 0.0f;
#pragma unroll
            for (int g = 0; g < MERGE_GROUPS; g++) sum += sums[g][c];
            o[c0 + c] = fp_from_f32<T>(sum);
        }
        __syncthreads(); /* sums, group_m and group_l are rewritten by the next chunk */
    }
    if (a.lse && threadIdx.x == 0)
        a.lse[row] = l_all == 0.0f ? -INFINITY : (m_all + log2f(l_all)) * FP_LN2;
}

/* The merge is launched overlapped with the split kernel before it (vendors/cuda.h): its
 * blocks are scheduled as that kernel's last blocks finish and wait there for the partials,
 * so the launch gap between the two is not paid on the GPUs that allow it. They can share an
 * SM with the split kernel's blocks only under the same carveout, and the split kernels take
 * most of the shared memory, so the merge asks for the largest carveout too. */
template <typename T> gpuError_t launch_merge(const merge_args &a, int overlap, gpuStream_t stream) {
    const gpuError_t e = fp_prefer_shared_carveout<split_kv_merge_kernel<T>>();
    if (e != gpuSuccess) return e;
    return fp_gpu_launch_overlapped(overlap, split_kv_merge_kernel<T>, dim3((unsigned)a.rows),
                                    dim3(MERGE_THREADS), 0, stream, a);
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
    const int overlap = L->props->cc_major >= 9;
    gpuError_t e = gpuSuccess;
    FP_DISPATCH_DTYPE(p->out_dtype, T, e = launch_merge<T>(a, overlap, L->stream));
    return e;
}
