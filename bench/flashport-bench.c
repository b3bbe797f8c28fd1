/*
 * flashport-bench: times attention on one backend for a shape given by flags or a preset, on
 * device-resident random inputs; prints a table and writes JSON/CSV (bench/results/README.md).
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static const char *const preset_choices[] = {
    "seed",  "fa-grid", "ladder",       "decode", "cpu", "window",     "softcap", "alibi",
    "paged", "varlen",  "decode-paged", "serve",  "fp8", "cpu-decode", NULL};
/* In flashport_dtype order, so that a choice's index is the enum value. */
static const char *const dtype_choices[] = {"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", NULL};
static const char *const layout_choices[] = {"bhnd", "bnhd", NULL};

static const char *const epilogue =
    "Without --preset one shape runs: B=1 Hq=1 Hkv=Hq Nq=1024 Nkv=Nq d=128 f32, changed by the\n"
    "shape flags, or the shape --shape reads. --kernel all runs every variant of the backend; a\n"
    "variant that cannot take a shape prints \"unsupported: <reason>\" (not a failure), as does\n"
    "a backend none of whose variants implements a shape's feature (the reason names it).\n"
    "\n"
    "Timing: inputs are drawn from N(0,1) and uploaded once; when one input set fits in 4x the\n"
    "device's L2/LLC, several sets are rotated between calls. Each call is timed with\n"
    "flashport_timer_start/stop (device events where the backend has them); the table shows the\n"
    "median of --repeat calls after --warmup calls (with --cpu-time, by the process's CPU time\n"
    "instead: on a CPU backend with --threads 1 that is the call's compute time, however busy\n"
    "the machine is). With --queue N a timed sample is N calls queued back to back and the\n"
    "time per call is the sample over N: the device's time per call once the host keeps ahead\n"
    "of it, without the host's launch latency that a lone call shows (decode serving runs many\n"
    "calls back to back). % of ceiling compares with the rate measured by flashport_measure_peaks\n"
    "for the units the kernel uses (printed at the start).\n"
    "\n"
    "--backward times flashport_attention_backward instead (dQ, dK, dV from a random dO and the\n"
    "forward's O and LSE, computed once on one input set), FLOPs counted as 2.5x the forward's;\n"
    "--deterministic sets desc.deterministic. Its gradients are checked by the tests and the\n"
    "conformance suite, not by --check.\n"
    "\n"
    "Exit status: 0 every run succeeded (unsupported variants included), 1 a run or a check\n"
    "failed, 2 bad command line or unknown kernel, 3 backend unavailable.\n"
    "\n";

typedef struct bench_cli {
    int64_t b, hq, hkv, nq, nkv, d, warmup, repeat, queue, threads, sets, seed;
    double check_gflop, max_seconds;
    int preset, dtype, layout, causal, check, no_peaks, peaks_only, list_shapes, cpu_time;
    int backward, deterministic;
    const char *backend, *kernel, *json, *csv, *shape;
} bench_cli;

/* The shape flags start unset, so that --shape can refuse them rather than ignore them. */
#define UNSET INT64_MIN

static void print_help(const cli_option *opts, int n) {
    cli_print_help(stdout, "flashport-bench",
                   "[--preset NAME | shape flags] [--backend SPEC] [--kernel NAME|all] [options]",
                   "Times flashport attention on device-resident inputs.", opts, n, NULL);
    printf("\n");
    bench_preset_help(stdout);
    printf("\n");
    bench_shape_help(stdout);
    printf("\n%s", epilogue);
}

/* Parses the command line into opt; returns -1 to continue, else an exit code. */
static int parse_args(int argc, char **argv, bench_options *opt) {
    bench_cli c = {.b = UNSET,
                   .hq = UNSET,
                   .hkv = UNSET,
                   .nq = UNSET,
                   .nkv = UNSET,
                   .d = UNSET,
                   .warmup = 3,
                   .queue = 1,
                   .repeat = 10,
                   .seed = 1234,
                   .check_gflop = 8.0,
                   .max_seconds = 20.0,
                   .preset = -1,
                   .dtype = -1,
                   .layout = -1};
    const cli_option opts[] = {
        {"preset", CLI_CHOICE, &c.preset, "NAME", "named list of shapes (below)", preset_choices},
        {"backend", CLI_STRING, &c.backend, "SPEC",
         "backend[:device] list (default: FLASHPORT_BACKEND, then auto)", NULL},
        {"kernel", CLI_STRING, &c.kernel, "NAME|all",
         "force a variant, or every variant (default: the planner)", NULL},
        {"b", CLI_INT, &c.b, "N", "batch (default 1)", NULL},
        {"hq", CLI_INT, &c.hq, "N", "query heads (default 1)", NULL},
        {"hkv", CLI_INT, &c.hkv, "N", "key/value heads (default: --hq)", NULL},
        {"nq", CLI_INT, &c.nq, "N", "query length (default 1024)", NULL},
        {"nkv", CLI_INT, &c.nkv, "N", "key/value length (default: --nq)", NULL},
        {"d", CLI_INT, &c.d, "N", "head dimension (default 128)", NULL},
        {"dtype", CLI_CHOICE, &c.dtype, "T", "element type (default f32; presets: see below)",
         dtype_choices},
        {"causal", CLI_FLAG, &c.causal, NULL, "causal mask (bottom-right aligned)", NULL},
        {"layout", CLI_CHOICE, &c.layout, "L", "memory layout (default bhnd)", layout_choices},
        {"shape", CLI_STRING, &c.shape, "SPEC",
         "one shape in --list-shapes' notation, features included (below)", NULL},
        {"warmup", CLI_INT, &c.warmup, "N", "untimed calls first (default 3)", NULL},
        {"repeat", CLI_INT, &c.repeat, "N", "timed calls; the median is reported (default 10)",
         NULL},
        {"queue", CLI_INT, &c.queue, "N",
         "calls queued back to back per timed sample (default 1; see Timing)", NULL},
        {"max-seconds", CLI_DOUBLE, &c.max_seconds, "S",
         "fewer repeats for a variant whose calls would take longer (default 20; 0: no limit)",
         NULL},
        {"threads", CLI_INT, &c.threads, "N",
         "sets FLASHPORT_NUM_THREADS (cpu_simd) before the context is created", NULL},
        {"cpu-time", CLI_FLAG, &c.cpu_time, NULL,
         "time calls by the process's CPU time (CPU devices; see below)", NULL},
        {"backward", CLI_FLAG, &c.backward, NULL,
         "time the backward pass (dQ, dK, dV) instead of the forward", NULL},
        {"deterministic", CLI_FLAG, &c.deterministic, NULL,
         "--backward: deterministic mode (desc.deterministic = 1)", NULL},
        {"check", CLI_FLAG, &c.check, NULL,
         "compare each output with the reference backend (always on for ladder)", NULL},
        {"check-gflop", CLI_DOUBLE, &c.check_gflop, "G",
         "reference work per checked shape; larger outputs are checked on a slice (default 8)",
         NULL},
        {"sets", CLI_INT, &c.sets, "N", "input sets to rotate (default: automatic)", NULL},
        {"seed", CLI_INT, &c.seed, "N", "random seed of the inputs (default 1234)", NULL},
        {"no-peaks", CLI_FLAG, &c.no_peaks, NULL,
         "skip the ceiling micro-benchmarks (no % of ceiling)", NULL},
        {"peaks", CLI_FLAG, &c.peaks_only, NULL, "print the measured ceilings and exit", NULL},
        {"list-shapes", CLI_FLAG, &c.list_shapes, NULL, "print the shapes of the run and exit",
         NULL},
        {"json", CLI_STRING, &c.json, "FILE", "write the results as JSON", NULL},
        {"csv", CLI_STRING, &c.csv, "FILE", "write the results as CSV", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_result r = cli_parse("flashport-bench", argc, argv, opts, n_opts);
    if (r == CLI_HELP) {
        print_help(opts, n_opts);
        return BENCH_EXIT_OK;
    }
    if (r == CLI_ERROR) return BENCH_EXIT_USAGE;
    const int shape_flags = c.b != UNSET || c.hq != UNSET || c.hkv != UNSET || c.nq != UNSET ||
                            c.nkv != UNSET || c.d != UNSET || c.causal;
    if (c.shape && (shape_flags || c.preset >= 0)) {
        fprintf(stderr, "flashport-bench: --shape gives the whole shape; drop --preset and the "
                        "shape flags (--b, --hq, --hkv, --nq, --nkv, --d, --causal)\n");
        return BENCH_EXIT_USAGE;
    }
    if (c.b == UNSET) c.b = 1;
    if (c.hq == UNSET) c.hq = 1;
    if (c.hkv == UNSET) c.hkv = c.hq;
    if (c.nq == UNSET) c.nq = 1024;
    if (c.nkv == UNSET) c.nkv = c.nq;
    if (c.d == UNSET) c.d = 128;
    if (c.b < 1 || c.hq < 1 || c.hkv < 1 || c.nq < 1 || c.nkv < 1 || c.d < 1) {
        fprintf(stderr, "flashport-bench: sizes must be at least 1\n");
        return BENCH_EXIT_USAGE;
    }
    if (c.hq % c.hkv != 0) {
        fprintf(stderr, "flashport-bench: --hq %lld is not a multiple of --hkv %lld\n",
                (long long)c.hq, (long long)c.hkv);
        return BENCH_EXIT_USAGE;
    }
    if (c.warmup < 0 || c.warmup > 1000000 || c.repeat < 1 || c.repeat > 1000000 || c.queue < 1 ||
        c.queue > 10000 || c.threads < 0 || c.threads > 65536 || c.sets < 0 || c.sets > 4096 ||
        c.check_gflop <= 0 || c.max_seconds < 0) {
        fprintf(stderr, "flashport-bench: need 0 <= --warmup <= 1e6, 1 <= --repeat <= 1e6, "
                        "1 <= --queue <= 1e4, "
                        "0 <= --threads <= 65536, 0 <= --sets <= 4096, --check-gflop > 0, "
                        "--max-seconds >= 0\n");
        return BENCH_EXIT_USAGE;
    }
    const char *preset = c.preset >= 0 ? preset_choices[c.preset] : NULL;
    int is_ladder = preset && strcmp(preset, "ladder") == 0;
    if (is_ladder && c.kernel) {
        fprintf(stderr,
                "flashport-bench: --preset ladder runs its own kernel list; drop --kernel\n");
        return BENCH_EXIT_USAGE;
    }
    if (c.backward && (c.check || is_ladder)) {
        fprintf(stderr, "flashport-bench: --check compares O; drop it (and the ladder) with "
                        "--backward\n");
        return BENCH_EXIT_USAGE;
    }
    if (c.deterministic && !c.backward) {
        fprintf(stderr, "flashport-bench: --deterministic goes with --backward\n");
        return BENCH_EXIT_USAGE;
    }
    memset(opt, 0, sizeof *opt);
    opt->backend = c.backend;
    opt->backward = c.backward;
    opt->deterministic = c.deterministic;
    opt->kernel = c.kernel;
    opt->preset = preset;
    bench_shape s = {.batch = c.b,
                     .heads_q = c.hq,
                     .heads_kv = c.hkv,
                     .seq_q = c.nq,
                     .seq_kv = c.nkv,
                     .head_dim = c.d,
                     .dtype = FLASHPORT_F32,
                     .causal = c.causal,
                     .layout = FLASHPORT_LAYOUT_BHND};
    char why[256];
    if (c.shape && !bench_shape_parse(c.shape, &s, why, sizeof why)) {
        fprintf(stderr, "flashport-bench: --shape '%s': %s\n", c.shape, why);
        return BENCH_EXIT_USAGE;
    }
    /* --dtype and --layout override a preset's shapes and --shape's, as they set the flags'. */
    if (c.dtype >= 0) s.dtype = (flashport_dtype)c.dtype;
    if (c.layout >= 0) s.layout = c.layout == 1 ? FLASHPORT_LAYOUT_BNHD : FLASHPORT_LAYOUT_BHND;
    opt->shape = s;
    opt->dtype_given = c.dtype >= 0;
    opt->layout_given = c.layout >= 0;
    opt->warmup = (int)c.warmup;
    opt->repeat = (int)c.repeat;
    opt->queue = (int)c.queue;
    opt->max_seconds = c.max_seconds;
    opt->threads = (int)c.threads;
    opt->cpu_time = c.cpu_time;
    opt->check = c.check || is_ladder;
    opt->check_flops = c.check_gflop * 1e9;
    opt->measure_peaks = (!c.no_peaks || c.peaks_only) && !c.list_shapes;
    opt->input_sets = (int)c.sets;
    opt->seed = (uint64_t)c.seed;
    opt->json_path = c.json;
    opt->csv_path = c.csv;
    return c.peaks_only ? -2 : c.list_shapes ? -3 : -1;
}

/* Shapes of the run: the preset's (with --dtype and --layout applied) or the flags' one. */
static bench_shape *make_shapes(const bench_options *opt, const bench_env *env, int *n) {
    if (!opt->preset) {
        bench_shape *s = malloc(sizeof *s);
        if (s) *s = opt->shape;
        *n = 1;
        return s;
    }
    flashport_dtype dflt =
        env->device.kind == FLASHPORT_DEVICE_CPU ? FLASHPORT_F32 : FLASHPORT_BF16;
    *n = bench_preset_shapes(opt->preset, dflt, NULL, 0);
    bench_shape *s = calloc((size_t)*n, sizeof *s);
    if (!s) return NULL;
    bench_preset_shapes(opt->preset, dflt, s, *n);
    for (int i = 0; i < *n; ++i) {
        if (opt->dtype_given) s[i].dtype = opt->shape.dtype;
        if (opt->layout_given) s[i].layout = opt->shape.layout;
    }
    return s;
}

static int backend_has_kernel(const char *backend, const char *name) {
    int n = flashport_kernel_count(backend);
    for (int i = 0; i < n; ++i) {
        flashport_kernel_info ki;
        if (flashport_kernel_get_info(backend, i, &ki) == FLASHPORT_OK &&
            strcmp(ki.name, name) == 0)
            return 1;
    }
    return 0;
}

/* Kernel requests of the run (NULL entries: the planner). Names point into static storage or
 * argv, except for "all", whose names are copied into *owned. */
static int make_kernels(const bench_options *opt, const char *backend, const char ***out,
                        flashport_kernel_info **owned) {
    *owned = NULL;
    if (opt->preset && strcmp(opt->preset, "ladder") == 0) {
        *out = (const char **)bench_ladder_kernels;
        return bench_ladder_kernel_count;
    }
    if (opt->kernel && strcmp(opt->kernel, "all") == 0) {
        int n = flashport_kernel_count(backend);
        if (n <= 0) return 0;
        flashport_kernel_info *ki = calloc((size_t)n, sizeof *ki);
        const char **names = calloc((size_t)n, sizeof *names);
        if (!ki || !names) {
            free(ki);
            free(names);
            return -1;
        }
        for (int i = 0; i < n; ++i) {
            if (flashport_kernel_get_info(backend, i, &ki[i]) != FLASHPORT_OK) ki[i].name[0] = 0;
            names[i] = ki[i].name;
        }
        *owned = ki;
        *out = names;
        return n;
    }
    static const char *single[1];
    single[0] = opt->kernel;
    *out = single;
    return 1;
}

/* p: the shape's problem, or NULL when it could not be made (then FLOPs and tokens are 0). */
static void set_unsupported(bench_record *r, const bench_shape *s, const bench_problem *p,
                            const char *kernel, const char *why) {
    memset(r, 0, sizeof *r);
    r->shape = *s;
    if (p) {
        r->flops = p->flops;
        r->tokens_q = p->tokens_q;
        r->tokens_kv = p->tokens_kv;
    }
    r->status = BENCH_UNSUPPORTED;
    r->pct_of_ceiling = -1;
    snprintf(r->kernel_requested, sizeof r->kernel_requested, "%s", kernel);
    snprintf(r->message, sizeof r->message, "%s", why);
}

static void set_failed(bench_record *r, const bench_shape *s, const bench_problem *p,
                       const char *kernel, const char *why) {
    set_unsupported(r, s, p, kernel ? kernel : "", why);
    r->status = BENCH_FAILED;
}

/* Speed-up of each ladder step over the previous variant that ran, per shape. */
static void ladder_speedups(bench_record *recs, int n) {
    const bench_record *prev = NULL;
    for (int i = 0; i < n; ++i) {
        if (recs[i].status != BENCH_OK) continue;
        if (prev && memcmp(&prev->shape, &recs[i].shape, sizeof prev->shape) == 0 &&
            recs[i].ms_median > 0)
            recs[i].speedup_vs_previous = prev->ms_median / recs[i].ms_median;
        prev = &recs[i];
    }
}

/* State of one run across its shapes. */
typedef struct bench_run {
    flashport_context *ctx, *ref; /* ref: the reference backend for checks, or NULL */
    const bench_env *env;
    const bench_options *opt;
    const char **kernels;
    int n_kernels, runnable, ladder;
    bench_record *recs;
    int n_recs, total, failed;
} bench_run;

/* Every kernel on one shape: inputs uploaded once, the reference output computed once. */
static void run_shape(bench_run *run, const bench_shape *s) {
    const bench_options *opt = run->opt;
    char text[128], why[768] = "";
    bench_shape_text(s, text, sizeof text);
    if (run->ladder) {
        fprintf(stdout, "\n%s\n", text);
        bench_print_header(stdout, 1);
    }
    bench_record *first = run->recs + run->n_recs;
    bench_problem p;
    const int have_problem = bench_problem_create(s, opt->seed, &p, why, sizeof why);
    if (!have_problem) {
        for (int ki = 0; ki < run->n_kernels; ++ki) {
            bench_record *r = &run->recs[run->n_recs++];
            set_failed(r, s, NULL, run->kernels[ki], why);
            if (!run->ladder) bench_print_record(stdout, r, 0);
        }
        run->failed = 1;
    } else if (run->runnable == 0) { /* only the ladder's fixed list can miss every kernel */
        for (int ki = 0; ki < run->n_kernels; ++ki)
            set_unsupported(&run->recs[run->n_recs++], s, &p, run->kernels[ki],
                            "not a kernel of this backend");
    } else {
        size_t set_bytes = flashport_dtype_size(s->dtype) * (size_t)(p.q_elems + 2 * p.kv_elems);
        int sets = opt->backward         ? 1
                   : opt->input_sets > 0 ? opt->input_sets
                                         : bench_choose_sets(set_bytes, run->env->cache_bytes);
        bench_inputs in;
        if (bench_inputs_create(run->ctx, &p, sets, opt->seed, &in, why, sizeof why) !=
                FLASHPORT_OK ||
            (opt->backward && bench_inputs_add_backward(run->ctx, &p, opt->seed, &in, why,
                                                        sizeof why) != FLASHPORT_OK)) {
            for (int ki = 0; ki < run->n_kernels; ++ki) {
                bench_record *r = &run->recs[run->n_recs++];
                set_failed(r, s, &p, run->kernels[ki], why);
                if (!run->ladder) bench_print_record(stdout, r, 0);
            }
            run->failed = 1;
        } else {
            void *ref_o = NULL;
            bench_region region;
            memset(&region, 0, sizeof region);
            if (run->ref) {
                bench_choose_region(&p, opt->check_flops, &region);
                fprintf(stderr, "flashport-bench: reference output (%s)...\n", region.text);
                if (bench_reference_output(run->ref, &p, &in, &region, &ref_o, why, sizeof why) !=
                    FLASHPORT_OK) {
                    fprintf(stderr, "flashport-bench: check not possible: %s\n", why);
                    run->failed = 1;
                }
            }
            for (int ki = 0; ki < run->n_kernels; ++ki) {
                const char *k = run->kernels[ki];
                bench_record *r = &run->recs[run->n_recs++];
                fprintf(stderr, "[%d/%d] %s %s, %d input set%s\n", run->n_recs, run->total, text,
                        k ? k : "(planner)", sets, sets == 1 ? "" : "s");
                if (k && run->ladder && !backend_has_kernel(run->env->backend, k))
                    set_unsupported(r, s, &p, k, "not a kernel of this backend");
                else if (bench_measure(run->ctx, run->env, opt, s, &p, &in, k, ref_o, &region, r) ==
                         BENCH_FAILED)
                    run->failed = 1;
                if (!run->ladder) bench_print_record(stdout, r, 0);
            }
            free(ref_o);
            bench_inputs_destroy(&in);
        }
    }
    if (have_problem) bench_problem_destroy(&p);
    if (run->ladder) {
        ladder_speedups(first, run->n_kernels);
        for (int ki = 0; ki < run->n_kernels; ++ki) bench_print_record(stdout, &first[ki], 1);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    bench_options opt;
    int rc = parse_args(argc, argv, &opt);
    if (rc >= 0) return rc;
    int peaks_only = rc == -2, list_only = rc == -3;

    if (opt.threads > 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", opt.threads);
        setenv("FLASHPORT_NUM_THREADS", buf, 1);
    }
    flashport_context *ctx = NULL;
    flashport_status st = flashport_context_create(opt.backend, &ctx);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "flashport-bench: %s\n", flashport_last_error());
        return st == FLASHPORT_ERROR_UNKNOWN_BACKEND ? BENCH_EXIT_USAGE : BENCH_EXIT_UNAVAILABLE;
    }
    bench_env env;
    bench_env_init(ctx, &opt, &env);
    if (opt.cpu_time && env.device.kind != FLASHPORT_DEVICE_CPU) {
        fprintf(stderr,
                "flashport-bench: --cpu-time times calls that run on the calling "
                "process's CPU; backend %s runs them on a device\n",
                env.backend);
        flashport_context_destroy(ctx);
        return BENCH_EXIT_USAGE;
    }
    if (list_only) {
        int n = 0;
        bench_shape *shapes = make_shapes(&opt, &env, &n);
        for (int i = 0; shapes && i < n; ++i) {
            char text[128];
            bench_shape_text(&shapes[i], text, sizeof text);
            printf("%s\n", text);
        }
        free(shapes);
        flashport_context_destroy(ctx);
        return shapes ? BENCH_EXIT_OK : BENCH_EXIT_RUN_FAILED;
    }
    bench_print_env(stdout, &env);
    if (peaks_only) {
        flashport_context_destroy(ctx);
        return env.have_peaks ? BENCH_EXIT_OK : BENCH_EXIT_RUN_FAILED;
    }
    if (opt.kernel && strcmp(opt.kernel, "all") != 0 &&
        !backend_has_kernel(env.backend, opt.kernel)) {
        fprintf(stderr,
                "flashport-bench: backend %s has no kernel '%s' (flashport-info lists them)\n",
                env.backend, opt.kernel);
        flashport_context_destroy(ctx);
        return BENCH_EXIT_USAGE;
    }

    /* Fail now, not after an hour of measurements, when an output file cannot be written. */
    const char *outputs[2] = {opt.json_path, opt.csv_path};
    for (int i = 0; i < 2; ++i) {
        FILE *f = outputs[i] ? fopen(outputs[i], "w") : NULL;
        if (outputs[i] && !f) {
            fprintf(stderr, "flashport-bench: cannot write %s\n", outputs[i]);
            flashport_context_destroy(ctx);
            return BENCH_EXIT_USAGE;
        }
        if (f) fclose(f);
    }

    int n_shapes = 0, n_kernels;
    const char **kernels = NULL;
    flashport_kernel_info *owned = NULL;
    bench_shape *shapes = make_shapes(&opt, &env, &n_shapes);
    n_kernels = make_kernels(&opt, env.backend, &kernels, &owned);
    bench_record *recs =
        shapes && n_kernels > 0 ? calloc((size_t)n_shapes * (size_t)n_kernels, sizeof *recs) : NULL;
    if (!recs) {
        fprintf(stderr, "flashport-bench: %s\n",
                n_kernels == 0 ? "the backend lists no kernels" : "host allocation failed");
        free(shapes);
        if (owned) free((void *)kernels);
        free(owned);
        flashport_context_destroy(ctx);
        return BENCH_EXIT_RUN_FAILED;
    }

    bench_run run = {ctx, NULL, &env, &opt, kernels, n_kernels, 0, 0, recs, 0, n_shapes * n_kernels,
                     0};
    run.ladder = opt.preset && strcmp(opt.preset, "ladder") == 0;
    for (int ki = 0; ki < n_kernels; ++ki)
        run.runnable += !kernels[ki] || backend_has_kernel(env.backend, kernels[ki]);
    if (opt.check && run.runnable &&
        flashport_context_create("reference", &run.ref) != FLASHPORT_OK) {
        fprintf(stderr, "flashport-bench: no checks: reference backend: %s\n",
                flashport_last_error());
        run.ref = NULL;
        run.failed = 1;
    }
    if (!run.ladder) bench_print_header(stdout, 0);
    for (int si = 0; si < n_shapes; ++si) run_shape(&run, &shapes[si]);
    int failed = run.failed, n_recs = run.n_recs;

    if (opt.json_path && bench_write_json(opt.json_path, &env, &opt, recs, n_recs) != 0) {
        fprintf(stderr, "flashport-bench: cannot write %s\n", opt.json_path);
        failed = 1;
    }
    if (opt.csv_path && bench_write_csv(opt.csv_path, &env, recs, n_recs) != 0) {
        fprintf(stderr, "flashport-bench: cannot write %s\n", opt.csv_path);
        failed = 1;
    }
    free(recs);
    free(shapes);
    if (owned) free((void *)kernels);
    free(owned);
    if (run.ref) flashport_context_destroy(run.ref);
    flashport_context_destroy(ctx);
    return failed ? BENCH_EXIT_RUN_FAILED : BENCH_EXIT_OK;
}
