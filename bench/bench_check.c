/* Accuracy of a timed output against the reference backend, on the same inputs in-process. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_choose_region(const bench_problem *p, double budget_flops, bench_region *r) {
    const flashport_attention_desc *d = &p->desc;
    const int packed = d->q_varlen;
    /* The reference's work, every key of a row counted (masks are not subtracted). */
    double whole = 0.0;
    for (int64_t b = 0; b < d->batch; ++b)
        whole += 4.0 * (double)d->heads_q * (double)d->head_dim * p->len_q[b] * p->len_kv[b];
    r->row0 = 0;
    r->whole = whole <= budget_flops;
    if (r->whole) {
        r->batch = packed ? 1 : d->batch; /* packed rows are addressed as one long sequence */
        r->heads = d->heads_q;
        r->rows = packed ? p->tokens_q : d->seq_q;
        snprintf(r->text, sizeof r->text, "all");
        return;
    }
    /* The first sequence's last rows, of one KV group of heads. */
    const double per_row_head = 4.0 * (double)p->len_kv[0] * (double)d->head_dim;
    r->batch = 1;
    r->heads = d->heads_q / d->heads_kv;
    r->rows = p->len_q[0];
    double rows_fit = budget_flops / (per_row_head * (double)r->heads);
    if (rows_fit < 1.0 && r->heads > 1) {
        r->heads = 1;
        rows_fit = budget_flops / per_row_head;
    }
    if (rows_fit < (double)r->rows) r->rows = rows_fit < 1.0 ? 1 : (int64_t)rows_fit;
    r->row0 = p->len_q[0] - r->rows;
    snprintf(r->text, sizeof r->text, "%s 0, heads 0-%lld, rows %lld-%lld",
             packed ? "sequence" : "batch", (long long)(r->heads - 1), (long long)r->row0,
             (long long)(r->row0 + r->rows - 1));
}

flashport_status bench_reference_output(flashport_context *ref, const bench_problem *p,
                                        const bench_inputs *in, const bench_region *r, void **ref_o,
                                        char *why, size_t why_len) {
    const flashport_attention_desc *d = &p->desc;
    /* The region as a problem of its own: the same strides and tables, with Q and O read from
     * the region's first row. Outside the whole output that is sequence (or batch entry) 0,
     * of which the tables' first entries already speak, one KV head, and the last rows. */
    flashport_attention_desc sub = *d;
    sub.kernel = NULL;
    int32_t cu_q[2] = {0, (int32_t)r->rows}, cu_kv[2] = {0, p->len_kv[0]};
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.cu_seqlens_q = p->cu_q;
    a.cu_seqlens_kv = p->cu_kv;
    if (!r->whole) {
        sub.batch = 1;
        sub.heads_q = r->heads;
        sub.heads_kv = 1;
        sub.seq_q = r->rows;
        if (d->q_varlen) {
            sub.total_q = r->rows;
            a.cu_seqlens_q = cu_q;
            sub.seq_kv = p->len_kv[0];
        }
        if (d->kv_layout == FLASHPORT_KV_VARLEN) {
            sub.total_kv = p->len_kv[0];
            a.cu_seqlens_kv = cu_kv;
        }
    }
    const size_t es = flashport_dtype_size(d->dtype), os = flashport_dtype_size(d->out_dtype);
    unsigned char *o = calloc(1, in->o_bytes);
    if (!o) {
        snprintf(why, why_len, "reference output: host allocation of %zu bytes failed",
                 in->o_bytes);
        return FLASHPORT_ERROR_OUT_OF_MEMORY;
    }
    a.q = (const unsigned char *)in->host_q + (size_t)(r->row0 * d->q.seq) * es;
    a.k = in->host_k;
    a.v = in->host_v;
    a.o = o + (size_t)(r->row0 * d->o.seq) * os;
    a.seqlens_kv = p->seqlens_kv;
    a.block_table = p->block_table;
    if (d->alibi) a.alibi_slopes = p->alibi;
    a.bias = p->bias;
    a.sinks = p->sinks;
    if (d->descale) {
        a.q_descale = &p->descale[0];
        a.k_descale = &p->descale[1];
        a.v_descale = &p->descale[2];
    }
    flashport_status st = flashport_attention_run_host(ref, &sub, &a);
    if (st != FLASHPORT_OK) {
        snprintf(why, why_len, "reference: %s", flashport_last_error());
        free(o);
        return st;
    }
    *ref_o = o;
    return FLASHPORT_OK;
}

void bench_compare(const flashport_attention_desc *d, const bench_region *r, const void *out,
                   const void *ref, double *max_abs, double *rel_l2) {
    double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
    for (int64_t b = 0; b < r->batch; ++b)
        for (int64_t h = 0; h < r->heads; ++h)
            for (int64_t i = r->row0; i < r->row0 + r->rows; ++i) {
                int64_t row = b * d->o.batch + h * d->o.head + i * d->o.seq;
                for (int64_t c = 0; c < d->head_dim; ++c) {
                    double want = bench_load(ref, d->out_dtype, row + c);
                    double got = bench_load(out, d->out_dtype, row + c);
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
