// Kernels of the NCCL ring's accumulators: one thread per row for the LSE merge (its weights
// are the row's), one per element elsewhere. They touch O(N d) elements per step against the
// attention's O(N^2 d / P) and are kept simple.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "device_accum.h"

namespace {

__device__ float load(const void *p, int dtype, int64_t i) {
    if (dtype == FLASHPORT_F16) return __half2float(static_cast<const __half *>(p)[i]);
    if (dtype == FLASHPORT_BF16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    return static_cast<const float *>(p)[i];
}

__device__ int64_t row_offset(const fp_dist_dev_shape &s, int64_t b, int64_t h, int64_t i) {
    if (s.layout == FLASHPORT_LAYOUT_BHND)
        return ((b * s.heads + h) * s.seq_local + i) * s.head_dim;
    return ((b * s.seq_local + i) * s.heads + h) * s.head_dim;
}

// One row's merge of a partial (o2 from part at off, or zeros when part is null) with LSE l2.
__device__ void merge_row(const fp_dist_dev_shape &s, const void *part, int64_t off, float l2,
                          float *acc_o, float *l1) {
    if (l2 == -INFINITY) return;
    float m = fmaxf(*l1, l2);
    if (isnan(*l1) || isnan(l2)) m = NAN;
    float w1 = *l1 == -INFINITY ? 0.0f : expf(*l1 - m);
    float w2 = expf(l2 - m);
    float inv = 1.0f / (w1 + w2);
    for (int64_t c = 0; c < s.head_dim; c++) {
        float o2 = part ? load(part, s.dtype, off + c) : 0.0f;
        acc_o[off + c] = (w1 * acc_o[off + c] + w2 * o2) * inv;
    }
    *l1 = m + logf(w1 + w2);
}

__global__ void merge_rows(fp_dist_dev_shape s, int64_t q_off, int64_t q_len, const void *o_part,
                           const float *lse_part, float *acc_o, float *acc_lse) {
    int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (r >= s.batch * s.heads * q_len) return;
    int64_t bh = r / q_len, i = q_off + r % q_len;
    merge_row(s, o_part, row_offset(s, bh / s.heads, bh % s.heads, i), lse_part[r], acc_o,
              &acc_lse[bh * s.seq_local + i]);
}

__global__ void merge_sinks(fp_dist_dev_shape s, const float *sinks, float *acc_o, float *acc_lse) {
    int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (r >= s.batch * s.heads * s.seq_local) return;
    int64_t bh = r / s.seq_local, i = r % s.seq_local;
    merge_row(s, nullptr, row_offset(s, bh / s.heads, bh % s.heads, i), sinks[bh % s.heads], acc_o,
              &acc_lse[r]);
}

__global__ void add_rows(fp_dist_dev_shape s, int64_t off, int64_t len, const void *part,
                         float *acc) {
    int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= s.batch * s.heads * len * s.head_dim) return;
    int64_t c = e % s.head_dim, r = e / s.head_dim;
    int64_t bh = r / len, i = off + r % len;
    int64_t at = row_offset(s, bh / s.heads, bh % s.heads, i) + c;
    acc[at] += load(part, s.dtype, at);
}

__global__ void lse_rows(fp_dist_dev_shape s, int64_t q_off, int64_t q_len, const float *lse,
                         float *out) {
    int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (r >= s.batch * s.heads * q_len) return;
    out[r] = lse[(r / q_len) * s.seq_local + q_off + r % q_len];
}

__global__ void store_all(int dtype, const float *src, void *dst, int64_t count) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= count) return;
    if (dtype == FLASHPORT_F16)
        static_cast<__half *>(dst)[i] = __float2half_rn(src[i]);
    else if (dtype == FLASHPORT_BF16)
        static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(src[i]);
    else
        static_cast<float *>(dst)[i] = src[i];
}

__global__ void fill(float *dst, float value, int64_t count) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < count) dst[i] = value;
}

constexpr int threads = 256;
unsigned blocks(int64_t n) { return (unsigned)((n + threads - 1) / threads); }

} // namespace

extern "C" fp_dist_dev_shape fp_dist_dev_shape_of(const flashport_dist_desc *d, int64_t heads) {
    return {(int)d->dtype, (int)d->layout, d->batch, heads, d->seq_local, d->head_dim};
}

extern "C" cudaError_t fp_dist_dev_merge_rows(fp_dist_dev_shape sh, int64_t q_off, int64_t q_len,
                                              const void *o_part, const float *lse_part,
                                              float *acc_o, float *acc_lse, cudaStream_t stream) {
    int64_t rows = sh.batch * sh.heads * q_len;
    merge_rows<<<blocks(rows), threads, 0, stream>>>(sh, q_off, q_len, o_part, lse_part, acc_o,
                                                     acc_lse);
    return cudaGetLastError();
}

extern "C" cudaError_t fp_dist_dev_merge_sinks(fp_dist_dev_shape sh, const float *sinks,
                                               float *acc_o, float *acc_lse, cudaStream_t stream) {
    int64_t rows = sh.batch * sh.heads * sh.seq_local;
    merge_sinks<<<blocks(rows), threads, 0, stream>>>(sh, sinks, acc_o, acc_lse);
    return cudaGetLastError();
}

extern "C" cudaError_t fp_dist_dev_add_rows(fp_dist_dev_shape sh, int64_t off, int64_t len,
                                            const void *part, float *acc, cudaStream_t stream) {
    int64_t n = sh.batch * sh.heads * len * sh.head_dim;
    add_rows<<<blocks(n), threads, 0, stream>>>(sh, off, len, part, acc);
    return cudaGetLastError();
}

extern "C" cudaError_t fp_dist_dev_lse_rows(fp_dist_dev_shape sh, int64_t q_off, int64_t q_len,
                                            const float *lse, float *out, cudaStream_t stream) {
    int64_t rows = sh.batch * sh.heads * q_len;
    lse_rows<<<blocks(rows), threads, 0, stream>>>(sh, q_off, q_len, lse, out);
    return cudaGetLastError();
}

extern "C" cudaError_t fp_dist_dev_store_all(int dtype, const float *src, void *dst, int64_t count,
                                             cudaStream_t stream) {
    store_all<<<blocks(count), threads, 0, stream>>>(dtype, src, dst, count);
    return cudaGetLastError();
}

extern "C" cudaError_t fp_dist_dev_fill(float *dst, float value, int64_t count,
                                        cudaStream_t stream) {
    fill<<<blocks(count), threads, 0, stream>>>(dst, value, count);
    return cudaGetLastError();
}
