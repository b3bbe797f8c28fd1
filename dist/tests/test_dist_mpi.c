/*
 * Run under mpirun with P ranks: the ring's forward and backward results on each rank's shard
 * equal the single-process results of the same backend on the whole sequence, within the
 * conformance tolerances, for contiguous and zig-zag sharding, causal or not, MHA, GQA and
 * MQA, f32 and bf16, both layouts; bad input gets the same status on every rank with a
 * message, and no output is written.
 *
 * Usage: test_dist_mpi BACKEND   (exit 77 when the backend is not available here)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashport_dist.h"
#include "fp_half.h"

static int rank, ranks, failures;

typedef struct tcase {
    flashport_dtype dtype;
    flashport_layout layout;
    int64_t batch, heads_q, heads_kv, seq, dim;
    int causal;
    flashport_dist_sharding sharding;
} tcase;

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static void put(flashport_dtype dt, void *p, int64_t i, float v) {
    if (dt == FLASHPORT_BF16)
        ((uint16_t *)p)[i] = fp_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

static float get(flashport_dtype dt, const void *p, int64_t i) {
    return dt == FLASHPORT_BF16 ? fp_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Element offset of (b, h, row) in a contiguous [B, H, N, d] tensor of either layout. */
static int64_t at(flashport_layout l, int64_t heads, int64_t n, int64_t dim, int64_t b, int64_t h,
                  int64_t i) {
    return l == FLASHPORT_LAYOUT_BHND ? ((b * heads + h) * n + i) * dim
                                      : ((b * n + i) * heads + h) * dim;
}

static void *random_tensor(const tcase *c, int64_t heads, uint64_t seed) {
    int64_t count = c->batch * heads * c->seq * c->dim;
    void *p = malloc((size_t)count * flashport_dtype_size(c->dtype));
    for (int64_t i = 0; i < count; i++) put(c->dtype, p, i, rnd(&seed));
    return p;
}

/* This rank's rows of a global tensor. */
static void *shard(const tcase *c, const flashport_dist_desc *d, int64_t heads, const void *g) {
    size_t es = flashport_dtype_size(c->dtype);
    int64_t n = d->seq_local;
    char *out = malloc((size_t)(c->batch * heads * n * c->dim) * es);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < n; i++) {
                int64_t gi = flashport_dist_global_row(d, rank, ranks, i);
                memcpy(out + at(c->layout, heads, n, c->dim, b, h, i) * es,
                       (const char *)g + at(c->layout, heads, c->seq, c->dim, b, h, gi) * es,
                       (size_t)c->dim * es);
            }
    return out;
}

/* Relative L2 error of this rank's shard against the global reference, summed over ranks. */
static double rel_l2(const tcase *c, const flashport_dist_desc *d, int64_t heads, const void *got,
                     const void *ref) {
    double err[2] = {0, 0}, sum[2];
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < d->seq_local; i++) {
                int64_t gi = flashport_dist_global_row(d, rank, ranks, i);
                int64_t lo = at(c->layout, heads, d->seq_local, c->dim, b, h, i);
                int64_t go = at(c->layout, heads, c->seq, c->dim, b, h, gi);
                for (int64_t e = 0; e < c->dim; e++) {
                    double x = get(c->dtype, got, lo + e), y = get(c->dtype, ref, go + e);
                    err[0] += (x - y) * (x - y);
                    err[1] += y * y;
                }
            }
    MPI_Allreduce(err, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sqrt(sum[0] / (sum[1] > 1e-30 ? sum[1] : 1e-30));
}

static double lse_err(const tcase *c, const flashport_dist_desc *d, const float *got,
                      const float *ref) {
    double worst = 0, all;
    for (int64_t bh = 0; bh < c->batch * c->heads_q; bh++)
        for (int64_t i = 0; i < d->seq_local; i++) {
            double y = ref[bh * c->seq + flashport_dist_global_row(d, rank, ranks, i)];
            double e = fabs(got[bh * d->seq_local + i] - y) / (fabs(y) > 1 ? fabs(y) : 1);
            if (!(e <= worst)) worst = e; /* NaN counts as worst */
        }
    MPI_Allreduce(&worst, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

static void expect(int ok, const char *what, const char *name, double value, double bound) {
    if (ok) return;
    failures++;
    if (rank == 0) fprintf(stderr, "FAIL %s: %s %.3g > %.3g\n", name, what, value, bound);
}

static void run_case(flashport_context *ctx, const tcase *c) {
    char name[160];
    snprintf(name, sizeof name, "P=%d %s %s B=%lld Hq=%lld Hkv=%lld N=%lld d=%lld%s %s", ranks,
             flashport_dtype_name(c->dtype), c->layout == FLASHPORT_LAYOUT_BHND ? "bhnd" : "bnhd",
             (long long)c->batch, (long long)c->heads_q, (long long)c->heads_kv, (long long)c->seq,
             (long long)c->dim, c->causal ? " causal" : "",
             c->sharding == FLASHPORT_DIST_ZIGZAG ? "zigzag" : "contiguous");
    size_t es = flashport_dtype_size(c->dtype);
    void *q = random_tensor(c, c->heads_q, 1), *k = random_tensor(c, c->heads_kv, 2);
    void *v = random_tensor(c, c->heads_kv, 3), *d_o = random_tensor(c, c->heads_q, 4);
    int64_t q_count = c->batch * c->heads_q * c->seq * c->dim;
    int64_t kv_count = c->batch * c->heads_kv * c->seq * c->dim;

    /* The single-process result on the whole sequence. */
    flashport_attention_desc ad;
    flashport_attention_desc_init(&ad, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq, c->seq,
                                  c->dim, c->layout);
    ad.causal = c->causal;
    ad.window_right = c->causal ? 0 : -1;
    void *o_ref = malloc((size_t)q_count * es), *dq_ref = malloc((size_t)q_count * es);
    void *dk_ref = malloc((size_t)kv_count * es), *dv_ref = malloc((size_t)kv_count * es);
    float *lse_ref = malloc(sizeof(float) * (size_t)(c->batch * c->heads_q * c->seq));
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q, a.k = k, a.v = v, a.o = o_ref, a.lse = lse_ref;
    flashport_status st = flashport_attention_run_host(ctx, &ad, &a);
    a.d_o = d_o, a.d_q = dq_ref, a.d_k = dk_ref, a.d_v = dv_ref;
    if (st == FLASHPORT_OK) st = flashport_attention_backward_host(ctx, &ad, &a);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "FAIL %s: single-process run: %s\n", name, flashport_last_error());
        failures++;
        return;
    }

    flashport_dist_desc d;
    flashport_dist_desc_init(&d, c->dtype, c->batch, c->heads_q, c->heads_kv, c->seq / ranks,
                             c->seq, c->dim, c->layout);
    d.causal = c->causal;
    d.sharding = c->sharding;
    void *lq = shard(c, &d, c->heads_q, q), *lk = shard(c, &d, c->heads_kv, k);
    void *lv = shard(c, &d, c->heads_kv, v), *ldo = shard(c, &d, c->heads_q, d_o);
    int64_t lq_count = q_count / ranks, lkv_count = kv_count / ranks;
    void *o = malloc((size_t)lq_count * es), *dq = malloc((size_t)lq_count * es);
    void *dk = malloc((size_t)lkv_count * es), *dv = malloc((size_t)lkv_count * es);
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
        /* conformance/README.md: O rel L2 and LSE (f32 1e-5, bf16 1e-2), gradients' rel L2
         * (f32 1e-4, bf16 2e-2) */
        int f32 = c->dtype == FLASHPORT_F32;
        double o_tol = f32 ? 1e-5 : 1e-2, g_tol = f32 ? 1e-4 : 2e-2;
        double e = rel_l2(c, &d, c->heads_q, o, o_ref);
        expect(e <= o_tol, "O rel L2", name, e, o_tol);
        e = lse_err(c, &d, lse, lse_ref);
        expect(e <= o_tol, "LSE rel", name, e, o_tol);
        e = rel_l2(c, &d, c->heads_q, dq, dq_ref);
        expect(e <= g_tol, "dQ rel L2", name, e, g_tol);
        e = rel_l2(c, &d, c->heads_kv, dk, dk_ref);
        expect(e <= g_tol, "dK rel L2", name, e, g_tol);
        e = rel_l2(c, &d, c->heads_kv, dv, dv_ref);
        expect(e <= g_tol, "dV rel L2", name, e, g_tol);
        int want_skipped = 0;
        if (c->causal && c->sharding == FLASHPORT_DIST_CONTIGUOUS) want_skipped = ranks - 1 - rank;
        if (stats.steps != ranks || stats.steps_skipped != want_skipped) {
            fprintf(stderr, "FAIL %s (rank %d): %d steps, %d skipped; expected %d, %d\n", name,
                    rank, stats.steps, stats.steps_skipped, ranks, want_skipped);
            failures++;
        }
    }
    if (rank == 0) printf("%s: %s\n", failures ? "checked (failures so far)" : "ok", name);
    free(q), free(k), free(v), free(d_o), free(o_ref), free(dq_ref), free(dk_ref), free(dv_ref);
    free(lse_ref), free(lq), free(lk), free(lv), free(ldo), free(o), free(dq), free(dk);
    free(dv), free(lse);
}

typedef enum dropped { KEEP_ALL, DROP_Q, DROP_LSE } dropped;

/* Each rank passes its own descriptor and buffers (`drop` one as NULL); every rank must get
 * `want`, a message naming a rank, and untouched outputs. */
static void bad_case(flashport_context *ctx, const char *name, const flashport_dist_desc *d,
                     dropped drop, int backward, flashport_status want) {
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
    int ok = st == want && !touched && strstr(msg, "rank ") != NULL, all_ok;
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
    bad_case(ctx, "ranks do not divide N", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT);
    mine = d;
    mine.sharding = FLASHPORT_DIST_ZIGZAG;
    mine.seq_local = 3, mine.seq_total = 3 * ranks;
    bad_case(ctx, "zig-zag with odd shards", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_INVALID_ARGUMENT);
    bad_case(ctx, "q NULL on the last rank", &d, rank == ranks - 1 ? DROP_Q : KEEP_ALL, 0,
             FLASHPORT_ERROR_INVALID_ARGUMENT);
    bad_case(ctx, "backward without an LSE on rank 0", &d, rank == 0 ? DROP_LSE : KEEP_ALL, 1,
             FLASHPORT_ERROR_INVALID_ARGUMENT);
    mine = d;
    mine.heads_q = 3, mine.heads_kv = 2;
    bad_case(ctx, "heads_q not a multiple of heads_kv", &mine, KEEP_ALL, 1,
             FLASHPORT_ERROR_INVALID_ARGUMENT);
    mine = d;
    mine.kernel = "no_such_kernel";
    bad_case(ctx, "a kernel the backend does not have", &mine, KEEP_ALL, 0,
             FLASHPORT_ERROR_UNKNOWN_KERNEL);
    if (ranks < 2) return;
    mine = d;
    if (rank == 1) mine.seq_local = n / 2;
    bad_case(ctx, "rank 1's shard is shorter", &mine, KEEP_ALL, 0, FLASHPORT_ERROR_MISMATCH);
    mine = d;
    if (rank == ranks - 1) mine.causal = 1;
    bad_case(ctx, "causal on one rank only", &mine, KEEP_ALL, 1, FLASHPORT_ERROR_MISMATCH);
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
    static const tcase cases[] = {
        /* dtype, layout, B, Hq, Hkv, N, d, causal, sharding */
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 1, FLASHPORT_DIST_CONTIGUOUS},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 4, 64, 32, 1, FLASHPORT_DIST_ZIGZAG},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 2, 64, 32, 0, FLASHPORT_DIST_ZIGZAG},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BHND, 2, 4, 2, 64, 32, 1, FLASHPORT_DIST_ZIGZAG},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 4, 1, 96, 64, 1, FLASHPORT_DIST_ZIGZAG},
        {FLASHPORT_F32, FLASHPORT_LAYOUT_BNHD, 1, 4, 2, 96, 64, 1, FLASHPORT_DIST_CONTIGUOUS},
        {FLASHPORT_BF16, FLASHPORT_LAYOUT_BHND, 1, 4, 2, 64, 64, 1, FLASHPORT_DIST_ZIGZAG},
        {FLASHPORT_BF16, FLASHPORT_LAYOUT_BNHD, 1, 2, 2, 64, 32, 0, FLASHPORT_DIST_CONTIGUOUS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ctx, &cases[i]);
    bad_inputs(ctx);
    flashport_context_destroy(ctx);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d failure(s) on %d rank(s)\n", total ? "FAILED" : "passed", total, ranks);
    MPI_Finalize();
    return total ? 1 : 0;
}
