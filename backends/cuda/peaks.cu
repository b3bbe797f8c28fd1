/*
 * The device's ceilings, measured rather than taken from a datasheet:
 *   f32 FMA rate: every thread of a few blocks per SM runs many independent FMA chains, so the
 *     pipes never wait on a dependency;
 *   f16, bf16 and tf32 tensor-core rates: each warp issues independent mma.sync chains
 *     (m16n8k16 for f16/bf16, m16n8k8 for tf32, f32 accumulation) from register operands;
 *   copy bandwidth: a device-to-device copy, counting bytes read plus bytes written.
 * Each figure is the best of a few timed runs after a warm-up; results are kept live with a
 * store that depends on them, so the compiler cannot drop the work.
 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/common/ptx.cuh"
#include "peaks.h"

#define PEAK_THREADS 256
#define PEAK_BLOCKS_PER_SM 4
#define PEAK_REPEATS 3
#define FMA_CHAINS 8
#define FMA_ITERS 16384
#define MMA_CHAINS 4
#define MMA_ITERS 2048
#define COPY_BYTES ((size_t)256 << 20)

__global__ void __launch_bounds__(PEAK_THREADS) peak_ffma(float *sink, float seed) {
    float x[FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) x[c] = seed + (float)(threadIdx.x + c);
    const float a = 0.999f, b = 1e-3f;
    for (int it = 0; it < FMA_ITERS; it++) {
#pragma unroll
        for (int c = 0; c < FMA_CHAINS; c++) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) s += x[c];
    if (s == -1.0f) sink[blockIdx.x] = s; /* never true; keeps the chains live */
}

enum peak_mma_kind { PEAK_MMA_F16, PEAK_MMA_BF16, PEAK_MMA_TF32 };

/* One warp-wide mma.sync on register operands. f16/bf16: m16n8k16, a = 4 regs, b = 2 regs;
 * tf32: m16n8k8, a = 4 regs, b = 2 regs. Accumulator: 4 f32 registers. */
template <peak_mma_kind KIND>
__device__ __forceinline__ void peak_mma(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (KIND == PEAK_MMA_F16)
        fp_mma_m16n8k16_f16(d, a, b[0], b[1]);
    else if (KIND == PEAK_MMA_BF16)
        fp_mma_m16n8k16_bf16(d, a, b[0], b[1]);
    else
        fp_mma_m16n8k8_tf32(d, a[0], a[1], a[2], a[3], b[0], b[1]);
#else
    (void)d;
    (void)a;
    (void)b;
#endif
}

template <peak_mma_kind KIND>
__global__ void __launch_bounds__(PEAK_THREADS) peak_mma_kernel(float *sink, uint32_t seed) {
    uint32_t a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = seed ^ (threadIdx.x * 0x9e3779b9u + i);
    b[0] = seed + threadIdx.x;
    b[1] = seed - threadIdx.x;
    float acc[MMA_CHAINS][4] = {};
    for (int it = 0; it < MMA_ITERS; it++) {
#pragma unroll
        for (int c = 0; c < MMA_CHAINS; c++) peak_mma<KIND>(acc[c], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; c++) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    if (s == -1.0f) sink[blockIdx.x] = s;
}

/* Times `launch` PEAK_REPEATS times after one warm-up and returns the best milliseconds. */
template <typename Launch>
static gpuError_t time_best(gpuStream_t stream, Launch launch, float *best_ms,
                            const char **call) {
    gpuEvent_t start = NULL, stop = NULL;
    gpuError_t e;
    *best_ms = 0.0f;
    if ((e = gpuEventCreate(&start)) != gpuSuccess || (e = gpuEventCreate(&stop)) != gpuSuccess) {
        *call = "EventCreate";
        goto done;
    }
    for (int r = 0; r <= PEAK_REPEATS; r++) {
        if ((e = gpuEventRecord(start, stream)) != gpuSuccess) {
            *call = "EventRecord";
            goto done;
        }
        if ((e = launch()) != gpuSuccess) {
            *call = "LaunchKernel (peak micro-benchmark)";
            goto done;
        }
        float ms = 0.0f;
        if ((e = gpuEventRecord(stop, stream)) != gpuSuccess) {
            *call = "EventRecord";
            goto done;
        }
        if ((e = gpuEventSynchronize(stop)) != gpuSuccess) {
            *call = "EventSynchronize";
            goto done;
        }
        if ((e = gpuEventElapsedTime(&ms, start, stop)) != gpuSuccess) {
            *call = "EventElapsedTime";
            goto done;
        }
        if (r > 0 && (*best_ms == 0.0f || ms < *best_ms)) *best_ms = ms; /* r = 0 warms up */
    }
done:
    if (start) gpuEventDestroy(start);
    if (stop) gpuEventDestroy(stop);
    return e;
}

template <peak_mma_kind KIND>
static gpuError_t measure_mma(gpuStream_t stream, unsigned blocks, float *sink, double *tflops,
                              const char **call) {
    float ms = 0.0f;
    gpuError_t e = time_best(
        stream,
        [&]() {
            peak_mma_kernel<KIND><<<blocks, PEAK_THREADS, 0, stream>>>(sink, 0x3c003c00u);
            return gpuGetLastError();
        },
        &ms, call);
    const double flops_per_mma = KIND == PEAK_MMA_TF32 ? 2.0 * 16 * 8 * 8 : 2.0 * 16 * 8 * 16;
    const double mmas = (double)blocks * (PEAK_THREADS / 32) * MMA_CHAINS * MMA_ITERS;
    *tflops = e == gpuSuccess && ms > 0.0f ? mmas * flops_per_mma / (ms * 1e-3) / 1e12 : 0.0;
    return e;
}

gpuError_t fp_gpu_measure_peaks(gpuStream_t stream, const fp_gpu_device_props *props,
                                flashport_peaks *out, const char **call) {
    const unsigned blocks = (unsigned)(props->sm_count * PEAK_BLOCKS_PER_SM);
    float *sink = NULL;
    void *copy_buf = NULL;
    float ms = 0.0f;
    gpuError_t e = gpuMalloc((void **)&sink, blocks * sizeof(float));
    if (e != gpuSuccess) {
        *call = "Malloc";
        return e;
    }

    e = time_best(
        stream,
        [&]() {
            peak_ffma<<<blocks, PEAK_THREADS, 0, stream>>>(sink, 1.0f);
            return gpuGetLastError();
        },
        &ms, call);
    if (e != gpuSuccess) goto done;
    if (ms > 0.0f) {
        const double flops = 2.0 * blocks * PEAK_THREADS * FMA_CHAINS * (double)FMA_ITERS;
        out->f32_fma_tflops = flops / (ms * 1e-3) / 1e12;
        out->f32_fma_tflops_per_core = out->f32_fma_tflops / props->sm_count;
    }

    if (props->cc_major >= 8) {
        if ((e = measure_mma<PEAK_MMA_F16>(stream, blocks, sink, &out->f16_mma_tflops, call)) !=
                gpuSuccess ||
            (e = measure_mma<PEAK_MMA_BF16>(stream, blocks, sink, &out->bf16_mma_tflops, call)) !=
                gpuSuccess ||
            (e = measure_mma<PEAK_MMA_TF32>(stream, blocks, sink, &out->tf32_mma_tflops, call)) !=
                gpuSuccess)
            goto done;
    }

    if ((e = gpuMalloc(&copy_buf, 2 * COPY_BYTES)) != gpuSuccess) {
        *call = "Malloc";
        goto done;
    }
    e = time_best(
        stream,
        [&]() {
            return gpuMemcpyAsync((char *)copy_buf + COPY_BYTES, copy_buf, COPY_BYTES,
                                  gpuMemcpyDeviceToDevice, stream);
        },
        &ms, call);
    if (e != gpuSuccess) goto done;
    if (ms > 0.0f) out->copy_gbps = 2.0 * COPY_BYTES / (ms * 1e-3) / 1e9;

    snprintf(out->method, sizeof out->method,
             "best of %d after a warm-up, %u blocks x %d threads: FFMA %d chains/thread; "
             "mma.sync m16n8k16 f16/bf16, m16n8k8 tf32, %d chains/warp%s; D2D copy %zu MiB, "
             "read+write",
             PEAK_REPEATS, blocks, PEAK_THREADS, FMA_CHAINS, MMA_CHAINS,
             props->cc_major >= 8 ? "" : " (not measured below sm_80)", COPY_BYTES >> 20);
done:
    if (copy_buf) gpuFree(copy_buf);
    gpuFree(sink);
    return e;
}
