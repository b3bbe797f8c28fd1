#define _POSIX_C_SOURCE 200809L
#include "checker.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp_backend.h"
#include "tensor.h"

/* Signalling-NaN patterns written into outputs before a run and into the gaps of strided
 * inputs. Arithmetic never produces a signalling NaN, so an element that still holds the
 * pattern was not written, and a NaN a kernel computes is told apart from it. FP8 has no
 * signalling NaN; its gaps (inputs only) hold a NaN, so reading one shows up as NaN. */
#define POISON_F32  0x7fbadbadu
#define POISON_F16  0x7d5au
#define POISON_BF16 0x7f9bu
#define POISON_FP8  0x7fu

const char *fc_verdict_name(fc_verdict v) {
    switch (v) {
    case FC_PASS: return "pass";
    case FC_FAIL: return "FAIL";
    case FC_UNSUPPORTED: return "unsupported";
    }
    return "?";
}

static int is_fp8(flashport_dtype t) { return t == FLASHPORT_FP8_E4M3 || t == FLASHPORT_FP8_E5M2; }

fc_tolerance fc_tolerance_for(const fc_case *c, flashport_precision precision) {
    if (c->backward) {
        /* Gradients, relative L2 only: their inputs O (rounded to out_dtype) and LSE (f32)
         * carry the forward's rounding, which dS = P (dP - D) amplifies where dP and D nearly
         * cancel. Worst seen on the reference and cpu_simd: f32 2e-5 (big_logits, whose
         * factor is 10: 2.3e-4), f16 3e-4, bf16 4e-3. */
        fc_tolerance tol = {1e-4, 0.0, 0.0};
        if (c->dtype == FLASHPORT_F16)
            tol.rel_l2 = 2e-3;
        else if (c->dtype == FLASHPORT_BF16)
            tol.rel_l2 = 2e-2;
        else if (precision != FLASHPORT_PRECISION_NATIVE)
            tol.rel_l2 = 3e-2;
        tol.rel_l2 *= c->tol_factor;
        return tol;
    }
    const flashport_dtype t = is_fp8(c->dtype) ? c->out_dtype : c->dtype;
    fc_tolerance tol = {1e-5, 1e-4, 1e-5}; /* f32, exact products */
    if (t == FLASHPORT_F16)
        tol = (fc_tolerance){2e-3, 0.0, 2e-3};
    else if (t == FLASHPORT_BF16)
        tol = (fc_tolerance){1e-2, 0.0, 1e-2};
    else if (precision == FLASHPORT_PRECISION_TF32)
        tol = (fc_tolerance){3e-3, 0.0, 3e-3};
    else if (precision == FLASHPORT_PRECISION_F16)
        tol = (fc_tolerance){2e-3, 0.0, 2e-3};
    /* P rounded to e4m3 before P V: each probability off by up to 2^-4 of itself (about 2.5%
     * rms over a binade), which O inherits on random values. The LSE comes from the unrounded
     * P, but the FP8 tensor-core products that form the scores do not keep an f32 running sum
     * (conformance/README.md gives the errors seen). */
    if (precision == FLASHPORT_PRECISION_FP8) {
        tol.rel_l2 = 5e-2;
        tol.max_abs = 0.0;
        tol.lse = fmax(tol.lse, 1e-3);
    }
    /* The factor is for O only: LSE is judged relative to its own magnitude already. */
    tol.rel_l2 *= c->tol_factor;
    tol.max_abs *= c->tol_factor;
    return tol;
}

int fc_needs_recompute(const fc_case *c, flashport_precision precision) {
    /* The backward pass is judged against NumPy with its reduced tolerance instead. Only the
     * classes that round f32 inputs have a rounded-input reference; the FP8 class takes FP8
     * inputs alone and is judged against NumPy with its own bounds. */
    return !c->backward && c->dtype == FLASHPORT_F32 &&
           (precision == FLASHPORT_PRECISION_TF32 || precision == FLASHPORT_PRECISION_F16);
}

void fc_poison(flashport_dtype dtype, void *base, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (dtype == FLASHPORT_F32)
            ((uint32_t *)base)[i] = POISON_F32;
        else if (is_fp8(dtype))
            ((uint8_t *)base)[i] = POISON_FP8;
        else
            ((uint16_t *)base)[i] = dtype == FLASHPORT_F16 ? POISON_F16 : POISON_BF16;
    }
}

static int is_poison(flashport_dtype dtype, const void *base, int64_t i) {
    if (dtype == FLASHPORT_F32) return ((const uint32_t *)base)[i] == POISON_F32;
    return ((const uint16_t *)base)[i] == (dtype == FLASHPORT_F16 ? POISON_F16 : POISON_BF16);
}

/* ---- the descriptor of a case ---- */

void fc_desc(const fc_case *c, const char *kernel, flashport_attention_desc *d) {
    flashport_attention_desc_init(d, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq_q,
                                  c->seq_kv, c->head_dim, c->layout);
    d->out_dtype = c->out_dtype;
    d->q = d->o = tensor_padded_strides(c->layout, fc_storage(c, 'q'), c->pad);
    d->k = d->v = tensor_padded_strides(c->layout, fc_storage(c, 'k'), c->pad);
    d->scale = c->scale;
    d->causal = c->causal;
    d->window_left = c->window_left;
    d->window_right = c->window_right;
    d->softcap = c->softcap;
    d->alibi = c->alibi;
    if (c->bias) {
        /* Contiguous over the stored dimensions, stride 0 over the broadcast ones. */
        const int64_t full[4] = {c->batch, c->heads_q, c->seq_q, c->seq_kv};
        int64_t stride[4], run = 1;
        for (int i = 3; i >= 0; i--) {
            const int broadcast = c->bias_dims[i] == '.';
            stride[i] = broadcast ? 0 : run;
            run *= broadcast ? 1 : full[i];
        }
        d->bias =
            (flashport_bias_desc){1, c->bias_dtype, stride[0], stride[1], stride[2], stride[3]};
    }
    d->sinks = c->sinks;
    if (c->q_varlen) {
        d->q_varlen = 1;
        d->total_q = c->total_q;
        d->q.batch = d->o.batch = 0;
    }
    d->kv_layout = c->kv_layout;
    if (c->kv_layout == FLASHPORT_KV_VARLEN) {
        d->total_kv = c->total_kv;
        d->k.batch = d->v.batch = 0;
    } else if (c->kv_layout == FLASHPORT_KV_PAGED) {
        d->num_pages = c->num_pages;
        d->page_size = c->page_size;
        d->max_pages_per_seq = c->max_pages;
    }
    d->descale = c->descale;
    d->descale_block = c->descale_block;
    d->kernel = kernel;
}

/* The API v2 features a descriptor asks for, as fp_feature bits. */
static unsigned features_of(const flashport_attention_desc *d) {
    const int64_t right = d->causal ? 0 : d->window_right;
    unsigned f = 0;
    if (d->window_left >= 0 || right > 0) f |= FP_FEATURE_WINDOW;
    if (d->softcap > 0.0f) f |= FP_FEATURE_SOFTCAP;
    if (d->alibi != FLASHPORT_ALIBI_NONE) f |= FP_FEATURE_ALIBI;
    if (d->bias.enabled) f |= FP_FEATURE_BIAS;
    if (d->sinks) f |= FP_FEATURE_SINKS;
    if (d->q_varlen || d->kv_layout == FLASHPORT_KV_VARLEN) f |= FP_FEATURE_VARLEN;
    if (d->kv_layout == FLASHPORT_KV_PAGED) f |= FP_FEATURE_PAGED;
    if (is_fp8(d->dtype)) f |= FP_FEATURE_FP8;
    return f;
}

static void feature_words(unsigned features, char *out, size_t len) {
    static const struct {
        unsigned bit;
        const char *word;
    } words[] = {{FP_FEATURE_WINDOW, "window"},    {FP_FEATURE_SOFTCAP, "softcap"},
                 {FP_FEATURE_ALIBI, "alibi"},      {FP_FEATURE_BIAS, "bias"},
                 {FP_FEATURE_SINKS, "sinks"},      {FP_FEATURE_VARLEN, "varlen"},
                 {FP_FEATURE_PAGED, "paged"},      {FP_FEATURE_FP8, "fp8"},
                 {FP_FEATURE_BACKWARD, "backward"}};
    snprintf(out, len, "none");
    size_t used = 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (features & words[i].bit)
            used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s",
                                     used ? "," : "", words[i].word);
}

void fc_case_feature_words(const fc_case *c, char *out, size_t len) {
    flashport_attention_desc d;
    fc_desc(c, NULL, &d);
    feature_words(features_of(&d) | (c->backward ? FP_FEATURE_BACKWARD : 0u), out, len);
}

/* ---- staging and running one call ---- */

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

/* Elements a stored tensor reaches at the given strides (0 when it has none). */
static int64_t extent_of(tensor_shape s, const flashport_strides *st) {
    if (!s.batch || !s.heads || !s.seq || !s.dim) return 0;
    return 1 + (s.batch - 1) * st->batch + (s.heads - 1) * st->head + (s.seq - 1) * st->seq +
           (s.dim - 1);
}

static size_t element_size(const fc_case *c, fc_slot s) {
    if (s == FC_Q || s == FC_K || s == FC_V) return flashport_dtype_size(c->dtype);
    if (s == FC_O || s >= FC_DO) return flashport_dtype_size(c->out_dtype);
    if (s == FC_BIAS) return flashport_dtype_size(c->bias_dtype);
    return 4; /* f32 LSE, sinks, slopes and descales; int32 tables */
}

/* Host image of tensor t (Q, K, V, or O's shape for the backward's O and dO) in dtype at the
 * descriptor's strides, rows taken from the file's order: as stored, or from float64 values
 * (the expected O) when f64; gaps hold the poison pattern. */
static void *stage_input(const fc_case *c, char t, flashport_dtype dtype, int f64,
                         const flashport_strides *st, const void *values, int64_t *extent) {
    const size_t es = flashport_dtype_size(dtype);
    const tensor_shape s = fc_storage(c, t);
    *extent = extent_of(s, st);
    unsigned char *img = malloc((size_t)*extent * es + 1);
    if (!img) return NULL;
    fc_poison(dtype, img, *extent);
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.heads; h++)
            for (int64_t n = 0; n < s.seq; n++) {
                const int64_t to = tensor_strided_index(st, b, h, n, 0);
                const int64_t from = tensor_file_index(c->layout, s, b, h, n, 0);
                if (f64)
                    for (int64_t k = 0; k < s.dim; k++)
                        tensor_store(dtype, img, to + k, (float)((const double *)values)[from + k]);
                else
                    memcpy(img + (size_t)to * es, (const unsigned char *)values + (size_t)from * es,
                           (size_t)s.dim * es);
            }
    return img;
}

static void set_arg(flashport_attention_args *a, fc_slot s, flashport_buffer *b) {
    switch (s) {
    case FC_Q: a->q = b; break;
    case FC_K: a->k = b; break;
    case FC_V: a->v = b; break;
    case FC_O: a->o = b; break;
    case FC_LSE: a->lse = b; break;
    case FC_SINKS: a->sinks = b; break;
    case FC_ALIBI: a->alibi_slopes = b; break;
    case FC_BIAS: a->bias = b; break;
    case FC_CU_SEQLENS_Q: a->cu_seqlens_q = b; break;
    case FC_CU_SEQLENS_KV: a->cu_seqlens_kv = b; break;
    case FC_SEQLENS_KV: a->seqlens_kv = b; break;
    case FC_BLOCK_TABLE: a->block_table = b; break;
    case FC_Q_DESCALE: a->q_descale = b; break;
    case FC_K_DESCALE: a->k_descale = b; break;
    case FC_V_DESCALE: a->v_descale = b; break;
    case FC_DO: a->d_o = b; break;
    case FC_DQ: a->d_q = b; break;
    case FC_DK: a->d_k = b; break;
    case FC_DV: a->d_v = b; break;
    case FC_SLOTS: break;
    }
}

/* What one run leaves on the host, each array followed by the guard: O at d's strides and the
 * LSE (forward), or dQ, dK and dV at Q's, K's and V's strides (backward). */
typedef struct outputs {
    void *o;
    float *lse;
    int64_t o_extent, n_lse;
    void *grad[3];
    int64_t grad_extent[3];
} outputs;

/* The backward's inputs O, dO (at O's strides) and LSE (f32), and its outputs dQ, dK, dV,
 * poisoned. Returns 0 when host memory runs out. */
static int stage_backward(const fc_case *c, const flashport_attention_desc *d, const fc_fixture *f,
                          const void *host[FC_SLOTS], size_t bytes[FC_SLOTS], void *staged[3],
                          outputs *out) {
    int64_t extent;
    host[FC_O] = staged[0] = stage_input(c, 'o', c->out_dtype, 1, &d->o, f->data[FC_O], &extent);
    bytes[FC_O] = (size_t)extent * element_size(c, FC_O);
    host[FC_DO] = staged[1] = stage_input(c, 'o', c->out_dtype, 0, &d->o, f->data[FC_DO], &extent);
    bytes[FC_DO] = (size_t)extent * element_size(c, FC_DO);
    const int64_t n_lse = (int64_t)fc_slot_count(c, FC_LSE);
    float *lse = malloc((size_t)n_lse * sizeof(float) + 1);
    for (int64_t i = 0; lse && i < n_lse; i++) lse[i] = (float)((const double *)f->data[FC_LSE])[i];
    host[FC_LSE] = staged[2] = lse;
    bytes[FC_LSE] = (size_t)n_lse * sizeof(float);
    const flashport_strides *strides[3] = {&d->q, &d->k, &d->v};
    int ok = staged[0] && staged[1] && lse;
    for (int g = 0; g < 3 && ok; g++) {
        out->grad_extent[g] = extent_of(fc_storage(c, "qkv"[g]), strides[g]);
        bytes[FC_DQ + g] =
            (size_t)(out->grad_extent[g] + FC_GUARD_ELEMENTS) * element_size(c, FC_DQ);
        host[FC_DQ + g] = out->grad[g] = malloc(bytes[FC_DQ + g]);
        ok = out->grad[g] != NULL;
        if (ok) fc_poison(c->out_dtype, out->grad[g], out->grad_extent[g] + FC_GUARD_ELEMENTS);
    }
    return ok;
}

/* Runs descriptor d on ctx with every array of fixture f (Q, K, V staged at d's strides): the
 * forward pass with O and LSE poisoned, or for a backward case the backward pass with dQ, dK and
 * dV poisoned, and downloads the outputs into *out. Returns 0 and a note in r on failure. */
static int execute(flashport_context *ctx, const fc_case *c, const flashport_attention_desc *d,
                   const fc_fixture *f, outputs *out, fc_result *r) {
    memset(out, 0, sizeof *out);
    void *staged[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    const void *host[FC_SLOTS] = {0};
    size_t bytes[FC_SLOTS] = {0};
    const flashport_strides *strides[3] = {&d->q, &d->k, &d->v};
    int ok = 1;
    for (int t = 0; t < 3 && ok; t++) {
        int64_t extent;
        host[t] = staged[t] =
            stage_input(c, "qkv"[t], c -> dtype, 0, strides[t], f -> data[t], &extent);
        bytes[t] = (size_t)extent * element_size(c, (fc_slot)t);
        ok = staged[t] != NULL;
    }
    if (c->backward) {
        ok = ok && stage_backward(c, d, f, host, bytes, staged + 3, out);
    } else {
        out->o_extent = extent_of(fc_storage(c, 'o'), &d->o);
        out->n_lse = (int64_t)fc_slot_count(c, FC_LSE);
        bytes[FC_O] = (size_t)(out->o_extent + FC_GUARD_ELEMENTS) * element_size(c, FC_O);
        bytes[FC_LSE] = (size_t)(out->n_lse + FC_GUARD_ELEMENTS) * sizeof(float);
        host[FC_O] = out->o = malloc(bytes[FC_O]);
        host[FC_LSE] = out->lse = malloc(bytes[FC_LSE]);
        ok = ok && out->o && out->lse;
        if (ok) {
            fc_poison(c->out_dtype, out->o, out->o_extent + FC_GUARD_ELEMENTS);
            fc_poison(FLASHPORT_F32, out->lse, out->n_lse + FC_GUARD_ELEMENTS);
        }
    }
    for (int s = FC_SINKS; s <= FC_V_DESCALE; s++) {
        host[s] = f->data[s];
        bytes[s] = f->count[s] * element_size(c, (fc_slot)s);
    }
    flashport_buffer *buf[FC_SLOTS] = {0};
    flashport_attention_args args = FLASHPORT_ATTENTION_ARGS_INIT;
    const char *call = "host allocation";
    flashport_status status = ok ? FLASHPORT_OK : FLASHPORT_ERROR_OUT_OF_MEMORY;
    for (int s = 0; s < FC_SLOTS && status == FLASHPORT_OK; s++) {
        if (!host[s]) continue;
        call = "flashport_buffer_alloc";
        /* An empty array still gets a buffer: the descriptor asks for one. */
        status = flashport_buffer_alloc(ctx, bytes[s] ? bytes[s] : 16, &buf[s]);
        if (status == FLASHPORT_OK && bytes[s]) {
            call = "flashport_buffer_upload";
            status = flashport_buffer_upload(buf[s], 0, host[s], bytes[s]);
        }
        set_arg(&args, (fc_slot)s, buf[s]);
    }
    if (status == FLASHPORT_OK) {
        const double t0 = now_ms();
        call = c->backward ? "flashport_attention_backward" : "flashport_attention_run";
        status = c->backward ? flashport_attention_backward(ctx, d, &args)
                             : flashport_attention_run(ctx, d, &args);
        if (status == FLASHPORT_OK) {
            call = "flashport_synchronize";
            status = flashport_synchronize(ctx);
        }
        r->ms = now_ms() - t0;
    }
    if (status == FLASHPORT_OK) {
        call = "flashport_buffer_download";
        for (int g = 0; g < 3 && c->backward && status == FLASHPORT_OK; g++)
            status = flashport_buffer_download(buf[FC_DQ + g], 0, out->grad[g], bytes[FC_DQ + g]);
        if (!c->backward) status = flashport_buffer_download(buf[FC_O], 0, out->o, bytes[FC_O]);
        if (!c->backward && status == FLASHPORT_OK)
            status = flashport_buffer_download(buf[FC_LSE], 0, out->lse, bytes[FC_LSE]);
    }
    if (status != FLASHPORT_OK) {
        note(r, "%s: %s: %s", call, flashport_status_string(status), flashport_last_error());
        ok = 0;
    }
    for (int s = 0; s < FC_SLOTS; s++) flashport_buffer_free(buf[s]);
    for (int t = 0; t < 6; t++) free(staged[t]);
    return ok;
}

static void outputs_free(outputs *out) {
    free(out->o);
    free(out->lse);
    for (int g = 0; g < 3; g++) free(out->grad[g]);
}

/* ---- judging ---- */

/* Stored rows [lo, hi) of tensor t ('q' or 'k') belong to a sequence: all of them, or
 * cu_seqlens[0] .. cu_seqlens[B] - 1 when packed (clamped, the fixture being untrusted). */
static void used_rows(const fc_case *c, char t, const int32_t *cu, int64_t *lo, int64_t *hi) {
    const int64_t rows = fc_storage(c, t).seq;
    const int packed = t == 'q' ? c->q_varlen : c->kv_layout == FLASHPORT_KV_VARLEN;
    *lo = 0;
    *hi = rows;
    if (!packed || !cu) return;
    *lo = cu[0] < 0 ? 0 : cu[0] > rows ? rows : cu[0];
    *hi = cu[c->batch] < *lo ? *lo : cu[c->batch] > rows ? rows : cu[c->batch];
}

/* Compares a downloaded O-typed tensor t (O, or a gradient: 'q', 'k', 'v') at strides st,
 * FC_GUARD_ELEMENTS after it, with e over its stored rows [lo, hi). The relative L2 error's
 * denominator is at least `floor` times the root of the element count (0: none). */
static int judge_o(const fc_case *c, char tensor, const flashport_strides *st, int64_t lo,
                   int64_t hi, const void *o, int64_t extent, const double *e, double floor,
                   fc_result *r) {
    unsigned char *covered = calloc((size_t)extent + 1, 1);
    if (!covered) {
        note(r, "out of host memory judging O");
        return 0;
    }
    const flashport_dtype t = c->out_dtype;
    const tensor_shape s = fc_storage(c, tensor);
    double sum_d2 = 0.0, sum_e2 = 0.0, max_abs = 0.0, judged = 0.0;
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.heads; h++)
            for (int64_t n = lo; n < hi; n++)
                for (int64_t k = 0; k < s.dim; k++) {
                    int64_t at = tensor_strided_index(st, b, h, n, k);
                    covered[at] = 1;
                    if (is_poison(t, o, at)) {
                        r->unwritten++;
                        continue;
                    }
                    double a = tensor_load(t, o, at);
                    double x = e[tensor_file_index(c->layout, s, b, h, n, k)];
                    if (isnan(x)) {
                        if (!isnan(a)) r->nan_missing++;
                    } else if (!isfinite(a)) {
                        r->non_finite++;
                    } else {
                        double diff = fabs(a - x);
                        sum_d2 += diff * diff;
                        sum_e2 += x * x;
                        judged += 1.0;
                        if (diff > max_abs) max_abs = diff;
                    }
                }
    for (int64_t i = 0; i < extent + FC_GUARD_ELEMENTS; i++)
        if ((i >= extent || !covered[i]) && !is_poison(t, o, i)) r->guard_hits++;
    free(covered);
    r->max_abs = max_abs;
    sum_e2 = fmax(sum_e2, floor * floor * judged);
    r->rel_l2 = sum_e2 > 0.0 ? sqrt(sum_d2 / sum_e2) : sqrt(sum_d2);
    return 1;
}

/* Compares the downloaded LSE (contiguous, FC_GUARD_ELEMENTS after it) with e. Element i is
 * stored row i % rows; rows outside [lo, hi) must keep the poison pattern. */
static void judge_lse(int64_t n, int64_t rows, int64_t lo, int64_t hi, const float *lse,
                      const double *e, fc_result *r, int64_t *lse_unwritten,
                      int64_t *lse_wrong_special) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = i % rows;
        if (row < lo || row >= hi) {
            if (!is_poison(FLASHPORT_F32, lse, i)) r->guard_hits++;
            continue;
        }
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

void fc_judge(const fc_case *c, const flashport_attention_desc *d, const int32_t *cu_seqlens_q,
              const void *o, int64_t o_extent, const float *lse, int64_t n_lse, const double *exp_o,
              const double *exp_lse, fc_result *r) {
    int64_t lse_unwritten = 0, lse_special = 0, lo, hi;
    used_rows(c, 'q', cu_seqlens_q, &lo, &hi);
    if (!judge_o(c, 'o', &d->o, lo, hi, o, o_extent, exp_o, 0.0, r)) return;
    const int64_t rows = c->q_varlen ? c->total_q : c->seq_q;
    judge_lse(n_lse, rows > 0 ? rows : 1, c->q_varlen ? lo : 0, c->q_varlen ? hi : rows, lse,
              exp_lse, r, &lse_unwritten, &lse_special);

    if (r->unwritten) note(r, "%lld O elements not written", (long long)r->unwritten);
    if (lse_unwritten) note(r, "%lld LSE elements not written", (long long)lse_unwritten);
    if (r->guard_hits)
        note(r, "%lld elements outside the outputs changed", (long long)r->guard_hits);
    if (r->non_finite)
        note(r, "%lld NaN/inf where the expected value is finite", (long long)r->non_finite);
    if (r->nan_missing)
        note(r, "%lld O elements not NaN where NaN is expected", (long long)r->nan_missing);
    if (lse_special)
        note(r, "%lld LSE values differ from an expected NaN or -inf", (long long)lse_special);
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

/* The gradients of a backward case against its dq.npy, dk.npy and dv.npy: every element of a
 * sequence's row written, nothing else, no NaN or inf, each within the relative L2 tolerance
 * (the worst of the three is the result's rel_l2). The denominator is at least that of
 * elements of magnitude GRAD_FLOOR: where a row sees one key, P = 1 and dS = dP - D vanishes in
 * exact arithmetic, and dQ and dK are rounding noise on both sides, relative to nothing. */
#define GRAD_FLOOR 1e-2
static void judge_backward(const fc_case *c, const flashport_attention_desc *d, const fc_fixture *f,
                           const outputs *out, fc_result *r) {
    static const char names[3][3] = {"dQ", "dK", "dV"};
    const flashport_strides *st[3] = {&d->q, &d->k, &d->v};
    double err[3], worst = 0.0, worst_abs = 0.0;
    for (int g = 0; g < 3; g++) {
        int64_t lo, hi;
        used_rows(c, g ? 'k' : 'q', f->data[g ? FC_CU_SEQLENS_KV : FC_CU_SEQLENS_Q], &lo, &hi);
        if (!judge_o(c, "qkv"[g], st[g], lo, hi, out -> grad[g], out -> grad_extent[g],
                     f -> data[FC_DQ + g], GRAD_FLOOR, r))
            return;
        err[g] = r->rel_l2;
        worst = fmax(worst, r->rel_l2);
        worst_abs = fmax(worst_abs, r->max_abs);
    }
    r->rel_l2 = worst;
    r->max_abs = worst_abs;
    if (r->unwritten) note(r, "%lld gradient elements not written", (long long)r->unwritten);
    if (r->guard_hits)
        note(r, "%lld elements outside the gradients changed", (long long)r->guard_hits);
    if (r->non_finite)
        note(r, "%lld NaN/inf where the expected value is finite", (long long)r->non_finite);
    for (int g = 0; g < 3; g++)
        if (err[g] > r->tol.rel_l2)
            note(r, "%s rel_l2 %.3g > %.3g", names[g], err[g], r->tol.rel_l2);
    r->verdict = r->detail[0] ? FC_FAIL : FC_PASS;
    if (r->verdict == FC_PASS) note(r, "rel_l2 dQ %.2g, dK %.2g, dV %.2g", err[0], err[1], err[2]);
}

/* Case c with every API v2 feature taken out: dense f32/f16/bf16 Q, K, V of the longest
 * sequences, the same heads, head_dim, layout, padding, scale and causal mask. */
static fc_case without_features(const fc_case *c) {
    fc_case p = *c;
    p.dtype = p.out_dtype;
    p.window_left = p.window_right = -1;
    p.softcap = 0.0f;
    p.alibi = FLASHPORT_ALIBI_NONE;
    p.bias = 0;
    p.sinks = 0;
    p.q_varlen = 0;
    p.total_q = 0;
    p.kv_layout = FLASHPORT_KV_DENSE;
    p.total_kv = p.num_pages = p.page_size = p.max_pages = 0;
    p.descale = FLASHPORT_DESCALE_NONE;
    p.descale_block = 0;
    if (p.seq_q < 1) p.seq_q = 1;
    if (p.seq_kv < 1) p.seq_kv = 1;
    return p;
}

/* A decline is unsupported, not a pass. Its reason is held to the names fp_feature_name gives
 * the features: it must name none the case does not use, and when the variant plans the same
 * problem without the case's features, the features must be why, so the reason must name one. */
static void judge_decline(flashport_context *ctx, const fc_case *c,
                          const flashport_attention_desc *d, const char *last_error, fc_result *r) {
    /* The library's message, kept: the plan below replaces it. */
    char reason[sizeof r->detail];
    snprintf(reason, sizeof reason, "%s", last_error);
    const unsigned asked = features_of(d) | (c->backward ? FP_FEATURE_BACKWARD : 0u);
    unsigned named = 0;
    for (unsigned bit = 1; bit <= FP_FEATURES_ALL; bit <<= 1)
        if (strstr(reason, fp_feature_name(bit))) named |= bit;
    r->verdict = FC_FAIL;
    if (named & ~asked) {
        for (unsigned bit = 1; bit <= FP_FEATURES_ALL; bit <<= 1)
            if (named & ~asked & bit)
                note(r, "declined naming %s, which the case does not use", fp_feature_name(bit));
    } else if (asked && !(named & asked)) {
        fc_case plain = without_features(c);
        flashport_attention_desc pd;
        fc_desc(&plain, d->kernel, &pd);
        flashport_plan_info info;
        /* The same operation: a backward-only variant plans no forward. */
        const flashport_status plain_st = c->backward
                                              ? flashport_attention_backward_plan(ctx, &pd, &info)
                                              : flashport_attention_plan(ctx, &pd, &info);
        if (plain_st == FLASHPORT_OK) {
            char words[128];
            /* The plain problem keeps the backward pass. */
            feature_words(asked & ~FP_FEATURE_BACKWARD, words, sizeof words);
            note(r,
                 "declined without naming a feature of the case (%s), yet plans the same "
                 "problem without them",
                 words);
        } else {
            r->verdict = FC_UNSUPPORTED;
        }
    } else {
        r->verdict = FC_UNSUPPORTED;
    }
    note(r, "%s", reason);
}

void fc_check(flashport_context *ctx, const char *kernel, const fc_case *c, const fc_fixture *f,
              const double *expected_o, const double *expected_lse, fc_tolerance tol,
              fc_result *r) {
    memset(r, 0, sizeof *r);
    r->tol = tol;
    r->verdict = FC_FAIL;

    flashport_attention_desc d;
    fc_desc(c, kernel, &d);
    flashport_plan_info plan;
    flashport_status st = c->backward ? flashport_attention_backward_plan(ctx, &d, &plan)
                                      : flashport_attention_plan(ctx, &d, &plan);
    if (st == FLASHPORT_ERROR_UNSUPPORTED) {
        judge_decline(ctx, c, &d, flashport_last_error(), r);
        return;
    }
    if (st != FLASHPORT_OK) {
        note(r, "%s: %s: %s",
             c->backward ? "flashport_attention_backward_plan" : "flashport_attention_plan",
             flashport_status_string(st), flashport_last_error());
        return;
    }
    snprintf(r->kernel_ran, sizeof r->kernel_ran, "%s", plan.kernel);
    if (kernel && strcmp(plan.kernel, kernel) != 0) {
        note(r, "asked for kernel '%s', the plan runs '%s'", kernel, plan.kernel);
        return;
    }
    outputs out;
    if (execute(ctx, c, &d, f, &out, r)) {
        if (c->backward)
            judge_backward(c, &d, f, &out, r);
        else
            fc_judge(c, &d, f->data[FC_CU_SEQLENS_Q], out.o, out.o_extent, out.lse, out.n_lse,
                     expected_o, expected_lse, r);
    }
    outputs_free(&out);
}

int fc_recompute(flashport_context *reference, const fc_case *c, const fc_fixture *f,
                 flashport_precision precision, double *o_out, double *lse_out, char *msg,
                 size_t msg_len) {
    fc_fixture rounded = *f; /* borrows every array but Q, K and V */
    float *in[3] = {NULL, NULL, NULL};
    int ok = 1;
    for (int t = 0; t < 3 && ok; t++) {
        const size_t n = f->count[t];
        in[t] = malloc(n * sizeof(float) + 1);
        ok = in[t] != NULL;
        for (size_t i = 0; ok && i < n; i++) {
            const float x = ((const float *)f->data[t])[i];
            in[t][i] = precision == FLASHPORT_PRECISION_TF32  ? tensor_round_tf32(x)
                       : precision == FLASHPORT_PRECISION_F16 ? tensor_round(FLASHPORT_F16, x)
                                                              : x;
        }
        rounded.data[t] = in[t];
    }
    if (!ok) snprintf(msg, msg_len, "out of host memory recomputing %s", c->name);
    fc_result r;
    memset(&r, 0, sizeof r);
    flashport_attention_desc d;
    fc_desc(c, NULL, &d);
    outputs out = {0};
    if (ok && !execute(reference, c, &d, &rounded, &out, &r)) {
        snprintf(msg, msg_len, "reference recomputation of %s: %s", c->name, r.detail);
        ok = 0;
    }
    if (ok) {
        const tensor_shape s = fc_storage(c, 'o');
        for (int64_t b = 0; b < s.batch; b++)
            for (int64_t h = 0; h < s.heads; h++)
                for (int64_t n = 0; n < s.seq; n++)
                    for (int64_t k = 0; k < s.dim; k++)
                        o_out[tensor_file_index(c->layout, s, b, h, n, k)] = tensor_load(
                            c->out_dtype, out.o, tensor_strided_index(&d.o, b, h, n, k));
        for (int64_t i = 0; i < out.n_lse; i++) lse_out[i] = out.lse[i];
    }
    outputs_free(&out);
    for (int t = 0; t < 3; t++) free(in[t]);
    return ok;
}
