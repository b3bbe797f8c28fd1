/* MPI transport of the host ring. */
#include "mpi_ring.h"

#include <limits.h>
#include <stdlib.h>

static void mpi_fail(fp_dist_mpi *m, fp_dist_record *r, const char *call, int code) {
    m->broken = 1;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) text[0] = '\0';
    fp_dist_record_fail(r, FLASHPORT_ERROR_DEVICE, "%s failed: %s", call, text);
}

flashport_status fp_dist_mpi_open(fp_dist_mpi *m, MPI_Comm comm, const char *where) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down)
        return fp_dist_fail(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "MPI is not initialized (or already finalized)");
    if (comm == MPI_COMM_NULL)
        return fp_dist_fail(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "the communicator is null");
    /* A private duplicate keeps the ring's messages apart from the caller's, and returns
     * errors instead of aborting the job. */
    int code = MPI_Comm_dup(comm, &m->comm);
    if (code != MPI_SUCCESS)
        return fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "MPI_Comm_dup failed (%d)", code);
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->ranks);
    m->element = MPI_DATATYPE_NULL;
    m->f32 = MPI_FLOAT;
    m->wait_ms = 0;
    m->broken = 0;
    return FLASHPORT_OK;
}

void fp_dist_mpi_close(fp_dist_mpi *m) {
    if (m->element != MPI_DATATYPE_NULL) MPI_Type_free(&m->element);
    MPI_Comm_free(&m->comm);
}

flashport_status fp_dist_mpi_agree(fp_dist_mpi *m, const fp_dist_record *mine, const char *where) {
    fp_dist_record *all = malloc(sizeof *all * (size_t)m->ranks);
    /* Every rank must take part even when its own allocation fails, or the others would wait:
     * it then contributes through a reduction only. */
    int failed = all == NULL, any = 0;
    int code = MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, m->comm);
    if (code != MPI_SUCCESS) {
        free(all);
        return fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "MPI_Allreduce failed (%d)", code);
    }
    if (any) {
        free(all);
        return fp_dist_fail(FLASHPORT_ERROR_OUT_OF_MEMORY, where,
                            "a rank could not allocate the %d ranks' records", m->ranks);
    }
    code =
        MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, m->comm);
    flashport_status st = code != MPI_SUCCESS ? fp_dist_fail(FLASHPORT_ERROR_DEVICE, where,
                                                             "MPI_Allgather failed (%d)", code)
                                              : fp_dist_settle(all, m->ranks, m->rank, where);
    free(all);
    return st;
}

void fp_dist_mpi_shift(fp_dist_mpi *m, fp_dist_record *r, const void *send, void *recv,
                       int64_t count, MPI_Datatype type, int tag, int dist, MPI_Request req[2]) {
    req[0] = req[1] = MPI_REQUEST_NULL;
    if (m->broken) return; /* the ring cannot go on; a failed step alone does not stop it */
    int d = ((dist % m->ranks) + m->ranks) % m->ranks;
    int next = (m->rank + d) % m->ranks, prev = (m->rank + m->ranks - d) % m->ranks;
    int code = MPI_Irecv(recv, (int)count, type, prev, tag, m->comm, &req[1]);
    if (code != MPI_SUCCESS) return mpi_fail(m, r, "MPI_Irecv", code);
    code = MPI_Isend(send, (int)count, type, next, tag, m->comm, &req[0]);
    if (code != MPI_SUCCESS) mpi_fail(m, r, "MPI_Isend", code);
}

void fp_dist_mpi_wait(fp_dist_mpi *m, fp_dist_record *r, MPI_Request *req, int n) {
    double t0 = fp_dist_now_ms();
    int code = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    m->wait_ms += fp_dist_now_ms() - t0;
    if (code != MPI_SUCCESS) mpi_fail(m, r, "MPI_Waitall", code);
}

void fp_dist_mpi_check(fp_dist_mpi *m, fp_dist_record *r, const flashport_dist_desc *d,
                       flashport_context *ctx, int backward) {
    fp_dist_check(r, d, ctx, m->rank, m->ranks, backward);
    if (r->status != FLASHPORT_OK) return;
    int64_t block = d->batch * d->heads_kv * d->seq_local * d->head_dim;
    if (block > INT_MAX) {
        fp_dist_record_fail(r, FLASHPORT_ERROR_SIZE_OVERFLOW,
                            "a K/V block of %lld elements exceeds MPI's int count",
                            (long long)block);
        return;
    }
    int code = MPI_Type_contiguous((int)flashport_dtype_size(d->dtype), MPI_BYTE, &m->element);
    if (code == MPI_SUCCESS) code = MPI_Type_commit(&m->element);
    if (code != MPI_SUCCESS) mpi_fail(m, r, "MPI_Type_commit", code);
}
