/*
 * Guard zones: every kernel variant of every backend present writes its outputs and nothing
 * else. O and the LSE are device buffers filled with a canary byte, larger than the problem
 * needs: O has padded rows (a gap after each row of the head dimension) and a trailing zone,
 * the LSE a trailing zone, and in the packed (varlen) problems rows before the first sequence
 * and after the last. After the call every canary byte must be as it was, and the rows the
 * problem covers must have been written. The backward pass is guarded the same way: dQ, dK and
 * dV take the padded rows and trailing zones (Q, K and V share their strides), from the O and
 * LSE of the backend's own forward. A variant that declines a problem is named and left out;
 * each variant must run at least one problem, forward or backward.
 *
 * Usage: test_guard_zones [BACKEND...]   (default: every backend available here)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

enum { PAD = 8, GUARD_BYTES = 4096, GUARD_ROWS = 3 };
/* All-ones bytes: a NaN in f16, bf16 and f32, which no kernel writes for these finite inputs, so
 * an element still all canary was not written (0xa5a5, say, is an f16 gradient like any other). */
static const unsigned char CANARY = 0xff;

typedef struct shape {
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    int causal, lse, varlen;
} shape;

static const shape shapes[] = {
    {FLASHPORT_F32, 2, 4, 2, 37, 45, 64, 1, 1, 0},  {FLASHPORT_F16, 1, 2, 2, 70, 70, 128, 0, 1, 0},
    {FLASHPORT_BF16, 1, 2, 1, 33, 65, 80, 0, 0, 0}, {FLASHPORT_F32, 1, 1, 1, 20, 40, 320, 1, 1, 0},
    {FLASHPORT_F32, 2, 2, 1, 19, 31, 64, 1, 1, 1},  {FLASHPORT_F16, 2, 2, 2, 40, 40, 128, 0, 1, 1},
    /* Decode: a few rows against many keys, few blocks (the decode and split-KV variants). */
    {FLASHPORT_BF16, 2, 8, 2, 3, 700, 128, 1, 1, 0},
    /* A head past 512 columns: the wide 3xTF32 kernel's 1024-column tile configurations. */
    {FLASHPORT_F32, 1, 2, 1, 9, 23, 600, 1, 1, 0},
};
enum { SHAPES = sizeof shapes / sizeof shapes[0] };

/* Random bytes that are small finite values in every dtype: the high byte of each 16-bit
 * element stays in 0x30..0x3b (|x| < 1 in f16 and bf16), and f32 is built from those halves. */
static void fill_inputs(unsigned char *data, size_t bytes, uint32_t seed) {
    for (size_t i = 0; i < bytes; i++) {
        seed = seed * 1664525u + 1013904223u;
        data[i] = (unsigned char)(i % 2 ? 0x30 + (seed >> 24) % 12 : seed >> 24);
    }
}

typedef struct call {
    flashport_attention_desc d;
    int32_t cu[3], cu_kv[3];
    size_t q_bytes, kv_bytes, o_bytes, lse_bytes; /* o_bytes and lse_bytes: the guarded extent */
    int64_t rows, first_row, last_row;            /* O's rows [first, last) are computed */
    int64_t kv_rows;                              /* K/V rows, every one of them used */
} call;

/* padded: Q, K and V (and so dQ, dK, dV) get O's padded rows and a trailing zone too. */
static void describe(call *c, const shape *s, int padded) {
    memset(c, 0, sizeof *c);
    flashport_attention_desc *d = &c->d;
    const int64_t n = s->seq_q;
    flashport_attention_desc_init(d, s->dtype, s->batch, s->heads_q, s->heads_kv, n, s->seq_kv,
                                  s->head_dim, FLASHPORT_LAYOUT_BNHD);
    d->causal = s->causal;
    c->rows = s->batch * n;
    c->first_row = 0;
    if (s->varlen) {
        /* Two sequences of n and n - 5 rows, between GUARD_ROWS rows no sequence covers; their
         * keys packed too (as packed queries need), seq_kv and seq_kv - 3 of them. */
        c->cu[0] = GUARD_ROWS, c->cu[1] = GUARD_ROWS + (int32_t)n;
        c->cu[2] = c->cu[1] + (int32_t)n - 5;
        c->rows = c->cu[2] + GUARD_ROWS;
        c->first_row = GUARD_ROWS;
        c->cu_kv[0] = 0, c->cu_kv[1] = (int32_t)s->seq_kv;
        c->cu_kv[2] = c->cu_kv[1] + (int32_t)s->seq_kv - 3;
        flashport_attention_desc_set_varlen(d, c->rows, n, c->cu_kv[2], s->seq_kv);
    }
    c->last_row = s->varlen ? c->cu[2] : c->rows;
    const size_t es = flashport_dtype_size(s->dtype);
    const int64_t row = s->heads_q * (s->head_dim + PAD); /* O's padded row, in elements */
    d->o.seq = row;
    d->o.head = s->head_dim + PAD;
    d->o.batch = s->varlen ? 0 : n * row;
    const int64_t kv_rows = s->varlen ? c->cu_kv[2] : s->batch * s->seq_kv;
    c->kv_rows = kv_rows;
    c->q_bytes = (size_t)(c->rows * s->heads_q * s->head_dim) * es;
    c->kv_bytes = (size_t)(kv_rows * s->heads_kv * s->head_dim) * es;
    if (padded) {
        const int64_t kv_row = s->heads_kv * (s->head_dim + PAD);
        d->q = d->o;
        d->k.seq = d->v.seq = kv_row;
        d->k.head = d->v.head = s->head_dim + PAD;
        d->k.batch = d->v.batch = s->varlen ? 0 : s->seq_kv * kv_row;
        c->q_bytes = (size_t)(c->rows * row) * es + GUARD_BYTES;
        c->kv_bytes = (size_t)(kv_rows * kv_row) * es + GUARD_BYTES;
    }
    c->o_bytes = (size_t)(c->rows * row) * es + GUARD_BYTES;
    c->lse_bytes = s->lse ? (size_t)(c->rows * s->heads_q) * sizeof(float) + GUARD_BYTES : 0;
}

/* O bytes the call must write: rows first..last, heads, the head dimension (not the pad). */
static int in_output(const call *c, const shape *s, size_t byte) {
    const size_t es = flashport_dtype_size(s->dtype);
    const int64_t e = (int64_t)(byte / es), row = e / c->d.o.seq, col = e % c->d.o.head;
    return row < c->rows && row >= c->first_row && row < c->last_row && col < s->head_dim;
}

/* dK and dV bytes the backward must write: every key row, heads, the head dimension. */
static int in_kv_grad(const call *c, const shape *s, size_t byte) {
    const size_t es = flashport_dtype_size(s->dtype);
    const int64_t e = (int64_t)(byte / es), row = e / c->d.k.seq, col = e % c->d.k.head;
    return row < c->kv_rows && col < s->head_dim;
}

/* The LSE of the packed problems is [heads_q, total_q]; the dense one [batch, heads_q, seq_q]. */
static int in_lse(const call *c, const shape *s, size_t byte) {
    const int64_t i = (int64_t)(byte / sizeof(float)), total = c->rows * s->heads_q;
    if (i >= total) return 0;
    if (!s->varlen) return 1;
    const int64_t r = i % c->rows;
    return r >= c->first_row && r < c->last_row;
}

/* Canary bytes that changed, and output elements left unwritten (all canary). */
static void inspect(const unsigned char *bytes, size_t n, size_t es, const call *c, const shape *s,
                    int (*inside)(const call *, const shape *, size_t), long *changed,
                    long *unwritten) {
    for (size_t b = 0; b < n; b += es) {
        int all_canary = 1;
        for (size_t i = 0; i < es; i++) all_canary &= bytes[b + i] == CANARY;
        if (inside(c, s, b))
            *unwritten += all_canary;
        else
            *changed += !all_canary;
    }
}

/* 1 when the variant ran the shape with every guard intact, 0 when it declined, -1 on failure. */
static int guarded_run(flashport_context *ctx, const char *kernel, const shape *s, int index) {
    call c;
    describe(&c, s, 0);
    c.d.kernel = kernel;
    flashport_buffer *b[5] = {0};
    const size_t sizes[5] = {c.q_bytes, c.kv_bytes, c.kv_bytes, c.o_bytes, c.lse_bytes};
    size_t largest = 0;
    for (int i = 0; i < 5; i++) largest = sizes[i] > largest ? sizes[i] : largest;
    unsigned char *host = malloc(largest); /* staging for every upload and O's download */
    unsigned char *lse_host = c.lse_bytes ? malloc(c.lse_bytes) : NULL;
    flashport_status st =
        host && (!c.lse_bytes || lse_host) ? FLASHPORT_OK : FLASHPORT_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < 5 && !st; i++) {
        if (!sizes[i]) continue;
        st = flashport_buffer_alloc(ctx, sizes[i], &b[i]);
        if (!st && i < 3) fill_inputs(host, sizes[i], (uint32_t)(index * 7 + i));
        if (!st && i >= 3) memset(host, CANARY, sizes[i]);
        if (!st) st = flashport_buffer_upload(b[i], 0, host, sizes[i]);
    }
    flashport_buffer *cu = NULL, *cu_kv = NULL;
    if (!st && s->varlen) {
        st = flashport_buffer_alloc(ctx, sizeof c.cu, &cu);
        if (!st) st = flashport_buffer_upload(cu, 0, c.cu, sizeof c.cu);
        if (!st) st = flashport_buffer_alloc(ctx, sizeof c.cu_kv, &cu_kv);
        if (!st) st = flashport_buffer_upload(cu_kv, 0, c.cu_kv, sizeof c.cu_kv);
    }
    int result = -1;
    if (!st) {
        flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
        a.q = b[0], a.k = b[1], a.v = b[2], a.o = b[3], a.lse = b[4], a.cu_seqlens_q = cu;
        a.cu_seqlens_kv = cu_kv;
        st = flashport_attention_run(ctx, &c.d, &a);
        if (st == FLASHPORT_ERROR_UNSUPPORTED) result = 0;
        if (!st) st = flashport_synchronize(ctx);
        if (!st) st = flashport_buffer_download(b[3], 0, host, c.o_bytes);
        if (!st && lse_host) st = flashport_buffer_download(b[4], 0, lse_host, c.lse_bytes);
    }
    if (result == 0) {
        printf("  shape %d declined: %s\n", index, flashport_last_error());
    } else if (st) {
        fprintf(stderr, "  shape %d: %s\n", index, flashport_last_error());
    } else {
        long changed = 0, unwritten = 0;
        inspect(host, c.o_bytes, flashport_dtype_size(s->dtype), &c, s, in_output, &changed,
                &unwritten);
        if (lse_host)
            inspect(lse_host, c.lse_bytes, sizeof(float), &c, s, in_lse, &changed, &unwritten);
        printf("  shape %d: %ld canary bytes changed, %ld output elements unwritten\n", index,
               changed, unwritten);
        result = changed || unwritten ? -1 : 1;
    }
    for (int i = 0; i < 5; i++) flashport_buffer_free(b[i]);
    flashport_buffer_free(cu);
    flashport_buffer_free(cu_kv);
    free(host);
    free(lse_host);
    return result;
}

/* A device buffer of `bytes` holding random inputs (seed) or, with seed < 0, the canary. */
static flashport_status filled_buffer(flashport_context *ctx, size_t bytes, long seed,
                                      unsigned char *host, flashport_buffer **out) {
    flashport_status st = flashport_buffer_alloc(ctx, bytes, out);
    if (st) return st;
    if (seed < 0)
        memset(host, CANARY, bytes);
    else
        fill_inputs(host, bytes, (uint32_t)seed);
    return flashport_buffer_upload(*out, 0, host, bytes);
}

/* The backward pass of the shape on the variant, dQ, dK and dV guarded, from O and the LSE of
 * the backend's planner: 1 when it ran with every guard intact, 0 when it (or the forward)
 * declined, -1 on failure. */
static int guarded_backward(flashport_context *ctx, const char *kernel, const shape *s, int index) {
    call c;
    describe(&c, s, 1);
    const size_t lse_bytes = (size_t)(c.rows * s->heads_q) * sizeof(float);
    enum { Q, K, V, O, LSE, DO, DQ, DK, DV, CU, CU_KV, N };
    const size_t sizes[N] = {c.q_bytes, c.kv_bytes, c.kv_bytes, c.o_bytes, lse_bytes, c.o_bytes,
                             c.q_bytes, c.kv_bytes, c.kv_bytes, s->varlen ? sizeof c.cu : 0,
                             s->varlen ? sizeof c.cu_kv : 0};
    flashport_buffer *b[N] = {0};
    size_t largest = 0;
    for (int i = 0; i < N; i++) largest = sizes[i] > largest ? sizes[i] : largest;
    unsigned char *host = malloc(largest);
    flashport_status st = host ? FLASHPORT_OK : FLASHPORT_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < N && !st; i++) {
        if (!sizes[i]) continue;
        if (i == CU || i == CU_KV) {
            st = flashport_buffer_alloc(ctx, sizes[i], &b[i]);
            if (!st) st = flashport_buffer_upload(b[i], 0, i == CU ? c.cu : c.cu_kv, sizes[i]);
        } else {
            const long seed = i >= DQ || i == O || i == LSE ? -1 : 100 + index * 11 + i;
            st = filled_buffer(ctx, sizes[i], seed, host, &b[i]);
        }
    }
    int result = -1;
    if (!st) {
        flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
        a.q = b[Q], a.k = b[K], a.v = b[V], a.o = b[O], a.lse = b[LSE];
        a.cu_seqlens_q = b[CU], a.cu_seqlens_kv = b[CU_KV];
        st = flashport_attention_run(ctx, &c.d, &a); /* the planner's forward */
        if (!st) {
            a.d_o = b[DO], a.d_q = b[DQ], a.d_k = b[DK], a.d_v = b[DV];
            c.d.kernel = kernel;
            st = flashport_attention_backward(ctx, &c.d, &a);
        }
        if (st == FLASHPORT_ERROR_UNSUPPORTED) result = 0;
        if (!st) st = flashport_synchronize(ctx);
    }
    if (result == 0) {
        printf("  backward %d declined: %s\n", index, flashport_last_error());
    } else if (st) {
        fprintf(stderr, "  backward %d: %s\n", index, flashport_last_error());
    } else {
        long changed = 0, unwritten = 0;
        const size_t es = flashport_dtype_size(s->dtype);
        for (int i = DQ; i <= DV && !st; i++) {
            st = flashport_buffer_download(b[i], 0, host, sizes[i]);
            if (!st)
                inspect(host, sizes[i], es, &c, s, i == DQ ? in_output : in_kv_grad, &changed,
                        &unwritten);
        }
        if (st) {
            fprintf(stderr, "  backward %d: %s\n", index, flashport_last_error());
        } else {
            printf("  backward %d: %ld canary bytes changed, %ld gradient elements unwritten\n",
                   index, changed, unwritten);
            result = changed || unwritten ? -1 : 1;
        }
    }
    for (int i = 0; i < N; i++) flashport_buffer_free(b[i]);
    free(host);
    return result;
}

/* Whether the planner declines a plain bf16 problem on the kernel because this machine lacks
 * what it needs. */
static int cannot_run_here(flashport_context *ctx, const char *kernel) {
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_BF16, 1, 1, 1, 64, 64, 64, FLASHPORT_LAYOUT_BHND);
    d.kernel = kernel;
    flashport_plan_info info;
    return flashport_attention_plan(ctx, &d, &info) == FLASHPORT_ERROR_UNSUPPORTED &&
           strstr(info.reason, "cannot run here") != NULL;
}

static void guard_backend(const char *name) {
    flashport_context *ctx = NULL;
    if (flashport_context_create(name, &ctx) != FLASHPORT_OK) {
        CHECK(0);
        fprintf(stderr, "%s: %s\n", name, flashport_last_error());
        return;
    }
    const int kernels = flashport_kernel_count(name);
    CHECK(kernels > 0);
    for (int k = 0; k < kernels; k++) {
        flashport_kernel_info info;
        CHECK(flashport_kernel_get_info(name, k, &info) == FLASHPORT_OK);
        printf("%s / %s:\n", name, info.name);
        int ran = 0;
        for (int s = 0; s < SHAPES; s++) {
            const int r = guarded_run(ctx, info.name, &shapes[s], s);
            CHECK(r >= 0);
            ran += r > 0;
        }
        for (int s = 0; s < SHAPES; s++) {
            const int r = guarded_backward(ctx, info.name, &shapes[s], s);
            CHECK(r >= 0);
            ran += r > 0;
        }
        /* The NVIDIA-only OpenCL kernel declines every shape off NVIDIA hardware, and a CPU
         * kernel of units this CPU lacks (cpu_simd's amxbf16) every shape here, saying so. */
        if (!ran) printf("  declined every shape\n");
        CHECK(ran > 0 || strcmp(info.name, "nv_tf32x3") == 0 || cannot_run_here(ctx, info.name));
    }
    flashport_context_destroy(ctx);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int i = 1; i < argc; i++) guard_backend(argv[i]);
        return check_report("test_guard_zones");
    }
    for (int i = 0; i < flashport_backend_count(); i++) {
        flashport_backend_info bi;
        CHECK(flashport_backend_get_info(i, &bi) == FLASHPORT_OK);
        if (bi.available)
            guard_backend(bi.name);
        else
            printf("%s: not here (%s)\n", bi.name, bi.reason);
    }
    return check_report("test_guard_zones");
}
