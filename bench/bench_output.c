/* The printed table, the JSON file and the CSV file of flashport-bench. The JSON layout is
 * described in bench/results/README.md; compare_torch.py writes the same one. */
#include <math.h>
#include <string.h>

#include "bench.h"
#include "bench_git_commit.h"
#include "cli.h"

#define BENCH_SCHEMA "flashport-bench/1"

const char *bench_status_name(bench_status s) {
    switch (s) {
    case BENCH_OK: return "ok";
    case BENCH_UNSUPPORTED: return "unsupported";
    default: return "failed";
    }
}

const char *bench_layout_name(flashport_layout l) {
    return l == FLASHPORT_LAYOUT_BNHD ? "bnhd" : "bhnd";
}

static const char *precision_name(flashport_precision p) {
    switch (p) {
    case FLASHPORT_PRECISION_TF32: return "tf32";
    case FLASHPORT_PRECISION_F16: return "f16";
    case FLASHPORT_PRECISION_FP8: return "fp8";
    default: return "native";
    }
}

static const char *kind_name(flashport_device_kind k) {
    switch (k) {
    case FLASHPORT_DEVICE_CPU: return "cpu";
    case FLASHPORT_DEVICE_GPU: return "gpu";
    default: return "accelerator";
    }
}

void bench_print_header(FILE *out, int ladder) {
    if (ladder)
        fprintf(out, "%-20s %10s %10s %12s %10s %9s  %s\n", "kernel", "time(ms)", "vs prev",
                "max abs err", "rel L2", "TFLOP/s", "what it does");
    else
        fprintf(out, "%-64s %-20s %10s %21s %9s %7s %6s %10s\n", "shape", "kernel", "median ms",
                "[min, max]", "TFLOP/s", "%ceil", "%bw", "max err");
}

void bench_print_record(FILE *out, const bench_record *r, int ladder) {
    const char *name = r->kernel[0]             ? r->kernel
                       : r->kernel_requested[0] ? r->kernel_requested
                                                : "(planner)";
    char shape[128];
    bench_shape_text(&r->shape, shape, sizeof shape);
    if (r->status != BENCH_OK) {
        if (ladder)
            fprintf(out, "%-20s %s: %s\n", name, bench_status_name(r->status), r->message);
        else
            fprintf(out, "%-64s %-20s %s: %s\n", shape, name, bench_status_name(r->status),
                    r->message);
        return;
    }
    char err[32] = "-", rel[32] = "-", prev[32] = "-", pct[16] = "-", bw[16] = "-";
    if (r->checked) {
        snprintf(err, sizeof err, "%.3g", r->max_abs_err);
        snprintf(rel, sizeof rel, "%.3g", r->rel_l2_err);
    }
    if (r->speedup_vs_previous > 0) snprintf(prev, sizeof prev, "%.2fx", r->speedup_vs_previous);
    if (r->pct_of_ceiling >= 0) snprintf(pct, sizeof pct, "%.1f", r->pct_of_ceiling);
    if (r->bandwidth_fraction >= 0) snprintf(bw, sizeof bw, "%.1f", 100.0 * r->bandwidth_fraction);
    if (ladder) {
        fprintf(out, "%-20s %10.3f %10s %12s %10s %9.3f  %s\n", name, r->ms_median, prev, err, rel,
                r->tflops, r->description);
    } else {
        char range[48];
        snprintf(range, sizeof range, "[%.3f, %.3f]", r->ms_min, r->ms_max);
        fprintf(out, "%-64s %-20s %10.3f %21s %9.3f %7s %6s %10s\n", shape, name, r->ms_median,
                range, r->tflops, pct, bw, err);
    }
}

static void json_str(cli_json *j, const char *key, const char *value) {
    cli_json_key(j, key);
    cli_json_string(j, value);
}

static void json_int(cli_json *j, const char *key, int64_t value) {
    cli_json_key(j, key);
    cli_json_int(j, value);
}

static void json_num(cli_json *j, const char *key, double value) {
    cli_json_key(j, key);
    cli_json_double(j, value);
}

/* O's dtype: the inputs' own, bf16 for FP8 inputs (flashport_attention_desc_init's default). */
static flashport_dtype out_dtype(const bench_shape *s) {
    return s->dtype == FLASHPORT_FP8_E4M3 || s->dtype == FLASHPORT_FP8_E5M2 ? FLASHPORT_BF16
                                                                            : s->dtype;
}

static void json_shape(cli_json *j, const bench_shape *s) {
    cli_json_key(j, "shape");
    cli_json_begin_object(j);
    json_int(j, "batch", s->batch);
    json_int(j, "heads_q", s->heads_q);
    json_int(j, "heads_kv", s->heads_kv);
    json_int(j, "seq_q", s->seq_q);
    json_int(j, "seq_kv", s->seq_kv);
    json_int(j, "head_dim", s->head_dim);
    json_str(j, "dtype", flashport_dtype_name(s->dtype));
    cli_json_key(j, "causal");
    cli_json_bool(j, s->causal);
    json_str(j, "layout", bench_layout_name(s->layout));
    json_str(j, "out_dtype", flashport_dtype_name(out_dtype(s)));
    json_int(j, "window_left", s->window ? s->window_left : -1);
    json_int(j, "window_right", s->window ? s->window_right : -1);
    json_num(j, "softcap", s->softcap);
    cli_json_key(j, "alibi");
    cli_json_bool(j, s->alibi);
    cli_json_key(j, "bias");
    cli_json_bool(j, s->bias != BENCH_BIAS_NONE);
    cli_json_key(j, "bias_per_query");
    cli_json_bool(j, s->bias == BENCH_BIAS_QUERIES);
    cli_json_key(j, "sinks");
    cli_json_bool(j, s->sinks);
    json_int(j, "page_size", s->page_size);
    cli_json_key(j, "pages_in_order");
    cli_json_bool(j, s->pages_in_order);
    cli_json_key(j, "varlen");
    cli_json_bool(j, s->varlen);
    cli_json_key(j, "kv_mixed");
    cli_json_bool(j, s->kv_mixed);
    cli_json_end_object(j);
}

static void json_record(cli_json *j, const bench_env *env, const bench_record *r) {
    char impl[128];
    const char *kernel = r->kernel[0] ? r->kernel : r->kernel_requested;
    snprintf(impl, sizeof impl, "flashport:%s%s%s", env->backend, kernel[0] ? ":" : "", kernel);
    cli_json_begin_object(j);
    json_shape(j, &r->shape);
    json_str(j, "implementation", impl);
    json_str(j, "backend", env->backend);
    json_str(j, "kernel_requested", r->kernel_requested);
    json_str(j, "kernel", r->kernel);
    json_str(j, "precision", precision_name(r->precision));
    json_str(j, "description", r->description);
    json_str(j, "status", bench_status_name(r->status));
    json_str(j, "message", r->message);
    json_num(j, "flops", r->flops);
    json_int(j, "tokens_q", r->tokens_q);
    json_int(j, "tokens_kv", r->tokens_kv);
    if (r->status == BENCH_OK) {
        json_int(j, "repeats", r->repeats);
        cli_json_key(j, "ms");
        cli_json_begin_object(j);
        json_num(j, "min", r->ms_min);
        json_num(j, "median", r->ms_median);
        json_num(j, "max", r->ms_max);
        cli_json_end_object(j);
        json_num(j, "tflops", r->tflops);
        json_str(j, "ceiling", r->ceiling_name);
        json_num(j, "ceiling_tflops", r->ceiling_tflops > 0 ? r->ceiling_tflops : NAN);
        json_num(j, "pct_of_ceiling", r->pct_of_ceiling >= 0 ? r->pct_of_ceiling : NAN);
        json_num(j, "bytes_moved", r->bytes_moved);
        json_num(j, "bandwidth_fraction", r->bandwidth_fraction >= 0 ? r->bandwidth_fraction : NAN);
        json_num(j, "read_fraction", r->read_fraction >= 0 ? r->read_fraction : NAN);
        json_int(j, "workspace_bytes", (int64_t)r->workspace_bytes);
        json_int(j, "input_bytes", (int64_t)r->input_bytes);
        json_int(j, "output_bytes", (int64_t)r->output_bytes);
        json_int(j, "input_sets", r->input_sets);
        json_int(j, "peak_rss_bytes", r->peak_rss_bytes);
        json_num(j, "max_abs_err", r->checked ? r->max_abs_err : NAN);
        json_num(j, "rel_l2_err", r->checked ? r->rel_l2_err : NAN);
        json_str(j, "checked_on", r->checked ? r->checked_on : "");
        json_num(j, "speedup_vs_previous",
                 r->speedup_vs_previous > 0 ? r->speedup_vs_previous : NAN);
    }
    cli_json_end_object(j);
}

int bench_write_json(const char *path, const bench_env *env, const bench_options *opt,
                     const bench_record *recs, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    cli_json j;
    cli_json_init(&j, f);
    cli_json_begin_object(&j);
    json_str(&j, "schema", BENCH_SCHEMA);
    json_str(&j, "tool", "flashport-bench");
    json_str(&j, "flashport_version", flashport_version_string());
    json_str(&j, "git_commit", FLASHPORT_GIT_COMMIT);
    json_str(&j, "date", env->date);
    json_str(&j, "preset", opt->preset ? opt->preset : "");
    json_str(&j, "backend", env->backend);

    cli_json_key(&j, "device");
    cli_json_begin_object(&j);
    json_str(&j, "name", env->device.name);
    json_str(&j, "vendor", env->device.vendor);
    json_str(&j, "kind", kind_name(env->device.kind));
    json_int(&j, "memory_bytes", (int64_t)env->device.memory_bytes);
    json_int(&j, "compute_units", env->device.compute_units);
    json_str(&j, "details", env->device.details);
    cli_json_end_object(&j);

    cli_json_key(&j, "settings");
    cli_json_begin_object(&j);
    json_int(&j, "warmup", opt->warmup);
    json_int(&j, "repeat", opt->repeat);
    json_int(&j, "queue", opt->queue);
    json_num(&j, "max_seconds", opt->max_seconds);
    json_int(&j, "threads", opt->threads);
    json_str(&j, "clock", opt->cpu_time ? "process_cpu" : "timer");
    /* "backward": flashport_attention_backward, FLOPs 2.5x the forward's */
    json_str(&j, "pass",
             opt->backward ? (opt->deterministic ? "backward_deterministic" : "backward")
                           : "forward");
    json_int(&j, "cpu_threads_for_ceiling", env->cpu_threads);
    json_int(&j, "seed", (int64_t)opt->seed);
    json_int(&j, "cache_bytes", (int64_t)env->cache_bytes);
    json_str(&j, "cache_source", env->cache_source);
    cli_json_key(&j, "check");
    cli_json_bool(&j, opt->check);
    cli_json_end_object(&j);

    cli_json_key(&j, "ceilings");
    if (env->have_peaks) {
        cli_json_begin_object(&j);
        json_num(&j, "f32_fma_tflops", env->peaks.f32_fma_tflops);
        json_num(&j, "f32_fma_tflops_per_core", env->peaks.f32_fma_tflops_per_core);
        json_num(&j, "f16_mma_tflops", env->peaks.f16_mma_tflops);
        json_num(&j, "bf16_mma_tflops", env->peaks.bf16_mma_tflops);
        json_num(&j, "tf32_mma_tflops", env->peaks.tf32_mma_tflops);
        json_num(&j, "copy_gbps", env->peaks.copy_gbps);
        json_str(&j, "method", env->peaks.method);
        json_num(&j, "read_gbps", env->read_gbps > 0 ? env->read_gbps : NAN);
        json_str(&j, "read_method", env->read_method);
        cli_json_end_object(&j);
    } else {
        cli_json_null(&j);
    }

    cli_json_key(&j, "results");
    cli_json_begin_array(&j);
    for (int i = 0; i < n; ++i) json_record(&j, env, &recs[i]);
    cli_json_end_array(&j);
    cli_json_end_object(&j);
    fputc('\n', f);
    return fclose(f) == 0 ? 0 : -1;
}

/* CSV fields never contain commas except the message, which is quoted. */
static void csv_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; ++s) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int bench_write_csv(const char *path, const bench_env *env, const bench_record *recs, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "backend,device,kernel,status,dtype,layout,batch,heads_q,heads_kv,seq_q,seq_kv,"
               "head_dim,causal,out_dtype,window_left,window_right,softcap,alibi,page_size,"
               "varlen,tokens_q,tokens_kv,flops,ms_min,ms_median,ms_max,tflops,ceiling,"
               "pct_of_ceiling,bytes_moved,bandwidth_fraction,max_abs_err,rel_l2_err,workspace_"
               "bytes,peak_rss_bytes,message\n");
    for (int i = 0; i < n; ++i) {
        const bench_record *r = &recs[i];
        const bench_shape *s = &r->shape;
        fprintf(f, "%s,", env->backend);
        csv_quoted(f, env->device.name);
        fprintf(f, ",%s,%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%d,",
                r->kernel[0] ? r->kernel : r->kernel_requested, bench_status_name(r->status),
                flashport_dtype_name(s->dtype), bench_layout_name(s->layout), (long long)s->batch,
                (long long)s->heads_q, (long long)s->heads_kv, (long long)s->seq_q,
                (long long)s->seq_kv, (long long)s->head_dim, s->causal);
        fprintf(f, "%s,%lld,%lld,%g,%d,%lld,%d,%lld,%lld,%.6g,", flashport_dtype_name(out_dtype(s)),
                (long long)(s->window ? s->window_left : -1),
                (long long)(s->window ? s->window_right : -1), s->softcap, s->alibi,
                (long long)s->page_size, s->varlen, (long long)r->tokens_q, (long long)r->tokens_kv,
                r->flops);
        if (r->status == BENCH_OK) {
            fprintf(f, "%.6g,%.6g,%.6g,%.6g,%s,", r->ms_min, r->ms_median, r->ms_max, r->tflops,
                    r->ceiling_name);
            if (r->pct_of_ceiling >= 0) fprintf(f, "%.4g", r->pct_of_ceiling);
            fprintf(f, ",%.6g,", r->bytes_moved);
            if (r->bandwidth_fraction >= 0) fprintf(f, "%.4g", r->bandwidth_fraction);
            fputc(',', f);
            if (r->checked)
                fprintf(f, "%.6g,%.6g", r->max_abs_err, r->rel_l2_err);
            else
                fputc(',', f);
            fprintf(f, ",%zu,%lld,", r->workspace_bytes, r->peak_rss_bytes);
        } else {
            fprintf(f, ",,,,,,,,,,,,");
        }
        csv_quoted(f, r->message);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -1;
}
