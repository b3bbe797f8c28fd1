/* The conformance runner's judgement on synthetic downloads: unwritten elements, writes into
 * the gaps of strided outputs, past their end and into packed rows of no sequence, NaN and
 * -inf expectations, tolerances (FP8 inputs by their output dtype). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "check.h"
#include "tensor.h"

/* A case: B=1, Hq=2, Hkv=1, Nq=3, Nkv=5, d=4, every row padded by 2 elements. */
static fc_case small_case(flashport_dtype dtype) {
    fc_case c;
    memset(&c, 0, sizeof c);
    strcpy(c.name, "small");
    c.dtype = c.out_dtype = dtype;
    c.batch = 1;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.seq_q = 3;
    c.seq_kv = 5;
    c.head_dim = 4;
    c.layout = FLASHPORT_LAYOUT_BHND;
    c.window_left = c.window_right = -1;
    c.pad = 2;
    c.tol_factor = 1.0;
    return c;
}

/* The small case with packed Q: 6 stored rows, sequences at rows 1-2 and 3-4 (cu_seqlens_q
 * {1, 3, 5}), so rows 0 and 5 belong to no sequence. */
static fc_case packed_case(void) {
    fc_case c = small_case(FLASHPORT_F32);
    c.batch = 2;
    c.seq_q = 2;
    c.q_varlen = 1;
    c.total_q = 6;
    c.kv_layout = FLASHPORT_KV_VARLEN;
    c.total_kv = 10;
    return c;
}

static const int32_t packed_cu[3] = {1, 3, 5};

typedef struct download {
    flashport_attention_desc p;
    const int32_t *cu;
    int64_t extent, n_lse;
    unsigned char o[4096];
    float lse[512];
    double exp_o[64], exp_lse[16];
} download;

/* A correct download of expected values exp_o[i] = i / 10, LSE 1.5 (rows of no sequence
 * untouched). */
static void correct(const fc_case *c, download *d) {
    fc_desc(c, NULL, &d->p);
    d->cu = c->q_varlen ? packed_cu : NULL;
    const tensor_shape s = fc_storage(c, 'o');
    d->extent = 1 + (s.batch - 1) * d->p.o.batch + (s.heads - 1) * d->p.o.head +
                (s.seq - 1) * d->p.o.seq + s.dim - 1;
    d->n_lse = s.batch * s.heads * s.seq;
    const flashport_dtype t = c->out_dtype;
    fc_poison(t, d->o, d->extent + FC_GUARD_ELEMENTS);
    fc_poison(FLASHPORT_F32, d->lse, d->n_lse + FC_GUARD_ELEMENTS);
    for (int64_t h = 0; h < s.heads; h++)
        for (int64_t n = 0; n < s.seq; n++) {
            const int used = !d->cu || (n >= d->cu[0] && n < d->cu[c->batch]);
            for (int64_t k = 0; k < s.dim; k++) {
                int64_t i = tensor_file_index(c->layout, s, 0, h, n, k);
                d->exp_o[i] = tensor_round(t, (float)i / 10.0f);
                if (used)
                    tensor_store(t, d->o, tensor_strided_index(&d->p.o, 0, h, n, k),
                                 (float)d->exp_o[i]);
            }
            d->exp_lse[h * s.seq + n] = 1.5;
            if (used) d->lse[h * s.seq + n] = 1.5f;
        }
}

static fc_result judge(const fc_case *c, download *d) {
    fc_result r;
    memset(&r, 0, sizeof r);
    r.tol = fc_tolerance_for(c, FLASHPORT_PRECISION_NATIVE);
    fc_judge(c, &d->p, d->cu, d->o, d->extent, d->lse, d->n_lse, d->exp_o, d->exp_lse, &r);
    return r;
}

static void test_dtype(flashport_dtype dtype) {
    fc_case c = small_case(dtype);
    download d;
    size_t es = flashport_dtype_size(dtype);

    correct(&c, &d);
    fc_result r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS && r.rel_l2 == 0.0 && r.unwritten == 0 && r.guard_hits == 0);

    /* an output element left unwritten (still the poison pattern) */
    correct(&c, &d);
    int64_t at = tensor_strided_index(&d.p.o, 0, 1, 2, 3);
    fc_poison(dtype, d.o + at * es, 1);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.unwritten == 1 && strstr(r.detail, "not written"));

    /* a write into the padding after a row */
    correct(&c, &d);
    tensor_store(dtype, d.o, tensor_strided_index(&d.p.o, 0, 0, 1, 3) + 1, 0.0f);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.guard_hits == 1 && strstr(r.detail, "outside the outputs"));

    /* a write past the end of O, and one past the end of LSE */
    correct(&c, &d);
    tensor_store(dtype, d.o, d.extent + FC_GUARD_ELEMENTS - 1, 1.0f);
    d.lse[d.n_lse] = 0.0f;
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.guard_hits == 2);

    /* an LSE element unwritten */
    correct(&c, &d);
    fc_poison(FLASHPORT_F32, &d.lse[4], 1);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && strstr(r.detail, "LSE elements not written"));

    /* a computed NaN where the expected value is finite */
    correct(&c, &d);
    tensor_store(dtype, d.o, tensor_strided_index(&d.p.o, 0, 0, 0, 0), NAN);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.non_finite == 1);

    /* expected NaN: a computed NaN passes, a finite value fails */
    correct(&c, &d);
    d.exp_o[5] = NAN;
    tensor_store(dtype, d.o, tensor_strided_index(&d.p.o, 0, 0, 1, 1), NAN);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS);
    tensor_store(dtype, d.o, tensor_strided_index(&d.p.o, 0, 0, 1, 1), 0.5f);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.nan_missing == 1);

    /* a row that sees no key: expected LSE -inf must come back exactly -inf */
    correct(&c, &d);
    d.exp_lse[2] = -INFINITY;
    d.lse[2] = -INFINITY;
    r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS);
    d.lse[2] = -1e30f;
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && strstr(r.detail, "-inf"));

    /* errors just inside and just outside the tolerance */
    fc_tolerance t = fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE);
    correct(&c, &d);
    d.lse[1] = (float)(1.5 + 0.5 * t.lse * 1.5);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS);
    d.lse[1] = (float)(1.5 + 3.0 * t.lse * 1.5);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && strstr(r.detail, "LSE error"));
    correct(&c, &d);
    for (int i = 0; i < 24; i++) d.exp_o[i] *= 1.0 + 4.0 * t.rel_l2;
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && strstr(r.detail, "rel_l2"));
}

/* Packed Q: a write into a stored row of no sequence, or its LSE, is outside the outputs. */
static void test_packed_rows(void) {
    fc_case c = packed_case();
    download d;
    correct(&c, &d);
    fc_result r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS && r.guard_hits == 0);

    tensor_store(FLASHPORT_F32, d.o, tensor_strided_index(&d.p.o, 0, 1, 0, 2), 0.0f);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.guard_hits == 1 && strstr(r.detail, "outside the outputs"));

    correct(&c, &d);
    d.lse[1 * 6 + 5] = 1.5f; /* head 1, row 5 */
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.guard_hits == 1);

    /* a row of a sequence left unwritten still counts as unwritten */
    correct(&c, &d);
    fc_poison(FLASHPORT_F32, d.o + 4 * tensor_strided_index(&d.p.o, 0, 0, 4, 0), 1);
    r = judge(&c, &d);
    CHECK(r.verdict == FC_FAIL && r.unwritten == 1);
}

/* FP8 inputs: O is judged in out_dtype, with out_dtype's tolerances. */
static void test_fp8_output(void) {
    fc_case c = small_case(FLASHPORT_FP8_E4M3);
    c.out_dtype = FLASHPORT_BF16;
    c.descale = FLASHPORT_DESCALE_TENSOR;
    download d;
    correct(&c, &d);
    fc_result r = judge(&c, &d);
    CHECK(r.verdict == FC_PASS && r.rel_l2 == 0.0);
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE).rel_l2 == 1e-2);
    c.out_dtype = FLASHPORT_F32;
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE).rel_l2 == 1e-5);
    c.out_dtype = FLASHPORT_F16;
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE).rel_l2 == 2e-3);
    CHECK(!fc_needs_recompute(&c, FLASHPORT_PRECISION_TF32));
    /* The FP8 class (P in e4m3) has its own O and LSE bounds (the looser of its and the
     * output's), and no recompute. */
    const fc_tolerance t8 = fc_tolerance_for(&c, FLASHPORT_PRECISION_FP8);
    CHECK(t8.rel_l2 == 5e-2 && t8.max_abs == 0.0 && t8.lse == 2e-3);
    c.out_dtype = FLASHPORT_F32;
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_FP8).lse == 1e-3);
    CHECK(!fc_needs_recompute(&c, FLASHPORT_PRECISION_FP8));
}

static void test_tolerances(void) {
    fc_case c = small_case(FLASHPORT_F32);
    fc_tolerance t = fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE);
    CHECK(t.rel_l2 == 1e-5 && t.max_abs == 1e-4);
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_TF32).rel_l2 == 3e-3);
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_F16).rel_l2 == 2e-3);
    CHECK(fc_needs_recompute(&c, FLASHPORT_PRECISION_F16) &&
          !fc_needs_recompute(&c, FLASHPORT_PRECISION_NATIVE));
    /* An fp8 variant on an f32 case: NumPy's expected output (the variant declines it). */
    CHECK(!fc_needs_recompute(&c, FLASHPORT_PRECISION_FP8));
    c.dtype = FLASHPORT_BF16;
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_F16).rel_l2 == 1e-2);
    CHECK(!fc_needs_recompute(&c, FLASHPORT_PRECISION_TF32));
    c.dtype = FLASHPORT_F16;
    c.tol_factor = 10.0;
    CHECK(fc_tolerance_for(&c, FLASHPORT_PRECISION_NATIVE).rel_l2 == 2e-2);
}

/* Naive double attention of one head: O [n, d] from q [n, d], k and v [m, d], default scale. */
static void naive(const float *q, const float *k, const float *v, int n, int m, int d, double *o) {
    double scale = 1.0 / sqrt((double)d);
    for (int i = 0; i < n; i++) {
        double s[16], mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < m; j++) {
            s[j] = 0.0;
            for (int c = 0; c < d; c++) s[j] += (double)q[i * d + c] * k[j * d + c];
            s[j] *= (double)(float)scale;
            mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < m; j++) sum += s[j] = exp(s[j] - mx);
        for (int c = 0; c < d; c++) {
            o[i * d + c] = 0.0;
            for (int j = 0; j < m; j++) o[i * d + c] += s[j] * v[j * d + c] / sum;
        }
    }
}

/* A reduced-precision variant's expected output is the reference run on inputs rounded as the
 * variant rounds them. */
static void test_recompute(void) {
    flashport_context *ref = NULL;
    CHECK_STATUS(flashport_context_create("reference", &ref), FLASHPORT_OK, NULL);
    if (!ref) return;
    enum { N = 5, M = 7, D = 4 };
    fc_case c = small_case(FLASHPORT_F32);
    c.heads_q = c.heads_kv = 1;
    c.seq_q = N;
    c.seq_kv = M;
    c.head_dim = D;
    float q[N * D], k[M * D], v[M * D], rq[N * D], rk[M * D], rv[M * D];
    for (int i = 0; i < N * D; i++)
        rq[i] = tensor_round(FLASHPORT_F16, q[i] = 1.0f / (float)(i + 3));
    for (int i = 0; i < M * D; i++) {
        rk[i] = tensor_round(FLASHPORT_F16, k[i] = (float)sin(i * 1.7) * 1.37f);
        rv[i] = tensor_round(FLASHPORT_F16, v[i] = (float)cos(i * 0.9) / 3.0f);
    }
    fc_fixture f;
    memset(&f, 0, sizeof f);
    f.data[FC_Q] = q, f.data[FC_K] = k, f.data[FC_V] = v;
    f.count[FC_Q] = N * D, f.count[FC_K] = f.count[FC_V] = M * D;
    f.count[FC_O] = N * D, f.count[FC_LSE] = N;
    double o[N * D], lse[N], want[N * D], exact[N * D];
    CHECK(fc_recompute(ref, &c, &f, FLASHPORT_PRECISION_F16, o, lse, NULL, 0));
    naive(rq, rk, rv, N, M, D, want);
    naive(q, k, v, N, M, D, exact);
    double worst = 0.0, moved = 0.0;
    for (int i = 0; i < N * D; i++) {
        worst = fmax(worst, fabs(o[i] - want[i]));
        moved = fmax(moved, fabs(o[i] - exact[i]));
    }
    CHECK(worst < 1e-6); /* matches the rounded inputs (f32 output of the reference) */
    CHECK(moved > 1e-5); /* and the rounding did change the result */
    CHECK(fc_recompute(ref, &c, &f, FLASHPORT_PRECISION_TF32, o, lse, NULL, 0));
    flashport_context_destroy(ref);
}

int main(void) {
    test_dtype(FLASHPORT_F32);
    test_dtype(FLASHPORT_F16);
    test_dtype(FLASHPORT_BF16);
    test_packed_rows();
    test_fp8_output();
    test_tolerances();
    test_recompute();
    return check_report("test_conformance_judge");
}
