/* The forward ring over MPI on host arrays: K/V blocks move one rank on per step while the
 * current one is attended to; partial outputs merge by their LSE in float32. */
/* before flashport_dist.h, which declares the MPI calls when mpi.h is in */
#include <mpi.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_accum.h"
#include "mpi_ring.h"

typedef struct forward_work {
    char *kv[2][2]; /* [slot][K or V]: blocks received from the previous rank */
    void *o_part;   /* a step's partial O, the shard's layout */
    float *lse_part;
    float *acc_o, *acc_lse;
} forward_work;

static int work_alloc(forward_work *w, const flashport_dist_desc *d) {
    size_t es = flashport_dtype_size(d->dtype);
    size_t q = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim);
    size_t kv = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim);
    size_t rows = (size_t)(d->batch * d->heads_q * d->seq_local);
    memset(w, 0, sizeof *w);
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) w->kv[s][t] = malloc(kv * es);
    w->o_part = malloc(q * es);
    w->lse_part = malloc(rows * sizeof(float));
    w->acc_o = calloc(q, sizeof(float));
    w->acc_lse = malloc(rows * sizeof(float));
    if (!w->kv[0][0] || !w->kv[0][1] || !w->kv[1][0] || !w->kv[1][1] || !w->o_part ||
        !w->lse_part || !w->acc_o || !w->acc_lse)
        return 0;
    for (size_t i = 0; i < rows; i++) w->acc_lse[i] = -INFINITY;
    return 1;
}

static void work_free(forward_work *w) {
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) free(w->kv[s][t]);
    free(w->o_part);
    free(w->lse_part);
    free(w->acc_o);
    free(w->acc_lse);
}

/* One rectangle's attention on the block (k, v), merged into the accumulators. */
static void rect_forward(fp_dist_record *r, flashport_context *ctx, const flashport_dist_desc *d,
                         const fp_dist_rect *s, const char *q, const char *k, const char *v,
                         forward_work *w) {
    flashport_attention_desc ad;
    fp_dist_step_desc(&ad, d, s);
    size_t es = flashport_dtype_size(d->dtype);
    int64_t q_off = fp_dist_row_offset(d, d->heads_q, 0, 0, s->q_off);
    int64_t kv_off = fp_dist_row_offset(d, d->heads_kv, 0, 0, s->kv_off);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q + (size_t)q_off * es;
    a.k = k + (size_t)kv_off * es;
    a.v = v + (size_t)kv_off * es;
    a.o = (char *)w->o_part + (size_t)q_off * es;
    a.lse = w->lse_part;
    flashport_status st = flashport_attention_run_host(ctx, &ad, &a);
    if (st != FLASHPORT_OK) {
        fp_dist_record_fail(r, st, "ring step: %s", flashport_last_error());
        return;
    }
    fp_dist_merge_rows(d, s, w->o_part, w->lse_part, w->acc_o, w->acc_lse);
}

flashport_status flashport_dist_attention_mpi(MPI_Comm comm, flashport_context *ctx,
                                              const flashport_dist_desc *d, const void *q,
                                              const void *k, const void *v, void *o, float *lse,
                                              flashport_dist_stats *stats) {
    static const char *where = "flashport_dist_attention_mpi";
    double t0 = fp_dist_now_ms();
    fp_dist_mpi m;
    flashport_status st = fp_dist_mpi_open(&m, comm, where);
    if (st != FLASHPORT_OK) return st;
    fp_dist_record rec;
    fp_dist_record_init(&rec, d);
    const void *bufs[] = {q, k, v, o};
    const char *names[] = {"q", "k", "v", "o"};
    fp_dist_check_buffers(&rec, 4, bufs, names);
    fp_dist_mpi_check(&m, &rec, d, ctx, 0);
    forward_work w = {0};
    if (rec.status == FLASHPORT_OK && !work_alloc(&w, d))
        fp_dist_record_fail(&rec, FLASHPORT_ERROR_OUT_OF_MEMORY, "no memory for the ring buffers");
    double a0 = fp_dist_now_ms();
    st = fp_dist_mpi_agree(&m, &rec, where);
    double agree_ms = fp_dist_now_ms() - a0;
    if (st != FLASHPORT_OK) {
        work_free(&w);
        fp_dist_mpi_close(&m);
        return st;
    }

    int P = m.ranks, S = fp_dist_ring_steps(d, P), skipped = 0;
    int64_t kv_count = d->batch * d->heads_kv * d->seq_local * d->head_dim;
    double compute_ms = 0;
    const char *cur[2] = {k, v}; /* the block held now: first the rank's own */
    for (int step = 0; step < S; step++) {
        int src = (m.rank - step + P) % P;
        MPI_Request req[4];
        char **next = w.kv[step % 2];
        if (step + 1 < S) {
            fp_dist_mpi_shift(&m, &rec, cur[0], next[0], kv_count, m.element, 0, 1, req);
            fp_dist_mpi_shift(&m, &rec, cur[1], next[1], kv_count, m.element, 1, 1, req + 2);
        }
        fp_dist_step s = fp_dist_step_plan(d, m.rank, P, src);
        double c0 = fp_dist_now_ms();
        skipped += s.count == 0;
        for (int i = 0; i < s.count && rec.status == FLASHPORT_OK; i++)
            rect_forward(&rec, ctx, d, &s.rect[i], q, cur[0], cur[1], &w);
        compute_ms += fp_dist_now_ms() - c0;
        if (step + 1 < S) {
            fp_dist_mpi_wait(&m, &rec, req, 4);
            cur[0] = next[0];
            cur[1] = next[1];
        }
    }

    /* The sinks join each row's denominator once, not once per step. */
    if (d->sinks && rec.status == FLASHPORT_OK)
        fp_dist_merge_sinks(d, d->sinks, w.acc_o, w.acc_lse);
    a0 = fp_dist_now_ms();
    st = fp_dist_mpi_agree(&m, &rec, where);
    agree_ms += fp_dist_now_ms() - a0;
    if (st == FLASHPORT_OK) {
        int64_t q_count = d->batch * d->heads_q * d->seq_local * d->head_dim;
        fp_dist_store_all(d->dtype, w.acc_o, o, q_count);
        if (lse)
            memcpy(lse, w.acc_lse, sizeof(float) * (size_t)(d->batch * d->heads_q * d->seq_local));
    }
    if (stats) {
        stats->total_ms = fp_dist_now_ms() - t0;
        stats->compute_ms = compute_ms;
        stats->wait_ms = m.wait_ms;
        stats->agree_ms = agree_ms;
        stats->steps = S;
        stats->steps_skipped = skipped;
    }
    work_free(&w);
    fp_dist_mpi_close(&m);
    return st;
}
