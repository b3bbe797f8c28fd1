/*
 * flashport-dist-bench: times the ring (forward, or forward + backward) on the ranks of
 * MPI_COMM_WORLD and reports the slowest rank's time per call and the share of the ranks' time
 * spent waiting for a transfer. Run it under mpirun, e.g.
 *   mpirun -np 2 flashport-dist-bench --backend cpu_simd --seq 8192 --causal --json
 * Exit codes: 0 measured, 1 a call failed, 2 usage.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashport_dist.h"

typedef struct options {
    const char *backend;
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq, dim;
    int causal, zigzag, backward, warmup, iters, json;
} options;

static const char usage[] =
    "usage: mpirun -np P flashport-dist-bench [options]\n"
    "  --backend SPEC     flashport context spec of every rank (default cpu_simd)\n"
    "  --dtype f32|f16|bf16  (default f32)\n"
    "  --batch B --heads H --heads-kv HKV --seq N --dim D  (default 1 8 8 4096 64)\n"
    "  --causal           causal mask\n"
    "  --contiguous       contiguous shards (default with --causal: zig-zag)\n"
    "  --backward         time the backward call too (forward + backward per iteration)\n"
    "  --warmup W --iters I  (default 1 3)\n"
    "  --json             one JSON object on rank 0's stdout\n"
    "  --help\n"
    "Reports the slowest rank's median time per iteration and, summed over ranks, the share of\n"
    "time blocked on transfers (wait), in attention and merges (compute).\n"
    "Exit codes: 0 measured, 1 a call failed, 2 usage.\n";

static int parse(int argc, char **argv, options *o) {
    *o = (options){"cpu_simd", FLASHPORT_F32, 1, 8, 8, 4096, 64, 0, 1, 0, 1, 3, 0};
    int zigzag_set = 0, contiguous = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NUM(flag, field)                                                                           \
    if (!strcmp(a, flag)) {                                                                        \
        if (!v) return 0;                                                                          \
        o->field = atoll(v);                                                                       \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        NUM("--batch", batch)
        NUM("--heads", heads_q)
        NUM("--heads-kv", heads_kv)
        NUM("--seq", seq)
        NUM("--dim", dim)
        NUM("--warmup", warmup)
        NUM("--iters", iters)
#undef NUM
        if (!strcmp(a, "--backend") && v) {
            o->backend = argv[++i];
        } else if (!strcmp(a, "--dtype") && v) {
            i++;
            if (!strcmp(v, "f32"))
                o->dtype = FLASHPORT_F32;
            else if (!strcmp(v, "f16"))
                o->dtype = FLASHPORT_F16;
            else if (!strcmp(v, "bf16"))
                o->dtype = FLASHPORT_BF16;
            else
                return 0;
        } else if (!strcmp(a, "--causal")) {
            o->causal = 1;
        } else if (!strcmp(a, "--contiguous")) {
            contiguous = 1;
        } else if (!strcmp(a, "--backward")) {
            o->backward = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else {
            return 0;
        }
        (void)zigzag_set;
    }
    o->zigzag = o->causal && !contiguous;
    return o->iters >= 1 && o->warmup >= 0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    options o;
    if (!parse(argc, argv, &o)) {
        if (rank == 0) fputs(usage, stderr);
        MPI_Finalize();
        return 2;
    }
    flashport_context *ctx = NULL;
    int ok = flashport_context_create(o.backend, &ctx) == FLASHPORT_OK, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok) fprintf(stderr, "rank %d: %s\n", rank, flashport_last_error());
        MPI_Finalize();
        return 1;
    }
    flashport_dist_desc d;
    flashport_dist_desc_init(&d, o.dtype, o.batch, o.heads_q, o.heads_kv, o.seq / ranks, o.seq,
                             o.dim, FLASHPORT_LAYOUT_BHND);
    d.causal = o.causal;
    d.sharding = o.zigzag ? FLASHPORT_DIST_ZIGZAG : FLASHPORT_DIST_CONTIGUOUS;
    size_t es = flashport_dtype_size(o.dtype);
    size_t qn = (size_t)(o.batch * o.heads_q * d.seq_local * o.dim);
    size_t kvn = (size_t)(o.batch * o.heads_kv * d.seq_local * o.dim);
    size_t rows = (size_t)(o.batch * o.heads_q * d.seq_local);
    /* Small random values in any dtype: every 16-bit pattern below 0x3c00 is a small number in
     * both f16 and bf16, and f32 takes the same bits as its high half. */
    char *q = malloc(qn * es), *k = malloc(kvn * es), *v = malloc(kvn * es), *out = malloc(qn * es);
    char *dq = malloc(qn * es), *dk = malloc(kvn * es), *dv = malloc(kvn * es);
    float *lse = malloc(rows * sizeof(float));
    uint32_t s = 12345u + (uint32_t)rank;
    for (size_t i = 0; i < qn * es; i += 2) {
        s = s * 1664525u + 1013904223u;
        uint16_t h = (uint16_t)((s >> 16) % 0x3800u);
        memcpy(q + i, &h, 2);
        memcpy(out + i, &h, 2); /* dO of the backward */
        if (i < kvn * es) {
            memcpy(k + i, &h, 2);
            memcpy(v + i, &h, 2);
        }
    }
    int n = o.warmup + o.iters;
    double *total = calloc((size_t)n, sizeof(double));
    double wait = 0, compute = 0, rank_total = 0;
    int skipped = 0, failed = 0;
    for (int it = 0; it < n && !failed; it++) {
        flashport_dist_stats f, b = {0};
        MPI_Barrier(MPI_COMM_WORLD);
        char *o_buf = malloc(qn * es);
        failed = flashport_dist_attention_mpi(MPI_COMM_WORLD, ctx, &d, q, k, v, o_buf, lse, &f) !=
                 FLASHPORT_OK;
        if (!failed && o.backward)
            failed =
                flashport_dist_attention_backward_mpi(MPI_COMM_WORLD, ctx, &d, q, k, v, o_buf, lse,
                                                      out, dq, dk, dv, &b) != FLASHPORT_OK;
        free(o_buf);
        if (failed) break;
        double t = f.total_ms + b.total_ms;
        MPI_Allreduce(&t, &total[it], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (it >= o.warmup) {
            wait += f.wait_ms + b.wait_ms;
            compute += f.compute_ms + b.compute_ms;
            rank_total += t;
            skipped = f.steps_skipped;
        }
    }
    if (failed) {
        fprintf(stderr, "rank %d: %s\n", rank, flashport_dist_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1); /* the tool, not the library: the other ranks may wait */
    }
    double sums[3] = {wait, compute, rank_total}, all[3];
    MPI_Reduce(sums, all, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    qsort(total + o.warmup, (size_t)o.iters, sizeof(double), cmp);
    double median = total[o.warmup + o.iters / 2];
    if (rank == 0) {
        const char *dt = flashport_dtype_name(o.dtype);
        if (o.json)
            printf("{\"tool\": \"flashport-dist-bench\", \"backend\": \"%s\", \"ranks\": %d, "
                   "\"dtype\": \"%s\", \"batch\": %lld, \"heads_q\": %lld, \"heads_kv\": %lld, "
                   "\"seq\": %lld, \"head_dim\": %lld, \"causal\": %d, \"sharding\": \"%s\", "
                   "\"backward\": %d, \"iters\": %d, \"median_ms\": %.3f, \"wait_share\": %.4f, "
                   "\"compute_share\": %.4f, \"rank0_steps_skipped\": %d}\n",
                   o.backend, ranks, dt, (long long)o.batch, (long long)o.heads_q,
                   (long long)o.heads_kv, (long long)o.seq, (long long)o.dim, o.causal,
                   o.zigzag ? "zigzag" : "contiguous", o.backward, o.iters, median, all[0] / all[2],
                   all[1] / all[2], skipped);
        else
            printf("%d rank(s), %s, B=%lld H=%lld/%lld N=%lld d=%lld%s%s: %.3f ms per %s "
                   "(slowest rank, median of %d); wait %.1f%%, compute %.1f%% of the ranks' time\n",
                   ranks, dt, (long long)o.batch, (long long)o.heads_q, (long long)o.heads_kv,
                   (long long)o.seq, (long long)o.dim, o.causal ? " causal" : "",
                   o.zigzag ? " zigzag" : "", median, o.backward ? "forward+backward" : "forward",
                   o.iters, 100 * all[0] / all[2], 100 * all[1] / all[2]);
    }
    flashport_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
