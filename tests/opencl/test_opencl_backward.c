/*
 * The OpenCL backend's backward pass against the reference backend's in the same process, from
 * the reference's O and LSE, on problems that span several key tiles, query blocks and (with
 * the GPU shape) column slices: GQA, causal with Nq != Nkv, windows, softcap, ALiBi, a bias
 * that masks whole rows, sinks and packed sequences, in f32, f16 and bf16. Every element of dQ,
 * dK and dV is compared, and packed rows of no sequence must keep their sentinel. Two runs give
 * the same bits (no atomics), and paged K/V and FP8 inputs are declined by name with nothing
 * written. The planner's tile shape for the device runs, or the GPU one where
 * FLASHPORT_OPENCL_BACKWARD_SHAPE=gpu is set, as ctest does (tests/opencl/CMakeLists.txt).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "backward_case.h"
#include "check.h"

static double tolerance(flashport_dtype t) {
    return t == FLASHPORT_F32 ? 2e-5 : t == FLASHPORT_F16 ? 2e-3 : 1e-2;
}

static bwd_spec spec(flashport_dtype dt, int64_t nq, int64_t nkv, int64_t d) {
    bwd_spec s;
    memset(&s, 0, sizeof s);
    s.dtype = dt, s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seq_q = nq, s.seq_kv = nkv;
    s.head_dim = d, s.layout = FLASHPORT_LAYOUT_BHND, s.window_left = s.window_right = -1;
    return s;
}

/* One problem: the reference's and OpenCL's gradients from the reference's O and LSE. */
static void check(flashport_context *cl, flashport_context *ref, const bwd_spec *s,
                  const char *what) {
    double err[3];
    CHECK_STATUS(bwd_errors_vs_reference(cl, ref, s, NULL, err), FLASHPORT_OK, NULL);
    const double tol = tolerance(s->dtype);
    const int ok = err[0] < tol && err[1] < tol && err[2] < tol;
    CHECK(ok);
    printf("%s %-34s %s Nq=%lld Nkv=%lld d=%lld: dQ %.1e dK %.1e dV %.1e\n", ok ? "ok  " : "FAIL",
           what, flashport_dtype_name(s->dtype), (long long)s->seq_q, (long long)s->seq_kv,
           (long long)s->head_dim, err[0], err[1], err[2]);
}

/* The same problem twice: the same bits. */
static void determinism(flashport_context *cl, flashport_context *ref) {
    bwd_spec s = spec(FLASHPORT_F32, 90, 130, 48);
    s.causal = 1, s.softcap = 20.0f, s.deterministic = 1;
    bwd_case first, again;
    const uint64_t seed = bwd_rng;
    bwd_case_make(&first, &s);
    bwd_rng = seed;
    bwd_case_make(&again, &s);
    CHECK(bwd_case_forward(ref, &first) == FLASHPORT_OK);
    CHECK(bwd_case_forward(ref, &again) == FLASHPORT_OK);
    CHECK(bwd_case_backward(cl, &first, NULL) == FLASHPORT_OK);
    CHECK(bwd_case_backward(cl, &again, NULL) == FLASHPORT_OK);
    const int identical = bwd_same_bits(&first, &again);
    printf("deterministic: %s bits on a second run\n", identical ? "the same" : "DIFFERENT");
    CHECK(identical);
    bwd_case_free(&first);
    bwd_case_free(&again);
}

/* Paged K/V and FP8 inputs: declined by name, nothing written. */
static void declines(flashport_context *cl, flashport_context *ref) {
    bwd_spec s = spec(FLASHPORT_F32, 6, 8, 8);
    s.heads_q = s.heads_kv = 1;
    bwd_case c;
    bwd_case_make(&c, &s);
    CHECK(bwd_case_forward(ref, &c) == FLASHPORT_OK);
    memset(c.dq, BWD_SENTINEL, (size_t)c.n_q * c.esize);
    flashport_attention_desc d = c.d;
    flashport_attention_desc_set_paged(&d, 4, 4, 2, FLASHPORT_LAYOUT_BNHD);
    int32_t lens[2] = {8, 5}, table[4] = {0, 1, 2, 3};
    flashport_attention_host_args a = c.a;
    a.seqlens_kv = lens, a.block_table = table;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    CHECK_STATUS(flashport_attention_backward_host(cl, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of paged KV cache");
    d = c.d;
    d.dtype = FLASHPORT_FP8_E5M2, d.out_dtype = FLASHPORT_F32, d.descale = FLASHPORT_DESCALE_TENSOR;
    const float one = 1.0f;
    a = c.a;
    a.q_descale = a.k_descale = a.v_descale = &one;
    a.d_o = c.d_o, a.d_q = c.dq, a.d_k = c.dk, a.d_v = c.dv;
    CHECK_STATUS(flashport_attention_backward_host(cl, &d, &a), FLASHPORT_ERROR_UNSUPPORTED,
                 "backward pass of FP8 inputs");
    int untouched = 1;
    for (size_t i = 0; i < (size_t)c.n_q * c.esize; i++)
        untouched &= ((unsigned char *)c.dq)[i] == BWD_SENTINEL;
    CHECK(untouched);
    bwd_case_free(&c);
}

int main(void) {
    flashport_context *cl = NULL, *ref = NULL;
    if (flashport_context_create("opencl", &cl) != FLASHPORT_OK ||
        flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        printf("FAIL: cannot open the backends: %s\n", flashport_last_error());
        return 1;
    }
    bwd_spec s = spec(FLASHPORT_F32, 70, 100, 40);
    s.causal = 1;
    check(cl, ref, &s, "GQA, causal, Nq < Nkv");
    s = spec(FLASHPORT_F32, 100, 45, 200);
    s.causal = 1, s.sinks = 1, s.layout = FLASHPORT_LAYOUT_BNHD;
    check(cl, ref, &s, "d = 200, causal rows without keys");
    s = spec(FLASHPORT_F16, 80, 120, 64);
    s.window_left = 20, s.window_right = 5, s.softcap = 8.0f, s.alibi = FLASHPORT_ALIBI_PER_HEAD;
    s.scale = -0.2f;
    check(cl, ref, &s, "window, softcap, ALiBi, scale < 0");
    s = spec(FLASHPORT_BF16, 60, 90, 72);
    s.bias = 1, s.masked = 1, s.varlen = 1;
    check(cl, ref, &s, "packed, bias masking whole rows");
    s = spec(FLASHPORT_F32, 50, 70, 24);
    s.varlen = 1, s.causal = 1, s.softcap = 5.0f, s.alibi = FLASHPORT_ALIBI_PER_BATCH_HEAD;
    s.sinks = 1, s.window_left = 30;
    check(cl, ref, &s, "packed, every modifier");
    determinism(cl, ref);
    declines(cl, ref);
    flashport_context_destroy(ref);
    flashport_context_destroy(cl);
    return check_report("test_opencl_backward");
}
