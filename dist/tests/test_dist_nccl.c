/*
 * The NCCL ring in one process, one thread and one GPU per rank (P = the GPUs visible, or the
 * argument): each rank's forward and backward results equal the single-GPU cuda results on the
 * whole sequence (dist_case.h's problems; f32 judged at the tf32 class's tolerance, since the
 * planner may pick a tf32 variant for one shape and not another), with the fully masked steps
 * skipped, the ring cut short where a window ends it, and the sinks in device memory. Where the
 * cuda backend has no backward pass, the ring's backward must decline with
 * FLASHPORT_ERROR_UNSUPPORTED on every rank, and the output says that the backward was not
 * compared; a problem that cuda declines whole, the ring declines on every rank. Bad input gets the
 * same status on every rank. Exit 77 without a GPU or the cuda backend.
 *
 * Usage: test_dist_nccl [P]
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include "dist_case.h"

enum { MAX_RANKS = 16 };

typedef struct rank_job {
    int rank, ranks;
    ncclComm_t comm;
    const tcase *c;
    const case_ref *ref;
    flashport_dist_desc desc; /* the descriptor this rank passes */
    /* out */
    flashport_status status, backward;
    char message[512], backward_message[512];
    double sums[5][2]; /* O, dQ, dK, dV squared errors and references */
    double lse_err;
    /* the forward's steps and skipped steps, and what they must be */
    int steps, skipped, want_steps, want_skipped;
    int touched; /* bad input: an output changed */
} rank_job;

static void *to_device(const void *host, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    if (host)
        cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(p, 0x7f, bytes); /* a pattern that the bad-input checks look for */
    return p;
}

static void *run_rank(void *arg) {
    rank_job *j = arg;
    const tcase *c = j->c;
    cudaSetDevice(j->rank);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    flashport_context *ctx = NULL;
    j->status = flashport_context_create_on_queue("cuda", stream, &ctx);
    if (j->status != FLASHPORT_OK) {
        snprintf(j->message, sizeof j->message, "%s", flashport_last_error());
        return NULL;
    }
    flashport_dist_desc dd = j->desc;
    const flashport_dist_desc *d = &dd;
    flashport_dist_desc shape = case_desc(c, j->ranks); /* the buffers' sizes */
    size_t es = flashport_dtype_size(c->dtype);
    size_t qb = (size_t)(c->batch * c->heads_q * shape.seq_local * c->dim) * es;
    size_t kvb = (size_t)(c->batch * c->heads_kv * shape.seq_local * c->dim) * es;
    size_t lb = (size_t)(c->batch * c->heads_q * shape.seq_local) * sizeof(float);
    void *hq = case_shard(c, &shape, j->rank, j->ranks, c->heads_q, j->ref->q);
    void *hk = case_shard(c, &shape, j->rank, j->ranks, c->heads_kv, j->ref->k);
    void *hv = case_shard(c, &shape, j->rank, j->ranks, c->heads_kv, j->ref->v);
    void *hdo = case_shard(c, &shape, j->rank, j->ranks, c->heads_q, j->ref->d_o);
    void *q = to_device(hq, qb), *k = to_device(hk, kvb), *v = to_device(hv, kvb);
    void *d_o = to_device(hdo, qb), *o = to_device(NULL, qb), *lse = to_device(NULL, lb);
    void *dq = to_device(NULL, qb), *dk = to_device(NULL, kvb), *dv = to_device(NULL, kvb);
    float *sinks = NULL;
    if (c->sinks) dd.sinks = sinks = to_device(j->ref->sinks, sizeof(float) * (size_t)c->heads_q);
    flashport_dist_stats stats = {0};
    j->status = flashport_dist_attention_nccl(j->comm, stream, ctx, d, q, k, v, o, lse, &stats);
    j->steps = stats.steps, j->skipped = stats.steps_skipped;
    case_ring(&shape, j->rank, j->ranks, &j->want_steps, &j->want_skipped);
    if (j->status != FLASHPORT_OK)
        snprintf(j->message, sizeof j->message, "%s", flashport_dist_last_error());
    else
        j->backward = flashport_dist_attention_backward_nccl(j->comm, stream, ctx, d, q, k, v, o,
                                                             lse, d_o, dq, dk, dv, NULL);
    if (j->status == FLASHPORT_OK && j->backward != FLASHPORT_OK)
        snprintf(j->backward_message, sizeof j->backward_message, "%s",
                 flashport_dist_last_error());
    cudaStreamSynchronize(stream);
    void *out[4] = {malloc(qb), malloc(qb), malloc(kvb), malloc(kvb)};
    float *hl = malloc(lb);
    cudaMemcpy(out[0], o, qb, cudaMemcpyDeviceToHost);
    cudaMemcpy(out[1], dq, qb, cudaMemcpyDeviceToHost);
    cudaMemcpy(out[2], dk, kvb, cudaMemcpyDeviceToHost);
    cudaMemcpy(out[3], dv, kvb, cudaMemcpyDeviceToHost);
    cudaMemcpy(hl, lse, lb, cudaMemcpyDeviceToHost);
    if (j->status == FLASHPORT_OK) {
        const void *refs[4] = {j->ref->o, j->ref->d_q, j->ref->d_k, j->ref->d_v};
        const int64_t heads[4] = {c->heads_q, c->heads_q, c->heads_kv, c->heads_kv};
        for (int t = 0; t < (j->backward == FLASHPORT_OK ? 4 : 1); t++)
            case_l2_sums(c, &shape, j->rank, j->ranks, heads[t], out[t], refs[t], j->sums[t]);
        j->lse_err = case_lse_err(c, &shape, j->rank, j->ranks, hl, j->ref->lse);
    } else {
        size_t sizes[4] = {qb, qb, kvb, kvb};
        for (int t = 0; t < 4; t++)
            for (size_t b = 0; b < sizes[t]; b++)
                j->touched |= ((unsigned char *)out[t])[b] != 0x7f;
    }
    void *hp[] = {hq, hk, hv, hdo, out[0], out[1], out[2], out[3], hl};
    for (int i = 0; i < 9; i++) free(hp[i]);
    void *dp[] = {q, k, v, d_o, o, lse, dq, dk, dv, sinks};
    for (int i = 0; i < 10; i++) cudaFree(dp[i]);
    flashport_context_destroy(ctx);
    cudaStreamDestroy(stream);
    return NULL;
}

/* Runs every rank of one problem; `tweak` changes rank r's descriptor (bad input) or is NULL. */
static void run_ranks(ncclComm_t *comms, int ranks, const tcase *c, const case_ref *ref,
                      void (*tweak)(flashport_dist_desc *, int), rank_job *jobs) {
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < ranks; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r] = (rank_job){.rank = r, .ranks = ranks, .comm = comms[r], .c = c, .ref = ref};
        jobs[r].desc = case_desc(c, ranks);
        if (tweak) tweak(&jobs[r].desc, r);
        pthread_create(&th[r], NULL, run_rank, &jobs[r]);
    }
    for (int r = 0; r < ranks; r++) pthread_join(th[r], NULL);
}

static void shorter_on_rank1(flashport_dist_desc *d, int r) {
    if (r == 1) d->seq_local /= 2;
}
static void indivisible(flashport_dist_desc *d, int r) {
    (void)r;
    d->seq_total += 1;
}

int main(int argc, char **argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int ranks = argc > 1 ? atoi(argv[1]) : devices;
    if (ranks < 1 || ranks > devices || ranks > MAX_RANKS) {
        printf("SKIP: %d rank(s) asked for, %d GPU(s) here\n", ranks, devices);
        return 77;
    }
    flashport_context *ctx = NULL;
    if (flashport_context_create("cuda:0", &ctx) != FLASHPORT_OK) {
        printf("SKIP: cuda backend: %s\n", flashport_last_error());
        return 77;
    }
    ncclComm_t comms[MAX_RANKS];
    int devs[MAX_RANKS];
    for (int r = 0; r < ranks; r++) devs[r] = r;
    if (ncclCommInitAll(comms, ranks, devs) != ncclSuccess) {
        fprintf(stderr, "FAIL: ncclCommInitAll\n");
        return 1;
    }
    int failures = 0;
    rank_job jobs[MAX_RANKS];
    for (int i = 0; i < DIST_CASES; i++) {
        const tcase *c = &dist_cases[i];
        char name[160];
        case_name(c, ranks, name, sizeof name);
        case_ref ref;
        flashport_status fwd = case_reference(ctx, c, &ref);
        if (fwd != FLASHPORT_OK && fwd != FLASHPORT_ERROR_UNSUPPORTED) {
            fprintf(stderr, "FAIL %s: single-GPU run: %s\n", name, flashport_last_error());
            failures++;
            case_ref_free(&ref);
            continue;
        }
        run_ranks(comms, ranks, c, &ref, NULL, jobs);
        if (fwd == FLASHPORT_ERROR_UNSUPPORTED) {
            /* a problem cuda declines whole, the ring declines on every rank */
            int declined = 1;
            for (int r = 0; r < ranks; r++)
                declined = declined && jobs[r].status == FLASHPORT_ERROR_UNSUPPORTED;
            printf("%s: %s (declined as cuda declines it: %s)\n", declined ? "ok" : "FAILED", name,
                   jobs[0].message);
            failures += !declined;
            case_ref_free(&ref);
            continue;
        }
        double sums[4][2] = {{0}}, lse_err = 0;
        int ok = 1;
        /* the ring's backward runs where the backend's does, and declines where it declines */
        flashport_status want_bwd =
            ref.backward == FLASHPORT_OK ? FLASHPORT_OK : FLASHPORT_ERROR_UNSUPPORTED;
        for (int r = 0; r < ranks; r++) {
            if (jobs[r].status != FLASHPORT_OK) {
                fprintf(stderr, "FAIL %s (rank %d): %s\n", name, r, jobs[r].message);
                ok = 0;
            } else if (jobs[r].steps != jobs[r].want_steps ||
                       jobs[r].skipped != jobs[r].want_skipped) {
                fprintf(stderr, "FAIL %s (rank %d): %d steps, %d skipped; expected %d, %d\n", name,
                        r, jobs[r].steps, jobs[r].skipped, jobs[r].want_steps,
                        jobs[r].want_skipped);
                ok = 0;
            } else if (jobs[r].backward != want_bwd) {
                fprintf(stderr, "FAIL %s (rank %d): backward %s, expected %s: %s\n", name, r,
                        flashport_status_string(jobs[r].backward),
                        flashport_status_string(want_bwd), jobs[r].backward_message);
                ok = 0;
            }
            for (int t = 0; t < 4; t++)
                for (int s = 0; s < 2; s++) sums[t][s] += jobs[r].sums[t][s];
            if (!(jobs[r].lse_err <= lse_err)) lse_err = jobs[r].lse_err;
        }
        /* conformance/README.md: the tf32 class for f32 (O and LSE 3e-3, gradients 3e-2), f16
         * (2e-3, 2e-3), bf16 (1e-2, 2e-2) */
        double o_tol = c->dtype == FLASHPORT_F32 ? 3e-3 : c->dtype == FLASHPORT_F16 ? 2e-3 : 1e-2;
        double g_tol = c->dtype == FLASHPORT_F32 ? 3e-2 : c->dtype == FLASHPORT_F16 ? 2e-3 : 2e-2;
        static const char *what[4] = {"O", "dQ", "dK", "dV"};
        int compared = ref.backward == FLASHPORT_OK ? 4 : 1;
        for (int t = 0; ok && t < compared; t++) {
            double e = case_rel_l2(sums[t]), tol = t ? g_tol : o_tol;
            if (!(e <= tol)) {
                fprintf(stderr, "FAIL %s: %s rel L2 %.3g > %.3g\n", name, what[t], e, tol);
                ok = 0;
            }
        }
        if (ok && !(lse_err <= o_tol)) {
            fprintf(stderr, "FAIL %s: LSE rel %.3g > %.3g\n", name, lse_err, o_tol);
            ok = 0;
        }
        printf("%s: %s%s\n", ok ? "ok" : "FAILED", name,
               compared == 4 ? "" : " (forward compared; the backward declined as cuda's does)");
        failures += !ok;
        /* bad input on the first problem */
        for (int bad = 0; i == 0 && bad < 2; bad++) {
            if (bad == 0 && ranks < 2) continue;
            run_ranks(comms, ranks, c, &ref, bad ? indivisible : shorter_on_rank1, jobs);
            flashport_status want =
                bad ? FLASHPORT_ERROR_INVALID_ARGUMENT : FLASHPORT_ERROR_MISMATCH;
            for (int r = 0; r < ranks; r++)
                if (jobs[r].status != want || jobs[r].touched ||
                    !strstr(jobs[r].message, "rank ")) {
                    fprintf(stderr, "FAIL bad input %d (rank %d): %s, outputs %s: %s\n", bad, r,
                            flashport_status_string(jobs[r].status),
                            jobs[r].touched ? "touched" : "untouched", jobs[r].message);
                    failures++;
                }
            printf("bad input %d: %s\n", bad, jobs[0].message);
        }
        case_ref_free(&ref);
    }
    for (int r = 0; r < ranks; r++) ncclCommDestroy(comms[r]);
    flashport_context_destroy(ctx);
    printf("%s: %d failure(s) on %d rank(s)\n", failures ? "FAILED" : "passed", failures, ranks);
    return failures ? 1 : 0;
}
