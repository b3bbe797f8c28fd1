/* The CPU's own ceilings, measured: f32 FMA rate of one core and of all threads, and memory
 * copy bandwidth; and for the planner, the rate of bf16 dot products against f32 FMAs. */
/* clock_gettime: POSIX beyond C11. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "backend.h"
#include "topology.h"

#define REPEATS        5
#define COPY_MIN_BYTES ((size_t)64 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: time the thread was descheduled (other processes on a busy
 * machine) does not count, so the figure is what a core does while it runs the loop. */
static double thread_cpu_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return now_s();
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef double (*fma_loop)(int64_t iterations);

/* FLOP/s of `threads` threads running the loop at once (the sum of each thread's rate), best
 * of REPEATS. */
static double fma_rate(fma_loop loop, int64_t iterations, int threads) {
    double best = 0.0;
    for (int rep = 0; rep < REPEATS; ++rep) {
        double rate = 0.0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : rate)
        {
            if (omp_get_thread_num() > 0) cs_bind_thread_to_core(omp_get_thread_num());
            const double t0 = thread_cpu_s();
            const double flops = loop(iterations);
            rate += flops / (thread_cpu_s() - t0);
        }
#else
        (void)threads;
        const double t0 = thread_cpu_s();
        const double flops = loop(iterations);
        rate = flops / (thread_cpu_s() - t0);
#endif
        best = rate > best ? rate : best;
    }
    return best;
}

/* Iterations that take about 30 ms of one core's time. */
static int64_t calibrate(fma_loop loop) {
    int64_t it = 1 << 16;
    for (;;) {
        const double t0 = thread_cpu_s();
        loop(it);
        const double dt = thread_cpu_s() - t0;
        if (dt > 0.03 || it > ((int64_t)1 << 40)) return it;
        it = dt < 0.003 ? it * 8 : (int64_t)((double)it * 0.035 / dt);
    }
}

/* Bytes of each of the copy's two buffers. A ceiling for memory must come from memory: each
 * buffer twice the last-level cache (source and destination together four times it, as STREAM
 * asks of its arrays), so no pass runs from cache, as the benchmarks' rotated input sets also
 * span twice the cache. At least 64 MiB, and at most a sixteenth of the machine's memory. */
static size_t copy_bytes(void) {
    const cs_topology *t = cs_topology_get();
    const unsigned long long cache = t->l3_bytes > 0 ? t->l3_bytes : t->l2_bytes;
    size_t bytes = (size_t)(2 * cache);
    if (bytes < COPY_MIN_BYTES) bytes = COPY_MIN_BYTES;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
        const size_t cap = (size_t)pages / 16 * (size_t)page;
        if (cap >= COPY_MIN_BYTES && bytes > cap) bytes = cap;
    }
    return bytes;
}

/* Bytes read + written per second by memcpy of `bytes` split over the threads. */
static double copy_rate(int threads, size_t bytes) {
    char *src = malloc(bytes), *dst = malloc(bytes);
    double best = 0.0;
    if (src && dst) {
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
        for (int rep = 0; rep < REPEATS; ++rep) {
            const double t0 = now_s();
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads)
            {
                const size_t n = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num();
                const size_t chunk = bytes / n;
                memcpy(dst + me * chunk, src + me * chunk,
                       me + 1 == n ? bytes - me * chunk : chunk);
            }
#else
            (void)threads;
            memcpy(dst, src, bytes);
#endif
            const double rate = 2.0 * (double)bytes / (now_s() - t0);
            best = rate > best ? rate : best;
        }
    }
    free(src);
    free(dst);
    return best;
}

typedef float (*read_loop)(const float *p, size_t n);

/* The read stream for CPUs without AVX2: eight independent sums that the compiler vectorises
 * with whatever the baseline ISA offers. n is a multiple of 64. */
static float read_stream_portable(const float *p, size_t n) {
    float acc[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += p[i + (size_t)k];
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

/* The micro-benchmark loops of the widest vector path this CPU and build run: the ceilings are
 * those of the fastest path. */
typedef struct widest_loops {
    fma_loop fma;
    const char *fma_kind;
    read_loop read;
    const char *read_kind;
} widest_loops;

static widest_loops widest(void) {
    const char *why;
    (void)why;
#if defined(CS_HAVE_AVX512_KERNELS)
    if (cs_avx512_usable(&why))
        return (widest_loops){cs_fma_peak_avx512,
                              "AVX-512 FMA loop (12 independent 16-wide chains)",
                              cs_read_stream_avx512, "512-bit loads"};
#endif
#if defined(CS_HAVE_AVX2_KERNELS)
    if (cs_avx2_usable(0, &why))
        return (widest_loops){cs_fma_peak_avx2, "AVX2 FMA loop (12 independent 8-wide chains)",
                              cs_read_stream_avx2, "256-bit loads"};
#endif
    return (widest_loops){cs_fma_peak_portable, "portable multiply-add loop (12 chains x 8 lanes)",
                          read_stream_portable, "baseline vector loads"};
}

/* Bytes read per second by `threads` threads each streaming its share of a buffer of `bytes`
 * bytes, best of REPEATS; the sums go to a volatile sink so that no pass can be left out. */
static double read_rate(read_loop loop, int threads, size_t bytes) {
    const size_t unit = 64 * sizeof(float) * (size_t)(threads > 0 ? threads : 1);
    bytes = bytes / unit * unit;
    float *src = bytes ? malloc(bytes) : NULL;
    if (!src) return 0.0;
    /* 0x3f800000 words: every float 1.0, normal numbers only (no denormal slow path). */
    for (size_t i = 0; i < bytes / sizeof(float); ++i) src[i] = 1.0f;
    const size_t n = bytes / sizeof(float);
    volatile float sink = 0.0f;
    double best = 0.0;
    for (int rep = 0; rep < REPEATS; ++rep) {
        float sum = 0.0f;
        const double t0 = now_s();
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        {
            const size_t parts = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num(),
                         share = n / parts / 64 * 64;
            sum += loop(src + me * share, me + 1 == parts ? n - me * share : share);
        }
#else
        (void)threads;
        sum = loop(src, n);
#endif
        const double rate = (double)bytes / (now_s() - t0);
        sink = sink + sum;
        best = rate > best ? rate : best;
    }
    free(src);
    return best;
}

flashport_status cs_measure_read_bandwidth(double *gbps, char *method, size_t method_size) {
    const widest_loops w = widest();
    const char *why;
    const int threads = cs_threads_default(&why);
    const size_t bytes = copy_bytes();
    const double rate = read_rate(w.read, threads, bytes);
    if (rate <= 0.0)
        return cs_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, CS_NAME,
                              "read bandwidth: cannot allocate the %zu MiB of its stream",
                              bytes >> 20);
    *gbps = rate * 1e-9;
    snprintf(method, method_size,
             "read-only stream: %d thread(s) each summing its share of %zu MiB (sized from the "
             "last-level cache) with %s in four chains, best of %d passes, wall clock, bytes "
             "read",
             threads, bytes >> 20, w.read_kind, REPEATS);
    return FLASHPORT_OK;
}

flashport_status cs_measure_peaks(flashport_peaks *out) {
    memset(out, 0, sizeof *out);
    const char *why;
    const widest_loops w = widest();
    fma_loop loop = w.fma;
    const char *kind = w.fma_kind;
    /* A path forced by FLASHPORT_KERNEL is measured instead: the ceiling of the path that runs
     * (a core may run the narrower FMA at another rate). */
    const char *forced = getenv("FLASHPORT_KERNEL");
    if (forced && strcmp(forced, "portable") == 0) {
        loop = cs_fma_peak_portable;
        kind = "portable multiply-add loop (12 chains x 8 lanes), forced by FLASHPORT_KERNEL";
    }
#if defined(CS_HAVE_AVX2_KERNELS)
    if (forced && strcmp(forced, "avx2") == 0 && cs_avx2_usable(0, &why)) {
        loop = cs_fma_peak_avx2;
        kind = "AVX2 FMA loop (12 independent 8-wide chains), forced by FLASHPORT_KERNEL";
    }
#endif
#if defined(CS_HAVE_AVX512BF16_KERNELS)
    /* The bf16 path's products are vdpbf16ps, not FMAs: its ceiling is their rate (two
     * products per lane, twice the FMA's operations per instruction where both issue alike). */
    if (forced && strcmp(forced, "avx512bf16") == 0 && cs_avx512bf16_usable(&why)) {
        loop = cs_bf16_dot_peak;
        kind = "AVX512-BF16 dot-product loop (12 independent 16-wide vdpbf16ps chains, 4 "
               "operations per lane), forced by FLASHPORT_KERNEL";
    }
#endif
#if defined(CS_HAVE_AMXBF16_KERNELS)
    /* amxbf16's products are tile products: its ceiling is their rate. */
    if (forced && strcmp(forced, "amxbf16") == 0 && cs_amxbf16_usable(&why)) {
        loop = cs_amx_bf16_peak;
        kind = "AMX-BF16 tile-product loop (4 independent C tiles, TDPBF16PS of 16 x 16 x 32 "
               "multiply-adds), forced by FLASHPORT_KERNEL";
    }
#endif
    const int threads = cs_threads_default(&why);
    const int64_t iterations = calibrate(loop);
    out->f32_fma_tflops_per_core = fma_rate(loop, iterations, 1) * 1e-12;
    out->f32_fma_tflops = fma_rate(loop, iterations, threads) * 1e-12;
    const size_t bytes = copy_bytes();
    out->copy_gbps = copy_rate(threads, bytes) * 1e-9;
    snprintf(
        out->method, sizeof out->method,
        "f32: %s, thread CPU time, best of %d runs of ~30 ms, 1 thread (per core), "
        "%d threads summed (device); copy: memcpy of %zu MiB (sized from the last-level cache) "
        "on %d threads, wall clock, read+write bytes",
        kind, REPEATS, threads, bytes >> 20, threads);
    return FLASHPORT_OK;
}

/* vdpbf16ps against the AVX-512 FMA, FLOP for FLOP, on one core: measured, because cores
 * differ by 4x (a Zen 5 core runs the dot product at 1.83x the FMA's FLOP rate, a Sapphire
 * Rapids-class Xeon at 0.48x; bench/results/2026-12-04_xeon-amx-2core_cpu-bf16-amx.md). Each
 * loop runs ~0.5-2 ms, alternated three times, the best of each kept. */
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;
static double g_bf16_vs_fma;

static double one_core_rate(fma_loop loop, int64_t iterations) {
    const double t0 = thread_cpu_s();
    const double flops = loop(iterations);
    const double dt = thread_cpu_s() - t0;
    return dt > 0.0 ? flops / dt : 0.0;
}

static void measure_bf16_vs_fma(void) {
#if defined(CS_HAVE_AVX512BF16_KERNELS) && defined(CS_HAVE_AVX512_KERNELS)
    const char *why;
    if (!cs_avx512bf16_usable(&why) || !cs_avx512_usable(&why)) return;
    const int64_t iterations = (int64_t)1 << 18;
    double dot = 0.0, fma = 0.0;
    one_core_rate(cs_fma_peak_avx512, iterations); /* the core at its AVX-512 clock first */
    for (int rep = 0; rep < 3; ++rep) {
        const double d = one_core_rate(cs_bf16_dot_peak, iterations);
        const double f = one_core_rate(cs_fma_peak_avx512, iterations);
        dot = d > dot ? d : dot;
        fma = f > fma ? f : fma;
    }
    g_bf16_vs_fma = fma > 0.0 ? dot / fma : 0.0;
#endif
}

double cs_bf16_dot_vs_fma(void) {
    pthread_once(&g_bf16_once, measure_bf16_vs_fma);
    return g_bf16_vs_fma;
}
