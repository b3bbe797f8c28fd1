/* Times one (shape, kernel) pair on device-resident inputs and fills its record. */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long long peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (long long)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

/* The planned variant's precision class and description, from the backend's kernel list. */
static void describe_kernel(const char *backend, bench_record *r) {
    int n = flashport_kernel_count(backend);
    for (int i = 0; i < n; ++i) {
        flashport_kernel_info ki;
        if (flashport_kernel_get_info(backend, i, &ki) == FLASHPORT_OK &&
            strcmp(ki.name, r->kernel) == 0) {
            r->precision = ki.precision;
            snprintf(r->description, sizeof r->description, "%s", ki.description);
            return;
        }
    }
}

/* The ceiling a run is measured against: the rate of the units its arithmetic runs on. CPU
 * backends compute every dtype with f32 FMAs, on as many cores as they have threads. */
static void choose_ceiling(const bench_env *env, flashport_dtype dtype,
                           flashport_precision precision, bench_record *r) {
    const flashport_peaks *pk = &env->peaks;
    r->ceiling_name[0] = 0;
    r->ceiling_tflops = 0;
    if (!env->have_peaks) return;
    if (env->device.kind == FLASHPORT_DEVICE_CPU) { /* FP8 included: decoded to f32 */
        double core =
            pk->f32_fma_tflops_per_core > 0 ? pk->f32_fma_tflops_per_core : pk->f32_fma_tflops;
        r->ceiling_tflops = core * env->cpu_threads;
        snprintf(r->ceiling_name, sizeof r->ceiling_name, "f32_fma_per_core x %d threads",
                 env->cpu_threads);
        return;
    }
    if (dtype == FLASHPORT_F16 ||
        (dtype == FLASHPORT_F32 && precision == FLASHPORT_PRECISION_F16)) {
        r->ceiling_tflops = pk->f16_mma_tflops;
        snprintf(r->ceiling_name, sizeof r->ceiling_name, "f16_mma");
    } else if (dtype == FLASHPORT_FP8_E4M3 || dtype == FLASHPORT_FP8_E5M2) {
        return; /* no FP8 rate is measured, and a bf16 one would flatter or belittle */
    } else if (dtype == FLASHPORT_BF16) {
        r->ceiling_tflops = pk->bf16_mma_tflops;
        snprintf(r->ceiling_name, sizeof r->ceiling_name, "bf16_mma");
    } else if (precision == FLASHPORT_PRECISION_TF32) {
        r->ceiling_tflops = pk->tf32_mma_tflops;
        snprintf(r->ceiling_name, sizeof r->ceiling_name, "tf32_mma");
    } else {
        r->ceiling_tflops = pk->f32_fma_tflops;
        snprintf(r->ceiling_name, sizeof r->ceiling_name, "f32_fma");
    }
}

static double process_cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static bench_status fail(bench_record *rec, const char *what) {
    rec->status = BENCH_FAILED;
    snprintf(rec->message, sizeof rec->message, "%s: %s", what, flashport_last_error());
    return rec->status;
}

/* One call: the forward pass, or the backward when the inputs carry its buffers. */
static flashport_status run_set(flashport_context *ctx, const flashport_attention_desc *d,
                                const bench_inputs *in, int set) {
    flashport_attention_args args;
    bench_inputs_args(in, set, &args);
    return in->d_o ? flashport_attention_backward(ctx, d, &args)
                   : flashport_attention_run(ctx, d, &args);
}

bench_status bench_measure(flashport_context *ctx, const bench_env *env, const bench_options *opt,
                           const bench_shape *shape, const bench_problem *bp,
                           const bench_inputs *in, const char *kernel, const void *ref_o,
                           const bench_region *region, bench_record *rec) {
    memset(rec, 0, sizeof *rec);
    rec->shape = *shape;
    rec->pct_of_ceiling = -1;
    rec->bandwidth_fraction = -1;
    rec->read_fraction = -1;
    rec->bytes_moved = bp->bytes;
    rec->input_sets = in->sets;
    rec->input_bytes = in->q_bytes + in->k_bytes + in->v_bytes;
    rec->output_bytes = in->o_bytes;
    rec->tokens_q = bp->tokens_q;
    rec->tokens_kv = bp->tokens_kv;
    if (kernel) snprintf(rec->kernel_requested, sizeof rec->kernel_requested, "%s", kernel);

    flashport_attention_desc d = bp->desc;
    d.kernel = kernel;
    d.deterministic = opt->backward && opt->deterministic;
    const flashport_attention_desc *p = &d;
    /* The backward pass does five products of the forward's two sizes, minus one it shares:
     * FLOPs counted as 2.5 times the forward's, as the FlashAttention papers count them. */
    rec->flops = opt->backward ? 2.5 * bp->flops : bp->flops;

    flashport_plan_info plan;
    memset(&plan, 0, sizeof plan);
    flashport_status st = opt->backward ? flashport_attention_backward_plan(ctx, p, &plan)
                                        : flashport_attention_plan(ctx, p, &plan);
    if (st == FLASHPORT_ERROR_UNSUPPORTED) {
        rec->status = BENCH_UNSUPPORTED;
        snprintf(rec->message, sizeof rec->message, "%s",
                 plan.reason[0] ? plan.reason : flashport_last_error());
        return rec->status;
    }
    if (st != FLASHPORT_OK) return fail(rec, "plan");
    snprintf(rec->kernel, sizeof rec->kernel, "%s", plan.kernel);
    snprintf(rec->message, sizeof rec->message, "%s", plan.reason);
    rec->workspace_bytes = plan.workspace_bytes;
    describe_kernel(env->backend, rec);

    /* The first warm-up call is timed: slow variants (the ladder's first rungs on large shapes)
     * get fewer calls so that a record stays within --max-seconds. */
    int repeat = opt->repeat, warmup = opt->warmup;
    for (int i = 0; i < warmup; ++i) {
        flashport_timer *t = NULL;
        double first_ms = 0;
        if (i == 0 && flashport_timer_start(ctx, &t) != FLASHPORT_OK)
            return fail(rec, "timer start");
        st = run_set(ctx, p, in, i % in->sets);
        flashport_status st_stop = t ? flashport_timer_stop(t, &first_ms) : FLASHPORT_OK;
        if (st != FLASHPORT_OK) return fail(rec, "warm-up");
        if (st_stop != FLASHPORT_OK) return fail(rec, "timer stop");
        if (i == 0 && opt->max_seconds > 0 && first_ms > 0) {
            double budget_ms = opt->max_seconds * 1e3;
            double fit = budget_ms / first_ms;
            if (fit < repeat) repeat = fit < 1 ? 1 : (int)fit;
            if (first_ms * warmup > budget_ms / 2) warmup = 1;
        }
    }
    if (flashport_synchronize(ctx) != FLASHPORT_OK) return fail(rec, "synchronize");
    rec->repeats = repeat;

    double *ms = malloc((size_t)repeat * sizeof *ms);
    if (!ms) {
        rec->status = BENCH_FAILED;
        snprintf(rec->message, sizeof rec->message, "host allocation failed");
        return rec->status;
    }
    for (int i = 0; i < repeat; ++i) {
        if (opt->cpu_time) {
            /* A CPU backend's call finishes before it returns; CPU time leaves out whatever
             * else the machine runs meanwhile. */
            const double t0 = process_cpu_ms();
            st = run_set(ctx, p, in, (warmup + i) % in->sets);
            ms[i] = process_cpu_ms() - t0;
            if (st != FLASHPORT_OK) {
                free(ms);
                return fail(rec, "attention");
            }
            continue;
        }
        flashport_timer *t = NULL;
        if (flashport_timer_start(ctx, &t) != FLASHPORT_OK) {
            free(ms);
            return fail(rec, "timer start");
        }
        st = FLASHPORT_OK;
        for (int q = 0; q < opt->queue && st == FLASHPORT_OK; ++q)
            st = run_set(ctx, p, in, (warmup + i * opt->queue + q) % in->sets);
        /* The timer is stopped even after a failed call so that it is freed. */
        flashport_status st_stop = flashport_timer_stop(t, &ms[i]);
        ms[i] /= opt->queue;
        if (st != FLASHPORT_OK || st_stop != FLASHPORT_OK) {
            free(ms);
            return fail(rec, st != FLASHPORT_OK ? "attention" : "timer stop");
        }
    }
    qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
    rec->ms_min = ms[0];
    rec->ms_max = ms[repeat - 1];
    rec->ms_median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
    free(ms);
    rec->tflops = rec->ms_median > 0 ? rec->flops / (rec->ms_median * 1e-3) / 1e12 : 0;
    choose_ceiling(env, shape->dtype, rec->precision, rec);
    if (rec->ceiling_tflops > 0) rec->pct_of_ceiling = 100.0 * rec->tflops / rec->ceiling_tflops;
    if (env->have_peaks && env->peaks.copy_gbps > 0 && rec->ms_median > 0)
        rec->bandwidth_fraction =
            rec->bytes_moved / (rec->ms_median * 1e-3) / (env->peaks.copy_gbps * 1e9);
    if (env->read_gbps > 0 && rec->ms_median > 0)
        rec->read_fraction = rec->bytes_moved / (rec->ms_median * 1e-3) / (env->read_gbps * 1e9);

    if (ref_o) {
        void *out = malloc(in->o_bytes);
        if (!out) {
            rec->status = BENCH_FAILED;
            snprintf(rec->message, sizeof rec->message, "host allocation for the check failed");
            return rec->status;
        }
        if (run_set(ctx, p, in, 0) != FLASHPORT_OK || flashport_synchronize(ctx) != FLASHPORT_OK ||
            flashport_buffer_download(in->o, 0, out, in->o_bytes) != FLASHPORT_OK) {
            free(out);
            return fail(rec, "check run");
        }
        bench_compare(p, region, out, ref_o, &rec->max_abs_err, &rec->rel_l2_err);
        rec->checked = 1;
        snprintf(rec->checked_on, sizeof rec->checked_on, "%s", region->text);
        free(out);
    }
    rec->peak_rss_bytes = peak_rss_bytes();
    rec->status = BENCH_OK;
    return rec->status;
}
