/*
 * One conformance check: a case on one backend context and kernel variant, judged against an
 * expected output. Also the tolerances, the descriptor a case becomes, and the re-computation
 * of the expected output for a reduced-precision variant.
 */
#ifndef FC_CHECKER_H
#define FC_CHECKER_H

#include <stdint.h>

#include "flashport.h"
#include "manifest.h"

typedef enum fc_verdict { FC_PASS = 0, FC_FAIL = 1, FC_UNSUPPORTED = 2 } fc_verdict;

const char *fc_verdict_name(fc_verdict v); /* "pass", "FAIL", "unsupported" */

typedef struct fc_tolerance {
    double rel_l2;  /* relative L2 error of O */
    double max_abs; /* largest |O - expected|; 0: not checked */
    double lse;     /* largest |LSE - expected| / max(1, |expected|) */
} fc_tolerance;

/* Tolerance of a case on a variant of the given precision class: by the case's dtype, or by
 * out_dtype for FP8 inputs (the expected values are exact on the decoded inputs), or, for the
 * FP8 class (P rounded to e4m3), 5e-2 relative L2 of O and an LSE bound of at least 1e-3; the
 * O tolerances are multiplied by the case's tol_factor. */
fc_tolerance fc_tolerance_for(const fc_case *c, flashport_precision precision);

/* Whether a variant of this precision computes something other than the case's own dtype
 * (f32 inputs multiplied as tf32 or f16): its expected output must be recomputed. */
int fc_needs_recompute(const fc_case *c, flashport_precision precision);

typedef struct fc_result {
    fc_verdict verdict;
    char kernel_ran[64];
    char detail[640]; /* why it failed or is unsupported; a summary when it passed */
    double rel_l2, max_abs, lse_err;
    fc_tolerance tol;
    int64_t unwritten;   /* output elements still holding the poison pattern */
    int64_t guard_hits;  /* elements outside the output that changed */
    int64_t non_finite;  /* NaN or inf where the expected value is finite */
    int64_t nan_missing; /* finite (or -inf) where the expected value is NaN */
    double ms;           /* attention + synchronize, host clock (reported, never judged) */
} fc_result;

/* Runs case c on ctx with the variant kernel (NULL: the planner's choice), inputs from f, and
 * judges O and LSE against expected_o / expected_lse (contiguous, as in o.npy and lse.npy).
 * A decline is the verdict unsupported, except that its reason must name a feature of the case
 * (as fp_feature_name spells it) when the variant plans the same problem without its features,
 * and must never name a feature the case does not use: otherwise it is a failure. */
void fc_check(flashport_context *ctx, const char *kernel, const fc_case *c, const fc_fixture *f,
              const double *expected_o, const double *expected_lse, fc_tolerance tol, fc_result *r);

/* Elements after each output buffer that must stay untouched. */
#define FC_GUARD_ELEMENTS 256

/* The descriptor of case c (strides padded as the case says), forcing kernel when not NULL. */
void fc_desc(const fc_case *c, const char *kernel, flashport_attention_desc *d);

/* The API v2 features the descriptor of case c asks for, in the runner's words,
 * comma-separated ("window,alibi"), or "none": window softcap alibi bias sinks varlen paged
 * fp8. A window that is only causal is not one. Read from the descriptor fc_desc builds, so
 * that a field the runner failed to pass on shows as a missing feature. */
void fc_case_feature_words(const fc_case *c, char *out, size_t len);

/* Fills n elements of dtype with the poison pattern (a signalling NaN; FP8, for input gaps
 * only, the NaN 0x7f of both formats). */
void fc_poison(flashport_dtype dtype, void *base, int64_t n);

/* Judges downloaded outputs of descriptor d (from fc_desc): o holds o_extent elements of
 * out_dtype at d's O strides then FC_GUARD_ELEMENTS guard elements; lse holds n_lse floats
 * then the guard. With packed Q, cu_seqlens_q says which stored rows belong to a sequence:
 * the others (and their LSE) must stay untouched. Sets r's verdict, metrics and detail
 * against r->tol, which the caller sets first. */
void fc_judge(const fc_case *c, const flashport_attention_desc *d, const int32_t *cu_seqlens_q,
              const void *o, int64_t o_extent, const float *lse, int64_t n_lse, const double *exp_o,
              const double *exp_lse, fc_result *r);

/* Expected O and LSE of case c for a variant of the given precision: the inputs rounded as the
 * variant rounds them, run on the reference context. o_out holds f->count[FC_O] values,
 * lse_out f->count[FC_LSE]. */
int fc_recompute(flashport_context *reference, const fc_case *c, const fc_fixture *f,
                 flashport_precision precision, double *o_out, double *lse_out, char *msg,
                 size_t msg_len);

#endif /* FC_CHECKER_H */
