/*
 * The thread-safety contract of flashport.h, exercised: 8 threads x 200 calls, first all on one
 * shared context, then with a context each. The calls cycle through small problems (GQA,
 * causal, sliding window, softcap, f16, decode with its keys split, with and without the LSE),
 * half through flashport_attention_run_host and half through device buffers (alloc, upload,
 * run, synchronize, download, free), and every 25th is invalid on purpose: it must fail with the
 * calling thread's own message and leave its output untouched. Every output must be
 * bit-identical to a serial run of the same problem.
 *
 * Usage: test_threads [BACKEND]    (default: FLASHPORT_BACKEND, else "reference")
 * Exits 77 (ctest's skip code) when the backend is not available here, with the reason.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashport.h"

enum { THREADS = 8, CALLS = 200, INVALID_EVERY = 25, SKIP = 77 };

typedef struct config {
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    int causal;
    int64_t window_left, window_right;
    float softcap;
    int lse;
} config;

static const config configs[] = {
    {FLASHPORT_F32, 1, 2, 2, 16, 16, 16, 0, -1, -1, 0.0f, 1},
    {FLASHPORT_F32, 2, 4, 2, 9, 23, 32, 1, -1, -1, 0.0f, 1},
    {FLASHPORT_F32, 1, 4, 1, 31, 17, 16, 0, -1, -1, 0.0f, 0},
    {FLASHPORT_F32, 1, 2, 1, 24, 24, 32, 0, 5, 3, 0.0f, 1},
    {FLASHPORT_F32, 2, 2, 2, 12, 40, 16, 0, -1, -1, 30.0f, 1},
    {FLASHPORT_F16, 1, 2, 2, 20, 20, 16, 1, -1, -1, 0.0f, 1},
    {FLASHPORT_F16, 1, 4, 2, 7, 33, 32, 0, -1, -1, 0.0f, 0},
    {FLASHPORT_F32, 1, 1, 1, 1, 64, 64, 0, -1, -1, 0.0f, 1},
    /* Decode shapes whose keys GPU kernels split across blocks, their partials merged through
     * the context's shared workspace: the merge must give the same bits on every thread. */
    {FLASHPORT_F16, 1, 8, 2, 2, 1024, 128, 0, -1, -1, 0.0f, 1},
    {FLASHPORT_F32, 2, 2, 2, 1, 700, 64, 0, -1, -1, 0.0f, 1},
};
enum { CONFIGS = sizeof configs / sizeof configs[0] };

/* A problem's inputs, and its outputs from the serial run. */
typedef struct problem {
    flashport_attention_desc desc;
    size_t q_bytes, kv_bytes, o_bytes, lse_bytes;
    unsigned char *q, *k, *v, *o, *lse;
} problem;

static problem problems[CONFIGS];
/* The problems the backend takes; those it declines are named and left out. */
static int runnable[CONFIGS], n_runnable;
static const char *backend;

static uint32_t next_random(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

/* Values in about [-1, 1]: f32 from 24 random bits, f16 as bit patterns of exponent 2^-6..2^0. */
static void fill(unsigned char *data, size_t bytes, flashport_dtype dtype, uint32_t seed) {
    if (dtype == FLASHPORT_F16) {
        uint16_t *h = (uint16_t *)data;
        for (size_t i = 0; i < bytes / 2; i++) {
            const uint32_t r = next_random(&seed);
            h[i] = (uint16_t)((r & 0x8000u) | ((9u + r % 7u) << 10) | (r >> 5 & 0x3ffu));
        }
    } else {
        float *f = (float *)data;
        for (size_t i = 0; i < bytes / 4; i++)
            f[i] = (float)next_random(&seed) / (float)(1u << 23) - 1.0f;
    }
}

static void setup(problem *p, const config *c, uint32_t seed) {
    flashport_attention_desc_init(&p->desc, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq_q,
                                  c->seq_kv, c->head_dim, FLASHPORT_LAYOUT_BHND);
    p->desc.causal = c->causal;
    p->desc.window_left = c->window_left;
    p->desc.window_right = c->window_right;
    p->desc.softcap = c->softcap;
    const size_t es = flashport_dtype_size(c->dtype);
    p->q_bytes = (size_t)(c->batch * c->heads_q * c->seq_q * c->head_dim) * es;
    p->kv_bytes = (size_t)(c->batch * c->heads_kv * c->seq_kv * c->head_dim) * es;
    p->o_bytes = p->q_bytes;
    p->lse_bytes = c->lse ? (size_t)(c->batch * c->heads_q * c->seq_q) * sizeof(float) : 0;
    p->q = malloc(p->q_bytes);
    p->k = malloc(p->kv_bytes);
    p->v = malloc(p->kv_bytes);
    p->o = malloc(p->o_bytes);
    p->lse = p->lse_bytes ? malloc(p->lse_bytes) : NULL;
    if (!p->q || !p->k || !p->v || !p->o || (p->lse_bytes && !p->lse)) {
        fprintf(stderr, "test_threads: out of host memory\n");
        exit(1);
    }
    fill(p->q, p->q_bytes, c->dtype, seed * 3 + 1);
    fill(p->k, p->kv_bytes, c->dtype, seed * 3 + 2);
    fill(p->v, p->kv_bytes, c->dtype, seed * 3 + 3);
}

/* One call of the problem on ctx into o and lse: through host arrays, or device buffers. */
static flashport_status run(flashport_context *ctx, const problem *p,
                            const flashport_attention_desc *desc, int via_buffers, void *o,
                            void *lse) {
    if (!via_buffers) {
        flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
        a.q = p->q, a.k = p->k, a.v = p->v, a.o = o, a.lse = lse;
        return flashport_attention_run_host(ctx, desc, &a);
    }
    flashport_buffer *q = NULL, *k = NULL, *v = NULL, *ob = NULL, *lb = NULL;
    flashport_status st = flashport_buffer_alloc(ctx, p->q_bytes, &q);
    if (!st) st = flashport_buffer_alloc(ctx, p->kv_bytes, &k);
    if (!st) st = flashport_buffer_alloc(ctx, p->kv_bytes, &v);
    if (!st) st = flashport_buffer_alloc(ctx, p->o_bytes, &ob);
    if (!st && lse) st = flashport_buffer_alloc(ctx, p->lse_bytes, &lb);
    if (!st) st = flashport_buffer_upload(q, 0, p->q, p->q_bytes);
    if (!st) st = flashport_buffer_upload(k, 0, p->k, p->kv_bytes);
    if (!st) st = flashport_buffer_upload(v, 0, p->v, p->kv_bytes);
    if (!st) {
        flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
        a.q = q, a.k = k, a.v = v, a.o = ob, a.lse = lb;
        st = flashport_attention_run(ctx, desc, &a);
    }
    if (!st) st = flashport_synchronize(ctx);
    if (!st) st = flashport_buffer_download(ob, 0, o, p->o_bytes);
    if (!st && lse) st = flashport_buffer_download(lb, 0, lse, p->lse_bytes);
    flashport_buffer_free(q);
    flashport_buffer_free(k);
    flashport_buffer_free(v);
    flashport_buffer_free(ob);
    flashport_buffer_free(lb);
    return st;
}

typedef struct worker {
    pthread_t thread;
    int index;
    flashport_context *ctx;
    int failures, checked;
    char first_failure[1024];
} worker;

/* Counted per thread (the threads share no counter); the first failure is kept to print. */
static void fail(worker *w, int call, const char *what, const char *detail) {
    if (!w->failures++)
        snprintf(w->first_failure, sizeof w->first_failure, "thread %d, call %d: %s%s", w->index,
                 call, what, detail);
}

static void *work(void *arg) {
    worker *w = arg;
    const unsigned char poison = 0xa5;
    for (int i = 0; i < CALLS; i++) {
        const problem *p = &problems[runnable[(w->index * 5 + i * 7) % n_runnable]];
        unsigned char *o = malloc(p->o_bytes), *lse = p->lse_bytes ? malloc(p->lse_bytes) : NULL;
        if (!o || (p->lse_bytes && !lse)) {
            fail(w, i, "out of host memory", "");
            free(o);
            break;
        }
        memset(o, poison, p->o_bytes);
        if (lse) memset(lse, poison, p->lse_bytes);
        if (i % INVALID_EVERY == INVALID_EVERY - 1) {
            /* A size only this thread and call use: the message must be this call's. */
            flashport_attention_desc bad = p->desc;
            bad.seq_q = -(1000 + 100 * w->index + i);
            char expect[64];
            snprintf(expect, sizeof expect, "(got %lld)", (long long)bad.seq_q);
            const flashport_status st = run(w->ctx, p, &bad, i % 2, o, lse);
            if (st != FLASHPORT_ERROR_INVALID_ARGUMENT)
                fail(w, i, "invalid call returned ", flashport_status_string(st));
            else if (!strstr(flashport_last_error(), expect))
                fail(w, i, "invalid call's message is another's: ", flashport_last_error());
            for (size_t b = 0; b < p->o_bytes; b++)
                if (o[b] != poison) {
                    fail(w, i, "invalid call wrote its output", "");
                    break;
                }
        } else {
            const flashport_status st = run(w->ctx, p, &p->desc, i % 2, o, lse);
            if (st != FLASHPORT_OK)
                fail(w, i, "call failed: ", flashport_last_error());
            else if (memcmp(o, p->o, p->o_bytes) != 0 || (lse && memcmp(lse, p->lse, p->lse_bytes)))
                fail(w, i, "output differs from the serial run's", "");
        }
        w->checked++;
        free(o);
        free(lse);
    }
    return NULL;
}

/* Runs the threads, each on its own context or all on `shared`; returns the failures. */
static int threaded(const char *mode, flashport_context *shared) {
    worker workers[THREADS];
    int failures = 0, checked = 0;
    for (int t = 0; t < THREADS; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].index = t;
        workers[t].ctx = shared;
        if (!shared && flashport_context_create(backend, &workers[t].ctx) != FLASHPORT_OK) {
            fprintf(stderr, "%s: context %d: %s\n", mode, t, flashport_last_error());
            return 1;
        }
    }
    for (int t = 0; t < THREADS; t++)
        if (pthread_create(&workers[t].thread, NULL, work, &workers[t]) != 0) {
            fprintf(stderr, "%s: cannot start thread %d\n", mode, t);
            return 1;
        }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(workers[t].thread, NULL);
        if (workers[t].failures) fprintf(stderr, "%s: %s\n", mode, workers[t].first_failure);
        failures += workers[t].failures;
        checked += workers[t].checked;
        if (!shared) flashport_context_destroy(workers[t].ctx);
    }
    printf("%s: %d threads x %d calls, %d checked, %d failed\n", mode, THREADS, CALLS, checked,
           failures);
    return failures + (checked != THREADS * CALLS);
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: test_threads [BACKEND]  (default: FLASHPORT_BACKEND, else "
                        "reference)\n");
        return 2;
    }
    backend = argc == 2 ? argv[1] : getenv("FLASHPORT_BACKEND");
    if (!backend || !backend[0]) backend = "reference";
    flashport_context *ctx = NULL;
    flashport_status st = flashport_context_create(backend, &ctx);
    if (st == FLASHPORT_ERROR_BACKEND_UNAVAILABLE || st == FLASHPORT_ERROR_NO_DEVICE) {
        printf("SKIPPED: backend %s is not available here: %s\n", backend, flashport_last_error());
        return SKIP;
    }
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "test_threads: %s\n", flashport_last_error());
        return 1;
    }
    printf("backend %s\n", flashport_context_selection(ctx));

    /* The serial run: the reference outputs, and which problems the backend takes. */
    for (int c = 0; c < CONFIGS; c++) {
        problem *p = &problems[c];
        setup(p, &configs[c], (uint32_t)c + 1);
        st = run(ctx, p, &p->desc, 0, p->o, p->lse);
        if (st == FLASHPORT_ERROR_UNSUPPORTED) {
            printf("problem %d declined: %s\n", c, flashport_last_error());
            continue;
        }
        if (st != FLASHPORT_OK) {
            fprintf(stderr, "problem %d, serial run: %s\n", c, flashport_last_error());
            return 1;
        }
        runnable[n_runnable++] = c;
    }
    if (n_runnable < CONFIGS / 2) {
        fprintf(stderr, "test_threads: %s ran only %d of %d problems\n", backend, n_runnable,
                CONFIGS);
        return 1;
    }
    int failures = threaded("one shared context", ctx);
    failures += threaded("a context per thread", NULL);
    flashport_context_destroy(ctx);
    for (int c = 0; c < CONFIGS; c++) {
        free(problems[c].q);
        free(problems[c].k);
        free(problems[c].v);
        free(problems[c].o);
        free(problems[c].lse);
    }
    printf("test_threads on %s: %s\n", backend, failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
