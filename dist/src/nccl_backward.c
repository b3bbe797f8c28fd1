/* The backward ring over NCCL on device arrays: K/V blocks move as in the forward pass; each
 * block's dK and dV sums (float32) travel one step behind it on the transfer stream and arrive
 * back at the block's owner after the last step. dQ stays local. */
/* before flashport_dist.h, which declares the NCCL calls when nccl.h is in */
#include <nccl.h>

#include <string.h>

#include "nccl_ring.h"

enum { SLOTS = 8, PARTS = 7, EVENTS = 7 };

typedef struct backward_work {
    char *kv[2][2];   /* [slot][K or V] */
    float *dkv[2][2]; /* [slot][dK or dV] */
    char *dq_part, *dk_part, *dv_part;
    float *lse_part, *acc_dq;
    float *step_dkv[2]; /* a step's dK and dV, summed over its rectangles */
    cudaEvent_t ready, computed[2], received[2], summed, grads_received;
} backward_work;

static void work_alloc(fp_dist_nccl *m, fp_dist_record *r, backward_work *w,
                       const flashport_dist_desc *d) {
    size_t es = flashport_dtype_size(d->dtype);
    size_t q = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim);
    size_t kv = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim);
    size_t rows = (size_t)(d->batch * d->heads_q * d->seq_local);
    void **slots[SLOTS] = {(void **)&w->kv[0][0],  (void **)&w->kv[0][1],  (void **)&w->kv[1][0],
                           (void **)&w->kv[1][1],  (void **)&w->dkv[0][0], (void **)&w->dkv[0][1],
                           (void **)&w->dkv[1][0], (void **)&w->dkv[1][1]};
    size_t slot_bytes[SLOTS] = {kv * es, kv * es, kv * es, kv * es, kv * 4, kv * 4, kv * 4, kv * 4};
    void **parts[PARTS] = {(void **)&w->dq_part,    (void **)&w->dk_part, (void **)&w->dv_part,
                           (void **)&w->lse_part,   (void **)&w->acc_dq,  (void **)&w->step_dkv[0],
                           (void **)&w->step_dkv[1]};
    size_t part_bytes[PARTS] = {q * es, kv * es, kv * es, rows * 4, q * 4, kv * 4, kv * 4};
    for (int i = 0; i < SLOTS + PARTS; i++) {
        size_t bytes = i < SLOTS ? slot_bytes[i] : part_bytes[i - SLOTS];
        void **p = i < SLOTS ? slots[i] : parts[i - SLOTS];
        if (cudaMallocAsync(p, bytes, m->main) != cudaSuccess) {
            fp_dist_record_fail(r, FLASHPORT_ERROR_OUT_OF_MEMORY,
                                "no device memory for the ring buffers (%zu bytes)", bytes);
            return;
        }
    }
    cudaEvent_t *evs[EVENTS] = {&w->ready,         &w->computed[0], &w->computed[1],
                                &w->received[0],   &w->received[1], &w->summed,
                                &w->grads_received};
    for (int i = 0; i < EVENTS; i++)
        if (fp_dist_cuda_failed(m, r, "cudaEventCreateWithFlags",
                                cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming)))
            return;
}

static void work_free(fp_dist_nccl *m, backward_work *w) {
    void *bufs[SLOTS + PARTS] = {w->kv[0][0],  w->kv[0][1],    w->kv[1][0],   w->kv[1][1],
                                 w->dkv[0][0], w->dkv[0][1],   w->dkv[1][0],  w->dkv[1][1],
                                 w->dq_part,   w->dk_part,     w->dv_part,    w->lse_part,
                                 w->acc_dq,    w->step_dkv[0], w->step_dkv[1]};
    for (int i = 0; i < SLOTS + PARTS; i++)
        if (bufs[i]) cudaFreeAsync(bufs[i], m->main);
    cudaEvent_t evs[EVENTS] = {w->ready,       w->computed[0], w->computed[1],   w->received[0],
                               w->received[1], w->summed,      w->grads_received};
    for (int i = 0; i < EVENTS; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
}

typedef struct backward_inputs {
    const char *q, *o, *d_o;
    const float *lse;
} backward_inputs;

/* One rectangle's gradients on the block (k, v), queued on the main stream: dQ into acc_dq,
 * dK and dV into w->step_dkv; returns 1 when queued. */
static int rect_backward(fp_dist_nccl *m, fp_dist_record *r, flashport_context *ctx,
                         const flashport_dist_desc *d, const fp_dist_rect *s,
                         const backward_inputs *in, const char *k, const char *v,
                         backward_work *w) {
    flashport_attention_desc ad;
    fp_dist_step_desc(&ad, d, s);
    size_t es = flashport_dtype_size(d->dtype);
    size_t q_bytes = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim) * es;
    size_t kv_bytes = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim) * es;
    size_t q_off = (size_t)fp_dist_row_offset(d, d->heads_q, 0, 0, s->q_off) * es;
    size_t kv_off = (size_t)fp_dist_row_offset(d, d->heads_kv, 0, 0, s->kv_off) * es;
    size_t lse_bytes = (size_t)(d->batch * d->heads_q * s->q_len) * sizeof(float);
    fp_dist_dev_shape qs = fp_dist_dev_shape_of(d, d->heads_q);
    if (fp_dist_cuda_failed(
            m, r, "the LSE rows",
            fp_dist_dev_lse_rows(qs, s->q_off, s->q_len, in->lse, w->lse_part, m->main)))
        return 0;
    flashport_buffer *b[9] = {fp_dist_wrap(r, ctx, in->q, q_off, q_bytes),
                              fp_dist_wrap(r, ctx, k, kv_off, kv_bytes),
                              fp_dist_wrap(r, ctx, v, kv_off, kv_bytes),
                              fp_dist_wrap(r, ctx, in->o, q_off, q_bytes),
                              fp_dist_wrap(r, ctx, w->lse_part, 0, lse_bytes),
                              fp_dist_wrap(r, ctx, in->d_o, q_off, q_bytes),
                              fp_dist_wrap(r, ctx, w->dq_part, q_off, q_bytes),
                              fp_dist_wrap(r, ctx, w->dk_part, kv_off, kv_bytes),
                              fp_dist_wrap(r, ctx, w->dv_part, kv_off, kv_bytes)};
    int ok = 1;
    for (int i = 0; i < 9; i++) ok = ok && b[i];
    if (ok) {
        flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
        a.q = b[0], a.k = b[1], a.v = b[2], a.o = b[3], a.lse = b[4], a.d_o = b[5];
        a.d_q = b[6], a.d_k = b[7], a.d_v = b[8];
        flashport_status st = flashport_attention_backward(ctx, &ad, &a);
        if (st != FLASHPORT_OK) {
            fp_dist_record_fail(r, st, "ring step: %s", flashport_last_error());
            ok = 0;
        } else {
            fp_dist_dev_shape ks = fp_dist_dev_shape_of(d, d->heads_kv);
            ok = !fp_dist_cuda_failed(m, r, "the dQ sum",
                                      fp_dist_dev_add_rows(qs, s->q_off, s->q_len, w->dq_part,
                                                           w->acc_dq, m->main)) &&
                 !fp_dist_cuda_failed(m, r, "the dK sum",
                                      fp_dist_dev_add_rows(ks, s->kv_off, s->kv_len, w->dk_part,
                                                           w->step_dkv[0], m->main)) &&
                 !fp_dist_cuda_failed(m, r, "the dV sum",
                                      fp_dist_dev_add_rows(ks, s->kv_off, s->kv_len, w->dv_part,
                                                           w->step_dkv[1], m->main));
        }
    }
    for (int i = 0; i < 9; i++) flashport_buffer_free(b[i]);
    return ok;
}

flashport_status flashport_dist_attention_backward_nccl(
    ncclComm_t comm, cudaStream_t stream, flashport_context *ctx, const flashport_dist_desc *d,
    const void *q, const void *k, const void *v, const void *o, const float *lse, const void *d_o,
    void *d_q, void *d_k, void *d_v, flashport_dist_stats *stats) {
    static const char *where = "flashport_dist_attention_backward_nccl";
    double t0 = fp_dist_now_ms();
    fp_dist_nccl m;
    flashport_status st = fp_dist_nccl_open(&m, comm, stream, stats != NULL, where);
    if (st != FLASHPORT_OK) return st;
    fp_dist_record rec;
    fp_dist_record_init(&rec, d);
    const void *bufs[] = {q, k, v, o, lse, d_o, d_q, d_k, d_v};
    const char *names[] = {"q", "k", "v", "o", "lse", "d_o", "d_q", "d_k", "d_v"};
    fp_dist_check_buffers(&rec, 9, bufs, names);
    fp_dist_nccl_check_context(&rec, ctx);
    fp_dist_check(&rec, d, ctx, m.rank, m.ranks, 1);
    backward_work w;
    memset(&w, 0, sizeof w);
    if (rec.status == FLASHPORT_OK) work_alloc(&m, &rec, &w, d);
    double a0 = fp_dist_now_ms();
    st = fp_dist_nccl_agree(&m, &rec, where);
    double agree_ms = fp_dist_now_ms() - a0;
    if (st != FLASHPORT_OK) {
        work_free(&m, &w);
        fp_dist_nccl_close(&m);
        return st;
    }

    int P = m.ranks, S = fp_dist_ring_steps(d, P), skipped = 0;
    int64_t kv_count = d->batch * d->heads_kv * d->seq_local * d->head_dim;
    int64_t q_count = d->batch * d->heads_q * d->seq_local * d->head_dim;
    size_t kv_bytes = (size_t)kv_count * flashport_dtype_size(d->dtype);
    /* the step's float32 sums, added to the travelling ones */
    fp_dist_dev_shape step_sums = fp_dist_dev_shape_of(d, d->heads_kv);
    step_sums.dtype = FLASHPORT_F32;
    backward_inputs in = {q, o, d_o, lse};
    fp_dist_cuda_failed(&m, &rec, "fill", fp_dist_dev_fill(w.acc_dq, 0.0f, q_count, m.main));
    fp_dist_cuda_failed(&m, &rec, "fill", fp_dist_dev_fill(w.dkv[0][0], 0.0f, kv_count, m.main));
    fp_dist_cuda_failed(&m, &rec, "fill", fp_dist_dev_fill(w.dkv[0][1], 0.0f, kv_count, m.main));
    fp_dist_cuda_failed(&m, &rec, "cudaEventRecord", cudaEventRecord(w.ready, m.main));
    const char *cur[2] = {k, v};
    for (int step = 0; step < S && !m.broken; step++) {
        int src = (m.rank - step + P) % P;
        char **next = w.kv[step % 2];
        if (step + 1 < S) {
            cudaEvent_t after = step == 0 ? w.ready : w.computed[(step - 1) % 2];
            const void *send[2] = {cur[0], cur[1]};
            void *recv[2] = {next[0], next[1]};
            fp_dist_nccl_shift(&m, &rec, 2, send, recv, kv_bytes, 1, after, w.received[step % 2]);
        }
        fp_dist_step s = fp_dist_step_plan(d, m.rank, P, src);
        skipped += s.count == 0;
        int computed = s.count > 0 && rec.status == FLASHPORT_OK;
        for (int t = 0; t < 2 && computed; t++)
            computed = !fp_dist_cuda_failed(
                &m, &rec, "fill", fp_dist_dev_fill(w.step_dkv[t], 0.0f, kv_count, m.main));
        for (int i = 0; i < s.count && computed; i++)
            computed = rect_backward(&m, &rec, ctx, d, &s.rect[i], &in, cur[0], cur[1], &w);
        fp_dist_cuda_failed(&m, &rec, "cudaEventRecord",
                            cudaEventRecord(w.computed[step % 2], m.main));

        /* The block's sums: zeros at its first step, else what the previous rank sent; this
         * step's part joins them and they move on behind the block. */
        float **dkv = w.dkv[step % 2];
        if (step > 0) fp_dist_nccl_wait(&m, &rec, w.grads_received);
        for (int t = 0; t < 2 && computed; t++)
            fp_dist_cuda_failed(
                &m, &rec, t ? "the dV sum" : "the dK sum",
                fp_dist_dev_add_rows(step_sums, 0, d->seq_local, w.step_dkv[t], dkv[t], m.main));
        fp_dist_cuda_failed(&m, &rec, "cudaEventRecord", cudaEventRecord(w.summed, m.main));
        float **dkv_next = w.dkv[(step + 1) % 2];
        const void *gsend[2] = {dkv[0], dkv[1]};
        void *grecv[2] = {dkv_next[0], dkv_next[1]};
        /* on to the next holder of the block; after the last step, back to its owner */
        fp_dist_nccl_shift(&m, &rec, 2, gsend, grecv, (size_t)kv_count * sizeof(float),
                           step + 1 < S ? 1 : 1 - S, w.summed, w.grads_received);
        if (step + 1 < S) {
            fp_dist_nccl_wait(&m, &rec, w.received[step % 2]);
            cur[0] = next[0];
            cur[1] = next[1];
        }
    }
    /* After the last step the sums of this rank's own block are back. */
    fp_dist_nccl_wait(&m, &rec, w.grads_received);
    float **own = w.dkv[S % 2];

    double wait_ms = fp_dist_nccl_wait_ms(&m);
    a0 = fp_dist_now_ms();
    st = fp_dist_nccl_agree(&m, &rec, where);
    agree_ms += fp_dist_now_ms() - a0;
    if (st == FLASHPORT_OK) {
        cudaError_t e = fp_dist_dev_store_all(d->dtype, w.acc_dq, d_q, q_count, m.main);
        if (e == cudaSuccess) e = fp_dist_dev_store_all(d->dtype, own[0], d_k, kv_count, m.main);
        if (e == cudaSuccess) e = fp_dist_dev_store_all(d->dtype, own[1], d_v, kv_count, m.main);
        if (e != cudaSuccess)
            st = fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "writing the gradients: %s",
                              cudaGetErrorString(e));
    }
    work_free(&m, &w);
    if (stats) {
        cudaStreamSynchronize(m.main);
        stats->total_ms = fp_dist_now_ms() - t0;
        stats->wait_ms = wait_ms;
        stats->agree_ms = agree_ms;
        stats->compute_ms = stats->total_ms - wait_ms - agree_ms;
        stats->steps = S;
        stats->steps_skipped = skipped;
    }
    fp_dist_nccl_close(&m);
    return st;
}
