/*
 * The reference backend's backward pass against finite differences of its own forward pass:
 * for every element of Q, K and V of tiny f32 problems, (L(x + h) - L(x - h)) / 2h with
 * L = sum(dO * O) must match dQ, dK and dV, feature by feature (GQA, causal with Nq != Nkv,
 * window, softcap, ALiBi, bias with fully masked rows, sinks, packed sequences) and all of them
 * at once. Then: f16 and bf16 gradients agree with f32 ones on the same values; packed rows of
 * no sequence are never written; paged K/V and FP8 inputs are declined by name; and bad dO, dQ,
 * dK, dV or LSE buffers get their specific status with nothing written.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backward_case.h"
#include "check.h"

static double loss(flashport_context *ctx, bwd_case *c) {
    if (bwd_case_forward(ctx, c) != FLASHPORT_OK) return NAN;
    double l = 0.0;
    for (int64_t i = 0; i < c->n_q; i++)
        if (!bwd_unowned(c, 0, i))
            l += bwd_get(c->d_o, FLASHPORT_F32, i) * bwd_get(c->o, FLASHPORT_F32, i);
    return l;
}

/* Largest |finite difference - gradient| over one tensor, relative to its largest gradient. */
static double fd_error(flashport_context *ctx, bwd_case *c, float *x, const float *grad, int64_t n,
                       int kv) {
    const float h = 5e-3f;
    double worst = 0.0, top = 1e-3;
    for (int64_t i = 0; i < n; i++)
        if (!bwd_unowned(c, kv, i)) top = fmax(top, fabs(grad[i]));
    for (int64_t i = 0; i < n; i++) {
        if (bwd_unowned(c, kv, i)) continue;
        const float x0 = x[i], up = x0 + h, down = x0 - h;
        x[i] = up;
        const double l_up = loss(ctx, c);
        x[i] = down;
        const double l_down = loss(ctx, c);
        x[i] = x0;
        const double fd = (l_up - l_down) / ((double)up - (double)down);
        worst = fmax(worst, fabs(fd - grad[i]) / top);
    }
    return worst;
}

/* Every element a sequence owns was written, and no other. */
static int written_exactly(const bwd_case *c) {
    const void *t[3] = {c->dq, c->dk, c->dv};
    const int64_t n[3] = {c->n_q, c->n_kv, c->n_kv};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < n[k]; i++) {
            const unsigned char *b = (const unsigned char *)t[k] + (size_t)i * c->esize;
            int sentinel = 1;
            for (size_t e = 0; e < c->esize; e++) sentinel &= b[e] == BWD_SENTINEL;
            if (sentinel != bwd_unowned(c, k > 0, i)) return 0;
        }
    return 1;
}

static bwd_spec base(void) {
    return (bwd_spec){
        FLASHPORT_F32,        2, 4, 2, 5, 7, 8, FLASHPORT_LAYOUT_BHND, 0, -1, -1, 0.0f, 0.0f,
        FLASHPORT_ALIBI_NONE, 0, 0, 0, 0, 0};
}

static void finite_differences(flashport_context *ref) {
    struct {
        const char *name;
        bwd_spec s;
    } cases[12];
    int n = 0;
    bwd_spec s = base();
    cases[n].name = "dense GQA", cases[n++].s = s;
    s = base(), s.heads_q = 3, s.heads_kv = 1, s.seq_q = 6, s.seq_kv = 4, s.causal = 1;
    s.layout = FLASHPORT_LAYOUT_BNHD;
    cases[n].name = "causal, Nq > Nkv (rows without keys)", cases[n++].s = s;
    s = base(), s.window_left = 2, s.window_right = 1;
    cases[n].name = "window 2, 1", cases[n++].s = s;
    s = base(), s.softcap = 1.5f, s.scale = 1.3f;
    cases[n].name = "softcap near saturation", cases[n++].s = s;
    s = base(), s.alibi = FLASHPORT_ALIBI_PER_HEAD, s.causal = 1;
    cases[n].name = "ALiBi per head, causal", cases[n++].s = s;
    s = base(), s.alibi = FLASHPORT_ALIBI_PER_BATCH_HEAD, s.window_right = 2;
    cases[n].name = "ALiBi per batch and head, right window", cases[n++].s = s;
    s = base(), s.bias = 1, s.masked = 1;
    cases[n].name = "bias with masked rows", cases[n++].s = s;
    s = base(), s.sinks = 1, s.bias = 1, s.masked = 1;
    cases[n].name = "sinks, masked rows", cases[n++].s = s;
    s = base(), s.varlen = 1, s.batch = 3, s.causal = 1;
    cases[n].name = "packed sequences, causal", cases[n++].s = s;
    s = base(), s.varlen = 1, s.batch = 3, s.window_left = 3, s.window_right = 1;
    s.softcap = 2.0f, s.alibi = FLASHPORT_ALIBI_PER_BATCH_HEAD, s.bias = 1, s.sinks = 1;
    s.layout = FLASHPORT_LAYOUT_BNHD, s.head_dim = 5;
    cases[n].name = "every feature together", cases[n++].s = s;
    for (int i = 0; i < n; i++) {
        bwd_case c;
        bwd_case_make(&c, &cases[i].s);
        CHECK_STATUS(bwd_case_forward(ref, &c), FLASHPORT_OK, NULL);
        CHECK_STATUS(bwd_case_backward(ref, &c, NULL), FLASHPORT_OK, NULL);
        CHECK(written_exactly(&c));
        const double eq = fd_error(ref, &c, c.q, c.dq, c.n_q, 0);
        const double ek = fd_error(ref, &c, c.k, c.dk, c.n_kv, 1);
        const double ev = fd_error(ref, &c, c.v, c.dv, c.n_kv, 1);
        printf("%-40s finite differences: dQ %.1e dK %.1e dV %.1e\n", cases[i].name, eq, ek, ev);
        CHECK(eq < 2e-3 && ek < 2e-3 && ev < 2e-3);
        bwd_case_free(&c);
    }
}

/* f16 and bf16 gradients are the f32 ones of the same values, rounded once. */
static void half_dtypes(flashport_context *ref) {
    const flashport_dtype dts[2] = {FLASHPORT_F16, FLASHPORT_BF16};
    const double tol[2] = {2e-3, 1e-2};
    for (int t = 0; t < 2; t++) {
        bwd_spec s = base();
        s.dtype = dts[t], s.causal = 1, s.softcap = 3.0f, s.seq_q = 9, s.seq_kv = 13,
        s.head_dim = 16;
        bwd_case h, f;
        const uint64_t seed = bwd_rng;
        bwd_case_make(&h, &s);
        s.dtype = FLASHPORT_F32;
        bwd_rng = seed;
        bwd_case_make(&f, &s);
        void *fs[4] = {f.q, f.k, f.v, f.d_o};
        const void *hs[4] = {h.q, h.k, h.v, h.d_o};
        const int64_t ns[4] = {f.n_q, f.n_kv, f.n_kv, f.n_q};
        for (int k = 0; k < 4; k++)
            for (int64_t i = 0; i < ns[k]; i++)
                bwd_set(fs[k], FLASHPORT_F32, i, bwd_get(hs[k], dts[t], i));
        CHECK(bwd_case_forward(ref, &h) == FLASHPORT_OK);
        CHECK(bwd_case_forward(ref, &f) == FLASHPORT_OK);
        CHECK(bwd_case_backward(ref, &h, NULL) == FLASHPORT_OK);
        CHECK(bwd_case_backward(ref, &f, NULL) == FLASHPORT_OK);
        const void *hg[3] = {h.dq, h.dk, h.dv}, *fg[3] = {f.dq, f.dk, f.dv};
        for (int k = 0; k < 3; k++) {
            double num = 0.0, den = 0.0;
            for (int64_t i = 0; i < ns[k]; i++) {
                const double a = bwd_get(hg[k], dts[t], i), b = bwd_get(fg[k], FLASHPORT_F32, i);
                num += (a - b) * (a - b), den += b * b;
            }
            printf("%s gradient %d against f32: relative L2 %.1e\n", flashport_dtype_name(dts[t]),
                   k, sqrt(num / den));
            CHECK(sqrt(num / den) < tol[t]);
        }
        bwd_case_free(&h);
        bwd_case_free(&f);
    }
}

static int untouched(const bwd_case *c) {
    const void *t[3] = {c->dq, c->dk, c->dv};
    const int64_t n[3] = {c->n_q, c->n_kv, c->n_kv};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < (size_t)n[k] * c->esize; i++)
            if (((const unsigned char *)t[k])[i] != BWD_SENTINEL) return 0;
    return 1;
}

/* Declines and bad buffers: the status, a message naming the cause, and no output written. */
static void refused(flashport_context *ref) {
    bwd_spec s = base();
    bwd_case c;
    bwd_case_make(&c, &s);
    CHECK(bwd_case_forward(ref, &c) == FLASHPORT_OK);

    flashport_attention_desc d = c.d;
    /* 7 pages of 2 rows: the K and V arrays as they are. */
    flashport_attention_desc_set_paged(&d, 7, 2, 4, FLASHPORT_LAYOUT_BHND);
    d.seq_kv = 7;
    int32_t lens[2] = {7, 5}, table[8] = {0, 1, 2, 3, 4, 5, 6, 0};
    flashport_attention_host_args a = c.a;
    a.seqlens_kv = lens, a.block_table = table;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    memset(c.dq, BWD_SENTINEL, (size_t)c.n_q * c.esize);
    memset(c.dk, BWD_SENTINEL, (size_t)c.n_kv * c.esize);
    memset(c.dv, BWD_SENTINEL, (size_t)c.n_kv * c.esize);
    CHECK_STATUS(flashport_attention_backward_host(ref, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of paged KV cache");
    CHECK(untouched(&c));

    d = c.d;
    d.dtype = FLASHPORT_FP8_E4M3, d.out_dtype = FLASHPORT_F32, d.descale = FLASHPORT_DESCALE_TENSOR;
    const float one = 1.0f;
    a = c.a;
    a.q_descale = a.k_descale = a.v_descale = &one;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    CHECK_STATUS(flashport_attention_backward_host(ref, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of FP8 inputs");
    CHECK(untouched(&c));

    struct {
        const char *what, *needle;
        flashport_status st;
        int slot; /* which member to break: 0 d_o NULL, 1 d_q NULL, 2 lse NULL, 3 d_k = k,
                   * 4 d_v = d_o, 5 d_q = d_k */
    } bad[] = {
        {"no dO", "args.d_o is NULL", FLASHPORT_ERROR_INVALID_ARGUMENT, 0},
        {"no dQ", "args.d_q is NULL", FLASHPORT_ERROR_INVALID_ARGUMENT, 1},
        {"no LSE", "args.lse is NULL", FLASHPORT_ERROR_INVALID_ARGUMENT, 2},
        {"dK on K", "output d_k shares storage with k", FLASHPORT_ERROR_MISMATCH, 3},
        {"dV on dO", "shares storage", FLASHPORT_ERROR_MISMATCH, 4},
        {"dQ on dK", "shares storage", FLASHPORT_ERROR_MISMATCH, 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        a = c.a;
        a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
        switch (bad[i].slot) {
        case 0: a.d_o = NULL; break;
        case 1: a.d_q = NULL; break;
        case 2: a.lse = NULL; break;
        case 3: a.d_k = c.k; break;
        case 4: a.d_v = c.d_o; break;
        default: a.d_q = c.dk; break;
        }
        CHECK_STATUS(flashport_attention_backward_host(ref, &c.d, &a), bad[i].st, bad[i].needle);
        CHECK(untouched(&c));
    }

    /* On buffers: a dQ buffer too small for the Q strides. */
    flashport_buffer *bufs[9] = {0};
    const size_t qb = (size_t)c.n_q * c.esize, kb = (size_t)c.n_kv * c.esize;
    const size_t sizes[9] = {qb, kb, kb, qb, (size_t)c.n_lse * 4, qb, qb - 4, kb, kb};
    const void *src[9] = {c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv};
    for (int i = 0; i < 9; i++) {
        CHECK(flashport_buffer_alloc(ref, sizes[i], &bufs[i]) == FLASHPORT_OK);
        CHECK(flashport_buffer_upload(bufs[i], 0, src[i], sizes[i]) == FLASHPORT_OK);
    }
    flashport_attention_args ba = FLASHPORT_ATTENTION_ARGS_INIT;
    ba.q = bufs[0], ba.k = bufs[1], ba.v = bufs[2], ba.o = bufs[3], ba.lse = bufs[4];
    ba.d_o = bufs[5], ba.d_q = bufs[6], ba.d_k = bufs[7], ba.d_v = bufs[8];
    CHECK_STATUS(flashport_attention_backward(ref, &c.d, &ba), FLASHPORT_ERROR_MISMATCH,
                 "buffer d_q holds");
    for (int i = 6; i < 9; i++) {
        unsigned char *back = malloc(sizes[i]);
        CHECK(flashport_buffer_download(bufs[i], 0, back, sizes[i]) == FLASHPORT_OK);
        CHECK(memcmp(back, src[i], sizes[i]) == 0);
        free(back);
    }
    for (int i = 0; i < 9; i++) flashport_buffer_free(bufs[i]);
    bwd_case_free(&c);
}

int main(void) {
    unsetenv("FLASHPORT_KERNEL");
    flashport_context *ref;
    if (flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    finite_differences(ref);
    half_dtypes(ref);
    refused(ref);
    flashport_context_destroy(ref);
    return check_report("test_reference_backward");
}
