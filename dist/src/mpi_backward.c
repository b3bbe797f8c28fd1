/* The backward ring over MPI on host arrays. K/V blocks move as in the forward pass; each
 * block's dK and dV (float32) travel one step behind it, gathering every rank's contribution,
 * and arrive back at the block's owner after the last step. dQ stays local. The transfer of
 * the gradients runs while the next step computes its part. */
/* before flashport_dist.h, which declares the MPI calls when mpi.h is in */
#include <mpi.h>

#include <stdlib.h>
#include <string.h>

#include "host_accum.h"
#include "mpi_ring.h"

typedef struct backward_work {
    char *kv[2][2];   /* [slot][K or V]: blocks received from the previous rank */
    float *dkv[2][2]; /* [slot][dK or dV]: the travelling gradient sums */
    void *dq_part, *dk_part, *dv_part;
    float *lse_part;
    float *acc_dq;
    float *step_dkv[2]; /* a step's dK and dV, summed over its rectangles */
} backward_work;

static int work_alloc(backward_work *w, const flashport_dist_desc *d) {
    size_t es = flashport_dtype_size(d->dtype);
    size_t q = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim);
    size_t kv = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim);
    size_t rows = (size_t)(d->batch * d->heads_q * d->seq_local);
    memset(w, 0, sizeof *w);
    int ok = 1;
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) {
            w->kv[s][t] = malloc(kv * es);
            w->dkv[s][t] = malloc(kv * sizeof(float));
            ok = ok && w->kv[s][t] && w->dkv[s][t];
        }
    for (int t = 0; t < 2; t++) {
        w->step_dkv[t] = malloc(kv * sizeof(float));
        ok = ok && w->step_dkv[t];
    }
    w->dq_part = malloc(q * es);
    w->dk_part = malloc(kv * es);
    w->dv_part = malloc(kv * es);
    w->lse_part = malloc(rows * sizeof(float));
    w->acc_dq = calloc(q, sizeof(float));
    return ok && w->dq_part && w->dk_part && w->dv_part && w->lse_part && w->acc_dq;
}

static void work_free(backward_work *w) {
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) {
            free(w->kv[s][t]);
            free(w->dkv[s][t]);
        }
    for (int t = 0; t < 2; t++) free(w->step_dkv[t]);
    free(w->dq_part);
    free(w->dk_part);
    free(w->dv_part);
    free(w->lse_part);
    free(w->acc_dq);
}

typedef struct backward_inputs {
    const char *q, *o, *d_o;
    const float *lse;
} backward_inputs;

/* One rectangle's gradients on the block (k, v): dQ into acc_dq, dK and dV into
 * w->step_dkv; returns 0 when it failed. */
static int rect_backward(fp_dist_record *r, flashport_context *ctx, const flashport_dist_desc *d,
                         const fp_dist_rect *s, const backward_inputs *in, const char *k,
                         const char *v, backward_work *w) {
    flashport_attention_desc ad;
    fp_dist_step_desc(&ad, d, s);
    size_t es = flashport_dtype_size(d->dtype);
    size_t q_off = (size_t)fp_dist_row_offset(d, d->heads_q, 0, 0, s->q_off) * es;
    size_t kv_off = (size_t)fp_dist_row_offset(d, d->heads_kv, 0, 0, s->kv_off) * es;
    fp_dist_lse_rows(d, s, in->lse, w->lse_part);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = in->q + q_off;
    a.k = k + kv_off;
    a.v = v + kv_off;
    a.o = (char *)in->o + q_off;
    a.lse = w->lse_part;
    a.d_o = in->d_o + q_off;
    a.d_q = (char *)w->dq_part + q_off;
    a.d_k = (char *)w->dk_part + kv_off;
    a.d_v = (char *)w->dv_part + kv_off;
    flashport_status st = flashport_attention_backward_host(ctx, &ad, &a);
    if (st != FLASHPORT_OK) {
        fp_dist_record_fail(r, st, "ring step: %s", flashport_last_error());
        return 0;
    }
    fp_dist_add_rows(d, d->dtype, d->heads_q, s->q_off, s->q_len, w->dq_part, w->acc_dq);
    fp_dist_add_rows(d, d->dtype, d->heads_kv, s->kv_off, s->kv_len, w->dk_part, w->step_dkv[0]);
    fp_dist_add_rows(d, d->dtype, d->heads_kv, s->kv_off, s->kv_len, w->dv_part, w->step_dkv[1]);
    return 1;
}

flashport_status flashport_dist_attention_backward_mpi(MPI_Comm comm, flashport_context *ctx,
                                                       const flashport_dist_desc *d, const void *q,
                                                       const void *k, const void *v, const void *o,
                                                       const float *lse, const void *d_o, void *d_q,
                                                       void *d_k, void *d_v,
                                                       flashport_dist_stats *stats) {
    static const char *where = "flashport_dist_attention_backward_mpi";
    double t0 = fp_dist_now_ms();
    fp_dist_mpi m;
    flashport_status st = fp_dist_mpi_open(&m, comm, where);
    if (st != FLASHPORT_OK) return st;
    fp_dist_record rec;
    fp_dist_record_init(&rec, d);
    const void *bufs[] = {q, k, v, o, lse, d_o, d_q, d_k, d_v};
    const char *names[] = {"q", "k", "v", "o", "lse", "d_o", "d_q", "d_k", "d_v"};
    fp_dist_check_buffers(&rec, 9, bufs, names);
    fp_dist_mpi_check(&m, &rec, d, ctx, 1);
    backward_work w = {0};
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
    backward_inputs in = {q, o, d_o, lse};
    const char *cur[2] = {k, v};
    MPI_Request grad_req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                               MPI_REQUEST_NULL};
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
        int computed = s.count > 0 && rec.status == FLASHPORT_OK;
        if (computed) {
            memset(w.step_dkv[0], 0, sizeof(float) * (size_t)kv_count);
            memset(w.step_dkv[1], 0, sizeof(float) * (size_t)kv_count);
        }
        for (int i = 0; i < s.count && computed; i++)
            computed = rect_backward(&rec, ctx, d, &s.rect[i], &in, cur[0], cur[1], &w);
        compute_ms += fp_dist_now_ms() - c0;

        /* The block's gradient sums so far: zero at its first step, else what the previous
         * rank sent. This step's part joins them, and they move on with the block. */
        float **dkv = w.dkv[step % 2];
        if (step == 0) {
            memset(dkv[0], 0, sizeof(float) * (size_t)kv_count);
            memset(dkv[1], 0, sizeof(float) * (size_t)kv_count);
        } else {
            fp_dist_mpi_wait(&m, &rec, grad_req, 4);
        }
        c0 = fp_dist_now_ms();
        if (computed) {
            int64_t n = d->seq_local;
            fp_dist_add_rows(d, FLASHPORT_F32, d->heads_kv, 0, n, w.step_dkv[0], dkv[0]);
            fp_dist_add_rows(d, FLASHPORT_F32, d->heads_kv, 0, n, w.step_dkv[1], dkv[1]);
        }
        compute_ms += fp_dist_now_ms() - c0;
        float **dkv_next = w.dkv[(step + 1) % 2];
        /* on to the next holder of the block; after the last step, back to its owner */
        int dist = step + 1 < S ? 1 : 1 - S;
        fp_dist_mpi_shift(&m, &rec, dkv[0], dkv_next[0], kv_count, m.f32, 2, dist, grad_req);
        fp_dist_mpi_shift(&m, &rec, dkv[1], dkv_next[1], kv_count, m.f32, 3, dist, grad_req + 2);
        if (step + 1 < S) {
            fp_dist_mpi_wait(&m, &rec, req, 4);
            cur[0] = next[0];
            cur[1] = next[1];
        }
    }
    /* After the last step the sums of this rank's own block are back. */
    fp_dist_mpi_wait(&m, &rec, grad_req, 4);
    float **own = w.dkv[S % 2];

    a0 = fp_dist_now_ms();
    st = fp_dist_mpi_agree(&m, &rec, where);
    agree_ms += fp_dist_now_ms() - a0;
    if (st == FLASHPORT_OK) {
        fp_dist_store_all(d->dtype, w.acc_dq, d_q,
                          d->batch * d->heads_q * d->seq_local * d->head_dim);
        fp_dist_store_all(d->dtype, own[0], d_k, kv_count);
        fp_dist_store_all(d->dtype, own[1], d_v, kv_count);
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
