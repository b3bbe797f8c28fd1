/* The MPI transport of the host ring: a private duplicate of the caller's communicator (its
 * errors returned, not fatal), the agreement on a status, and the neighbour exchanges. */
#ifndef FP_DIST_MPI_RING_H
#define FP_DIST_MPI_RING_H

#include <mpi.h>

#include "dist_common.h"

typedef struct fp_dist_mpi {
    MPI_Comm comm;
    int rank, ranks;
    MPI_Datatype element; /* one element of the shards' dtype */
    MPI_Datatype f32;
    double wait_ms;
    int broken; /* a transfer failed: no further ones are posted */
} fp_dist_mpi;

flashport_status fp_dist_mpi_open(fp_dist_mpi *m, MPI_Comm comm, const char *where);
void fp_dist_mpi_close(fp_dist_mpi *m);
/* Shares every rank's record; the status is the same on every rank (fp_dist_settle). */
flashport_status fp_dist_mpi_agree(fp_dist_mpi *m, const fp_dist_record *mine, const char *where);
/* Posts the send of count (<= INT_MAX, checked up front) items of type to rank + dist and the
 * receive from rank - dist, modulo the ranks (req[0], req[1]); the failure goes to r. */
void fp_dist_mpi_shift(fp_dist_mpi *m, fp_dist_record *r, const void *send, void *recv,
                       int64_t count, MPI_Datatype type, int tag, int dist, MPI_Request req[2]);
/* Waits for n requests, adding the time blocked to m->wait_ms. */
void fp_dist_mpi_wait(fp_dist_mpi *m, fp_dist_record *r, MPI_Request *req, int n);

/* fp_dist_check, the MPI count limit on a block, and m->element for d's dtype. */
void fp_dist_mpi_check(fp_dist_mpi *m, fp_dist_record *r, const flashport_dist_desc *d,
                       flashport_context *ctx, int backward);
#endif /* FP_DIST_MPI_RING_H */
