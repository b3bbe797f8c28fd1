/*
 * A context on the caller's CUDA stream (flashport_context_create_on_queue), used the way a
 * framework would: the test creates a non-blocking stream and cudaMalloc'd buffers, queues a
 * kernel of its own that writes Q, K and V after a delay, then flashport attention on the
 * wrapped buffers, then a copy of O to pinned host memory, and waits for that stream alone.
 * Only stream order puts the three in sequence; the result is checked against the reference
 * backend.
 *
 * Meanwhile a kernel spins for seconds on a second stream: flashport's launches, workspace
 * (re)allocation, timers, flashport_synchronize and flashport_context_destroy must all return
 * while it still runs, i.e. none of them waits for the device. Destroying the context neither
 * waits for nor destroys the caller's stream, which then takes more work. With two GPUs: a spec
 * naming the other device is a MISMATCH, and the caller's current device is left as it was.
 *
 * Without a usable GPU the test checks that "cuda" reports itself unavailable and stops.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define CUDA_OK(call) cuda_ok((call), #call, __LINE__)

static int cuda_ok(cudaError_t e, const char *what, int line) {
    check_count++;
    if (e == cudaSuccess) return 1;
    check_failures++;
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, line, what, cudaGetErrorString(e));
    return 0;
}

enum { B = 2, HQ = 8, HKV = 2, NQ = 300, NKV = 700, D = 64 };
/* The decode shapes: one query row against SPLIT_SHORT, then SPLIT_LONG keys, which the
 * split-KV variant runs with a workspace that grows from the first to the second. */
enum { SPLIT_SHORT = 2000, SPLIT_LONG = 16000 };
enum { Q_N = B * HQ * NQ * D, KV_N = B * HKV * SPLIT_LONG * D, LSE_N = B * HQ * NQ };

/* Element i of Q (0), K (1) or V (2): the same float on the host and the device. */
__host__ __device__ static float value(int tensor, int i) {
    return (float)((int)(((unsigned)i * 7919u + (unsigned)tensor * 104729u) % 2001u) - 1000) /
           1000.0f;
}

__device__ static void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

/* One warp busy for ns: work of another stream that must still run when flashport returns. */
__global__ static void spinner(unsigned long long ns) { spin(ns); }

/* The caller's own work before attention: Q, K and V written only after a delay, so that
 * attention that did not follow it on the stream would read the NaN the buffers start with. */
__global__ static void produce(float *q, float *k, float *v, int nq, int nkv,
                               unsigned long long delay_ns) {
    spin(delay_ns);
    const int n = nq > nkv ? nq : nkv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (i < nq) q[i] = value(0, i);
        if (i < nkv) {
            k[i] = value(1, i);
            v[i] = value(2, i);
        }
    }
}

static float host_q[Q_N], host_k[KV_N], host_v[KV_N];

static void problem(flashport_problem *p, int split_kv) {
    if (split_kv) {
        flashport_problem_init(p, FLASHPORT_F32, 1, HQ, HKV, 1, split_kv, D,
                               FLASHPORT_LAYOUT_BHND);
        p->kernel = "fa2_f32_split_kv";
    } else {
        flashport_problem_init(p, FLASHPORT_F32, B, HQ, HKV, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
        p->causal = 1;
    }
}

static int close_to(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 2e-4f + 2e-4f * fabsf(want[i]))) {
            fprintf(stderr, "  element %d: %g, expected %g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

/* O and LSE of p from the reference backend (its own kernel, not the one p forces). */
static void reference(const flashport_problem *p, float *o, float *lse) {
    flashport_problem any = *p;
    any.kernel = NULL;
    flashport_context *ref = NULL;
    CHECK_STATUS(flashport_context_create("reference", &ref), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_attention_host(ref, &any, host_q, host_k, host_v, o, lse),
                 FLASHPORT_OK, NULL);
    flashport_context_destroy(ref);
}

struct device_buffers {
    float *q, *k, *v, *o, *lse;
    flashport_buffer *bq, *bk, *bv, *bo, *bl;
};

static void wrap(flashport_context *ctx, device_buffers *d) {
    CHECK_STATUS(flashport_buffer_wrap(ctx, d->q, sizeof host_q, &d->bq), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, d->k, sizeof host_k, &d->bk), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, d->v, sizeof host_v, &d->bv), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, d->o, sizeof host_q, &d->bo), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, d->lse, LSE_N * sizeof(float), &d->bl), FLASHPORT_OK,
                 NULL);
}

static void unwrap(device_buffers *d) {
    flashport_buffer_free(d->bq);
    flashport_buffer_free(d->bk);
    flashport_buffer_free(d->bv);
    flashport_buffer_free(d->bo);
    flashport_buffer_free(d->bl);
}

/* Queues produce, attention of p and the copies of O and LSE on stream; waits for the stream
 * when wait is set. */
static void queue_flow(flashport_context *ctx, cudaStream_t stream, device_buffers *d,
                       const flashport_problem *p, float *o, float *lse, int wait) {
    const size_t o_n = (size_t)(p->batch * p->heads_q * p->seq_q * p->head_dim);
    const size_t lse_n = (size_t)(p->batch * p->heads_q * p->seq_q);
    const size_t kv_n = (size_t)(p->batch * p->heads_kv * p->seq_kv * p->head_dim);
    produce<<<64, 256, 0, stream>>>(d->q, d->k, d->v, (int)o_n, (int)kv_n, 100000000ull);
    CUDA_OK(cudaGetLastError());
    CHECK_STATUS(flashport_attention(ctx, p, d->bq, d->bk, d->bv, d->bo, d->bl), FLASHPORT_OK,
                 NULL);
    CUDA_OK(cudaMemcpyAsync(o, d->o, o_n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaMemcpyAsync(lse, d->lse, lse_n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    if (wait) CUDA_OK(cudaStreamSynchronize(stream));
}

/* The buffers start as NaN, set on the stream, so that stale inputs show in the result. */
static void poison(cudaStream_t stream, device_buffers *d) {
    CUDA_OK(cudaMemsetAsync(d->q, 0xff, sizeof host_q, stream));
    CUDA_OK(cudaMemsetAsync(d->k, 0xff, sizeof host_k, stream));
    CUDA_OK(cudaMemsetAsync(d->v, 0xff, sizeof host_v, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
}

static int still_running(cudaStream_t s) { return cudaStreamQuery(s) == cudaErrorNotReady; }

int main(void) {
    int idx;
    flashport_backend_info bi = {};
    if (flashport_backend_find("cuda", &idx) != FLASHPORT_OK ||
        flashport_backend_get_info(idx, &bi) != FLASHPORT_OK || !bi.available) {
        flashport_context *none = NULL;
        int not_a_stream = 0;
        CHECK_STATUS(flashport_context_create_on_queue("cuda", &not_a_stream, &none),
                     FLASHPORT_ERROR_BACKEND_UNAVAILABLE, "cuda unavailable: ");
        CHECK(none == NULL);
        printf("no GPU here (%s): checked that cuda reports itself unavailable\n", bi.reason);
        return check_report("test_cuda_stream");
    }

    for (int i = 0; i < Q_N; i++) host_q[i] = value(0, i);
    for (int i = 0; i < KV_N; i++) {
        host_k[i] = value(1, i);
        host_v[i] = value(2, i);
    }
    flashport_problem main_p, short_p, long_p;
    problem(&main_p, 0);
    problem(&short_p, SPLIT_SHORT);
    problem(&long_p, SPLIT_LONG);
    static float o_ref[Q_N], lse_ref[LSE_N], o_short_ref[HQ * D], lse_short_ref[HQ];
    static float o_long_ref[HQ * D], lse_long_ref[HQ];
    reference(&main_p, o_ref, lse_ref);
    reference(&short_p, o_short_ref, lse_short_ref);
    reference(&long_p, o_long_ref, lse_long_ref);

    int device = -1, n_devices = 0, pools = 0;
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaGetDeviceCount(&n_devices));
    CUDA_OK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    cudaStream_t stream, other;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    device_buffers d = {};
    CUDA_OK(cudaMalloc(&d.q, sizeof host_q));
    CUDA_OK(cudaMalloc(&d.k, sizeof host_k));
    CUDA_OK(cudaMalloc(&d.v, sizeof host_v));
    CUDA_OK(cudaMalloc(&d.o, sizeof host_q));
    CUDA_OK(cudaMalloc(&d.lse, LSE_N * sizeof(float)));
    float *o = NULL, *lse = NULL;
    CUDA_OK(cudaMallocHost(&o, sizeof host_q));
    CUDA_OK(cudaMallocHost(&lse, LSE_N * sizeof(float)));

    flashport_context *ctx = NULL;
    char spec[32];
    snprintf(spec, sizeof spec, "cuda:%d", device);
    CHECK_STATUS(flashport_context_create_on_queue(spec, stream, &ctx), FLASHPORT_OK, NULL);
    flashport_context_destroy(ctx);
    ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue("cuda", stream, &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_cuda_stream");
    CHECK(flashport_context_device(ctx) == device);
    printf("%s\n", flashport_context_selection(ctx));
    wrap(ctx, &d);

    flashport_plan_info short_plan, long_plan;
    CHECK_STATUS(flashport_plan(ctx, &short_p, &short_plan), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_plan(ctx, &long_p, &long_plan), FLASHPORT_OK, NULL);
    CHECK(short_plan.workspace_bytes > 0 && long_plan.workspace_bytes > short_plan.workspace_bytes);

    /* Once without the spinner, which also loads every kernel: loading one lazily may wait for
     * the device, which is the runtime's doing and not what is checked below. */
    spinner<<<1, 32, 0, other>>>(1000);
    CUDA_OK(cudaStreamSynchronize(other));
    poison(stream, &d);
    queue_flow(ctx, stream, &d, &main_p, o, lse, 1);
    CHECK(close_to(o, o_ref, Q_N));
    CHECK(close_to(lse, lse_ref, LSE_N));
    poison(stream, &d);
    queue_flow(ctx, stream, &d, &short_p, o, lse, 1);
    CHECK(close_to(o, o_short_ref, HQ * D));
    CHECK(close_to(lse, lse_short_ref, HQ));

    /* Now with another stream busy for seconds. */
    poison(stream, &d);
    spinner<<<1, 32, 0, other>>>(4000000000ull);
    CUDA_OK(cudaGetLastError());
    queue_flow(ctx, stream, &d, &main_p, o, lse, 1);
    CHECK(close_to(o, o_ref, Q_N));
    CHECK(close_to(lse, lse_ref, LSE_N));
    flashport_timer *t = NULL;
    double ms = -1.0;
    CHECK_STATUS(flashport_timer_start(ctx, &t), FLASHPORT_OK, NULL);
    queue_flow(ctx, stream, &d, &long_p, o, lse, 0); /* the workspace grows here */
    if (t) CHECK_STATUS(flashport_timer_stop(t, &ms), FLASHPORT_OK, NULL);
    CHECK(ms >= 99.0); /* produce's 100 ms delay is on the stream between the marks */
    CHECK_STATUS(flashport_synchronize(ctx), FLASHPORT_OK, NULL);
    CHECK(close_to(o, o_long_ref, HQ * D));
    CHECK(close_to(lse, lse_long_ref, HQ));

    /* Destroying the context neither waits for the caller's stream nor destroys it. */
    spinner<<<1, 32, 0, stream>>>(300000000ull);
    unwrap(&d);
    flashport_context_destroy(ctx);
    CHECK(still_running(stream));
    if (pools) {
        CHECK(still_running(other));
    } else {
        printf("no memory pools on device %d: allocations synchronise the device, the spinning "
               "stream is not checked\n", device);
    }
    produce<<<64, 256, 0, stream>>>(d.q, d.k, d.v, Q_N, KV_N, 0);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaStreamQuery(stream));
    printf("checked with another stream busy: main flow, split-KV workspace growth, timer "
           "(%.1f ms), synchronize, destroy\n", ms);

    /* A NULL queue: the legacy default stream (PyTorch's default), ordered with the caller's
     * work there. The producer's delay would show as NaN inputs if flashport ran elsewhere. */
    ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue("cuda", NULL, &ctx), FLASHPORT_OK, NULL);
    if (ctx) {
        CHECK(flashport_context_device(ctx) == device);
        wrap(ctx, &d);
        poison(stream, &d);
        queue_flow(ctx, 0, &d, &main_p, o, lse, 1);
        CHECK(close_to(o, o_ref, Q_N));
        unwrap(&d);
        flashport_context_destroy(ctx);
        printf("checked on the legacy default stream (queue NULL)\n");
    }

    /* Two GPUs: the stream decides the device, and the caller's current device is kept. */
    if (n_devices >= 2) {
        const int second = device == 0 ? 1 : 0;
        CHECK_STATUS(flashport_context_create_on_queue(second == 1 ? "cuda:1" : "cuda:0", stream,
                                                       &ctx),
                     FLASHPORT_ERROR_MISMATCH, "the stream belongs to device");
        CUDA_OK(cudaSetDevice(second));
        ctx = NULL;
        CHECK_STATUS(flashport_context_create_on_queue("cuda", stream, &ctx), FLASHPORT_OK, NULL);
        if (ctx) {
            CHECK(flashport_context_device(ctx) == device);
            wrap(ctx, &d);
            poison(stream, &d);
            queue_flow(ctx, stream, &d, &main_p, o, lse, 1);
            CHECK(close_to(o, o_ref, Q_N));
            int current = -1;
            CUDA_OK(cudaGetDevice(&current));
            CHECK(current == second);
            unwrap(&d);
            flashport_context_destroy(ctx);
        }
        CUDA_OK(cudaSetDevice(device));
    } else {
        printf("one GPU: the device mismatch and the current-device check are not exercised\n");
    }

    CUDA_OK(cudaStreamSynchronize(other));
    CUDA_OK(cudaStreamDestroy(other));
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFreeHost(o));
    CUDA_OK(cudaFreeHost(lse));
    CUDA_OK(cudaFree(d.q));
    CUDA_OK(cudaFree(d.k));
    CUDA_OK(cudaFree(d.v));
    CUDA_OK(cudaFree(d.o));
    CUDA_OK(cudaFree(d.lse));
    return check_report("test_cuda_stream");
}
