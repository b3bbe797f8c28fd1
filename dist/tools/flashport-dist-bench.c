/*
 * flashport-dist-bench: times the ring (forward, or forward + backward) on the ranks of
 * MPI_COMM_WORLD and reports the slowest rank's time per iteration and the share of the ranks'
 * time spent waiting for a transfer. Run it under mpirun, e.g.
 *   mpirun -np 2 flashport-dist-bench --backend cpu_simd --seq 8192 --causal --json
 *   mpirun -np 2 flashport-dist-bench --nccl --dtype bf16 --dim 128 --seq 262144 --causal
 * Exit codes: 0 measured, 1 a call failed, 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_bench.h"

static const char usage[] =
    "usage: mpirun -np P flashport-dist-bench [options]\n"
    "  --backend SPEC     flashport context spec of every rank (default cpu_simd; MPI ring)\n"
    "  --nccl             the NCCL ring on one GPU per rank (the rank's local index), with\n"
    "                     MPI only to start NCCL; in builds with flashport-dist's NCCL calls\n"
    "  --dtype f32|f16|bf16  (default f32)\n"
    "  --batch B --heads H --heads-kv HKV --seq N --dim D  (default 1 8 8 4096 64)\n"
    "  --causal           causal mask\n"
    "  --window L,R       sliding window on global positions (-1: unbounded; with --causal\n"
    "                     R is 0)\n"
    "  --contiguous       contiguous shards (default with --causal: zig-zag)\n"
    "  --backward         time the backward call too (forward + backward per iteration)\n"
    "  --warmup W --iters I  (default 1 3)\n"
    "  --json             one JSON object on rank 0's stdout\n"
    "  --help\n"
    "Reports the slowest rank's median time per iteration and, summed over ranks, the shares of\n"
    "time blocked on transfers (wait), in the attention and merges (compute), and in the ranks'\n"
    "status exchanges (agree: before and after the ring, waiting for the slowest rank).\n"
    "Exit codes: 0 measured, 1 a call failed, 2 usage.\n";

static int parse(int argc, char **argv, bench_options *o) {
    *o = (bench_options){"cpu_simd", 0, FLASHPORT_F32, 1, 8, 8, 4096, 64, -1, -1, 0, 0, 0, 1, 3, 0};
    int contiguous = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *num = !strcmp(a, "--batch")      ? &o->batch
                       : !strcmp(a, "--heads")    ? &o->heads_q
                       : !strcmp(a, "--heads-kv") ? &o->heads_kv
                       : !strcmp(a, "--seq")      ? &o->seq
                       : !strcmp(a, "--dim")      ? &o->dim
                                                  : NULL;
        int *count = !strcmp(a, "--warmup") ? &o->warmup : !strcmp(a, "--iters") ? &o->iters : NULL;
        if ((num || count) && !v) return 0;
        if (num) {
            *num = atoll(argv[++i]);
        } else if (count) {
            *count = atoi(argv[++i]);
        } else if (!strcmp(a, "--backend") && v) {
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
        } else if (!strcmp(a, "--window") && v) {
            long long l, r;
            if (sscanf(argv[++i], "%lld,%lld", &l, &r) != 2) return 0;
            o->window_left = l, o->window_right = r;
        } else if (!strcmp(a, "--nccl")) {
            o->nccl = 1;
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
    }
    o->zigzag = o->causal && !contiguous;
    return o->iters >= 1 && o->warmup >= 0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int open_runner(const bench_options *o, const flashport_dist_desc *d, bench_runner *r) {
    if (!o->nccl) return bench_host_open(o, d, r);
#ifdef FP_DIST_BENCH_NCCL
    return bench_nccl_open(o, d, r);
#else
    fprintf(stderr, "--nccl: this build of flashport-dist has no NCCL calls\n");
    return 1;
#endif
}

static void report(const bench_options *o, int ranks, double median, const double all[4],
                   int skipped) {
    const char *dt = flashport_dtype_name(o->dtype);
    const char *backend = o->nccl ? "cuda (nccl)" : o->backend;
    char window[64] = "";
    if (o->window_left >= 0 || o->window_right >= 0)
        snprintf(window, sizeof window, " window(%lld,%lld)", (long long)o->window_left,
                 (long long)o->window_right);
    if (o->json)
        printf("{\"tool\": \"flashport-dist-bench\", \"backend\": \"%s\", \"ranks\": %d, "
               "\"dtype\": \"%s\", \"batch\": %lld, \"heads_q\": %lld, \"heads_kv\": %lld, "
               "\"seq\": %lld, \"head_dim\": %lld, \"causal\": %d, \"window_left\": %lld, "
               "\"window_right\": %lld, \"sharding\": \"%s\", "
               "\"backward\": %d, \"iters\": %d, \"median_ms\": %.3f, \"wait_share\": %.4f, "
               "\"compute_share\": %.4f, \"agree_share\": %.4f, \"rank0_steps_skipped\": %d}\n",
               backend, ranks, dt, (long long)o->batch, (long long)o->heads_q,
               (long long)o->heads_kv, (long long)o->seq, (long long)o->dim, o->causal,
               (long long)o->window_left, (long long)o->window_right,
               o->zigzag ? "zigzag" : "contiguous", o->backward, o->iters, median, all[0] / all[3],
               all[1] / all[3], all[2] / all[3], skipped);
    else
        printf("%s, %d rank(s), %s, B=%lld H=%lld/%lld N=%lld d=%lld%s%s%s: %.3f ms per %s "
               "(slowest rank, median of %d); wait %.1f%%, compute %.1f%%, status exchanges %.1f%% "
               "of the ranks' time\n",
               backend, ranks, dt, (long long)o->batch, (long long)o->heads_q,
               (long long)o->heads_kv, (long long)o->seq, (long long)o->dim,
               o->causal ? " causal" : "", window, o->zigzag ? " zigzag" : "", median,
               o->backward ? "forward+backward" : "forward", o->iters, 100 * all[0] / all[3],
               100 * all[1] / all[3], 100 * all[2] / all[3]);
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
    bench_options o;
    if (!parse(argc, argv, &o)) {
        if (rank == 0) fputs(usage, stderr);
        MPI_Finalize();
        return 2;
    }
    flashport_dist_desc d;
    flashport_dist_desc_init(&d, o.dtype, o.batch, o.heads_q, o.heads_kv, o.seq / ranks, o.seq,
                             o.dim, FLASHPORT_LAYOUT_BHND);
    d.causal = o.causal;
    d.window_left = o.window_left;
    d.window_right = o.window_right;
    d.sharding = o.zigzag ? FLASHPORT_DIST_ZIGZAG : FLASHPORT_DIST_CONTIGUOUS;
    bench_runner r = {0};
    int failed = open_runner(&o, &d, &r) != 0, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int n = o.warmup + o.iters;
    double *total = calloc((size_t)n, sizeof(double));
    double sums[4] = {0, 0, 0, 0}; /* wait, compute, status exchanges, total */
    int skipped = 0;
    for (int it = 0; it < n && !any; it++) {
        flashport_dist_stats f = {0}, b = {0};
        MPI_Barrier(MPI_COMM_WORLD);
        /* the library's calls agree on a status across ranks, so all fail together */
        if (r.iter(r.state, &f, &b) != FLASHPORT_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, flashport_dist_last_error());
            any = 1;
            break;
        }
        double t = f.total_ms + b.total_ms;
        MPI_Allreduce(&t, &total[it], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (it >= o.warmup) {
            sums[0] += f.wait_ms + b.wait_ms;
            sums[1] += f.compute_ms + b.compute_ms;
            sums[2] += f.agree_ms + b.agree_ms;
            sums[3] += t;
            skipped = f.steps_skipped;
        }
    }
    if (!any) {
        double all[4];
        MPI_Reduce(sums, all, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        qsort(total + o.warmup, (size_t)o.iters, sizeof(double), cmp);
        if (rank == 0) report(&o, ranks, total[o.warmup + o.iters / 2], all, skipped);
    }
    if (r.close) r.close(r.state);
    free(total);
    MPI_Finalize();
    return any ? 1 : 0;
}
