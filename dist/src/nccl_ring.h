/* The NCCL transport of the device ring: the caller's stream runs the attention and the merges,
 * a stream of the call's own runs the transfers, and events order the two. */
#ifndef FP_DIST_NCCL_RING_H
#define FP_DIST_NCCL_RING_H

#include <cuda_runtime.h>
#include <nccl.h>

#include "device_accum.h"

typedef struct fp_dist_nccl {
    ncclComm_t comm;
    cudaStream_t main; /* the caller's stream (ctx's) */
    cudaStream_t comm_stream;
    int rank, ranks;
    int caller_device; /* restored on close */
    int broken;        /* a transfer or the runtime failed: no further work is queued */
    /* Stalls of the main stream on a transfer, between event pairs, when stats are asked for. */
    cudaEvent_t *marks;
    int marks_used, marks_cap;
} fp_dist_nccl;

flashport_status fp_dist_nccl_open(fp_dist_nccl *m, ncclComm_t comm, cudaStream_t stream, int timed,
                                   const char *where);
void fp_dist_nccl_close(fp_dist_nccl *m);
/* Checks that ctx is a CUDA context; records the failure in r. */
void fp_dist_nccl_check_context(fp_dist_record *r, flashport_context *ctx);
/* Shares every rank's record over NCCL and waits for it; the same status on every rank. */
flashport_status fp_dist_nccl_agree(fp_dist_nccl *m, const fp_dist_record *mine, const char *where);
/* Queues on the transfer stream, after `after` (an event of the main stream): the sends of n
 * buffers of `bytes` each to rank + dist and the receives from rank - dist (modulo the ranks),
 * then records `done`. */
void fp_dist_nccl_shift(fp_dist_nccl *m, fp_dist_record *r, int n, const void *const *send,
                        void *const *recv, size_t bytes, int dist, cudaEvent_t after,
                        cudaEvent_t done);
/* The main stream waits for `done` (a stall timed when stats are asked for). */
void fp_dist_nccl_wait(fp_dist_nccl *m, fp_dist_record *r, cudaEvent_t done);
/* Records the failure of a CUDA call (a no-op for cudaSuccess); returns 1 when it failed. */
int fp_dist_cuda_failed(fp_dist_nccl *m, fp_dist_record *r, const char *call, cudaError_t e);
/* Milliseconds the main stream spent stalled; with stats asked for, waits for the stream. */
double fp_dist_nccl_wait_ms(fp_dist_nccl *m);

/* Wraps device memory at ptr + offset as a buffer of ctx (NULL on failure, recorded in r). */
flashport_buffer *fp_dist_wrap(fp_dist_record *r, flashport_context *ctx, const void *ptr,
                               size_t offset, size_t bytes);

#endif /* FP_DIST_NCCL_RING_H */
