/*
 * flashport-dist: context-parallel (ring) attention over the caller's communicator.
 *
 * The sequence is split across the P ranks of a communicator; each rank passes its shard of Q,
 * K and V (seq_local = N / P rows of every batch and head). K/V blocks travel around the ring
 * (rank r sends to r + 1 and receives from r - 1), the next transfer runs while the current
 * block's attention is computed, and each step's partial output is merged into the running
 * one by its log-sum-exp. The backward pass runs the same ring: dK and dV travel with their
 * K/V block and return to the rank that owns it; dQ stays where Q is.
 *
 * Masks are on global positions: causal and sliding windows (a step computes only the
 * rectangles of its block that some local query sees, and skips a block that none sees),
 * softcap on every step, and sinks once per row in the final merge. ALiBi, an additive bias,
 * varlen and paged K/V are declined (FLASHPORT_ERROR_UNSUPPORTED, naming the feature).
 *
 * This is a separate library (libflashport-dist) over the public flashport API: the core has no
 * dependency on MPI or NCCL. Include <mpi.h> (and, for the GPU calls, <nccl.h>) before this
 * header to declare the calls that take their communicators; the NCCL calls exist in builds
 * where nccl.h and libnccl were found (flashport_dist_has_nccl).
 *
 * Every call is collective: every rank of the communicator makes it with the same descriptor
 * (only the buffers differ). Inputs are checked on every rank and the checks are shared before
 * any transfer starts, so bad input on one rank (mismatched shard sizes, P not dividing N, a
 * NULL buffer, a problem the backend declines) returns the same status on every rank, each
 * with a message naming the rank and the cause, and no output is written. The library never
 * aborts; a failed transfer is reported as FLASHPORT_ERROR_DEVICE naming the MPI or NCCL call.
 */
#ifndef FLASHPORT_DIST_H
#define FLASHPORT_DIST_H

#include "flashport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which rows of the sequence rank r holds (n = seq_local rows, P ranks). */
typedef enum flashport_dist_sharding {
    /* rows r*n .. (r+1)*n - 1 */
    FLASHPORT_DIST_CONTIGUOUS = 0,
    /* load-balanced for causal attention: the sequence in 2P chunks of n/2 rows, rank r holding
     * chunk r followed by chunk 2P-1-r (n must be even), so that every rank computes the same
     * number of visible (query, key) pairs */
    FLASHPORT_DIST_ZIGZAG = 1
} flashport_dist_sharding;

typedef struct flashport_dist_desc {
    size_t struct_size;      /* sizeof(flashport_dist_desc) (flashport_dist_desc_init sets it) */
    flashport_dtype dtype;   /* f32, f16 or bf16: Q, K, V, O and the gradients */
    flashport_layout layout; /* of every shard, contiguous: [B, H, n, d] or [B, n, H, d] */
    int64_t batch;
    int64_t heads_q, heads_kv; /* heads_q a multiple of heads_kv (GQA, MQA when 1) */
    int64_t head_dim;
    int64_t seq_local; /* n: rows this rank holds (the same on every rank) */
    int64_t seq_total; /* N = P * n */
    float scale;       /* 0: 1/sqrt(head_dim) */

    /* Masks and score modifiers, as in flashport_attention_desc, on global positions 0 .. N-1
     * (queries and keys are the same sequence, so the diagonal is j = i). */
    int causal;           /* 1: window_right = 0 (window_right must then be -1 or 0) */
    int64_t window_left;  /* -1: unbounded; >= 0: key j visible to query i when j >= i - left */
    int64_t window_right; /* -1: unbounded; >= 0: ... and j <= i + right */
    float softcap;        /* 0: off; > 0: s = softcap * tanh(s / softcap) */
    /* NULL: no sinks; else f32 [heads_q] logits that join every row's softmax denominator once,
     * in the forward call's memory (host for MPI, ctx's device for NCCL), the same values on
     * every rank. The backward call needs only the forward's LSE, which includes the sinks, and
     * ignores this field. */
    const float *sinks;
    /* Not taken by the ring: any value but the default declines with
     * FLASHPORT_ERROR_UNSUPPORTED, naming the feature. */
    flashport_alibi alibi;         /* ALiBi */
    int bias;                      /* 1: an additive bias */
    int q_varlen;                  /* 1: packed variable-length sequences */
    flashport_kv_layout kv_layout; /* packed (varlen) or paged K/V */

    flashport_dist_sharding sharding;
    const char *kernel; /* kernel variant to force on every step; NULL: the planner */
} flashport_dist_desc;

/* Fills every field: the sizes, contiguous sharding, scale 0, no mask (window -1, -1), no score
 * modifiers, dense K/V, no kernel. */
FLASHPORT_API void flashport_dist_desc_init(flashport_dist_desc *d, flashport_dtype dtype,
                                            int64_t batch, int64_t heads_q, int64_t heads_kv,
                                            int64_t seq_local, int64_t seq_total, int64_t head_dim,
                                            flashport_layout layout);

/* Global row (0 .. N-1) of local row i (0 .. n-1) of rank `rank` of `ranks`, or -1 when out of
 * range: what a caller needs to cut its shards. */
FLASHPORT_API int64_t flashport_dist_global_row(const flashport_dist_desc *d, int rank, int ranks,
                                                int64_t i);

/* Where this rank's time went in the last call (wall clock, milliseconds). */
typedef struct flashport_dist_stats {
    double total_ms;   /* the whole call, checks included */
    double compute_ms; /* attention calls and merges */
    double wait_ms;    /* blocked on a transfer that had not finished */
    double agree_ms;   /* the ranks' two status exchanges, waiting for the slowest rank included */
    int steps;         /* ring steps run: P, or fewer when no rank's query sees a key in the
                        * last ones (a causal window reaching back a few shards) */
    int steps_skipped; /* steps whose block is fully masked for every local query */
} flashport_dist_stats;

/* Message of the last failed flashport_dist call on this thread ("" when none). */
FLASHPORT_API const char *flashport_dist_last_error(void);

/* 1 when this build has the NCCL calls. */
FLASHPORT_API int flashport_dist_has_nccl(void);

#if defined(MPI_VERSION)
/* Forward pass on host arrays, over MPI: ctx is a CPU context (reference or cpu_simd) of this
 * rank. q [n rows, heads_q], k and v [n rows, heads_kv], o like q, by d->layout; lse may be NULL,
 * else it receives float32 [B, heads_q, n], the LSE over the whole sequence. stats may be NULL. */
FLASHPORT_API flashport_status flashport_dist_attention_mpi(MPI_Comm comm, flashport_context *ctx,
                                                            const flashport_dist_desc *d,
                                                            const void *q, const void *k,
                                                            const void *v, void *o, float *lse,
                                                            flashport_dist_stats *stats);

/* Backward pass on host arrays, over MPI: from this rank's q, k, v, the forward's o and lse
 * (required), and d_o, writes d_q, d_k and d_v of this rank's rows (the gradient of
 * sum(dO * O) over the whole sequence; d_k and d_v sum every rank's queries). */
FLASHPORT_API flashport_status flashport_dist_attention_backward_mpi(
    MPI_Comm comm, flashport_context *ctx, const flashport_dist_desc *d, const void *q,
    const void *k, const void *v, const void *o, const float *lse, const void *d_o, void *d_q,
    void *d_k, void *d_v, flashport_dist_stats *stats);
#endif

#if defined(NCCL_MAJOR)
/* Forward pass on device arrays of one GPU per rank, over NCCL: ctx is a cuda context on
 * `stream` (flashport_context_create_on_queue("cuda", stream, ...)), where the attention and
 * the merges run; the transfers run on a stream of the call's own, ordered by events, each next
 * block's while the current one is attended to. Buffers as in the MPI call, device pointers of
 * ctx's device, ordered after the work queued on `stream`. The ranks share their checks before
 * the ring and their status after it (an all-gather on `stream`, waited for), so the call
 * returns once the ring has run, with the output's conversion queued on `stream`. stats may be
 * NULL; when given, the call waits for the stream, and wait_ms is the time `stream` stalled on
 * a transfer (compute_ms the rest of the call but the status exchanges). */
FLASHPORT_API flashport_status flashport_dist_attention_nccl(
    ncclComm_t comm, cudaStream_t stream, flashport_context *ctx, const flashport_dist_desc *d,
    const void *q, const void *k, const void *v, void *o, float *lse, flashport_dist_stats *stats);

/* Backward pass on device arrays, over NCCL: as flashport_dist_attention_backward_mpi, with the
 * streams of flashport_dist_attention_nccl. */
FLASHPORT_API flashport_status flashport_dist_attention_backward_nccl(
    ncclComm_t comm, cudaStream_t stream, flashport_context *ctx, const flashport_dist_desc *d,
    const void *q, const void *k, const void *v, const void *o, const float *lse, const void *d_o,
    void *d_q, void *d_k, void *d_v, flashport_dist_stats *stats);
#endif

#ifdef __cplusplus
}
#endif
#endif /* FLASHPORT_DIST_H */
