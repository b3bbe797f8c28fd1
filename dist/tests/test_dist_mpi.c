/*
 * Run under mpirun with P ranks: the ring's forward and backward results on each rank's shard
 * equal the single-process results of the same backend on the whole sequence, within the
 * conformance tolerances, for contiguous and zig-zag sharding, causal or not, sliding windows,
 * softcap and sinks, MHA, GQA and MQA, f32, f16 and bf16, both layouts (dist_case.h), with the
 * fully masked steps skipped and the ring cut short where a window ends it; bad input and the
 * features the ring declines get the same status on every rank with a message, and no output is
 * written.
 *
 * Usage: test_dist_mpi BACKEND   (exit 77 when the backend is not available here)
 */
#include <mpi.h>

#include "dist_case.h"

static int rank, ranks, failures;

static double rel_l2(const tcase *c, const flashport_dist_desc *d, int64_t heads, const void *got,
                     const void *ref) {
    double mine[2] = {0, 0}, all[2];
    case_l2_sums(c, d, rank, ranks, heads, got, ref, mine);
    MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return case_rel_l2(all);
}

static void expect(int ok, const char *what, const char *name, double value, double bound) {
    if (ok) return;
    failures++;
    if (rank == 0) fprintf(stderr, "FAIL %s: %s %.3g > %.3g\n", name, what, value, bound);
}

static void run_case(flashport_context *ctx, const tcase *c) {
    char name[160];
    case_name(c, ranks, name, sizeof name);
    case_ref ref;
    flashport_status st = case_reference(ctx, c, &ref);
    if (st == FLASHPORT_OK) st = ref.backward;
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "FAIL %s: single-process run: %s\n", name, flashport_last_error());
        failures++;
        case_ref_free(&ref);
        return;
    }
    size_t es = flashport_dtype_size(c->dtype);
    flashport_dist_desc d = case_desc(c, ranks);
    d.sinks = ref.sinks;
    void *lq = case_shard(c, &d, rank, ranks, c->heads_q, ref.q);
    void *lk = case_shard(c, &d, rank, ranks, c->heads_kv, ref.k);
    void *lv = case_shard(c, &d, rank, ranks, c->heads_kv, ref.v);
    void *ldo = case_shard(c, &d, rank, ranks, c->heads_q, ref.d_o);
    size_t lq_count = (size_t)(c->batch * c->heads_q * d.seq_local * c->dim);
    size_t lkv_count = (size_t)(c->batch * c->heads_kv * d.seq_local * c->dim);
    void *o = malloc(lq_count * es), *dq = malloc(lq_count * es);
    void *dk = malloc(lkv_count * es), *dv = malloc(lkv_count * es);
    float *lse = malloc(sizeof(float) * (size_t)(c->batch * c->heads_q * d.seq_local));
    flashport_dist_stats stats;
    st = flashport_dist_attention_mpi(MPI_COMM_WORLD, ctx, &d, lq, lk, lv, o, lse, &stats);
    if (st == FLASHPORT_OK)
        st = flashport_dist_attention_backward_mpi(MPI_COMM_WORLD, ctx, &d, lq, lk, lv, o, lse, ldo,
                                                   dq, dk, dv, NULL);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "FAIL %s (rank %d): %s\n", name, rank, flashport_dist_last_error());
        failures++;
    } else {
        /* conformance/README.md: O rel L2 and LSE (f32 1e-5, f16 2e-3, bf16 1e-2), the
         * gradients' rel L2 (f32 1e-4, f16 2e-3, bf16 2e-2) */
        double o_tol = c->dtype == FLASHPORT_F32 ? 1e-5 : c->dtype == FLASHPORT_F16 ? 2e-3 : 1e-2;
        double g_tol = c->dtype == FLASHPORT_F32 ? 1e-4 : c->dtype == FLASHPORT_F16 ? 2e-3 : 2e-2;
        double e = rel_l2(c, &d, c->heads_q, o, ref.o);
        expect(e <= o_tol, "O rel L2", name, e, o_tol);
        double mine = case_lse_err(c, &d, rank, ranks, lse, ref.lse);
        MPI_Allreduce(&mine, &e, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        expect(e <= o_tol, "LSE rel", name, e, o_tol);
        e = rel_l2(c, &d, c->heads_q, dq, ref.d_q);
        expect(e <= g_tol, "dQ rel L2", name, e, g_tol);
        e = rel_l2(c, &d, c->heads_kv, dk, ref.d_k);
        expect(e <= g_tol, "dK rel L2", name, e, g_tol);
        e = rel_l2(c, &d, c->heads_kv, dv, ref.d_v);
        expect(e <= g_tol, "dV rel L2", name, e, g_tol);
        int want_steps, want_skipped;
        case_ring(&d, rank, ranks, &want_steps, &want_skipped);
        if (stats.steps != want_steps || stats.steps_skipped != want_skipped) {
            fprintf(stderr, "FAIL %s (rank %d): %d steps, %d skipped; expected %d, %d\n", name,
                    rank, stats.steps, stats.steps_skipped, want_steps, want_skipped);
            failures++;
        }
    }
    if (rank == 0) printf("%s: %s\n", failures ? "checked (failures so far)" : "ok", name);
    case_ref_free(&ref);
    void *p[] = {lq, lk, lv, ldo, o, dq, dk, dv, lse};
    for (int i = 0; i < 9; i++) free(p[i]);
}

typedef enum dropped { KEEP_ALL, DROP_Q, DROP_LSE } dropped;

/* Each rank passes its own descriptor and buffers (`drop` one as NULL); every rank must get
 * `want`, a message naming a rank (and containing `names` when given), and untouched outputs. */
static void bad_case(flashport_context *ctx, const char *name, const flashport_dist_desc *d,
                     dropped drop, int backward, flashport_status want, const char *names) {
    enum { CAP = 4096 };
    static float in[CAP], out[4][CAP], lse[CAP];
    for (int i = 0; i < CAP; i++) in[i] = 0.25f;
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < CAP; i++) out[t][i] = 7.0f;
    for (int i = 0; i < CAP; i++) lse[i] = 1.0f;
    flashport_status st =
        backward ? flashport_dist_attention_backward_mpi(
                       MPI_COMM_WORLD, ctx, d, drop == DROP_Q ? NULL : in, in, in, in,
                       drop == DROP_LSE ? NULL : lse, in, out[0], out[1], out[2], NULL)
                 : flashport_dist_attention_mpi(MPI_COMM_WORLD, ctx, d, drop == DROP_Q ? NULL : in,
                                                in, in, out[0], out[3], NULL);
    int touched = 0;
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < CAP; i++) touched |= out[t][i] != 7.0f;
    const char *msg = flashport_dist_last_error();
    int ok = st == want && !touched && strstr(msg, "rank ") != NULL &&
             (!names || strstr(msg, names) != NULL),
        all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        fprintf(stderr, "FAIL bad input '%s' (rank %d): status %s (want %s), outputs %s, '%s'\n",
                name, rank, flashport_status_string(st), flashport_status_string(want),
                touched ? "touched" : "untouched", msg);
        failures++;
    } else if (rank == 0) {
        printf("ok: bad input '%s' -> %s: %s\n", name, flashport_status_string(st), msg);
    }
}

static void bad_inputs(flashport_context *ctx) {
    flashport_dist_desc d;
    int64_t n = 4;
    flashport_dist_desc_init(&d, FLASHPORT_F32, 1, 2, 1, n, n * ranks, 8, FLASHPORT_LAYOUT_BHND);
    flashport_dist_desc mine = d;
    mine.seq_total = n * ranks + 1; /* P does not divide N */
    bad_case(ctx, "ranks do not divide N", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT,
             NULL);
    mine = d;
    mine.sharding = FLASHPORT_DIST_ZIGZAG;
    mine.seq_local = 3, mine.seq_total = 3 * ranks;
    bad_case(ctx, "zig-zag with odd shards", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT,
             NULL);
    bad_case(ctx, "q NULL on the last rank", &d, rank == ranks - 1 ? DROP_Q : KEEP_ALL, 0,
             FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    bad_case(ctx, "backward without an LSE on rank 0", &d, rank == 0 ? DROP_LSE : KEEP_ALL, 1,
             FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    mine = d;
    mine.heads_q = 3, mine.heads_kv = 2;
    bad_case(ctx, "heads_q not a multiple of heads_kv", &mine, KEEP_ALL, 1,
             FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    mine = d;
    mine.kernel = "no_such_kernel";
    bad_case(ctx, "a kernel the backend does not have", &mine, KEEP_ALL, 0,
             FLASHPORT_ERROR_UNKNOWN_KERNEL, NULL);
    /* The masks' fields out of range, and what the ring declines (on one rank only: the same
     * status everywhere). */
    mine = d;
    mine.window_left = -2;
    bad_case(ctx, "window_left -2", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT,
             "window_left");
    mine = d;
    mine.causal = 1, mine.window_right = 3;
    bad_case(ctx, "causal with window_right 3", &mine, KEEP_ALL, 1,
             FLASHPORT_ERROR_INVALID_ARGUMENT, "causal");
    mine = d;
    mine.softcap = -1.0f;
    bad_case(ctx, "a negative softcap", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT,
             "softcap");
    mine = d;
    if (rank == ranks - 1) mine.alibi = FLASHPORT_ALIBI_PER_HEAD;
    bad_case(ctx, "ALiBi on the last rank", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_UNSUPPORTED,
             "ALiBi");
    mine = d;
    if (rank == 0) mine.bias = 1;
    bad_case(ctx, "a bias on rank 0", &mine, KEEP_ALL, 1, FLASHPORT_ERROR_UNSUPPORTED, "bias");
    mine = d;
    mine.q_varlen = 1;
    bad_case(ctx, "varlen Q", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_UNSUPPORTED, "varlen");
    mine = d;
    mine.kv_layout = FLASHPORT_KV_VARLEN;
    bad_case(ctx, "varlen K/V", &mine, KEEP_ALL, 1, FLASHPORT_ERROR_UNSUPPORTED, "varlen");
    mine = d;
    mine.kv_layout = FLASHPORT_KV_PAGED;
    bad_case(ctx, "paged K/V", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_UNSUPPORTED, "paged");
    if (ranks < 2) return;
    mine = d;
    if (rank == 1) mine.seq_local = n / 2;
    bad_case(ctx, "rank 1's shard is shorter", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_MISMATCH, NULL);
    mine = d;
    if (rank == ranks - 1) mine.causal = 1;
    bad_case(ctx, "causal on one rank only", &mine, KEEP_ALL, 1, FLASHPORT_ERROR_MISMATCH, NULL);
    mine = d;
    if (rank == 1) mine.window_left = 5;
    bad_case(ctx, "a window on rank 1 only", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_MISMATCH,
             "window_left");
    static const float sinks[2] = {1.0f, 2.0f};
    mine = d;
    if (rank == 0) mine.sinks = sinks;
    bad_case(ctx, "sinks on rank 0 only", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_MISMATCH, "sinks");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char *backend = argc > 1 ? argv[1] : "cpu_simd";
    flashport_context *ctx = NULL;
    if (flashport_context_create(backend, &ctx) != FLASHPORT_OK) {
        if (rank == 0) printf("SKIP: backend %s: %s\n", backend, flashport_last_error());
        MPI_Finalize();
        return 77;
    }
    for (int i = 0; i < DIST_CASES; i++) run_case(ctx, &dist_cases[i]);
    bad_inputs(ctx);
    flashport_context_destroy(ctx);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d failure(s) on %d rank(s)\n", total ? "FAILED" : "passed", total, ranks);
    MPI_Finalize();
    return total ? 1 : 0;
}
