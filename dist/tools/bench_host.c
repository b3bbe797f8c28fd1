/* flashport-dist-bench over MPI on host arrays. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_bench.h"

typedef struct host_state {
    flashport_context *ctx;
    const flashport_dist_desc *d;
    int backward;
    char *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
    float *lse;
} host_state;

void bench_fill(void *p, size_t n, unsigned seed) {
    uint32_t s = 12345u + seed;
    for (size_t i = 0; i + 1 < n; i += 2) {
        s = s * 1664525u + 1013904223u;
        uint16_t h = (uint16_t)((s >> 16) % 0x3800u);
        memcpy((char *)p + i, &h, 2);
    }
}

static flashport_status host_iter(void *state, flashport_dist_stats *f, flashport_dist_stats *b) {
    host_state *h = state;
    flashport_status st = flashport_dist_attention_mpi(MPI_COMM_WORLD, h->ctx, h->d, h->q, h->k,
                                                       h->v, h->o, h->lse, f);
    if (st == FLASHPORT_OK && h->backward)
        st = flashport_dist_attention_backward_mpi(MPI_COMM_WORLD, h->ctx, h->d, h->q, h->k, h->v,
                                                   h->o, h->lse, h->d_o, h->dq, h->dk, h->dv, b);
    return st;
}

static void host_close(void *state) {
    host_state *h = state;
    void *p[] = {h->q, h->k, h->v, h->o, h->d_o, h->dq, h->dk, h->dv, h->lse};
    for (int i = 0; i < 9; i++) free(p[i]);
    flashport_context_destroy(h->ctx);
    free(h);
}

int bench_host_open(const bench_options *o, const flashport_dist_desc *d, bench_runner *r) {
    host_state *h = calloc(1, sizeof *h);
    if (!h) return 1;
    if (flashport_context_create(o->backend, &h->ctx) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        free(h);
        return 1;
    }
    h->d = d;
    h->backward = o->backward;
    size_t es = flashport_dtype_size(d->dtype);
    size_t qb = (size_t)(d->batch * d->heads_q * d->seq_local * d->head_dim) * es;
    size_t kvb = (size_t)(d->batch * d->heads_kv * d->seq_local * d->head_dim) * es;
    size_t lb = (size_t)(d->batch * d->heads_q * d->seq_local) * sizeof(float);
    char **bufs[] = {&h->q, &h->k, &h->v, &h->o, &h->d_o, &h->dq, &h->dk, &h->dv};
    size_t sizes[] = {qb, kvb, kvb, qb, qb, qb, kvb, kvb};
    for (int i = 0; i < 8; i++) {
        *bufs[i] = malloc(sizes[i]);
        if (*bufs[i]) bench_fill(*bufs[i], sizes[i], (unsigned)i);
    }
    h->lse = malloc(lb);
    r->state = h;
    r->iter = host_iter;
    r->close = host_close;
    for (int i = 0; i < 8; i++)
        if (!*bufs[i]) return fprintf(stderr, "out of memory\n"), 1;
    return h->lse ? 0 : 1;
}
