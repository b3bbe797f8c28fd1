/* What the MPI and NCCL paths share: the error of the calling thread, the descriptor checks,
 * the per-step attention descriptor, and the record the ranks exchange to agree on a status. */
#ifndef FP_DIST_COMMON_H
#define FP_DIST_COMMON_H

#include <stddef.h>

#include "flashport_dist.h"
#include "step_plan.h"

enum { FP_DIST_MESSAGE_MAX = 400 };

/* Sets the calling thread's flashport_dist error ("<where>: <message>") and returns status. */
flashport_status fp_dist_fail(flashport_status status, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One rank's view of the call, exchanged by every rank before the ring and after it. */
typedef struct fp_dist_record {
    int status;
    int shaped; /* 1: the shape fields below are the rank's descriptor */
    int dtype, layout, causal, sharding, sinks;
    int64_t batch, heads_q, heads_kv, head_dim, seq_local, seq_total;
    int64_t window_left, window_right;
    float softcap;
    char message[FP_DIST_MESSAGE_MAX];
} fp_dist_record;

/* Fills the record's shape from d (d may be NULL) with status OK. */
void fp_dist_record_init(fp_dist_record *r, const flashport_dist_desc *d);
/* Records a failure in r (the first one wins). */
void fp_dist_record_fail(fp_dist_record *r, flashport_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records INVALID_ARGUMENT naming the first NULL among n pointers. */
void fp_dist_check_buffers(fp_dist_record *r, int n, const void *const *ptrs,
                           const char *const *names);

/* Checks d on its own and against a communicator of `ranks` ranks, and that ctx can plan every
 * step shape that rank `rank` meets (backward: the backward pass); failures go to r. */
void fp_dist_check(fp_dist_record *r, const flashport_dist_desc *d, flashport_context *ctx,
                   int rank, int ranks, int backward);

/* Given every rank's record, the status of the call, the same on every rank; sets the error
 * under `where`: a shape that differs between ranks first (FLASHPORT_ERROR_MISMATCH, since a
 * rank's own checks may fail only as a consequence), then the first failing rank's status. */
flashport_status fp_dist_settle(const fp_dist_record *all, int ranks, int rank, const char *where);

/* The flashport descriptor of one rectangle of a step: the local shard's strides, the
 * rectangle's row counts and window, d's score modifiers (sinks off: they join the merge). */
void fp_dist_step_desc(flashport_attention_desc *out, const flashport_dist_desc *d,
                       const fp_dist_rect *r);

/* Element offset of row i of a [B, H, n, d] shard in d->layout (head h, batch b). */
int64_t fp_dist_row_offset(const flashport_dist_desc *d, int64_t heads, int64_t b, int64_t h,
                           int64_t i);

double fp_dist_now_ms(void);

#endif /* FP_DIST_COMMON_H */
