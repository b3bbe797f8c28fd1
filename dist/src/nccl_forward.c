/* The forward ring over NCCL on device arrays: the attention and the merges on the caller's
 * stream, each next K/V transfer on the call's transfer stream while the current block is
 * attended to. */
/* before flashport_dist.h, which declares the NCCL calls when nccl.h is in */
#include <nccl.h>

#include <math.h>
#include <string.h>

#include "nccl_ring.h"

typedef struct forward_work {
    char *kv[2][2]; /* [slot][K or V] */
    char *o_part;
    float *lse_part, *acc_o, *acc_lse;
    cudaEvent_t ready, computed[2], received[2];
} forward_work;

static void work_alloc(fp_dist_nccl *m, fp_dist_record *r, forward_work *w,
                       const flashport_dist_desc *d) {
    size_t es = flashport_dtype_size(d->dtype);
    size_t q = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim);
    size_t kv = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim);
    size_t rows = (size_t)(d->batch * d->heads_q * d->seq_local);
    void **bufs[] = {(void **)&w->kv[0][0], (void **)&w->kv[0][1], (void **)&w->kv[1][0],
                     (void **)&w->kv[1][1], (void **)&w->o_part,   (void **)&w->lse_part,
                     (void **)&w->acc_o,    (void **)&w->acc_lse};
    size_t bytes[] = {kv * es, kv * es, kv * es, kv * es, q * es, rows * 4, q * 4, rows * 4};
    for (int i = 0; i < 8; i++)
        if (cudaMallocAsync(bufs[i], bytes[i], m->main) != cudaSuccess) {
            fp_dist_record_fail(r, FLASHPORT_ERROR_OUT_OF_MEMORY,
                                "no device memory for the ring buffers (%zu bytes)", bytes[i]);
            return;
        }
    cudaEvent_t *evs[] = {&w->ready, &w->computed[0], &w->computed[1], &w->received[0],
                          &w->received[1]};
    for (int i = 0; i < 5; i++)
        if (fp_dist_cuda_failed(m, r, "cudaEventCreateWithFlags",
                                cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming)))
            return;
}

static void work_free(fp_dist_nccl *m, forward_work *w) {
    void *bufs[] = {w->kv[0][0], w->kv[0][1], w->kv[1][0], w->kv[1][1],
                    w->o_part,   w->lse_part, w->acc_o,    w->acc_lse};
    for (int i = 0; i < 8; i++)
        if (bufs[i]) cudaFreeAsync(bufs[i], m->main);
    cudaEvent_t evs[] = {w->ready, w->computed[0], w->computed[1], w->received[0], w->received[1]};
    for (int i = 0; i < 5; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
}

/* One rectangle's attention on the block (k, v), queued on the main stream with its merge. */
static void rect_forward(fp_dist_nccl *m, fp_dist_record *r, flashport_context *ctx,
                         const flashport_dist_desc *d, const fp_dist_rect *s, const char *q,
                         const char *k, const char *v, forward_work *w) {
    flashport_attention_desc ad;
    fp_dist_step_desc(&ad, d, s);
    size_t es = flashport_dtype_size(d->dtype);
    size_t q_bytes = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim) * es;
    size_t kv_bytes = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim) * es;
    size_t q_off = (size_t)fp_dist_row_offset(d, d->heads_q, 0, 0, s->q_off) * es;
    size_t kv_off = (size_t)fp_dist_row_offset(d, d->heads_kv, 0, 0, s->kv_off) * es;
    size_t lse_bytes = (size_t)(d->batch * d->heads_q * s->q_len) * sizeof(float);
    flashport_attention_args a = FLASHPORT_ATTENTION_ARGS_INIT;
    flashport_buffer *b[5] = {
        fp_dist_wrap(r, ctx, q, q_off, q_bytes), fp_dist_wrap(r, ctx, k, kv_off, kv_bytes),
        fp_dist_wrap(r, ctx, v, kv_off, kv_bytes), fp_dist_wrap(r, ctx, w->o_part, q_off, q_bytes),
        fp_dist_wrap(r, ctx, w->lse_part, 0, lse_bytes)};
    if (b[0] && b[1] && b[2] && b[3] && b[4]) {
        a.q = b[0], a.k = b[1], a.v = b[2], a.o = b[3], a.lse = b[4];
        flashport_status st = flashport_attention_run(ctx, &ad, &a);
        if (st != FLASHPORT_OK)
            fp_dist_record_fail(r, st, "ring step: %s", flashport_last_error());
        else
            fp_dist_cuda_failed(m, r, "the LSE merge",
                                fp_dist_dev_merge_rows(fp_dist_dev_shape_of(d, d->heads_q),
                                                       s->q_off, s->q_len, w->o_part, w->lse_part,
                                                       w->acc_o, w->acc_lse, m->main));
    }
    for (int i = 0; i < 5; i++) flashport_buffer_free(b[i]);
}

flashport_status flashport_dist_attention_nccl(ncclComm_t comm, cudaStream_t stream,
                                               flashport_context *ctx, const flashport_dist_desc *d,
                                               const void *q, const void *k, const void *v, void *o,
                                               float *lse, flashport_dist_stats *stats) {
    static const char *where = "flashport_dist_attention_nccl";
    double t0 = fp_dist_now_ms();
    fp_dist_nccl m;
    flashport_status st = fp_dist_nccl_open(&m, comm, stream, stats != NULL, where);
    if (st != FLASHPORT_OK) return st;
    fp_dist_record rec;
    fp_dist_record_init(&rec, d);
    const void *bufs[] = {q, k, v, o};
    const char *names[] = {"q", "k", "v", "o"};
    fp_dist_check_buffers(&rec, 4, bufs, names);
    fp_dist_nccl_check_context(&rec, ctx);
    fp_dist_check(&rec, d, ctx, m.rank, m.ranks, 0);
    forward_work w;
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
    size_t kv_bytes = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim) *
                      flashport_dtype_size(d->dtype);
    int64_t q_count = d->batch * d->heads_q * d->seq_local * d->head_dim;
    int64_t rows = d->batch * d->heads_q * d->seq_local;
    fp_dist_cuda_failed(&m, &rec, "fill", fp_dist_dev_fill(w.acc_o, 0.0f, q_count, m.main));
    fp_dist_cuda_failed(&m, &rec, "fill", fp_dist_dev_fill(w.acc_lse, -INFINITY, rows, m.main));
    fp_dist_cuda_failed(&m, &rec, "cudaEventRecord", cudaEventRecord(w.ready, m.main));
    const char *cur[2] = {k, v};
    for (int step = 0; step < S && !m.broken; step++) {
        int src = (m.rank - step + P) % P;
        char **next = w.kv[step % 2];
        if (step + 1 < S) {
            /* the slot received into was read by the previous step's attention */
            cudaEvent_t after = step == 0 ? w.ready : w.computed[(step - 1) % 2];
            const void *send[2] = {cur[0], cur[1]};
            void *recv[2] = {next[0], next[1]};
            fp_dist_nccl_shift(&m, &rec, 2, send, recv, kv_bytes, 1, after, w.received[step % 2]);
        }
        fp_dist_step s = fp_dist_step_plan(d, m.rank, P, src);
        skipped += s.count == 0;
        for (int i = 0; i < s.count && rec.status == FLASHPORT_OK; i++)
            rect_forward(&m, &rec, ctx, d, &s.rect[i], q, cur[0], cur[1], &w);
        fp_dist_cuda_failed(&m, &rec, "cudaEventRecord",
                            cudaEventRecord(w.computed[step % 2], m.main));
        if (step + 1 < S) {
            fp_dist_nccl_wait(&m, &rec, w.received[step % 2]);
            cur[0] = next[0];
            cur[1] = next[1];
        }
    }

    /* The sinks join each row's denominator once, not once per step. */
    if (d->sinks && rec.status == FLASHPORT_OK)
        fp_dist_cuda_failed(&m, &rec, "the sinks' merge",
                            fp_dist_dev_merge_sinks(fp_dist_dev_shape_of(d, d->heads_q), d->sinks,
                                                    w.acc_o, w.acc_lse, m.main));
    double wait_ms = fp_dist_nccl_wait_ms(&m);
    a0 = fp_dist_now_ms();
    st = fp_dist_nccl_agree(&m, &rec, where);
    agree_ms += fp_dist_now_ms() - a0;
    if (st == FLASHPORT_OK) {
        cudaError_t e = fp_dist_dev_store_all(d->dtype, w.acc_o, o, q_count, m.main);
        if (e == cudaSuccess && lse)
            e = cudaMemcpyAsync(lse, w.acc_lse, (size_t)rows * sizeof(float),
                                cudaMemcpyDeviceToDevice, m.main);
        if (e != cudaSuccess)
            st = fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "writing the output: %s",
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
