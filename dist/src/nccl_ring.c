/* NCCL transport of the device ring. */
#include "nccl_ring.h"

#include <stdlib.h>
#include <string.h>

static void nccl_fail(fp_dist_nccl *m, fp_dist_record *r, const char *call, ncclResult_t e) {
    m->broken = 1;
    fp_dist_record_fail(r, FLASHPORT_ERROR_DEVICE, "%s failed: %s (%s)", call,
                        ncclGetErrorString(e), ncclGetLastError(m->comm));
}

int fp_dist_cuda_failed(fp_dist_nccl *m, fp_dist_record *r, const char *call, cudaError_t e) {
    if (e == cudaSuccess) return 0;
    m->broken = 1;
    fp_dist_record_fail(r, FLASHPORT_ERROR_DEVICE, "%s failed: %s", call, cudaGetErrorString(e));
    return 1;
}

flashport_status fp_dist_nccl_open(fp_dist_nccl *m, ncclComm_t comm, cudaStream_t stream, int timed,
                                   const char *where) {
    memset(m, 0, sizeof *m);
    if (!comm)
        return fp_dist_fail(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "the communicator is NULL");
    m->comm = comm;
    m->main = stream;
    ncclResult_t e = ncclCommUserRank(comm, &m->rank);
    if (e == ncclSuccess) e = ncclCommCount(comm, &m->ranks);
    if (e != ncclSuccess)
        return fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "the communicator: %s",
                            ncclGetErrorString(e));
    /* Allocations and the transfer stream belong to the stream's device; the caller's current
     * device is restored on close. */
    int dev = 0;
    cudaError_t c = cudaStreamGetDevice(stream, &dev);
    if (c == cudaSuccess) c = cudaGetDevice(&m->caller_device);
    if (c == cudaSuccess) c = cudaSetDevice(dev);
    if (c != cudaSuccess)
        return fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "the stream's device: %s",
                            cudaGetErrorString(c));
    c = cudaStreamCreateWithFlags(&m->comm_stream, cudaStreamNonBlocking);
    if (c != cudaSuccess) {
        cudaSetDevice(m->caller_device);
        return fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "cudaStreamCreateWithFlags failed: %s",
                            cudaGetErrorString(c));
    }
    if (timed) {
        /* a pair per wait: at most two waits per step, and the final one */
        m->marks_cap = 2 * (2 * m->ranks + 1);
        m->marks = calloc((size_t)m->marks_cap, sizeof *m->marks);
        if (!m->marks) m->marks_cap = 0;
    }
    return FLASHPORT_OK;
}

void fp_dist_nccl_close(fp_dist_nccl *m) {
    for (int i = 0; i < m->marks_used; i++) cudaEventDestroy(m->marks[i]);
    free(m->marks);
    /* released by the runtime once the queued transfers are done */
    cudaStreamDestroy(m->comm_stream);
    cudaSetDevice(m->caller_device);
}

void fp_dist_nccl_check_context(fp_dist_record *r, flashport_context *ctx) {
    const char *b = ctx ? flashport_context_backend(ctx) : NULL;
    if (b && strcmp(b, "cuda") != 0)
        fp_dist_record_fail(r, FLASHPORT_ERROR_INVALID_ARGUMENT,
                            "the context is on backend %s; the NCCL ring takes a cuda context "
                            "on the call's stream (flashport_context_create_on_queue)",
                            b);
}

flashport_status fp_dist_nccl_agree(fp_dist_nccl *m, const fp_dist_record *mine,
                                    const char *where) {
    size_t bytes = sizeof *mine;
    fp_dist_record *all = malloc(bytes * (size_t)m->ranks);
    char *dev = NULL;
    cudaError_t c = cudaMallocAsync((void **)&dev, bytes * (size_t)(m->ranks + 1), m->main);
    if (c == cudaSuccess) c = cudaMemcpyAsync(dev, mine, bytes, cudaMemcpyHostToDevice, m->main);
    /* A rank that cannot take part leaves the others waiting in the all-gather: only a broken
     * runtime gets here, and the transfer checks report it. */
    ncclResult_t e = c == cudaSuccess
                         ? ncclAllGather(dev, dev + bytes, bytes, ncclChar, m->comm, m->main)
                         : ncclSuccess;
    if (c == cudaSuccess && e == ncclSuccess && all)
        c = cudaMemcpyAsync(all, dev + bytes, bytes * (size_t)m->ranks, cudaMemcpyDeviceToHost,
                            m->main);
    if (dev) cudaFreeAsync(dev, m->main);
    cudaError_t s = cudaStreamSynchronize(m->main);
    flashport_status st;
    if (c != cudaSuccess || s != cudaSuccess)
        st = fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "sharing the checks: %s",
                          cudaGetErrorString(c != cudaSuccess ? c : s));
    else if (e != ncclSuccess)
        st = fp_dist_fail(FLASHPORT_ERROR_DEVICE, where, "ncclAllGather failed: %s",
                          ncclGetErrorString(e));
    else if (!all)
        st = fp_dist_fail(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "no memory for %d records",
                          m->ranks);
    else
        st = fp_dist_settle(all, m->ranks, m->rank, where);
    free(all);
    return st;
}

void fp_dist_nccl_shift(fp_dist_nccl *m, fp_dist_record *r, int n, const void *const *send,
                        void *const *recv, size_t bytes, int dist, cudaEvent_t after,
                        cudaEvent_t done) {
    if (m->broken) return;
    if (fp_dist_cuda_failed(m, r, "cudaStreamWaitEvent",
                            cudaStreamWaitEvent(m->comm_stream, after, 0)))
        return;
    int d = ((dist % m->ranks) + m->ranks) % m->ranks;
    if (d == 0) {
        /* the ring of one rank, or a shift of whole turns: the buffers come back to this rank */
        for (int i = 0; i < n; i++)
            if (fp_dist_cuda_failed(m, r, "cudaMemcpyAsync",
                                    cudaMemcpyAsync(recv[i], send[i], bytes,
                                                    cudaMemcpyDeviceToDevice, m->comm_stream)))
                return;
    } else {
        int next = (m->rank + d) % m->ranks, prev = (m->rank + m->ranks - d) % m->ranks;
        ncclResult_t e = ncclGroupStart();
        for (int i = 0; i < n && e == ncclSuccess; i++) {
            e = ncclSend(send[i], bytes, ncclChar, next, m->comm, m->comm_stream);
            if (e == ncclSuccess)
                e = ncclRecv(recv[i], bytes, ncclChar, prev, m->comm, m->comm_stream);
        }
        ncclResult_t end = ncclGroupEnd();
        if (e == ncclSuccess) e = end;
        if (e != ncclSuccess) return nccl_fail(m, r, "ncclSend/ncclRecv", e);
    }
    fp_dist_cuda_failed(m, r, "cudaEventRecord", cudaEventRecord(done, m->comm_stream));
}

static cudaEvent_t mark(fp_dist_nccl *m) {
    if (m->marks_used >= m->marks_cap) return NULL;
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) return NULL;
    m->marks[m->marks_used++] = e;
    cudaEventRecord(e, m->main);
    return e;
}

void fp_dist_nccl_wait(fp_dist_nccl *m, fp_dist_record *r, cudaEvent_t done) {
    if (m->broken) return;
    cudaEvent_t before = mark(m);
    if (fp_dist_cuda_failed(m, r, "cudaStreamWaitEvent", cudaStreamWaitEvent(m->main, done, 0)))
        return;
    if (before && !mark(m)) {
        /* keep the marks in pairs */
        cudaEventDestroy(m->marks[--m->marks_used]);
    }
}

double fp_dist_nccl_wait_ms(fp_dist_nccl *m) {
    double total = 0;
    /* with stats, the ring's work is waited for here, so that the final status exchange
     * measures the exchange */
    if (m->marks_cap && cudaStreamSynchronize(m->main) != cudaSuccess) return 0;
    for (int i = 0; i + 1 < m->marks_used; i += 2) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, m->marks[i], m->marks[i + 1]) == cudaSuccess) total += ms;
    }
    return total;
}

flashport_buffer *fp_dist_wrap(fp_dist_record *r, flashport_context *ctx, const void *ptr,
                               size_t offset, size_t bytes) {
    flashport_buffer *b = NULL;
    flashport_status st = flashport_buffer_wrap(ctx, (char *)ptr + offset, bytes - offset, &b);
    if (st != FLASHPORT_OK) {
        fp_dist_record_fail(r, st, "wrapping a device array: %s", flashport_last_error());
        return NULL;
    }
    return b;
}
