#define _POSIX_C_SOURCE 200809L
#include "checker.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor.h"

/* Signalling-NaN patterns written into outputs before a run and into the gaps of strided
 * inputs. Arithmetic never produces a signalling NaN, so an element that still holds the
 * pattern was not written, and a NaN a kernel computes is told apart from it. */
#define POISON_F32 0x7fbadbadu
#define POISON_F16 0x7d5au
#define POISON_BF16 0x7f9bu

const char *fc_verdict_name(fc_verdict v) {
    switch (v) {
    case FC_PASS: return "pass";
    case FC_FAIL: return "FAIL";
    case FC_UNSUPPORTED: return "unsupported";
    }
    return "?";
}

fc_tolerance fc_tolerance_for(const fc_case *c, flashport_precision precision) {
    fc_tolerance t = {1e-5, 1e-4, 1e-5}; /* f32, exact products */
    if (c->dtype == FLASHPORT_F16) t = (fc_tolerance){2e-3, 0.0, 2e-3};
    else if (c->dtype == FLASHPORT_BF16) t = (fc_tolerance){1e-2, 0.0, 1e-2};
    else if (precision == FLASHPORT_PRECISION_TF32) t = (fc_tolerance){3e-3, 0.0, 3e-3};
    else if (precision == FLASHPORT_PRECISION_F16) t = (fc_tolerance){2e-3, 0.0, 2e-3};
    /* The factor is for O only: LSE is judged relative to its own magnitude already. */
    t.rel_l2 *= c->tol_factor;
    t.max_abs *= c->tol_factor;
    return t;
}

int fc_needs_recompute(const fc_case *c, flashport_precision precision) {
    return c->dtype == FLASHPORT_F32 && precision != FLASHPORT_PRECISION_NATIVE;
}

void fc_poison(flashport_dtype dtype, void *base, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (dtype == FLASHPORT_F32) ((uint32_t *)base)[i] = POISON_F32;
        else ((uint16_t *)base)[i] = dtype == FLASHPORT_F16 ? POISON_F16 : POISON_BF16;
    }
}

static int is_poison(flashport_dtype dtype, const void *base, int64_t i) {
    if (dtype == FLASHPORT_F32) return ((const uint32_t *)base)[i] == POISON_F32;
    return ((const uint16_t *)base)[i] == (dtype == FLASHPORT_F16 ? POISON_F16 : POISON_BF16);
}

void fc_problem(const fc_case *c, const char *kernel, flashport_problem *p) {
    flashport_problem_init(p, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq_q, c->seq_kv,
                           c->head_dim, c->layout);
    if (c->pad) {
        tensor_shape qs = {c->batch, c->heads_q, c->seq_q, c->head_dim};
        tensor_shape ks = {c->batch, c->heads_kv, c->seq_kv, c->head_dim};
        p->q = p->o = tensor_padded_strides(c->layout, qs, c->pad);
        p->k = p->v = tensor_padded_strides(c->layout, ks, c->pad);
    }
    p->scale = c->scale;
    p->causal = c->causal;
    p->kernel = kernel;
}

/* Host image of one input at the problem's strides; gaps hold the poison pattern. */
static void *stage_input(const fc_case *c, const flashport_strides *st, int64_t extent,
                         int64_t heads, int64_t seq, const float *values) {
    size_t es = flashport_dtype_size(c->dtype);
    void *img = malloc((size_t)extent * es + 1);
    if (!img) return NULL;
    fc_poison(c->dtype, img, extent);
    tensor_shape s = {c->batch, heads, seq, c->head_dim};
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.heads; h++)
            for (int64_t n = 0; n < s.seq; n++)
                for (int64_t d = 0; d < s.dim; d++)
                    tensor_store(c->dtype, img, tensor_strided_index(st, b, h, n, d),
                                 values[tensor_file_index(c->layout, s, b, h, n, d)]);
    return img;
}

static void note(fc_result *r, const char *fmt, ...) {
    size_t n = strlen(r->detail);
    if (n + 3 >= sizeof r->detail) return;
    if (n) {
        strcpy(r->detail + n, "; ");
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail + n, sizeof r->detail - n, fmt, ap);
    va_end(ap);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Compares the downloaded O (at the problem's strides, FC_GUARD_ELEMENTS after it) with e. */
static int judge_o(const fc_case *c, const flashport_problem *p, const void *o, int64_t extent,
                   const double *e, fc_result *r) {
    unsigned char *covered = calloc((size_t)extent + 1, 1);
    if (!covered) {
        note(r, "out of host memory judging O");
        return 0;
    }
    tensor_shape s = {c->batch, c->heads_q, c->seq_q, c->head_dim};
    double sum_d2 = 0.0, sum_e2 = 0.0, max_abs = 0.0;
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.heads; h++)
            for (int64_t n = 0; n < s.seq; n++)
                for (int64_t d = 0; d < s.dim; d++) {
                    int64_t at = tensor_strided_index(&p->o, b, h, n, d);
                    covered[at] = 1;
                    if (is_poison(c->dtype, o, at)) {
                        r->unwritten++;
                        continue;
                    }
                    double a = tensor_load(c->dtype, o, at);
                    double x = e[tensor_file_index(c->layout, s, b, h, n, d)];
                    if (isnan(x)) {
                        if (!isnan(a)) r->nan_missing++;
                    } else if (!isfinite(a)) {
                        r->non_finite++;
                    } else {
                        double diff = fabs(a - x);
                        sum_d2 += diff * diff;
                        sum_e2 += x * x;
                        if (diff > max_abs) max_abs = diff;
                    }
                }
    for (int64_t i = 0; i < extent + FC_GUARD_ELEMENTS; i++)
        if ((i >= extent || !covered[i]) && !is_poison(c->dtype, o, i)) r->guard_hits++;
    free(covered);
    r->max_abs = max_abs;
    r->rel_l2 = sum_e2 > 0.0 ? sqrt(sum_d2 / sum_e2) : sqrt(sum_d2);
    return 1;
}

/* Compares the downloaded LSE (contiguous, FC_GUARD_ELEMENTS after it) with e. */
static void judge_lse(int64_t n, const float *lse, const double *e, fc_result *r,
                      int64_t *lse_unwritten, int64_t *lse_wrong_special) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (is_poison(FLASHPORT_F32, lse, i)) {
            (*lse_unwritten)++;
            continue;
        }
        double a = lse[i], x = e[i];
        if (isnan(x) || isinf(x)) {
            if (isnan(x) ? !isnan(a) : a != x) (*lse_wrong_special)++;
        } else if (!isfinite(a)) {
            r->non_finite++;
        } else {
            double err = fabs(a - x) / fmax(1.0, fabs(x));
            if (err > worst) worst = err;
        }
    }
    for (int64_t i = n; i < n + FC_GUARD_ELEMENTS; i++)
        if (!is_poison(FLASHPORT_F32, lse, i)) r->guard_hits++;
    r->lse_err = worst;
}

void fc_judge(const fc_case *c, const flashport_problem *p, const void *o, int64_t o_extent,
              const float *lse, int64_t n_lse, const double *exp_o, const double *exp_lse,
              fc_result *r) {
    int64_t lse_unwritten = 0, lse_special = 0;
    if (!judge_o(c, p, o, o_extent, exp_o, r)) return;
    judge_lse(n_lse, lse, exp_lse, r, &lse_unwritten, &lse_special);

    if (r->unwritten) note(r, "%lld O elements not written", (long long)r->unwritten);
    if (lse_unwritten) note(r, "%lld LSE elements not written", (long long)lse_unwritten);
    if (r->guard_hits) note(r, "%lld elements outside the outputs changed", (long long)r->guard_hits);
    if (r->non_finite) note(r, "%lld NaN/inf where the expected value is finite", (long long)r->non_finite);
    if (r->nan_missing) note(r, "%lld O elements not NaN where NaN is expected", (long long)r->nan_missing);
    if (lse_special) note(r, "%lld LSE values differ from an expected NaN or -inf", (long long)lse_special);
    if (r->rel_l2 > r->tol.rel_l2) note(r, "rel_l2 %.3g > %.3g", r->rel_l2, r->tol.rel_l2);
    if (r->tol.max_abs > 0.0 && r->max_abs > r->tol.max_abs)
        note(r, "max_abs %.3g > %.3g", r->max_abs, r->tol.max_abs);
    if (r->lse_err > r->tol.lse) note(r, "LSE error %.3g > %.3g", r->lse_err, r->tol.lse);
    r->nan_missing += lse_special;
    r->unwritten += lse_unwritten;
    if (r->detail[0]) {
        r->verdict = FC_FAIL;
        return;
    }
    r->verdict = FC_PASS;
    note(r, "rel_l2 %.2g, max_abs %.2g, lse %.2g", r->rel_l2, r->max_abs, r->lse_err);
}

void fc_check(flashport_context *ctx, const char *kernel, const fc_case *c, const fc_fixture *f,
              const double *expected_o, const double *expected_lse, fc_tolerance tol,
              fc_result *r) {
    memset(r, 0, sizeof *r);
    r->tol = tol;
    r->verdict = FC_FAIL;

    flashport_problem p;
    fc_problem(c, kernel, &p);
    flashport_plan_info plan;
    flashport_status st = flashport_plan(ctx, &p, &plan);
    if (st == FLASHPORT_ERROR_UNSUPPORTED) {
        r->verdict = FC_UNSUPPORTED;
        note(r, "%s", plan.reason[0] ? plan.reason : flashport_last_error());
        return;
    }
    if (st != FLASHPORT_OK) {
        note(r, "flashport_plan: %s: %s", flashport_status_string(st), flashport_last_error());
        return;
    }
    snprintf(r->kernel_ran, sizeof r->kernel_ran, "%s", plan.kernel);
    if (kernel && strcmp(plan.kernel, kernel) != 0) {
        note(r, "asked for kernel '%s', the plan runs '%s'", kernel, plan.kernel);
        return;
    }

    size_t es = flashport_dtype_size(c->dtype);
    int64_t eq = flashport_problem_extent(&p, 'q'), ek = flashport_problem_extent(&p, 'k');
    int64_t ev = flashport_problem_extent(&p, 'v'), eo = flashport_problem_extent(&p, 'o');
    int64_t n_lse = c->batch * c->heads_q * c->seq_q;
    void *img[3] = {stage_input(c, &p.q, eq, c->heads_q, c->seq_q, f->q),
                    stage_input(c, &p.k, ek, c->heads_kv, c->seq_kv, f->k),
                    stage_input(c, &p.v, ev, c->heads_kv, c->seq_kv, f->v)};
    size_t bytes[5] = {(size_t)eq * es, (size_t)ek * es, (size_t)ev * es,
                       (size_t)(eo + FC_GUARD_ELEMENTS) * es, (size_t)(n_lse + FC_GUARD_ELEMENTS) * 4};
    void *o_host = malloc(bytes[3]);
    float *lse_host = malloc(bytes[4]);
    flashport_buffer *buf[5] = {NULL, NULL, NULL, NULL, NULL};
    const char *call = "host allocation";
    st = FLASHPORT_ERROR_OUT_OF_MEMORY;
    if (img[0] && img[1] && img[2] && o_host && lse_host) {
        fc_poison(c->dtype, o_host, eo + FC_GUARD_ELEMENTS);
        fc_poison(FLASHPORT_F32, lse_host, n_lse + FC_GUARD_ELEMENTS);
        const void *src[5] = {img[0], img[1], img[2], o_host, lse_host};
        st = FLASHPORT_OK;
        for (int i = 0; i < 5 && st == FLASHPORT_OK; i++) {
            call = "flashport_buffer_alloc";
            st = flashport_buffer_alloc(ctx, bytes[i], &buf[i]);
            if (st == FLASHPORT_OK) {
                call = "flashport_buffer_upload";
                st = flashport_buffer_upload(buf[i], 0, src[i], bytes[i]);
            }
        }
    }
    if (st == FLASHPORT_OK) {
        double t0 = now_ms();
        call = "flashport_attention";
        st = flashport_attention(ctx, &p, buf[0], buf[1], buf[2], buf[3], buf[4]);
        if (st == FLASHPORT_OK) {
            call = "flashport_synchronize";
            st = flashport_synchronize(ctx);
        }
        r->ms = now_ms() - t0;
    }
    if (st == FLASHPORT_OK) {
        call = "flashport_buffer_download";
        st = flashport_buffer_download(buf[3], 0, o_host, bytes[3]);
        if (st == FLASHPORT_OK) st = flashport_buffer_download(buf[4], 0, lse_host, bytes[4]);
    }
    if (st != FLASHPORT_OK)
        note(r, "%s: %s: %s", call, flashport_status_string(st), flashport_last_error());
    else
        fc_judge(c, &p, o_host, eo, lse_host, n_lse, expected_o, expected_lse, r);

    for (int i = 0; i < 5; i++) flashport_buffer_free(buf[i]);
    for (int i = 0; i < 3; i++) free(img[i]);
    free(o_host);
    free(lse_host);
}

int fc_recompute(flashport_context *reference, const fc_case *c, const fc_fixture *f,
                 flashport_precision precision, double *o_out, double *lse_out, char *msg,
                 size_t msg_len) {
    size_t n_in = f->n_q + 2 * f->n_kv;
    float *in = malloc(n_in * sizeof(float));
    float *o = malloc(f->n_o * sizeof(float) + 1);
    float *lse = malloc(f->n_lse * sizeof(float) + 1);
    int ok = in && o && lse;
    if (!ok) snprintf(msg, msg_len, "out of host memory recomputing %s", c->name);
    for (size_t i = 0; ok && i < n_in; i++) {
        float x = i < f->n_q ? f->q[i] : i < f->n_q + f->n_kv ? f->k[i - f->n_q]
                                                              : f->v[i - f->n_q - f->n_kv];
        in[i] = precision == FLASHPORT_PRECISION_TF32 ? tensor_round_tf32(x)
                : precision == FLASHPORT_PRECISION_F16 ? tensor_round(FLASHPORT_F16, x)
                                                       : x;
    }
    if (ok) {
        flashport_problem p;
        fc_case contiguous = *c;
        contiguous.pad = 0;
        fc_problem(&contiguous, NULL, &p);
        p.dtype = FLASHPORT_F32;
        flashport_status st = flashport_attention_host(reference, &p, in, in + f->n_q,
                                                       in + f->n_q + f->n_kv, o, lse);
        if (st != FLASHPORT_OK) {
            snprintf(msg, msg_len, "reference recomputation of %s: %s: %s", c->name,
                     flashport_status_string(st), flashport_last_error());
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < f->n_o; i++) o_out[i] = o[i];
    for (size_t i = 0; ok && i < f->n_lse; i++) lse_out[i] = lse[i];
    free(in);
    free(o);
    free(lse);
    return ok;
}
