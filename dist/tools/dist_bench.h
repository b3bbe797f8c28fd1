/* flashport-dist-bench's parts: the options, and a runner per transport that owns its buffers
 * and times one iteration (forward, and backward when asked). */
#ifndef DIST_BENCH_H
#define DIST_BENCH_H

#include <mpi.h>
#include <stddef.h>

#include "flashport_dist.h"

typedef struct bench_options {
    const char *backend;
    int nccl;
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq, dim;
    int64_t window_left, window_right; /* -1: unbounded */
    int causal, zigzag, backward, warmup, iters, json;
} bench_options;

typedef struct bench_runner {
    void *state;
    /* one iteration; f and b receive the forward's and the backward's stats */
    flashport_status (*iter)(void *state, flashport_dist_stats *f, flashport_dist_stats *b);
    void (*close)(void *state);
} bench_runner;

/* Fills n bytes with small random values of any of the dtypes: every 16-bit pattern below
 * 0x3800 is a small number in f16 and bf16, and f32 takes the same bits as its halves. */
void bench_fill(void *p, size_t n, unsigned seed);

/* 0 on success; on failure the message is on stderr (this rank's). */
int bench_host_open(const bench_options *o, const flashport_dist_desc *d, bench_runner *r);
#ifdef FP_DIST_BENCH_NCCL
/* NCCL bootstrapped over MPI_COMM_WORLD (rank 0's unique id broadcast); the GPU is the rank's
 * local index (OMPI_COMM_WORLD_LOCAL_RANK or LOCAL_RANK, else rank modulo the GPUs). */
int bench_nccl_open(const bench_options *o, const flashport_dist_desc *d, bench_runner *r);
#endif

#endif /* DIST_BENCH_H */
