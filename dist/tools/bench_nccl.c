/* flashport-dist-bench over NCCL on device arrays, bootstrapped over MPI. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist_bench.h"

typedef struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    flashport_context *ctx;
    const flashport_dist_desc *d;
    int backward;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
    float *lse;
} nccl_state;

static flashport_status nccl_iter(void *state, flashport_dist_stats *f, flashport_dist_stats *b) {
    nccl_state *n = state;
    flashport_status st = flashport_dist_attention_nccl(n->comm, n->stream, n->ctx, n->d, n->q,
                                                        n->k, n->v, n->o, n->lse, f);
    if (st == FLASHPORT_OK && n->backward)
        st = flashport_dist_attention_backward_nccl(n->comm, n->stream, n->ctx, n->d, n->q, n->k,
                                                    n->v, n->o, n->lse, n->d_o, n->dq, n->dk, n->dv,
                                                    b);
    cudaStreamSynchronize(n->stream);
    return st;
}

static void nccl_close(void *state) {
    nccl_state *n = state;
    void *p[] = {n->q, n->k, n->v, n->o, n->d_o, n->dq, n->dk, n->dv, n->lse};
    for (int i = 0; i < 9; i++) cudaFree(p[i]);
    flashport_context_destroy(n->ctx);
    if (n->comm) ncclCommDestroy(n->comm);
    cudaStreamDestroy(n->stream);
    free(n);
}

static int local_device(int rank) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "MPI_LOCALRANKID"};
    int count = 1;
    cudaGetDeviceCount(&count);
    for (int i = 0; i < 3; i++)
        if (getenv(vars[i])) return atoi(getenv(vars[i])) % (count > 0 ? count : 1);
    return rank % (count > 0 ? count : 1);
}

int bench_nccl_open(const bench_options *o, const flashport_dist_desc *d, bench_runner *r) {
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    nccl_state *n = calloc(1, sizeof *n);
    if (!n) return 1;
    r->state = n;
    r->iter = nccl_iter;
    r->close = nccl_close;
    int dev = local_device(rank);
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    int bad = cudaSetDevice(dev) != cudaSuccess || cudaStreamCreate(&n->stream) != cudaSuccess;
    int any_bad = 1;
    /* every rank must reach ncclCommInitRank, or the others wait in it */
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad) {
        if (bad) fprintf(stderr, "rank %d: no GPU %d\n", rank, dev);
        return 1;
    }
    ncclResult_t e = ncclCommInitRank(&n->comm, ranks, id, rank);
    if (e != ncclSuccess) {
        n->comm = NULL;
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(e));
        return 1;
    }
    char spec[32];
    snprintf(spec, sizeof spec, "cuda:%d", dev);
    if (flashport_context_create_on_queue(spec, n->stream, &n->ctx) != FLASHPORT_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, flashport_last_error());
        return 1;
    }
    n->d = d;
    n->backward = o->backward;
    size_t es = flashport_dtype_size(d->dtype);
    size_t qb = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim) * es;
    size_t kvb = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim) * es;
    size_t lb = (size_t)(d->batch * d->heads_q * d->seq_local) * sizeof(float);
    void **bufs[] = {&n->q, &n->k, &n->v, &n->o, &n->d_o, &n->dq, &n->dk, &n->dv};
    size_t sizes[] = {qb, kvb, kvb, qb, qb, qb, kvb, kvb};
    void *host = malloc(qb > kvb ? qb : kvb);
    if (!host) return 1;
    for (int i = 0; i < 8; i++) {
        if (cudaMalloc(bufs[i], sizes[i]) != cudaSuccess) {
            fprintf(stderr, "rank %d: no device memory for %zu bytes\n", rank, sizes[i]);
            free(host);
            return 1;
        }
        bench_fill(host, sizes[i], (unsigned)(i + 8 * rank));
        cudaMemcpy(*bufs[i], host, sizes[i], cudaMemcpyHostToDevice);
    }
    free(host);
    return cudaMalloc((void **)&n->lse, lb) == cudaSuccess ? 0 : 1;
}
