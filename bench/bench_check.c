/* Accuracy of a timed output against the reference backend, on the same inputs in-process. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_choose_region(const flashport_problem *p, double budget_flops, bench_region *r) {
    double per_row_head = 4.0 * (double)p->seq_kv * (double)p->head_dim;
    double whole = per_row_head * (double)(p->batch * p->heads_q * p->seq_q);
    r->batch = 1;
    r->heads = p->heads_q / p->heads_kv;
    r->rows = p->seq_q;
    r->whole = whole <= budget_flops;
    if (r->whole) {
        r->batch = p->batch;
        r->heads = p->heads_q;
        snprintf(r->text, sizeof r->text, "all");
        return;
    }
    double rows_fit = budget_flops / (per_row_head * (double)r->heads);
    if (rows_fit < 1.0 && r->heads > 1) {
        r->heads = 1;
        rows_fit = budget_flops / per_row_head;
    }
    if (rows_fit < (double)r->rows) r->rows = rows_fit < 1.0 ? 1 : (int64_t)rows_fit;
    snprintf(r->text, sizeof r->text, "batch 0, heads 0-%lld, rows %lld-%lld",
             (long long)(r->heads - 1), (long long)(p->seq_q - r->rows),
             (long long)(p->seq_q - 1));
}

/* The region as a problem of its own: same strides, fewer batches, heads and (last) rows. */
static void region_problem(const flashport_problem *p, const bench_region *r,
                           flashport_problem *sub, int64_t *q_offset) {
    *sub = *p;
    sub->kernel = NULL;
    sub->batch = r->batch;
    sub->heads_q = r->heads;
    sub->heads_kv = r->whole ? p->heads_kv : 1;
    sub->seq_q = r->rows;
    *q_offset = (p->seq_q - r->rows) * p->q.seq;
}

flashport_status bench_reference_output(flashport_context *ref, const flashport_problem *p,
                                        const bench_inputs *in, const bench_region *r,
                                        void **ref_o, char *why, size_t why_len) {
    flashport_problem sub;
    int64_t q_off;
    region_problem(p, r, &sub, &q_off);
    size_t es = flashport_dtype_size(p->dtype);
    int64_t o_off = (p->seq_q - r->rows) * p->o.seq;
    unsigned char *o = calloc(1, in->o_bytes);
    if (!o) {
        snprintf(why, why_len, "reference output: host allocation of %zu bytes failed",
                 in->o_bytes);
        return FLASHPORT_ERROR_OUT_OF_MEMORY;
    }
    flashport_status st = flashport_attention_host(
        ref, &sub, (const unsigned char *)in->host_q + (size_t)q_off * es, in->host_k, in->host_v,
        o + (size_t)o_off * es, NULL);
    if (st != FLASHPORT_OK) {
        snprintf(why, why_len, "reference: %s", flashport_last_error());
        free(o);
        return st;
    }
    *ref_o = o;
    return FLASHPORT_OK;
}

void bench_compare(const flashport_problem *p, const bench_region *r, const void *out,
                   const void *ref, double *max_abs, double *rel_l2) {
    double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
    for (int64_t b = 0; b < r->batch; ++b)
        for (int64_t h = 0; h < r->heads; ++h)
            for (int64_t i = p->seq_q - r->rows; i < p->seq_q; ++i) {
                int64_t row = b * p->o.batch + h * p->o.head + i * p->o.seq;
                for (int64_t d = 0; d < p->head_dim; ++d) {
                    double want = bench_load(ref, p->dtype, row + d);
                    double got = bench_load(out, p->dtype, row + d);
                    double e = fabs(got - want);
                    if (!isfinite(got) && isfinite(want)) e = INFINITY;
                    if (e > worst || isnan(e)) worst = e;
                    diff2 += e * e;
                    ref2 += want * want;
                }
            }
    *max_abs = worst;
    *rel_l2 = ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2);
}
