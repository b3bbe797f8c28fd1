/*
 * The HIP build's micro-benchmarks for flashport_measure_peaks (the CUDA build's peaks.cu uses
 * mma.sync, which has no AMD form):
 *   f32 FMA rate: every lane of a few blocks per compute unit runs independent FMA chains;
 *   f16 and bf16 MFMA rates (gfx90a, gfx940): each wave runs independent 32x32x8 MFMA chains
 *     from register operands, f32 accumulation;
 *   copy bandwidth: a device-to-device copy, bytes read plus bytes written.
 * Timed with events on the context's stream after one warm-up launch each.
 */
#include <stdio.h>
#include <string.h>

#include "peaks.h"

namespace {

constexpr int THREADS = 256;
constexpr int FMA_CHAINS = 8;
constexpr int FMA_ITERS = 4096;
constexpr int MMA_CHAINS = 4;
constexpr int MMA_ITERS = 2048;
constexpr size_t COPY_BYTES = size_t(256) << 20;

__global__ void __launch_bounds__(THREADS) fma_kernel(float *sink, float seed) {
    float x[FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) x[c] = seed + (float)(threadIdx.x + c);
    for (int i = 0; i < FMA_ITERS; i++)
#pragma unroll
        for (int c = 0; c < FMA_CHAINS; c++) x[c] = fmaf(x[c], 0.999999f, 1e-7f);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) s += x[c];
    if (s == 12345.0f) sink[threadIdx.x] = s; /* never true; keeps the chains alive */
}

typedef float acc16 __attribute__((ext_vector_type(16)));
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef short short4v __attribute__((ext_vector_type(4)));

template <bool BF16> __global__ void __launch_bounds__(THREADS) mfma_kernel(float *sink, int seed) {
#if defined(__gfx90a__) || defined(__gfx940__)
    acc16 d[MMA_CHAINS];
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; c++)
#pragma unroll
        for (int r = 0; r < 16; r++) d[c][r] = 0.0f;
    half4 a = {(_Float16)seed, (_Float16)1, (_Float16)2, (_Float16)3};
    short4v b = {(short)seed, 1, 2, 3};
    for (int i = 0; i < MMA_ITERS; i++)
#pragma unroll
        for (int c = 0; c < MMA_CHAINS; c++)
            d[c] = BF16 ? __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(b, b, d[c], 0, 0, 0)
                        : __builtin_amdgcn_mfma_f32_32x32x8f16(a, a, d[c], 0, 0, 0);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; c++) s += d[c][0];
    if (s == 12345.0f) sink[threadIdx.x] = s;
#else
    (void)sink;
    (void)seed;
#endif
}

/* Times `launch` (already warmed up once) with events on `stream`. */
template <typename F>
gpuError_t time_ms(gpuStream_t stream, F launch, float *ms, const char **call) {
    gpuEvent_t start = nullptr, stop = nullptr;
    gpuError_t e = gpuEventCreate(&start);
    *call = "EventCreate";
    if (e == gpuSuccess) e = gpuEventCreate(&stop);
    if (e == gpuSuccess) e = launch();
    if (e == gpuSuccess) {
        *call = "StreamSynchronize";
        e = gpuStreamSynchronize(stream);
    }
    if (e == gpuSuccess) {
        *call = "EventRecord";
        e = gpuEventRecord(start, stream);
    }
    if (e == gpuSuccess) e = launch();
    if (e == gpuSuccess) {
        *call = "EventRecord";
        e = gpuEventRecord(stop, stream);
    }
    if (e == gpuSuccess) {
        *call = "EventSynchronize";
        e = gpuEventSynchronize(stop);
    }
    if (e == gpuSuccess) {
        *call = "EventElapsedTime";
        e = gpuEventElapsedTime(ms, start, stop);
    }
    if (start) (void)gpuEventDestroy(start);
    if (stop) (void)gpuEventDestroy(stop);
    return e;
}

} // namespace

gpuError_t fp_gpu_measure_peaks(gpuStream_t stream, const fp_gpu_device_props *props,
                                flashport_peaks *out, const char **call) {
    const int blocks = 4 * props->sm_count;
    const int has_mfma =
        strncmp(props->arch, "gfx90a", 6) == 0 || strncmp(props->arch, "gfx940", 6) == 0;
    void *buf = nullptr;
    *call = "Malloc";
    gpuError_t e = gpuMalloc(&buf, 2 * COPY_BYTES);
    if (e != gpuSuccess) return e;
    float *sink = (float *)buf;
    float ms = 0.0f;

    e = time_ms(
        stream,
        [&] {
            *call = "LaunchKernel (fma)";
            fma_kernel<<<blocks, THREADS, 0, stream>>>(sink, 1.0f);
            return gpuGetLastError();
        },
        &ms, call);
    if (e == gpuSuccess) {
        const double flops = 2.0 * blocks * THREADS * FMA_CHAINS * (double)FMA_ITERS;
        out->f32_fma_tflops = flops / (ms * 1e-3) / 1e12;
        out->f32_fma_tflops_per_core = out->f32_fma_tflops / props->sm_count;
    }
    const double mma_flops =
        2.0 * 32 * 32 * 8 * (double)blocks * (THREADS / 64) * MMA_CHAINS * MMA_ITERS;
    if (e == gpuSuccess && has_mfma) {
        e = time_ms(
            stream,
            [&] {
                *call = "LaunchKernel (mfma f16)";
                mfma_kernel<false><<<blocks, THREADS, 0, stream>>>(sink, 1);
                return gpuGetLastError();
            },
            &ms, call);
        if (e == gpuSuccess) out->f16_mma_tflops = mma_flops / (ms * 1e-3) / 1e12;
    }
    if (e == gpuSuccess && has_mfma) {
        e = time_ms(
            stream,
            [&] {
                *call = "LaunchKernel (mfma bf16)";
                mfma_kernel<true><<<blocks, THREADS, 0, stream>>>(sink, 1);
                return gpuGetLastError();
            },
            &ms, call);
        if (e == gpuSuccess) out->bf16_mma_tflops = mma_flops / (ms * 1e-3) / 1e12;
    }
    if (e == gpuSuccess) {
        e = time_ms(
            stream,
            [&] {
                *call = "MemcpyAsync";
                return gpuMemcpyAsync((char *)buf + COPY_BYTES, buf, COPY_BYTES,
                                      gpuMemcpyDeviceToDevice, stream);
            },
            &ms, call);
        if (e == gpuSuccess) out->copy_gbps = 2.0 * COPY_BYTES / (ms * 1e-3) / 1e9;
    }
    const gpuError_t freed = gpuFree(buf);
    if (e != gpuSuccess) return e;
    if (freed != gpuSuccess) {
        *call = "Free";
        return freed;
    }
    snprintf(out->method, sizeof out->method,
             "f32: %d FMA chains/lane x %d, %d blocks of %d; MFMA 32x32x8 f16/bf16, %d chains/wave"
             "%s; D2D copy %zu MiB, read + write; no tf32 on this backend",
             FMA_CHAINS, FMA_ITERS, blocks, THREADS, MMA_CHAINS,
             has_mfma ? "" : " (not measured: no MFMA on this target)", COPY_BYTES >> 20);
    return gpuSuccess;
}
